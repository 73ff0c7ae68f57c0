"""Reading the visible rows of a fragment: plan (fragment statistics, then row-group
statistics, then the deletion file), then read (filter columns first, the others
only for row groups with a match).

When nearly every row group a scan has read held a match, the other columns would
be read anyway: the scan's :class:`MatchHistory` then has it read every column in
one pass, the filter applied after (as pyarrow's dataset does), and it goes back to
late materialization as soon as row groups without a match show up again.

Every skip is decided from statistics that bound the data (:class:`ColumnStats`); a
row that is read still goes through the exact filter, so pruning only ever saves
work and never changes a result. Fragments without statistics are never skipped
whole; fragments stored in several data files (after an update of some columns,
whose row groups need not line up) are read whole, their rows filtered after.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

from s3ddb.format.bases import Files
from s3ddb.format.datafile import assemble_columns, read_fragment
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_list import FragmentList
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.parquet_source import ParquetSource
from s3ddb.format.row_evaluation import EVALUATION_ERRORS, evaluation_error, filter_rows
from s3ddb.format.rowgroups import (
    MatchShare,
    RowGroupPredicate,
    row_group_stats,
    top_level_leaves,
)
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.stats import fragment_column_stats, summary_column_stats

__all__ = [
    "SURE_MATCHES",
    "FragmentPlan",
    "MatchHistory",
    "empty_table",
    "filter_columns",
    "fragment_may_match",
    "plan_fragment",
    "read_multi_file",
    "read_planned",
    "read_rows_at",
    "read_visible_rows",
    "read_with_positions",
]


def empty_table(schema: DatasetSchema, columns: list[str]) -> pa.Table:
    return pa.schema([schema.arrow.field(n) for n in columns]).empty_table()


def filter_columns(predicate: pc.Expression | None, schema: DatasetSchema) -> list[str]:
    """The columns ``predicate`` reads, in schema order."""
    if predicate is None:
        return []
    from s3ddb.expressions import referenced_columns

    used = referenced_columns(predicate, schema.arrow)
    return [n for n in schema.arrow.names if n in used]


def fragment_may_match(
    fragment: FragmentMetadata, schema: DatasetSchema, may_match: RowGroupPredicate | None
) -> bool:
    """False only if ``fragment``'s statistics show no row can match."""
    if may_match is None or not fragment.stats:
        return True
    stats = fragment_column_stats(fragment, schema)
    return not stats or may_match(stats, fragment.physical_rows)


def candidate_fragments(
    fragments: FragmentList, schema: DatasetSchema, may_match: RowGroupPredicate | None
) -> list[FragmentMetadata]:
    """The fragments, in order, but those whose statistics show no row can match,
    and those of fragment-list chunks whose bounds show it (never fetched)."""
    if may_match is None:
        return list(fragments)
    test = may_match

    def chunk_may_match(ref: Any) -> bool:
        stats = summary_column_stats(ref.bounds, ref.physical_rows, schema)
        return not stats or test(stats, ref.physical_rows)

    listed = fragments.matching(chunk_may_match)
    return [f for f in listed if fragment_may_match(f, schema, may_match)]


@dataclass
class FragmentPlan:
    """What to read of one fragment: its row groups left after pruning (``groups``,
    with their first physical row and row count) and its kept-row mask.

    ``source`` is None for a fragment read whole (several data files)."""

    files: Files
    fragment: FragmentMetadata
    source: ParquetSource | None
    groups: list[int] = field(default_factory=list)
    keep: np.ndarray | None = None  # over physical rows; None: nothing deleted
    #: Matching rows each planned row group holds by its statistics' estimate
    #: (:data:`~s3ddb.format.rowgroups.MatchShare`); None: no estimate.
    expected_matches: dict[int, float] | None = None

    def estimated_bytes(self, groups: list[int], names: list[str]) -> int:
        if self.source is None:
            f = self.fragment
            return 3 * sum(d.file_size_bytes for d in f.files)
        return sum(self.source.group_bytes(g, names) for g in groups)


