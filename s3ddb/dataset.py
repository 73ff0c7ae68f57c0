"""Datasets: pinned-snapshot reads, and writes that become transactions.

A :class:`Dataset` is pinned to one version: every read sees exactly that version,
whatever other writers commit meanwhile. A write computes its change from the pinned
version, commits it with that version as ``read_version`` (rebasing over concurrent
commits where the conflict rules allow) and moves the Dataset to the version it
created.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb._data import to_arrow_table
from s3ddb.commit.committer import CommitConfig, CommitResult, OnExisting, commit_transaction
from s3ddb.commit.handlers import CommitHandler
from s3ddb.commit.transaction import Append, Operation, Overwrite, Restore, Transaction
from s3ddb.connect import open_handler
from s3ddb.errors import (
    ColumnNotFoundError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    VersionNotFoundError,
)
from s3ddb.format.datafile import (
    DEFAULT_MAX_ROWS_PER_FILE,
    read_fragment,
    write_fragments_from_table,
)
from s3ddb.format.deletion import read_deletion_mask
from s3ddb.format.fragment import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import DEFAULT_NAMING, NamingScheme
from s3ddb.format.schema import DatasetSchema, conform
from s3ddb.io.uri import parse_uri

if TYPE_CHECKING:
    from s3ddb.tags import Tags

WriteMode = Literal["create", "append", "overwrite"]
_MODES = ("create", "append", "overwrite")


@dataclass(frozen=True)
class VersionInfo:
    """One entry of a dataset's history."""

    version: int
    timestamp: dt.datetime
    operation: str
    metadata: dict[str, str]


