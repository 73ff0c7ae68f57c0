"""Tests for s3ddb.expressions: SQL text -> pyarrow compute expressions.

Every expression is evaluated on real pyarrow tables and compared with a result
computed in plain Python, including SQL's three-valued NULL logic.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3ddb.errors import ColumnNotFoundError, InvalidExpressionError, InvalidInputError
from s3ddb.expressions import parse_predicate, parse_value_expression, referenced_columns

Row = dict[str, Any]

ROWS: list[Row] = [
    {"id": 0, "n": 1, "x": "a", "f": 1.5, "b": True, "day": 1, "st": {"a": 1, "t": "p"}},
    {"id": 1, "n": 2, "x": "b", "f": 2.5, "b": False, "day": 2, "st": {"a": 2, "t": "q"}},
    {"id": 2, "n": None, "x": None, "f": None, "b": None, "day": 3, "st": None},
    {"id": 3, "n": 4, "x": "ab", "f": -2.5, "b": True, "day": 4, "st": {"a": None, "t": "r"}},
    {"id": 4, "n": 5, "x": "abc", "f": 0.0, "b": False, "day": 5, "st": {"a": 5, "t": "s"}},
    {"id": 5, "n": -3, "x": "it's", "f": 10.0, "b": None, "day": 6, "st": {"a": 6, "t": "t"}},
]


def _table() -> pa.Table:
    col = ROWS
    return pa.table(
        {
            "id": pa.array([r["id"] for r in col], pa.int64()),
            "n": pa.array([r["n"] for r in col], pa.int32()),
            "x": pa.array([r["x"] for r in col], pa.string()),
            "f": pa.array([r["f"] for r in col], pa.float64()),
            "b": pa.array([r["b"] for r in col], pa.bool_()),
            "d": pa.array([datetime.date(2024, 1, r["day"]) for r in col], pa.date32()),
            "ts": pa.array(
                [datetime.datetime(2024, 1, r["day"], tzinfo=datetime.timezone.utc) for r in col],
                pa.timestamp("ns", "UTC"),
            ),
            "dec": pa.array([Decimal(r["id"]) / 2 for r in col], pa.decimal128(10, 2)),
            "My Col": pa.array([r["id"] * 10 for r in col], pa.int64()),
            "st": pa.array(
                [r["st"] for r in col], pa.struct([("a", pa.int64()), ("t", pa.string())])
            ),
        }
    )


TABLE = _table()
SCHEMA = TABLE.schema


def filtered_ids(predicate: str | pc.Expression, table: pa.Table = TABLE) -> list[int]:
    expr = parse_predicate(predicate, table.schema)
    via_dataset = pads.dataset(table).to_table(filter=expr)["id"].to_pylist()
    assert table.filter(expr)["id"].to_pylist() == via_dataset  # both evaluation paths
    return sorted(via_dataset)


def evaluate(expression: str, **kwargs: Any) -> list[Any]:
    expr = parse_value_expression(expression, SCHEMA, **kwargs)
    return pads.dataset(TABLE).to_table(columns={"v": expr})["v"].to_pylist()


def ids_where(check: Callable[[Row], bool | None]) -> list[int]:
    """Rows where the Python predicate is True (None, SQL's unknown, drops the row)."""
    return [r["id"] for r in ROWS if check(r) is True]


def nn(*values: Any) -> bool:
    return all(v is not None for v in values)


def like(value: str, pattern: str) -> bool:
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


# --- predicates ------------------------------------------------------------------------

PREDICATES: list[tuple[str, Callable[[Row], bool | None]]] = [
    ("id < 3 AND x = 'a'", lambda r: r["id"] < 3 and r["x"] == "a"),
    ("NOT (n >= 3 OR x IS NULL)", lambda r: nn(r["n"]) and r["n"] < 3 and r["x"] is not None),
    ("x IN ('a', 'b')", lambda r: r["x"] in ("a", "b")),
    ("x NOT IN ('a', 'b')", lambda r: nn(r["x"]) and r["x"] not in ("a", "b")),
    ("n IN (1, NULL)", lambda r: r["n"] == 1 or None),
    ("n NOT IN (1, NULL)", lambda r: None if r["n"] != 1 else False),
    ("n IN (id, 99)", lambda r: nn(r["n"]) and r["n"] in (r["id"], 99)),
    ("d IN ('2024-01-01', DATE '2024-01-03')", lambda r: r["day"] in (1, 3)),
    ("dec IN (0.5, 2)", lambda r: r["id"] in (1, 4)),
    ("n BETWEEN 1 AND 4", lambda r: nn(r["n"]) and 1 <= r["n"] <= 4),
    ("n NOT BETWEEN 1 AND 4", lambda r: nn(r["n"]) and not 1 <= r["n"] <= 4),
    ("x LIKE 'ab%'", lambda r: nn(r["x"]) and r["x"].startswith("ab")),
    ("x LIKE '%b'", lambda r: nn(r["x"]) and r["x"].endswith("b")),
    ("x LIKE '%b%'", lambda r: nn(r["x"]) and "b" in r["x"]),
    ("x LIKE 'a_'", lambda r: nn(r["x"]) and like(r["x"], "a_")),
    ("x NOT LIKE 'a%'", lambda r: nn(r["x"]) and not r["x"].startswith("a")),
    ("x ILIKE 'AB%'", lambda r: nn(r["x"]) and r["x"].lower().startswith("ab")),
    ("x LIKE 'ab!%' ESCAPE '!'", lambda r: r["x"] == "ab%"),
    ("x = 'it''s'", lambda r: r["x"] == "it's"),
    ("x IS NOT NULL", lambda r: r["x"] is not None),
    ("n + 1 > f * 2", lambda r: nn(r["n"], r["f"]) and r["n"] + 1 > r["f"] * 2),
    ("n % 2 = -1", lambda r: nn(r["n"]) and math.fmod(r["n"], 2) == -1),  # sign of n
    ("-n > 0", lambda r: nn(r["n"]) and r["n"] < 0),
    ("n > -4 AND n < 2.5", lambda r: nn(r["n"]) and -4 < r["n"] < 2.5),
    ("n = '2'", lambda r: r["n"] == 2),
    ("f >= 1e1", lambda r: nn(r["f"]) and r["f"] >= 10),
    ("b", lambda r: r["b"]),
    ("NOT b", lambda r: None if r["b"] is None else not r["b"]),
    ("b IS TRUE", lambda r: r["b"] is True),
    ("b IS NOT FALSE", lambda r: r["b"] is not False),
    ("b = TRUE OR n IS NULL", lambda r: r["b"] is True or r["n"] is None),
    ("TRUE", lambda r: True),
    ("FALSE OR NULL", lambda r: None),
    ("NULL", lambda r: None),
    ("n = NULL", lambda r: None),
    ("n IS NOT DISTINCT FROM NULL", lambda r: r["n"] is None),
    ("n IS DISTINCT FROM 2", lambda r: r["n"] != 2),
    ("d = DATE '2024-01-02'", lambda r: r["day"] == 2),
    ("d >= '2024-01-05'", lambda r: r["day"] >= 5),
    ("ts > TIMESTAMP '2024-01-03 00:00:00'", lambda r: r["day"] > 3),
    ("ts > '2024-01-03'", lambda r: r["day"] > 3),
    ("ts <= TIMESTAMP '2024-01-03T00:00:00Z'", lambda r: r["day"] <= 3),
    ("ts < TIMESTAMP '2024-01-03T01:00:00+02:00'", lambda r: r["day"] <= 2),
    ("CAST(n AS BIGINT) = 2", lambda r: r["n"] == 2),
    ("CAST(n AS VARCHAR) = '4'", lambda r: r["n"] == 4),
    ("dec > 1", lambda r: r["id"] / 2 > 1),
    ("dec = 1.5", lambda r: r["id"] / 2 == 1.5),
    ("dec < 0.125", lambda r: r["id"] / 2 < 0.125),
    ('"My Col" >= 30', lambda r: r["id"] * 10 >= 30),
    ("`My Col` = 10", lambda r: r["id"] == 1),
    ("st.a = 2", lambda r: nn(r["st"]) and r["st"]["a"] == 2),
    ("\"st\".\"t\" IN ('p', 's')", lambda r: nn(r["st"]) and r["st"]["t"] in ("p", "s")),
    ("ST.A IS NULL", lambda r: r["st"] is None or r["st"]["a"] is None),
    ("ID = 1 AND X = 'b'", lambda r: r["id"] == 1),
    ("upper(x) = 'AB'", lambda r: r["x"] == "ab"),
    ("length(x) > 2", lambda r: nn(r["x"]) and len(r["x"]) > 2),
    ("x || '!' = 'a!'", lambda r: r["x"] == "a"),
    ("coalesce(n, 0) = 0", lambda r: r["n"] is None),
    ("CASE WHEN n > 2 THEN TRUE ELSE FALSE END", lambda r: nn(r["n"]) and r["n"] > 2),
    ("((id = 1) OR (id = 2)) AND NOT (id = 2)", lambda r: r["id"] == 1),
]


@pytest.mark.parametrize(("predicate", "expected"), PREDICATES, ids=[p for p, _ in PREDICATES])
def test_predicate_matches_python(predicate: str, expected: Callable[[Row], Any]) -> None:
    assert filtered_ids(predicate) == ids_where(expected)


def test_pyarrow_expression_passes_through_unchanged() -> None:
    expr = (pc.field("n") > 1) & pc.field("x").isin(["b", "abc"])
    assert parse_predicate(expr, SCHEMA) is expr
    assert filtered_ids(expr) == [1, 4]


def test_long_in_list_is_one_set_lookup() -> None:
    keys = list(range(0, 3000, 2))
    text = f"id IN ({', '.join(map(str, keys))})"
    assert filtered_ids(text) == ids_where(lambda r: r["id"] in keys)
    assert "is_in" in str(parse_predicate(text, SCHEMA))


def test_long_or_chain_and_deep_nesting() -> None:
    chain = " OR ".join(f"id = {i}" for i in range(1500))  # deeper than the recursion limit
    assert filtered_ids(chain) == ids_where(lambda r: True)
    with pytest.raises(InvalidExpressionError, match="nested too deeply"):
        parse_predicate("(" * 3000 + "id = 1" + ")" * 3000, SCHEMA)
    # Far more alternatives would overflow the stack in Arrow's expression code: refused.
    with pytest.raises(InvalidExpressionError, match="too large"):
        parse_predicate(" OR ".join(f"id = {i % 10}" for i in range(9000)), SCHEMA)


def test_constant_predicate_counts_all_rows() -> None:
    # A predicate is a boolean expression even when it is all literals.
    assert pads.dataset(TABLE).count_rows(filter=parse_predicate("1 = 1", SCHEMA)) == len(ROWS)


# --- value expressions -------------------------------------------------------------------

VALUES: list[tuple[str, Callable[[Row], Any]]] = [
    ("n + 1", lambda r: None if r["n"] is None else r["n"] + 1),
    ("n * 2 - id", lambda r: None if r["n"] is None else r["n"] * 2 - r["id"]),
    ("id / 2", lambda r: r["id"] // 2),
    ("id / 2.0", lambda r: r["id"] / 2),
    ("'constant'", lambda r: "constant"),
    ("upper(x)", lambda r: r["x"] and r["x"].upper()),
    ("lower('AbC')", lambda r: "abc"),
    ("abs(n)", lambda r: None if r["n"] is None else abs(r["n"])),
    ("coalesce(n, 0)", lambda r: 0 if r["n"] is None else r["n"]),
    ("coalesce(x, st.t, 'none')", lambda r: r["x"] or (r["st"] or {}).get("t") or "none"),
    ("concat(x, '-', id)", lambda r: f"{r['x'] or ''}-{r['id']}"),
    ("x || '-' || id", lambda r: None if r["x"] is None else f"{r['x']}-{r['id']}"),
    (
        "round(f)",
        lambda r: (
            None
            if r["f"] is None
            else float(Decimal(r["f"]).quantize(Decimal(1), rounding="ROUND_HALF_UP"))
        ),
    ),
    ("length(x)", lambda r: r["x"] and len(r["x"])),
    ("substring(x, 2)", lambda r: r["x"] and r["x"][1:]),
    ("substring(x FROM 1 FOR 2)", lambda r: r["x"] and r["x"][:2]),
    ("trim('  pad ')", lambda r: "pad"),
    ("replace(x, 'a', 'A')", lambda r: r["x"] and r["x"].replace("a", "A")),
    ("nullif(n, 2)", lambda r: None if r["n"] == 2 else r["n"]),
    (
        "CASE WHEN n > 2 THEN 'big' WHEN n IS NULL THEN 'none' ELSE 'small' END",
        lambda r: "none" if r["n"] is None else "big" if r["n"] > 2 else "small",
    ),
    ("CASE n WHEN 1 THEN 10 WHEN 2 THEN 20.5 END", lambda r: {1: 10.0, 2: 20.5}.get(r["n"])),
    ("CASE WHEN b THEN n END", lambda r: r["n"] if r["b"] else None),
    ("st.a * 10", lambda r: None if r["st"] is None or r["st"]["a"] is None else r["st"]["a"] * 10),
    ("NULL", lambda r: None),
]


@pytest.mark.parametrize(("expression", "expected"), VALUES, ids=[v for v, _ in VALUES])
def test_value_expression_matches_python(expression: str, expected: Callable[[Row], Any]) -> None:
    assert evaluate(expression) == [expected(r) for r in ROWS]


def test_value_expression_target_type() -> None:
    assert evaluate("NULL", target_type=pa.int32()) == [None] * len(ROWS)
    assert evaluate("'7'", target_type=pa.int64()) == [7] * len(ROWS)
    expr = parse_value_expression("n + 1", SCHEMA, target_type=pa.int16())
    result = pads.dataset(TABLE).to_table(columns={"v": expr})
    assert result.schema.field("v").type == pa.int16()
    with pytest.raises(InvalidExpressionError, match="cannot convert"):
        parse_value_expression("'abc'", SCHEMA, target_type=pa.int64())
    with pytest.raises(InvalidExpressionError, match="cannot convert"):
        parse_value_expression("300", SCHEMA, target_type=pa.int8())


# --- referenced columns --------------------------------------------------------------------


def test_referenced_columns() -> None:
    expr = parse_predicate('N > 1 AND st.a = 2 OR "My Col" IS NULL', SCHEMA)
    assert referenced_columns(expr) == {"n", "st", "My Col"}
    assert referenced_columns(parse_value_expression("upper(x) || 'a'", SCHEMA)) == {"x"}
    assert referenced_columns(parse_predicate("TRUE", SCHEMA)) == set()
    foreign = (pc.field("id") > 1) | (pc.field("st", "t") == "p")
    assert referenced_columns(foreign, SCHEMA) == {"id", "st"}
    with pytest.raises(InvalidInputError, match="needs the schema"):
        referenced_columns(pc.field("id") > 2)
    # A checked pass-through remembers its schema.
    assert referenced_columns(parse_predicate(foreign, SCHEMA)) == {"id", "st"}


# --- errors ----------------------------------------------------------------------------------


def test_unknown_column_names_column_expression_and_choices() -> None:
    with pytest.raises(ColumnNotFoundError) as info:
        parse_predicate("idd < 10", SCHEMA)
    message = str(info.value)
    assert "'idd'" in message and "'idd < 10'" in message and "id, n, x" in message
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidInputError)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("st.zz = 1", "'zz'"),
        ("n.a = 1", "not a struct"),
        ("upper(nope)", "'nope'"),
    ],
)
def test_unknown_nested_or_function_column(text: str, fragment: str) -> None:
    with pytest.raises(ColumnNotFoundError, match=re.escape(fragment)):
        parse_value_expression(text, SCHEMA)


