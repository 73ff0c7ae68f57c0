"""The transaction model: operations (what a commit changes), one module per family,
and the transaction that carries one, with its protobuf codec.

This layer knows nothing of how a commit is decided: building the next manifest and
resolving conflicts are in :mod:`s3ddb.commit`. Its names are importable from here.
"""

from s3ddb.operations.base_paths import Clone, UpdateBases
from s3ddb.operations.config import MapUpdate, UpdateConfig
from s3ddb.operations.create_index import CreateIndex
from s3ddb.operations.data import Append, Overwrite, Restore
from s3ddb.operations.delete_update import (
    TOMBSTONE_FIELD_ID,
    Delete,
    KeyExistenceFilter,
    RowChangePlan,
    Update,
    UpdateMode,
)
from s3ddb.operations.kinds import OPERATION_KINDS, OPERATIONS
from s3ddb.operations.operation import (
    Changes,
    OpaqueOperation,
    Operation,
    UpdateMemWalState,
    operation_kind,
)
from s3ddb.operations.replacement import (
    DataReplacement,
    DataReplacementGroup,
    check_replacement,
    replaced_fragment,
)
from s3ddb.operations.rewrite import ReserveFragments, Rewrite, RewriteGroup
from s3ddb.operations.schema_changes import Merge, Project, next_field_id
from s3ddb.operations.transaction import TRANSACTION_MAGIC, Transaction

__all__ = [
    "OPERATIONS",
    "OPERATION_KINDS",
    "TOMBSTONE_FIELD_ID",
    "TRANSACTION_MAGIC",
    "Append",
    "Changes",
    "Clone",
    "CreateIndex",
    "DataReplacement",
    "DataReplacementGroup",
    "Delete",
    "KeyExistenceFilter",
    "MapUpdate",
    "Merge",
    "OpaqueOperation",
    "Operation",
    "Overwrite",
    "Project",
    "ReserveFragments",
    "Restore",
    "Rewrite",
    "RewriteGroup",
    "RowChangePlan",
    "Transaction",
    "Update",
    "UpdateBases",
    "UpdateConfig",
    "UpdateMemWalState",
    "UpdateMode",
    "check_replacement",
    "next_field_id",
    "operation_kind",
    "replaced_fragment",
]
