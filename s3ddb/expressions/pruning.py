"""Pruning by statistics: what a filter implies about the values of a fragment or a
row group.

From a filter such as ``"id >= 1000 AND (name = 'x' OR name = 'y')"`` this derives a
:data:`s3ddb.format.rowgroups.RowGroupPredicate`, used for fragments (their statistics in the
manifest) and Parquet row groups alike. It reads terms ``column <op> literal``
(``=``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``, ``IS [NOT] NULL``) on
integer, float64, string, boolean and date columns, combined by AND (each term read is
implied by the filter) and OR (only when every branch says something); anything else
(NOT, functions, other types) prunes nothing. A pyarrow Expression is read the same way
from its tree (:mod:`s3ddb.expressions._arrow_tree`): comparisons of a column with a
literal, ``is_in``, ``is_null`` / ``is_valid`` (and their ``invert``), ``starts_with``,
under ``and``/``and_kleene`` (``and_not``: its left side) and ``or``/``or_kleene``.
Statistics that rule the filter out mean no matching row; the exact filter still runs
on every row read, so pruning never changes a result.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from sqlglot import exp

from s3ddb.expressions._arrow_tree import Call, Field, Literal, Node
from s3ddb.expressions.conditions import Condition, PushedFilters, product_of_shares
from s3ddb.format.rowgroups import ColumnStats
from s3ddb.format.stats import exact_bound_type

__all__ = [
    "AllOf",
    "AnyOf",
    "Pruner",
    "arrow_pruner",
    "sql_pruner",
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


def _prunable(name: str, schema: pa.Schema) -> tuple[str, pa.DataType] | None:
    """(name, type) of a top-level column whose statistics can prune, else None."""
    if name not in schema.names:
        return None
    t = schema.field(name).type
    # float64 too: statistics leave NaN out, and NaN satisfies no comparison pruned
    # here (float32 is left out: a literal may be rounded to it before comparing).
    return (name, t) if exact_bound_type(t) or pa.types.is_float64(t) else None


def _column(node: exp.Expr, schema: pa.Schema) -> tuple[str, pa.DataType] | None:
    if not isinstance(node, exp.Column) or node.table:
        return None
    return _prunable(node.name, schema)


def _conditions(node: exp.Expr, schema: pa.Schema) -> list[Condition]:
    """The conditions one term (not an AND, OR or parenthesis: :func:`sql_pruner` takes
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

    def match_share(self, stats: Mapping[str, ColumnStats], rows: int) -> float | None:
        """Every part's share, the parts taken as independent, but the conditions
        of its parts taken together (bounds on one column make one range)."""
        conditions = [c for p in self.parts if isinstance(p, PushedFilters) for c in p.conditions]
        others = [p for p in self.parts if not isinstance(p, PushedFilters)]
        return product_of_shares(
            [
                PushedFilters(tuple(conditions)).match_share(stats, rows),
                *(p.match_share(stats, rows) for p in others),
            ]
        )


@dataclass(frozen=True)
class AnyOf:
    """Statistics admit the rows if any branch admits them (an OR)."""

    branches: tuple[Pruner, ...]

    def may_match(self, stats: Mapping[str, ColumnStats], rows: int) -> bool:
        return any(b.may_match(stats, rows) for b in self.branches)

    def match_share(self, stats: Mapping[str, ColumnStats], rows: int) -> float | None:
        """At most the branches' shares added up."""
        total = 0.0
        for branch in self.branches:
            share = branch.match_share(stats, rows)
            if share is None:
                return None
            total += share
        return min(1.0, total)


Pruner = PushedFilters | AllOf | AnyOf


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _combine(is_or: bool, parts: list[Pruner | None]) -> Pruner | None:
    """An AND keeps the terms it can read (each is implied); an OR says something only
    if every branch does."""
    if is_or:
        if any(p is None for p in parts):
            return None
        return AnyOf(tuple(p for p in parts if p is not None))
    known = [p for p in parts if p is not None]
    if len(known) <= 1:
        return known[0] if known else None
    return AllOf(tuple(known))


_N = TypeVar("_N")


def _walk(
    root: _N,
    chain: Callable[[_N], tuple[bool, list[_N], bool] | None],
    leaf: Callable[[_N], tuple[list[Condition], bool]],
) -> tuple[Pruner | None, bool]:
    """What ``root`` implies about statistics (None: nothing), and whether that is
    all it says. ``chain`` gives an AND (False) or OR (True) node's terms, and
    whether they are all of them (None for any other node, read by ``leaf``);
    ``leaf`` a term's conditions, and whether they say all the term says.

    Walked with an explicit stack, and each chain of ANDs or ORs taken as one node of
    many terms: filters hold chains of thousands of terms (and hundreds of nesting
    levels), far beyond Python's recursion limit.
    """
    done: dict[int, Pruner | None] = {}  # id(node) -> its pruner, for nodes walked
    exact = True
    stack: list[tuple[_N, bool]] = [(root, False)]
    while stack:
        node, terms_done = stack.pop()
        terms = chain(node)
        if terms is None:
            conditions, complete = leaf(node)
            exact = exact and complete and bool(conditions)
            done[id(node)] = PushedFilters(tuple(conditions)) if conditions else None
        elif terms_done:
            done[id(node)] = _combine(terms[0], [done.pop(id(t)) for t in terms[1]])
        else:
            exact = exact and terms[2]
            stack.append((node, True))
            stack.extend((t, False) for t in terms[1])
    pruner = done[id(root)]
    return pruner, exact and pruner is not None


def _sql_chain(node: exp.Expr) -> tuple[bool, list[exp.Expr], bool] | None:
    if not isinstance(node, (exp.And, exp.Or)):
        return None
    return isinstance(node, exp.Or), [_unparen(t) for t in node.flatten()], True


def _sql_leaf(node: exp.Expr, schema: pa.Schema) -> tuple[list[Condition], bool]:
    conditions = _conditions(node, schema)
    # A BETWEEN with one bound that is not a value gives one condition, not two.
    return conditions, not (isinstance(node, exp.Between) and len(conditions) < 2)


def sql_pruner(tree: exp.Expr, schema: pa.Schema) -> tuple[Pruner | None, bool]:
    """What a parsed SQL filter implies about statistics (None: nothing), and
    whether its conditions say all the filter says (every term of its ANDs and ORs
    a condition, none dropped): only then do their shares estimate the filter's."""
    return _walk(_unparen(tree), _sql_chain, lambda node: _sql_leaf(node, schema))


# --- pyarrow Expressions -------------------------------------------------------------

#: function -> (op with the column on the left, op with the column on the right)
ARROW_COMPARISONS = {
    "equal": ("eq", "eq"),
    "less": ("lt", "gt"),
    "less_equal": ("le", "ge"),
    "greater": ("gt", "lt"),
    "greater_equal": ("ge", "le"),
}
#: Calls TRUE only where all their terms are (``a and_not b``: a is such a term).
ARROW_AND = frozenset({"and", "and_kleene", "and_not", "and_not_kleene"})
#: Calls TRUE only where some term is.
ARROW_OR = frozenset({"or", "or_kleene"})
_NULL_MATCHES_NULL = 0  # SetLookupOptions.null_matching_behavior MATCH


def arrow_terms(node: Node, functions: frozenset[str]) -> list[Node]:
    """The terms of the chain of ``functions`` calls at ``node`` (``[node]`` if it is no
    such call), in order and without recursion; ``a and_not b`` gives ``a`` alone."""
    return _arrow_terms(node, functions)[0]


def _arrow_terms(node: Node, functions: frozenset[str]) -> tuple[list[Node], bool]:
    """:func:`arrow_terms`, and whether they are all of the chain (no ``and_not``
    dropped a term)."""
    out: list[Node] = []
    whole = True
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Call) and item.function in functions and item.args:
            dropping = item.function.startswith("and_not")
            whole = whole and not dropping
            stack.extend(reversed(item.args[:1] if dropping else item.args))
        else:
            out.append(item)
    return out, whole


