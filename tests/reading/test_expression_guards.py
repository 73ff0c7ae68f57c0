"""Expressions whose Arrow kernels would loop, run for hours or allocate without bound
are refused when translated, with an InvalidExpressionError naming the function and the
argument (docs/expressions.md, "Limits").

The kernels that loop (replace_substring with an empty pattern, round with a huge
number of digits) are also run end to end in a child process with a timeout, so a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import subprocess
import textwrap

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from s3ddb.errors import InvalidExpressionError
from s3ddb.expressions import (
    MAX_EXPRESSION_CHARS,
    MAX_LIKE_WILDCARDS,
    MAX_REPLACE_GROWTH,
    parse_predicate,
    parse_value_expression,
)
from tests.support.python_children import run_python

SCHEMA = pa.schema(
    [
        ("s", pa.string()),
        ("i", pa.int64()),
        ("f", pa.float64()),
        ("d", pa.decimal128(10, 2)),
        ("b", pa.bool_()),
    ]
)
TABLE = pa.table(
    {
        "s": ["ab", "", None],
        "i": [1, 2, None],
        "f": [1.25, 2.5, None],
        "d": pa.array([1, 2, None], pa.decimal128(10, 2)),
        "b": [True, False, None],
    },
    schema=SCHEMA,
)


def _refused(text: str, *words: str) -> str:
    """Translate ``text``; it must be refused with a message holding every word."""
    with pytest.raises(InvalidExpressionError) as info:
        parse_value_expression(text, SCHEMA)
    message = str(info.value)
    for word in words:
        assert word in message, message
    return message


def _values(text: str) -> list[object]:
    expr = parse_value_expression(text, SCHEMA)
    return pads.dataset(TABLE).to_table(columns={"v": expr}).column("v").to_pylist()


# --- kernels that never return -------------------------------------------------------


def test_replace_with_empty_search_text_is_refused() -> None:
    _refused("replace(s, '', 'x')", "REPLACE", "search text", "empty")
    _refused("replace(s, '', '')", "REPLACE", "empty")
    with pytest.raises(InvalidExpressionError, match="REPLACE"):
        parse_predicate("replace(s, '', 'x') = 'x'", SCHEMA)


_ROUND_DIGITS = """
import pyarrow as pa
from s3ddb.errors import InvalidExpressionError
from s3ddb.expressions import parse_value_expression

schema = pa.schema([("f", pa.float64()), ("d", pa.decimal128(10, 2))])
for text in ("round(f, 9223372036854775807)", "round(f, 1000000000000)",
             "round(d, -1000000000000)", "round(f, 18446744073709551615)"):
    try:
        parse_value_expression(text, schema)
        print("accepted", text)
    except InvalidExpressionError as e:
        print("refused", e)
"""


@pytest.mark.timeout(60)
def test_round_digits_out_of_range_are_refused() -> None:
    # In a child process: Arrow's kernel loops once per digit even on zero rows, so
    # without the guard the translation itself (which types the expression on an
    # empty table) never returns.
    try:
        done = run_python(["-c", _ROUND_DIGITS], timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail("translating ROUND with a huge number of digits did not return in 40 s")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 4, done.stdout + done.stderr
    for line in lines:
        assert line.startswith("refused ROUND's digits"), line
        assert "out of range -308..308" in line
    assert _values("round(f, 1)") == [1.3, 2.5, None]  # halves away from zero
    assert _values("round(f, -308)") == [0.0, 0.0, None]
    assert _values("round(i, -2)") == [0, 0, None]


_LOOPING_SCAN = """
import sys
import pyarrow as pa
import s3ddb
from s3ddb.errors import InvalidExpressionError

ds = s3ddb.write_dataset(pa.table({{"s": ["ab", "x"], "f": [1.5, 2.0]}}), "memory://loop")
try:
    ds.to_table(filter={predicate!r})
except InvalidExpressionError as e:
    print("refused:", e)
    sys.exit(0)
