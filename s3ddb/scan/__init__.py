"""The scanner's building blocks: reading a fragment's visible rows with pruning by
statistics (fragment and row group), late materialization and ranged reads.

:mod:`s3ddb.reading.version_reader` drives them over a version (``to_table``, ``to_batches``,
``count_rows``, streams); delete, update and merge_insert find rows through them.
"""

from s3ddb.format.rowgroups import ColumnStats, RowGroupPredicate
from s3ddb.scan.visible_rows import (
    FragmentPlan,
    fragment_may_match,
    plan_fragment,
    read_planned,
    read_rows_at,
    read_visible_rows,
)

__all__ = [
    "ColumnStats",
    "FragmentPlan",
    "RowGroupPredicate",
    "fragment_may_match",
    "plan_fragment",
    "read_planned",
    "read_rows_at",
    "read_visible_rows",
]
