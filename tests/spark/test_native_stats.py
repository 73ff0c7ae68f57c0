"""Footer statistics of ``s3ddb.spark_ext.write`` on real local Spark: for every column
type, a native-written file's statistics are those the Python writer computes for the
same rows (or safely looser), and filters on every type read the same rows through
pruning (a wrong bound would hide rows)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from s3ddb.expressions.compiled import compile_filter
from s3ddb.format.stats import ColumnStatistics, compute_file_statistics, fragment_column_stats

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


#: ids 0..399 in four files of 100 consecutive ids; id 150 (second file) is NaN in x.
COLUMNS = (
    "id",
    "CAST(id - 200 AS INT) AS i",
    "id >= 300 AS b",
    "CASE WHEN id % 7 = 0 THEN NULL ELSE CAST(id AS FLOAT) / 2 END AS f",
    "CASE WHEN id = 150 THEN CAST('NaN' AS DOUBLE) WHEN id = 160 THEN CAST('-Infinity' AS DOUBLE)"
    " WHEN id % 11 = 0 THEN NULL ELSE id / 4.0D END AS x",
    # Longer than the 16 characters a string bound keeps, and not all ASCII.
    "CONCAT(IF(id >= 300, 'é', ''), 'key-', LPAD(CAST(id AS STRING), 4, '0'),"
    " REPEAT('x', CAST(id % 30 AS INT))) AS s",
    "IF(id % 13 = 0, NULL, DATE_ADD(DATE'1969-12-01', CAST(id AS INT))) AS d",
    "TIMESTAMP_SECONDS(id * 3600) AS ts",
)


EPOCH_DAY = dt.date(1970, 1, 1)


def _looser_or_equal(native: ColumnStatistics, python: ColumnStatistics) -> bool:
    """Whether ``native`` admits every value ``python``'s bounds admit."""
    low_ok = native.min is None or (python.min is not None and native.min <= python.min)
    high_ok = native.max is None or (python.max is not None and native.max >= python.max)
    return native.null_count == python.null_count and low_ok and high_ok


def test_native_statistics_are_the_python_writers_and_prune_the_same_rows(
    spark: Any, local_uri: str
) -> None:
    import s3ddb.spark_ext

    df = spark.range(0, 400, numPartitions=4).selectExpr(*COLUMNS)
    # A cluster that truncates footer strings to 4 bytes: the write keeps them whole.
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("parquet.statistics.truncate.length", "4")
    try:
        s3ddb.spark_ext.write(df, local_uri)
    finally:
        hadoop.unset("parquet.statistics.truncate.length")
    ds = s3ddb.dataset(local_uri)
    schema = ds.manifest.schema
    fragments = ds.manifest.fragments
    assert len(fragments) == 4
    field = schema.field_id
    recorded = {field(n) for n in ("id", "i", "b", "f", "x", "s", "d")}
    nan_fragments = 0
    ids_of: dict[int, set[int]] = {}
    for fragment in fragments:
        data_file = fragment.files[0]
        rows = pq.read_table(Path(local_uri) / "data" / data_file.path)
        ids_of[fragment.id] = set(rows.column("id").to_pylist())
        python = {c.field_id: c for c in compute_file_statistics(rows, schema, data_file).columns}
        native = {c.field_id: c for c in fragment.stats[0].columns}
        assert set(native) == set(python) == recorded, "the same columns (no timestamps)"
        has_nan = any(v is not None and math.isnan(v) for v in rows.column("x").to_pylist())
        nan_fragments += has_nan
        for field_id, want in python.items():
            got = native[field_id]
            if has_nan and field_id == field("x"):
                # Parquet put NaN in the footer's max: no bounds, never wrong ones.
                assert (got.min, got.max) == (None, None)
                assert _looser_or_equal(got, want) and want.min == -math.inf
            else:
                assert got == want, f"field {field_id}"
    assert nan_fragments == 1

    everything = sorted(ds.to_table().to_pylist(), key=lambda r: r["id"])
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    filters: list[tuple[str, Callable[[dict[str, Any]], bool], bool]] = [
        # (filter, the same test in Python, whether statistics can skip a fragment)
        ("i BETWEEN -50 AND -40", lambda r: -50 <= r["i"] <= -40, True),
        ("b = true", lambda r: r["b"] is True, True),
        ("f >= 190", lambda r: r["f"] is not None and r["f"] >= 190, False),
        ("x > 90", lambda r: r["x"] is not None and r["x"] > 90, True),
        ("x < -1000", lambda r: r["x"] is not None and r["x"] < -1000, True),
        ("x IS NULL", lambda r: r["x"] is None, False),
        ("s = 'key-0042xxxxxxxxxxxx'", lambda r: r["s"] == "key-0042xxxxxxxxxxxx", True),
        ("s >= 'é'", lambda r: r["s"] >= "é", True),
        ("s < 'key-0100'", lambda r: r["s"] < "key-0100", True),
        ("d < DATE '1970-01-01'", lambda r: r["d"] is not None and r["d"] < EPOCH_DAY, True),
        ("d IS NULL", lambda r: r["d"] is None, False),
        (
            "ts >= TIMESTAMP '1970-01-15 00:00:00'",
            lambda r: r["ts"] >= epoch + dt.timedelta(days=14),
            False,
        ),
    ]  # fmt: skip
    stats = [(f, fragment_column_stats(f, schema)) for f in fragments]
    for text, matches, prunes in filters:
        expected = [r["id"] for r in everything if matches(r)]
        assert expected, text
        got = sorted(ds.to_table(filter=text).column("id").to_pylist())
        assert got == expected, text
        may_match = compile_filter(text, schema.arrow).may_match
        if may_match is None:
            assert not prunes, text
            continue
        admitted = {f.id for f, s in stats if may_match(s, f.physical_rows)}
        holding = {i for i, ids in ids_of.items() if ids & set(expected)}
        assert holding <= admitted, f"{text}: a fragment with matching rows is skipped"
        if prunes:
            assert len(admitted) < len(fragments), f"{text}: statistics skip a fragment"