def plan_fragment(
    files: Files,
    fragment: FragmentMetadata,
    schema: DatasetSchema,
    may_match: RowGroupPredicate | None,
    *,
    keep_open: bool = False,
    match_share: MatchShare | None = None,
) -> FragmentPlan | None:
    """The plan to read ``fragment``, or None when its statistics (or its row groups'
    statistics, or its deletions) leave nothing to read: the footer of a one-file
    fragment is read here, once per scan, never for a fragment skipped whole.

    ``match_share`` (the filter's estimate, if it has one) gives each planned row
    group its :attr:`FragmentPlan.expected_matches`.

    ``keep_open``: the plan's source keeps its local file open for the reads that
    follow at once (see :class:`ParquetSource`); the caller closes it
    (``plan.source.close()``). A file is never left open without a plan returned.

    Raises:
        ManifestCorruptError: the deletion file is missing or corrupt.
    """
    if not fragment_may_match(fragment, schema, may_match):
        return None
    if fragment.num_rows == 0:
        if fragment.physical_rows == 0 and fragment.files:
            # No row is claimed, so nothing would read the file: its footer must
            # agree, or a manifest could hide a file's rows by claiming none.
            ParquetSource(files, fragment.files[0], fragment).close()
        return None
    # The footer is read (and its row count checked against the fragment's
    # physical_rows) before anything is allocated in proportion to that claimed count.
    source = (
        ParquetSource(files, fragment.files[0], fragment, keep_open=keep_open)
        if fragment.files
        else None
    )
    try:
        plan = _plan_with(files, fragment, schema, may_match, source, match_share)
    except BaseException:
        if source is not None:
            source.close()
        raise
    if source is not None and (plan is None or plan.source is None):
        source.close()
    return plan


def _plan_with(
    files: Files,
    fragment: FragmentMetadata,
    schema: DatasetSchema,
    may_match: RowGroupPredicate | None,
    source: ParquetSource | None,
    match_share: MatchShare | None = None,
) -> FragmentPlan | None:
    keep = None
    if fragment.deletion_file is not None:
        deleted = read_deleted_rows(files, fragment)
        if len(deleted):
            keep = np.ones(fragment.physical_rows, dtype=bool)
            keep[np.fromiter(deleted, dtype=np.int64, count=len(deleted))] = False
    if len(fragment.files) != 1 or source is None:
        return FragmentPlan(files, fragment, None, keep=keep)
    groups = list(range(source.metadata.num_row_groups))
    expected: dict[int, float] | None = None
    if may_match is not None:
        by_id = {i: n for n, i in _ids(schema)}
        file_names = {f: by_id[i] for i, f in source.columns(by_id).items()}
        leaves = top_level_leaves(source.metadata)
        kept: list[int] = []
        expected = {} if match_share is not None else None
        for g in groups:
            stats = row_group_stats(source.metadata, g, file_names, leaves)
            rows = source.group_rows[g]
            if not may_match(stats, rows):
                continue
            kept.append(g)
            if expected is not None and match_share is not None:
                share = match_share(stats, rows)
                if share is None:
                    expected = None
                else:
                    expected[g] = share * rows
        groups = kept
    if keep is not None:
        # Row groups whose rows are all deleted are not read either.
        groups = [g for g in groups if keep[slice(*_bounds(source, g))].any()]
    if not groups:
        return None
    return FragmentPlan(files, fragment, source, groups, keep, expected)


def _ids(schema: DatasetSchema) -> list[tuple[str, int]]:
    return [(p[0], i) for p, i in schema.ids if len(p) == 1]


def _bounds(source: ParquetSource, g: int) -> tuple[int, int]:
    start = source.group_starts[g]
    return start, start + source.group_rows[g]


def _read_columns(
    plan: FragmentPlan,
    groups: list[int],
    schema: DatasetSchema,
    names: list[str],
    fetched: list[tuple[int, bytes]] | None = None,
    heads: list[int] | None = None,
) -> pa.Table:
    """``names`` (dataset columns) of row groups ``groups``, all physical rows, or
    only the first ``heads[i]`` of group ``groups[i]`` (``fetched``, ``heads``: see
    :meth:`ParquetSource.read`)."""
    source = plan.source
    assert source is not None
    wanted = dict(zip(names, schema.top_level_ids(names)))
    # Only the columns the fragment says this file holds: one it does not declare
    # (added later) reads as nulls even if the file has a column with that id.
    present = source.columns(wanted.values())
    table = source.read(groups, list(present.values()), fetched, heads)
    pieces = {n: table.column(present[i]) for n, i in wanted.items() if i in present}
    rows = sum(heads) if heads is not None else sum(source.group_rows[g] for g in groups)
    return assemble_columns(pieces, schema, names, rows)


