"""The operation base class, with the facts every operation class states about its
kind, and the operations s3ddb reads but does not build.

Every operation is a frozen dataclass that validates itself in ``__post_init__``
(Lance style) and converts to and from its protobuf message of
``protos/transaction.proto`` (``to_pb`` and ``from_transaction_pb``). Every kind of the
Lance transaction specification is one class, listed once in
:data:`s3ddb.operations.kinds.OPERATIONS`; the per-kind tables derive from that tuple.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from s3ddb.errors import UnsupportedOperationError
from s3ddb.format._proto import transaction_pb2 as tpb

__all__ = [
    "Changes",
    "OpaqueOperation",
    "Operation",
    "UpdateMemWalState",
    "operation_kind",
]


class Changes(enum.Enum):
    """What an operation of a kind changes of what a reader sees
    (:attr:`Operation.changes`).

    A stream of appended rows (:mod:`s3ddb.spark_ext.stream_plan`) emits nothing for
    NOTHING and SCHEMA, the new fragments of APPENDS when it removed and changed no
    row, and stops at the rest (change commits).
    """

    #: No row and no column: data files, indices, configuration, fragment ids, bases.
    NOTHING = "nothing"
    #: Columns (added, dropped, renamed), never which rows there are.
    SCHEMA = "schema"
    #: Adds rows, and may also delete or change others.
    APPENDS = "appends"
    #: Deletes, changes or replaces rows; never a mere append.
    ROWS = "rows"


class Operation:
    """Base class of operations.

    Each operation class states the facts of its kind as class attributes, and
    :data:`s3ddb.operations.kinds.OPERATIONS` lists every class once:

    * ``kind``: the Lance operation name (what manifests and conflict rules use);
    * ``pb_field``: its field in the ``operation`` oneof of the transaction message;
    * ``changes``: what it changes (:class:`Changes`);
    * ``committable``: whether s3ddb decodes, builds and commits it (otherwise a
      stored one is read as an :class:`OpaqueOperation`);
    * ``in_lance_operation``: whether pylance's ``LanceOperation`` has it (then
      :class:`s3ddb.LanceOperation` has it too).
    """

    kind: ClassVar[str] = ""
    pb_field: ClassVar[str] = ""
    changes: ClassVar[Changes]
    committable: ClassVar[bool]
    in_lance_operation: ClassVar[bool]

    def to_pb(self) -> Any:
        """The operation's own message (the ``pb_field`` body)."""
        raise NotImplementedError

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Operation:
        """The operation stored in ``message`` (checked as untrusted input; Delete and
        Update also read the rows stored beside their body). Only committable kinds
        have one."""
        raise NotImplementedError(f"{cls.kind or cls.__name__} is not decoded")

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
    changes: ClassVar[Changes] = Changes.NOTHING
    committable: ClassVar[bool] = False
    in_lance_operation: ClassVar[bool] = False

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
