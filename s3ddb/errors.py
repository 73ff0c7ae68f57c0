"""The s3ddb exception tree.

Every error the library raises on purpose derives from :class:`S3DDBError`. Where a
built-in exception means the same thing, the subclass derives from it too, so callers
can catch ``FileNotFoundError`` or ``ValueError`` without importing s3ddb.

Commit outcomes are kept apart on purpose (as pyiceberg does): a
:class:`CommitConflictError` means the commit definitely did not land, so its files
may be cleaned up; a :class:`CommitStateUnknownError` means it may have landed, so
nothing it wrote may be deleted.

``__all__`` lists every error users may meet; :class:`InjectedFault` (failpoints, for
tests) is left out on purpose.
"""

from __future__ import annotations

__all__ = [
    "AtomicGroupError",
    "BaseTooOldError",
    "BucketNotFoundError",
    "CatalogError",
    "ColumnExistsError",
    "ColumnNotFoundError",
    "CommitConflictError",
    "CommitError",
    "CommitMechanismError",
    "CommitStateUnknownError",
    "CredentialsError",
    "DataFileError",
    "DataFileMissingError",
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
    "IncompatibleTransactionError",
    "IndexExistsError",
    "InvalidExpressionError",
    "InvalidInputError",
    "InvalidURIError",
    "ManifestCorruptError",
    "ManifestFinalizationError",
    "MatchedRowError",
    "ObjectStoreError",
    "OpenFormatError",
    "PathOutsideDatasetError",
    "PublishedStateError",
    "RetryableCommitConflictError",
    "S3DDBError",
    "SchemaMismatchError",
    "StoredMetadataError",
    "StreamChangeCommitError",
    "TooMuchWriteContentionError",
    "TransactionAlreadyCommittedError",
    "UnsafeCastError",
    "UnsupportedFormatError",
    "UnsupportedIndexError",
    "UnsupportedOperationError",
    "UntrustedCatalogError",
    "VersionNotFoundError",
]


class S3DDBError(Exception):
    """Base class of every error s3ddb raises on purpose."""


# --- datasets and versions -------------------------------------------------------


class DatasetNotFoundError(S3DDBError, FileNotFoundError):
    """No dataset (no committed version) exists at the URI."""


class DatasetAlreadyExistsError(S3DDBError, FileExistsError):
    """``mode="create"`` found a dataset already at the URI."""


class BucketNotFoundError(S3DDBError, FileNotFoundError):
    """The S3 bucket a URI names does not exist (S3 answered ``NoSuchBucket``). The
    message names the bucket and the endpoint's object that was asked for."""


class DatasetLocationError(S3DDBError, OSError):
    """A local dataset root cannot be created or opened: a part of the path is a
    file, or the file system refuses (read-only, permission denied). The message
    names the path and the reason."""