def test_case_insensitive_lookup_must_be_unambiguous() -> None:
    table = pa.table({"Id": [1], "ID": [2], "v": [3]})
    assert filtered_ids("Id = 1", table.append_column("id", pa.array([0]))) == [0]
    with pytest.raises(ColumnNotFoundError, match="ambiguous"):
        parse_predicate("id = 1", table.schema)


def test_pyarrow_expression_with_unknown_column() -> None:
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        parse_predicate(pc.field("nope") > 1, SCHEMA)
    with pytest.raises(InvalidExpressionError, match="boolean"):
        parse_predicate(pc.field("n") + 1, SCHEMA)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("id <", r"a value is missing after '<' at character 4$"),
        ("id = = 1", r"a value is missing after '=' at character 6$"),
        ("(id = 1", r"a closing '\)' is missing at character 7$"),
        ("x = 'unterminated", r"unterminated string: the ' at character 5 is never closed$"),
        ("id = 1 1", r"unexpected '1' at character 8$"),
        ("id BETWEEN 1", r"BETWEEN needs 'low AND high'"),
        ("id = 1; n = 2", "found 2 statements"),
        ("id IN (SELECT 1)", "subqueries"),
        ("EXISTS (SELECT 1)", "subqueries"),
        ("SELECT * FROM t", "subqueries and statements"),
        ("sum(n) > 1", "aggregate functions are not allowed at 'SUM\\(n\\)'"),
        ("count(*) > 1", "aggregate"),
        ("frobnicate(n) = 1", "unknown function frobnicate\\(\\); supported functions: upper"),
        ("n = ?", "parameters"),
        ("id a", "missing operator"),
        ("x = 5", "incompatible operand types string and int64.* at 'x = 5'"),
        ("x + 1 = 'a'", "incompatible operand types string and int64.* at 'x \\+ 1'"),
        ("x LIKE n", "pattern must be a string literal"),
        ("n LIKE 'a%'", "LIKE needs a string operand, got int32"),
        ("n + 1", "must be boolean"),
        ("n AND b", "expected a boolean"),
        ("d = DATE '2024-13-45'", "cannot convert"),
        ("CAST(n AS INTERVAL) = 1", "unsupported type"),
        ("TRY_CAST(n AS INT) = 1", "unsupported"),
        ("n = 100000000000000000000000", "out of the 64-bit range"),
        ("n BETWEEN SYMMETRIC 1 AND 2", "SYMMETRIC"),
        ("round(f, n) > 1", "integer literal"),
        ("CASE WHEN n THEN 1 END = 1", "WHEN condition"),
        ("coalesce(x, n) = 'a'", "incompatible types"),
    ],
)
def test_invalid_expressions(text: str, message: str) -> None:
    with pytest.raises(InvalidExpressionError, match=message):
        parse_predicate(text, SCHEMA)


