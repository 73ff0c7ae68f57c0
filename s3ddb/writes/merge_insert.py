"""merge_insert: upsert source rows into a dataset by key (the Lance builder API).

    ds.merge_insert("id") \\
      .when_matched_update_all() \\
      .when_not_matched_insert_all() \\
      .execute(new_rows)

A target row *matches* a source row when every key column is equal (SQL equality:
a NULL key never matches, so a source row with a NULL key is always "not matched").
Matched target rows are replaced by their source row (REWRITE_ROWS: deleted where they
are and written, with the inserted rows, into new fragments). The commit carries a
key-existence filter of every key written, and the conflict resolver refuses to let
two merges that wrote one key both land: the second is retried, so that it updates the
row the first inserted rather than inserting a duplicate.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from s3ddb.errors import ColumnNotFoundError, InvalidInputError
from s3ddb.expressions import parse_predicate, referenced_columns
from s3ddb.expressions.conditions import Condition, PushedFilters
from s3ddb.format.bases import FileResolver
from s3ddb.format.datafile import write_fragments_from_table
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment import FragmentMetadata, data_file_paths
from s3ddb.format.keys import key_hashes
from s3ddb.format.manifest import Manifest
from s3ddb.format.rows import matching_rows, take_rows
from s3ddb.format.schema import conform
from s3ddb.format.stats import exact_bound_type
from s3ddb.index.query import lookup_keys
from s3ddb.io.fragment_map import parallel_map
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.written_files import FileTracker
from s3ddb.operations import KeyExistenceFilter, RowChangePlan, Update
from s3ddb.scan import RowGroupPredicate, plan_fragment, read_rows_at
from s3ddb.scan.fragment import read_with_positions
from s3ddb.versions.pinned import plan_and_commit
from s3ddb.writes.row_changes import DeletionPlan, write_deletions
from s3ddb.writes.user_data import to_arrow_table

if TYPE_CHECKING:
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "MergeInsertBuilder",
    "plan_merge",
]

_FRAG, _ROW, _SRC = "__s3ddb_fragment", "__s3ddb_row", "__s3ddb_source_row"


class MergeInsertBuilder:
    """Configure a merge, then :meth:`execute` it. Each method returns the builder.

    Without any ``when_*`` clause a merge does nothing but check its input; the usual
    upsert is ``when_matched_update_all().when_not_matched_insert_all()``.
    """

    def __init__(self, dataset: PinnedVersion, on: str | list[str]) -> None:
        keys = [on] if isinstance(on, str) else list(on)
        if not keys or not all(isinstance(k, str) for k in keys):
            raise InvalidInputError("merge_insert(on=...) needs one or more key column names")
        missing = [k for k in keys if k not in dataset.schema.names]
        if missing:
            raise ColumnNotFoundError(
                f"merge_insert key column(s) {missing} not in {dataset.uri}; columns are "
                f"{dataset.schema.names}"
            )
        self._dataset = dataset
        self.on = tuple(keys)
        self.update_matched = False
        self.update_condition: str | pc.Expression | None = None
        self.insert_unmatched = False
        self.delete_unmatched_by_source = False
        self.delete_condition: str | pc.Expression | None = None
        self.retries: int | None = None
        self.timeout: float | None = None

    def when_matched_update_all(
        self, condition: str | pc.Expression | None = None
    ) -> MergeInsertBuilder:
        """Replace matched target rows by their source row. ``condition`` (SQL over
        ``target.<col>`` and ``source.<col>``, e.g. ``"source.ts > target.ts"``)
        limits which matched rows are replaced."""
        self.update_matched = True
        self.update_condition = condition
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        """Insert source rows that match no target row."""
        self.insert_unmatched = True
        return self

    def when_not_matched_by_source_delete(
        self, expr: str | pc.Expression | None = None
    ) -> MergeInsertBuilder:
        """Delete target rows that match no source row (only those matching ``expr``,
        a predicate over the target's columns, if given)."""
        self.delete_unmatched_by_source = True
        self.delete_condition = expr
        return self

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

    def execute(self, data: Any, *, schema: pa.Schema | None = None) -> dict[str, int]:
        """Run the merge with ``data`` as the source and commit it.

        Returns ``{"num_inserted_rows", "num_updated_rows", "num_deleted_rows"}``. The
        dataset moves to the version committed (unchanged if the merge changed nothing).

        Raises:
            SchemaMismatchError: ``data`` does not have the dataset's columns and types.
            InvalidInputError: the source holds one key twice.
            RetryableCommitConflictError: ``conflict_retries(0)`` and a concurrent
                commit changed what this merge would do.
            TooMuchWriteContentionError: the retries ran out.
        """
        ds = self._dataset
        source = conform(to_arrow_table(data, schema), ds.schema, where=ds.uri)
        _check_unique_keys(source, self.on)
        planned = ds.manifest.schema

        def plan(manifest: Manifest) -> Any:
            # Re-executed after a concurrent schema change, the source must fit the new
            # schema (as a merge run after that change would).
            rows = (
                source
                if manifest.schema == planned
                else conform(source, manifest.schema.arrow, where=ds.uri)
            )
            return plan_merge(ds.handler.store, manifest, self, rows, ds.uri)

        return plan_and_commit(ds, "merge_insert", plan, self.retries, self.timeout)


def _check_unique_keys(source: pa.Table, keys: tuple[str, ...]) -> None:
    hashes = key_hashes(source, list(keys))
    if len(hashes) != len(set(hashes)):
        counts = source.group_by(list(keys), use_threads=False).aggregate([([], "count_all")])
        dup = counts.filter(pc.greater(counts.column("count_all"), 1)).slice(0, 1).to_pylist()
        raise InvalidInputError(
            f"merge_insert source has more than one row for key {dup[0] if dup else '?'} "
            f"of ({', '.join(keys)}): which one should win is ambiguous"
        )


def _condition(expr: str | pc.Expression, target: pa.Schema) -> pc.Expression:
    """A predicate over ``target.<col>`` and ``source.<col>`` (both of the dataset's
    schema), compiled against a schema of two struct columns."""
    struct = pa.struct(list(target))
    schema = pa.schema([pa.field("target", struct), pa.field("source", struct)])
    return parse_predicate(expr, schema)


def _key_pruner(source_keys: pa.Table, schema: pa.Schema) -> RowGroupPredicate | None:
    """Statistics test for "may hold one of ``source_keys``": each key column of a
    type statistics order exactly lies within the source's range of that key."""
    conditions = []
    for name in source_keys.column_names:
        column = source_keys.column(name)
        if not exact_bound_type(schema.field(name).type) or column.null_count == len(column):
            continue
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and high is not None:
            conditions += [Condition("ge", name, low), Condition("le", name, high)]
    return PushedFilters(tuple(conditions)).may_match if conditions else None


def plan_merge(
    store: ObjectStore,
    manifest: Manifest,
    builder: MergeInsertBuilder,
    source: pa.Table,
    uri: str,
) -> tuple[Update | None, dict[str, int]]:
    """The Update that merges ``source`` into ``manifest``'s version, and its counts."""
    keys = list(builder.on)
    clauses = _MergeClauses.compile(builder, manifest.schema.arrow)
    # Only target rows whose key the source holds can match; unless the merge deletes
    # what the source lacks, the others never leave the worker that scans them.
    source_keys = None if builder.delete_unmatched_by_source else source.select(keys)
    deleted_before, target = _scan_target(
        store, manifest, keys, clauses.columns, source, source_keys
    )
    numbered = source.append_column(_SRC, pa.array(np.arange(source.num_rows, dtype=np.int64)))
    matched = target.join(
        numbered.select([*keys, _SRC]), keys=keys, join_type="inner", use_threads=False
    )
    removed, written_rows, counts = _merge_outcome(
        builder, clauses, source, numbered, target, matched
    )
    if not removed and not written_rows:
        return None, counts
    op = _write_update(
        store, manifest, builder, source, matched, deleted_before, removed, written_rows
    )
    return op, counts


@dataclass(frozen=True)
class _MergeClauses:
    """The builder's conditions compiled against the target's schema, and the target
    columns a scan must read for them: the keys, what the delete condition reads, and
    every column when an update condition may read any target column."""

    delete_expr: pc.Expression | None
    update_expr: pc.Expression | None
    #: The target columns to read, in schema order.
    columns: list[str]
    #: Every column of the target's schema.
    names: list[str]

    @classmethod
    def compile(cls, builder: MergeInsertBuilder, schema: pa.Schema) -> _MergeClauses:
        """Raises what :func:`parse_predicate` raises for a condition that does not
        compile against ``schema``."""
        names = list(schema.names)
        delete_expr = (
            parse_predicate(builder.delete_condition, schema)
            if builder.delete_condition is not None
            else None
        )
        update_expr = (
            _condition(builder.update_condition, schema)
            if builder.update_condition is not None
            else None
        )
        wanted = set(builder.on)
        if delete_expr is not None:
            wanted |= referenced_columns(delete_expr, schema)
        if update_expr is not None:
            wanted = set(names)  # the condition may read any target column
        return cls(delete_expr, update_expr, [n for n in names if n in wanted], names)


def _scan_target(
    store: ObjectStore,
    manifest: Manifest,
    keys: list[str],
    columns: list[str],
    source: pa.Table,
    source_keys: pa.Table | None,
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
        if source_keys is not None and len(keys) == 1 and manifest.indices
        else None
    )

    # Fragments and row groups whose key bounds miss every source key hold no match.
    pruner = _key_pruner(source_keys, schema.arrow) if source_keys is not None else None

    def scan(fragment: FragmentMetadata) -> tuple[FragmentMetadata, BitMap, pa.Table]:
        if indexed is not None and fragment.id in indexed[0]:
            deleted = read_deleted_rows(sources, fragment)
            hits = BitMap(indexed[1].get(fragment.id, np.empty(0, np.int64)).tolist())
            positions = np.fromiter(hits - deleted, dtype=np.int64, count=len(hits - deleted))
            table, _groups = read_rows_at(sources, fragment, schema, columns, positions)
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

    scanned = parallel_map(scan, list(manifest.fragments))
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
    builder: MergeInsertBuilder,
    clauses: _MergeClauses,
    source: pa.Table,
    numbered: pa.Table,
    target: pa.Table,
    matched: pa.Table,
) -> tuple[dict[int, BitMap], list[pa.Table], dict[str, int]]:
    """What the merge's clauses do: the target rows removed (by fragment id), the rows
    written (updated and inserted source rows) and the counts the merge returns.
    ``numbered`` is ``source`` with each row's index, ``matched`` the target rows
    joined to the index of the source row they match."""
    removed: dict[int, BitMap] = {}
    written_rows: list[pa.Table] = []
    n_updated = n_inserted = n_deleted = 0
    if builder.update_matched and matched.num_rows:
        pairs = matched
        if clauses.update_expr is not None:
            pairs = _filter_pairs(matched, source, clauses.update_expr, clauses.names)
        n_updated = pairs.num_rows
        if pairs.num_rows:
            # No pair passing the condition writes nothing: an empty table here would
            # make a merge that changes nothing look like an update of no rows.
            _add_rows(removed, pairs)
            written_rows.append(source.take(pairs.column(_SRC)))
    if builder.insert_unmatched:
        was_matched = pc.is_in(
            numbered.column(_SRC), value_set=matched.column(_SRC).combine_chunks()
        )
        unmatched = source.filter(pc.invert(was_matched))
        if unmatched.num_rows:
            n_inserted = unmatched.num_rows
            written_rows.append(unmatched)
    if builder.delete_unmatched_by_source and target.num_rows:
        delete_expr = clauses.delete_expr
        candidates = target if delete_expr is None else target.filter(delete_expr)
        was_matched = pc.is_in(_addresses(candidates), value_set=_addresses(matched))
        gone = candidates.filter(pc.invert(was_matched))
        n_deleted = gone.num_rows
        _add_rows(removed, gone)
    counts = {
        "num_inserted_rows": n_inserted,
        "num_updated_rows": n_updated,
        "num_deleted_rows": n_deleted,
    }
    return removed, written_rows, counts


