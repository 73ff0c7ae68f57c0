"""Spark writes to several datasets as one group (``s3ddb.spark_ext.write_atomic``) and
a stream committing each micro-batch to several datasets exactly once
(``s3ddb.spark_ext.atomic_batches``), with real local Spark on the local endpoint."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb
from tests.conftest import TEST_BUCKET, TEST_TABLE

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark(spark: Any, aws: Any) -> Iterator[Any]:
    """The folder's session, with the local endpoint in the driver's environment, as
    a reader would find it. The executors' Python workers are started by the JVM (with
    the environment it was launched with): they get storage options."""
    patch = pytest.MonkeyPatch()
    for key, value in aws.env().items():
        patch.setenv(key, value)
    yield spark
    patch.undo()


def _pair() -> tuple[str, str]:
    prefix = f"spark-atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    for uri in (a, b):
        s3ddb.write_dataset(pa.table({"id": pa.array([0], pa.int64()), "kind": ["seed"]}), uri)
    return a, b


def _ids(uri: str) -> list[int]:
    return sorted(s3ddb.dataset(uri).to_table(columns=["id"])["id"].to_pylist())


def test_write_atomic_commits_every_dataframe_or_none(spark: Any, aws: Any) -> None:
    import s3ddb.spark_ext

    a, b = _pair()
    orders = spark.range(1, 21, numPartitions=3).selectExpr("id", "'order' AS kind")
    audit = spark.range(100, 105, numPartitions=2).selectExpr("id", "'audit' AS kind")
    written = s3ddb.spark_ext.write_atomic(
        spark, {a: orders, b: audit}, storage_options=aws.storage_options()
    )
    assert [written[u].version for u in (a, b)] == [2, 2]
    assert _ids(a) == list(range(21))
    assert _ids(b) == [0, *range(100, 105)]
    groups = [s3ddb.dataset(u).versions()[-1].group_id for u in (a, b)]
    assert groups[0] is not None and groups[0] == groups[1]
    # A DataFrame that does not match its dataset fails the whole group.
    wrong = spark.range(5).selectExpr("CAST(id AS STRING) AS id", "'x' AS kind")
    fine = spark.range(200, 203).selectExpr("id", "'audit' AS kind")
    with pytest.raises(Exception, match=r"SchemaMismatchError|does not match"):
        s3ddb.spark_ext.write_atomic(
            spark, {b: fine, a: wrong}, storage_options=aws.storage_options()
        )
    assert [s3ddb.dataset(u).version for u in (a, b)] == [2, 2]
    assert _ids(b) == [0, *range(100, 105)]


def test_a_stream_commits_each_batch_to_every_sink_exactly_once(
    spark: Any, aws: Any, tmp_path: Path
) -> None:
    import s3ddb.spark_ext

    a, b = _pair()
    source = tmp_path / "in"
    source.mkdir()

    def route(batch: Any) -> dict[str, Any]:
        return {
            a: batch.where("kind = 'order'"),
            b: batch.selectExpr("id + 1000 AS id", "kind"),
        }

    each = s3ddb.spark_ext.atomic_batches(
        route, f"job-{uuid.uuid4().hex[:8]}", storage_options=aws.storage_options()
    )

    def run_stream() -> None:
        query = (
            spark.readStream.schema("id long, kind string")
            .parquet(str(source))
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    def add_file(name: str, ids: list[int]) -> None:
        kinds = ["order" if i % 2 else "other" for i in ids]
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "kind": kinds}), source / name)

    add_file("0.parquet", [1, 2, 3])
    run_stream()
    add_file("1.parquet", [4, 5])
    run_stream()  # a restart: batch 0 is not replayed, batch 1 commits once
    assert _ids(a) == [0, 1, 3, 5]
    assert _ids(b) == [0, 1001, 1002, 1003, 1004, 1005]
    versions = [s3ddb.dataset(u).version for u in (a, b)]
    # A replay of a committed batch (a query that died after the group committed, before
    # its checkpoint recorded the batch) commits nothing to any sink.
    batch = spark.read.parquet(str(source / "1.parquet"))
    each(batch, 1)
    assert [s3ddb.dataset(u).version for u in (a, b)] == versions
    assert _ids(a) == [0, 1, 3, 5]
    assert _ids(b) == [0, 1001, 1002, 1003, 1004, 1005]


def test_a_batch_commits_once_whatever_the_route_spells_or_leaves_empty(
    spark: Any, aws: Any
) -> None:
    """Two spellings of one dataset in a route are two changes to it in the group,
    both recording the batch id: the batch commits (it was skipped as "committed
    already"). A member whose DataFrame is empty records nothing, yet a replay that
    routes the batch's rows to it commits nothing: another member records the batch."""
    import s3ddb.spark_ext

    a, b = _pair()
    respelt = a.replace("/a?", "/a/?")
    rows = spark.range(1, 4).selectExpr("id", "'order' AS kind")
    rows.persist()
    to_b = {"b": False}

    def route(batch: Any) -> dict[str, Any]:
        if to_b["b"]:
            return {a: batch.where("false"), b: batch}
        return {
            a: batch,
            respelt: batch.selectExpr("id + 10 AS id", "kind"),
            b: batch.where("false"),
        }

    each = s3ddb.spark_ext.atomic_batches(
        route, f"job-{uuid.uuid4().hex[:8]}", storage_options=aws.storage_options()
    )
    each(rows, 0)
    assert _ids(a) == [0, 1, 2, 3, 11, 12, 13]
    assert _ids(b) == [0]  # empty in this batch: no version
    versions = [s3ddb.dataset(u).version for u in (a, b)]
    assert versions == [3, 1]
    to_b["b"] = True  # the replay routes the rows to b this time
    each(rows, 0)
    assert [s3ddb.dataset(u).version for u in (a, b)] == versions
    assert _ids(b) == [0]
    each(rows, 1)  # the next batch commits
    assert _ids(b) == [0, 1, 2, 3]
    rows.unpersist()


def _files(uri: str) -> set[str]:
    """The data and transaction files (a version's manifest moves to its final name in
    the background, so manifests are left out)."""
    paths = {m.path for m in s3ddb.dataset(uri).handler.store.list("")}
    return {p for p in paths if p.startswith(("data/", "_transactions/", "_deletions/"))}


def test_a_mismatched_dataframe_is_refused_on_the_driver_before_any_file_is_written(
    spark: Any, aws: Any
) -> None:
    """SchemaMismatchError itself (not Spark's wrapper of an executor's error), naming
    the dataset, before any member's rows are written."""
    import s3ddb.spark_ext
    from s3ddb.errors import SchemaMismatchError

    a, b = _pair()
    before = {u: _files(u) for u in (a, b)}
    fine = spark.range(1, 4).selectExpr("id", "'order' AS kind")
    wrong = spark.range(2).selectExpr("id", "1.5 AS amount")
    with pytest.raises(SchemaMismatchError, match=r"spark-atomic-.*/b"):
        s3ddb.spark_ext.write_atomic(
            spark, {a: fine, b: wrong}, storage_options=aws.storage_options()
        )
    assert {u: _files(u) for u in (a, b)} == before
    assert _ids(a) == [0] and _ids(b) == [0]


def test_spark_timestamps_go_into_a_dataset_written_with_nanoseconds(spark: Any, aws: Any) -> None:
    """A dataset Python wrote (pandas' nanosecond timestamps) takes Spark's microsecond
    timestamps, as ``df.write.format("s3ddb")`` appends do."""
    import datetime as dt

    import s3ddb.spark_ext

    prefix = f"spark-atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    for uri in (a, b):
        s3ddb.write_dataset(pa.table({"at": pa.array([when], pa.timestamp("ns", tz="UTC"))}), uri)
    later = spark.sql("SELECT TIMESTAMP '2026-02-03 04:05:06' AS at")
    s3ddb.spark_ext.write_atomic(spark, {a: later, b: later}, storage_options=aws.storage_options())
    for uri in (a, b):
        table = s3ddb.dataset(uri).to_table()
        assert table.schema.field("at").type == pa.timestamp("ns", tz="UTC")
        assert table.column("at").to_pylist()[1] == dt.datetime(
            2026, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc
        )


def test_write_atomic_and_atomic_batches_check_their_arguments() -> None:
    import s3ddb.spark_ext
    from s3ddb.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=r"mapping \{uri: DataFrame\}, got list"):
        s3ddb.spark_ext.write_atomic(None, [("s3+ddb://b/p?ddbTableName=t", None)])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="route, a function"):
        s3ddb.spark_ext.atomic_batches("orders", "job")  # type: ignore[arg-type]
