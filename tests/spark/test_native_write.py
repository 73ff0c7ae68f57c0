"""``s3ddb.spark_ext.write``: Spark's own Parquet writer, one s3ddb commit, on real
local Spark (datasets on local paths, which the JVM reaches; an s3+ddb dataset on the
local endpoint for the fallback)."""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb
from tests.support import storage

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# The Spark integration's fixtures: one SparkSession per module, a fresh s3+ddb URI.


def _df(spark: Any, start: int, n: int, partitions: int = 2) -> Any:
    return spark.range(start, start + n, numPartitions=partitions).selectExpr(
        "id",
        "CAST(id % 10 AS INT) AS k",
        "CONCAT('s', CAST(id AS STRING)) AS s",
        "CAST(id AS DOUBLE) / 4 AS x",
        "TIMESTAMP_SECONDS(id) AS t",
        "DATE_ADD(DATE'2026-01-01', CAST(id % 100 AS INT)) AS d",
    )


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _staging_left(uri: str) -> list[str]:
    """What is left under the shared ``_spark_staging/`` folder (which stays: a write
    starting meanwhile may be creating its own folder in it)."""
    staging = Path(uri) / "_spark_staging"
    return (
        sorted(str(p.relative_to(staging)) for p in staging.rglob("*")) if staging.exists() else []
    )


def test_native_writes_create_append_and_overwrite(spark: Any, local_uri: str) -> None:
    import s3ddb.spark_ext

    first = _df(spark, 0, 1000)
    s3ddb.spark_ext.write(first, local_uri, mode="append")
    second = _df(spark, 1000, 500)
    committed = s3ddb.spark_ext.write(second, local_uri, mode="append", max_rows_per_file=100)
    assert committed is not None and committed.version == 2
    ds = s3ddb.dataset(local_uri)
    assert [v.operation for v in ds.versions()] == ["Overwrite", "Append"], "one commit each"
    expected = _rows(first.toArrow()) + _rows(second.toArrow())
    assert _rows(ds.to_table()) == sorted(expected, key=lambda r: r["id"])
    # The Python data source reads the same rows, and filters prune by the footers' bounds.
    assert _rows(spark.read.format("s3ddb").load(local_uri).toArrow()) == _rows(ds.to_table())
    assert ds.to_table(filter="id = 1234").column("s").to_pylist() == ["s1234"]
    fragments = ds.get_fragments()
    # Spark's files, one fragment each: 2 tasks of 500 rows, then 2 x (100 + 100 + 50).
    assert sorted(f.physical_rows for f in fragments) == [50, 50] + [100] * 4 + [500, 500]
    assert all(f.stats and f.stats[0].columns for f in fragments), "id bounds recorded"
    # Files are Spark's, tagged with field ids, named by s3ddb; nothing else is left.
    data_file = fragments[0].files[0]
    written = pq.read_schema(Path(local_uri) / "data" / data_file.path)
    assert written.field("id").metadata[b"PARQUET:field_id"] == b"0"
    assert b"org.apache.spark.version" in (written.metadata or {})
    assert (Path(local_uri) / "_spark_staging").is_dir(), "the shared parent stays"
    assert _staging_left(local_uri) == [], "the write's own folder is gone"
    assert storage.orphans(local_uri) == set()
    # Timestamps went as microseconds, the session's own setting is back.
    assert written.field("t").type == pa.timestamp("us", tz="UTC")
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "INT96"

    s3ddb.spark_ext.write(spark.range(3).selectExpr("id", "'new' AS label"), local_uri, "overwrite")
    ds = s3ddb.dataset(local_uri)
    assert ds.schema.names == ["id", "label"] and ds.count_rows() == 3
    assert s3ddb.dataset(local_uri, 2).count_rows() == 1500, "the old version is still there"


def test_an_append_with_other_columns_is_refused_before_spark_writes(
    spark: Any, local_uri: str
) -> None:
    import s3ddb.spark_ext

    s3ddb.spark_ext.write(_df(spark, 0, 10), local_uri)
    before = storage.objects(local_uri)
    with pytest.raises(s3ddb.SchemaMismatchError, match="unexpected columns"):
        s3ddb.spark_ext.write(spark.range(3).selectExpr("id", "'x' AS other"), local_uri)
    assert storage.objects(local_uri) == before


