"""Datasets: pinned-snapshot reads, and writes that become transactions.

A :class:`Dataset` is pinned to one version: every read sees exactly that version,
whatever other writers commit meanwhile. A write computes its change from the pinned
version, commits it with that version as ``read_version`` (rebasing over concurrent
commits where the conflict rules allow) and moves the Dataset to the version it
created.

This module is the public surface: each method states its contract and hands the
work to the package that owns it (:mod:`s3ddb.reading`, :mod:`s3ddb.writes`,
:mod:`s3ddb.index`, :mod:`s3ddb.maintenance`), all of which work on
:class:`s3ddb.versions.pinned.PinnedVersion` and none of which imports this module.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb import pylance_compat
from s3ddb.arguments import check_int
from s3ddb.commit.builders import STABLE_ROW_IDS_KEY
from s3ddb.commit.committer import CommitConfig, OnExisting
from s3ddb.errors import InvalidInputError
from s3ddb.format.datafile import (
    DEFAULT_MAX_ROWS_PER_FILE,
    FileLayout,
    WriteProgress,
)
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import NamingScheme
from s3ddb.index.api import (
    IndexDescription,
    create_scalar_index,
    describe_indices,
    index_statistics,
    list_indices,
)
from s3ddb.io.uri import parse_uri
from s3ddb.maintenance.cleanup import CleanupStats, cleanup_old_versions
from s3ddb.maintenance.compaction import DatasetOptimizer
from s3ddb.maintenance.drop import drop as drop_dataset
from s3ddb.maintenance.inspection import DatasetStatistics, check_files
from s3ddb.open_formats.publisher import Rebuilt, enabled_formats, format_names
from s3ddb.operations import Operation, Transaction
from s3ddb.reading.changes import change_schema, version_changes
from s3ddb.reading.scanner import Scanner, require_pandas, take
from s3ddb.reading.version_delta import DatasetDelta, dataset_delta
from s3ddb.versions.opening import (
    VersionInfo,
    load_latest,
    load_newest,
    load_version,
    open_validated,
    version_as_of,
)
from s3ddb.versions.pinned import (
    DEFAULT_CONFLICT_RETRIES,
    DEFAULT_RETRY_TIMEOUT,
    PinnedVersion,
    plan_and_commit,
)
from s3ddb.writes import publication
from s3ddb.writes import schema_evolution as se
from s3ddb.writes import version_writes as writes
from s3ddb.writes.clones import deep_clone, shallow_clone
from s3ddb.writes.merge_insert import MergeInsertBuilder
from s3ddb.writes.user_data import to_arrow_table
from s3ddb.writes.version_writes import MODES, WriteMode

__all__ = [
    "DEFAULT_CONFLICT_RETRIES",
    "DEFAULT_RETRY_TIMEOUT",
    "Dataset",
    "VersionInfo",
    "WriteMode",
    "dataset",
    "load_newest",
    "write_dataset",
]


class Dataset(PinnedVersion):
    """A dataset pinned at one version. Open with :func:`dataset` or :func:`write_dataset`.

    Identity and history (``uri``, ``version``, ``latest_version``, ``schema``,
    ``manifest``, ``versions()``, ``checkout_version()``, ``tags``, ``last_commit``)
    come from :class:`~s3ddb.versions.pinned.PinnedVersion`. Every other member is
    here, pylance's ``LanceDataset`` members among them (``checkout_latest``,
    ``describe_indices``, ``stats``, ``validate``...); the pylance members s3ddb does
    not have raise UnsupportedOperationError with the reason
    (:data:`~s3ddb.pylance_compat.UNSUPPORTED_MEMBERS`; docs/pylance.md lists each,
    and tests/project/test_pylance_surface.py checks both against pylance's own classes).
    """

    if not TYPE_CHECKING:  # (mypy keeps reporting unknown attributes)

        def __getattr__(self, name: str) -> Any:
            return pylance_compat.refusal(self, name, pylance_compat.UNSUPPORTED_MEMBERS)

    @property
    def optimize(self) -> DatasetOptimizer:
        """Maintenance: ``ds.optimize.compact_files(...)``."""
        return DatasetOptimizer(self)

    @property
    def config(self) -> dict[str, str]:
        """The pinned version's dataset configuration (a copy; ``ds.config()`` also
        reads it, as in pylance)."""
        return pylance_compat.CallableDict(self._manifest.config)

    @property
    def metadata(self) -> dict[str, str]:
        """The pinned version's table metadata (a copy)."""
        return dict(self._manifest.table_metadata)

    # --- reads --------------------------------------------------------------------

    def to_batches(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
        **options: Any,
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of the pinned version, fragment by fragment, in order, as
        ``scanner(...).to_batches()`` (memory bounded by a few fragments).

        Raises:
            ColumnNotFoundError, InvalidExpressionError: bad columns or filter.
        """
        return self.scanner(columns, filter, limit, offset, **options).to_batches()

    def to_table(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
        **options: Any,
    ) -> pa.Table:
        """The pinned version's rows as one Table.

        Args:
            columns: column names to read (default all), in this order.
            filter: SQL-like predicate text ("id < 10 AND x = 'a'") or a pyarrow
                Expression.
            limit, offset: slice of the result (``limit`` reads fragments only until
                it has enough rows).
            options: pylance's scan options, as :meth:`scanner`.

        Raises:
            ColumnNotFoundError, InvalidExpressionError: bad columns or filter.
            InvalidInputError: a bad ``limit``.
        """
        return self.scanner(columns, filter, limit, offset, **options).to_table()

    def count_rows(self, filter: str | pc.Expression | None = None, **options: Any) -> int:
        """Number of rows (matching ``filter``) in the pinned version."""
        return self.scanner([], filter, **options).count_rows()

    def delta(
        self,
        compared_against: int | None = None,
        *,
        begin_version: int | None = None,
        end_version: int | None = None,
    ) -> DatasetDelta:
        """What changed between two versions of a dataset with stable row ids, as
        pylance's ``LanceDataset.delta`` gives it: ``compared_against`` (the pinned
        version against an older one), or ``begin_version`` (excluded) and
        ``end_version`` (included). Its ``get_inserted_rows()``,
        ``get_updated_rows()``, ``get_deleted_row_ids()`` and ``list_transactions()``
        are described in docs/changes.md.

        Raises:
            InvalidInputError: both forms given or neither; the begin after the end.
            VersionNotFoundError: the end version does not exist.
        """
        return dataset_delta(
            self, compared_against, begin_version=begin_version, end_version=end_version
        )

    def changes(self, start_version: int, end_version: int | None = None) -> pa.Table:
        """Every row change of the versions after ``start_version`` up to
        ``end_version`` (default: the pinned version), one row per change, in version
        order (docs/changes.md).

        Columns: the dataset's as of ``end_version`` (matched by field id: a renamed
        column keeps its values; one the changed version lacked reads as null; a
        dropped one is absent), then ``_change_type`` (``insert`` or ``delete``; an
        update is a ``delete`` of the old row and an ``insert`` of the new one, as
        long as rows have no stable ids), ``_commit_version`` and
        ``_commit_timestamp``. Deleted rows carry their old values. Every change of
        every version is listed, not a net difference (as Delta Lake's change data
        feed); versions that change no row (compaction, indices, configuration,
        schema changes) add none; an overwrite or a restore deletes every row and
        inserts every new one. Only what each version changed is read.

        Raises:
            InvalidInputError: ``start_version`` after ``end_version``; a version of
                the range that does not exist or was removed by cleanup (named).
            StoredMetadataError, ManifestCorruptError: a manifest or deletion file read
                is missing or corrupt.
        """
        tables = list(version_changes(self, start_version, end_version))
        if not tables:
            end = self if end_version is None else self.checkout_version(end_version)
            return change_schema(end.schema).empty_table()
        return pa.concat_tables(tables)

    def change_batches(
        self, start_version: int, end_version: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """:meth:`changes` as record batches, version by version: memory holds about
        one fragment's changes at a time. The range is checked at the call.

        Raises:
            InvalidInputError, StoredMetadataError, ManifestCorruptError: as
                :meth:`changes`.
        """
        tables = version_changes(self, start_version, end_version)
        return (batch for table in tables for batch in table.to_batches())

    def to_pandas(self, columns: list[str] | None = None, filter: Any = None, **kw: Any) -> Any:
        """The rows as a pandas DataFrame (as :meth:`to_table`).

        Raises:
            ModuleNotFoundError: pandas is not installed (before anything is read).
        """
        require_pandas()
        return self.to_table(columns, filter, **kw).to_pandas()

    def slice(self, start: int, end: int, columns: list[str] | None = None) -> pa.Table:
        """The visible rows at positions ``start`` up to ``end`` (excluded), in scan order.

        Raises:
            InvalidInputError: a negative ``start``, or ``end`` before ``start``.
        """
        check_int("start", start, minimum=0)
        check_int("end", end, minimum=start)
        return Scanner(self, columns, None, end - start, start).to_table()

    # --- row writes ---------------------------------------------------------------

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
        writes.insert(self, data, mode, conflict_retries, retry_timeout)
        return self

    def delete(
        self,
        predicate: str | pc.Expression,
        *,
        conflict_retries: int | None = None,
        retry_timeout: float | dt.timedelta | None = None,
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
        return writes.delete(self, predicate, conflict_retries, retry_timeout)

    def update(
        self,
        values: dict[str, str | pc.Expression],
        where: str | pc.Expression | None = None,
        *,
        rewrite: Literal["auto", "rows", "columns"] = "auto",
        conflict_retries: int | None = None,
        retry_timeout: float | dt.timedelta | None = None,
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
        return writes.update(self, values, where, rewrite, conflict_retries, retry_timeout)

    def merge_insert(self, on: str | list[str]) -> MergeInsertBuilder:
        """Start an upsert keyed by ``on``; see :class:`s3ddb.MergeInsertBuilder`.

        Raises:
            ColumnNotFoundError: a key column does not exist.
        """
        return MergeInsertBuilder(self, on)

    def truncate_table(self) -> None:
        """Remove every row, keeping the schema, as one new version (an Overwrite)."""
        writes.insert(self, self.schema.empty_table(), "overwrite", None, None)

    # --- versions, configuration, maintenance ---------------------------------------

    def cleanup_old_versions(
        self,
        older_than: dt.timedelta | None = None,
        retain_versions: int | None = None,
        delete_unverified: bool = False,
        *,
        error_if_tagged_old_versions: bool = False,
        claim_window: dt.timedelta | None = None,
        **tuning: Any,
    ) -> CleanupStats:
        """Remove versions committed more than ``older_than`` ago (default 14 days),
        keeping the newest version, the ``retain_versions`` newest and every tagged
        version, with their DynamoDB rows, manifests, transaction files and the data and
        deletion files no kept version references; and files no version references (a
        crashed writer's, including a native Spark write's ``_spark_staging/<write
        id>/`` folder, judged by its newest file) older than 7 days, or any age with
        ``delete_unverified``.

        A version also stays until the version after it is ``claim_window`` old
        (default 10 minutes): a writer that saw it as the newest may still be claiming
        the next number, and must find that number taken. So right after a commit,
        even ``older_than=timedelta(0)`` removes nothing; the result says so, and
        when each version becomes removable. A shorter ``claim_window`` is safe only
        when no writer can be committing (like ``delete_unverified``).

        Safe while writers commit (see :mod:`s3ddb.maintenance.cleanup`). A version a
        tag names is kept even if the tag was created while this runs. If this stops
        midway (crash, kill, error), every version readers can find is whole, and the
        next cleanup removes what is left. Run one cleanup of a dataset at a time.
        This Dataset stays pinned where it is; if its version was removed, reading
        files may fail.

        Returns:
            :class:`s3ddb.maintenance.cleanup.CleanupStats`: versions and rows removed,
            files and bytes removed per kind, and each version kept with why
            (``versions_kept``: newest, tagged, retain_versions, older_than or
            claim_window, with the time the last two end).

        pylance's ``delete_rate_limit`` and ``delete_concurrency`` are accepted and
        ignored; tagged versions are always kept, without an error.

        Raises:
            InvalidInputError: bad arguments.
            UnsupportedOperationError: ``error_if_tagged_old_versions=True`` or
                ``versions=[...]`` (pylance options s3ddb does not implement).
        """
        self.refuse_in_group("cleanup_old_versions()")
        pylance_compat.check_cleanup_options(error_if_tagged_old_versions, tuning)
        return cleanup_old_versions(
            self, older_than, retain_versions, delete_unverified, claim_window
        )

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
        writes.update_config(self, upsert, delete, metadata_upsert, metadata_delete)
        return self

    def delete_config_keys(self, keys: list[str] | tuple[str, ...]) -> Dataset:
        """Delete configuration keys, as :meth:`update_config` does."""
        return self.update_config(delete=tuple(keys))

    # --- open formats ----------------------------------------------------------------

    @property
    def open_formats(self) -> tuple[str, ...]:
        """The open formats the pinned version publishes (``("iceberg", "delta")``,
        or fewer); see docs/open-formats.md."""
        return enabled_formats(self._manifest)

    def enable_open_formats(self, formats: Iterable[str] | str | None = None) -> Dataset:
        """Publish every version from now on also as an Iceberg table (under
        ``metadata/``) and a Delta table (``_delta_log/``) over the same Parquet
        files, as one new version (a config change) that is the first published.
        ``formats`` names them (default: every format s3ddb publishes). Returns self,
        at that version.

        Raises:
            OpenFormatError: an unknown format, a column type with no exact
                counterpart in a format (the message names it), or a fragment of
                several data files (compact first); nothing was committed.
        """
        self.refuse_in_group("enable_open_formats()")
        publication.enable_open_formats(self, format_names() if formats is None else formats)
        return self

    def disable_open_formats(self) -> Dataset:
        """Stop publishing open formats, as a new version (what was published stays,
        for the versions it stands for, until cleanup removes them). Returns self."""
        self.refuse_in_group("disable_open_formats()")
        publication.disable_open_formats(self)
        return self

    def publish_open_formats(self) -> tuple[str, ...]:
        """Publish the newest version again in the formats it enables, and any
        version before it whose publication is missing (it never is unless a store
        write failed: failures are logged, and the next commit catches up too).
        Moves to the newest version. Returns the formats published."""
        self.refuse_in_group("publish_open_formats()")
        self.checkout_latest()
        return publication.publish_open_formats(self)

    def rebuild_open_formats(self) -> Rebuilt:
        """Republish every kept version in the formats the newest enables, from the
        manifests alone, whatever the published files hold: the repair for a damaged
        or tampered Iceberg or Delta state (``verify`` reports it as
        ``damaged_open_format_state``). Published files no kept version writes are
        deleted. Moves to the newest version. Returns what was done: the formats, the
        versions republished and the files deleted.

        Raises:
            OpenFormatError: a kept version the formats cannot represent.
        """
        self.refuse_in_group("rebuild_open_formats()")
        self.checkout_latest()
        return publication.rebuild_open_formats(self)

    def restore(self) -> Dataset:
        """Make the pinned version the latest, as a new version; returns self moved there."""
        writes.restore(self)
        return self

    def checkout_latest(self) -> None:
        """Move this Dataset to the newest version, in place (as pylance). Raises
        AtomicGroupError for a handle of an atomic group (it stays where it planned)."""
        self.refuse_in_group("checkout_latest()", "Read the newest with s3ddb.dataset(uri).")
        self.move_to(load_latest(self.handler, self.uri), seen_newest=True)

    def get_version(self) -> dict[str, Any]:
        """The pinned version as pylance describes it: ``version``, ``timestamp`` (UTC)
        and ``metadata``, a summary of the manifest (counts as text)."""
        fragments = list(self._manifest.fragments)
        summary = {
            "total_fragments": len(fragments),
            "total_data_files": sum(len(f.files) for f in fragments),
            "total_files_size": sum(d.file_size_bytes for f in fragments for d in f.files),
            "total_deletion_files": sum(1 for f in fragments if f.deletion_file is not None),
            "total_data_file_rows": sum(f.physical_rows for f in fragments),
            "total_deletion_file_rows": sum(f.physical_rows - f.num_rows for f in fragments),
            "total_rows": sum(f.num_rows for f in fragments),
        }
        when = dt.datetime.fromtimestamp(self._manifest.timestamp_nanos / 1e9, dt.timezone.utc)
        metadata = {k: str(v) for k, v in summary.items()}
        return {"version": self.version, "timestamp": when, "metadata": metadata}

    def version_refs(self) -> list[dict[str, int]]:
        """``{"version": n}`` for every version, oldest first."""
        return [{"version": v.version} for v in self.versions()]

    @property
    def initial_storage_options(self) -> dict[str, Any]:
        """The storage options this Dataset was opened with."""
        return self.storage_options

    def latest_storage_options(self) -> dict[str, Any]:
        """The storage options (s3ddb's never change after opening)."""
        return self.storage_options

    @staticmethod
    def drop(
        base_uri: str | os.PathLike[str],
        storage_options: dict[str, Any] | None = None,
        ignore_not_found: bool | None = None,
    ) -> None:
        """Delete the dataset at ``base_uri``: its objects and DynamoDB rows (as
        ``s3ddb drop``).

        Raises:
            DatasetNotFoundError: nothing is committed there, unless ``ignore_not_found``.
        """
        uri = os.fspath(base_uri)
        if not ignore_not_found:
            load_latest(open_validated(uri, storage_options), uri)
        drop_dataset(uri, storage_options, missing_ok=True)

    def update_metadata(
        self, values: dict[str, str | None], *, replace: bool = False
    ) -> dict[str, str]:
        """Set (text) or delete (None) table metadata keys, or with ``replace`` make
        ``values`` the whole table metadata, as one new version; returns the table
        metadata after it. Keys another writer changed meanwhile are kept.

        Raises:
            InvalidInputError: keys or values that are not text (or None), nothing to
                change, or a reserved key.
        """
        upsert, delete = pylance_compat.metadata_changes(
            self._manifest.table_metadata, values, replace
        )
        writes.update_config(self, None, (), upsert, delete)
        return dict(self._manifest.table_metadata)

    # --- schema and its evolution (logic and contracts in s3ddb/writes/schema_evolution.py) ---

    def add_columns(
        self,
        transforms: Any,
        read_columns: list[str] | None = None,
        *,
        conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> Dataset:
        """Add columns from ``{"name": "SQL expression"}`` or from a table aligned with
        the visible rows (a ``Merge``); see :func:`s3ddb.writes.schema_evolution.add_columns`."""
        se.add_columns(self, transforms, read_columns, conflict_retries, retry_timeout)
        return self

    def drop_columns(
        self,
        columns: list[str],
        *,
        conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> Dataset:
        """Remove columns from the schema only (a ``Project``); see
        :func:`s3ddb.writes.schema_evolution.drop_columns`."""
        se.drop_columns(self, columns, conflict_retries, retry_timeout)
        return self

    def alter_columns(
        self,
        *alterations: dict[str, Any],
        conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> Dataset:
        """Rename, change nullability or safely widen columns (``{"path": "x", "name":
        "y", "nullable": True, "data_type": pa.int64()}``); see
        :func:`s3ddb.writes.schema_evolution.alter_columns`."""
        se.alter_columns(self, alterations, conflict_retries, retry_timeout)
        return self

    def replace_schema_metadata(self, metadata: dict[str, str]) -> Dataset:
        """Replace the schema's metadata (an ``UpdateConfig``)."""
        se.replace_schema_metadata(self, metadata)
        return self

    def replace_field_metadata(self, field: str, metadata: dict[str, str]) -> Dataset:
        """Replace the metadata of top-level column ``field`` (an ``UpdateConfig``)."""
        se.replace_field_metadata(self, field, metadata)
        return self

    @property
    def schema_metadata(self) -> dict[str, str]:
        """The schema's metadata, as text."""
        return pylance_compat.decoded_metadata(self.schema.metadata)

    @property
    def max_field_id(self) -> int:
        """The highest field id the schema has used."""
        return self._manifest.schema.max_field_id

    @property
    def has_stable_row_ids(self) -> bool:
        """Whether rows have stable ids (``write_dataset(...,
        enable_stable_row_ids=True)``): their ``_rowid`` is kept through updates and
        compaction."""
        return self._manifest.stable_row_ids

    @property
    def data_storage_version(self) -> str:
        """``"parquet"``: s3ddb writes Parquet data files (pylance answers the Lance
        file version, such as "2.0")."""
        return pylance_compat.DATA_STORAGE_VERSION

    def update_schema_metadata(
        self, values: dict[str, str | None], *, replace: bool = False
    ) -> dict[str, str]:
        """As :meth:`update_metadata`, for the schema's metadata; planned again on the
        newest version if another writer changed the schema meanwhile. Returns the
        schema metadata after it.

        Raises:
            InvalidInputError: keys or values that are not text (or None).
        """

        def plan(manifest: Manifest) -> tuple[Operation, None]:
            current = pylance_compat.decoded_metadata(manifest.schema.arrow.metadata)
            upsert, delete = pylance_compat.metadata_changes(current, values, replace)
            kept = {k: v for k, v in current.items() if k not in delete}
            return se.plan_schema_metadata({**kept, **upsert}), None

        plan_and_commit(self, "update_schema_metadata", plan, None, None)
        return self.schema_metadata

    def update_field_metadata(
        self, field_updates: dict[str, dict[str, str | None]], *, replace: bool = False
    ) -> None:
        """As :meth:`update_metadata`, for one top-level column's metadata
        (``{"column": {"key": "text" or None}}``), as one new version.

        Raises:
            UnsupportedOperationError: several columns at once (call once per column).
            ColumnNotFoundError: no such column.
            InvalidInputError: keys or values that are not text (or None).
        """
        if not isinstance(field_updates, dict) or len(field_updates) != 1:
            raise pylance_compat.unsupported(
                "update_field_metadata() of several columns", "call it per column"
            )
        [(name, values)] = field_updates.items()
        index = self.schema.get_field_index(name) if isinstance(name, str) else -1
        current = (
            pylance_compat.decoded_metadata(self.schema.field(index).metadata) if index >= 0 else {}
        )
        upsert, delete = pylance_compat.metadata_changes(current, values, replace)
        kept = {k: v for k, v in current.items() if k not in delete}
        se.replace_field_metadata(self, name, {**kept, **upsert})

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
            AtomicGroupError: this Dataset is a handle of an atomic group.
        """
        self.refuse_in_group(
            "shallow_clone()",
            "Clone after the group commits: the versions it holds are not committed yet.",
        )
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
            AtomicGroupError: this Dataset is a handle of an atomic group.
        """
        self.refuse_in_group(
            "deep_clone()",
            "Clone after the group commits: the versions it holds are not committed yet.",
        )
        return deep_clone(self, target, version, storage_options)

    # --- fragments and files ---
    def validate(self) -> None:
        """Check that every file the pinned version references exists, data files
        with their recorded size (``s3ddb verify`` checks the whole dataset).

        Raises:
            DataFileMissingError: a data, deletion or index file is missing.
            DataFileError: a data file's size differs from the one recorded.
        """
        check_files(self.files(), self._manifest, self._uri)

    def fragment_ids(self) -> list[int]:
        """The pinned version's fragment ids, ascending (pylance: a Bitmap)."""
        return sorted(f.id for f in self._manifest.fragments)

    def get_fragment(self, fragment_id: int) -> pylance_compat.LanceFragment | None:
        """The fragment with this id in the pinned version, or None."""
        for fragment in self._manifest.fragments:
            if fragment.id == fragment_id:
                return pylance_compat.LanceFragment(self, fragment)
        return None

    # --- indices and statistics ---
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
        create_scalar_index(self, column, index_type, name, replace)
        return self

    def list_indices(self) -> list[dict[str, Any]]:
        """The pinned version's indices: name, type, uuid, fields, version, fragment_ids."""
        return list_indices(self._manifest)

    @property
    def has_index(self) -> bool:
        """Whether the pinned version has an index."""
        return bool(self._manifest.indices)

    def describe_indices(self) -> list[IndexDescription]:
        """The pinned version's indices, as pylance's ``describe_indices``."""
        return describe_indices(self._manifest)

    def index_statistics(self, index_name: str) -> dict[str, Any]:
        """pylance's statistics of one index: its type, and the fragments and rows it
        covers and does not.

        Raises:
            InvalidInputError: no index of that name.
        """
        return index_statistics(self._manifest, index_name, self._uri)

    @property
    def stats(self) -> DatasetStatistics:
        """pylance's ``ds.stats``: ``dataset_stats()`` and ``index_stats(name)``."""
        return DatasetStatistics(self._manifest, self._uri)

    # --- pylance-compatible reads and Arrow streams (s3ddb/reading/scanner.py) ---
    def scanner(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
        **options: Any,
    ) -> Scanner:
        """A :class:`s3ddb.reading.scanner.Scanner` of the pinned version (``to_table``,
        ``to_batches``, ``to_reader``, ``count_rows``, ``head``, Arrow stream).

        Raises:
            ColumnNotFoundError, InvalidExpressionError: bad columns or filter.
            UnsupportedOperationError: a pylance scan option s3ddb does not implement.
        """
        return Scanner(self, columns, filter, limit, offset, **options)

    def head(self, num_rows: int, **options: Any) -> pa.Table:
        """The first ``num_rows`` rows (reads only the fragments needed)."""
        return self.scanner(limit=num_rows, **options).to_table()

    def take(self, indices: Any, columns: list[str] | None = None) -> pa.Table:
        """Rows at 0-based positions over the visible rows, in the order given.

        Raises:
            InvalidInputError: a position out of range, or one that is not an integer
                (floats, strings, booleans, None, nulls are refused).
        """
        return take(self, indices, columns)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Arrow PyCapsule stream of every row, fragment by fragment (DuckDB, polars,
        ``pa.RecordBatchReader.from_stream``)."""
        return self.scanner().__arrow_c_stream__(requested_schema)

    @staticmethod
    def commit(
        uri: str | os.PathLike[str] | PinnedVersion,
        operation: Operation | Transaction,
        read_version: int | None = None,
        storage_options: dict[str, Any] | None = None,
        commit_config: CommitConfig | None = None,
        *,
        transaction_properties: dict[str, str] | None = None,
        on_existing: OnExisting = "rebase",
    ) -> Dataset:
        """Commit an operation built elsewhere (e.g. fragments from workers).

        ``read_version`` is the version the operation was computed from (None or 0 for
        a new dataset). ``uri`` may be a Dataset (its URI and storage options), as in
        pylance; ``operation`` may be a :class:`~s3ddb.Transaction` (as
        ``write_fragments(return_transaction=True)`` gives), whose read version and
        properties then apply. ``transaction_properties`` are stored with the transaction, as in
        pylance; a property named ``s3ddb.app_txn.<application id>`` (a sequence number)
        commits at most once per number (a Spark stream commits each micro-batch so).
        ``on_existing`` is what an operation read at no version does if another writer
        creates the dataset first: "rebase" (the conflict rules), "error"
        (DatasetAlreadyExistsError), or "append" (an Overwrite becomes an Append of its
        fragments, as ``write_dataset(mode="append")`` does).

        Raises:
            VersionNotFoundError: ``read_version`` does not exist.
            InvalidInputError: a DataReplacement that does not fit ``read_version``
                (missing fragment or file, another row count); nothing is committed.
            CommitConflictError and subclasses, CommitStateUnknownError: see commit.
            TransactionAlreadyCommittedError: an application transaction number in
                ``transaction_properties`` is already committed; or a file the
                operation lists was added by ``read_version``'s transaction or a later
                one (the operation is committed already: a retry after an unknown
                outcome whose first attempt landed).
            InvalidInputError: the operation lists a file twice.
            DatasetAlreadyExistsError: ``on_existing="error"`` and another writer created
                the dataset.
            AtomicGroupError: ``uri`` is a handle of an atomic group (use the group's
                ``add_operation``).
        """
        if isinstance(uri, PinnedVersion):
            uri.refuse_in_group(
                "Dataset.commit()",
                "Hold the operation in the group with tx.add_operation(uri, operation).",
            )
            storage_options = storage_options or uri.storage_options
            uri = uri.uri
        if isinstance(operation, Transaction):
            read_version = operation.read_version if read_version is None else read_version
            transaction_properties = {**operation.properties, **(transaction_properties or {})}
            operation = operation.operation
        text = os.fspath(uri)
        return writes.commit_operation(
            Dataset,
            text,
            operation,
            read_version,
            storage_options,
            commit_config,
            transaction_properties,
            on_existing,
        )


def dataset(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
    *,
    commit_config: CommitConfig | None = None,
    asof: dt.datetime | str | None = None,
    **pylance_options: Any,
) -> Dataset:
    """Open the dataset at ``uri``, pinned at ``version`` (default: latest).

    ``uri`` takes one of these forms, which also decide how commits are made:

    * a local path or ``file:///abs/path``: rename-if-not-exists;
    * ``memory://name``: in this process only;
    * ``s3://bucket/prefix``: S3 conditional PUT (``If-None-Match``), where the store
      supports it (``s3ddb doctor URI`` tells);
    * ``s3+ddb://bucket/prefix?ddbTableName=TABLE``: objects on S3, each commit decided
      by one conditional write to the DynamoDB table (``s3ddb create-table TABLE``).

    ``version`` is a version number or a tag name. ``asof`` pins the newest version
    committed at or before that time instead (a datetime, or ISO 8601 text; without a
    time zone it is UTC).

    ``storage_options`` (a dict of strings) override the AWS settings boto3 finds in the
    environment, for S3 and DynamoDB: ``endpoint_url``, ``region``,
    ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``,
    ``profile``, ``role_arn``; each also per service (``s3_endpoint``,
    ``dynamodb_region``, ``dynamodb_profile``...); pylance's names (``aws_endpoint``,
    ``dynamodb_endpoint``, ``allow_http``...) work too. An unknown key is refused.
    docs/deployments.md lists them all, with their environment variables.

    pylance's cache sizes and ``block_size`` are accepted and ignored; its other
    arguments (``commit_lock``, ``session``, namespaces...) are refused.

    Raises:
        UnsupportedOperationError: a pylance argument s3ddb has no such thing for.
        DatasetNotFoundError: nothing is committed at ``uri``.
        VersionNotFoundError: no such version or tag, or nothing committed by ``asof``.
        InvalidInputError: both ``version`` and ``asof``, an unreadable ``asof``, an
            unknown storage option, or ``storage_options`` not a dict.
        InvalidURIError: ``uri`` is none of the forms above.
        ManifestCorruptError: the manifest is truncated or corrupt.
        ManifestFinalizationError: (s3+ddb) the newest version cannot be finalized.
        ExternalStoreTableError: (s3+ddb) the DynamoDB table is missing or wrong.
    """
    pylance_compat.check_open_options("dataset", pylance_options)
    parse_uri(uri)  # InvalidURIError for anything but a URI or path, before fspath
    text = os.fspath(uri)
    handler = open_validated(text, storage_options)
    if asof is not None:
        if version is not None:
            raise InvalidInputError("give version or asof, not both")
        version = version_as_of(handler, text, asof)
    if isinstance(version, str):
        ds = Dataset(
            text,
            handler,
            load_latest(handler, text),
            storage_options=storage_options,
            commit_config=commit_config,
        )
        return ds.checkout_version(version)
    manifest = load_version(handler, version, text)
    ds = Dataset(
        text, handler, manifest, storage_options=storage_options, commit_config=commit_config
    )
    if version is not None:
        ds.forget_newest_seen()  # pinned at a chosen version, maybe not the newest
    return ds


def write_dataset(
    data: Any,
    uri: str | os.PathLike[str] | PinnedVersion,
    schema: pa.Schema | None = None,
    mode: WriteMode = "create",
    storage_options: dict[str, Any] | None = None,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int | None = None,
    progress: WriteProgress | None = None,
    data_storage_version: str | None = None,
    commit_config: CommitConfig | None = None,
    enable_v2_manifest_paths: bool = True,
    open_formats: Iterable[str] | str | None = None,
    **pylance_options: Any,
) -> Dataset:
    """Write ``data`` to the dataset at ``uri`` and return it at the new version.

    ``data``: a pyarrow Table, RecordBatch or RecordBatchReader, an iterable of
    RecordBatches, a pandas DataFrame, a dict of columns, a list of row dicts, or any
    object exporting an Arrow stream (``__arrow_c_stream__``: polars, DuckDB, an s3ddb
    Dataset). ``schema`` casts it (and gives the schema of no batches).

    ``uri`` and ``storage_options``: as for :func:`dataset` (a
    local path, ``file://``, ``memory://``, ``s3://`` or
    ``s3+ddb://bucket/prefix?ddbTableName=TABLE``; AWS settings such as
    ``endpoint_url``, ``region``, ``aws_access_key_id``, per service as
    ``s3_endpoint`` or ``dynamodb_region``, and pylance's names).

    Modes: "create" (fail if a dataset exists), "append" (create if missing),
    "overwrite" (replace, or create). ``enable_v2_manifest_paths`` chooses the manifest
    naming scheme of a new dataset (V2 by default; an existing dataset keeps its own).

    The arguments are pylance's, in its order: data files hold at most
    ``max_rows_per_file`` rows, in Parquet row groups of at most
    ``max_rows_per_group`` (default 65,536); ``progress`` (pylance's
    ``FragmentWriteProgress``) is told of each fragment once its file is written;
    ``data_storage_version`` may be None or "stable" (s3ddb writes Parquet).
    ``data_cache_bytes`` and ``max_page_bytes`` are accepted and ignored; the other
    pylance arguments are refused unless given their default (docs/pylance.md).
    ``enable_stable_row_ids=True`` gives a new or overwritten dataset stable row ids
    (``_rowid``, ``_row_created_at_version``, ``_row_last_updated_at_version``;
    docs/format.md): once on, every later version keeps them.

    ``open_formats`` (``["iceberg", "delta"]``, or one of them) makes a new or
    overwritten dataset publish every version also as an Iceberg and a Delta table
    over the same files (docs/open-formats.md); an existing dataset turns it on with
    :meth:`Dataset.enable_open_formats`.

    Raises:
        DatasetAlreadyExistsError: ``mode="create"`` and a dataset exists (nothing is
            written).
        OpenFormatError: ``open_formats`` names an unknown format, or a column type a
            format cannot hold (nothing is written); or ``mode="append"`` to an
            existing dataset that publishes other formats.
        SchemaMismatchError: appended data does not match the dataset's schema.
        InvalidInputError: bad mode, data or URI.
        AtomicGroupError: ``uri`` is a handle of an ``s3ddb.atomic`` group (this
            would commit at once, outside the group; use its ``insert``).
        UnsupportedOperationError: a pylance argument s3ddb has no such thing for.
    """
    stable_row_ids = pylance_options.pop("enable_stable_row_ids", False)
    pylance_compat.check_write_options("write_dataset", data_storage_version, pylance_options)
    if not isinstance(stable_row_ids, bool):
        raise InvalidInputError(f"enable_stable_row_ids must be a bool, got {stable_row_ids!r}")
    if isinstance(schema, str):
        raise InvalidInputError(
            f"schema must be a pyarrow Schema, got {schema!r}: the fourth argument is "
            "mode (as in pylance), pass mode= by name"
        )
    if mode not in MODES:
        raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
    layout = FileLayout.checked(max_rows_per_file, max_rows_per_group, progress)
    if isinstance(uri, PinnedVersion):
        # write_dataset commits at once, by the URI: on a group's handle that would
        # put the write outside the group, committed whatever the group decides.
        uri.refuse_in_group(
            "write_dataset",
            "Use the handle's insert(data) or insert(data, mode='overwrite'), which the "
            "group holds.",
        )
        storage_options = storage_options or uri.storage_options
        uri = uri.uri
    parse_uri(uri)  # InvalidURIError for anything but a URI or path, before fspath
    text = os.fspath(uri)
    table = to_arrow_table(data, schema)
    naming = NamingScheme.V2 if enable_v2_manifest_paths else NamingScheme.V1
    config = publication.open_formats_config(open_formats)
    if stable_row_ids:
        config = {**(config or {}), STABLE_ROW_IDS_KEY: "true"}
    publication.check_schema(table.schema, open_formats)

    return writes.write_dataset(
        Dataset, table, text, mode, storage_options, layout, commit_config, naming, config
    )


def migrate_commits(
    uri: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> Dataset:
    """Move the dataset at ``uri`` to the commit mechanism ``uri`` names, explicitly.

    A dataset records how its versions are claimed (conditional put of its manifests,
    or a DynamoDB table), and writers that would claim them another way refuse with
    :class:`~s3ddb.errors.CommitMechanismError`. This writes one version (an
    ``UpdateConfig`` recording ``s3ddb.commit_mechanism`` in the table metadata)
    through ``uri``'s mechanism; from then on writers must use ``uri``, and the old
    mechanism's writers refuse. Examples: ``s3://b/ds`` to
    ``s3+ddb://b/ds?ddbTableName=T`` (adopting a dataset created with conditional
    writes), or a local copy of a DynamoDB dataset's objects to its local path.
    Nothing happens if the dataset already commits that way.

    Stop every writer of the old mechanism first: one that commits between the
    newest version this reads and the new version is not fenced off.

    Raises:
        DatasetNotFoundError: nothing is committed at ``uri``.
        CommitMechanismError: moving off a DynamoDB table in place while the table
            still holds the dataset's rows (copy it with :meth:`Dataset.deep_clone`
            instead).
    """
    ds = dataset(uri, storage_options=storage_options)
    writes.migrate_commits(ds)
    return ds