def _keep_mask(plan: FragmentPlan, groups: list[int]) -> np.ndarray | None:
    if plan.keep is None:
        return None
    assert plan.source is not None
    return np.concatenate([plan.keep[slice(*_bounds(plan.source, g))] for g in groups])


def _matches(table: pa.Table, predicate: pc.Expression) -> pa.ChunkedArray:
    """Where ``predicate`` is TRUE over ``table``'s rows (SQL: NULL is not a match), as
    Arrow booleans without nulls (kept in Arrow: a round trip through numpy unpacks
    and packs every bit, a third of the cost of filtering a fragment).

    Raises:
        InvalidExpressionError: evaluating the predicate failed.
    """
    if table.num_rows == 0:
        return pa.chunked_array([], pa.bool_())
    try:
        # Evaluated in this thread: a reading thread's filter must not queue behind
        # other fragments' decoding on Arrow's shared pool (and costs half the CPU).
        # An Acero plan of the table and one projection: half the overhead of a
        # dataset's scanner over it.
        plan = acero.Declaration.from_sequence(
            [
                acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
                acero.Declaration("project", acero.ProjectNodeOptions([predicate], ["m"])),
            ]
        )
        mask = plan.to_table(use_threads=False).column("m")
    except EVALUATION_ERRORS as exc:
        raise evaluation_error(exc, f"the filter {predicate}") from exc
    return pc.fill_null(mask.cast(pa.bool_()), False)


def _kept(mask: pa.ChunkedArray, keep: np.ndarray | None) -> pa.ChunkedArray:
    """``mask`` and the rows ``keep`` (not deleted; None: all) keeps."""
    return mask if keep is None else pc.and_(mask, pa.array(keep))


def _any(mask: pa.ChunkedArray) -> bool:
    return pc.any(mask).as_py() is True


#: Matching rows a row group's statistics must promise before the first reads of a
#: scan take every column in one pass: a row group holding n matches evenly spread
#: misses them all with probability about e**-n (5 % at 3).
SURE_MATCHES = 3.0


class MatchHistory:
    """Of the latest row groups a scan filtered (at most :attr:`WINDOW`), which held
    a match: whether reading the filter's columns first still pays. Shared by the
    threads of one scan (thread-safe).

    Late materialization saves decoding the other columns of row groups without a
    match, and costs a second pass over each read (a file opened and decoded twice,
    less parallel decoding). It is used until :attr:`MIN_SEEN` row groups have been
    seen, and while more than one in :attr:`MISS_SHARE_INVERSE` of the latest held no
    match; otherwise a read takes every column in one pass (and still records which
    of its row groups held a match, so the scan returns to late materialization
    where the data changes).
    """

    #: How many of the latest row groups decide.
    WINDOW = 64
    #: Row groups seen before one pass may be chosen.
    MIN_SEEN = 8
    #: Late materialization while more than 1 in this many recent row groups missed.
    MISS_SHARE_INVERSE = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: deque[bool] = deque(maxlen=self.WINDOW)

    def record(self, held: Iterable[bool]) -> None:
        """Note, for each row group a read filtered, whether it held a match."""
        with self._lock:
            self._held.extend(held)

    def late_materialization_pays(self) -> bool:
        """Whether the next read should read the filter's columns first."""
        with self._lock:
            seen, hits = len(self._held), sum(self._held)
        return seen < self.MIN_SEEN or (seen - hits) * self.MISS_SHARE_INVERSE > seen

    def undecided(self) -> bool:
        """Whether too few row groups were seen to decide (:attr:`MIN_SEEN`)."""
        with self._lock:
            return len(self._held) < self.MIN_SEEN


