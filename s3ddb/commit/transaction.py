"""Transactions: what a writer intends to change, relative to the version it read.

Operations are frozen dataclasses that validate themselves in ``__post_init__``
(Lance style) and convert to and from the protobuf messages of
``protos/transaction.proto``. A transaction is stored, framed, as
``_transactions/<read_version>-<uuid>.txn`` before its manifest is committed, so that
concurrent writers can check what it did.
"""

from __future__ import annotations

import uuid as uuid_mod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from google.protobuf.message import DecodeError

from s3ddb.errors import (
    InvalidInputError,
    ManifestCorruptError,
    PathOutsideDatasetError,
    StoredMetadataError,
    UnsupportedOperationError,
)
from s3ddb.format import layout
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.fragment import FragmentMetadata, data_file_paths
from s3ddb.format.framing import frame, unframe
from s3ddb.format.limits import MAX_VERSION, check_range
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.paths import check_name

TRANSACTION_MAGIC = b"S3DDBTX1"


class Operation:
    """Base class of operations. ``kind`` is the Lance operation name."""

    kind: ClassVar[str] = ""
    pb_field: ClassVar[str] = ""

    def to_pb(self) -> Any:
        raise NotImplementedError

    def written_paths(self) -> tuple[str, ...]:
        """Files this operation wrote (relative to the dataset root): deleted if its
        commit definitely fails."""
        return ()


@dataclass(frozen=True)
class Append(Operation):
    """Add new fragments. Rebases over any concurrent commit that keeps the schema."""

    fragments: tuple[FragmentMetadata, ...]
    kind: ClassVar[str] = "Append"
    pb_field: ClassVar[str] = "append"

    def __post_init__(self) -> None:
        object.__setattr__(self, "fragments", tuple(self.fragments))
        if not self.fragments:
            raise InvalidInputError("Append needs at least one fragment")

    def to_pb(self) -> tpb.Append:
        return tpb.Append(fragments=[f.to_pb() for f in self.fragments])

    def written_paths(self) -> tuple[str, ...]:
        return data_file_paths(self.fragments)


@dataclass(frozen=True)
class Overwrite(Operation):
    """Replace the whole dataset (fragments and schema); also creates datasets."""

    fragments: tuple[FragmentMetadata, ...]
    schema: DatasetSchema
    config_upsert_values: dict[str, str] = field(default_factory=dict)
    kind: ClassVar[str] = "Overwrite"
    pb_field: ClassVar[str] = "overwrite"

    def __init__(
        self,
        fragments: Any = (),
        schema: Any = None,
        config_upsert_values: dict[str, str] | None = None,
        *,
        new_schema: Any = None,
        initial_bases: Any = None,
    ) -> None:
        """``Overwrite(fragments, schema)``, or as pylance builds it:
        ``Overwrite(new_schema, fragments)``. ``schema`` is a DatasetSchema or a pyarrow
        Schema (field ids assigned as for a new dataset, as
        :func:`s3ddb.fragment.write_fragments` assigns them to the same schema).

        Raises:
            InvalidInputError: no schema, or a data file with fields not in it.
            UnsupportedOperationError: pylance's ``initial_bases``.
        """
        if new_schema is not None:
            if schema is not None:
                raise InvalidInputError("Overwrite: give schema or new_schema, not both")
            schema = new_schema
        if isinstance(fragments, pa.Schema | DatasetSchema):  # pylance's argument order
            fragments, schema = (() if schema is None else schema), fragments
        if isinstance(schema, pa.Schema):
            schema = DatasetSchema.assign(schema)
        if initial_bases:
            raise UnsupportedOperationError("Overwrite(initial_bases=...) is not supported")
        object.__setattr__(self, "fragments", fragments)
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "config_upsert_values", dict(config_upsert_values or {}))
        self.__post_init__()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fragments", tuple(self.fragments))
        if not isinstance(self.schema, DatasetSchema):
            raise InvalidInputError(
                "Overwrite needs a schema (a pyarrow Schema or DatasetSchema), got "
                f"{type(self.schema).__name__}"
            )
        known = {i for _p, i in self.schema.ids}
        for fragment in self.fragments:
            for data_file in fragment.files:
                unknown = {i for i in data_file.fields if i >= 0} - known
                if unknown:
                    raise InvalidInputError(
                        f"data file {data_file.path} holds field ids {sorted(unknown)} "
                        "that are not in the schema"
                    )

    def to_pb(self) -> tpb.Overwrite:
        return tpb.Overwrite(
            fragments=[f.to_pb() for f in self.fragments],
            schema=self.schema.to_pb(),
            config_upsert_values=self.config_upsert_values,
        )

    def written_paths(self) -> tuple[str, ...]:
        return data_file_paths(self.fragments)


