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
(``VersionConflict``, ``FenceFailedError``...) in their own modules. The names
exported before and not in ``__all__`` stay attributes (``s3ddb.Append`` is
``s3ddb.operations.Append``): the ``X as X`` imports below.
"""

from s3ddb import fragment
from s3ddb.commit.committer import CommitConfig
from s3ddb.commit.handlers import VersionConflict as VersionConflict
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
from s3ddb.errors import InjectedFault as InjectedFault
from s3ddb.external_store.manifest_store import (
    ExternalStoreOutcomeUnknownError as ExternalStoreOutcomeUnknownError,
)
from s3ddb.external_store.manifest_store import FenceFailedError as FenceFailedError
from s3ddb.external_store.manifest_store import GroupRefusedError as GroupRefusedError
from s3ddb.external_store.manifest_store import VersionTakenError as VersionTakenError
from s3ddb.format.bases import BasePath as BasePath
from s3ddb.format.fragment_metadata import DataFile as DataFile
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.index import IndexMetadata as IndexMetadata
from s3ddb.format.schema import DatasetSchema as DatasetSchema
from s3ddb.groups import Atomic as Atomic
from s3ddb.groups import AtomicGroup as AtomicGroup
from s3ddb.groups import atomic, snapshot
from s3ddb.lance_dataset import LanceDataset
from s3ddb.maintenance.cleanup import CleanupStats
from s3ddb.maintenance.cleanup import KeptVersion as KeptVersion
from s3ddb.operations import Append as Append
from s3ddb.operations import Clone as Clone
from s3ddb.operations import CreateIndex as CreateIndex
from s3ddb.operations import DataReplacement as DataReplacement
from s3ddb.operations import DataReplacementGroup as DataReplacementGroup
from s3ddb.operations import Delete as Delete
from s3ddb.operations import MapUpdate as MapUpdate
from s3ddb.operations import Merge as Merge
from s3ddb.operations import Overwrite as Overwrite
from s3ddb.operations import Project as Project
from s3ddb.operations import ReserveFragments as ReserveFragments
from s3ddb.operations import Restore as Restore
from s3ddb.operations import Rewrite as Rewrite
from s3ddb.operations import RewriteGroup as RewriteGroup
from s3ddb.operations import Transaction
from s3ddb.operations import Update as Update
from s3ddb.operations import UpdateBases as UpdateBases
from s3ddb.operations import UpdateConfig as UpdateConfig
from s3ddb.operations import UpdateMemWalState as UpdateMemWalState
from s3ddb.operations import UpdateMode as UpdateMode
from s3ddb.pylance_compat import LanceOperation
from s3ddb.reading.scanner import Scanner as Scanner
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
