"""s3ddb: ACID, multi-version datasets on object storage, with many concurrent writers.

import s3ddb
ds = s3ddb.write_dataset(table, "s3+ddb://bucket/events?ddbTableName=s3ddb")
ds = s3ddb.dataset("s3+ddb://bucket/events?ddbTableName=s3ddb")
ds.to_table(filter="id < 10")

The entry points are :func:`dataset` (open a version) and :func:`write_dataset` (create,
append, overwrite); their help lists the URI forms (a local path, ``memory://``,
``s3://``, ``s3+ddb://...?ddbTableName=``), the ``storage_options`` and the data
accepted. Errors are :class:`S3DDBError` subclasses. ``import s3ddb as lance`` runs
pylance code (docs/pylance.md).
"""

from s3ddb import fragment
from s3ddb.commit.committer import CommitConfig
from s3ddb.commit.handlers import VersionConflict
from s3ddb.dataset import Dataset, VersionInfo, dataset, migrate_commits, write_dataset
from s3ddb.errors import (
    AtomicGroupError,
    BaseTooOldError,
    BucketNotFoundError,
    ColumnExistsError,
    ColumnNotFoundError,
    CommitConflictError,
    CommitError,
    CommitMechanismError,
    CommitStateUnknownError,
    CredentialsError,
    DataFileError,
    DataFileMissingError,
    DatasetAlreadyExistsError,
    DatasetLocationError,
    DatasetNotFoundError,
    DatasetRecreatedError,
    EndpointUnreachableError,
    ExternalStoreError,
    ExternalStoreTableError,
    ExternalStoreThrottledError,
    ExternalStoreUnreachableError,
    IncompatibleTransactionError,
    IndexExistsError,
    InjectedFault,
    InvalidExpressionError,
    InvalidInputError,
    InvalidURIError,
    ManifestCorruptError,
    ManifestFinalizationError,
    PathOutsideDatasetError,
    RetryableCommitConflictError,
    S3DDBError,
    SchemaMismatchError,
    StoredMetadataError,
    StreamChangeCommitError,
    TooMuchWriteContentionError,
    TransactionAlreadyCommittedError,
    UnsafeCastError,
    UnsupportedIndexError,
    UnsupportedOperationError,
    VersionNotFoundError,
)
from s3ddb.external_store.base import (
    ExternalStoreOutcomeUnknownError,
    FenceFailedError,
    VersionTakenError,
)
from s3ddb.external_store.group import GroupRefusedError
from s3ddb.format.bases import BasePath
from s3ddb.format.fragment import DataFile, FragmentMetadata
from s3ddb.format.index import IndexMetadata
from s3ddb.format.schema import DatasetSchema
from s3ddb.groups import Atomic, AtomicGroup, atomic, snapshot
from s3ddb.lance_dataset import LanceDataset
from s3ddb.maintenance.cleanup import CleanupStats, KeptVersion
from s3ddb.operations import (
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    MapUpdate,
    Merge,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Transaction,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMemWalState,
    UpdateMode,
)
from s3ddb.pylance_compat import LanceOperation
from s3ddb.reading.scanner import Scanner
from s3ddb.version import __version__
from s3ddb.versions.tags import Tags
from s3ddb.writes.merge_insert import MergeInsertBuilder

__all__ = [
    "Append",
    "Atomic",
    "AtomicGroup",
    "AtomicGroupError",
    "BasePath",
    "BaseTooOldError",
    "BucketNotFoundError",
    "CleanupStats",
    "Clone",
    "ColumnExistsError",
    "ColumnNotFoundError",
    "CommitConfig",
    "CommitConflictError",
    "CommitError",
    "CommitMechanismError",
    "CommitStateUnknownError",
    "CreateIndex",
    "CredentialsError",
    "DataFile",
    "DataFileError",
    "DataFileMissingError",
    "DataReplacement",
    "DataReplacementGroup",
    "Dataset",
    "DatasetAlreadyExistsError",
    "DatasetLocationError",
    "DatasetNotFoundError",
    "DatasetRecreatedError",
    "DatasetSchema",
    "Delete",
    "EndpointUnreachableError",
    "ExternalStoreError",
    "ExternalStoreOutcomeUnknownError",
    "ExternalStoreTableError",
    "ExternalStoreThrottledError",
    "ExternalStoreUnreachableError",
    "FenceFailedError",
    "FragmentMetadata",
    "GroupRefusedError",
    "IncompatibleTransactionError",
    "IndexExistsError",
    "IndexMetadata",
    "InjectedFault",
    "InvalidExpressionError",
    "InvalidInputError",
    "InvalidURIError",
    "KeptVersion",
    "LanceDataset",
    "LanceOperation",
    "ManifestCorruptError",
    "ManifestFinalizationError",
    "MapUpdate",
    "Merge",
    "MergeInsertBuilder",
    "Overwrite",
    "PathOutsideDatasetError",
    "Project",
    "ReserveFragments",
    "Restore",
    "RetryableCommitConflictError",
    "Rewrite",
    "RewriteGroup",
    "S3DDBError",
    "Scanner",
    "SchemaMismatchError",
    "StoredMetadataError",
    "StreamChangeCommitError",
    "Tags",
    "TooMuchWriteContentionError",
    "Transaction",
    "TransactionAlreadyCommittedError",
    "UnsafeCastError",
    "UnsupportedIndexError",
    "UnsupportedOperationError",
    "Update",
    "UpdateBases",
    "UpdateConfig",
    "UpdateMemWalState",
    "UpdateMode",
    "VersionConflict",
    "VersionInfo",
    "VersionNotFoundError",
    "VersionTakenError",
    "__version__",
    "atomic",
    "dataset",
    "fragment",
    "migrate_commits",
    "snapshot",
    "write_dataset",
]
