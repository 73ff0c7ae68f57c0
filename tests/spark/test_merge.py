"""Spark's merge (s3ddb.spark_ext.merge_insert, merge_batches) with real local Spark:
the source and the matched rows stay on the executors.

Each merge is checked against a reference computed in Python from the clause rules
(docs/merge.md); the race runs a real child process appending through DynamoDB.
"""

from __future__ import annotations

import threading
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.proc import start_worker

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _target(path: Path, n: int = 40, fragments: int = 4) -> str:
    """A dataset of ``n`` rows (id, v, n) in ``fragments`` fragments."""
    uri = str(path / "t")
    per = n // fragments
    for f in range(fragments):
        ids = list(range(f * per, (f + 1) * per))
        s3ddb.write_dataset(
            pa.table({"id": ids, "v": [f"t{i}" for i in ids], "n": ids}), uri, mode="append"
        )
    return uri


def _rows(uri: str, **options: Any) -> dict[int, tuple[str, int]]:
    table = s3ddb.dataset(uri, **options).to_table()
    rows = {r["id"]: (r["v"], r["n"]) for r in table.to_pylist()}
    assert len(rows) == table.num_rows, "a key appears twice"
    return rows


def _files(uri: str) -> set[str]:
    root = Path(uri)
    return {
        str(p.relative_to(root))
        for d in ("data", "_deletions")
        if (root / d).exists()
        for p in (root / d).iterdir()
    }


def _reference(
    before: dict[int, tuple[str, int]],
    source: list[dict[str, Any]],
    *,
    update: Any = True,
    delete: Any = False,
    insert: Any = True,
    by_source: Any = False,
) -> tuple[dict[int, tuple[str, int]], dict[str, int]]:
    """The merge's outcome by the clause rules; each clause a bool or a Python
    predicate over (source row, target row)."""

    def holds(clause: Any, *args: Any) -> bool:
        return bool(clause(*args)) if callable(clause) else bool(clause)

    after = dict(before)
    counts = {"num_inserted_rows": 0, "num_updated_rows": 0, "num_deleted_rows": 0}
    keys = set()
    for row in source:
        key = row["id"]
        keys.add(key)
        if key in before:
            target = {"id": key, "v": before[key][0], "n": before[key][1]}
            if delete and holds(delete, row, target):
                del after[key]
                counts["num_deleted_rows"] += 1
            elif update and holds(update, row, target):
                after[key] = (row["v"], row["n"])
                counts["num_updated_rows"] += 1
        elif insert and holds(insert, row, None):
            after[key] = (row["v"], row["n"])
            counts["num_inserted_rows"] += 1
    if by_source:
        for key, (v, n) in before.items():
            if key not in keys and holds(by_source, None, {"id": key, "v": v, "n": n}):
                del after[key]
                counts["num_deleted_rows"] += 1
    return after, counts


def test_an_upsert_equals_the_python_reference(spark: Any, tmp_path: Path) -> None:
    import s3ddb.spark_ext

    uri = _target(tmp_path)
    before = _rows(uri)
    source = [{"id": i, "v": f"s{i}", "n": 1000 + i} for i in range(25, 60)]
    df = spark.createDataFrame(source, "id long, v string, n long").repartition(3)
    got = s3ddb.spark_ext.merge_insert(spark, uri, df, "id")
    expected, counts = _reference(before, source)
    assert got == counts == {"num_inserted_rows": 20, "num_updated_rows": 15, "num_deleted_rows": 0}
    assert _rows(uri) == expected