class Dataset:
    """A dataset pinned at one version. Open with :func:`dataset` or :func:`write_dataset`."""

    def __init__(
        self,
        uri: str,
        handler: CommitHandler,
        manifest: Manifest,
        *,
        storage_options: dict[str, Any] | None = None,
        commit_config: CommitConfig | None = None,
    ) -> None:
        self._uri = uri
        self._handler = handler
        self._manifest = manifest
        self._storage_options = dict(storage_options or {})
        self._commit_config = commit_config or CommitConfig()
        self._last_commit: CommitResult | None = None

    # --- identity -----------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def version(self) -> int:
        """The version this Dataset is pinned to."""
        return self._manifest.version

    @property
    def latest_version(self) -> int:
        """The newest committed version (asks the store; not cached)."""
        latest = self._handler.latest_location()
        return latest.version if latest is not None else self.version

    @property
    def schema(self) -> pa.Schema:
        return self._manifest.schema.arrow

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def handler(self) -> CommitHandler:
        return self._handler

    @property
    def storage_options(self) -> dict[str, Any]:
        return dict(self._storage_options)

    @property
    def last_commit(self) -> CommitResult | None:
        """How this Dataset's last write committed (transaction, attempts), if any."""
        return self._last_commit

    def get_fragments(self) -> list[FragmentMetadata]:
        return list(self._manifest.fragments)

    @property
    def tags(self) -> Tags:
        from s3ddb.tags import Tags

        return Tags(self)

    def __repr__(self) -> str:
        return f"Dataset({self._uri!r}, version={self.version}, rows={self._manifest.num_rows})"

    # --- history ------------------------------------------------------------------

    def versions(self) -> list[VersionInfo]:
        """Every version, oldest first, with its commit time and operation."""
        out = []
        for location in self._handler.list_locations():
            if location.committed_at_ms is not None and location.operation is not None:
                ts_ms, op, meta = location.committed_at_ms, location.operation, {}
            else:
                manifest = self._handler.load_manifest(location)
                ts_ms = manifest.timestamp_nanos // 1_000_000
                op, meta = manifest.operation, dict(manifest.table_metadata)
            timestamp = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.timezone.utc)
            out.append(VersionInfo(location.version, timestamp, op, meta))
        return out

    def checkout_version(self, version: int | str) -> Dataset:
        """A Dataset pinned at ``version`` (a number or a tag name).

        Raises:
            VersionNotFoundError: no such version or tag.
        """
        number = self.tags.resolve(version) if isinstance(version, str) else version
        manifest = _load_version(self._handler, number, self._uri)
        return Dataset(
            self._uri,
            self._handler,
            manifest,
            storage_options=self._storage_options,
            commit_config=self._commit_config,
        )

    # --- reads --------------------------------------------------------------------

    def _resolve_columns(self, columns: list[str] | None) -> list[str]:
        if columns is None:
            return list(self.schema.names)
        if isinstance(columns, str):
            raise InvalidInputError("columns must be a list of names, not a string")
        missing = [c for c in columns if c not in self.schema.names]
        if missing:
            raise ColumnNotFoundError(
                f"no column(s) {missing} in {self._uri}; columns are {self.schema.names}"
            )
        return list(columns)

    def _predicate(self, filter: str | pc.Expression | None) -> pc.Expression | None:
        if filter is None:
            return None
        from s3ddb.expressions import parse_predicate

        return parse_predicate(filter, self.schema)

    def _read_fragment(
        self, fragment: FragmentMetadata, columns: list[str], predicate: pc.Expression | None
    ) -> pa.Table:
        needed = list(columns)
        if predicate is not None:
            from s3ddb.expressions import referenced_columns

            needed += [c for c in sorted(referenced_columns(predicate)) if c not in needed]
        table = read_fragment(self._handler.store, fragment, self._manifest.schema, needed)
        if fragment.deletion_file is not None:
            keep = read_deletion_mask(self._handler.store, fragment)
            table = table.filter(keep)
        if predicate is not None:
            table = table.filter(predicate)
        return table.select(columns)

    def to_batches(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of the pinned version, fragment by fragment, in order."""
        names = self._resolve_columns(columns)
        predicate = self._predicate(filter)
        fragments = list(self._manifest.fragments)
        if len(fragments) <= 1:
            for fragment in fragments:
                yield from self._read_fragment(fragment, names, predicate).to_batches()
            return
        # Object stores reward parallel reads; results still come out in order.
        with ThreadPoolExecutor(max_workers=min(8, len(fragments))) as pool:
            for table in pool.map(lambda f: self._read_fragment(f, names, predicate), fragments):
                yield from table.to_batches()

    def to_table(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> pa.Table:
        """The pinned version's rows as one Table.

        Args:
            columns: column names to read (default all), in this order.
            filter: SQL-like predicate text ("id < 10 AND x = 'a'") or a pyarrow
                Expression.
            limit, offset: slice of the result.

        Raises:
            ColumnNotFoundError, InvalidExpressionError: bad columns or filter.
        """
        names = self._resolve_columns(columns)
        schema = pa.schema([self.schema.field(n) for n in names])
        batches = list(self.to_batches(names, filter))
        table = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
        if offset or limit is not None:
            table = table.slice(offset or 0, limit)
        return table

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Number of rows (matching ``filter``) in the pinned version."""
        if filter is None:
            return self._manifest.num_rows
        predicate = self._predicate(filter)
        return sum(self._read_fragment(f, [], predicate).num_rows for f in self._manifest.fragments)

    def to_pandas(self, columns: list[str] | None = None, filter: Any = None) -> Any:
        return self.to_table(columns, filter).to_pandas()

    # --- writes -------------------------------------------------------------------

    def _commit(
        self,
        operation: Operation,
        base: Manifest | None,
        on_existing: OnExisting = "rebase",
        naming: NamingScheme = DEFAULT_NAMING,
    ) -> Dataset:
        read_version = base.version if base is not None else 0
        result = commit_transaction(
            self._handler,
            Transaction(read_version, operation),
            base,
            config=self._commit_config,
            on_existing=on_existing,
            naming=naming,
        )
        self._manifest = result.manifest
        self._last_commit = result
        return self

    def insert(self, data: Any, mode: Literal["append", "overwrite"] = "append") -> Dataset:
        """Append (or overwrite with) ``data``, reading from the pinned version.

        Moves this Dataset to the version it committed and returns it.

        Raises:
            SchemaMismatchError: appended data does not match the schema.
        """
        if mode not in ("append", "overwrite"):
            raise InvalidInputError(f"insert mode must be 'append' or 'overwrite', got {mode!r}")
        table = to_arrow_table(data)
        store = self._handler.store
        if mode == "append":
            table = conform(table, self.schema, where=self._uri)
            if table.num_rows == 0:
                return self
            fragments = write_fragments_from_table(store, table, self._manifest.schema)
            return self._commit(Append(tuple(fragments)), self._manifest)
        schema = self._manifest.schema.with_arrow(table.schema)
        fragments = write_fragments_from_table(store, table, schema)
        return self._commit(Overwrite(tuple(fragments), schema), self._manifest)

    def restore(self) -> Dataset:
        """Make the pinned version the latest, as a new version; returns self moved there."""
        latest = _load_latest(self._handler, self._uri)
        return self._commit(Restore(self.version), latest)

    @staticmethod
    def commit(
        uri: str | os.PathLike[str],
        operation: Operation,
        read_version: int | None,
        storage_options: dict[str, Any] | None = None,
        commit_config: CommitConfig | None = None,
    ) -> Dataset:
        """Commit an operation built elsewhere (e.g. fragments from workers).

        ``read_version`` is the version the operation was computed from (None or 0 for
        a new dataset).

        Raises:
            VersionNotFoundError: ``read_version`` does not exist.
            CommitConflictError and subclasses, CommitStateUnknownError: see commit.
        """
        text = os.fspath(uri)
        handler = open_handler(text, storage_options)
        handler.validate()
        base = _load_version(handler, read_version, text) if read_version else None
        if (
            base is None
            and handler.latest_location() is not None
            and not isinstance(operation, Overwrite)
        ):
            raise InvalidInputError("read_version is required for an existing dataset")
        ds = Dataset(
            text,
            handler,
            base or _placeholder_manifest(),
            storage_options=storage_options,
            commit_config=commit_config,
        )
        return ds._commit(operation, base)


def _open_validated(uri: str, storage_options: dict[str, Any] | None) -> CommitHandler:
    """The commit handler for ``uri``, checked before anything is read or written
    (e.g. a missing DynamoDB table fails here)."""
    handler = open_handler(uri, storage_options)
    handler.validate()
    return handler


def _placeholder_manifest() -> Manifest:
    return Manifest(version=0, schema=DatasetSchema.assign(pa.schema([])), fragments=())


def _load_version(handler: CommitHandler, version: int | None, uri: str) -> Manifest:
    if version is None:
        return _load_latest(handler, uri)
    if not isinstance(version, int) or isinstance(version, bool):
        raise InvalidInputError(f"version must be an int or a tag name, got {version!r}")
    try:
        location = handler.location_of(version)
    except VersionNotFoundError:
        latest = handler.latest_location()
        if latest is None:
            raise DatasetNotFoundError(f"no dataset at {uri}") from None
        raise VersionNotFoundError(
            f"version {version} of {uri} does not exist (latest is {latest.version})"
        ) from None
    return handler.load_manifest(location)


def _load_latest(handler: CommitHandler, uri: str) -> Manifest:
    location = handler.latest_location()
    if location is None:
        raise DatasetNotFoundError(f"no dataset at {uri} (no committed version)")
    return handler.load_manifest(location)


def dataset(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
    *,
    commit_config: CommitConfig | None = None,
) -> Dataset:
    """Open the dataset at ``uri``, pinned at ``version`` (default: latest).

    Raises:
        DatasetNotFoundError: nothing is committed at ``uri``.
        VersionNotFoundError: no such version or tag.
        ManifestCorruptError: the manifest is truncated or corrupt.
        ManifestFinalizationError: (s3+ddb) the newest version cannot be finalized.
        ExternalStoreTableError: (s3+ddb) the DynamoDB table is missing or wrong.
    """
    text = os.fspath(uri)
    handler = open_handler(text, storage_options)
    handler.validate()
    if isinstance(version, str):
        ds = Dataset(
            text,
            handler,
            _load_latest(handler, text),
            storage_options=storage_options,
            commit_config=commit_config,
        )
        return ds.checkout_version(version)
    manifest = _load_version(handler, version, text)
    return Dataset(
        text, handler, manifest, storage_options=storage_options, commit_config=commit_config
    )


def write_dataset(
    data: Any,
    uri: str | os.PathLike[str],
    mode: WriteMode = "create",
    schema: pa.Schema | None = None,
    storage_options: dict[str, Any] | None = None,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    commit_config: CommitConfig | None = None,
    enable_v2_manifest_paths: bool = True,
) -> Dataset:
    """Write ``data`` to the dataset at ``uri`` and return it at the new version.

    Modes: "create" (fail if a dataset exists), "append" (create if missing),
    "overwrite" (replace, or create). ``enable_v2_manifest_paths`` chooses the manifest
    naming scheme of a new dataset (V2 by default; an existing dataset keeps its own).

    Raises:
        DatasetAlreadyExistsError: ``mode="create"`` and a dataset exists (nothing is
            written).
        SchemaMismatchError: appended data does not match the dataset's schema.
        InvalidInputError: bad mode, data or URI.
    """
    if mode not in _MODES:
        raise InvalidInputError(f"mode must be one of {_MODES}, got {mode!r}")
    if max_rows_per_file < 1:
        raise InvalidInputError("max_rows_per_file must be >= 1")
    text = os.fspath(uri)
    parse_uri(text)
    table = to_arrow_table(data, schema)
    handler = open_handler(text, storage_options)
    handler.validate()  # fail before anything is written (e.g. missing DynamoDB table)
    latest = handler.latest_location()
    store = handler.store
    base: Manifest | None = None
    on_existing: OnExisting = "rebase"
    if latest is not None:
        if mode == "create":
            raise DatasetAlreadyExistsError(
                f"a dataset already exists at {text} (version {latest.version}); "
                "use mode='append' or mode='overwrite'"
            )
        base = handler.load_manifest(latest)
    operation: Operation
    if base is not None and mode == "append":
        table = conform(table, base.schema.arrow, where=text)
        if table.num_rows == 0:
            return Dataset(
                text, handler, base, storage_options=storage_options, commit_config=commit_config
            )
        fragments = write_fragments_from_table(
            store, table, base.schema, max_rows_per_file=max_rows_per_file
        )
        operation = Append(tuple(fragments))
    else:
        ds_schema = (
            base.schema.with_arrow(table.schema)
            if base is not None
            else DatasetSchema.assign(table.schema)
        )
        fragments = write_fragments_from_table(
            store, table, ds_schema, max_rows_per_file=max_rows_per_file
        )
        operation = Overwrite(tuple(fragments), ds_schema)
        if base is None:
            on_existing = {"create": "error", "append": "append", "overwrite": "rebase"}[mode]  # type: ignore[assignment]
    ds = Dataset(
        text,
        handler,
        base or _placeholder_manifest(),
        storage_options=storage_options,
        commit_config=commit_config,
    )
    naming = NamingScheme.V2 if enable_v2_manifest_paths else NamingScheme.V1
    return ds._commit(operation, base, on_existing, naming)
