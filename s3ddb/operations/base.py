"""The operation base class, the kinds of the Lance transaction specification, and the
operations s3ddb reads but does not build.

Every operation is a frozen dataclass that validates itself in ``__post_init__``
(Lance style) and converts to and from its protobuf message of
``protos/transaction.proto`` (``to_pb``; decoding is in
:mod:`s3ddb.operations.transaction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from s3ddb.errors import UnsupportedOperationError
from s3ddb.format._proto import transaction_pb2 as tpb

__all__ = [
    "OPERATION_KINDS",
    "PB_FIELD_TO_KIND",
    "OpaqueOperation",
    "Operation",
    "UpdateMemWalState",
    "operation_kind",
]


class Operation:
    """Base class of operations. ``kind`` is the Lance operation name, ``pb_field`` the
    name of its field in the ``operation`` oneof of the transaction message."""

    kind: ClassVar[str] = ""
    pb_field: ClassVar[str] = ""

    def to_pb(self) -> Any:
        """The operation's own message (the ``pb_field`` body)."""
        raise NotImplementedError

    def add_transaction_fields(self, message: tpb.Transaction) -> None:
        """Set the fields this operation stores in the transaction message beside its
        own body (the rows Delete and Update affected); most store none."""

    def written_paths(self) -> tuple[str, ...]:
        """Files this operation wrote (relative to the dataset root): deleted if its
        commit definitely fails."""
        return ()


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
    """The Lance kind of ``op`` (an opaque operation's recorded kind)."""
    return op.kind_name if isinstance(op, OpaqueOperation) else op.kind


#: The ``operation`` oneof of the transaction message: field name -> operation kind.
PB_FIELD_TO_KIND: dict[str, str] = {
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
OPERATION_KINDS: tuple[str, ...] = tuple(PB_FIELD_TO_KIND.values())