def test_native_target_read_after_deletes_renames_and_added_columns(
    spark: Any, tmp_path: Path, caplog: Any
) -> None:
    """Spark's Parquet reader reads the target's keys (by field id after a rename,
    without the deleted rows); fragments spread over several files after
    add_columns are read by Python tasks; the result equals the library's merge."""
    import logging
    import shutil

    import s3ddb.spark_ext

    uri = _target(tmp_path, n=80, fragments=4)
    ds = s3ddb.dataset(uri)
    ds.delete("id % 5 = 0")
    ds.alter_columns({"path": "n", "name": "m"})
    ds.add_columns({"z": "id * 2"})  # a second data file in each fragment
    ds.insert(pa.table({"id": [100, 101], "v": ["x", "y"], "m": [1, 2], "z": [7, 8]}))
    ds = s3ddb.dataset(uri)
    twin = str(tmp_path / "twin")
    shutil.copytree(uri, twin)
    rows = [(i, f"s{i}", i * 3, -i) for i in range(0, 110, 3)]
    df = spark.createDataFrame(rows, "id long, v string, m long, z long")
    source = pa.Table.from_pylist([dict(zip(("id", "v", "m", "z"), r)) for r in rows])
    # The second condition reads z, in its own file in the four older fragments.
    for condition, spread in (("source.m > target.m", 0), ("target.z > source.m", 4)):
        fragments = len(s3ddb.dataset(uri).get_fragments())
        expected = (
            s3ddb.dataset(twin)
            .merge_insert("id")
            .when_matched_update_all(condition)
            .when_not_matched_insert_all()
            .execute(source)
        )
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="s3ddb.spark_ext.merge_target"):
            got = s3ddb.spark_ext.merge_insert(
                spark, uri, df, "id", when_matched_update_all=condition
            )
        native = fragments - spread
        assert f"reads {native} target fragment(s) natively" in caplog.text, caplog.text
        assert got == expected
    assert got == expected
    assert s3ddb.dataset(uri).to_table().sort_by("id") == s3ddb.dataset(twin).to_table().sort_by(
        "id"
    )


def test_a_pyarrow_source_merges_on_the_executors_too(spark: Any, tmp_path: Path) -> None:
    import s3ddb.spark_ext

    uri = _target(tmp_path)
    before = _rows(uri)
    source = [{"id": i, "v": f"p{i}", "n": -i} for i in (1, 39, 40)]
    got = s3ddb.spark_ext.merge_insert(
        spark, uri, pa.Table.from_pylist(source), "id", transaction_properties={"who": "test"}
    )
    expected, counts = _reference(before, source)
    assert got == counts == {"num_inserted_rows": 1, "num_updated_rows": 2, "num_deleted_rows": 0}
    assert _rows(uri) == expected


def test_a_change_feed_with_a_source_only_op_column(spark: Any, tmp_path: Path) -> None:
    import s3ddb.spark_ext

    uri = _target(tmp_path)
    before = _rows(uri)
    ops = ["U", "D", "I"]
    source = [{"id": i, "v": f"c{i}", "n": (i * 7) % 50, "op": ops[i % 3]} for i in range(0, 60, 2)]
    df = spark.createDataFrame(source, "id long, v string, n long, op string")
    got = s3ddb.spark_ext.merge_insert(
        spark,
        uri,
        df,
        "id",
        when_matched_delete="source.op = 'D'",
        when_matched_update_all="source.op = 'U' AND source.n > target.n",
        when_not_matched_insert_all="source.op <> 'D'",
    )
    expected, counts = _reference(
        before,
        source,
        delete=lambda s, t: s["op"] == "D",
        update=lambda s, t: s["op"] == "U" and s["n"] > t["n"],
        insert=lambda s, t: s["op"] != "D",
    )
    assert got == counts
    assert min(counts.values()) > 0, counts  # the feed exercises every clause
    assert _rows(uri) == expected
    assert "op" not in s3ddb.dataset(uri).schema.names


def test_by_source_deletes(spark: Any, tmp_path: Path) -> None:
    import s3ddb.spark_ext

    uri = _target(tmp_path)
    before = _rows(uri)
    source = [{"id": i, "v": f"s{i}", "n": i} for i in (3, 17, 33, 45)]
    df = spark.createDataFrame(source, "id long, v string, n long")
    got = s3ddb.spark_ext.merge_insert(
        spark,
        uri,
        df,
        "id",
        when_matched_update_all=False,
        when_not_matched_by_source_delete="n >= 10",
    )
    expected, counts = _reference(before, source, update=False, by_source=lambda s, t: t["n"] >= 10)
    assert got == counts and counts["num_deleted_rows"] == 28
    assert _rows(uri) == expected