class VersionNotFoundError(S3DDBError, KeyError):
    """The requested version or tag does not exist in the dataset."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class SchemaMismatchError(S3DDBError, ValueError):
    """Data's schema does not match the dataset's schema."""


class InvalidInputError(S3DDBError, ValueError):
    """An argument is malformed or unsupported (mode, URI, predicate, option...)."""


class AtomicGroupError(InvalidInputError):
    """Datasets cannot change together in one group (``s3ddb.atomic``) or be read
    in one snapshot (``s3ddb.snapshot``): a local path or ``s3://`` member, a mix of
    schemes, DynamoDB tables behind different endpoints, regions or credentials, too
    many changes for one transaction, or a change a group cannot hold. Raised before
    anything of the group is visible."""


class InvalidURIError(InvalidInputError):
    """A dataset URI cannot be parsed or names an unsupported scheme."""


class ColumnNotFoundError(InvalidInputError):
    """A predicate, projection or update names a column the dataset does not have."""


class InvalidExpressionError(InvalidInputError):
    """A predicate or value expression is malformed or uses something unsupported."""


class DuplicateKeyError(InvalidInputError):
    """A merge's source holds one key twice (or two source rows match one target row):
    which row should win is ambiguous. The message names the key; nothing is
    committed."""


class MatchedRowError(InvalidInputError):
    """A merge with ``when_matched_fail()`` found a source row whose key the target
    holds. The message names the key; nothing is committed."""


class IndexExistsError(InvalidInputError):
    """An index of that name exists and ``replace=False`` was given."""


class UnsupportedIndexError(InvalidInputError):
    """The index type, or the type of the column to index, is not supported."""


class UnsupportedOperationError(S3DDBError, NotImplementedError):
    """An operation of the Lance specification that s3ddb reads but does not build."""


class OpenFormatError(InvalidInputError):
    """A change the open formats a dataset publishes (Iceberg, Delta) cannot
    represent exactly: a column type with no counterpart in a format, a fragment of
    several data files, an unknown format name. The message names the column or
    fragment. Raised before the change is committed."""


class CatalogError(S3DDBError):
    """A catalog (AWS Glue) refused an update of a dataset's table, or holds an entry
    s3ddb does not trust: a table of another type under the name, a metadata location
    outside the dataset, a malformed parameter. The message names the catalog table.
    A commit never raises it: a catalog update after a commit that fails is logged,
    counted and caught up by the next commit or ``s3ddb catalog sync``."""


class UntrustedCatalogError(CatalogError):
    """A catalog (AWS Glue) holds an entry for a dataset's table that s3ddb does not
    trust, and so does not move: another table under the name, a metadata location
    that is not a committed version's of the dataset, a parameter that makes engines
    read it otherwise. No commit or sync changes that: someone mends or drops the
    entry. The message names the catalog table and what is wrong."""


class ColumnExistsError(InvalidInputError):
    """A column being added or renamed to already exists in the dataset."""


class UnsafeCastError(SchemaMismatchError):
    """``alter_columns`` was asked for a type change that could lose or alter values
    (narrowing, int64 to float, text to numbers...). Nothing was written."""


class ManifestCorruptError(S3DDBError):
    """A manifest or transaction file is truncated, corrupt or unreadable."""


class UnsupportedFormatError(ManifestCorruptError):
    """A manifest was written in a format newer than this s3ddb reads (its magic or its
    ``format_version`` names it): upgrade s3ddb to read the dataset. Nothing is read
    past the refusal, so an old reader never misses what a newer format stores."""


class PathOutsideDatasetError(S3DDBError, ValueError):
    """A path from stored metadata (a manifest, a transaction, a DynamoDB row, fragment
    metadata handed to a commit) is not a plain name inside the dataset: absolute, with
    ``..`` or a separator where one name belongs, empty, or with control characters.

    It is refused before anything is read, written or deleted; the message names the
    path and where it was found.
    """


class StoredMetadataError(ManifestCorruptError):
    """Stored metadata decoded but is inconsistent or out of range: a fragment id
    listed twice, two fields sharing a field id, a deletion offset beyond its
    fragment, a tag file without a valid version, a DynamoDB row attribute of the
    wrong type... The message names the file (or row), the version and what is wrong.
    Checked before use, in bounded time and memory."""


class PublishedStateError(StoredMetadataError):
    """The Iceberg or Delta state s3ddb published for a dataset (under ``metadata/`` or
    ``_delta_log/``) is damaged: a file that does not decode, exceeds its bounds, names
    a path outside the dataset, or disagrees with the s3ddb manifests it was published
    from. ``path`` is the published file (relative to the dataset root). Publication
    never builds on such a state: it publishes the version afresh from the manifests
    and says so; ``s3ddb open-formats URI --rebuild`` republishes the kept versions."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class StreamChangeCommitError(S3DDBError):
    """A streaming read reached a version that deletes or changes rows (a delete, an
    update, an upsert that updates, an overwrite, a restore): a stream of appended rows
    cannot express it. Read with ``skipChangeCommits=true`` to skip such versions."""


