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


def _two_appends(uri: str, rows: int) -> None:
    """Two appended fragments of ``rows`` rows each: ``id`` 0.., ``v`` ``t<id>``."""
    for part in range(2):
        ids = list(range(part * rows, (part + 1) * rows))
        s3ddb.write_dataset(
            pa.table({"id": pa.array(ids, pa.int64()), "v": [f"t{i}" for i in ids]}),
            uri,
            mode="append",
        )


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
    got = s3ddb.spark_ext.update(spark, uri, values, where, writer="jvm")
    assert got == expected and got["num_rows_updated"] > 0
    assert _rows(uri) == _rows(twin)
    new = [f for f in s3ddb.dataset(uri).get_fragments() if f.id not in before]
    assert new and _writers(uri, new) == {"parquet-mr"}, _writers(uri, new)
    assert _writers(
        twin, [f for f in s3ddb.dataset(twin).get_fragments() if f.id not in before]
    ) != {"parquet-mr"}


@pytest.mark.parametrize("writer", ["auto", "python"])
def test_python_tasks_write_the_rows_unless_spark_s_writer_is_asked_for(
    spark: Any, tmp_path: Path, writer: str
) -> None:
    """``writer="auto"`` (the default) and ``"python"`` leave the rows to Python tasks
    (pyarrow writes the new files), with the same result as Spark's writer; an unknown
    writer is refused before anything is written."""
    import s3ddb.spark_ext

    uri = str(tmp_path / "t")
    _two_appends(uri, 40)
    twin = str(tmp_path / "twin")
    shutil.copytree(uri, twin)
    before = {f.id for f in s3ddb.dataset(uri).get_fragments()}
    kwargs = {} if writer == "auto" else {"writer": writer}
    got = s3ddb.spark_ext.update(spark, uri, {"v": "upper(v)"}, "id % 3 = 0", **kwargs)
    jvm = s3ddb.spark_ext.update(spark, twin, {"v": "upper(v)"}, "id % 3 = 0", writer="jvm")
    assert got == jvm == {"num_rows_updated": 27}
    assert _rows(uri) == _rows(twin)
    # Each version records who wrote its rows, as a Spark merge does.
    assert s3ddb.dataset(uri).versions()[-1].metrics["update_writer"] == "python"
    assert s3ddb.dataset(twin).versions()[-1].metrics["update_writer"] == "jvm"
    assert s3ddb.dataset(uri).versions()[-1].metrics["api_operation"] == "update"
    new = [f for f in s3ddb.dataset(uri).get_fragments() if f.id not in before]
    assert new and "parquet-mr" not in _writers(uri, new), _writers(uri, new)
    with pytest.raises(s3ddb.errors.InvalidInputError, match="writer"):
        s3ddb.spark_ext.update(spark, uri, {"v": "v"}, writer="spark")  # type: ignore[arg-type]
    assert s3ddb.dataset(uri).version == 3


def test_a_value_that_does_not_fit_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    """A NULL set into a NOT NULL column is the library's SchemaMismatchError, raised
    before anything is committed; no data or deletion file is left."""
    import s3ddb.spark_ext

    uri = str(tmp_path / "strict")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string(), nullable=False)])
    s3ddb.write_dataset(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema), uri)
    files = {p.relative_to(uri) for p in Path(uri).rglob("*") if p.is_file()}
    with pytest.raises(s3ddb.SchemaMismatchError):
        s3ddb.spark_ext.update(
            spark, uri, {"v": "CASE WHEN id = 2 THEN NULL ELSE v END"}, writer="jvm"
        )
    assert s3ddb.dataset(uri).version == 1
    assert {p.relative_to(uri) for p in Path(uri).rglob("*") if p.is_file()} == files


def test_a_data_file_replaced_after_planning_fails_the_update(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark finds each target row's fragment by the file's planned size and name: a
    data file replaced between planning and Spark's read (the same rows, written
    again with another compression, so another size) is a DataFileError, and
    nothing is committed; read by name alone, the job took it for the planned one."""
    import s3ddb.spark_ext
    from s3ddb.spark_ext import merge_target

    uri = str(tmp_path / "t")
    _two_appends(uri, 50)
    victim = Path(uri, "data", s3ddb.dataset(uri).get_fragments()[1].files[0].path)
    real_plan = merge_target.plan_native_read

    def plan_then_replace(*args: Any, **kwargs: Any) -> Any:
        plan = real_plan(*args, **kwargs)
        table = pq.read_table(victim)
        size = victim.stat().st_size
        pq.write_table(table, victim, compression="none", store_schema=False)
        assert victim.stat().st_size != size
        return plan

    monkeypatch.setattr(merge_target, "plan_native_read", plan_then_replace)
    with pytest.raises(s3ddb.errors.DataFileError, match="not the file planned"):
        s3ddb.spark_ext.update(spark, uri, {"v": "upper(v)"}, "id % 2 = 0", writer="jvm")
    assert s3ddb.dataset(uri).version == 2


def test_removed_rows_gathered_in_buckets_give_every_position_back(spark: Any) -> None:
    """Spark gathers removed rows into bitmaps of 32,768 rows per fragment: each
    position comes back exactly once, at the edges of the buckets too, and no other."""
    import numpy as np

    from s3ddb.spark_ext.merge_tasks import (
        FRAGMENT,
        REMOVED_BUCKET,
        ROW,
        bucket_positions,
        removed_buckets,
    )

    rng = np.random.default_rng(3)
    wanted = {
        0: {0, 1, 32_767, 32_768, 65_535, 65_536, 1_000_000},
        7: set(rng.choice(200_000, 5_000, replace=False).tolist()),
    }
    pairs = [(fid, row) for fid, rows in wanted.items() for row in rows]
    df = spark.createDataFrame(pairs, f"{FRAGMENT} long, {ROW} long").repartition(3)
    got: dict[int, list[int]] = {}
    for kind, fid, data in removed_buckets(df).collect():
        assert kind == REMOVED_BUCKET
        got.setdefault(fid, []).extend(bucket_positions(bytes(data)).tolist())
    assert {fid: sorted(rows) for fid, rows in got.items()} == {
        fid: sorted(rows) for fid, rows in wanted.items()
    }
    with pytest.raises(ValueError, match="bucket of 12 bytes"):
        bucket_positions(b"\0" * 12)