def test_wrong_argument_type() -> None:
    with pytest.raises(InvalidExpressionError, match="expected a SQL string"):
        parse_predicate(42, SCHEMA)  # type: ignore[arg-type]


_FUZZ_TOKENS = [
    "id",
    "n",
    "x",
    "st.a",
    "'q'",
    "1",
    "2.5",
    "-",
    "NULL",
    "TRUE",
    "AND",
    "OR",
    "NOT",
    "IN",
    "(",
    ")",
    ",",
    "=",
    "<",
    "+",
    "*",
    "/",
    "%",
    "||",
    "LIKE",
    "IS",
    "BETWEEN",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "AS",
    "INT",
    "DATE",
    "upper",
    "coalesce",
    "substring",
    "'%'",
    ";",
    "SELECT",
    "'2024-01-01'",
    '"My Col"',
    "`",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FUZZ_TOKENS), min_size=1, max_size=12))
def test_fuzzed_text_raises_only_our_errors(tokens: list[str]) -> None:
    text = " ".join(tokens)
    for parse in (parse_predicate, parse_value_expression):
        try:
            assert isinstance(parse(text, SCHEMA), pc.Expression)
        except InvalidInputError:
            pass


# --- property: random predicates agree with SQL's three-valued logic ---------------------------

Ints = st.one_of(st.none(), st.integers(-3, 3))
Strs = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "ba", "a'b", "a%"]))
RowsStrategy = st.lists(st.tuples(Ints, Ints, Strs), min_size=0, max_size=12)

