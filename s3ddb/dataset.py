"""Datasets: pinned-snapshot reads, and writes that become transactions.

A :class:`Dataset` is pinned to one version: every read sees exactly that version,
whatever other writers commit meanwhile. A write computes its change from the pinned
version, commits it with that version as ``read_version`` (rebasing over concurrent
commits where the conflict rules allow) and moves the Dataset to the version it
created.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb._data import to_arrow_table
from s3ddb.commit.committer import CommitConfig, CommitResult, OnExisting, commit_transaction
from s3ddb.commit.data_replacement import DataReplacement, check_replacement
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.commit.row_operations import Delete, Update
from s3ddb.commit.transaction import Append, Operation, Overwrite, Restore, Transaction
from s3ddb.connect import open_handler
from s3ddb.errors import (
    ColumnNotFoundError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    TooMuchWriteContentionError,
    VersionNotFoundError,
)
from s3ddb.format.bases import FileResolver
from s3ddb.format.datafile import (
    DEFAULT_MAX_ROWS_PER_FILE,
    write_fragments_from_table,
)
from s3ddb.format.fragment import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import DEFAULT_NAMING, U64_MAX, NamingScheme
from s3ddb.format.schema import DatasetSchema, conform
from s3ddb.io.parallel import PendingWrites
from s3ddb.io.uri import parse_uri
from s3ddb.scan import read_visible_rows

if TYPE_CHECKING:
    from s3ddb.cleanup import CleanupStats
    from s3ddb.index.query import IndexedScan
    from s3ddb.merge_insert import MergeInsertBuilder
    from s3ddb.optimize import DatasetOptimizer
    from s3ddb.tags import Tags

WriteMode = Literal["create", "append", "overwrite"]
T = TypeVar("T")
log = logging.getLogger(__name__)

#: How often delete/update/merge_insert re-execute after a retryable conflict, and
#: for how long at most (seconds). Rebasable conflicts never count: the commit loop
#: resolves those itself.
DEFAULT_CONFLICT_RETRIES = 10
DEFAULT_RETRY_TIMEOUT = 120.0
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
        self._retries = DEFAULT_CONFLICT_RETRIES
        self._retry_timeout = DEFAULT_RETRY_TIMEOUT
        self._uri = uri
        self._handler = handler
        self._manifest = manifest
        self._storage_options = dict(storage_options or {})
        self._commit_config = commit_config or CommitConfig()
        self._last_commit: CommitResult | None = None
        self._last_conflict_retries = 0

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
    def last_conflict_retries(self) -> int:
        """How often this Dataset's last delete/update/merge_insert/insert was
        re-executed on a newer version after a retryable conflict."""
        return self._last_conflict_retries

    @property
    def last_commit(self) -> CommitResult | None:
        """How this Dataset's last write committed (transaction, attempts), if any."""
        return self._last_commit

    def get_fragments(self) -> list[FragmentMetadata]:
        return list(self._manifest.fragments)

    @property
    def optimize(self) -> DatasetOptimizer:
        """Maintenance: ``ds.optimize.compact_files(...)``."""
        from s3ddb.optimize import DatasetOptimizer

        return DatasetOptimizer(self)

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
        self,
        fragment: FragmentMetadata,
        columns: list[str],
        predicate: pc.Expression | None,
        indexed: IndexedScan | None = None,
    ) -> pa.Table:
        table = indexed.read(fragment, columns) if indexed is not None else None
        if table is not None:
            return table
        return read_visible_rows(self._files(), fragment, self._manifest.schema, columns, predicate)

    def _files(self) -> FileResolver:
        """Where the pinned version's files are (its root and its base paths)."""
        return FileResolver.for_manifest(self._handler.store, self._manifest)

    def _indexed(
        self, filter: str | pc.Expression | None, predicate: pc.Expression | None
    ) -> IndexedScan | None:
        """The index lookup for ``filter``, if an index of this version applies."""
        if not self._manifest.indices:
            return None
        from s3ddb.index.query import plan_indexed_scan

        return plan_indexed_scan(self._handler.store, self._manifest, filter, predicate)

    def to_batches(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of the pinned version, fragment by fragment, in order."""
        names = self._resolve_columns(columns)
        predicate = self._predicate(filter)
        indexed = self._indexed(filter, predicate)
        fragments = list(self._manifest.fragments)
        if len(fragments) <= 1:
            for fragment in fragments:
                yield from self._read_fragment(fragment, names, predicate, indexed).to_batches()
            return
        # Object stores reward parallel reads; results still come out in order.
        with ThreadPoolExecutor(max_workers=min(8, len(fragments))) as pool:
            read = lambda f: self._read_fragment(f, names, predicate, indexed)  # noqa: E731
            for table in pool.map(read, fragments):
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
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"limit must be an int >= 0, got {limit!r}")
        if limit is not None:
            batches = self._first_rows(names, filter, (offset or 0) + limit)
        else:
            batches = list(self.to_batches(names, filter))
        table = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
        if offset or limit is not None:
            table = table.slice(offset or 0, limit)
        return table

    def _first_rows(
        self, columns: list[str], filter: str | pc.Expression | None, wanted: int
    ) -> list[pa.RecordBatch]:
        """Batches holding at least the first ``wanted`` rows: fragments are read in
        order only until there are enough (``limit`` must not read the whole version)."""
        predicate = self._predicate(filter)
        indexed = self._indexed(filter, predicate)
        batches: list[pa.RecordBatch] = []
        rows = 0
        for fragment in self._manifest.fragments:
            if rows >= wanted:
                break
            table = self._read_fragment(fragment, columns, predicate, indexed)
            batches.extend(table.to_batches())
            rows += table.num_rows
        return batches

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Number of rows (matching ``filter``) in the pinned version."""
        if filter is None:
            return self._manifest.num_rows
        predicate = self._predicate(filter)
        indexed = self._indexed(filter, predicate)
        fragments = self._manifest.fragments
        return sum(self._read_fragment(f, [], predicate, indexed).num_rows for f in fragments)

    def to_pandas(self, columns: list[str] | None = None, filter: Any = None) -> Any:
        return self.to_table(columns, filter).to_pandas()

    # --- writes -------------------------------------------------------------------

    def _commit(
        self,
        operation: Operation,
        base: Manifest | None,
        on_existing: OnExisting = "rebase",
        naming: NamingScheme = DEFAULT_NAMING,
        pending: PendingWrites | None = None,
    ) -> Dataset:
        read_version = base.version if base is not None else 0
        result = commit_transaction(
            self._handler,
            Transaction(read_version, operation),
            base,
            config=self._commit_config,
            on_existing=on_existing,
            naming=naming,
            pending=pending,
        )
        self._manifest = result.manifest
        self._last_commit = result
        return self

    def insert(
        self,
        data: Any,
        mode: Literal["append", "overwrite"] = "append",
        *,
        conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> Dataset:
        """Append (or overwrite with) ``data``, reading from the pinned version.

        Moves this Dataset to the version it committed and returns it. An append
        rebases over any concurrent commit but an overwrite or restore, after which it
        is re-executed on the newest version (see :meth:`update` for the retry
        arguments).

        Raises:
            SchemaMismatchError: appended data does not match the schema.
        """
        if mode not in ("append", "overwrite"):
            raise InvalidInputError(f"insert mode must be 'append' or 'overwrite', got {mode!r}")
        table = to_arrow_table(data)
        store = self._handler.store

        def plan(manifest: Manifest, pending: PendingWrites) -> tuple[Operation | None, None]:
            if mode == "overwrite":
                schema = manifest.schema.with_arrow(table.schema)
                fragments = write_fragments_from_table(store, table, schema, pending=pending)
                return Overwrite(tuple(fragments), schema), None
            rows = conform(table, manifest.schema.arrow, where=self._uri)
            if rows.num_rows == 0:
                return None, None
            fragments = write_fragments_from_table(store, rows, manifest.schema, pending=pending)
            return Append(tuple(fragments)), None

        self._run_planned("insert", plan, conflict_retries, retry_timeout, uploads=True)
        return self

    def _run_planned(
        self,
        what: str,
        plan: Callable[..., tuple[Operation | None, T]],
        conflict_retries: int | None,
        retry_timeout: float | None,
        *,
        uploads: bool = False,
    ) -> T:
        """Plan an operation on the pinned version and commit it; on a retryable
        conflict plan again on the newest version (never re-commit the stale plan).

        With ``uploads``, ``plan(manifest, pending)`` also gets a
        :class:`PendingWrites` for the files it writes: they upload beside the
        commit's own (otherwise ``plan(manifest)``).

        The Dataset moves to the version committed, or, if the last plan changed
        nothing, to the version it planned on. If this raises, the Dataset stays where
        it was and the failed attempts' files are deleted.

        Raises:
            RetryableCommitConflictError: ``conflict_retries`` is 0 and a concurrent
                commit invalidated the plan.
            TooMuchWriteContentionError: retries exhausted (by count or time).
            IncompatibleTransactionError: the operation can no longer be done.
        """
        retries = self._retries if conflict_retries is None else conflict_retries
        timeout = self._retry_timeout if retry_timeout is None else retry_timeout
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise InvalidInputError(f"conflict_retries must be an int >= 0, got {retries!r}")
        if timeout <= 0:
            raise InvalidInputError(f"retry_timeout must be > 0, got {timeout!r}")
        deadline = time.monotonic() + timeout
        base = self._manifest
        attempt = self._last_conflict_retries = 0
        while True:
            pending = PendingWrites() if uploads else None
            operation, result = plan(base, pending) if uploads else plan(base)
            if operation is None:
                self._manifest = base
                return result
            try:
                self._commit(operation, base, pending=pending)
                return result
            except RetryableCommitConflictError as exc:
                if retries == 0:
                    raise
                if attempt >= retries or time.monotonic() > deadline:
                    attempt += 1
                    raise TooMuchWriteContentionError(
                        f"{what} on {self._uri} gave up after {attempt} conflicting "
                        f"attempts ({retries} retries / {timeout:g} s); last conflict: {exc}"
                    ) from exc
                attempt = self._last_conflict_retries = attempt + 1
                log.info("%s: %s; re-executing on the newest version", what, exc)
                base = _load_latest(self._handler, self._uri, finalize=False)

    def delete(
        self,
        predicate: str | pc.Expression,
        *,
        conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> dict[str, int]:
        """Delete the rows matching ``predicate`` (SQL text or a pyarrow Expression).

        Reads the pinned version; commits a new version unless no row matches, and
        moves this Dataset there. Concurrent deletes, appends and updates are merged
        (the predicate is also applied to rows they added); after an overwrite the
        delete is re-executed on the newest version.

        Returns ``{"num_deleted_rows": n}``.

        Raises:
            ColumnNotFoundError, InvalidExpressionError: a bad predicate; nothing is
                written.
            IncompatibleTransactionError: a restore committed meanwhile: the rows the
                delete chose are gone, and it is not re-executed (docs/conflicts.md).
            RetryableCommitConflictError, TooMuchWriteContentionError: see
                :meth:`update`.
        """
        from s3ddb.row_changes import plan_delete

        def plan(manifest: Manifest) -> tuple[Operation | None, None]:
            return plan_delete(self._handler.store, manifest, predicate), None

        prior = self._last_commit
        self._run_planned("delete", plan, conflict_retries, retry_timeout)
        return {"num_deleted_rows": self._rows_landed_since(prior, Delete)}

    def update(
        self,
        values: dict[str, str | pc.Expression],
        where: str | pc.Expression | None = None,
        *,
        rewrite: Literal["auto", "rows", "columns"] = "auto",
        conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> dict[str, int]:
        """Set ``values`` (``{"column": "SQL expression"}``) on the rows matching
        ``where`` (every row if None).

        ``rewrite`` chooses how changed rows are stored: "rows" moves them to new
        fragments, "columns" rewrites the changed columns of the touched fragments,
        "auto" picks columns when most rows of those fragments change and few columns.
        A concurrent commit that touched the same rows, or added rows ``where``
        matches, makes the update re-execute on the newest version, up to
        ``conflict_retries`` times (default 10) within ``retry_timeout`` seconds.

        Returns ``{"num_rows_updated": n}``.

        Raises:
            ColumnNotFoundError, InvalidExpressionError: bad values or predicate.
            SchemaMismatchError: a value would change a column's type, or put NULL in
                a NOT NULL column. Nothing is written.
            RetryableCommitConflictError: ``conflict_retries=0`` and a conflict.
            TooMuchWriteContentionError: the retries ran out.
            IncompatibleTransactionError: a restore committed meanwhile; not re-executed.
        """
        from s3ddb.row_changes import plan_update

        def plan(manifest: Manifest) -> tuple[Operation | None, None]:
            store = self._handler.store
            op = plan_update(store, manifest, values, where, rewrite=rewrite, uri=self._uri)
            return op, None

        prior = self._last_commit
        self._run_planned("update", plan, conflict_retries, retry_timeout)
        return {"num_rows_updated": self._rows_landed_since(prior, Update)}

    def _rows_landed_since(
        self, prior: CommitResult | None, kind: type[Delete] | type[Update]
    ) -> int:
        """Rows that the ``kind`` operation committed after ``prior`` deleted or changed
        (0 if it committed nothing).

        Counted from the transaction that landed, not the plan: a rebase may have
        merged rows deleted concurrently, or applied an update to rows appended
        concurrently.
        """
        landed = self._last_commit
        if landed is None or landed is prior:
            return 0
        operation = landed.transaction.operation
        if not isinstance(operation, kind):
            return 0
        return sum(len(rows) for rows in operation.affected_rows.values())

    def merge_insert(self, on: str | list[str]) -> MergeInsertBuilder:
        """Start an upsert keyed by ``on``; see :class:`s3ddb.merge_insert.MergeInsertBuilder`.

        Raises:
            ColumnNotFoundError: a key column does not exist.
        """
        from s3ddb.merge_insert import MergeInsertBuilder

        return MergeInsertBuilder(self, on)

    def cleanup_old_versions(
        self,
        older_than: dt.timedelta | None = None,
        retain_versions: int | None = None,
        delete_unverified: bool = False,
    ) -> CleanupStats:
        """Remove versions committed more than ``older_than`` ago (default 14 days),
        keeping the newest version, the ``retain_versions`` newest and every tagged
        version, with their DynamoDB rows, manifests, transaction files and the data and
        deletion files no kept version references; and files no version references (a
        crashed writer's) older than 7 days, or any age with ``delete_unverified``.

        Safe while writers commit (see :mod:`s3ddb.cleanup`). This Dataset stays pinned
        where it is; if its version was removed, reading files may fail.

        Returns:
            :class:`s3ddb.cleanup.CleanupStats`: versions and rows removed, and files
            and bytes removed per kind.

        Raises:
            InvalidInputError: bad arguments.
        """
        from s3ddb.cleanup import cleanup_old_versions

        return cleanup_old_versions(self, older_than, retain_versions, delete_unverified)

    @property
    def config(self) -> dict[str, str]:
        """The pinned version's dataset configuration (a copy)."""
        return dict(self._manifest.config)

    @property
    def metadata(self) -> dict[str, str]:
        """The pinned version's table metadata (a copy)."""
        return dict(self._manifest.table_metadata)

    def update_config(
        self,
        upsert: dict[str, str] | None = None,
        delete: list[str] | tuple[str, ...] = (),
        *,
        metadata_upsert: dict[str, str] | None = None,
        metadata_delete: list[str] | tuple[str, ...] = (),
    ) -> Dataset:
        """Set and delete keys of the configuration and table metadata, as one new
        version (an ``UpdateConfig``); data and schema are untouched, and older versions
        keep their values. A concurrent config change makes it re-apply on top.

        Raises:
            InvalidInputError: keys or values that are not strings, nothing to change,
                or a reserved key (``s3ddb.app_txn.*`` records streaming batches).
        """
        from s3ddb.commit.build import APP_TRANSACTION_PREFIX
        from s3ddb.commit.transaction import UpdateConfig

        operation = UpdateConfig(
            config_upsert=dict(upsert or {}),
            config_delete=tuple(delete),
            metadata_upsert=dict(metadata_upsert or {}),
            metadata_delete=tuple(metadata_delete),
        )
        keys = [*operation.metadata_upsert, *operation.metadata_delete]
        reserved = [k for k in keys if k.startswith(APP_TRANSACTION_PREFIX)]
        if reserved:
            raise InvalidInputError(f"table metadata keys {reserved} are reserved by s3ddb")
        if not (keys or operation.config_upsert or operation.config_delete):
            raise InvalidInputError("update_config needs at least one key to set or delete")
        self._run_planned("update_config", lambda manifest: (operation, None), None, None)
        return self

    def delete_config_keys(self, keys: list[str] | tuple[str, ...]) -> Dataset:
        """Delete configuration keys, as :meth:`update_config` does."""
        return self.update_config(delete=tuple(keys))

    def restore(self) -> Dataset:
        """Make the pinned version the latest, as a new version; returns self moved there."""
        latest = _load_latest(self._handler, self._uri, finalize=False)
        return self._commit(Restore(self.version), latest)

    # --- schema evolution (logic and full contracts in s3ddb/schema_evolution.py) ---

    def add_columns(
        self,
        transforms: Any,
        read_columns: list[str] | None = None,
        *,
        conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> Dataset:
        """Add columns from ``{"name": "SQL expression"}`` or from a table aligned with
        the visible rows (a ``Merge``); see :func:`s3ddb.schema_evolution.add_columns`."""
        from s3ddb import schema_evolution as se

        se.add_columns(self, transforms, read_columns, conflict_retries, retry_timeout)
        return self

    def drop_columns(
        self, columns: list[str], *, conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> Dataset:  # fmt: skip
        """Remove columns from the schema only (a ``Project``); see
        :func:`s3ddb.schema_evolution.drop_columns`."""
        from s3ddb import schema_evolution as se

        se.drop_columns(self, columns, conflict_retries, retry_timeout)
        return self

    def alter_columns(
        self, *alterations: dict[str, Any], conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> Dataset:  # fmt: skip
        """Rename, change nullability or safely widen columns (``{"path": "x", "name":
        "y", "nullable": True, "data_type": pa.int64()}``); see
        :func:`s3ddb.schema_evolution.alter_columns`."""
        from s3ddb import schema_evolution as se

        se.alter_columns(self, alterations, conflict_retries, retry_timeout)
        return self

    def replace_schema_metadata(self, metadata: dict[str, str]) -> Dataset:
        """Replace the schema's metadata (an ``UpdateConfig``)."""
        from s3ddb import schema_evolution as se

        se.replace_schema_metadata(self, metadata)
        return self

    def replace_field_metadata(self, field: str, metadata: dict[str, str]) -> Dataset:
        """Replace the metadata of top-level column ``field`` (an ``UpdateConfig``)."""
        from s3ddb import schema_evolution as se

        se.replace_field_metadata(self, field, metadata)
        return self

    # --- clones ---
    def shallow_clone(
        self,
        target: str | os.PathLike[str],
        version: int | str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> Dataset:
        """Create a dataset at ``target`` whose version 1 is ``version`` (a number or
        tag; default the pinned version) of this one, copying no file: it reads this
        dataset's files through a base path. Writes to the clone stay in its root; keep
        the source's files (tag the version) for as long as the clone needs them.
        ``storage_options`` are the target's (default: this dataset's).

        Raises:
            DatasetAlreadyExistsError: a dataset exists at ``target``.
            VersionNotFoundError: no such version or tag.
        """
        from s3ddb.clones import shallow_clone

        return shallow_clone(self, target, version, storage_options)

    def deep_clone(
        self,
        target: str | os.PathLike[str],
        version: int | str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> Dataset:
        """Like :meth:`shallow_clone`, but first copies every file ``version``
        references into ``target`` (server-side on S3, in parallel): the clone is
        independent of this dataset. The copies are deleted if the commit fails.

        Raises:
            DatasetAlreadyExistsError: a dataset exists at ``target``.
            VersionNotFoundError: no such version or tag.
        """
        from s3ddb.clones import deep_clone

        return deep_clone(self, target, version, storage_options)

    # --- indices ---
    def create_scalar_index(
        self,
        column: str,
        index_type: str = "BTREE",
        name: str | None = None,
        replace: bool = True,
    ) -> Dataset:
        """Build a scalar index of ``column`` and commit it (a ``CreateIndex``); filters
        and merge_insert keys on the column then read only the rows it points to.

        ``name`` defaults to ``<column>_idx``; with ``replace`` an index of that name is
        rebuilt. Moves this Dataset to the version committed (see docs/indices.md).

        Raises:
            ColumnNotFoundError: no such column.
            UnsupportedIndexError: ``index_type`` is not "BTREE", or the column's type
                cannot be indexed.
            IndexExistsError: the name is taken and ``replace=False``. Nothing is written.
        """
        from s3ddb.index.api import create_scalar_index

        create_scalar_index(self, column, index_type, name, replace)
        return self

    def list_indices(self) -> list[dict[str, Any]]:
        """The pinned version's indices: name, type, uuid, fields, version, fragment_ids."""
        from s3ddb.index.api import list_indices

        return list_indices(self._manifest)

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
            InvalidInputError: a DataReplacement that does not fit ``read_version``
                (missing fragment or file, another row count); nothing is committed.
            CommitConflictError and subclasses, CommitStateUnknownError: see commit.
        """
        text = os.fspath(uri)
        handler = _open_validated(text, storage_options)
        base = _load_version(handler, read_version, text) if read_version else None
        if (
            base is None
            and handler.latest_location() is not None
            and not isinstance(operation, Overwrite)
        ):
            raise InvalidInputError("read_version is required for an existing dataset")
        if isinstance(operation, DataReplacement) and base is not None:
            check_replacement(handler.store, base, operation)
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
    if not 1 <= version < U64_MAX:
        latest = handler.latest_location()
        if latest is None:
            raise DatasetNotFoundError(f"no dataset at {uri}")
        raise VersionNotFoundError(
            f"version {version} of {uri} does not exist (versions are numbered from 1; "
            f"latest is {latest.version})"
        )
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


def _load_latest(handler: CommitHandler, uri: str, *, finalize: bool = True) -> Manifest:
    """The newest manifest (``finalize=False``: for writers, see
    :meth:`CommitHandler.latest_location`)."""
    location = handler.latest_location(finalize=finalize)
    if location is None:
        raise DatasetNotFoundError(f"no dataset at {uri} (no committed version)")
    return load_newest(handler, location, finalize=finalize)


def load_newest(
    handler: CommitHandler, location: ManifestLocation, *, finalize: bool = False
) -> Manifest:
    """The manifest at ``location``, the newest version when it was listed; if cleanup
    removed it meanwhile (a newer version was committed), the newest one then."""
    for _ in range(10):
        try:
            return handler.load_manifest(location)
        except FileNotFoundError:
            newer = handler.latest_location(finalize=finalize)
            if newer is None or newer.version <= location.version:
                raise
            location = newer
    return handler.load_manifest(location)


def dataset(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
    *,
    commit_config: CommitConfig | None = None,
    asof: dt.datetime | str | None = None,
) -> Dataset:
    """Open the dataset at ``uri``, pinned at ``version`` (default: latest).

    ``asof`` pins the newest version committed at or before that time instead (a
    datetime, or ISO 8601 text; without a time zone it is UTC).

    Raises:
        DatasetNotFoundError: nothing is committed at ``uri``.
        VersionNotFoundError: no such version or tag, or nothing committed by ``asof``.
        InvalidInputError: both ``version`` and ``asof``, or an unreadable ``asof``.
        ManifestCorruptError: the manifest is truncated or corrupt.
        ManifestFinalizationError: (s3+ddb) the newest version cannot be finalized.
        ExternalStoreTableError: (s3+ddb) the DynamoDB table is missing or wrong.
    """
    text = os.fspath(uri)
    handler = _open_validated(text, storage_options)
    if asof is not None:
        if version is not None:
            raise InvalidInputError("give version or asof, not both")
        version = _version_as_of(handler, text, asof)
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


def _version_as_of(handler: CommitHandler, uri: str, asof: dt.datetime | str) -> int:
    """The newest version of ``uri`` committed at or before ``asof``."""
    when = asof
    if isinstance(when, str):
        try:
            when = dt.datetime.fromisoformat(when.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(
                f"asof must be a datetime or ISO 8601 text, got {asof!r}"
            ) from None
    if not isinstance(when, dt.datetime):
        raise InvalidInputError(f"asof must be a datetime or ISO 8601 text, got {asof!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    history = Dataset(uri, handler, _load_latest(handler, uri)).versions()
    before = [v.version for v in history if v.timestamp <= when]
    if not before:
        first = history[0].timestamp.isoformat() if history else "never"
        raise VersionNotFoundError(
            f"no version of {uri} was committed at or before {when.isoformat()} "
            f"(the first was committed {first})"
        )
    return max(before)


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
    handler = _open_validated(text, storage_options)
    naming = NamingScheme.V2 if enable_v2_manifest_paths else NamingScheme.V1

    def write(latest: ManifestLocation | None) -> Dataset:
        return _write_version(
            handler, text, table, mode, latest, naming, max_rows_per_file,
            storage_options, commit_config,
        )  # fmt: skip

    # A process that committed the newest version it knows of builds on it without
    # asking (the conditional write still decides). If another writer changed the
    # dataset meanwhile in a way the write cannot rebase over, plan it again on the
    # real newest version.
    presumed = handler.presumed_latest() if mode != "create" else None
    if presumed is not None:
        try:
            return write(presumed)
        except (RetryableCommitConflictError, SchemaMismatchError):
            log.info("write to %s: the dataset changed since this process's commit", text)
    return write(handler.latest_location(finalize=False))


def _write_version(
    handler: CommitHandler,
    text: str,
    table: pa.Table,
    mode: WriteMode,
    latest: ManifestLocation | None,
    naming: NamingScheme,
    max_rows_per_file: int,
    storage_options: dict[str, Any] | None,
    commit_config: CommitConfig | None,
) -> Dataset:
    """write_dataset's plan and commit on top of ``latest``."""
    store = handler.store
    # Data files upload beside the transaction file and manifest (S3).
    pending = PendingWrites()
    base: Manifest | None = None
    on_existing: OnExisting = "rebase"
    if latest is not None:
        if mode == "create":
            raise DatasetAlreadyExistsError(
                f"a dataset already exists at {text} (version {latest.version}); "
                "use mode='append' or mode='overwrite'"
            )
        base = load_newest(handler, latest)
    operation: Operation
    if base is not None and mode == "append":
        table = conform(table, base.schema.arrow, where=text)
        if table.num_rows == 0:
            return Dataset(
                text, handler, base, storage_options=storage_options, commit_config=commit_config
            )
        fragments = write_fragments_from_table(
            store, table, base.schema, max_rows_per_file=max_rows_per_file, pending=pending
        )
        operation = Append(tuple(fragments))
    else:
        ds_schema = (
            base.schema.with_arrow(table.schema)
            if base is not None
            else DatasetSchema.assign(table.schema)
        )
        fragments = write_fragments_from_table(
            store, table, ds_schema, max_rows_per_file=max_rows_per_file, pending=pending
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
    return ds._commit(operation, base, on_existing, naming, pending)