@pytest.mark.parametrize("refusal", ["duplicate", "matched"])
def test_a_refused_merge_commits_nothing_and_leaves_no_file(
    spark: Any, tmp_path: Path, refusal: str
) -> None:
    import s3ddb.spark_ext

    uri = _target(tmp_path)
    version, files = s3ddb.dataset(uri).version, _files(uri)
    if refusal == "duplicate":
        # Many rows the tasks write before the duplicate refuses the merge.
        rows = [(i, f"s{i}", i) for i in range(5, 400)] + [(7, "again", 7)]
        error: type[Exception] = s3ddb.DuplicateKeyError
        clauses: dict[str, Any] = {}
    else:
        rows = [(i, f"s{i}", i) for i in range(100, 400)] + [(7, "there", 7)]
        error, clauses = s3ddb.MatchedRowError, {"when_matched_fail": True}
    df = spark.createDataFrame(rows, "id long, v string, n long").repartition(4)
    with pytest.raises(error, match=r"id=7"):
        s3ddb.spark_ext.merge_insert(spark, uri, df, "id", **clauses)
    assert s3ddb.dataset(uri).version == version
    assert _files(uri) == files


def test_a_value_that_does_not_fit_is_a_typed_error_leaving_no_file(
    spark: Any, tmp_path: Path
) -> None:
    import s3ddb.spark_ext

    uri = str(tmp_path / "strict")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string(), nullable=False)])
    s3ddb.write_dataset(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema), uri)
    files = _files(uri)
    rows = [(i, f"s{i}") for i in range(3, 300)] + [(300, None)]
    df = spark.createDataFrame(rows, "id long, v string").repartition(4)
    with pytest.raises(s3ddb.SchemaMismatchError, match="v"):
        s3ddb.spark_ext.merge_insert(spark, uri, df, "id")
    assert s3ddb.dataset(uri).version == 1
    assert _files(uri) == files


def test_a_source_column_no_condition_reads_is_refused(spark: Any, tmp_path: Path) -> None:
    import s3ddb.spark_ext

    uri = _target(tmp_path)
    df = spark.createDataFrame([(1, "a", 1, "U")], "id long, v string, n long, op string")
    with pytest.raises(s3ddb.SchemaMismatchError, match="op"):
        s3ddb.spark_ext.merge_insert(spark, uri, df, "id")


def test_a_merge_racing_appends_from_another_process_loses_nothing(spark: Any, aws: Any) -> None:
    import s3ddb.spark_ext

    opts = dict(aws.storage_options())
    uri = f"s3+ddb://{TEST_BUCKET}/merge-race-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    seed = pa.table(
        {
            "id": pa.array(range(100), pa.int64()),
            "writer": pa.array([0] * 100, pa.int32()),
            "seq": pa.array([0] * 100, pa.int32()),
        }
    )
    s3ddb.write_dataset(seed, uri, storage_options=opts)
    # The child appends keys 7_000_000.. : inside the source's key range (so each of
    # its commits can make the merge's plan stale) but never one of its keys.
    child = start_worker("append", uri, "7", "10", "3", env=aws.env())
    assert child.stdout is not None
    first = child.stdout.readline()
    assert first.startswith("ok "), first + (child.stderr.read() if child.stderr else "")
    source = (
        spark.range(0, 50)
        .selectExpr("id", "CAST(1 AS INT) AS writer", "CAST(-1 AS INT) AS seq")
        .union(
            spark.range(8_000_000, 8_000_050).selectExpr(
                "id", "CAST(1 AS INT) AS writer", "CAST(-1 AS INT) AS seq"
            )
        )
    )
    got = s3ddb.spark_ext.merge_insert(
        spark, uri, source, "id", storage_options=opts, conflict_retries=30
    )
    _out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert got == {"num_inserted_rows": 50, "num_updated_rows": 50, "num_deleted_rows": 0}
    rows = s3ddb.dataset(uri, storage_options=opts).to_table().to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == 100 + 50 + 30
    appended = {r["id"] for r in rows if r["writer"] == 7}
    assert appended == {7_000_000 + i * 1000 + j for i in range(10) for j in range(3)}
    assert all(r["seq"] == -1 for r in rows if r["id"] < 50 or r["id"] >= 8_000_000)