# A predicate node is (sql_text, evaluate(row) -> True | False | None).
Node = tuple[str, Callable[[tuple[Any, ...]], bool | None]]
INT_COLUMNS = {"a": 0, '"c d"': 1, "A": 0}  # quoted and case-folded names too
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda p, q: p == q,
    "<>": lambda p, q: p != q,
    "!=": lambda p, q: p != q,
    "<": lambda p, q: p < q,
    "<=": lambda p, q: p <= q,
    ">": lambda p, q: p > q,
    ">=": lambda p, q: p >= q,
}


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _and(p: bool | None, q: bool | None) -> bool | None:
    return False if p is False or q is False else None if p is None or q is None else True


def _or(p: bool | None, q: bool | None) -> bool | None:
    return True if p is True or q is True else None if p is None or q is None else False


def _not(p: bool | None) -> bool | None:
    return None if p is None else not p


def _compare(op: str, p: Any, q: Any) -> bool | None:
    return None if p is None or q is None else OPS[op](p, q)


def _in(v: Any, options: list[Any]) -> bool | None:
    if v is None:
        return None
    return True if v in options else None if None in options else False


@st.composite
def comparison(draw: st.DrawFn) -> Node:
    op = draw(st.sampled_from(sorted(OPS)))
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(INT_COLUMNS)))
        i = INT_COLUMNS[name]
        if draw(st.booleans()):
            k = draw(st.integers(-4, 4))
            return f"{name} {op} {k}", lambda r: _compare(op, r[i], k)
        other = draw(st.sampled_from(sorted(INT_COLUMNS)))
        j = INT_COLUMNS[other]
        return f"{name} {op} {other}", lambda r: _compare(op, r[i], r[j])
    s = draw(st.sampled_from(["", "a", "ab", "b", "a'b"]))
    return f"s {op} {_sql_str(s)}", lambda r: _compare(op, r[2], s)