@dataclass(frozen=True)
class Restore(Operation):
    """Make an older version the latest (its fragments and schema)."""

    version: int
    kind: ClassVar[str] = "Restore"
    pb_field: ClassVar[str] = "restore"

    def __post_init__(self) -> None:
        if self.version < 1:
            raise InvalidInputError(f"Restore.version must be >= 1, got {self.version}")

    def to_pb(self) -> tpb.Restore:
        return tpb.Restore(version=self.version)


@dataclass(frozen=True)
class MapUpdate:
    """A change of a string map: ``replace`` swaps the whole map for ``upsert``;
    otherwise ``delete`` keys are removed and ``upsert`` keys set."""

    upsert: dict[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    replace: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "upsert", dict(self.upsert))
        object.__setattr__(self, "delete", tuple(self.delete))
        for k, v in self.upsert.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise InvalidInputError(f"metadata keys and values must be strings: {k!r}={v!r}")

    def apply(self, before: dict[str, str]) -> dict[str, str]:
        out = {} if self.replace else {k: v for k, v in before.items() if k not in self.delete}
        out.update(self.upsert)
        return out

    def to_pb(self) -> tpb.UpdateMap:
        return tpb.UpdateMap(
            upsert=self.upsert, delete_keys=list(self.delete), replace=self.replace
        )

    @classmethod
    def from_pb(cls, message: tpb.UpdateMap) -> MapUpdate:
        return cls(dict(message.upsert), tuple(message.delete_keys), message.replace)


@dataclass(frozen=True)
class UpdateConfig(Operation):
    """Upsert and delete keys of the dataset config and table metadata, and change the
    schema's metadata and top-level fields' metadata (by field id)."""

    config_upsert: dict[str, str] = field(default_factory=dict)
    config_delete: tuple[str, ...] = ()
    metadata_upsert: dict[str, str] = field(default_factory=dict)
    metadata_delete: tuple[str, ...] = ()
    schema_metadata: MapUpdate | None = None
    field_metadata: dict[int, MapUpdate] = field(default_factory=dict)
    kind: ClassVar[str] = "UpdateConfig"
    pb_field: ClassVar[str] = "update_config"

    def __post_init__(self) -> None:
        for mapping in (self.config_upsert, self.metadata_upsert):
            for k, v in mapping.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise InvalidInputError(f"config keys and values must be strings: {k!r}={v!r}")
        for updates in (self.schema_metadata, *self.field_metadata.values()):
            if updates is not None and not isinstance(updates, MapUpdate):
                raise InvalidInputError(
                    f"schema and field metadata changes must be MapUpdates: {updates!r}"
                )

    @property
    def changes_schema(self) -> bool:
        """Whether this changes the schema's or a field's metadata."""
        return self.schema_metadata is not None or bool(self.field_metadata)

    def to_pb(self) -> tpb.UpdateConfig:
        message = tpb.UpdateConfig(
            config=tpb.UpdateMap(upsert=self.config_upsert, delete_keys=list(self.config_delete)),
            table_metadata=tpb.UpdateMap(
                upsert=self.metadata_upsert, delete_keys=list(self.metadata_delete)
            ),
        )
        if self.schema_metadata is not None:
            message.schema_metadata.CopyFrom(self.schema_metadata.to_pb())
        for field_id, update in self.field_metadata.items():
            message.field_metadata[field_id].CopyFrom(update.to_pb())
        return message