def test_a_replayed_stream_batch_is_merged_once(spark: Any, tmp_path: Path) -> None:
    import s3ddb.spark_ext

    uri = _target(tmp_path)
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    pa.parquet.write_table(  # type: ignore[attr-defined]
        pa.table({"id": [1, 100], "v": ["u1", "i100"], "n": [11, 100], "op": ["U", "I"]}),
        incoming / "part-0.parquet",
    )
    merge = s3ddb.spark_ext.merge_batches(
        uri, "id", "cdc-test", when_matched_delete="source.op = 'D'"
    )
    stream = spark.readStream.schema("id long, v string, n long, op string").parquet(str(incoming))
    query = (
        stream.writeStream.foreachBatch(merge)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    after_stream = s3ddb.dataset(uri)
    rows = _rows(uri)
    assert rows[1] == ("u1", 11) and rows[100] == ("i100", 100)
    # A restarted query whose checkpoint missed batch 0 replays it: nothing commits,
    # although the replay would change rows (key 2 deleted) if it ran.
    replay = spark.createDataFrame([(2, "x", 0, "D")], "id long, v string, n long, op string")
    merge(replay, 0)
    assert s3ddb.dataset(uri).version == after_stream.version
    assert 2 in _rows(uri)
    merge(replay, 1)  # the next batch does
    assert 2 not in _rows(uri)


class _DriverMemory:
    """The peak of Python (tracemalloc) and Arrow allocations in this process, the
    Spark driver, sampled while a merge runs."""

    def __enter__(self) -> _DriverMemory:
        tracemalloc.start()
        self.base = self._now()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _now(self) -> int:
        return tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._now())
            time.sleep(0.002)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._now())
        tracemalloc.stop()

    @property
    def growth(self) -> int:
        return self.peak - self.base


def test_driver_memory_does_not_grow_with_the_source(spark: Any, tmp_path: Path) -> None:
    """A source 10x larger (4 MiB -> 40 MiB of strings) leaves the driver's peak where
    it was: collecting it (as a driver-side merge must) would add 36 MiB."""
    import s3ddb.spark_ext

    uri = _target(tmp_path, n=2000)
    growth = {}
    for rows in (20_000, 200_000):
        source = spark.range(0, rows, numPartitions=4).selectExpr(
            "id", "CONCAT(CAST(id AS STRING), REPEAT('x', 200)) AS v", "id AS n"
        )
        with _DriverMemory() as memory:
            got = s3ddb.spark_ext.merge_insert(spark, uri, source, "id")
        assert got["num_updated_rows"] == (2000 if rows == 20_000 else 20_000)
        growth[rows] = memory.growth
    assert s3ddb.dataset(uri).count_rows() == 200_000
    assert growth[200_000] - growth[20_000] < 12 * 2**20, growth


def test_spark_writes_and_merges_record_their_metrics(spark: Any, tmp_path: Path) -> None:
    from s3ddb.spark_ext import merge_insert
    from s3ddb.spark_ext import write as spark_write

    uri = str(tmp_path / "ds")
    target = pa.table({"id": pa.array(range(10), pa.int64()), "v": ["t"] * 10})
    s3ddb.write_dataset(target, uri)
    source = spark.createDataFrame([(i, "s") for i in range(8, 12)], "id long, v string")
    spark_write(spark.createDataFrame([(20, "w")], "id long, v string"), uri)
    written = s3ddb.dataset(uri).versions()[-1].metrics
    assert written["num_added_rows"] == 1 and written["num_added_files"] >= 1
    merge_insert(spark, uri, source, "id")
    metrics = s3ddb.dataset(uri).versions()[-1].metrics
    assert (metrics["source_rows"], metrics["matched_rows"]) == (4, 2)
    assert (metrics["num_updated_rows"], metrics["num_added_rows"]) == (2, 2)
    assert metrics["attempts"] == 1 and metrics["fragments_scanned"] == 1