print("scanned")
sys.exit(1)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "predicate",
    ["replace(s, '', 'x') = 'x'", "round(f, 9223372036854775807) > 0"],
    ids=["replace-empty-pattern", "round-huge-digits"],
)
def test_looping_kernels_are_refused_end_to_end(predicate: str) -> None:
    """The filter of a real scan is refused instead of never returning."""
    try:
        done = run_python(
            ["-c", textwrap.dedent(_LOOPING_SCAN.format(predicate=predicate))], timeout=40
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the scan with filter {predicate!r} did not return within 40 s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused:" in done.stdout


# --- parameters out of range ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("CAST(i AS DECIMAL(1000, 0))", ("DECIMAL", "precision 1000", "1..76")),
        ("CAST(1 AS DECIMAL(1000, 0))", ("DECIMAL", "precision 1000")),
        ("CAST(i AS DECIMAL(77, 0))", ("precision 77",)),
        ("CAST(i AS DECIMAL(0, 0))", ("precision 0",)),
        ("CAST(i AS DECIMAL(99999999999999999999, 0))", ("precision 99999999999999999999",)),
        ("CAST(i AS DECIMAL(10, 20))", ("scale 20", "precision 10")),
        ("CAST(i AS DECIMAL(1e3, 0))", ("DECIMAL", "'1e3'", "not an integer literal")),
        ("CAST(i AS DECIMAL(10.5, 2))", ("DECIMAL", "not an integer literal")),
        ("CAST(i AS DECIMAL(i, 2))", ("DECIMAL", "not an integer literal")),
        ("CAST(i AS DECIMAL(10, 2, 3))", ("DECIMAL takes (precision[, scale])",)),
        ("CAST(i AS TIMESTAMP(20))", ("TIMESTAMP", "0 <= p <= 9", "[20]")),
        ("CAST(s AS TIMESTAMP(99999999999999999999))", ("TIMESTAMP",)),
        ("CAST(i AS VARCHAR(10, 2))", ("VARCHAR", "at most one length")),
    ],
)
def test_cast_type_parameters_out_of_range(text: str, words: tuple[str, ...]) -> None:
    _refused(text, *words)


def test_cast_parameters_in_range_still_work() -> None:
    assert _values("CAST(d AS DECIMAL(76, 2))")[0] == pa.scalar(1, pa.decimal256(76, 2)).as_py()
    assert _values("CAST(f AS DECIMAL(5, 2))")[:2] == [
        pa.scalar(1.25, pa.float64()).cast(pa.decimal128(5, 2)).as_py(),
        pa.scalar(2.5, pa.float64()).cast(pa.decimal128(5, 2)).as_py(),
    ]
    assert _values("CAST(i AS VARCHAR(10))") == ["1", "2", None]
    assert _values("CAST(i AS TIMESTAMP(3))")[2] is None


def test_cast_refused_by_arrow_for_its_types_is_refused_when_translated() -> None:
    # Arrow casts int64 to a decimal of fewer than 19 digits for no value: it used to
    # fail at the first row of the scan, with a bare ArrowInvalid.
    _refused("CAST(i AS DECIMAL(5))", "cannot cast int64 to decimal128(5, 0)")
    _refused("CAST(i + 1 AS DECIMAL(10, 2))", "cannot cast int64")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("substring(s, 9223372036854775808)", ("SUBSTRING's start", "9223372036854775808")),
        ("substring(s, 18446744073709551615)", ("SUBSTRING's start",)),
        ("substring(s, 0)", ("SUBSTRING's start 0", "1..")),
        ("substring(s, 1, 18446744073709551615)", ("SUBSTRING's length",)),
        ("substring(s, 2, -5)", ("SUBSTRING's length -5",)),
        ("substring(s, NULL)", ("SUBSTRING's start must be an integer literal",)),
    ],
)
def test_substring_arguments_out_of_range(text: str, words: tuple[str, ...]) -> None:
    _refused(text, *words)


def test_substring_at_the_int64_limits_reads_nothing() -> None:
    big = 2**63 - 1
    assert _values(f"substring(s, {big}, {big})") == ["", "", None]
    assert _values(f"substring(s, 2, {big})") == ["b", "", None]
    assert _values("substring(s, 1, 0)") == ["", "", None]


# --- results and patterns of unbounded size ------------------------------------------


def test_replace_that_could_grow_its_input_without_bound_is_refused() -> None:
    ok = "x" * MAX_REPLACE_GROWTH
    assert _values(f"replace(s, 'a', '{ok}')") == [ok + "b", "", None]
    _refused(f"replace(s, 'a', '{ok}x')", "REPLACE's replacement", "101 characters")
    _refused(f"replace(s, 'ab', '{'y' * 99_000}')", "REPLACE's replacement", "99,000")


