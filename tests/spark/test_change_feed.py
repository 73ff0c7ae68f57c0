"""Spark's batch ``readChangeFeed``: the rows of ``Dataset.changes`` for a range of
versions (both ends included, as Delta Lake counts them), one task per version, on a
local dataset (the JVM reads nothing: the rows come from Python tasks)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from tests.support.change_feed import copy_merger

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHANGE_COLUMNS = ["_change_type", "_commit_version"]


def _feed(spark: Any, uri: str, **options: Any) -> Any:
    reader = spark.read.format("s3ddb").option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(uri)


def _rows(table_or_rows: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    if isinstance(table_or_rows, pa.Table):
        records = table_or_rows.select(columns).to_pylist()
        return sorted(tuple(r[c] for c in columns) for r in records)
    return sorted(tuple(r[c] for c in columns) for r in table_or_rows)


def _history(uri: str, **write: Any) -> s3ddb.Dataset:
    """Versions 1-7: create, append, delete, update, compaction (reserving fragment
    ids, then rewriting), an added column."""
    ds = s3ddb.write_dataset(
        pa.table({"id": pa.array(range(6), pa.int64()), "v": [f"a{i}" for i in range(6)]}),
        uri, max_rows_per_file=2, **write,
    )  # fmt: skip
    ds.insert(pa.table({"id": pa.array([6, 7], pa.int64()), "v": ["a6", "a7"]}))
    ds.delete("id = 1 OR id = 6")
    ds.update({"v": "'b'"}, where="id = 4")
    ds.optimize.compact_files(target_rows_per_fragment=100)
    ds.add_columns({"w": "id * 10"})
    return s3ddb.dataset(uri)


def test_the_feed_of_every_range_equals_the_library_changes(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = _history(uri)
    assert ds.version == 7
    columns = ["id", "v", "w", *CHANGE_COLUMNS]
    whole = _feed(spark, uri, startingVersion=1)
    assert whole.columns == [*ds.schema.names, "_change_type", "_commit_version",
                             "_commit_timestamp"]  # fmt: skip
    assert whole.rdd.getNumPartitions() == 7  # one task per version
    got = _rows(whole.collect(), columns)
    assert got == _rows(ds.changes(0), columns)
    kinds = {(r[3], r[4]) for r in got}
    assert ("delete", 3) in kinds and ("insert", 4) in kinds and ("delete", 4) in kinds
    assert not {v for _, v in kinds} & {5, 6, 7}  # compaction, a new column: no row
    # A middle range, both ends included; columns as of its ending version (no w).
    middle = _feed(spark, uri, startingVersion=3, endingVersion=4)
    assert middle.columns[:2] == ["id", "v"] and "w" not in middle.columns
    assert _rows(middle.collect(), ["id", "v", *CHANGE_COLUMNS]) == _rows(
        ds.changes(2, 4), ["id", "v", *CHANGE_COLUMNS]
    )
    # From a timestamp: the first version committed at or after it.
    when = ds.checkout_version(4).versions()[3].timestamp
    by_time = _feed(spark, uri, startingTimestamp=when.astimezone(dt.timezone.utc).isoformat())
    assert _rows(by_time.collect(), columns) == _rows(ds.changes(3), columns)


def test_updates_are_pre_and_post_images_with_stable_row_ids(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ids")
    _history(uri, enable_stable_row_ids=True)
    update = _feed(spark, uri, startingVersion=4, endingVersion=4).collect()
    assert _rows(update, ["id", "v", "_change_type"]) == [
        (4, "a4", "update_preimage"), (4, "b", "update_postimage"),
    ]  # fmt: skip


def test_bad_ranges_and_options_are_refused_by_name(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _history(uri)
    with pytest.raises(Exception, match="give startingVersion"):
        _feed(spark, uri).collect()
    with pytest.raises(Exception, match="starting version 8 is after the ending version 7"):
        _feed(spark, uri, startingVersion=8).collect()
    with pytest.raises(Exception, match="endingVersion needs readChangeFeed=true"):
        spark.read.format("s3ddb").option("endingVersion", "2").load(uri).collect()
    with pytest.raises(Exception, match="the change feed reads a range"):
        _feed(spark, uri, startingVersion=1, version=2).collect()
    with pytest.raises(Exception, match="readChangeFeed must be true or false"):
        spark.read.format("s3ddb").option("readChangeFeed", "yes").load(uri).collect()


# --- streaming -----------------------------------------------------------------------


def _follow(spark: Any, bronze: str, silver: str, checkpoint: Path, **options: Any) -> int:
    """Run the bronze -> silver query once (AvailableNow); the number of batches."""
    merge = copy_merger(silver, "copy-from-feed")  # the name tests/support/stream_app uses
    batches: list[int] = []

    def apply(batch: Any, batch_id: int) -> None:
        batches.append(batch_id)
        merge(batch, batch_id)

    reader = spark.readStream.format("s3ddb").option("readChangeFeed", "true")
    for key, value in {"startingVersion": 1, **options}.items():
        reader = reader.option(key, str(value))
    query = (
        reader.load(bronze)
        .select("id", "v", "_change_type", "_commit_version")
        .writeStream.foreachBatch(apply)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return len(batches)


def _sorted(uri: str) -> list[dict[str, Any]]:
    return sorted(s3ddb.dataset(uri).to_table(columns=["id", "v"]).to_pylist(), key=str)


@pytest.mark.parametrize("row_ids", [False, True])
def test_a_stream_of_the_feed_keeps_a_copy_equal_across_updates_deletes_and_restarts(
    spark: Any, tmp_path: Path, row_ids: bool
) -> None:
    bronze, silver = str(tmp_path / "bronze"), str(tmp_path / "silver")
    write = {"enable_stable_row_ids": True} if row_ids else {}
    ds = s3ddb.write_dataset(
        pa.table({"id": pa.array(range(6), pa.int64()), "v": [f"a{i}" for i in range(6)]}),
        bronze, max_rows_per_file=2, **write,
    )  # fmt: skip
    s3ddb.write_dataset(ds.to_table().slice(0, 0), silver)
    ds.update({"v": "'b'"}, where="id = 4")
    ds.delete("id = 1")
    checkpoint = tmp_path / "checkpoint"
    # One version per batch: every batch a whole version, in order.
    assert _follow(spark, bronze, silver, checkpoint, maxFilesPerTrigger=1) == 3
    assert _sorted(silver) == _sorted(bronze)
    # The same query restarted from its checkpoint reads only what came since.
    ds = s3ddb.dataset(bronze)
    ds.insert(pa.table({"id": pa.array([1, 9], pa.int64()), "v": ["again", "new"]}))
    ds.update({"v": "'c'"}, where="id = 4 OR id = 9")
    ds.delete("id = 0")
    ds.optimize.compact_files(target_rows_per_fragment=100)
    assert _follow(spark, bronze, silver, checkpoint) == 1
    assert _sorted(silver) == _sorted(bronze)
    assert _follow(spark, bronze, silver, checkpoint) == 0  # nothing new: no batch


def test_a_feed_stream_needs_a_starting_option(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _history(uri)
    reader = spark.readStream.format("s3ddb").option("readChangeFeed", "true")
    query = reader.load(uri).writeStream.format("noop").trigger(availableNow=True)
    with pytest.raises(Exception, match="needs startingVersion"):
        query.option("checkpointLocation", str(tmp_path / "cp")).start().awaitTermination(120)
