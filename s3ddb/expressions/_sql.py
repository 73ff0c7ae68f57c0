"""The SQL side: the dialect, parsing, SQL type names, and the operator tables."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.tokens import TokenType

from s3ddb.errors import InvalidExpressionError
from s3ddb.expressions._parse_errors import parse_problem, unreadable_text_problem


class S3DDBDialect(Dialect):
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

#: Limits on the arguments of the Arrow kernels an expression reaches, where some
#: arguments make a kernel loop, run for hours or allocate without bound
#: (docs/expressions.md, "Limits"). A LIKE pattern becomes an RE2 regular expression:
#: with a few hundred wildcards RE2 leaves its DFA for an NFA that costs the pattern's
#: length per input byte (1,000 wildcards: over a minute per 4 MB of text).
MAX_LIKE_WILDCARDS = 100
#: REPLACE's replacement may be at most this many times as long as its search text,
#: so its result is at most this many times as long as its input.
MAX_REPLACE_GROWTH = 100
#: ROUND's digits: float64 has no digit beyond 10**+-308, and Arrow's kernel loops once
#: per digit (ROUND(x, 10**12) would run for hours).
MAX_ROUND_DIGITS = 308
#: DECIMAL(p, s): Arrow's decimal256 holds at most 76 digits.
MAX_DECIMAL_PRECISION = 76


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


_OPENERS = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE})
_CLOSERS = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END})
_PREFIXES = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})


def _token_nesting(toks: list[tokens.Token]) -> int:
    """A lower bound of the parse tree's depth from the tokens alone: open brackets
    and CASEs, plus the longest run of prefix operators (``NOT NOT -x``).

    sqlglot's parser recurses once per such level, so this is checked before parsing:
    a deep enough text would otherwise exhaust the stack (a RecursionError, or a crash
    when the recursion limit has been raised or the thread's stack is small).
    """
    depth = run = deepest = 0
    for token in toks:
        kind = token.token_type
        run = run + 1 if kind in _PREFIXES else 0
        if kind in _OPENERS:
            depth += 1
        elif kind in _CLOSERS:
            depth = max(depth - 1, 0)
        deepest = max(deepest, depth + run)
    return deepest


def parse_sql_tree(text: str) -> exp.Expr:
    """Parse exactly one SQL expression, turning sqlglot's errors into ours.

    Raises:
        InvalidExpressionError: it does not parse, is several statements, holds a lone
            surrogate, or is over one of the limits (:data:`MAX_EXPRESSION_CHARS`,
            ``_NODES``, ``_DEPTH``; the depth is also estimated from the tokens before
            parsing, since the parser recurses once per level).
    """
    if len(text) > MAX_EXPRESSION_CHARS:
        raise InvalidExpressionError(
            f"expression too long: {len(text):,} characters, the limit is "
            f"{MAX_EXPRESSION_CHARS:,} ({_shown(text)}); for many values use IN (...)"
        )
    if not text.strip():
        raise InvalidExpressionError("empty expression")
    try:  # Arrow takes text as UTF-8: a lone surrogate would fail deep inside pyarrow.
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidExpressionError(
            f"expression is not valid Unicode (a lone surrogate {text[e.start]!r} at "
            f"character {e.start}): {_shown(text)}"
        ) from None
    try:
        dialect = S3DDBDialect()
        toks = dialect.tokenize(text)
        if _token_nesting(toks) > MAX_EXPRESSION_DEPTH:
            raise InvalidExpressionError(
                f"expression nested too deeply (limit: {MAX_EXPRESSION_DEPTH} levels of "
                f"parentheses, CASE and prefix operators): {_shown(text)}"
            )
        statements = [s for s in dialect.parser().parse(toks, text) if s is not None]
    except ParseError as e:
        info = e.errors[0] if e.errors else {"description": str(e)}
        raise InvalidExpressionError(
            f"cannot parse expression {_shown(text)}: {parse_problem(info)}"
        ) from e
    except SqlglotError as e:  # e.g. TokenError for an unterminated string
        raise InvalidExpressionError(
            f"cannot parse expression {_shown(text)}: {unreadable_text_problem(text)}"
        ) from e
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
    """The Arrow type for a SQL type name, or None when there is no sensible one.

    Raises:
        InvalidExpressionError: a type parameter is not an integer literal or is out of
            range: DECIMAL(p, s) needs 1 <= p <= 76 and 0 <= s <= p, TIMESTAMP(p)
            needs 0 <= p <= 9 (values stay microseconds), others take one length >= 0.
            The message names the type and the parameter, not where it is.
    """
    name = node.this.name
    params: list[int] = []
    for p in node.expressions:
        value = p.this if isinstance(p, exp.DataTypeParam) else p
        text = str(value.this) if isinstance(value, exp.Literal) and value.is_number else ""
        if not text.isdigit():  # 1e3, 10.5, a column, a string: not a type parameter
            raise InvalidExpressionError(
                f"{name}'s parameter {p.sql(dialect=S3DDBDialect)!r} is not an integer literal"
            )
        params.append(int(text))
    if name == "DECIMAL":  # DECIMAL alone is DataFusion's default, decimal(38, 10)
        if len(params) > 2:
            raise InvalidExpressionError(f"DECIMAL takes (precision[, scale]), got {params}")
        precision, scale = (*params, 0)[:2] if params else (38, 10)
        if not 1 <= precision <= MAX_DECIMAL_PRECISION:
            raise InvalidExpressionError(
                f"DECIMAL's precision {precision} is out of range 1..{MAX_DECIMAL_PRECISION}"
            )
        if scale > precision:
            raise InvalidExpressionError(
                f"DECIMAL's scale {scale} is greater than its precision {precision}"
            )
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
    limit = 9 if name in ("TIMESTAMP", "TIMESTAMPTZ", "DATETIME") else None
    if len(params) > 1 or (params and limit is not None and params[0] > limit):
        what = f"(p) with 0 <= p <= {limit}" if limit is not None else "at most one length"
        raise InvalidExpressionError(f"{name} takes {what}, got {params}")
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
