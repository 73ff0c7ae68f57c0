"""Comparisons of numbers of different types answer as numbers do.

An integer column against a float literal compares as float64 (Arrow's promotion,
its own evaluation of the same data being the oracle): a float literal is narrowed
to the column's integer type only below 2**53, where that changes no answer. An
integer column against an integer literal outside its type's range is TRUE or FALSE
for every non-NULL row. Each is checked on a table, on a dataset (statistics
pruning) and on a dataset with a scalar index on the column.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest

import s3ddb
from s3ddb.errors import InvalidExpressionError
from s3ddb.expressions import parse_predicate, parse_value_expression

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_P53 = 2**53
_IDS = [_P53 - 1, _P53, _P53 + 1, _P53 + 2, _P53 + 3, 2**62, -(2**62), 5, 0, None]


def _table() -> pa.Table:
    return pa.table({"id": pa.array(_IDS, pa.int64()), "k": range(len(_IDS))})


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> list[s3ddb.Dataset]:
    """The rows in three fragments, without and with a scalar index on id."""
    out = []
    for indexed in (False, True):
        uri = str(tmp_path_factory.mktemp("ds") / "ds")
        ds = s3ddb.write_dataset(_table(), uri, max_rows_per_file=4, max_rows_per_group=2)
        if indexed:
            ds.create_scalar_index("id")
        out.append(s3ddb.dataset(uri))
    return out


def _keys(table: pa.Table) -> list[int]:
    return sorted(table.column("k").to_pylist())


def _check(text: str, want: list[int], datasets: list[s3ddb.Dataset]) -> None:
    table = _table()
    assert _keys(table.filter(parse_predicate(text, table.schema))) == want, text
    for ds in datasets:
        assert _keys(ds.to_table(filter=text)) == want, text
        assert ds.count_rows(filter=text) == len(want), text


_FLOATS = [
    "9007199254740993.0",  # parses as 2**53
    "9007199254740992.0",
    "9007199254740994.0",
    "9007199254740995.0",  # parses as 2**53 + 4
    "4611686018427387904.0",
    "-4611686018427387904.0",
    "1e17",
    "9007199254740991.0",
    "5.0",
    "4.5",
]


@pytest.mark.parametrize("literal", _FLOATS)
@pytest.mark.parametrize("op", list(_OPS))
def test_integer_column_against_float_literal_compares_as_arrow_does(
    literal: str, op: str, datasets: list[s3ddb.Dataset]
) -> None:
    table = _table()
    as_float = pc.field("id").cast(pa.float64(), safe=False)
    want = _keys(table.filter(_OPS[op](as_float, pa.scalar(float(literal)))))
    _check(f"id {op} {literal}", want, datasets)
    # The literal on the left, the operator mirrored.
    mirrored = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
    _check(f"{literal} {mirrored} id", want, datasets)


def test_float_literal_beyond_2_53_matches_every_integer_it_stands_for(
    datasets: list[s3ddb.Dataset],
) -> None:
    # 9007199254740993.0 is the float 2**53: not only the row of 2**53.
    _check("id = 9007199254740993.0", [1, 2], datasets)
    _check("id IN (5, 9007199254740993.0)", [1, 2, 7], datasets)
    _check("id BETWEEN 9007199254740993.0 AND 9007199254740993.0", [1, 2], datasets)
    # An integer literal names one integer.
    _check("id = 9007199254740993", [2], datasets)


@pytest.mark.parametrize(
    ("t", "column"),
    [
        (pa.int8(), [-128, 0, 127, None]),
        (pa.int32(), [-(2**31), 7, 2**31 - 1, None]),
        (pa.int64(), [-(2**63), 0, 2**63 - 1, None]),
        (pa.uint8(), [0, 9, 255, None]),
        (pa.uint64(), [0, 2**63 + 5, 2**64 - 1, None]),
    ],
)
def test_integer_literal_outside_the_column_type_compares_as_numbers(
    t: pa.DataType, column: list[int | None], tmp_path: Path
) -> None:
    table = pa.table({"x": pa.array(column, t), "k": range(len(column))})
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(table, uri, max_rows_per_file=2)
    ds = s3ddb.dataset(uri)
    literals = [-(2**63), -1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1]
    for number in literals:
        for sql, op in _OPS.items():
            for text, holds in (
                (f"x {sql} {number}", lambda v, op=op, n=number: op(v, n)),
                (f"{number} {sql} x", lambda v, op=op, n=number: op(n, v)),
            ):
                want = [k for k, v in enumerate(column) if v is not None and holds(v)]
                not_want = [k for k, v in enumerate(column) if v is not None and not holds(v)]
                got = _keys(table.filter(parse_predicate(text, table.schema)))
                assert got == want, (t, text)
                assert _keys(table.filter(parse_predicate(f"NOT ({text})", table.schema))) == (
                    not_want
                ), (t, text)
                assert _keys(ds.to_table(filter=text)) == want, (t, text)
        values = [v for v in column if v is not None]
        inside = [k for k, v in enumerate(column) if v is not None and v <= number]
        text = f"x BETWEEN {min(values)} AND {number}"
        assert _keys(table.filter(parse_predicate(text, table.schema))) == inside, (t, text)
        text = f"x IN ({values[1]}, {number})"
        want = [k for k, v in enumerate(column) if v is not None and v in (values[1], number)]
        assert _keys(table.filter(parse_predicate(text, table.schema))) == want, (t, text)
        text = f"x <=> {number}"
        want = [k for k, v in enumerate(column) if v == number]
        assert _keys(table.filter(parse_predicate(text, table.schema))) == want, (t, text)


def test_int64_column_against_uint64_literal_on_a_dataset_with_an_index(
    datasets: list[s3ddb.Dataset],
) -> None:
    non_null = [k for k, v in enumerate(_IDS) if v is not None]
    _check("id < 9223372036854775809", non_null, datasets)
    _check("id >= 9223372036854775808", [], datasets)
    _check("id <> 18446744073709551615", non_null, datasets)
    _check("NOT (id > 9223372036854775809)", non_null, datasets)


def test_large_integers_compare_with_fractional_floats(datasets: list[s3ddb.Dataset]) -> None:
    # Arrow on its own casts the column to float32 here and fails beyond 2**24.
    want = [k for k, v in enumerate(_IDS) if v is not None and v > 30.5]
    _check("id > 30.5", want, datasets)
    _check("id < -30.5", [6], datasets)


def test_update_refuses_a_float_literal_that_stands_for_several_integers() -> None:
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(InvalidExpressionError, match=r"2\*\*53.*integer literal"):
        parse_value_expression("9007199254740993.0", schema, target_type=pa.int64())
    expr = parse_value_expression("9007199254740991.0", schema, target_type=pa.int64())
    value = pads.dataset(pa.table({"id": [0]})).to_table(columns={"v": expr})
    assert value.column("v").to_pylist() == [_P53 - 1]
    assert value.schema.field("v").type == pa.int64()


# --- arithmetic ------------------------------------------------------------------------

_BIG_U = 2**63 + 5


def _arith_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([2**25 + 1, 4, None], pa.int64()),
            "f": pa.array([1.5, 2.0, 3.0], pa.float32()),
            "u": pa.array([_BIG_U, 3, None], pa.uint64()),
            "b": pa.array([255, 1, 7], pa.uint8()),
            "g": pa.array([0.1, 2.5, -1.0], pa.float32()),
        }
    )


@pytest.mark.parametrize(
    ("predicate", "matches"),
    [
        # An integer beside a float is computed in float64 (Arrow alone: float32, and
        # ids above 2**24 failed).
        ("id + 0.5 > 33554432", [0]),
        ("id + 2.5 = 6.5", [1]),
        ("f + id > 33554433", [0]),
        ("f * id = 8", [1]),
        # An integer literal the float32 holds exactly stays float32 (0.1f * 10 is
        # exactly 1.0f; in float64 it is not); a larger one makes both float64.
        ("g * 10 = 1.0", [0]),
        ("g + 33554433 > 33554433", [0, 1]),
        # uint64 values at or above 2**63 with +, * and / of a literal (Arrow alone:
        # int64, and they failed).
        (f"u + 1 = {_BIG_U + 1}", [0]),
        (f"1 + u = {_BIG_U + 1}", [0]),
        (f"u * 1 = {_BIG_U}", [0]),
        (f"u / 1 = {_BIG_U}", [0]),
        ("u + 1 > 0", [0, 1]),
        # Small integer types still widen (255 + 1 is 256, not an overflow).
        ("b + 1 = 256", [0]),
    ],
)
def test_arithmetic_holds_both_operands(tmp_path: Path, predicate: str, matches: list[int]) -> None:
    table = _arith_table().append_column("k", pa.array(range(3)))
    ds = s3ddb.write_dataset(table, str(tmp_path / "ds"))
    got = ds.to_table(filter=predicate).column("k").to_pylist()
    assert got == matches, predicate


def test_uint64_subtraction_is_computed_in_int64(tmp_path: Path) -> None:
    """Small values go below zero without an error; values at or above 2**63 fail
    typed (the documented limit)."""
    small = s3ddb.write_dataset(
        pa.table({"u": pa.array([3, 9], pa.uint64())}), str(tmp_path / "small")
    )
    assert small.to_table(filter="u - 5 < 0").column("u").to_pylist() == [3]
    ds = s3ddb.write_dataset(_arith_table(), str(tmp_path / "ds"))
    with pytest.raises(InvalidExpressionError):
        ds.to_table(filter="u - 1 > 0")


def test_update_computes_large_values_in_types_that_hold_them(tmp_path: Path) -> None:
    ds = s3ddb.write_dataset(_arith_table(), str(tmp_path / "ds"))
    ds.update({"u": "u + 1", "f": "f + id"})
    out = s3ddb.dataset(str(tmp_path / "ds")).to_table()
    assert out.column("u").to_pylist() == [_BIG_U + 1, 4, None]
    assert out.column("u").type == pa.uint64()
    # Computed in float64 (33554434.5), stored in the float32 column (rounded).
    assert out.column("f").to_pylist() == [pa.scalar(33554434.5, pa.float32()).as_py(), 6.0, None]