def _parquet_rows_read(spark: Any, action: Any) -> int:
    """The records Spark's file readers read (stage input metrics) while ``action``
    ran: what the JVM read from Parquet files."""
    context = spark.sparkContext._jsc.sc()
    jvm = spark.sparkContext._jvm

    def stages() -> dict[int, int]:
        context.listenerBus().waitUntilEmpty()
        empty = spark.sparkContext._gateway.new_array(jvm.double, 0)
        listed = context.statusStore().stageList(None, False, False, empty, None)
        return {
            (s.stageId(), s.attemptId()): s.inputRecords()
            for s in jvm.scala.jdk.javaapi.CollectionConverters.asJava(listed)
        }

    before = stages()
    action()
    return sum(n for stage, n in stages().items() if stage not in before)


def test_the_jvm_merge_reads_the_target_once(spark: Any, tmp_path: Path) -> None:
    """Spark's Parquet reader reads each candidate target row once: the address job
    and the row job share one join of the source with the target's keys (twice
    before, one join per job)."""
    from s3ddb.spark_ext import explain_merge_insert, merge_insert

    uri = _target(tmp_path, n=4000, fragments=4)
    # Keys over the whole range: every fragment and row group is a candidate.
    ids = [0, 3999, *range(1, 3999, 400), 5000]
    source = spark.createDataFrame(
        pa.table({"id": pa.array(ids, pa.int64()), "v": ["s"] * len(ids), "n": ids})
    )
    assert "Spark's Parquet writer (JVM)" in explain_merge_insert(
        spark, uri, source, "id", writer="jvm"
    )
    got: dict[str, int] = {}
    read = _parquet_rows_read(
        spark, lambda: got.update(merge_insert(spark, uri, source, "id", writer="jvm"))
    )
    assert got == {"num_inserted_rows": 1, "num_updated_rows": 12, "num_deleted_rows": 0}
    assert 4000 <= read < 2 * 4000, read
    assert _rows(uri)[5000] == ("s", 5000)


def test_the_jvm_merge_joins_in_partitions_a_multiple_of_the_cores(
    spark: Any, tmp_path: Path
) -> None:
    """The join runs in 4 partitions per core (the session says 2, and adaptive
    execution would coalesce by size): a task count that is a multiple of the cores,
    so no task runs alone at the end while a core idles. The session's settings are
    as they were afterwards, and the merge's answer is the same."""
    from s3ddb.spark_ext import merge_insert
    from s3ddb.spark_ext.merge import _join_partitions

    cores = spark.sparkContext.defaultParallelism
    assert _join_partitions(1000, cores)["spark.sql.shuffle.partitions"] == str(4 * cores)
    assert _join_partitions(10**9, 2)["spark.sql.shuffle.partitions"] == "200"
    uri = _target(tmp_path, n=4000, fragments=4)
    ids = [0, 3999, *range(1, 3999, 400), 5000]
    source = spark.createDataFrame(
        pa.table({"id": pa.array(ids, pa.int64()), "v": ["s"] * len(ids), "n": ids})
    )
    keys = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.coalescePartitions.enabled")
    before = {k: spark.conf.get(k, None) for k in keys}
    context = spark.sparkContext
    context.setJobGroup("s3ddb-join-partitions", "merge")
    try:
        got = merge_insert(spark, uri, source, "id", writer="jvm")
    finally:
        context.setJobGroup("", "")
    tracker = context.statusTracker()
    tasks = {
        stage.numTasks
        for job in tracker.getJobIdsForGroup("s3ddb-join-partitions")
        for stage_id in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else [])
        if (stage := tracker.getStageInfo(stage_id)) is not None
    }
    assert 4 * cores in tasks, tasks
    assert {k: spark.conf.get(k, None) for k in keys} == before
    assert got == {"num_inserted_rows": 1, "num_updated_rows": 12, "num_deleted_rows": 0}


