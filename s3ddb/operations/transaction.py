"""Transactions: what a writer intends to change, relative to the version it read, and
their protobuf codec.

A transaction is stored, framed, as ``_transactions/<read_version>-<uuid>.txn``
before its manifest is committed, so that concurrent writers can check what it did.
Reading one decodes its operation through :data:`DECODERS` (derived from
:data:`s3ddb.operations.kinds.OPERATIONS`), one entry per kind s3ddb builds; the other
kinds are read as :class:`OpaqueOperation`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from s3ddb.errors import (
    InvalidInputError,
    ManifestCorruptError,
    PathOutsideDatasetError,
    StoredMetadataError,
)
from s3ddb.format import layout
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.framing import frame, unframe
from s3ddb.format.limits import MAX_VERSION, check_range
from s3ddb.format.naming import unique_hex
from s3ddb.io.paths import check_name
from s3ddb.operations.kinds import BY_KIND, BY_PB_FIELD, COMMITTABLE
from s3ddb.operations.operation import OpaqueOperation, Operation, operation_kind

__all__ = ["DECODERS", "TRANSACTION_MAGIC", "Transaction", "operation_from_pb"]

TRANSACTION_MAGIC = b"S3DDBTX1"

#: How each operation s3ddb builds is read back, by its field of the transaction
#: message's ``operation`` oneof (the whole message is passed: Delete and Update also
#: read the affected rows stored beside their body). Derived from
#: :data:`s3ddb.operations.kinds.OPERATIONS`: one entry per committable kind.
DECODERS: dict[str, Callable[[tpb.Transaction], Operation]] = {
    op.pb_field: op.from_transaction_pb for op in COMMITTABLE
}


def operation_from_pb(message: tpb.Transaction) -> Operation:
    """The operation of a decoded transaction message.

    Raises:
        ManifestCorruptError: the message has no operation.
        StoredMetadataError, PathOutsideDatasetError, InvalidInputError: as the
            operation's own validation.
    """
    which = message.WhichOneof("operation")
    if which is None:
        raise ManifestCorruptError("transaction has no operation")
    decoder = DECODERS.get(which)
    if decoder is not None:
        return decoder(message)
    return OpaqueOperation(BY_PB_FIELD[which].kind, getattr(message, which))


@dataclass(frozen=True)
class Transaction:
    """One writer's intended change.

    Attributes:
        read_version: the version the change was computed from (0: no dataset yet).
        operation: what changes.
        uuid: unique id (names the transaction file).
        properties: free-form strings (writer id, job name...).
    """

    read_version: int
    operation: Operation
    uuid: str = field(default_factory=unique_hex)
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.read_version < 0:
            raise InvalidInputError(f"read_version must be >= 0, got {self.read_version}")
        if not isinstance(self.operation, Operation):
            raise InvalidInputError(f"not an operation: {self.operation!r}")
        check_name(self.file_name, "transaction file")

    @property
    def file_name(self) -> str:
        return layout.transaction_file_name(self.read_version, self.uuid)

    @property
    def kind(self) -> str:
        return operation_kind(self.operation)

    def to_pb(self) -> tpb.Transaction:
        message = tpb.Transaction(
            read_version=self.read_version, uuid=self.uuid, properties=self.properties
        )
        if isinstance(self.operation, OpaqueOperation):
            field_name = BY_KIND[self.operation.kind_name].pb_field
        else:
            field_name = self.operation.pb_field
        getattr(message, field_name).CopyFrom(self.operation.to_pb())
        self.operation.add_transaction_fields(message)
        return message

    def to_bytes(self) -> bytes:
        return frame(self.to_pb().SerializeToString(deterministic=True), TRANSACTION_MAGIC)

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Transaction:
        """Parse a stored transaction file.

        Raises:
            ManifestCorruptError: the file is truncated, corrupt or undecodable.
            StoredMetadataError: a version, id, count or schema in it is out of range
                or inconsistent (a subclass of ManifestCorruptError).
            PathOutsideDatasetError: a path in it would leave the dataset.
        """
        payload = unframe(data, TRANSACTION_MAGIC, f"transaction {where}")
        message = tpb.Transaction()
        try:
            message.ParseFromString(payload)
            check_range(message.read_version, 0, MAX_VERSION, "read_version", "transaction")
            return cls(
                read_version=message.read_version,
                operation=operation_from_pb(message),
                uuid=message.uuid,
                properties=dict(message.properties),
            )
        except PathOutsideDatasetError as exc:
            raise PathOutsideDatasetError(f"{exc} [transaction {where}]") from None
        except StoredMetadataError as exc:
            raise StoredMetadataError(f"transaction {where}: {exc}") from None
        except ManifestCorruptError as exc:
            raise ManifestCorruptError(f"transaction {where}: {exc}") from None
        except (DecodeError, ValueError, KeyError, IndexError, TypeError, OverflowError) as exc:
            raise ManifestCorruptError(f"transaction {where}: cannot decode: {exc}") from exc