def _write_update(
    store: ObjectStore,
    manifest: Manifest,
    builder: MergeInsertBuilder,
    source: pa.Table,
    matched: pa.Table,
    deleted_before: dict[int, BitMap],
    removed: dict[int, BitMap],
    written_rows: list[pa.Table],
) -> Update:
    """Write the new fragments and deletion files of a merge and describe them as the
    Update to commit; the files written are deleted (best effort) if this fails."""
    schema = manifest.schema
    keys = list(builder.on)
    files = FileTracker(store)
    with files.cleanup_on_error():
        new: list[FragmentMetadata] = []
        written = pa.concat_tables(written_rows) if written_rows else None
        if written is not None and written.num_rows:
            new = write_fragments_from_table(store, written, schema)
            files.add(*data_file_paths(new))
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
            predicate=_describe(builder),
            affected_rows=removed,
            plan=RowChangePlan(
                merge_keys=builder.on,
                source_key_hashes=frozenset(key_hashes(source, keys)),
                deletes_unmatched=builder.delete_unmatched_by_source,
                matched_rows=_rows_of(matched),
            ),
        )


def _filter_pairs(
    matched: pa.Table, source: pa.Table, condition: pc.Expression, names: list[str]
) -> pa.Table:
    target_rows = matched.select(names)
    source_rows = source.take(matched.column(_SRC))
    both = pa.table(
        {
            "target": pa.StructArray.from_arrays(
                [c.combine_chunks() for c in target_rows.columns], fields=list(target_rows.schema)
            ),
            "source": pa.StructArray.from_arrays(
                [c.combine_chunks() for c in source_rows.columns], fields=list(source_rows.schema)
            ),
        }
    )
    keep = matching_rows(both, condition)
    return take_rows(matched, keep)


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


def _describe(builder: MergeInsertBuilder) -> str:
    parts = [f"merge_insert on ({', '.join(builder.on)})"]
    if builder.update_matched:
        parts.append("when matched update all")
    if builder.insert_unmatched:
        parts.append("when not matched insert all")
    if builder.delete_unmatched_by_source:
        parts.append("when not matched by source delete")
    return ": ".join([parts[0], ", ".join(parts[1:])]) if len(parts) > 1 else parts[0]