def test_auto_writer_sends_a_small_source_through_python_tasks(spark: Any, tmp_path: Path) -> None:
    """With ``writer="auto"`` a source of fewer rows per core than the rule says is
    written by Python tasks (pyarrow's Parquet writer), with ``writer="jvm"`` by
    Spark's (parquet-mr); ``explain_merge_insert`` states the rule, and an unknown
    writer is refused."""
    import pyarrow.parquet as pq

    from s3ddb.spark_ext import explain_merge_insert, merge_insert
    from s3ddb.spark_ext.merge import JVM_ROWS_PER_CORE

    uri = _target(tmp_path, n=400, fragments=2)

    def merged_by(ids: list[int], writer: str) -> set[str]:
        source = spark.createDataFrame(
            pa.table({"id": pa.array(ids, pa.int64()), "v": ["s"] * len(ids), "n": ids})
        )
        before = _files(uri)
        merge_insert(spark, uri, source, "id", writer=writer)
        added = [p for p in _files(uri) - before if p.startswith("data/")]
        assert added and all(_rows(uri)[i] == ("s", i) for i in ids)
        # The version records who wrote its rows, as the files' creators say.
        recorded = s3ddb.dataset(uri).versions()[-1].metrics["merge_writer"]
        assert recorded == ("python" if writer == "auto" else "jvm"), recorded
        return {pq.ParquetFile(Path(uri, p)).metadata.created_by.split()[0] for p in added}

    assert merged_by(list(range(0, 400, 3)), "auto") == {"parquet-cpp-arrow"}
    assert merged_by(list(range(1, 400, 3)), "jvm") == {"parquet-mr"}
    df = spark.createDataFrame(pa.table({"id": pa.array([1], pa.int64()), "v": ["s"], "n": [1]}))
    plan = explain_merge_insert(spark, uri, df, "id")
    assert f"fewer than {JVM_ROWS_PER_CORE:,} rows per core" in plan, plan
    plan = explain_merge_insert(spark, uri, df, "id", writer="python")
    assert 'Python tasks (pyarrow), because writer="python" was asked for' in plan, plan
    with pytest.raises(s3ddb.InvalidInputError, match="writer"):
        merge_insert(spark, uri, df, "id", writer="spark")


def test_auto_writer_sends_an_upsert_outnumbering_its_candidate_rows_to_spark(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``writer="auto"``, an upsert below the general rule's size but of at least
    the upsert rule's rows per core goes to Spark's writer when it has at least as
    many rows as the target rows its keys can match (keys in the last fragment, and
    new ones above it), and to Python tasks when its keys span every fragment; a
    conditional merge of the same source stays on Python tasks. The version records
    the writer."""
    import s3ddb.spark_ext.merge as spark_merge
    from s3ddb.spark_ext import merge_insert

    # The rule's own threshold (500,000 rows per core) scaled down to this test.
    monkeypatch.setattr(spark_merge, "UPSERT_JVM_ROWS_PER_CORE", 10)
    uri = _target(tmp_path, n=400, fragments=2)

    def writer_of(ids: list[int], **clauses: Any) -> str:
        source = spark.createDataFrame(
            pa.table({"id": pa.array(ids, pa.int64()), "v": ["s"] * len(ids), "n": ids})
        )
        merge_insert(spark, uri, source, "id", **clauses)
        assert all(_rows(uri)[i] == ("s", i) for i in ids)
        return str(s3ddb.dataset(uri).versions()[-1].metrics["merge_writer"])

    clustered = list(range(250, 400)) + list(range(400, 500))  # 250 rows; 200 candidates
    assert writer_of(clustered) == "jvm"
    spread = list(range(0, 400, 2)) + list(range(1, 100, 2))  # 250 rows; 400 candidates
    assert writer_of(spread) == "python"
    assert writer_of(clustered, when_matched_update_all="source.v <> target.v") == "python"
