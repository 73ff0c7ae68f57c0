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

``__all__`` (what ``from s3ddb import *`` gives) lists what users call and catch: the
entry points, the types they take or return, and the errors of :mod:`s3ddb.errors`
(whose ``__all__`` lists every error users may meet). The operation classes
(``Append``, ``Overwrite``...) live in :mod:`s3ddb.operations`; internal signals
(``VersionConflict``, ``FenceFailedError``...) in their own modules. The package
exports ``__all__`` and nothing else.
"""

from s3ddb import fragment
from s3ddb.commit.committer import CommitConfig
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
    DuplicateKeyError,
    EndpointUnreachableError,
    ExternalStoreError,
    ExternalStoreTableError,
    ExternalStoreThrottledError,
    ExternalStoreUnreachableError,
    IncompatibleTransactionError,
    IndexExistsError,
    InvalidExpressionError,
    InvalidInputError,
    InvalidURIError,
    ManifestCorruptError,
    ManifestFinalizationError,
    MatchedRowError,
    ObjectStoreError,
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
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.groups import atomic, snapshot
from s3ddb.lance_dataset import LanceDataset
from s3ddb.maintenance.cleanup import CleanupStats
from s3ddb.operations import Transaction
from s3ddb.pylance_compat import LanceOperation
from s3ddb.version import __version__
from s3ddb.versions.tags import Tags
from s3ddb.writes.merge_insert import MergeInsertBuilder

__all__ = [
    "AtomicGroupError",
    "BaseTooOldError",
    "BucketNotFoundError",
    "CleanupStats",
    "ColumnExistsError",
    "ColumnNotFoundError",
    "CommitConfig",
    "CommitConflictError",
    "CommitError",
    "CommitMechanismError",
    "CommitStateUnknownError",
    "CredentialsError",
    "DataFileError",
    "DataFileMissingError",
    "Dataset",
    "DatasetAlreadyExistsError",
    "DatasetLocationError",
    "DatasetNotFoundError",
    "DatasetRecreatedError",
    "DuplicateKeyError",
    "EndpointUnreachableError",
    "ExternalStoreError",
    "ExternalStoreTableError",
    "ExternalStoreThrottledError",
    "ExternalStoreUnreachableError",
    "FragmentMetadata",
    "IncompatibleTransactionError",
    "IndexExistsError",
    "InvalidExpressionError",
    "InvalidInputError",
    "InvalidURIError",
    "LanceDataset",
    "LanceOperation",
    "ManifestCorruptError",
    "ManifestFinalizationError",
    "MatchedRowError",
    "MergeInsertBuilder",
    "ObjectStoreError",
    "PathOutsideDatasetError",
    "RetryableCommitConflictError",
    "S3DDBError",
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
    "VersionInfo",
    "VersionNotFoundError",
    "__version__",
    "atomic",
    "dataset",
    "fragment",
    "migrate_commits",
    "snapshot",
    "write_dataset",
]