@st.composite
def special(draw: st.DrawFn) -> Node:
    kind = draw(st.sampled_from(["null", "in", "between", "like", "literal"]))
    name, i = draw(st.sampled_from([("a", 0), ('"c d"', 1), ("s", 2)]))
    negated = draw(st.booleans())
    neg = "NOT " if negated else ""
    if kind == "null":
        return (f"{name} IS {neg}NULL", lambda r: (r[i] is not None) if negated else (r[i] is None))
    if kind == "in" and i < 2:
        options = draw(st.lists(st.one_of(st.none(), st.integers(-3, 3)), min_size=1, max_size=4))
        text = ", ".join("NULL" if o is None else str(o) for o in options)
        return (
            f"{name} {neg}IN ({text})",
            lambda r: _not(_in(r[i], options)) if negated else _in(r[i], options),
        )
    if kind == "between" and i < 2:
        lo, hi = draw(st.integers(-3, 3)), draw(st.integers(-3, 3))

        def between(r: tuple[Any, ...]) -> bool | None:
            inside = _and(_compare(">=", r[i], lo), _compare("<=", r[i], hi))
            return _not(inside) if negated else inside

        return f"{name} {neg}BETWEEN {lo} AND {hi}", between
    if kind == "like":
        pattern = draw(st.text(alphabet="ab%_'", max_size=4))

        def matches(r: tuple[Any, ...]) -> bool | None:
            found = None if r[2] is None else like(r[2], pattern)
            return _not(found) if negated else found

        return f"s {neg}LIKE {_sql_str(pattern)}", matches
    value = draw(st.sampled_from([True, False, None]))
    return {True: "TRUE", False: "FALSE", None: "NULL"}[value], lambda r: value


def combine(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    def build(kind: str, left: Node, right: Node) -> Node:
        if kind == "NOT":
            return f"NOT ({left[0]})", lambda r: _not(left[1](r))
        join = _and if kind == "AND" else _or
        return f"({left[0]}) {kind} ({right[0]})", lambda r: join(left[1](r), right[1](r))

    return st.builds(build, st.sampled_from(["AND", "OR", "NOT"]), children, children)


PREDICATE_NODES = st.recursive(st.one_of(comparison(), special()), combine, max_leaves=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=RowsStrategy, node=PREDICATE_NODES)
def test_random_predicates_follow_sql_three_valued_logic(
    rows: list[tuple[Any, ...]], node: Node
) -> None:
    text, check = node
    table = pa.table(
        {
            "id": pa.array(range(len(rows)), pa.int64()),
            "a": pa.array([r[0] for r in rows], pa.int64()),
            "c d": pa.array([r[1] for r in rows], pa.int32()),
            "s": pa.array([r[2] for r in rows], pa.string()),
        }
    )
    expected = [i for i, r in enumerate(rows) if check(r) is True]
    assert filtered_ids(text, table) == expected, text