def _arrow_chain(node: Node) -> tuple[bool, list[Node], bool] | None:
    if isinstance(node, Call) and node.function in ARROW_AND:
        return (False, *_arrow_terms(node, ARROW_AND))
    if isinstance(node, Call) and node.function in ARROW_OR:
        return (True, *_arrow_terms(node, ARROW_OR))
    return None


def _column_of(node: Node) -> str | None:
    return node.names[0] if isinstance(node, Field) and len(node.names) == 1 else None


def arrow_comparison(call: Call) -> tuple[str, str, pa.Scalar] | None:
    """(op, column, literal) of a comparison of a top-level column with a literal."""
    ops = ARROW_COMPARISONS.get(call.function)
    if ops is None or len(call.args) != 2:
        return None
    left, right = call.args
    if isinstance(right, Literal) and (column := _column_of(left)) is not None:
        return ops[0], column, right.value
    if isinstance(left, Literal) and (column := _column_of(right)) is not None:
        return ops[1], column, left.value
    return None


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _to_python(literal: pa.DataType, column: pa.DataType) -> Callable[[Any], Any] | None:
    """How a (Python) value of a literal of type ``literal`` compares with a column of
    type ``column`` as Arrow compares them, or None where that is not plain: integers
    with integers (Arrow compares them exactly, or fails), floats with float64 (NaN
    refused: statistics leave it out), integers up to 2**53 with float64 (Arrow casts
    them exactly), strings with strings; booleans, dates, timestamps (not ns) and
    decimals of the column's very type."""
    if pa.types.is_integer(column):
        return int if pa.types.is_integer(literal) else None
    if pa.types.is_floating(column):
        if literal == column or (pa.types.is_float64(column) and pa.types.is_float32(literal)):
            return _finite
        if pa.types.is_float64(column) and pa.types.is_integer(literal):
            return _exact_float
        return None
    if _is_text(column):
        return str if _is_text(literal) else None
    if literal != column:
        return None
    plain = pa.types.is_boolean(column) or pa.types.is_date(column) or pa.types.is_decimal(column)
    if plain or (pa.types.is_timestamp(column) and column.unit != "ns"):
        return lambda v: v
    return None


