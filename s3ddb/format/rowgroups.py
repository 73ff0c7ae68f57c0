"""What statistics say about a column, and a Parquet row group's statistics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["ColumnStats", "MatchShare", "RowGroupPredicate", "row_group_stats", "top_level_leaves"]


@dataclass(frozen=True)
class ColumnStats:
    """What a row group's (or fragment's) statistics say about one column
    (``None``: not recorded)."""

    min: Any
    max: Any
    null_count: int | None
    num_values: int


#: Decides from column statistics (by column name) and the row count whether a row
#: group (or a fragment) may hold a matching row. It must answer True whenever it
#: cannot tell.
RowGroupPredicate = Callable[[Mapping[str, ColumnStats], int], bool]

#: Estimates from column statistics and the row count which share of a row group's
#: rows match (values taken as spread evenly between min and max); None when the
#: statistics cannot tell.
MatchShare = Callable[[Mapping[str, ColumnStats], int], "float | None"]


def row_group_stats(
    metadata: pq.FileMetaData,
    index: int,
    names_by_path: Mapping[str, str],
    leaves: Mapping[str, int] | None = None,
) -> dict[str, ColumnStats]:
    """Statistics of row group ``index`` by dataset column name (``names_by_path``:
    the file's top-level column name -> the dataset's), for top-level primitive
    columns. ``leaves``: :func:`top_level_leaves` of ``metadata``, when the caller
    reads several row groups of one file."""
    if leaves is None:
        leaves = top_level_leaves(metadata)
    group = metadata.row_group(index)
    out = {}
    for file_name, name in names_by_path.items():
        leaf = leaves.get(file_name)
        if leaf is None:
            continue
        stats = group.column(leaf).statistics
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


def _leaf_count(t: pa.DataType) -> int:
    """How many Parquet leaf columns a column of Arrow type ``t`` is stored as."""
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_count(t.value_type)
    return 1


def top_level_leaves(metadata: pq.FileMetaData, arrow: pa.Schema | None = None) -> dict[str, int]:
    """Top-level primitive column name -> its leaf column index in the row groups
    (``arrow``: the file's Arrow schema, if the caller has it).

    Leaves are counted in schema order, never matched by their dotted path: a
    top-level column ``"a.b"`` and the child ``b`` of a struct ``a`` have the same
    one. Empty when the count disagrees with the file (no statistics: that only
    costs reads, never rows).
    """
    if arrow is None:
        arrow = metadata.schema.to_arrow_schema()
    out: dict[str, int] = {}
    index = 0
    for field in arrow:
        count = _leaf_count(field.type)
        if count == 1 and not pa.types.is_nested(field.type):
            out[field.name] = index
        index += count
    if index != metadata.num_columns:
        return {}
    for name, i in out.items():
        column = metadata.schema.column(i)
        if column.name != name or column.max_repetition_level != 0:
            return {}
    return out
