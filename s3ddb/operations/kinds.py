"""Every operation kind, listed once: :data:`OPERATIONS`, and the lookups derived from it.

Each class states the facts of its kind (:class:`s3ddb.operations.operation.Operation`'s
class attributes: ``kind``, ``pb_field``, ``changes``, ``committable``,
``in_lance_operation``). The tables that need something this layer cannot hold (how
to build the next manifest, the conflict rules, pylance's names) are literals in
their own layer, and ``tests/commit/test_operations_tables.py`` checks each of them against
this tuple.
"""

from __future__ import annotations

from s3ddb.operations.base_paths import Clone, UpdateBases
from s3ddb.operations.config import UpdateConfig
from s3ddb.operations.create_index import CreateIndex
from s3ddb.operations.data import Append, Overwrite, Restore
from s3ddb.operations.delete_update import Delete, Update
from s3ddb.operations.operation import Changes, Operation, UpdateMemWalState
from s3ddb.operations.replacement import DataReplacement
from s3ddb.operations.rewrite import ReserveFragments, Rewrite
from s3ddb.operations.schema_changes import Merge, Project

__all__ = [
    "BY_KIND",
    "BY_PB_FIELD",
    "COMMITTABLE",
    "OPERATIONS",
    "OPERATION_KINDS",
    "kinds_that_change",
]

#: Every operation of the Lance transaction specification, in the order of the
#: transaction message's ``operation`` oneof (``protos/transaction.proto``).
OPERATIONS: tuple[type[Operation], ...] = (
    Append,
    Delete,
    Overwrite,
    CreateIndex,
    Rewrite,
    Merge,
    Restore,
    ReserveFragments,
    Update,
    Project,
    UpdateConfig,
    DataReplacement,
    UpdateMemWalState,
    Clone,
    UpdateBases,
)

#: Every operation kind, in the order of :data:`OPERATIONS`.
OPERATION_KINDS: tuple[str, ...] = tuple(op.kind for op in OPERATIONS)

#: The operations s3ddb decodes, builds and commits (the others are read as
#: :class:`~s3ddb.operations.operation.OpaqueOperation`).
COMMITTABLE: tuple[type[Operation], ...] = tuple(op for op in OPERATIONS if op.committable)

#: Kind -> operation class.
BY_KIND: dict[str, type[Operation]] = {op.kind: op for op in OPERATIONS}

#: Field of the transaction message's ``operation`` oneof -> operation class.
BY_PB_FIELD: dict[str, type[Operation]] = {op.pb_field: op for op in OPERATIONS}


def kinds_that_change(*changes: Changes) -> frozenset[str]:
    """The kinds whose operations change one of ``changes``."""
    return frozenset(op.kind for op in OPERATIONS if op.changes in changes)
