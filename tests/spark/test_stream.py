"""The streaming source, ``spark.readStream.format("s3ddb")``, on real local Spark
reading datasets on the local endpoint (S3 without conditional writes + DynamoDB).

Each query writes every micro-batch to its own Parquet folder (``batch=<id>``,
overwritten if Spark replays the batch), so the tests see what each batch held, and
that the union of the batches holds every appended row exactly once."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb

# The Spark integration's fixtures: one SparkSession per module, a fresh s3+ddb URI.

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids]})


def _append(uri: str, opts: dict[str, str], start: int, n: int = 10) -> None:
    s3ddb.write_dataset(_table(start, n), uri, mode="append", storage_options=opts)


def _stream(spark: Any, uri: str, opts: dict[str, str], where: Path, **options: Any) -> Any:
    """Run one AvailableNow query from ``where/checkpoint`` into ``where/out``."""
    out = str(where / "out")
    reader = spark.readStream.format("s3ddb").options(**opts)
    for key, value in options.items():
        reader = reader.option(key, value)

    def sink(df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    query = (
        reader.load(uri)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(where / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def _batches(where: Path) -> dict[int, list[int]]:
    """The ids each micro-batch wrote, by batch id (empty batches write no rows)."""
    out = where / "out"
    found: dict[int, list[int]] = {}
    for folder in sorted(out.glob("batch=*")) if out.exists() else []:
        files = sorted(folder.glob("*.parquet"))
        ids = [i for f in files for i in pq.read_table(f).column("id").to_pylist()]
        found[int(folder.name.split("=", 1)[1])] = sorted(ids)
    return found


def _all_ids(where: Path) -> list[int]:
    return sorted(i for ids in _batches(where).values() for i in ids)


def test_a_ten_version_backlog_drains_with_available_now_in_one_run(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    for i in range(10):
        _append(uri, opts, i * 10)
    query = _stream(spark, uri, opts, tmp_path, startingVersion=1)
    assert _all_ids(tmp_path) == list(range(100)), "every appended row exactly once"
    assert query.lastProgress is not None
    # A later run from the same checkpoint finds nothing new.
    before = _batches(tmp_path)
    _stream(spark, uri, opts, tmp_path, startingVersion=1)
    assert _batches(tmp_path) == before


def test_admission_control_limits_the_fragments_per_batch(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    for i in range(7):
        _append(uri, opts, i * 10)
    query = _stream(spark, uri, opts, tmp_path / "files", startingVersion=1, maxFilesPerTrigger=3)
    batches = [ids for ids in _batches(tmp_path / "files").values() if ids]
    # Fragments of 10 rows each: 3 + 3 + 1 fragments, in version order.
    assert [len(ids) for ids in batches] == [30, 30, 10]
    # Progress shows how far each batch read and how far the dataset goes (after v7).
    sources = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]
    assert [json.loads(s["endOffset"])["version"] for s in sources] == [4, 7, 8]
    assert [json.loads(s["latestOffset"])["version"] for s in sources] == [8, 8, 8]
    assert [i for ids in batches for i in ids] == list(range(70))
    # maxBytesPerTrigger is a soft limit: at least one fragment per batch (shown on the
    # last three versions: each micro-batch costs, the count of them adds nothing).
    _stream(spark, uri, opts, tmp_path / "bytes", startingVersion=5, maxBytesPerTrigger=1)
    batches = [ids for ids in _batches(tmp_path / "bytes").values() if ids]
    assert batches == [list(range(i, i + 10)) for i in (40, 50, 60)]


def test_without_a_starting_option_the_first_batch_is_the_newest_version(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    for i in range(3):
        _append(uri, opts, i * 10)
    s3ddb.dataset(uri, storage_options=opts).delete("id % 10 = 0")  # deletion files
    _stream(spark, uri, opts, tmp_path)
    visible = sorted(s3ddb.dataset(uri, storage_options=opts).to_table().column("id").to_pylist())
    assert _all_ids(tmp_path) == visible and len(visible) == 27
    # Then the query follows what later versions append (the delete is behind it).
    _append(uri, opts, 100)
    _append(uri, opts, 200)
    _stream(spark, uri, opts, tmp_path)
    assert _all_ids(tmp_path) == visible + list(range(100, 110)) + list(range(200, 210))


def test_starting_version_latest_and_starting_timestamp(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    _append(uri, opts, 0)
    _append(uri, opts, 10)
    time.sleep(0.05)
    between = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    _append(uri, opts, 20)
    _stream(spark, uri, opts, tmp_path / "ts", startingTimestamp=between.isoformat())
    assert _all_ids(tmp_path / "ts") == list(range(20, 30))
    _stream(spark, uri, opts, tmp_path / "latest", startingVersion="latest")
    assert _all_ids(tmp_path / "latest") == []
    _append(uri, opts, 30)
    _stream(spark, uri, opts, tmp_path / "latest", startingVersion="latest")
    assert _all_ids(tmp_path / "latest") == list(range(30, 40))


def test_a_replayed_batch_reads_the_same_rows_after_more_appends(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    """Stop part-way (AvailableNow on part of the history), append more, forget the
    last batch's commit as a crash before Spark recorded it would, and restart from
    the same checkpoint: the replayed batch holds exactly what it held, and the
    union of all batches every row once."""
    for i in range(4):
        _append(uri, opts, i * 10)
    _stream(spark, uri, opts, tmp_path, startingVersion=1, maxFilesPerTrigger=2)
    first = _batches(tmp_path)
    assert sorted(i for ids in first.values() for i in ids) == list(range(40))
    commits = tmp_path / "checkpoint" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    for i in range(4, 9):
        _append(uri, opts, i * 10)
    _stream(spark, uri, opts, tmp_path, startingVersion=1, maxFilesPerTrigger=2)
    again = _batches(tmp_path)
    assert again[last] == first[last], "the replayed batch read the same fragments"
    assert _all_ids(tmp_path) == list(range(90)), "no row missing or repeated"


def test_change_commits_stop_the_stream_after_the_rows_before_them(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    _append(uri, opts, 0)
    _append(uri, opts, 10)
    s3ddb.dataset(uri, storage_options=opts).delete("id = 3")
    _append(uri, opts, 20)
    with pytest.raises(Exception, match="StreamChangeCommitError") as caught:
        _stream(spark, uri, opts, tmp_path, startingVersion=1)
    assert "version 3 of" in str(caught.value) and "skipChangeCommits" in str(caught.value)
    assert _all_ids(tmp_path) == list(range(20)), "the appends before the delete were read"
    # The same checkpoint with skipChangeCommits goes past it.
    _stream(spark, uri, opts, tmp_path, startingVersion=1, skipChangeCommits="true")
    assert _all_ids(tmp_path) == list(range(30))


def test_versions_that_add_no_rows_are_skipped_and_updates_refused(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    for i in range(3):
        _append(uri, opts, i * 10)
    ds = s3ddb.dataset(uri, storage_options=opts)
    ds.optimize.compact_files(target_rows_per_fragment=1000)  # Rewrite: no new rows
    ds = s3ddb.dataset(uri, storage_options=opts)
    ds.update_config({"owner": "tests"})  # UpdateConfig
    ds = s3ddb.dataset(uri, storage_options=opts)
    # An upsert that only inserts is an append of its new rows.
    ds.merge_insert("id").when_not_matched_insert_all().execute(_table(25, 10))
    ds = s3ddb.dataset(uri, storage_options=opts)
    operations = [v.operation for v in ds.versions()][3:]
    assert operations[-3:] == ["Rewrite", "UpdateConfig", "Update"], operations
    _stream(spark, uri, opts, tmp_path / "a", startingVersion=1)
    assert _all_ids(tmp_path / "a") == list(range(35))
    # An upsert that updates rows, an overwrite: refused, or skipped whole.
    ds.merge_insert("id").when_matched_update_all().execute(_table(0, 2))
    s3ddb.write_dataset(_table(500, 5), uri, mode="overwrite", storage_options=opts)
    _append(uri, opts, 600)
    with pytest.raises(Exception, match=rf"version {len(operations) + 4} of .*Update"):
        _stream(spark, uri, opts, tmp_path / "a", startingVersion=1)
    _stream(spark, uri, opts, tmp_path / "b", startingVersion=1, skipChangeCommits=True)
    assert _all_ids(tmp_path / "b") == list(range(35)) + list(range(600, 610))


def test_a_version_removed_by_cleanup_is_a_clear_error(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    for i in range(3):
        _append(uri, opts, i * 10)
    ds = s3ddb.dataset(uri, storage_options=opts)
    stats = ds.cleanup_old_versions(
        older_than=dt.timedelta(0), claim_window=dt.timedelta(0), delete_unverified=True
    )
    assert stats.versions_removed == [1, 2]
    with pytest.raises(Exception, match=r"cannot start at version 1 of .*oldest version kept is 3"):
        _stream(spark, uri, opts, tmp_path / "one", startingVersion=1)
    # The oldest kept version works: its appended rows cannot be told without version
    # 2, so the query starts with its snapshot, then follows later appends.
    _append(uri, opts, 30)
    _stream(spark, uri, opts, tmp_path / "three", startingVersion=3)
    assert _all_ids(tmp_path / "three") == list(range(40))


def test_a_query_restarted_after_add_columns_goes_on_from_its_checkpoint(
    spark: Any, uri: str, opts: dict, tmp_path: Path
) -> None:
    """The checkpoint is at version 2 when add_columns commits: the restarted query
    (its schema now has the column) reads versions 2 and 3 with nulls in it, the
    version after add_columns with its values."""
    _append(uri, opts, 0)
    _stream(spark, uri, opts, tmp_path, startingVersion=1)
    _append(uri, opts, 10)
    _append(uri, opts, 20)
    s3ddb.dataset(uri, storage_options=opts).add_columns({"x": "id * 2"})
    more = _table(30, 10).append_column("x", pa.array(range(60, 80, 2), pa.int64()))
    s3ddb.write_dataset(more, uri, mode="append", storage_options=opts)
    _stream(spark, uri, opts, tmp_path, startingVersion=1)
    out = tmp_path / "out"
    rows = sorted(
        (r["id"], r.get("x"))
        for f in out.glob("batch=*/*.parquet")
        for r in pq.read_table(f).to_pylist()
    )
    assert rows == [(i, None) for i in range(30)] + [(i, 2 * i) for i in range(30, 40)]


def test_bronze_to_silver_through_the_s3ddb_sink_is_exactly_once(
    spark: Any, aws: Any, opts: dict, tmp_path: Path
) -> None:
    """A stream from one dataset into another through the s3ddb sink, restarted after
    more appends and after a forgotten batch commit: silver holds every bronze row
    with a filter applied, once."""
    from tests.conftest import TEST_BUCKET, TEST_TABLE

    bronze, silver = (
        f"s3+ddb://{TEST_BUCKET}/{name}-{tmp_path.name}?ddbTableName={TEST_TABLE}"
        for name in ("bronze", "silver")
    )
    for i in range(3):
        _append(bronze, opts, i * 10)

    def run() -> None:
        query = (
            spark.readStream.format("s3ddb")
            .options(**opts)
            .option("maxFilesPerTrigger", 1)
            .load(bronze)
            .where("id % 2 = 0")
            .writeStream.format("s3ddb")
            .options(**opts)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start(silver)
        )
        query.awaitTermination()

    run()
    commits = tmp_path / "checkpoint" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    _append(bronze, opts, 30)
    run()
    ids = s3ddb.dataset(silver, storage_options=opts).to_table().column("id").to_pylist()
    assert sorted(ids) == list(range(0, 40, 2))
