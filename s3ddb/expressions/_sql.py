"""The SQL side: the dialect, parsing, SQL type names, and the operator tables."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError

from s3ddb.errors import InvalidExpressionError


class _S3DDBSQL(Dialect):
    """ANSI-style SQL where both ``"name"`` and ```name``` quote identifiers."""

    class Tokenizer(tokens.Tokenizer):
        # Backticks too: Spark users write them, and they cannot mean anything else.
        IDENTIFIERS = ['"', "`"]


#: Limits on an expression: its text, its nodes, and its nesting (a chain of ANDs or
#: ORs counts as one level, however long). Arrow's expression code recurses once per
#: operand of such a chain: at about 7,000 alternatives the process runs out of stack,
#: so the node limit stays well below that.
MAX_EXPRESSION_CHARS = 100_000
MAX_EXPRESSION_NODES = 16_000
MAX_EXPRESSION_DEPTH = 500


def _shown(text: str, limit: int = 120) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"


def _size(tree: exp.Expr) -> tuple[int, int]:
    """(nodes, nesting depth) of ``tree``, walked without recursion; stops counting
    once past either limit."""
    nodes = deepest = 0
    stack = [(tree, 1)]
    while stack and nodes <= MAX_EXPRESSION_NODES and deepest <= MAX_EXPRESSION_DEPTH:
        node, depth = stack.pop()
        nodes += 1
        deepest = max(deepest, depth)
        for child in node.iter_expressions():
            chained = type(child) is type(node) and isinstance(node, (exp.And, exp.Or))
            stack.append((child, depth if chained else depth + 1))
    return nodes, deepest


def _parse_sql(text: str) -> exp.Expr:
    """Parse exactly one SQL expression, turning sqlglot's errors into ours.

    Raises:
        InvalidExpressionError: it does not parse, is several statements, or is over
            one of the limits (:data:`MAX_EXPRESSION_CHARS`, ``_NODES``, ``_DEPTH``).
    """
    if len(text) > MAX_EXPRESSION_CHARS:
        raise InvalidExpressionError(
            f"expression too long: {len(text):,} characters, the limit is "
            f"{MAX_EXPRESSION_CHARS:,} ({_shown(text)}); for many values use IN (...)"
        )
    if not text.strip():
        raise InvalidExpressionError("empty expression")
    try:
        statements = [s for s in sqlglot.parse(text, read=_S3DDBSQL) if s is not None]
    except ParseError as e:
        info = e.errors[0] if e.errors else {}
        near = f"{info.get('start_context', '')}>>>{info.get('highlight', '')}<<<"
        raise InvalidExpressionError(
            f"cannot parse expression {_shown(text)}: {info.get('description', e)} at line "
            f"{info.get('line', '?')}, column {info.get('col', '?')}: {near!r}"
        ) from e
    except SqlglotError as e:  # e.g. TokenError for an unterminated string
        raise InvalidExpressionError(f"cannot parse expression {_shown(text)}: {e}") from e
    if len(statements) != 1:
        raise InvalidExpressionError(
            f"expected one expression, found {len(statements)} statements in {_shown(text)}"
        )
    nodes, depth = _size(statements[0])
    if nodes > MAX_EXPRESSION_NODES or depth > MAX_EXPRESSION_DEPTH:
        raise InvalidExpressionError(
            f"expression too large or nested too deeply (limits: {MAX_EXPRESSION_NODES:,} "
            f"terms, {MAX_EXPRESSION_DEPTH} levels): {_shown(text)}; for many values use IN (...)"
        )
    return statements[0]


def _sql_type(node: exp.DataType) -> pa.DataType | None:
    """The Arrow type for a SQL type name, or None when there is no sensible one."""
    name = node.this.name
    params = [
        int(p.this.this)
        for p in node.expressions
        if isinstance(p, exp.DataTypeParam) and isinstance(p.this, exp.Literal)
    ]
    if name == "DECIMAL":  # DECIMAL alone is DataFusion's default, decimal(38, 10)
        precision, scale = [*params, 0][:2] if params else (38, 10)
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
    return _SQL_TYPES.get(name)


_SQL_TYPES: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINT": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "CHAR": pa.string(),
    "NVARCHAR": pa.string(),
    "NCHAR": pa.string(),
    "TEXT": pa.string(),
    "BINARY": pa.binary(),
    "VARBINARY": pa.binary(),
    "BLOB": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"),
    "DATETIME": pa.timestamp("us"),
    "TIMESTAMPTZ": pa.timestamp("us", "UTC"),
}

_COMPARISONS: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
}
# The *_checked kernels raise on overflow instead of wrapping around, as SQL does.
_ARITHMETIC: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {
    exp.Add: pc.add_checked,
    exp.Sub: pc.subtract_checked,
    exp.Mul: pc.multiply_checked,
    exp.Div: pc.divide_checked,
    exp.Mod: pc.remainder_checked,
    exp.Pow: pc.power_checked,
}
_UNARY_FUNCTIONS: dict[type[exp.Expr], Callable[[Any], Any]] = {
    exp.Upper: pc.utf8_upper,
    exp.Lower: pc.utf8_lower,
    exp.Abs: pc.abs_checked,
    exp.Ceil: pc.ceil,
    exp.Floor: pc.floor,
    exp.Sqrt: pc.sqrt_checked,
    exp.Length: pc.utf8_length,
}
SUPPORTED_FUNCTIONS = (
    "upper, lower, abs, ceil, floor, sqrt, power, round, length (char_length), "
    "substring (substr), trim, ltrim, rtrim, replace, coalesce, nullif, concat"
)
_UNSUPPORTED: list[tuple[tuple[type, ...], str]] = [  # first match wins: order matters
    ((exp.Query, exp.Subquery, exp.Exists), "subqueries and statements are not supported"),
    ((exp.AggFunc,), "aggregate functions are not allowed"),
    ((exp.Window,), "window functions are not supported"),
    ((exp.Anonymous,), "unknown function {name}(); supported functions: " + SUPPORTED_FUNCTIONS),
    ((exp.Func,), "unsupported function {name}(); supported functions: " + SUPPORTED_FUNCTIONS),
    ((exp.Placeholder,), "query parameters are not supported; inline the value"),
    ((exp.Alias,), "unexpected name after an expression (missing operator?)"),
]
