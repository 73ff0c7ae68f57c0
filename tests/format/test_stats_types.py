"""Statistics never stand in the way of a write: bounds that do not fit the stored
type (sint64) are left out, and types Arrow cannot take bounds of (float16) get none.
A fragment without bounds is read, never skipped, so every filter stays exact.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import s3ddb
from s3ddb.format.stats import fragment_column_stats, recorded_type, stored_bounds

_BIG = 2**63  # the first uint64 a sint64 bound cannot hold
_UINT64_MAX = 2**64 - 1


@pytest.mark.parametrize(
    ("t", "low", "high", "expected"),
    [
        (pa.uint64(), _BIG + 5, _BIG + 9, (None, None)),  # both ends over sint64
        (pa.uint64(), _BIG, _UINT64_MAX, (None, None)),
        (pa.uint64(), _BIG - 1, _BIG, (_BIG - 1, None)),  # the highest that fits
        (pa.uint64(), 0, 7, (0, 7)),
        (pa.int64(), -(2**63), 2**63 - 1, (-(2**63), 2**63 - 1)),
        # Writers that report footer bounds (Spark's) may hand over anything.
        (pa.int64(), -(2**63) - 1, -(2**63) - 1, (None, None)),
        (pa.int64(), -(2**64), 2**64, (None, None)),
    ],
)
def test_integer_bounds_outside_sint64_are_left_out(
    t: pa.DataType, low: int, high: int, expected: tuple[Any, Any]
) -> None:
    assert stored_bounds(t, low, high) == expected


def _rows(ds: s3ddb.Dataset, text: str) -> list[Any]:
    got = ds.to_table(filter=text)
    assert ds.count_rows(filter=text) == got.num_rows, text
    return sorted(got.column("k").to_pylist())


def test_uint64_fragments_at_or_over_2_63_are_written_and_read(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    big = [_BIG + 5, _BIG, _UINT64_MAX]
    ds = s3ddb.write_dataset(pa.table({"k": [0, 1, 2], "u": pa.array(big, pa.uint64())}), uri)
    # An append, an update and a merge insert each write fragments of such values.
    ds.insert(pa.table({"k": [3], "u": pa.array([_BIG + 7], pa.uint64())}))
    ds = s3ddb.dataset(uri)
    ds.update({"u": str(_BIG + 4)}, where="k = 0")
    ds = s3ddb.dataset(uri)
    new = pa.table({"k": [4, 1], "u": pa.array([_BIG + 11, _BIG + 1], pa.uint64())})
    ds.merge_insert("k").when_matched_update_all().when_not_matched_insert_all().execute(new)
    ds = s3ddb.dataset(uri)
    table = ds.to_table()
    assert dict(zip(table.column("k").to_pylist(), table.column("u").to_pylist())) == {
        0: _BIG + 4,
        1: _BIG + 1,
        2: _UINT64_MAX,
        3: _BIG + 7,
        4: _BIG + 11,
    }
    for fragment in ds.manifest.fragments:
        stats = fragment_column_stats(fragment, ds.manifest.schema)
        if "u" in stats:  # recorded, but with the bounds sint64 cannot hold left out
            assert stats["u"].min is None and stats["u"].max is None
    assert _rows(ds, f"u = {_BIG + 7}") == [3]
    assert _rows(ds, f"u >= {_BIG + 4}") == [0, 2, 3, 4]
    assert _rows(ds, f"u < {_BIG + 2}") == [1]
    assert _rows(ds, "u < 100") == []


def test_float16_columns_are_written_without_statistics_and_filter_exactly(
    tmp_path: Path,
) -> None:
    assert not recorded_type(pa.float16())
    assert recorded_type(pa.float32()) and recorded_type(pa.float64())
    values = [1.5, 2.5, None, float("nan"), -0.0, 65504.0, -3.0]
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(
        pa.table({"k": range(len(values)), "h": pa.array(np.array(values, np.float16))}),
        uri,
        max_rows_per_file=3,
    )
    ds.insert(pa.table({"k": [100], "h": pa.array(np.array([2.5], np.float16))}))
    ds = s3ddb.dataset(uri)
    ds.update({"h": "h * 2"}, where="k = 0")
    ds = s3ddb.dataset(uri)
    for fragment in ds.manifest.fragments:
        assert "h" not in fragment_column_stats(fragment, ds.manifest.schema)
    table = ds.to_table()
    assert table.schema.field("h").type == pa.float16()
    pairs = list(zip(table.column("k").to_pylist(), table.column("h").to_pylist()))
    assert dict(pairs)[0] == 3.0

    def where(test: Any) -> list[int]:
        return sorted(k for k, h in pairs if h is not None and not math.isnan(h) and test(h))

    assert _rows(ds, "h > 2") == where(lambda h: h > 2)
    assert _rows(ds, "h = 2.5") == where(lambda h: h == 2.5)
    assert _rows(ds, "h <= 0") == where(lambda h: h <= 0)
    assert _rows(ds, "h BETWEEN -1 AND 3") == where(lambda h: -1 <= h <= 3)
    assert _rows(ds, "h IN (2.5, 65504)") == where(lambda h: h in (2.5, 65504.0))
    assert _rows(ds, "h IS NULL") == sorted(k for k, h in pairs if h is None)
    assert _rows(ds, "h + 1 > 3") == where(lambda h: h + 1 > 3)
    # The same answers as Arrow's own comparison of the values widened to float32.
    own = table.filter(pc.field("h").cast(pa.float32()) > pa.scalar(2.0, pa.float32()))
    assert _rows(ds, "h > 2") == sorted(own.column("k").to_pylist())
