"""What statistics say about a column, and a Parquet row group's statistics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

__all__ = ["ColumnStats", "RowGroupPredicate", "row_group_stats"]


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


def row_group_stats(
    metadata: pq.FileMetaData, index: int, names_by_path: Mapping[str, str]
) -> dict[str, ColumnStats]:
    """Statistics of row group ``index`` by dataset column name (``names_by_path``:
    the file's top-level column name -> the dataset's)."""
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