def _groups_held(source: ParquetSource, groups: list[int], mask: pa.ChunkedArray) -> list[bool]:
    """For each of ``groups`` (read one after the other), whether ``mask`` holds a
    match in its rows."""
    held, offset = [], 0
    for g in groups:
        rows = source.group_rows[g]
        held.append(_any(mask.slice(offset, rows)))
        offset += rows
    return held


def read_planned(
    plan: FragmentPlan,
    schema: DatasetSchema,
    columns: list[str],
    predicate: pc.Expression | None,
    groups: list[int] | None = None,
    history: MatchHistory | None = None,
) -> pa.Table:
    """The visible rows of ``plan``'s row groups ``groups`` (default: all planned)
    that match ``predicate``, with ``columns`` in order.

    Filter columns are read first; the other columns only for row groups holding a
    match (late materialization), unless ``history`` (the scan's, see
    :class:`MatchHistory`) says nearly every row group matches: then every column in
    one pass. Deleted rows are dropped by position.

    Raises:
        InvalidExpressionError: evaluating the predicate failed.
    """
    if plan.source is None:
        return read_multi_file(plan, schema, columns, predicate)
    groups = plan.groups if groups is None else groups
    keep = _keep_mask(plan, groups)
    if predicate is None:
        table = _read_columns(plan, groups, schema, columns)
        return table if keep is None else table.filter(pa.array(keep))
    used = filter_columns(predicate, schema)
    rest = [c for c in columns if c not in used]
    one_pass = bool(rest) and history is not None and not history.late_materialization_pays()
    if (
        rest
        and history is not None
        and history.undecided()
        and plan.expected_matches is not None
        and min(plan.expected_matches.get(g, 0.0) for g in groups) >= SURE_MATCHES
    ):
        # Nothing seen yet (the first reads of a scan start together): the row
        # groups' statistics say each holds matches, so reading the filter's
        # columns first would skip nothing, and two passes cost 10-15 % more.
        one_pass = True
    if one_pass:
        assert history is not None
        table = _read_columns(plan, groups, schema, columns + [c for c in used if c not in columns])
        mask = _kept(_matches(table, predicate), keep)
        history.record(_groups_held(plan.source, groups, mask))
        return table.select(columns).filter(mask)
    # Byte ranges the filter columns' read fetched (coalesced requests often span the
    # other columns too): the second read takes what it needs from them.
    fetched: list[tuple[int, bytes]] = []
    first = _read_columns(plan, groups, schema, used, fetched)
    mask = _kept(_matches(first, predicate), keep)
    held = _groups_held(plan.source, groups, mask)
    if history is not None:
        history.record(held)
    if not any(held):
        return empty_table(schema, columns)
    if not rest:
        return first.filter(mask).select(columns)
    # Late materialization: the other columns only of row groups with a match.
    hit = [g for g, h in zip(groups, held) if h]
    if len(hit) < len(groups):
        spans, offset = [], 0
        for g, h in zip(groups, held):
            rows = plan.source.group_rows[g]
            if h:
                spans.append((offset, rows))
            offset += rows
        first = pa.concat_tables([first.slice(s, n) for s, n in spans])
        mask = pa.chunked_array([c for s, n in spans for c in mask.slice(s, n).chunks], pa.bool_())
    second = _read_columns(plan, hit, schema, rest, fetched)
    by_name = {n: first.column(n) for n in used}
    by_name.update({n: second.column(n) for n in rest})
    out = pa.schema([schema.arrow.field(n) for n in columns])
    table = pa.Table.from_arrays([by_name[n] for n in columns], schema=out)
    return table.filter(mask)