def _finite(value: Any) -> Any:
    number = float(value)
    return number if number == number else _NOT_A_VALUE


def _exact_float(value: Any) -> Any:
    return float(value) if abs(value) <= 2**53 else _NOT_A_VALUE


def arrow_value(literal: pa.Scalar, column: pa.DataType) -> Any:
    """The Python value of ``literal`` as a column of type ``column`` compares with it
    (see :func:`_to_python`), or ``_NOT_A_VALUE``."""
    convert = _to_python(literal.type, column)
    if convert is None or not literal.is_valid:
        return _NOT_A_VALUE
    try:
        return convert(literal.as_py())
    except (ValueError, TypeError, OverflowError, pa.ArrowException):
        return _NOT_A_VALUE  # e.g. a time zone Python does not know


def arrow_value_set(call: Call, column: pa.DataType) -> tuple[Any, ...] | None:
    """The values an ``is_in`` call on a column of type ``column`` can be TRUE for, or
    None if it can also be TRUE for NULL (a NULL in the set, matched) or a value
    is not plain (:func:`_to_python`)."""
    try:
        values = call.option("value_set")
        try:
            behaviour = call.option("null_matching_behavior")
        except KeyError:  # pyarrow before 13
            behaviour = 1 if call.option("skip_nulls") else _NULL_MATCHES_NULL
    except KeyError:
        return None
    if not isinstance(values, pa.Array):
        return None
    if values.null_count and behaviour == _NULL_MATCHES_NULL:
        return None
    convert = _to_python(values.type, column)
    if convert is None:
        return None
    try:
        out = tuple(convert(v) for v in values.to_pylist() if v is not None)
    except (ValueError, TypeError, OverflowError, pa.ArrowException):
        return None
    return None if any(v is _NOT_A_VALUE for v in out) else out


def _arrow_conditions(node: Node, schema: pa.Schema) -> list[Condition]:
    """The conditions one term (not an AND or OR) of an Expression implies."""
    if not isinstance(node, Call):
        return []
    compared = arrow_comparison(node)
    if compared is not None:
        op, name, literal = compared
        column = _prunable(name, schema)
        value = arrow_value(literal, column[1]) if column else _NOT_A_VALUE
        return [] if value is _NOT_A_VALUE else [Condition(op, name, value)]
    if node.function == "invert" and len(node.args) == 1 and isinstance(node.args[0], Call):
        return _null_test(node.args[0], schema, negated=True)
    if node.function in ("is_null", "is_valid"):
        return _null_test(node, schema, negated=False)
    subject = _column_of(node.args[0]) if len(node.args) == 1 else None
    column = _prunable(subject, schema) if subject is not None else None
    if column is None:
        return []
    if node.function == "is_in":
        values = arrow_value_set(node, column[1])
        return [] if values is None else [Condition("in", column[0], values=values)]
    if node.function == "starts_with" and _is_text(column[1]):
        try:
            pattern, ignore_case = node.option("pattern"), node.option("ignore_case")
        except KeyError:
            return []
        if isinstance(pattern, str) and ignore_case is False:
            return [Condition("starts_with", column[0], pattern)]
    return []


def _null_test(call: Call, schema: pa.Schema, negated: bool) -> list[Condition]:
    """``is_null(x)`` / ``is_valid(x)``, or with ``negated`` their ``invert``."""
    if call.function not in ("is_null", "is_valid") or len(call.args) != 1:
        return []
    name = _column_of(call.args[0])
    column = _prunable(name, schema) if name is not None else None
    if column is None:
        return []
    null = (call.function == "is_null") != negated
    if null and not negated and pa.types.is_floating(column[1]):
        try:
            if call.option("nan_is_null") is not False:
                return []  # NaN counts as NULL here, and statistics count no NaN
        except KeyError:
            return []
    return [Condition("is_null" if null else "not_null", column[0])]


def arrow_pruner(tree: Node, schema: pa.Schema) -> tuple[Pruner | None, bool]:
    """What an Expression filter (read as a tree) implies about statistics, and
    whether that is all it says (as :func:`sql_pruner`)."""
    return _walk(tree, _arrow_chain, lambda node: (_arrow_conditions(node, schema), True))