class UpdateMemWalState(Operation):
    """Lance's MemWAL index states. Not supported: constructing one raises.

    Raises:
        UnsupportedOperationError: always.
    """

    kind: ClassVar[str] = "UpdateMemWalState"
    pb_field: ClassVar[str] = "update_mem_wal_state"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedOperationError(
            "UpdateMemWalState is not supported: it maintains Lance's MemWAL (an "
            "in-memory write-ahead log index served by a long-running Lance process), and "
            "s3ddb has no such index or server; s3ddb only reads such transactions, and "
            "treats them as touching no rows when it resolves conflicts"
        )


@dataclass(frozen=True)
class OpaqueOperation(Operation):
    """An operation this version of s3ddb reads but does not build (yet).

    The conflict resolver treats it conservatively.
    """

    kind_name: str
    message: Any = field(compare=False)
    pb_field: ClassVar[str] = ""

    def to_pb(self) -> Any:
        return self.message


def operation_kind(op: Operation) -> str:
    return op.kind_name if isinstance(op, OpaqueOperation) else op.kind


_PB_FIELD_TO_KIND = {
    "append": "Append",
    "delete": "Delete",
    "overwrite": "Overwrite",
    "create_index": "CreateIndex",
    "rewrite": "Rewrite",
    "merge": "Merge",
    "restore": "Restore",
    "reserve_fragments": "ReserveFragments",
    "update": "Update",
    "project": "Project",
    "update_config": "UpdateConfig",
    "data_replacement": "DataReplacement",
    "update_mem_wal_state": "UpdateMemWalState",
    "clone": "Clone",
    "update_bases": "UpdateBases",
}


#: Every operation kind of the Lance transaction specification.
OPERATION_KINDS: tuple[str, ...] = tuple(_PB_FIELD_TO_KIND.values())


def _operation_from_pb(message: tpb.Transaction) -> Operation:
    which = message.WhichOneof("operation")
    if which is None:
        raise ManifestCorruptError("transaction has no operation")
    body = getattr(message, which)
    if which == "append":
        return Append(tuple(FragmentMetadata.from_pb(f) for f in body.fragments))
    if which == "overwrite":
        return Overwrite(
            tuple(FragmentMetadata.from_pb(f) for f in body.fragments),
            DatasetSchema.from_pb(body.schema),
            dict(body.config_upsert_values),
        )
    if which == "restore":
        return Restore(check_range(body.version, 1, MAX_VERSION, "restore version", "restore"))
    if which == "update_config":
        return UpdateConfig(
            dict(body.config.upsert),
            tuple(body.config.delete_keys),
            dict(body.table_metadata.upsert),
            tuple(body.table_metadata.delete_keys),
            MapUpdate.from_pb(body.schema_metadata) if body.HasField("schema_metadata") else None,
            {i: MapUpdate.from_pb(u) for i, u in body.field_metadata.items()},
        )
    decoder = _EXTRA_DECODERS.get(which)
    if decoder is not None:
        return decoder(message)
    return OpaqueOperation(_PB_FIELD_TO_KIND[which], body)


# Decoders for operations defined in other modules (registered at import time), so
# this module does not have to know every operation.
_EXTRA_DECODERS: dict[str, Any] = {}


def register_operation_decoder(pb_field: str, decoder: Any) -> None:
    _EXTRA_DECODERS[pb_field] = decoder


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
    uuid: str = field(default_factory=lambda: uuid_mod.uuid4().hex)
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
            field_name = next(
                k for k, v in _PB_FIELD_TO_KIND.items() if v == self.operation.kind_name
            )
        else:
            field_name = self.operation.pb_field
        getattr(message, field_name).CopyFrom(self.operation.to_pb())
        extra = getattr(self.operation, "extra_pb", None)
        if extra is not None:
            extra(message)
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
                operation=_operation_from_pb(message),
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