def read_visible_rows(
    files: Files,
    fragment: FragmentMetadata,
    schema: DatasetSchema,
    columns: list[str],
    predicate: pc.Expression | None = None,
    may_match: RowGroupPredicate | None = None,
) -> pa.Table:
    """The rows of ``fragment`` that are not deleted and match ``predicate``, with
    ``columns`` in order. ``files``: the manifest's
    :class:`~s3ddb.format.bases.FileResolver` (or its plain store if it has no bases).

    ``may_match`` (see :data:`RowGroupPredicate`) skips the fragment (by its
    statistics) and row groups; it must be implied by ``predicate``, which is still
    applied to every row read.

    Raises:
        ManifestCorruptError: the fragment's deletion file is missing or corrupt.
        InvalidExpressionError: evaluating the predicate failed.
    """
    plan = plan_fragment(files, fragment, schema, may_match, keep_open=True)
    if plan is None:
        return empty_table(schema, columns)
    try:
        return read_planned(plan, schema, columns, predicate)
    finally:
        if plan.source is not None:
            plan.source.close()


def read_multi_file(
    plan: FragmentPlan,
    schema: DatasetSchema,
    columns: list[str],
    predicate: pc.Expression | None,
) -> pa.Table:
    """A fragment of several data files, read whole (its files' row groups need not
    line up), deletions and ``predicate`` applied after."""
    needed = list(columns) + [c for c in filter_columns(predicate, schema) if c not in columns]
    table = read_fragment(plan.files, plan.fragment, schema, needed)
    if plan.keep is not None:
        table = table.filter(pa.array(plan.keep))
    if predicate is not None:
        table = filter_rows(table, predicate)
    return table.select(columns)


def read_rows_at(
    files: Files,
    fragment: FragmentMetadata,
    schema: DatasetSchema,
    columns: list[str],
    offsets: object,
) -> tuple[pa.Table, int]:
    """The physical rows of ``fragment`` at ``offsets`` (sorted, deletions not applied),
    ``columns`` in order, and how many row groups were read: of a one-file fragment
    only the row groups holding those rows (an index lookup's point reads), each
    decoded only up to the last of them it holds."""
    positions = np.asarray(offsets, dtype=np.int64)
    if len(positions) == 0:
        return assemble_columns({}, schema, columns, 0), 0
    if len(fragment.files) != 1:
        table = read_fragment(files, fragment, schema, columns)
        return table.take(pa.array(positions)), 0
    with ParquetSource(files, fragment.files[0], fragment, keep_open=True) as source:
        plan = FragmentPlan(files, fragment, source)
        starts = np.asarray([*source.group_starts, fragment.physical_rows], dtype=np.int64)
        owner = np.searchsorted(starts, positions, side="right") - 1
        groups = sorted(set(owner.tolist()))
        # Of each group, its rows up to the last one asked for.
        heads = [int(positions[owner == g].max() - starts[g]) + 1 for g in groups]
        table = _read_columns(plan, groups, schema, columns, heads=heads)
    # Offsets within the concatenation of the row groups' heads read.
    local = np.empty(len(positions), dtype=np.int64)
    base = 0
    for g, head in zip(groups, heads):
        chosen = owner == g
        local[chosen] = positions[chosen] - starts[g] + base
        base += head
    return table.take(pa.array(local)), len(groups)


def read_with_positions(
    plan: FragmentPlan,
    schema: DatasetSchema,
    columns: list[str],
    predicate: pc.Expression | None = None,
) -> tuple[pa.Table, np.ndarray]:
    """The visible rows of ``plan`` matching ``predicate`` (``columns`` in order) and
    their physical positions in the fragment, ascending: how delete, update and
    merge_insert find rows (row groups the plan pruned hold none of them).

    Raises:
        InvalidExpressionError: evaluating the predicate failed.
    """
    needed = list(columns) + [c for c in filter_columns(predicate, schema) if c not in columns]
    if plan.source is None:
        table = read_fragment(plan.files, plan.fragment, schema, needed)
        positions = np.arange(plan.fragment.physical_rows, dtype=np.int64)
        keep = plan.keep
    else:
        table = _read_columns(plan, plan.groups, schema, needed)
        positions = np.concatenate(
            [np.arange(*_bounds(plan.source, g), dtype=np.int64) for g in plan.groups]
        )
        keep = _keep_mask(plan, plan.groups)
    mask = np.ones(len(positions), dtype=bool) if keep is None else keep.copy()
    if predicate is not None:
        mask &= np.asarray(_matches(table, predicate).to_numpy(zero_copy_only=False), dtype=bool)
    return table.select(columns).filter(pa.array(mask)), positions[mask]
