"""The Spark integration, with real local Spark on the local endpoint (S3 without
conditional writes + DynamoDB). One SparkSession serves the module."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support import storage

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _df(spark: Any, start: int, n: int, partitions: int = 2) -> Any:
    return spark.range(start, start + n, numPartitions=partitions).selectExpr(
        "id",
        "CAST(id % 10 AS INT) AS k",
        "CONCAT('s', CAST(id AS STRING)) AS s",
        "CAST(id AS DOUBLE) / 4 AS x",
    )


def _read(spark: Any, uri: str, opts: dict[str, str], **pin: Any) -> Any:
    reader = spark.read.format("s3ddb").options(**opts)
    for key, value in pin.items():
        reader = reader.option(key, value)
    return reader.load(uri)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _spark_rows(df: Any) -> list[dict[str, Any]]:
    return _rows(df.toArrow())


def test_append_creates_then_appends_and_reads_back(spark: Any, uri: str, opts: dict) -> None:
    _df(spark, 0, 100).write.format("s3ddb").mode("append").options(**opts).save(uri)
    _df(spark, 100, 50).write.format("s3ddb").mode("append").options(**opts).save(uri)
    ds = s3ddb.dataset(uri, storage_options=opts)
    assert ds.version == 2
    assert ds.count_rows() == 150
    assert [v.operation for v in ds.versions()] == ["Overwrite", "Append"]
    # Spark's non-nullable id stays NOT NULL in the dataset and when read back.
    assert not ds.schema.field("id").nullable
    df = _read(spark, uri, opts)
    assert not df.schema["id"].nullable
    assert _spark_rows(df) == _rows(ds.to_table())
    # Each task wrote its own fragment; ids were assigned at commit.
    assert len(ds.get_fragments()) == 4


def test_overwrite_replaces_rows_and_schema(spark: Any, uri: str, opts: dict) -> None:
    _df(spark, 0, 30).write.format("s3ddb").mode("append").options(**opts).save(uri)
    new = spark.range(5).selectExpr("id", "'new' AS label")
    new.write.format("s3ddb").mode("overwrite").options(**opts).save(uri)
    ds = s3ddb.dataset(uri, storage_options=opts)
    assert ds.version == 2
    assert ds.schema.names == ["id", "label"]
    assert _spark_rows(_read(spark, uri, opts)) == [{"id": i, "label": "new"} for i in range(5)]
    # The old version is still there to read.
    assert _read(spark, uri, opts, version=1).count() == 30


def test_append_with_other_columns_is_refused_before_any_file_is_written(
    spark: Any, uri: str, opts: dict
) -> None:
    _df(spark, 0, 10).write.format("s3ddb").mode("append").options(**opts).save(uri)
    before = storage.objects(uri, opts)
    wrong = spark.range(3).selectExpr("id", "'x' AS other")
    with pytest.raises(Exception, match="unexpected columns"):
        wrong.write.format("s3ddb").mode("append").options(**opts).save(uri)
    assert storage.objects(uri, opts) == before
    assert s3ddb.dataset(uri, storage_options=opts).version == 1


def test_failed_task_deletes_the_fragments_it_wrote(spark: Any, uri: str, opts: dict) -> None:
    _df(spark, 0, 10).write.format("s3ddb").mode("append").options(**opts).save(uri)
    before = storage.objects(uri, opts)
    # One task gets batches of 5 rows and writes a fragment per 5 rows; the NULL in
    # its last batch (id is NOT NULL) fails it after it has written three fragments.
    rows = [(1000 + i, i % 10, "a", 1.0) for i in range(15)] + [(None, 1, "b", 2.0)]
    bad = spark.createDataFrame(rows, "id bigint, k int, s string, x double").coalesce(1)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, "5")
    try:
        with pytest.raises(Exception, match="has nulls but is not nullable"):
            bad.write.format("s3ddb").mode("append").options(maxRowsPerFile="5", **opts).save(uri)
    finally:
        spark.conf.unset(key)
    assert storage.objects(uri, opts) == before
    assert s3ddb.dataset(uri, storage_options=opts).version == 1


def test_commit_that_definitely_failed_leaves_no_files(spark: Any, uri: str, opts: dict) -> None:
    """An overwrite lands while the Spark append runs (from inside its task): the
    append, planned on version 1, cannot rebase over it, fails, and its files go."""
    _df(spark, 0, 10).write.format("s3ddb").mode("append").options(**opts).save(uri)

    def overwrite_meanwhile(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import s3ddb as lib

        table = pa.table({"id": pa.array([7], pa.int64()), "k": pa.array([7], pa.int32()),
                          "s": ["o"], "x": [7.0]})  # fmt: skip
        lib.write_dataset(table, uri, mode="overwrite", storage_options=opts)
        yield from batches

    df = _df(spark, 100, 20, partitions=1)
    racing = df.mapInArrow(overwrite_meanwhile, df.schema)
    with pytest.raises(Exception, match="Overwrite"):
        racing.write.format("s3ddb").mode("append").options(**opts).save(uri)
    ds = s3ddb.dataset(uri, storage_options=opts)
    assert ds.version == 2 and ds.to_table().column("id").to_pylist() == [7]
    assert storage.orphans(uri, opts) == set(), "the failed append's files are gone"


def test_time_travel_by_version_tag_and_timestamp(spark: Any, uri: str, opts: dict) -> None:
    _df(spark, 0, 10).write.format("s3ddb").mode("append").options(**opts).save(uri)
    ds = s3ddb.dataset(uri, storage_options=opts)
    ds.tags.create("first", 1)
    time.sleep(0.05)
    between = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    _df(spark, 10, 5).write.format("s3ddb").mode("append").options(**opts).save(uri)
    ds.delete("id < 3")
    v1 = _rows(s3ddb.dataset(uri, 1, storage_options=opts).to_table())
    assert len(v1) == 10
    assert _spark_rows(_read(spark, uri, opts, version=1)) == v1
    assert _spark_rows(_read(spark, uri, opts, tag="first")) == v1
    assert _spark_rows(_read(spark, uri, opts, timestamp=between.isoformat())) == v1
    latest = _rows(s3ddb.dataset(uri, storage_options=opts).to_table())
    assert len(latest) == 12
    assert _spark_rows(_read(spark, uri, opts)) == latest
    with pytest.raises(Exception, match="version 9 of"):
        _read(spark, uri, opts, version=9).count()
    with pytest.raises(Exception, match="give one of version, tag, timestamp"):
        _read(spark, uri, opts, version=1, tag="first").count()


def test_deletion_files_are_applied_on_read(spark: Any, uri: str, opts: dict) -> None:
    _df(spark, 0, 200).write.format("s3ddb").mode("append").options(**opts).save(uri)
    ds = s3ddb.dataset(uri, storage_options=opts)
    ds.delete("k = 3 OR id >= 190")
    assert any(f.deletion_file is not None for f in ds.get_fragments())
    got = _spark_rows(_read(spark, uri, opts))
    assert got == _rows(ds.to_table())
    assert len(got) == 200 - 20 - 10 + 1  # id 193 has k = 3
    assert not any(r["k"] == 3 for r in got)


@pytest.mark.parametrize("pushdown", [True, False])
def test_filters_give_the_rows_the_python_api_gives(
    spark: Any, uri: str, opts: dict, pushdown: bool
) -> None:
    _df(spark, 0, 300, partitions=3).write.format("s3ddb").mode("append").options(
        maxRowsPerFile="40", **opts
    ).save(uri)
    ds = s3ddb.dataset(uri, storage_options=opts)
    ds.delete("id % 7 = 0")
    key = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(key, str(pushdown).lower())
    try:
        df = _read(spark, uri, opts, pushFilters=str(pushdown).lower())
        cases = {
            "k = 3": "k = 3",
            "id > 250": "id > 250",
            "id >= 10 AND id < 20": "id >= 10 AND id < 20",
            "s = 's42'": "s = 's42'",
            "k IN (1, 2)": "k IN (1, 2)",
            "s LIKE 's1%'": "s LIKE 's1%'",
            "x > 70.0": "x > 70.0",  # a double: Spark evaluates it itself
            "k IS NULL": "k IS NULL",
            "NOT (k = 4)": "k != 4",
        }
        for spark_filter, python_filter in cases.items():
            expected = _rows(ds.to_table(filter=python_filter))
            assert _spark_rows(df.filter(spark_filter)) == expected, spark_filter
    finally:
        spark.conf.set(key, "true")


def test_streaming_sink_is_exactly_once_across_a_restart(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def add_file(i: int) -> None:
        lines = [json.dumps({"id": i * 100 + j, "v": f"f{i}"}) for j in range(5)]
        (source / f"part-{i}.json").write_text("\n".join(lines) + "\n")

    def run() -> None:
        query = (
            spark.readStream.schema("id BIGINT, v STRING")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .writeStream.format("s3ddb")
            .options(**opts)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(uri)
        )
        query.awaitTermination()

    add_file(0)
    add_file(1)
    run()
    ds = s3ddb.dataset(uri, storage_options=opts)
    assert (ds.version, ds.count_rows()) == (2, 10)
    # Forget that the last micro-batch was committed, as a crash between the sink's
    # commit and Spark's checkpoint would: the restarted query runs it again.
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    add_file(2)
    run()
    ds = s3ddb.dataset(uri, storage_options=opts)
    ids = sorted(ds.to_table().column("id").to_pylist())
    assert ids == sorted(i * 100 + j for i in range(3) for j in range(5)), "no duplicates"
    assert ds.version == 3, "the replayed batch committed nothing"
    assert storage.orphans(uri, opts) == set(), "the replay's files were deleted"


def test_versions_sql_function(spark: Any, uri: str, opts: dict) -> None:
    _df(spark, 0, 10).write.format("s3ddb").mode("append").options(**opts).save(uri)
    s3ddb.dataset(uri, storage_options=opts).delete("id < 2")
    options = ", ".join(f"'{k}', '{v}'" for k, v in opts.items())
    rows = spark.sql(f"SELECT * FROM s3ddb_versions('{uri}', map({options}))").collect()
    assert [(r.version, r.operation) for r in rows] == [(1, "Overwrite"), (2, "Delete")]
    assert spark.sql(f"SELECT * FROM s3ddb_verify('{uri}', map({options}))").collect() == []
    # A version a crashed writer left staged is a problem s3ddb_verify reports.
    from s3ddb.io import ObjectStore

    store = ObjectStore(uri, opts)
    final = next(p.path for p in store.list("_versions/") if p.path.endswith(".manifest"))
    store.copy(final, f"{final}-{'0' * 32}")
    verify = f"SELECT * FROM s3ddb_verify('{uri}', map({options})"
    assert spark.sql(verify + ")").collect() == [], "young: may be a commit in progress"
    [problem] = spark.sql(verify + ", 0)").collect()
    assert problem.kind == "orphaned_staged_manifest" and "sync" in problem.fix


def test_data_source_registers_itself_in_a_plain_session(spark: Any, uri: str, opts: dict) -> None:
    _df(spark, 0, 10).write.format("s3ddb").mode("append").options(**opts).save(uri)
    # A new session that s3ddb.spark_ext never touched: Spark finds pyspark_s3ddb.
    plain = spark.newSession()
    assert plain.read.format("s3ddb").options(**opts).load(uri).count() == 10


# --- distributed row changes against the single-process result ----------------------


def _twins(spark: Any, aws: Any, opts: dict) -> tuple[str, str]:
    """Two datasets with the same rows and fragments."""
    uris = []
    for _ in range(2):
        uri = f"s3+ddb://{TEST_BUCKET}/twin-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
        for start in (0, 100, 200):
            s3ddb.write_dataset(
                _df(spark, start, 100).toArrow(), uri, mode="append", storage_options=opts
            )
        uris.append(uri)
    return uris[0], uris[1]


def test_distributed_delete_equals_single_process(spark: Any, aws: Any, opts: dict) -> None:
    import s3ddb.spark_ext

    local, dist = _twins(spark, aws, opts)
    expected = s3ddb.dataset(local, storage_options=opts).delete("k = 3 OR id > 280")
    got = s3ddb.spark_ext.delete(spark, dist, "k = 3 OR id > 280", storage_options=opts)
    assert got == expected and got["num_deleted_rows"] > 0
    a = s3ddb.dataset(local, storage_options=opts)
    b = s3ddb.dataset(dist, storage_options=opts)
    assert _rows(b.to_table()) == _rows(a.to_table())
    assert b.version == a.version == 4


@pytest.mark.parametrize("rewrite", ["rows", "columns"])
def test_distributed_update_equals_single_process(
    spark: Any, aws: Any, opts: dict, rewrite: str
) -> None:
    import s3ddb.spark_ext

    local, dist = _twins(spark, aws, opts)
    values = {"s": "'changed'", "x": "x * 2"}
    expected = s3ddb.dataset(local, storage_options=opts).update(
        values,
        "k < 5",
        rewrite=rewrite,  # type: ignore[arg-type]
    )
    got = s3ddb.spark_ext.update(
        spark,
        dist,
        values,
        "k < 5",
        rewrite=rewrite,
        storage_options=opts,  # type: ignore[arg-type]
    )
    assert got == expected == {"num_rows_updated": 150}
    a = s3ddb.dataset(local, storage_options=opts)
    b = s3ddb.dataset(dist, storage_options=opts)
    assert _rows(b.to_table()) == _rows(a.to_table())
    assert storage.orphans(dist, opts) == set()


def test_distributed_merge_insert_equals_single_process(spark: Any, aws: Any, opts: dict) -> None:
    import s3ddb.spark_ext

    local, dist = _twins(spark, aws, opts)
    source = spark.range(250, 350, numPartitions=2).selectExpr(
        "id", "CAST(id % 10 AS INT) AS k", "'merged' AS s", "CAST(-1 AS DOUBLE) AS x"
    )
    expected = (
        s3ddb.dataset(local, storage_options=opts)
        .merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(source.toArrow())
    )
    got = s3ddb.spark_ext.merge_insert(spark, dist, source, "id", storage_options=opts)
    assert (
        got == expected == {"num_inserted_rows": 50, "num_updated_rows": 50, "num_deleted_rows": 0}
    )
    a = s3ddb.dataset(local, storage_options=opts).to_table()
    b = s3ddb.dataset(dist, storage_options=opts).to_table()
    assert _rows(b) == _rows(a)
    assert len(set(b.column("id").to_pylist())) == b.num_rows == 350


def test_distributed_merge_insert_keeps_the_key_check(spark: Any, uri: str, opts: dict) -> None:
    import s3ddb.spark_ext

    _df(spark, 0, 10).write.format("s3ddb").mode("append").options(**opts).save(uri)
    twice = spark.createDataFrame(
        [(1, 1, "a", 1.0), (1, 1, "b", 2.0)], "id bigint, k int, s string, x double"
    )
    with pytest.raises(s3ddb.InvalidInputError, match="more than one row for key"):
        s3ddb.spark_ext.merge_insert(spark, uri, twice, "id", storage_options=opts)
    assert s3ddb.dataset(uri, storage_options=opts).version == 1


def test_distributed_compaction_equals_single_process(spark: Any, aws: Any, opts: dict) -> None:
    import s3ddb.spark_ext

    local, dist = _twins(spark, aws, opts)
    for uri in (local, dist):
        s3ddb.dataset(uri, storage_options=opts).delete("k = 0")
    expected = s3ddb.dataset(local, storage_options=opts).optimize.compact_files(
        target_rows_per_fragment=150
    )
    got = s3ddb.spark_ext.compact(spark, dist, target_rows_per_fragment=150, storage_options=opts)
    assert got == expected and got.fragments_removed == 3
    a = s3ddb.dataset(local, storage_options=opts)
    b = s3ddb.dataset(dist, storage_options=opts)
    assert b.to_table().to_pylist() == a.to_table().to_pylist(), "rows and order kept"
    assert [f.physical_rows for f in b.get_fragments()] == [
        f.physical_rows for f in a.get_fragments()
    ]


# --- separate Spark applications ------------------------------------------------------


def test_two_spark_applications_append_to_one_new_path(uri: str, opts: dict) -> None:
    # Two applications (two JVMs, two drivers) race to create the same new path: the
    # first to commit creates version 1, the other lands as version 2 (rebased if it
    # lost the race). A third would only lose once more through the same retry loop
    # (the many-writer races of tests/commit show that), at the cost of a third JVM.
    args = [f"--option={k}={v}" for k, v in opts.items()]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "s3ddb.spark_ext.append_app",
                uri,
                "--start",
                str(i * 1000),
                "--rows",
                "300",
                "--name",
                f"app{i}",
                *args,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-3000:]
    ds = s3ddb.dataset(uri, storage_options=opts)
    assert [v.version for v in ds.versions()] == [1, 2]
    ids = ds.to_table().column("id").to_pylist()
    assert sorted(ids) == sorted(i * 1000 + j for i in range(2) for j in range(300))
    apps = {r["app"] for r in ds.to_table(columns=["app"]).to_pylist()}
    assert apps == {"app0", "app1"}
