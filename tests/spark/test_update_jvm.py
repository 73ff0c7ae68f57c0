"""Spark's ``update`` with its SQL evaluated by Spark and its rows written by Spark's
Parquet writer gives what ``Dataset.update`` gives, and refuses what it refuses."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _rows(uri: str) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in s3ddb.dataset(uri).to_table().to_pylist())


def _writers(uri: str, fragments: Any) -> set[str]:
    """The Parquet writers (``created_by``) of the fragments' data files."""
    return {
        pq.ParquetFile(Path(uri, "data", f.files[0].path)).metadata.created_by.split(" ")[0]
        for f in fragments
    }


def test_an_update_equals_the_library_update_and_spark_writes_its_rows(
    spark: Any, tmp_path: Path
) -> None:
    import s3ddb.spark_ext

    uri = str(tmp_path / "t")
    for part in range(3):
        ids = list(range(part * 30, (part + 1) * 30))
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "v": [f"t{i}" for i in ids],
                "n": pa.array([None if i % 11 == 0 else i for i in ids], pa.int32()),
            }
        )
        s3ddb.write_dataset(table, uri, mode="append")
    ds = s3ddb.dataset(uri)
    ds.delete("id % 7 = 0")
    ds.alter_columns({"path": "v", "name": "w"})
    twin = str(tmp_path / "twin")
    shutil.copytree(uri, twin)
    values = {"w": "upper(w)", "n": "n + 100"}
    where = "n % 3 = 0 OR id > 80"
    expected = s3ddb.dataset(twin).update(values, where, rewrite="rows")
    before = {f.id for f in s3ddb.dataset(uri).get_fragments()}
    got = s3ddb.spark_ext.update(spark, uri, values, where)
    assert got == expected and got["num_rows_updated"] > 0
    assert _rows(uri) == _rows(twin)
    new = [f for f in s3ddb.dataset(uri).get_fragments() if f.id not in before]
    assert new and _writers(uri, new) == {"parquet-mr"}, _writers(uri, new)
    assert _writers(
        twin, [f for f in s3ddb.dataset(twin).get_fragments() if f.id not in before]
    ) != {"parquet-mr"}


def test_a_value_that_does_not_fit_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    """A NULL set into a NOT NULL column is the library's SchemaMismatchError, raised
    before anything is committed; no data or deletion file is left."""
    import s3ddb.spark_ext

    uri = str(tmp_path / "strict")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string(), nullable=False)])
    s3ddb.write_dataset(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema), uri)
    files = {p.relative_to(uri) for p in Path(uri).rglob("*") if p.is_file()}
    with pytest.raises(s3ddb.SchemaMismatchError):
        s3ddb.spark_ext.update(spark, uri, {"v": "CASE WHEN id = 2 THEN NULL ELSE v END"})
    assert s3ddb.dataset(uri).version == 1
    assert {p.relative_to(uri) for p in Path(uri).rglob("*") if p.is_file()} == files