def test_a_failed_job_commits_nothing_and_leaves_no_file(spark: Any, local_uri: str) -> None:
    import s3ddb.spark_ext

    s3ddb.spark_ext.write(_df(spark, 0, 100), local_uri)
    before = storage.objects(local_uri)

    def fail_midway(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        for i, batch in enumerate(batches):
            if i == 2 and TaskContext.get().partitionId() == 1:
                raise RuntimeError("task 1 fails after writing rows")
            yield batch

    df = _df(spark, 100, 2000)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, "100")
    try:
        with pytest.raises(Exception, match="task 1 fails after writing rows"):
            s3ddb.spark_ext.write(df.mapInArrow(fail_midway, df.schema), local_uri)
    finally:
        spark.conf.unset(key)
    assert storage.objects(local_uri) == before
    assert s3ddb.dataset(local_uri).version == 1


def test_a_writer_in_another_process_commits_meanwhile(spark: Any, local_uri: str) -> None:
    """While Spark writes, another process appends (started from inside a task): the
    native write, read at version 1, rebases over it; no row is lost."""
    import s3ddb.spark_ext

    s3ddb.spark_ext.write(spark.range(10).selectExpr("id", "'first' AS who"), local_uri)
    code = (
        "import sys, pyarrow as pa, s3ddb; "
        "s3ddb.write_dataset(pa.table({'id': pa.array(range(100, 110), pa.int64()), "
        "'who': ['other'] * 10}), sys.argv[1], mode='append')"
    )

    def append_meanwhile(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import subprocess as sp
        import sys as system

        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 0:
            sp.run([system.executable, "-c", code, local_uri], check=True)
        yield from batches

    df = spark.range(10, 20, numPartitions=2).selectExpr("id", "'spark' AS who")
    committed = s3ddb.spark_ext.write(df.mapInArrow(append_meanwhile, df.schema), local_uri)
    assert committed is not None and committed.version == 3
    ds = s3ddb.dataset(local_uri)
    assert [v.operation for v in ds.versions()] == ["Overwrite", "Append", "Append"]
    rows = ds.to_table().to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(20)) + list(range(100, 110))
    assert {r["who"] for r in rows if 10 <= r["id"] < 20} == {"spark"}


def test_a_store_the_jvm_cannot_reach_falls_back_to_the_python_writer(
    spark: Any, uri: str, opts: dict, caplog: pytest.LogCaptureFixture
) -> None:
    import s3ddb.spark_ext
    from s3ddb.spark_ext import native_write

    native_write._fallback_said = False
    with caplog.at_level(logging.WARNING, logger="s3ddb.spark_ext.native_write"):
        s3ddb.spark_ext.write(_df(spark, 0, 20), uri, storage_options=opts)
        first = {f.id for f in s3ddb.dataset(uri, storage_options=opts).get_fragments()}
        s3ddb.spark_ext.write(_df(spark, 20, 20), uri, storage_options=opts, max_rows_per_file=5)
    said = [r for r in caplog.records if "writing through the Python data source" in r.getMessage()]
    assert len(said) == 1, "said once"
    ds = s3ddb.dataset(uri, storage_options=opts)
    assert sorted(ds.to_table().column("id").to_pylist()) == list(range(40))
    # The fallback keeps the cap on rows per file.
    second = [f.physical_rows for f in ds.get_fragments() if f.id not in first]
    assert sum(second) == 20 and max(second) <= 5, second


def test_nested_columns_and_pruning_by_footer_bounds(spark: Any, local_uri: str) -> None:
    import s3ddb.spark_ext

    df = spark.range(0, 400, numPartitions=4).selectExpr(
        "named_struct('a', id, 'b', CONCAT('x', CAST(id AS STRING))) AS nested",
        "ARRAY(id, id + 1) AS pair",
        "id",
    )
    s3ddb.spark_ext.write(df, local_uri)
    ds = s3ddb.dataset(local_uri)
    assert _rows(ds.to_table()) == _rows(df.toArrow())
    # Each of the 4 files holds 100 consecutive ids: a lookup keeps one fragment.
    assert ds.to_table(filter="id = 250").to_pylist() == [
        {"nested": {"a": 250, "b": "x250"}, "pair": [250, 251], "id": 250}
    ]
    bounds = sorted((c.min, c.max) for f in ds.get_fragments() for c in f.stats[0].columns)
    assert bounds == [(0, 99), (100, 199), (200, 299), (300, 399)]


