"""Key hashes of merge_insert's key-existence filter: stable, equal for equal keys,
NULL keys skipped, distinct keys practically never colliding."""

from __future__ import annotations

import datetime as dt
import decimal
import subprocess
import sys

import pyarrow as pa
import pytest

from s3ddb.format.keys import key_hashes


def _one(array: pa.Array) -> list[int]:
    return key_hashes(pa.table({"k": array}), ["k"])


@pytest.mark.parametrize(
    "values, type_",
    [
        ([1, -1, 0, 2**62, -(2**63)], pa.int64()),
        ([1, 2, 3], pa.int32()),
        ([0.5, -2.25, 1e300], pa.float64()),
        (["", "a", "a\x00", "ab", "é", "x" * 300], pa.string()),
        ([b"", b"\x00", b"\x00\x00", b"ab"], pa.binary()),
        ([dt.date(2024, 1, 1), dt.date(1970, 1, 1)], pa.date32()),
        ([dt.datetime(2024, 1, 1, 12), dt.datetime(2024, 1, 1, 13)], pa.timestamp("us")),
        ([True, False], pa.bool_()),
        ([decimal.Decimal("1.50"), decimal.Decimal("2.25")], pa.decimal128(6, 2)),
    ],
)
def test_distinct_values_hash_apart_and_equal_values_alike(
    values: list, type_: pa.DataType
) -> None:
    hashes = _one(pa.array(values, type_))
    assert len(set(hashes)) == len(values), "distinct keys collided"
    again = _one(pa.array(list(reversed(values)), type_))
    assert again == list(reversed(hashes)), "a key's hash depends on its position"


def test_string_and_large_string_and_chunking_agree() -> None:
    small = _one(pa.array(["a", "bc", "d"], pa.string()))
    large = _one(pa.array(["a", "bc", "d"], pa.large_string()))
    chunked = key_hashes(pa.table({"k": pa.chunked_array([["a"], ["bc", "d"]])}), ["k"])
    sliced = _one(pa.array(["zz", "a", "bc", "d"]).slice(1))
    assert small == large == chunked == sliced


def test_null_key_parts_drop_the_row() -> None:
    table = pa.table({"a": [1, None, 3, 4], "b": ["x", "y", None, "w"]})
    assert len(key_hashes(table, ["a", "b"])) == 2
    assert key_hashes(table, ["a", "b"]) == key_hashes(table.take([0, 3]), ["a", "b"])


def test_negative_zero_equals_zero() -> None:
    assert _one(pa.array([0.0])) == _one(pa.array([-0.0]))


def test_composite_keys_depend_on_every_part_and_its_order() -> None:
    table = pa.table({"a": [1, 1, 2], "b": [2, 3, 1]})
    h = key_hashes(table, ["a", "b"])
    assert len(set(h)) == 3
    swapped = key_hashes(pa.table({"a": [2], "b": [1]}), ["b", "a"])
    assert swapped[0] != h[2], "(a=2, b=1) hashed as (b=1, a=2) must differ from a-then-b"


def test_a_million_distinct_keys_do_not_collide() -> None:
    table = pa.table({"id": pa.array(range(1_000_000), pa.int64())})
    assert len(set(key_hashes(table, ["id"]))) == 1_000_000


def test_hashes_are_the_same_in_another_process() -> None:
    code = (
        "import pyarrow as pa; from s3ddb.format.keys import key_hashes; "
        "print(key_hashes(pa.table({'k': ['a', 'b'], 'n': [1, 2]}), ['k', 'n']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = key_hashes(pa.table({"k": ["a", "b"], "n": [1, 2]}), ["k", "n"])
    assert out.stdout.strip() == str(here)
