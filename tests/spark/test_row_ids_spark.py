"""Spark's merge and update keep stable row ids as the library's do: an updated row
keeps its ``_rowid`` and creation version and gets the new version as its last update;
so the change feed shows the pair ``update_preimage`` / ``update_postimage``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LINEAGE = ["id", "v", "_rowid", "_row_created_at_version", "_row_last_updated_at_version"]


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


def _lineage(uri: str) -> list[dict[str, Any]]:
    return s3ddb.dataset(uri).to_table(columns=LINEAGE).sort_by("id").to_pylist()


def test_spark_merges_and_updates_keep_row_ids_as_the_library_does(
    spark: Any, tmp_path: Path
) -> None:
    """The same merges and update, by Spark on one copy and by the library on its
    twin, give every row the same id and row versions; Spark's JVM writer, which
    cannot carry ids, is not used even when asked for."""
    import s3ddb.spark_ext

    uri, twin = str(tmp_path / "spark"), str(tmp_path / "library")
    s3ddb.write_dataset(
        _rows(list(range(12)), "a"), uri, max_rows_per_file=4, enable_stable_row_ids=True
    )
    s3ddb.dataset(uri).delete("id = 3")
    shutil.copytree(uri, twin)
    first = _rows([1, 5, 9, 20, 21], "m")
    second = _rows([0, 5, 11, 30], "n")
    plan = s3ddb.spark_ext.explain_merge_insert(spark, uri, spark.createDataFrame(first), "id")
    assert "Python tasks (pyarrow), because the dataset has stable row ids" in plan
    for source, writer in ((first, "auto"), (second, "jvm")):
        s3ddb.spark_ext.merge_insert(
            spark, uri, spark.createDataFrame(source.to_pandas()), "id", writer=writer
        )
        builder = s3ddb.dataset(twin).merge_insert("id")
        builder.when_matched_update_all().when_not_matched_insert_all().execute(source)
    s3ddb.spark_ext.update(spark, uri, {"v": "concat(v, '!')"}, where="id % 4 = 1")
    s3ddb.dataset(twin).update({"v": "concat(v, '!')"}, where="id % 4 = 1")
    got, wanted = _lineage(uri), _lineage(twin)
    assert got == wanted
    by_id = {r["id"]: r for r in got}
    # Row 5 was written at version 1, updated by both merges and the update.
    assert by_id[5]["v"] == "n5!"
    assert by_id[5]["_row_created_at_version"] == 1
    assert by_id[5]["_row_last_updated_at_version"] == s3ddb.dataset(uri).version
    feed = s3ddb.dataset(uri).changes(2, 3).to_pylist()  # the first Spark merge
    kinds = sorted((r["id"], r["_change_type"]) for r in feed)
    assert kinds == [
        (1, "update_postimage"), (1, "update_preimage"),
        (5, "update_postimage"), (5, "update_preimage"),
        (9, "update_postimage"), (9, "update_preimage"),
        (20, "insert"), (21, "insert"),
    ]  # fmt: skip