def test_task_files_join_the_write_only_when_the_job_commits(
    spark: Any, local_uri: str, tmp_path: Path
) -> None:
    """On a cluster set to FileOutputCommitter's algorithm 2 (task commits move files
    into the folder: a retried task's half-committed attempt could leave rows twice),
    the write still uses algorithm 1: while task 1 runs, task 0's committed files are
    in the job's _temporary/ folder, not yet in the staging folder."""
    import s3ddb.spark_ext

    seen = tmp_path / "seen"

    def watch_task_0(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import glob
        import time as clock

        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1:
            deadline = clock.monotonic() + 120
            while clock.monotonic() < deadline:
                found = [
                    p
                    for p in glob.glob(f"{local_uri}/_spark_staging/*/**/part-*", recursive=True)
                    if "/_temporary/0/_temporary/" not in p and not p.endswith(".crc")
                ]
                if found:
                    seen.write_text(found[0].split("/_spark_staging/", 1)[1].split("/", 1)[1])
                    break
                clock.sleep(0.1)
        yield from batches

    key = "mapreduce.fileoutputcommitter.algorithm.version"
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set(key, "2")
    try:
        df = spark.range(0, 100, numPartitions=2).selectExpr("id")
        s3ddb.spark_ext.write(df.mapInArrow(watch_task_0, df.schema), local_uri)
    finally:
        hadoop.unset(key)
    assert seen.read_text().startswith("_temporary/0/task_"), seen.read_text()
    ds = s3ddb.dataset(local_uri)
    assert sorted(ds.to_table().column("id").to_pylist()) == list(range(100))
    assert storage.orphans(local_uri) == set()


def test_a_commit_that_definitely_failed_leaves_no_file(
    spark: Any, local_uri: str, tmp_path: Path
) -> None:
    """An overwrite with another schema lands while Spark writes (from inside a task):
    the native append, planned on version 1, cannot rebase over it and fails; its
    moved files go, and nothing of it is left on the driver either."""
    import tempfile

    import s3ddb.spark_ext

    s3ddb.spark_ext.write(spark.range(10).selectExpr("id"), local_uri)
    write_id = tmp_path / "write_id"

    def overwrite_meanwhile(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import s3ddb as lib

        # The staging folder is named after the write.
        write_id.write_text(os.listdir(os.path.join(local_uri, "_spark_staging"))[0])
        lib.write_dataset(pa.table({"other": ["o"]}), local_uri, mode="overwrite")
        yield from batches

    df = spark.range(100, 120, numPartitions=1).selectExpr("id")
    with pytest.raises(s3ddb.S3DDBError):
        s3ddb.spark_ext.write(df.mapInArrow(overwrite_meanwhile, df.schema), local_uri)
    ds = s3ddb.dataset(local_uri)
    assert ds.version == 2 and ds.to_table().to_pylist() == [{"other": "o"}]
    assert storage.orphans(local_uri) == set(), "the moved files are gone"
    assert _staging_left(local_uri) == []
    outcome = Path(tempfile.gettempdir()) / "s3ddb-spark-writes" / write_id.read_text()
    assert not outcome.exists(), "the driver's record of the commit's outcome is gone"


def _timestamp_dataset(uri: str) -> None:
    """id NOT NULL int64, ts timestamp[s, UTC]: types finer in Spark than here."""
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("s", tz="UTC"))]
    )
    ts = pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("s", tz="UTC"))
    s3ddb.write_dataset(pa.table({"id": [1], "ts": ts}, schema=schema), uri)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # Half a second more than a timestamp[s] column holds: committed, it made every
        # read of the dataset fail.
        (
            (2, dt.datetime(2024, 1, 2, 0, 0, 0, 500000, tzinfo=dt.timezone.utc)),
            "finer part|do not fit",
        ),
        ((None, dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc)), "has nulls but is not nullable"),
    ],
)
def test_values_that_do_not_fit_the_dataset_are_refused_before_the_commit(
    spark: Any, tmp_path: Path, row: tuple[Any, ...], message: str
) -> None:
    """The native append refuses what the Python data source refuses, with the same
    error, committing nothing and leaving no file; values that fit still go."""
    import s3ddb.spark_ext

    schema = "id long, ts timestamp"  # both nullable in Spark
    bad = spark.createDataFrame([row], schema)
    for name, append in (
        ("native", lambda df, uri: s3ddb.spark_ext.write(df, uri, mode="append")),
        ("python", lambda df, uri: df.write.format("s3ddb").mode("append").save(uri)),
    ):
        uri = str(tmp_path / name)
        _timestamp_dataset(uri)
        before = storage.objects(uri)
        with pytest.raises(Exception, match=message) as caught:
            append(bad, uri)
        if name == "native":
            assert isinstance(caught.value, s3ddb.SchemaMismatchError)
        assert storage.objects(uri) == before, "nothing committed, no file left"
        assert s3ddb.dataset(uri).to_table().num_rows == 1
    uri = str(tmp_path / "native")
    good = dt.datetime(2024, 1, 3, 4, 5, 6, tzinfo=dt.timezone.utc)
    committed = s3ddb.spark_ext.write(spark.createDataFrame([(3, good)], schema), uri)
    assert committed is not None and committed.version == 2
    assert s3ddb.dataset(uri).to_table().column("ts").to_pylist()[1] == good
    assert _staging_left(uri) == []


