"""merge_insert: upsert source rows into a dataset by key (the Lance builder API).

    ds.merge_insert("id") \\
      .when_matched_update_all() \\
      .when_not_matched_insert_all() \\
      .execute(new_rows)

A target row *matches* a source row when every key column is equal (SQL equality:
a NULL key never matches, so a source row with a NULL key is always "not matched").
What each clause does with matched and unmatched rows is in
:mod:`s3ddb.writes.merge_clauses`. Updated target rows are replaced by their source
row (REWRITE_ROWS: deleted where they are and written, with the inserted rows, into
new fragments). The commit carries a
key-existence filter of every key written, and the conflict resolver refuses to let
two merges that wrote one key both land: the second is retried, so that it updates the
row the first inserted rather than inserting a duplicate.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from s3ddb.errors import ColumnNotFoundError, InvalidInputError, UnsupportedOperationError
from s3ddb.format.bases import FileResolver
from s3ddb.format.datafile import write_fragments_from_table
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.format.keys import key_hashes
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_lineage import RowLineage
from s3ddb.format.schema import conform
from s3ddb.format.stats import exact_bound_type
from s3ddb.index.query import lookup_keys
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites
from s3ddb.io.written_files import FileTracker
from s3ddb.observe.commit_metrics import add_operation_metrics
from s3ddb.operations import KeyExistenceFilter, RowChangePlan, Transaction, Update
from s3ddb.scan import RowGroupPredicate, plan_fragment, read_rows_at
from s3ddb.scan.visible_rows import candidate_fragments, read_with_positions
from s3ddb.tasks.fragment_map import parallel_map
from s3ddb.versions.pinned import plan_and_commit
from s3ddb.writes.merge_clauses import (
    DELETE,
    UPDATE,
    CompiledClauses,
    Condition,
    MergeClauses,
    check_clauses,
    check_unique_keys,
    key_range_pruner,
)
from s3ddb.writes.row_changes import DeletionPlan, write_deletions
from s3ddb.writes.user_data import to_arrow_table

if TYPE_CHECKING:
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "MergeInsertBuilder",
    "moved_lineage",
    "plan_merge",
]

_FRAG, _ROW, _SRC = "__s3ddb_fragment", "__s3ddb_row", "__s3ddb_source_row"


class MergeInsertBuilder:
    """Configure a merge, then :meth:`execute` it. Each method returns the builder.

    Without any ``when_*`` clause a merge does nothing but check its input; the usual
    upsert is ``when_matched_update_all().when_not_matched_insert_all()``. What each
    clause does, and in which order a matched row's clauses apply (fail, then delete,
    then update), is in :mod:`s3ddb.writes.merge_clauses`.
    """

    def __init__(self, dataset: PinnedVersion, on: str | list[str]) -> None:
        keys = [on] if isinstance(on, str) else list(on)
        check_clauses(MergeClauses(tuple(keys)))
        missing = [k for k in keys if k not in dataset.schema.names]
        if missing:
            raise ColumnNotFoundError(
                f"merge_insert key column(s) {missing} not in {dataset.uri}; columns are "
                f"{dataset.schema.names}"
            )
        self._dataset = dataset
        self.clauses = MergeClauses(tuple(keys))
        self.retries: int | None = None
        self.timeout: float | None = None
        self.use_indices = True

    @property
    def on(self) -> tuple[str, ...]:
        """The key columns."""
        return self.clauses.on

    def _set(self, **changes: Any) -> MergeInsertBuilder:
        self.clauses = replace(self.clauses, **changes)
        return self

    def when_matched_update_all(self, condition: Condition = None) -> MergeInsertBuilder:
        """Replace matched target rows by their source row. ``condition`` (SQL over
        ``target.<col>`` and ``source.<col>``, e.g. ``"source.ts > target.ts"``)
        limits which matched rows are replaced."""
        return self._set(update=True, update_condition=condition)

    def when_matched_delete(self, condition: Condition = None) -> MergeInsertBuilder:
        """Delete matched target rows (those where ``condition``, SQL over
        ``target.<col>`` and ``source.<col>``, holds, if given). A row both clauses
        take is deleted."""
        return self._set(delete=True, delete_condition=condition)

    def when_matched_fail(self) -> MergeInsertBuilder:
        """Refuse the whole merge (:class:`~s3ddb.errors.MatchedRowError`, nothing
        committed) if any source row's key is in the target: an insert-only load
        that must never overwrite."""
        return self._set(fail=True)

    def when_not_matched_insert_all(self, condition: Condition = None) -> MergeInsertBuilder:
        """Insert source rows that match no target row (those where ``condition``,
        SQL over ``source.<col>``, holds, if given)."""
        return self._set(insert=True, insert_condition=condition)

    def when_not_matched_by_source_delete(
        self, expr: Condition = None, *, condition: Condition = None
    ) -> MergeInsertBuilder:
        """Delete target rows that match no source row (only those matching ``expr``,
        a predicate over the target's columns, bare as in pylance or as
        ``target.<col>``, if given; ``condition=`` is the same argument).

        Raises:
            InvalidInputError: both ``expr`` and ``condition`` given.
        """
        if expr is not None and condition is not None:
            raise InvalidInputError(
                "when_not_matched_by_source_delete takes expr or condition, not both"
            )
        return self._set(
            delete_by_source=True, by_source_condition=expr if expr is not None else condition
        )

    def conflict_retries(self, retries: int) -> MergeInsertBuilder:
        """How often to re-execute the merge on the newest version after a retryable
        conflict (default: the dataset's)."""
        self.retries = retries
        return self

    def retry_timeout(self, seconds: float | dt.timedelta) -> MergeInsertBuilder:
        """Stop re-executing after this many seconds (a timedelta, as in pylance, too)."""
        if isinstance(seconds, dt.timedelta):
            seconds = seconds.total_seconds()
        self.timeout = seconds
        return self

    def use_index(self, use_index: bool) -> MergeInsertBuilder:
        """Whether a BTREE index on the key (one key column) may find the target rows
        (default True); without, statistics prune and the key column is scanned."""
        self.use_indices = bool(use_index)
        return self

    def write_mode(self, mode: str) -> MergeInsertBuilder:
        """``"auto"`` or ``"rewrite_rows"`` (the same here: matched rows are deleted
        where they are and written into new fragments).

        Raises:
            UnsupportedOperationError: ``"rewrite_columns"`` (s3ddb's merge always
                rewrites rows).
            InvalidInputError: any other value.
        """
        if mode == "rewrite_columns":
            raise UnsupportedOperationError(
                "merge_insert rewrites matched rows whole; write_mode('rewrite_columns') "
                "is not supported (use ds.update for column rewrites)"
            )
        if mode not in ("auto", "rewrite_rows"):
            raise InvalidInputError(f"write_mode must be 'auto' or 'rewrite_rows', got {mode!r}")
        return self

    def explain_plan(self, schema: pa.Schema | None = None, verbose: bool = False) -> str:
        """What the merge will do, as text: the keys, the clauses and how the target
        rows are found. Reads nothing."""
        ds = self._dataset
        finder = (
            f"the BTREE index on {self.on[0]}, then statistics"
            if self.use_indices and len(self.on) == 1 and ds.manifest.indices
            else "fragment and row-group statistics of the key columns"
        )
        lines = [
            self.clauses.describe(),
            f"target: {ds.uri} version {ds.version}, {len(ds.manifest.fragments)} fragment(s)",
            "target rows found by: "
            + ("a scan of every fragment" if self.clauses.delete_by_source else finder),
        ]
        if verbose:
            lines.append(f"target schema: {ds.schema}")
        return "\n".join(lines)

    def execute_batches(self, new_data: Any) -> dict[str, int]:
        """:meth:`execute` (pylance's form for materialized batches)."""
        return self.execute(new_data)

    def execute(self, data: Any, *, schema: pa.Schema | None = None) -> dict[str, int]:
        """Run the merge with ``data`` as the source and commit it.

        Returns ``{"num_inserted_rows", "num_updated_rows", "num_deleted_rows"}``. The
        dataset moves to the version committed (unchanged if the merge changed nothing).

        Raises:
            SchemaMismatchError: ``data`` lacks a column of the dataset, has another
                type, or has a column the dataset lacks that no condition reads.
            DuplicateKeyError: the source holds one key twice (nothing committed).
            MatchedRowError: ``when_matched_fail()`` and a source key is in the target.
            ColumnNotFoundError, InvalidExpressionError: a condition does not compile.
            RetryableCommitConflictError: ``conflict_retries(0)`` and a concurrent
                commit changed what this merge would do.
            TooMuchWriteContentionError: the retries ran out.
        """
        ds = self._dataset
        planner = self._planner(data, schema)
        return plan_and_commit(
            ds, "merge_insert", planner, self.retries, self.timeout, uploads=True
        )

    def execute_uncommitted(
        self, data: Any, *, schema: pa.Schema | None = None
    ) -> tuple[Transaction | None, dict[str, int]]:
        """Plan the merge and write its files, without committing: returns the
        transaction (None if the merge changes nothing) for
        :meth:`s3ddb.Dataset.commit`, and the counts. Files of a transaction that is
        never committed stay until ``cleanup_old_versions`` removes unreferenced files.

        Raises:
            What :meth:`execute` raises before committing.
        """
        ds = self._dataset
        # Written here, not beside a commit: the files are in place when this returns.
        operation, counts = self._planner(data, schema)(ds.manifest, None)
        if operation is None:
            return None, counts
        return Transaction(ds.version, operation), counts

    def _planner(
        self, data: Any, schema: pa.Schema | None
    ) -> Callable[[Manifest, PendingWrites | None], tuple[Update | None, dict[str, int]]]:
        ds = self._dataset
        raw = to_arrow_table(data, schema)
        clauses = self.clauses
        use_indices = self.use_indices

        def split(target: pa.Schema) -> tuple[pa.Table, pa.Table]:
            names = set(target.names)
            extras = [n for n in raw.column_names if n not in names]
            rows = conform(raw.drop_columns(extras), target, where=ds.uri)
            return rows, raw.select(extras)

        rows, extras = split(ds.schema)
        check_unique_keys(rows, clauses.on)
        planned = ds.manifest.schema

        def plan(
            manifest: Manifest, pending: PendingWrites | None
        ) -> tuple[Update | None, dict[str, int]]:
            # Re-executed after a concurrent schema change, the source must fit the new
            # schema (as a merge run after that change would).
            source, extra = (
                (rows, extras) if manifest.schema == planned else split(manifest.schema.arrow)
            )
            return plan_merge(
                ds.handler.store,
                manifest,
                clauses,
                source,
                extra,
                use_indices=use_indices,
                pending=pending,
            )

        return plan

    # pylance members with no s3ddb counterpart: each refuses, saying why.

    def analyze_plan(self, data_obj: Any = None, *, schema: pa.Schema | None = None) -> str:
        """Raises UnsupportedOperationError: s3ddb runs no DataFusion plan to profile
        (:meth:`explain_plan` says what the merge does)."""
        raise _unsupported("analyze_plan", "s3ddb runs no DataFusion plan; use explain_plan()")

    def analyze_plan_batches(self, new_data: Any = None) -> str:
        """Raises UnsupportedOperationError (see :meth:`analyze_plan`)."""
        raise _unsupported("analyze_plan_batches", "s3ddb runs no DataFusion plan")

    def execute_uncommitted_batches(self, new_data: Any = None) -> Any:
        """Raises UnsupportedOperationError: use :meth:`execute_uncommitted`."""
        raise _unsupported("execute_uncommitted_batches", "use execute_uncommitted(data)")

    def data_storage_version(self, version: str = "") -> MergeInsertBuilder:
        """Raises UnsupportedOperationError: data files are Parquet, not Lance files."""
        raise _unsupported("data_storage_version", "s3ddb writes Parquet data files")

    def target_bases(self, bases: Any = None) -> MergeInsertBuilder:
        """Raises UnsupportedOperationError: fragments go under the dataset's root."""
        raise _unsupported("target_bases", "new fragments are written under the dataset's root")

    def target_all_bases(self, include_primary: bool = True) -> MergeInsertBuilder:
        """Raises UnsupportedOperationError: fragments go under the dataset's root."""
        raise _unsupported("target_all_bases", "new fragments are written under the dataset's root")

    def mark_sstables_as_compacted(self, sstables: Any = None) -> MergeInsertBuilder:
        """Raises UnsupportedOperationError: s3ddb has no MemWAL."""
        raise _unsupported("mark_sstables_as_compacted", "s3ddb has no MemWAL")


def _unsupported(name: str, why: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(f"merge_insert builder: {name}() is not supported: {why}")


def _key_pruner(source_keys: pa.Table, schema: pa.Schema) -> RowGroupPredicate | None:
    """Statistics test for "may hold one of ``source_keys``": each key column of a
    type statistics order exactly lies within the source's range of that key."""
    bounds = []
    for name in source_keys.column_names:
        column = source_keys.column(name)
        if not exact_bound_type(schema.field(name).type) or column.null_count == len(column):
            continue
        ends = pc.min_max(column)
        low, high = ends["min"].as_py(), ends["max"].as_py()
        if low is not None and high is not None:
            bounds.append((name, low, high))
    return key_range_pruner(bounds)


def plan_merge(
    store: ObjectStore,
    manifest: Manifest,
    clauses: MergeClauses,
    source: pa.Table,
    extras: pa.Table | None = None,
    *,
    use_indices: bool = True,
    pending: PendingWrites | None = None,
) -> tuple[Update | None, dict[str, int]]:
    """The Update that merges ``source`` (the dataset's columns) into ``manifest``'s
    version, and its counts. ``extras`` holds the source's columns the dataset lacks,
    aligned with ``source``'s rows (read by conditions only). With ``pending``, the
    files it writes upload beside the commit's own.

    Raises:
        MatchedRowError, InvalidExpressionError, SchemaMismatchError: see
            :meth:`MergeClauses.compile` and :meth:`CompiledClauses.matched`.
    """
    keys = list(clauses.on)
    full = source
    if extras is not None:
        for name in extras.column_names:
            full = full.append_column(extras.schema.field(name), extras.column(name))
    compiled = clauses.compile(manifest.schema.arrow, full.schema)
    # Only target rows whose key the source holds can match; unless the merge deletes
    # what the source lacks, the others never leave the worker that scans them.
    source_keys = None if clauses.delete_by_source else source.select(keys)
    deleted_before, target = _scan_target(
        store, manifest, keys, compiled.target_columns, source, source_keys, use_indices
    )
    numbered = source.append_column(_SRC, pa.array(np.arange(source.num_rows, dtype=np.int64)))
    matched = target.join(
        numbered.select([*keys, _SRC]), keys=keys, join_type="inner", use_threads=False
    )
    removed, written_rows, counts, moved = _merge_outcome(compiled, source, full, target, matched)
    add_operation_metrics(
        source_rows=source.num_rows,
        matched_rows=matched.num_rows,
        inserted_rows=counts["num_inserted_rows"],
        updated_rows=counts["num_updated_rows"],
        deleted_rows=counts["num_deleted_rows"],
        fragments_scanned=len(deleted_before),
        fragments_skipped=len(manifest.fragments) - len(deleted_before),
    )
    if not removed and not written_rows:
        return None, counts
    lineage = None
    if manifest.stable_row_ids:
        # Updated rows keep their ids and creation (this version updates them);
        # inserted rows get theirs at commit.
        lineage = RowLineage.concat(
            [_moved_lineage(manifest, moved), RowLineage.pending(counts["num_inserted_rows"])]
        )
    op = _write_update(
        store, manifest, clauses, source, matched, deleted_before, removed, written_rows,
        lineage, pending,
    )  # fmt: skip
    return op, counts


def _moved_lineage(manifest: Manifest, moved: pa.Table | None) -> RowLineage:
    """The lineage of the target rows ``moved`` (their fragment ids and offsets, in
    order), marked updated by the committing version."""
    if moved is None or not moved.num_rows:
        return RowLineage.pending(0)
    return moved_lineage(manifest, moved.column(_FRAG).to_numpy(), moved.column(_ROW).to_numpy())


def moved_lineage(manifest: Manifest, frags: np.ndarray, rows: np.ndarray) -> RowLineage:
    """The lineage of the rows of ``manifest`` at fragment ids ``frags`` and physical
    offsets ``rows`` (one entry per row, in the order they are written again), marked
    updated by the committing version: an updated row keeps its id and creation.
    An entry whose fragment id is negative is a new row (pending: allocated at commit).

    Raises:
        StoredMetadataError: a fragment's stored lineage is malformed.
    """
    found = RowLineage.pending(len(frags))
    by_id = manifest.fragments.select({int(f) for f in np.unique(frags)})
    for fid, fragment in by_id.items():
        at = frags == fid
        part = RowLineage.of(fragment).take(rows[at])
        found.ids[at], found.created[at] = part.ids, part.created
    return found


def _scan_target(
    store: ObjectStore,
    manifest: Manifest,
    keys: list[str],
    columns: list[str],
    source: pa.Table,
    source_keys: pa.Table | None,
    use_indices: bool = True,
) -> tuple[dict[int, BitMap], pa.Table]:
    """Read the target rows a merge may touch: ``columns`` plus each row's fragment id
    and offset, limited to rows whose key ``source_keys`` holds (all live rows when it
    is None), and each fragment's deleted rows before the merge."""
    schema = manifest.schema
    sources = FileResolver.for_manifest(store, manifest)
    # An index of a single key column points at the only rows of covered fragments
    # that can match: those are read instead of the whole key column.
    indexed = (
        lookup_keys(store, manifest, keys[0], source.column(keys[0]))
        if use_indices and source_keys is not None and len(keys) == 1 and manifest.indices
        else None
    )

    # Fragments and row groups whose key bounds miss every source key hold no match.
    pruner = _key_pruner(source_keys, schema.arrow) if source_keys is not None else None

    def scan(fragment: FragmentMetadata) -> tuple[FragmentMetadata, BitMap, pa.Table]:
        if indexed is not None and fragment.id in indexed.covered:
            deleted = read_deleted_rows(sources, fragment)
            hits = BitMap(indexed.offsets.get(fragment.id, np.empty(0, np.int64)).tolist())
            positions = np.fromiter(hits - deleted, dtype=np.int64, count=len(hits - deleted))
            table, _groups = read_rows_at(sources, fragment, schema, columns, positions)
            # A row the index gives that does not hold a source key: the index lies
            # (and the row holding that key was not read: it would be inserted twice).
            indexed.check(table.column(keys[0]), fragment.id)
        else:
            plan = plan_fragment(sources, fragment, schema, pruner)
            if plan is None:
                # Statistics show no key of the source can be in it: nothing to read
                # (its deletions are never needed: none of its rows changes).
                table = pa.schema([schema.arrow.field(c) for c in columns]).empty_table()
                positions = np.empty(0, dtype=np.int64)
                deleted = BitMap()
            else:
                table, positions = read_with_positions(plan, schema, columns)
                keep = plan.keep
                deleted = (
                    BitMap() if keep is None else BitMap(np.flatnonzero(~keep).astype(np.uint32))
                )
        rows = table.append_column(
            _FRAG, pa.array(np.full(len(positions), fragment.id, dtype=np.int64))
        )
        rows = rows.append_column(_ROW, pa.array(positions))
        if source_keys is not None:
            rows = rows.join(source_keys, keys=keys, join_type="left semi", use_threads=False)
        return fragment, deleted, rows

    # Fragments (and whole fragment-list chunks) whose key bounds miss every source key
    # are never listed: a merge of a few keys into a large dataset reads a few chunks.
    scanned = parallel_map(scan, candidate_fragments(manifest.fragments, schema, pruner))
    deleted_before = {f.id: d for f, d, _t in scanned}
    target = (
        pa.concat_tables([t for _f, _d, t in scanned])
        if scanned
        else pa.schema(
            [schema.arrow.field(c) for c in columns]
            + [pa.field(_FRAG, pa.int64()), pa.field(_ROW, pa.int64())]
        ).empty_table()
    )
    return deleted_before, target


def _merge_outcome(
    compiled: CompiledClauses,
    source: pa.Table,
    full: pa.Table,
    target: pa.Table,
    matched: pa.Table,
) -> tuple[dict[int, BitMap], list[pa.Table], dict[str, int], pa.Table | None]:
    """What the merge's clauses do: the target rows removed (by fragment id), the rows
    written (updated and inserted source rows), the counts the merge returns and the
    target rows the updated ones replace (``_FRAG``, ``_ROW``; None if none).
    ``full`` is ``source`` with the columns the target lacks; ``matched`` the target
    rows joined to the index (``_SRC``) of the source row they match."""
    clauses = compiled.clauses
    removed: dict[int, BitMap] = {}
    written_rows: list[pa.Table] = []
    n_updated = n_inserted = n_deleted = 0
    moved = None
    if clauses.reads_matched and matched.num_rows:
        outcome = compiled.matched(
            full.take(matched.column(_SRC)), matched.select(compiled.target_columns)
        )
        updated = matched.filter(pa.array(outcome == UPDATE))
        deleted = matched.filter(pa.array(outcome == DELETE))
        n_updated, n_deleted = updated.num_rows, deleted.num_rows
        # No pair taken writes nothing: an empty table here would make a merge that
        # changes nothing look like an update of no rows.
        if updated.num_rows:
            _add_rows(removed, updated)
            written_rows.append(source.take(updated.column(_SRC)))
            moved = updated.select([_FRAG, _ROW])
        _add_rows(removed, deleted)
    if clauses.insert:
        was_matched = np.zeros(source.num_rows, dtype=bool)
        was_matched[matched.column(_SRC).to_numpy()] = True
        unmatched = np.flatnonzero(~was_matched)
        take = unmatched[compiled.inserted(full.take(pa.array(unmatched)))]
        if len(take):
            n_inserted = len(take)
            written_rows.append(source.take(pa.array(take)))
    if clauses.delete_by_source and target.num_rows:
        was_matched = pc.is_in(_addresses(target), value_set=_addresses(matched))
        candidates = target.filter(pc.invert(was_matched))
        gone = candidates.filter(pa.array(compiled.deleted_by_source(candidates)))
        n_deleted += gone.num_rows
        _add_rows(removed, gone)
    counts = {
        "num_inserted_rows": n_inserted,
        "num_updated_rows": n_updated,
        "num_deleted_rows": n_deleted,
    }
    return removed, written_rows, counts, moved


def _write_update(
    store: ObjectStore,
    manifest: Manifest,
    clauses: MergeClauses,
    source: pa.Table,
    matched: pa.Table,
    deleted_before: dict[int, BitMap],
    removed: dict[int, BitMap],
    written_rows: list[pa.Table],
    lineage: RowLineage | None = None,
    pending: PendingWrites | None = None,
) -> Update:
    """Write the new fragments and deletion files of a merge (with ``pending``: start
    their uploads) and describe them as the Update to commit, the rows written
    carrying ``lineage`` (stable row ids); the files written are deleted (best
    effort) if this fails."""
    schema = manifest.schema
    keys = list(clauses.on)
    files = FileTracker(store, pending)
    with files.cleanup_on_error():
        new: list[FragmentMetadata] = []
        written = pa.concat_tables(written_rows) if written_rows else None
        if written is not None and written.num_rows:
            new = write_fragments_from_table(store, written, schema, pending=pending)
            files.add(*data_file_paths(new))
            if lineage is not None:
                new = lineage.spread(new)
        plan = DeletionPlan(deleted_before, removed)
        changed, removed_ids = write_deletions(store, manifest, plan, files)
        return Update(
            removed_fragment_ids=tuple(removed_ids),
            updated_fragments=tuple(changed),
            new_fragments=tuple(new),
            inserted_keys=KeyExistenceFilter(
                tuple(schema.top_level_ids(keys)),
                frozenset(key_hashes(written, keys)) if written is not None else frozenset(),
            ),
            predicate=clauses.describe(),
            affected_rows=removed,
            plan=RowChangePlan(
                merge_keys=clauses.on,
                source_key_hashes=frozenset(key_hashes(source, keys)),
                deletes_unmatched=clauses.delete_by_source,
                matched_rows=_rows_of(matched),
            ),
        )


def _rows_of(pairs: pa.Table) -> dict[int, BitMap]:
    out: dict[int, BitMap] = {}
    _add_rows(out, pairs)
    return out


def _addresses(rows: pa.Table) -> pa.Array:
    """One int64 per row: fragment id and row offset (offsets are below 2**32)."""
    frags = rows.column(_FRAG).to_numpy()
    offsets = rows.column(_ROW).to_numpy()
    return pa.array((frags << 32) | offsets)


def _add_rows(removed: dict[int, BitMap], rows: pa.Table) -> None:
    frags = rows.column(_FRAG).to_numpy()
    offsets = rows.column(_ROW).to_numpy().astype(np.uint32)
    for fid in np.unique(frags):
        bitmap = removed.setdefault(int(fid), BitMap())
        bitmap.update(offsets[frags == fid])
