"""Spark's ``compact`` with Spark's own Parquet reader and writer gives what
``optimize.compact_files`` gives: the same rows in the same order, the same groups."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_compaction_equals_the_library_compaction_row_for_row(spark: Any, tmp_path: Path) -> None:
    """Twelve small fragments (deleted rows, a renamed column, a column added after
    some of them) become the same fragments, holding the same rows in the same order,
    as the library's compaction makes; Spark wrote their files."""
    import s3ddb.spark_ext

    uri = str(tmp_path / "t")
    for part in range(12):
        ids = list(range(part * 25, (part + 1) * 25))
        table = pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids]})
        s3ddb.write_dataset(table, uri, mode="append")
    ds = s3ddb.dataset(uri)
    ds.delete("id % 6 = 1 OR (id > 100 AND id < 140)")
    ds.alter_columns({"path": "v", "name": "w"})
    twin = str(tmp_path / "twin")
    shutil.copytree(uri, twin)
    expected = s3ddb.dataset(twin).optimize.compact_files(target_rows_per_fragment=70)
    before = {f.id for f in s3ddb.dataset(uri).get_fragments()}
    got = s3ddb.spark_ext.compact(spark, uri, target_rows_per_fragment=70)
    assert got == expected and got.fragments_removed == 12
    after, wanted = s3ddb.dataset(uri), s3ddb.dataset(twin)
    assert after.to_table() == wanted.to_table()  # the same rows, in the same order
    assert [f.num_rows for f in after.get_fragments()] == [
        f.num_rows for f in wanted.get_fragments()
    ]
    new = [f for f in after.get_fragments() if f.id not in before]
    writers = {
        pq.ParquetFile(Path(uri, "data", f.files[0].path)).metadata.created_by.split(" ")[0]
        for f in new
    }
    assert new and writers == {"parquet-mr"}, writers
    # A delete after the compaction finds the rows where the mapping put them.
    after.delete("id = 150")
    wanted.delete("id = 150")
    assert s3ddb.dataset(uri).to_table() == s3ddb.dataset(twin).to_table()


def test_a_dataset_with_stable_row_ids_is_compacted_by_python_tasks_keeping_them(
    spark: Any, tmp_path: Path
) -> None:
    import s3ddb.spark_ext

    uri = str(tmp_path / "ids")
    lineage = ["id", "_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
    s3ddb.write_dataset(
        pa.table({"id": pa.array(range(8), pa.int64())}), uri,
        max_rows_per_file=2, enable_stable_row_ids=True,
    )  # fmt: skip
    s3ddb.dataset(uri).update({"id": "id + 100"}, where="id = 5")
    before = s3ddb.dataset(uri).to_table(columns=lineage).sort_by("_rowid")
    got = s3ddb.spark_ext.compact(spark, uri, target_rows_per_fragment=100)
    assert got.fragments_removed >= 4
    after = s3ddb.dataset(uri)
    assert len(after.get_fragments()) == 1
    assert after.to_table(columns=lineage).sort_by("_rowid") == before


def test_partition_keys_send_each_unit_of_work_to_its_own_task(spark: Any) -> None:
    """Compaction keys group ``g`` so that Spark's hash partitioning gives it task ``g``:
    the port of Spark's hash agrees with Spark's, and each key lands where it should
    (numbered 0 and 1, two groups would share one task of two)."""
    from pyspark.sql import functions as F

    from s3ddb.spark_ext.partition_keys import partition_keys, spark_int_hash

    values = [*range(-40, 40), 2**31 - 1, -(2**31), 123_456_789]
    hashed = spark.createDataFrame([(v,) for v in values], "v int").select(
        "v", F.hash("v").alias("h")
    )
    assert {r.v: r.h for r in hashed.collect()} == {v: spark_int_hash(v) for v in values}
    for partitions in (1, 2, 3, 7):
        keys = partition_keys(partitions)
        frame = spark.createDataFrame(list(zip(keys, range(partitions))), "k int, unit int")
        placed = frame.repartition(partitions, "k").select(
            "unit", F.spark_partition_id().alias("task")
        )
        assert sorted((r.unit, r.task) for r in placed.collect()) == [
            (i, i) for i in range(partitions)
        ]
    naive = spark.createDataFrame([(0,), (1,)], "k int").repartition(2, "k")
    assert naive.select(F.spark_partition_id()).distinct().count() == 1
    with pytest.raises(ValueError):
        partition_keys(0)
