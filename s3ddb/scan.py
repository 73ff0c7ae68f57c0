"""Reading the visible rows of fragments, skipping row groups a filter cannot match.

A :class:`ColumnBounds` predicate says, from a Parquet row group's statistics (min,
max, null count per column), whether the row group may hold a matching row. Row
groups it rules out are never read; the rows that are read still go through the exact
filter, so pruning only ever saves work and never changes a result.

Pruning applies to fragments stored in one data file (every fragment s3ddb writes,
until an update rewrites some of its columns into a second file, whose row groups
need not line up with the first's). Other fragments are read whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3ddb.format.bases import Files
from s3ddb.format.datafile import (
    assemble_columns,
    file_columns_by_id,
    open_data_file,
    read_fragment,
)
from s3ddb.format.deletion import read_deletion_mask
from s3ddb.format.fragment import FragmentMetadata
from s3ddb.format.rows import filter_rows
from s3ddb.format.schema import DatasetSchema


@dataclass(frozen=True)
class ColumnStats:
    """What a row group's statistics say about one column (``None``: not recorded)."""

    min: Any
    max: Any
    null_count: int | None
    num_values: int


#: Decides from column statistics (by column name) and the row count whether a row
#: group may hold a matching row. It must answer True whenever it cannot tell.
RowGroupPredicate = Callable[[Mapping[str, ColumnStats], int], bool]


def _row_group_stats(
    metadata: pq.FileMetaData, index: int, names_by_path: Mapping[str, str]
) -> dict[str, ColumnStats]:
    group = metadata.row_group(index)
    out = {}
    for c in range(group.num_columns):
        column = group.column(c)
        name = names_by_path.get(column.path_in_schema)
        if name is None:
            continue
        stats = column.statistics
        if stats is None:
            out[name] = ColumnStats(None, None, None, group.num_rows)
            continue
        has_bounds = stats.has_min_max
        out[name] = ColumnStats(
            stats.min if has_bounds else None,
            stats.max if has_bounds else None,
            stats.null_count if stats.has_null_count else None,
            group.num_rows,
        )
    return out


def _read_pruned(
    files: Files,
    fragment: FragmentMetadata,
    schema: DatasetSchema,
    columns: list[str],
    may_match: RowGroupPredicate,
) -> tuple[pa.Table, list[tuple[int, int]]] | None:
    """The row groups of a one-file fragment that ``may_match`` keeps, and their
    (first row, row count) ranges; None if the fragment has several data files."""
    if len(fragment.files) != 1:
        return None
    data_file = fragment.files[0]
    wanted = dict(zip(columns, schema.top_level_ids(columns)))
    with open_data_file(files, data_file) as f:
        parquet = pq.ParquetFile(f)
        by_id = file_columns_by_id(parquet)
        all_names = list(schema.arrow.names)
        dataset_names = {
            by_id[i]: n for n, i in zip(all_names, schema.top_level_ids(all_names)) if i in by_id
        }
        metadata = parquet.metadata
        keep, ranges, start = [], [], 0
        for index in range(metadata.num_row_groups):
            rows = metadata.row_group(index).num_rows
            if may_match(_row_group_stats(metadata, index, dataset_names), rows):
                keep.append(index)
                ranges.append((start, rows))
            start += rows
        if not keep:
            return _empty(schema, columns), []
        present = [by_id[i] for i in wanted.values() if i in by_id]
        if len(keep) == metadata.num_row_groups:
            table = parquet.read(columns=present)
        else:
            table = parquet.read_row_groups(keep, columns=present)
    pieces = {name: table.column(by_id[i]) for name, i in wanted.items() if i in by_id}
    return assemble_columns(pieces, schema, columns, sum(n for _s, n in ranges)), ranges


def _empty(schema: DatasetSchema, columns: list[str]) -> pa.Table:
    return pa.schema([schema.arrow.field(n) for n in columns]).empty_table()


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

    ``may_match`` (see :data:`RowGroupPredicate`) skips row groups; it must be implied
    by ``predicate``, which is still applied to every row read.

    Raises:
        ManifestCorruptError: the fragment's deletion file is missing or corrupt.
    """
    from s3ddb.expressions import referenced_columns

    needed = list(columns)
    if predicate is not None:
        needed += [
            c for c in sorted(referenced_columns(predicate, schema.arrow)) if c not in needed
        ]
    pruned = (
        _read_pruned(files, fragment, schema, needed, may_match) if may_match is not None else None
    )
    if pruned is None:
        table = read_fragment(files, fragment, schema, needed)
        if fragment.deletion_file is not None:
            table = table.filter(read_deletion_mask(files, fragment))
    else:
        table, ranges = pruned
        if not ranges:
            return _empty(schema, columns)
        if fragment.deletion_file is not None:
            mask = read_deletion_mask(files, fragment)
            table = table.filter(pa.concat_arrays([mask.slice(s, n) for s, n in ranges]))
    if predicate is not None:
        table = filter_rows(table, predicate)
    return table.select(columns)


def read_rows_at(
    store: Files,
    fragment: FragmentMetadata,
    schema: DatasetSchema,
    columns: list[str],
    offsets: Any,
) -> tuple[pa.Table, int]:
    """The physical rows of ``fragment`` at ``offsets`` (sorted, deletions not applied),
    ``columns`` in order, and how many row groups were read: of a one-file fragment
    only the row groups holding those rows (an index lookup's point reads)."""
    import numpy as np

    offsets = np.asarray(offsets, dtype=np.int64)
    if len(offsets) == 0:
        return assemble_columns({}, schema, columns, 0), 0
    if len(fragment.files) != 1:
        table = read_fragment(store, fragment, schema, columns)
        return table.take(pa.array(offsets)), 0
    wanted = dict(zip(columns, schema.top_level_ids(columns)))
    with open_data_file(store, fragment.files[0]) as f:
        parquet = pq.ParquetFile(f)
        by_id = file_columns_by_id(parquet)
        metadata = parquet.metadata
        sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        groups = sorted(set(np.searchsorted(starts, offsets, side="right") - 1))
        present = [by_id[i] for i in wanted.values() if i in by_id]
        table = parquet.read_row_groups(groups, columns=present)
    # Offsets within the concatenation of the row groups read.
    local, base = np.empty(len(offsets), dtype=np.int64), 0
    group_base = {}
    for g in groups:
        group_base[g] = base
        base += sizes[g]
    owner = np.searchsorted(starts, offsets, side="right") - 1
    for g in groups:
        mask = owner == g
        local[mask] = offsets[mask] - starts[g] + group_base[g]
    pieces = {name: table.column(by_id[i]) for name, i in wanted.items() if i in by_id}
    assembled = assemble_columns(pieces, schema, columns, base)
    return assembled.take(pa.array(local)), len(groups)
