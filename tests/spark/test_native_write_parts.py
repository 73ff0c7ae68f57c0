"""The native write's parts without a JVM: where the JVM writes, and the statistics
read from footers, which pruning trusts (a wrong bound would hide rows)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

from s3ddb.format.fragment_metadata import DataFile
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.stats import compute_file_statistics, file_key
from s3ddb.spark_ext.native_write import footer_statistics, jvm_root_of


def test_the_jvm_reaches_local_paths_and_s3_through_a_named_connector(tmp_path: Path) -> None:
    assert jvm_root_of(str(tmp_path / "ds")) == f"file://{tmp_path / 'ds'}"
    uri = "s3+ddb://bucket/some/prefix?ddbTableName=t"
    assert jvm_root_of(uri) is None, "no connector named: the Python writer is used"
    assert jvm_root_of(uri, "s3a") == "s3a://bucket/some/prefix"
    assert jvm_root_of("s3://bucket/p", "s3") == "s3://bucket/p"
    assert jvm_root_of("memory://x", "s3a") is None


def test_footer_statistics_equal_the_statistics_of_the_rows(tmp_path: Path) -> None:
    table = pa.table(
        {
            # A nested column first: row groups index leaves, not top-level fields.
            "nested": pa.array([{"a": i, "b": -i} for i in range(6)]),
            "id": pa.array([5, -3, 9, None, 100, 7], pa.int64()),
            "small": pa.array([1, 2, 3, 4, 5, 6], pa.int8()),
            "flag": pa.array([True, None, True, True, None, True]),
            "empty": pa.array([None] * 6, pa.int32()),
            "s": ["a", "b", "c", "é" * 20, None, "f" * 17],
            "x": [0.5, float("nan"), 1.0, 2.0, -float("inf"), 4.0],
            "f32": pa.array([0.5, None, 1.5, 2.5, 3.5, -4.5], pa.float32()),
            "d": pa.array([dt.date(1969, 7, 20), None, dt.date(2026, 1, 1)] * 2, pa.date32()),
            "ts": pa.array([dt.datetime(2026, 1, 1)] * 6, pa.timestamp("us")),
        }
    )
    schema = DatasetSchema.assign(table.schema)
    fields = tuple(schema.top_level_ids(table.column_names))
    tagged = pa.schema(
        [
            f.with_metadata({b"PARQUET:field_id": str(i).encode()})
            for f, i in zip(table.schema, fields)
        ]
    )
    path = tmp_path / "f.parquet"
    pq.write_table(table.cast(tagged), path, row_group_size=2)  # three row groups
    data_file = DataFile(path="f.parquet", fields=fields)
    got = footer_statistics(pq.read_metadata(path), data_file)
    assert got.file_key == file_key("f.parquet")
    expected = {c.field_id: c for c in compute_file_statistics(table, schema, data_file).columns}
    by_id = {c.field_id: c for c in got.columns}
    recorded = {schema.field_id(n) for n in table.column_names if n not in ("nested", "ts")}
    assert set(by_id) == set(expected) == recorded, "every type the Python writer records"
    assert by_id == expected
    assert by_id[schema.field_id("id")].min == -3 and by_id[schema.field_id("id")].max == 100
    assert by_id[schema.field_id("s")].max == "é" * 15 + "ê", "the Python writer's rounding up"


def test_a_row_group_without_statistics_gives_the_column_none(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array(range(10), pa.int64())})
    schema = DatasetSchema.assign(table.schema)
    tagged = pa.schema([table.schema.field(0).with_metadata({b"PARQUET:field_id": b"0"})])
    path = tmp_path / "f.parquet"
    pq.write_table(table.cast(tagged), path, write_statistics=False)
    data_file = DataFile(path="f.parquet", fields=(schema.field_id("id"),))
    assert footer_statistics(pq.read_metadata(path), data_file).columns == ()


def test_strings_that_are_not_utf8_get_no_bounds(tmp_path: Path) -> None:
    """Spark's strings may hold any bytes (a CAST of binary); their footer bounds
    cannot be read as text: the column keeps its null count, without bounds."""
    strings = pa.array([b"\xff\xfe", b"ok", None], pa.binary()).view(pa.string())
    tagged = pa.field("s", pa.string(), metadata={b"PARQUET:field_id": b"0"})
    path = tmp_path / "f.parquet"
    pq.write_table(pa.Table.from_arrays([strings], schema=pa.schema([tagged])), path)
    data_file = DataFile(path="f.parquet", fields=(0,))
    (column,) = footer_statistics(pq.read_metadata(path), data_file).columns
    assert (column.field_id, column.null_count, column.min, column.max) == (0, 1, None, None)
