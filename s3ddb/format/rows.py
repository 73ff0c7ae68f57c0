"""Evaluating pyarrow expressions over the rows of a fragment.

Predicates follow SQL: a row matches only where the predicate is TRUE (NULL does not
match). Row positions are offsets into the fragment's physical rows, the unit of
deletion files and of a transaction's affected rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from pyroaring import BitMap


def evaluate(table: pa.Table, expressions: dict[str, pc.Expression]) -> pa.Table:
    """A table of one column per expression, evaluated row by row over ``table``."""
    if table.num_rows == 0 and not table.num_columns:
        return pa.table({name: pa.array([], pa.null()) for name in expressions})
    return pads.dataset(table).to_table(columns=expressions)


def matching_rows(
    table: pa.Table, predicate: pc.Expression, visible: BitMap | None = None
) -> BitMap:
    """Positions of ``table``'s rows where ``predicate`` is TRUE, restricted to
    ``visible`` (None: every row)."""
    if table.num_rows == 0:
        return BitMap()
    mask = evaluate(table, {"m": predicate}).column("m")
    mask = pc.fill_null(mask.cast(pa.bool_()), False)
    positions = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    rows = BitMap(positions.astype(np.uint32))
    return rows & visible if visible is not None else rows


def all_rows(n: int) -> BitMap:
    return BitMap(range(n))


def take_rows(table: pa.Table, rows: BitMap) -> pa.Table:
    """The rows of ``table`` at ``rows`` (ascending)."""
    return table.take(pa.array(np.fromiter(rows, dtype=np.int64, count=len(rows))))