class DataFileError(S3DDBError):
    """A data file that a version references is missing, unreadable or corrupt (not
    Parquet, truncated, other row count than its fragment records). The message names
    the fragment, the file and the version."""


class DataFileMissingError(DataFileError, FileNotFoundError):
    """A data file that a version references does not exist."""


class ManifestFinalizationError(S3DDBError):
    """A version decided in the external store cannot be finalized.

    Raised by readers that find a staged row whose staged manifest is missing or has
    the wrong size. Nothing is marked complete when this is raised.
    """


# --- commits -----------------------------------------------------------------------


class CommitError(S3DDBError):
    """Base class of errors raised while committing a transaction."""


class CommitConflictError(CommitError):
    """The commit definitely did not land because of a concurrent commit."""


class BaseTooOldError(CommitConflictError):
    """The transaction needs a newer version than the base it was given (e.g. a
    Rewrite whose fragment ids a later ReserveFragments reserved); the commit loop
    catches up with the newest version and builds again."""


class RetryableCommitConflictError(CommitConflictError):
    """A concurrent commit invalidated this transaction's reads.

    The same operation re-executed against the newest version may succeed; the
    transaction itself must not be retried against its stale base.
    """


class IncompatibleTransactionError(CommitConflictError):
    """A concurrent commit makes this transaction impossible (e.g. its data was removed)."""


class TransactionAlreadyCommittedError(IncompatibleTransactionError):
    """An application transaction (e.g. a streaming micro-batch) with this id and an
    equal or newer sequence number is already committed; committing it again would
    duplicate its rows. Nothing was committed."""


class TooMuchWriteContentionError(CommitConflictError):
    """Commit retries were exhausted (by count or time) under contention."""


class DatasetRecreatedError(CommitError):
    """The dataset this writer read was dropped or re-created meanwhile: the version
    it would build on no longer exists with the same dataset identity. Nothing this
    writer wrote became visible; re-open the dataset and run the operation again if it
    still applies."""


class CommitMechanismError(CommitError):
    """This writer would commit the dataset another way than the dataset commits
    (plain ``s3://`` on a dataset that commits through DynamoDB, another DynamoDB
    table, a local copy of its objects). Reads are allowed; the message names the URI
    to write with, and ``s3ddb migrate-commits`` moves a dataset to another
    mechanism explicitly. Nothing was committed."""


class CommitStateUnknownError(CommitError):
    """It is not known whether the commit landed.

    The files the commit wrote are kept: they may belong to a committed version.
    Re-open the dataset to find out.
    """


# --- external manifest store ---------------------------------------------------------


class ExternalStoreError(S3DDBError):
    """Base class of errors from the external manifest store (DynamoDB)."""


class ExternalStoreTableError(ExternalStoreError):
    """The external store's table is missing or has the wrong key schema."""


class ObjectStoreError(S3DDBError):
    """The object store failed a request after its retries (an S3 error answer other
    than a missing object, bucket or credentials: a 500, a 503, an unexpected code).
    The message names the operation's object and the store's answer. A write that
    raised this may still have been applied."""


class EndpointUnreachableError(S3DDBError, ConnectionError):
    """Nothing could be sent to an S3 or DynamoDB endpoint (connection refused, no
    such host, connect timeout). The message names the service and the endpoint."""


class ExternalStoreUnreachableError(ExternalStoreError, EndpointUnreachableError):
    """The DynamoDB endpoint could not be reached, retries included; nothing was
    applied by the attempts that raised this."""


class ExternalStoreThrottledError(ExternalStoreError):
    """The external store kept throttling or failing after bounded retries."""


class CredentialsError(S3DDBError, PermissionError):
    """AWS credentials are missing or were refused."""


class InjectedFault(S3DDBError):
    """Raised by a failpoint whose action is ``raise`` (testing only)."""
