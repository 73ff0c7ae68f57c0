"""Pruning by statistics for SQL-text filters.

From a filter such as ``"id >= 1000 AND (name = 'x' OR name = 'y')"`` this derives a
:data:`s3ddb.format.rowgroups.RowGroupPredicate`, used for fragments (their statistics in the
manifest) and Parquet row groups alike. It reads terms ``column <op> literal``
(``=``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``, ``IS [NOT] NULL``) on
integer, float64, string, boolean and date columns, combined by AND (each term read is
implied by the filter) and OR (only when every branch says something); anything else
(NOT, functions, other types, pyarrow Expressions) prunes nothing. Statistics that
rule the filter out mean no matching row; the exact filter still runs on every row
read, so pruning never changes a result.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from s3ddb.errors import S3DDBError
from s3ddb.expressions._sql import parse_sql_tree
from s3ddb.expressions.conditions import Condition, PushedFilters
from s3ddb.format.rowgroups import ColumnStats, RowGroupPredicate
from s3ddb.format.stats import exact_bound_type

__all__ = [
    "AllOf",
    "AnyOf",
    "Pruner",
    "row_group_pruner",
]

_OPS: dict[type[exp.Expr], tuple[str, str]] = {
    # node -> (op with the column on the left, op with the column on the right)
    exp.EQ: ("eq", "eq"),
    exp.GT: ("gt", "lt"),
    exp.GTE: ("ge", "le"),
    exp.LT: ("lt", "gt"),
    exp.LTE: ("le", "ge"),
}


_NOT_A_VALUE = object()


def _literal(node: exp.Expr, t: pa.DataType) -> Any:
    """The Python value of a literal for a column of type ``t``, or _NOT_A_VALUE when
    it is not a literal whose comparison with the column is unambiguous."""
    negate = False
    if isinstance(node, exp.Neg):
        node, negate = node.this, True
    if isinstance(node, exp.Cast) and pa.types.is_date32(t) and node.to.is_type("date"):
        node = node.this
    if isinstance(node, exp.Boolean) and pa.types.is_boolean(t) and not negate:
        return bool(node.this)
    if not isinstance(node, exp.Literal):
        return _NOT_A_VALUE
    text = node.this
    if node.is_string:
        if negate:
            return _NOT_A_VALUE
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return text
        if pa.types.is_date32(t):
            try:
                return dt.date.fromisoformat(text)
            except ValueError:
                return _NOT_A_VALUE
        return _NOT_A_VALUE
    if pa.types.is_float64(t):
        try:
            number = float(text)
        except ValueError:
            return _NOT_A_VALUE
        return -number if negate else number
    if not pa.types.is_integer(t):
        return _NOT_A_VALUE
    try:
        value = int(text)
    except ValueError:
        return _NOT_A_VALUE  # 1.5, 1e3: compared as floats
    return -value if negate else value


def _column(node: exp.Expr, schema: pa.Schema) -> tuple[str, pa.DataType] | None:
    if not isinstance(node, exp.Column) or node.table:
        return None
    name = node.name
    if name not in schema.names:
        return None
    t = schema.field(name).type
    # float64 too: statistics leave NaN out, and NaN satisfies no comparison pruned
    # here (float32 is left out: a literal may be rounded to it before comparing).
    return (name, t) if exact_bound_type(t) or pa.types.is_float64(t) else None


def _conditions(node: exp.Expr, schema: pa.Schema) -> list[Condition]:
    """The conditions one term (not an AND, OR or parenthesis: :func:`_pruner` takes
    those apart) implies."""
    ops = _OPS.get(type(node))
    if ops is not None:
        for col_node, lit_node, op in (
            (node.this, node.expression, ops[0]),
            (node.expression, node.this, ops[1]),
        ):
            column = _column(col_node, schema)
            if column is not None:
                value = _literal(lit_node, column[1])
                if value is not _NOT_A_VALUE:
                    return [Condition(op, column[0], value)]
        return []
    if isinstance(node, exp.Between):
        column = _column(node.this, schema)
        if column is None:
            return []
        low, high = _literal(node.args["low"], column[1]), _literal(node.args["high"], column[1])
        out = []
        if low is not _NOT_A_VALUE:
            out.append(Condition("ge", column[0], low))
        if high is not _NOT_A_VALUE:
            out.append(Condition("le", column[0], high))
        return out
    if isinstance(node, exp.In) and not node.args.get("query"):
        column = _column(node.this, schema)
        if column is None:
            return []
        values = [_literal(v, column[1]) for v in node.expressions]
        if any(v is _NOT_A_VALUE for v in values):
            return []
        return [Condition("in", column[0], values=tuple(values))]
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        column = _column(node.this, schema)
        return [Condition("is_null", column[0])] if column else []
    if isinstance(node, exp.Not) and isinstance(node.this, exp.Is):
        inner = node.this
        column = _column(inner.this, schema) if isinstance(inner.expression, exp.Null) else None
        return [Condition("not_null", column[0])] if column else []
    return []


@dataclass(frozen=True)
class AllOf:
    """Statistics admit the rows only if every part admits them (an AND)."""

    parts: tuple[Pruner, ...]

    def may_match(self, stats: Mapping[str, ColumnStats], rows: int) -> bool:
        return all(p.may_match(stats, rows) for p in self.parts)


@dataclass(frozen=True)
class AnyOf:
    """Statistics admit the rows if any branch admits them (an OR)."""

    branches: tuple[Pruner, ...]

    def may_match(self, stats: Mapping[str, ColumnStats], rows: int) -> bool:
        return any(b.may_match(stats, rows) for b in self.branches)


Pruner = PushedFilters | AllOf | AnyOf


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _combine(node: exp.Expr, parts: list[Pruner | None]) -> Pruner | None:
    """An AND keeps the terms it can read (each is implied); an OR says something only
    if every branch does."""
    if isinstance(node, exp.Or):
        if any(p is None for p in parts):
            return None
        return AnyOf(tuple(p for p in parts if p is not None))
    known = [p for p in parts if p is not None]
    if len(known) <= 1:
        return known[0] if known else None
    return AllOf(tuple(known))


def _pruner(root: exp.Expr, schema: pa.Schema) -> Pruner | None:
    """What ``root`` implies about statistics (None: nothing).

    Walked with an explicit stack, and each chain of ANDs or ORs taken as one node of
    many terms: the parser accepts chains of thousands of terms (and hundreds of
    nesting levels), far beyond Python's recursion limit.
    """
    done: dict[int, Pruner | None] = {}  # id(node) -> its pruner, for nodes walked
    stack: list[tuple[exp.Expr, bool]] = [(_unparen(root), False)]
    while stack:
        node, terms_done = stack.pop()
        if not isinstance(node, (exp.And, exp.Or)):
            conditions = _conditions(node, schema)
            done[id(node)] = PushedFilters(tuple(conditions)) if conditions else None
        elif terms_done:
            terms = [_unparen(t) for t in node.flatten()]
            done[id(node)] = _combine(node, [done.pop(id(t)) for t in terms])
        else:
            stack.append((node, True))
            stack.extend((_unparen(t), False) for t in node.flatten())
    return done[id(_unparen(root))]


def row_group_pruner(filter: object, schema: pa.Schema) -> RowGroupPredicate | None:
    """The statistics test implied by SQL-text ``filter``, for fragments and row groups
    (None: prunes nothing, e.g. a pyarrow Expression or no simple term). Never raises:
    a filter this cannot read is compiled, and its errors reported, by the exact
    filter."""
    if not isinstance(filter, str):
        return None
    try:
        pruner = _pruner(parse_sql_tree(filter), schema)
    except (S3DDBError, RecursionError):
        # RecursionError: sqlglot's parser recurses once per nesting level, and this
        # may run on a deeper stack than the compilation of the same filter did.
        return None
    return pruner.may_match if pruner is not None else None
