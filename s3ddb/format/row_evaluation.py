"""Evaluating pyarrow expressions over the rows of a fragment.

Predicates follow SQL: a row matches only where the predicate is TRUE (NULL does not
match). Row positions are offsets into the fragment's physical rows, the unit of
deletion files and of a transaction's affected rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from pyroaring import BitMap

from s3ddb.errors import InvalidExpressionError
from s3ddb.format.schema import conform

__all__ = [
    "EVALUATION_ERRORS",
    "all_rows",
    "apply_values",
    "evaluate",
    "evaluation_error",
    "filter_rows",
    "matching_rows",
    "take_rows",
    "within_key_bounds",
]

#: What pyarrow raises when evaluating an expression over rows fails (division by
#: zero, overflow, a cast that does not fit...): a fault of the expression.
EVALUATION_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def evaluation_error(exc: Exception, what: str) -> InvalidExpressionError:
    """The error saying that evaluating ``what`` failed with pyarrow's ``exc``."""
    return InvalidExpressionError(f"evaluating {what} failed: {str(exc).splitlines()[0]}")


def evaluate(table: pa.Table, expressions: dict[str, pc.Expression], what: str = "") -> pa.Table:
    """A table of one column per expression, evaluated row by row over ``table``.

    Raises:
        InvalidExpressionError: evaluation failed (division by zero, overflow, a cast
            that does not fit...).
    """
    if table.num_rows == 0 and not table.num_columns:
        return pa.table({name: pa.array([], pa.null()) for name in expressions})
    try:
        return pads.dataset(table).to_table(columns=expressions)
    except EVALUATION_ERRORS as exc:
        what = what or ", ".join(map(str, expressions.values()))
        raise evaluation_error(exc, what) from exc


def filter_rows(table: pa.Table, predicate: pc.Expression) -> pa.Table:
    """The rows of ``table`` where ``predicate`` is TRUE.

    Raises:
        InvalidExpressionError: evaluating the predicate failed.
    """
    try:
        return table.filter(predicate)
    except EVALUATION_ERRORS as exc:
        raise evaluation_error(exc, f"the filter {predicate}") from exc


def matching_rows(
    table: pa.Table, predicate: pc.Expression, visible: BitMap | None = None
) -> BitMap:
    """Positions of ``table``'s rows where ``predicate`` is TRUE, restricted to
    ``visible`` (None: every row)."""
    if table.num_rows == 0:
        return BitMap()
    mask = evaluate(table, {"m": predicate}, f"the predicate {predicate}").column("m")
    mask = pc.fill_null(mask.cast(pa.bool_()), False)
    positions = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    rows = BitMap(positions.astype(np.uint32))
    return rows & visible if visible is not None else rows


def all_rows(n: int) -> BitMap:
    return BitMap(range(n))


def take_rows(table: pa.Table, rows: BitMap) -> pa.Table:
    """The rows of ``table`` at ``rows`` (ascending)."""
    return table.take(pa.array(np.fromiter(rows, dtype=np.int64, count=len(rows))))


def apply_values(
    rows: pa.Table, values: dict[str, pc.Expression], target: pa.Schema, where: str
) -> pa.Table:
    """``rows`` with the columns in ``values`` replaced by those expressions evaluated
    over them, conformed to ``target``'s fields.

    Raises:
        InvalidExpressionError: evaluation failed.
        SchemaMismatchError: a result does not fit its column (e.g. NULL in NOT NULL).
    """
    computed = evaluate(rows, values, "the update values")
    columns = {
        name: computed.column(name) if name in values else rows.column(name)
        for name in rows.column_names
    }
    table = pa.table(columns)
    return conform(table, pa.schema([target.field(n) for n in rows.column_names]), where=where)


def within_key_bounds(
    table: pa.Table, bounds: Iterable[tuple[str, Any, Any]], prefix: str = ""
) -> pa.ChunkedArray | None:
    """Where each row's key lies within every ``(column, low, high)`` bound (a row
    with a NULL key part does not), reading column ``prefix + column``; None when
    there is no bound."""
    inside = None
    for name, low, high in bounds:
        column = table.column(prefix + name)
        part = pc.and_(
            pc.greater_equal(column, pa.scalar(low).cast(column.type)),
            pc.less_equal(column, pa.scalar(high).cast(column.type)),
        )
        inside = part if inside is None else pc.and_(inside, part)
    return None if inside is None else pc.fill_null(inside, False)