def test_like_pattern_with_too_many_wildcards_is_refused() -> None:
    ok = "%a" * MAX_LIKE_WILDCARDS
    assert parse_predicate(f"s LIKE '{ok}'", SCHEMA) is not None
    with pytest.raises(InvalidExpressionError, match=f"{MAX_LIKE_WILDCARDS + 1} wildcards"):
        parse_predicate(f"s LIKE '{ok}_'", SCHEMA)
    # Escaped wildcards are literal characters, not wildcards.
    assert parse_predicate(f"s LIKE '{ok}" + "\\%" * 500 + "'", SCHEMA) is not None
    escaped = f"s NOT LIKE '{ok}" + "!_" * 500 + "' ESCAPE '!'"
    assert parse_predicate(escaped, SCHEMA) is not None
    for text in (f"s ILIKE '{'_' * 99_000}'", f"s LIKE '{'%a_' * 30_000}'"):
        with pytest.raises(InvalidExpressionError, match="wildcards") as info:
            parse_predicate(text, SCHEMA)
        # The message is cut to a readable length, not 100,000 characters.
        assert len(str(info.value)) < 1_000


def test_in_list_beyond_the_expression_limits_is_refused() -> None:
    keys = ", ".join(map(str, range(30_000)))
    assert len(keys) > MAX_EXPRESSION_CHARS
    with pytest.raises(InvalidExpressionError, match="too long") as info:
        parse_predicate(f"i IN ({keys})", SCHEMA)
    assert len(str(info.value)) < 1_000
    mixed = ", ".join(["i"] * 9_000)  # not a set lookup: one equality per item
    with pytest.raises(InvalidExpressionError, match="too large"):
        parse_predicate(f"i IN ({mixed})", SCHEMA)


# --- nesting -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "NOT " * 100_000 + "b",
        "(" * 100_000 + "b" + ")" * 100_000,
        "NOT " * 20_000 + "b",
        "(" * 40_000 + "b" + ")" * 40_000,
        "NOT (" * 12_000 + "b" + ")" * 12_000,
        "- " * 40_000 + "i > 0",
        "CASE WHEN " * 5_000 + "b" + " THEN TRUE END" * 5_000,
        "[" * 40_000 + "]" * 40_000,
    ],
    ids=["not-100k", "paren-100k", "not-20k", "paren-40k", "not-paren", "neg", "case", "brackets"],
)
def test_deep_nesting_is_a_typed_error(text: str) -> None:
    with pytest.raises(InvalidExpressionError) as info:
        parse_predicate(text, SCHEMA)
    assert "too" in str(info.value)
    assert len(str(info.value)) < 1_000


_DEEP_IN_SMALL_STACK = """
import sys, threading
import pyarrow as pa
from s3ddb.errors import InvalidExpressionError
from s3ddb.expressions import parse_predicate

sys.setrecursionlimit(1_000_000)  # an application may raise it: the parser must not recurse
threading.stack_size(256 * 1024)
out = []

def run():
    try:
        parse_predicate("NOT (" * 15_000 + "b" + ")" * 15_000, pa.schema([("b", pa.bool_())]))
        out.append("accepted")
    except InvalidExpressionError as e:
        out.append("typed " + str(e)[:80])
    except BaseException as e:
        out.append("untyped " + type(e).__name__)

t = threading.Thread(target=run)
t.start()
t.join()
print(out[0])
"""


@pytest.mark.timeout(60)
def test_deep_nesting_is_refused_before_parsing() -> None:
    """With the recursion limit raised and a small thread stack, a deep text is still a
    typed error: its depth is estimated from the tokens before the parser recurses."""
    done = run_python(["-c", _DEEP_IN_SMALL_STACK], timeout=50)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("typed expression nested too deeply"), done.stdout


# --- odd text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "s LIKE 'a\ud800%'",
        "s = 'a\ud800'",
        "replace(s, '\ud800', 'x') = 'a'",
        "trim(s, '\ud800') = 'a'",
    ],
)
def test_lone_surrogate_is_a_typed_error(text: str) -> None:
    with pytest.raises(InvalidExpressionError, match="lone surrogate"):
        parse_predicate(text, SCHEMA)


@pytest.mark.parametrize(
    "text",
    [
        "repeat(s, 1000000000)",
        "lpad(s, 1000000000, 'x')",
        "rpad(s, 1000000000)",
        "regexp_replace(s, '', 'x')",
        "s RLIKE '(a*)*b'",
        "s SIMILAR TO 'a'",
        "i << 70",
        "i >> 70",
        "left(s, 9223372036854775807)",
        "translate(s, 'a', 'b')",
        "split_part(s, '', 1)",
    ],
)
def test_kernels_that_blow_up_are_not_reachable(text: str) -> None:
    """Functions whose Arrow kernels loop or allocate in proportion to an argument
    (repeat, padding, regular expressions, shifts) are not part of the language; this
    fails if one is added without a guard of its own."""
    with pytest.raises(InvalidExpressionError, match=r"unsupported|unknown|parse"):
        parse_value_expression(text, SCHEMA)