def test_a_nested_column_finer_than_the_dataset_goes_through_the_python_source(
    spark: Any, local_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A struct with a timestamp[s] child (Spark's has microseconds): a check the
    native write does not express in Spark; the Python data source checks each value."""
    import s3ddb.spark_ext

    child = pa.struct([pa.field("t", pa.timestamp("s", tz="UTC"))])
    first = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    s3ddb.write_dataset(pa.table({"s": pa.array([{"t": first}], child)}), local_uri)
    finer = dt.datetime(2024, 1, 2, 0, 0, 0, 500000, tzinfo=dt.timezone.utc)
    finer_df = spark.createDataFrame([((finer,),)], "s struct<t: timestamp>")
    with (
        caplog.at_level(logging.WARNING, logger="s3ddb.spark_ext.native_write"),
        pytest.raises(Exception, match="do not fit"),
    ):
        s3ddb.spark_ext.write(finer_df, local_uri)
    assert any("Python data source" in r.getMessage() for r in caplog.records)
    assert s3ddb.dataset(local_uri).to_table().column("s").to_pylist() == [{"t": first}]
    second = dt.datetime(2024, 1, 3, tzinfo=dt.timezone.utc)
    s3ddb.spark_ext.write(
        spark.createDataFrame([((second,),)], "s struct<t: timestamp>"), local_uri
    )
    assert s3ddb.dataset(local_uri).to_table().column("s").to_pylist() == [
        {"t": first},
        {"t": second},
    ]


def test_a_dotted_column_beside_a_struct_keeps_its_own_bounds(spark: Any, local_uri: str) -> None:
    """A top-level column "a.b" and the child b of a struct a have the same dotted
    leaf path: the footer bounds of one were taken for the other, and a filter on
    "a.b" then skipped the file holding its rows."""
    import pyarrow.compute as pc

    import s3ddb.spark_ext

    schema = "`a.b` long, a struct<b: long>"
    df = spark.createDataFrame([(1, (100,)), (2, (200,)), (3, (300,))], schema).coalesce(1)
    s3ddb.spark_ext.write(df, local_uri)
    ds = s3ddb.dataset(local_uri)
    (column,) = ds.get_fragments()[0].stats[0].columns
    assert (column.min, column.max) == (1, 3)
    assert ds.to_table(filter=pc.field("a.b") == 2).column("a.b").to_pylist() == [2]


def test_a_backtick_in_a_column_name(spark: Any, local_uri: str) -> None:
    import s3ddb.spark_ext

    df = spark.createDataFrame([(1, 2)], "`we``ird` long, id long")
    s3ddb.spark_ext.write(df, local_uri)
    assert s3ddb.dataset(local_uri).to_table().to_pylist() == [{"we`ird": 1, "id": 2}]


def test_a_failure_removing_the_staging_folder_does_not_stop_the_commit(
    spark: Any, local_uri: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The files are moved into data/ before the folder is removed: an error there
    must not leave them unreferenced; the write commits and says what is left."""
    import s3ddb.spark_ext

    monkeypatch.setenv("S3DDB_FAILPOINTS", "native_write.remove_staging=raise")
    with caplog.at_level(logging.WARNING, logger="s3ddb.spark_ext.native_write"):
        committed = s3ddb.spark_ext.write(spark.range(5).selectExpr("id"), local_uri)
    assert committed is not None and committed.version == 1
    assert sorted(s3ddb.dataset(local_uri).to_table().column("id").to_pylist()) == list(range(5))
    assert any("could not remove" in r.getMessage() for r in caplog.records)
    left = storage.orphans(local_uri)
    assert left and all(p.startswith("_spark_staging/") for p in left), left


def test_an_overwrite_whose_files_the_driver_does_not_all_see_is_refused(
    spark: Any, local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster whose executors write a file:// path to their own disks, the
    driver's listing of the staging folder misses files: committed, an overwrite would
    replace the dataset with part of the rows. One file goes from the driver's view
    (deleted before it lists the folder, as a disk it cannot see); Spark's own count
    of the rows it wrote tells, and nothing is committed."""
    import s3ddb.spark_ext
    from s3ddb.spark_ext import native_write

    s3ddb.spark_ext.write(spark.range(10).selectExpr("id"), local_uri)
    before = storage.objects(local_uri)
    listed = native_write._collect

    def on_another_disk(store: Any, staging: str, fields: Any) -> Any:
        (Path(local_uri) / staging / sorted(
            p.name for p in (Path(local_uri) / staging).glob("part-*.parquet")
        )[0]).unlink()  # fmt: skip
        return listed(store, staging, fields)

    monkeypatch.setattr(native_write, "_collect", on_another_disk)
    df = spark.range(100, 200, numPartitions=2).selectExpr("id")
    with pytest.raises(s3ddb.DataFileError, match=r"Spark wrote 100 row.*finds 50"):
        s3ddb.spark_ext.write(df, local_uri, mode="overwrite")
    assert storage.objects(local_uri) == before
    assert sorted(s3ddb.dataset(local_uri).to_table().column("id").to_pylist()) == list(range(10))
    monkeypatch.setattr(native_write, "_collect", listed)
    assert s3ddb.spark_ext.write(df, local_uri, mode="overwrite").count_rows() == 100


@pytest.mark.parametrize(
    ("unit", "bad", "message"),
    [
        ("ms", dt.datetime(2024, 1, 2, 0, 0, 0, 1500, tzinfo=dt.timezone.utc), "finer part"),
        ("ns", dt.datetime(2300, 1, 1, tzinfo=dt.timezone.utc), "out of its range"),
    ],
)
def test_timestamps_a_coarser_or_narrower_column_cannot_hold_are_refused(
    spark: Any, local_uri: str, unit: str, bad: dt.datetime, message: str
) -> None:
    import s3ddb.spark_ext

    t = pa.timestamp(unit, tz="UTC")
    first = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    s3ddb.write_dataset(pa.table({"ts": pa.array([first], t)}), local_uri)
    before = storage.objects(local_uri)
    with pytest.raises(s3ddb.SchemaMismatchError, match=message):
        s3ddb.spark_ext.write(spark.createDataFrame([(bad,)], "ts timestamp"), local_uri)
    assert storage.objects(local_uri) == before
    fits = dt.datetime(2024, 1, 2, 0, 0, 0, 2000, tzinfo=dt.timezone.utc)
    s3ddb.spark_ext.write(spark.createDataFrame([(fits,)], "ts timestamp"), local_uri)
    assert s3ddb.dataset(local_uri).to_table().column("ts").to_pylist() == [first, fits]
