"""The streaming source's parts without a JVM: offsets read back from checkpoints,
options, and which versions emit which fragments, on local datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import (
    InvalidInputError,
    SchemaMismatchError,
    StreamChangeCommitError,
    VersionNotFoundError,
)

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles
from pyspark.sql.types import LongType, StringType, StructField, StructType

from s3ddb.spark_ext.stream_plan import StreamOffset, StreamPlanner, fragment_bytes
from s3ddb.spark_ext.stream_source import S3DDBStreamReader, StreamOptions

SCHEMA = StructType([StructField("id", LongType(), False), StructField("v", StringType())])


def _table(start: int, n: int = 10) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids]})


def _at(offset: dict[str, Any]) -> StreamOffset:
    """An offset the reader returned (equality ignores the dataset id it carries)."""
    return StreamOffset.from_json(offset, "the reader's offset")


def _appends(uri: str, count: int) -> None:
    for i in range(count):
        s3ddb.write_dataset(_table(i * 10), uri, mode="append" if i else "create")


# --- offsets ------------------------------------------------------------------------


def test_offsets_round_trip_through_json() -> None:
    offset = StreamOffset(7, snapshot=True, index=3, dataset="d-1")
    back = StreamOffset.from_json(offset.to_json(), "here")
    assert (back, back.dataset) == (offset, "d-1")
    assert list(offset.to_json()) == ["format", "version", "snapshot", "index", "dataset"]
    assert StreamOffset(3) < StreamOffset(3, index=1) < StreamOffset(4)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "must be an object"),
        ({"version": 1, "snapshot": False, "index": 0}, "format None is not 1"),
        ({"format": 2, "version": 1, "snapshot": False, "index": 0}, "format 2 is not 1"),
        ({"format": 1, "version": 0, "snapshot": False, "index": 0}, "version must be >= 1"),
        ({"format": 1, "version": "3", "snapshot": False, "index": 0}, "version must be"),
        ({"format": 1, "version": True, "snapshot": False, "index": 0}, "version must be"),
        ({"format": 1, "version": 2, "snapshot": "no", "index": 0}, "snapshot must be"),
        ({"format": 1, "version": 2, "snapshot": False, "index": -1}, "index must be"),
    ],
)
def test_a_malformed_checkpointed_offset_is_a_typed_error(data: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as caught:
        StreamOffset.from_json(data, "offsets/4 of the checkpoint")
    assert "offsets/4 of the checkpoint" in str(caught.value)


# --- options ------------------------------------------------------------------------


def test_stream_options() -> None:
    parsed = StreamOptions.parse(
        {
            "path": "/x",
            "startingVersion": "4",
            "maxFilesPerTrigger": "5",
            "maxBytesPerTrigger": "512m",
            "skipChangeCommits": "True",
            "region": "eu-west-1",
        }
    )
    assert (parsed.starting_version, parsed.max_files, parsed.max_bytes) == (4, 5, 512 << 20)
    assert parsed.skip_change_commits and parsed.source.storage_options == {"region": "eu-west-1"}
    latest = StreamOptions.parse({"path": "/x", "startingVersion": "latest"})
    assert latest.starting_latest and latest.starting_version is None
    assert StreamOptions.parse({"path": "/x", "maxBytesPerTrigger": "1g"}).max_bytes == 1 << 30


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingVersion": "1", "startingTimestamp": "2026-01-01"}, "not both"),
        ({"version": "1"}, "option version pins a batch read"),
        ({"startingVersion": "0"}, "startingVersion must be >= 1"),
        ({"startingVersion": "first"}, "startingVersion must be an integer"),
        ({"maxFilesPerTrigger": "0"}, "maxFilesPerTrigger must be >= 1"),
        ({"maxBytesPerTrigger": "lots"}, "maxBytesPerTrigger must be a size"),
        ({"skipChangeCommits": "yes"}, "skipChangeCommits must be true or false"),
        ({"startingVerison": "1"}, "startingverison"),
    ],
)
def test_bad_stream_options_fail_when_the_query_is_planned(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        StreamOptions.parse({"path": "/x", **options})


# --- which versions emit what ---------------------------------------------------------


def test_appends_are_emitted_in_version_order_within_the_limits(local_uri: str) -> None:
    _appends(local_uri, 5)
    planner = StreamPlanner(local_uri, {}, skip_change_commits=False)
    start = StreamOffset(1)
    assert planner.advance(start, 5) == StreamOffset(6)
    assert planner.advance(start, 3) == StreamOffset(4), "not past the last version given"
    assert planner.advance(start, 5, max_files=2) == StreamOffset(3)
    sizes = [fragment_bytes(planner.segment(v, False).fragments[0]) for v in (1, 2, 3)]
    assert planner.advance(start, 5, max_bytes=1) == StreamOffset(2), "at least one fragment"
    assert planner.advance(start, 5, max_bytes=sum(sizes)) == StreamOffset(4)
    assert planner.advance(start, 5, max_bytes=sum(sizes) - 1) == StreamOffset(3)
    assert planner.advance(StreamOffset(6), 5) == StreamOffset(6), "nothing new"
    emitted = [f.id for _, f in planner.between(start, StreamOffset(6))]
    ds = s3ddb.dataset(local_uri)
    assert emitted == sorted(f.id for f in ds.get_fragments())


def test_a_fragment_list_in_chunks_streams_every_appended_fragment_once(local_uri: str) -> None:
    s3ddb.write_dataset(_table(0, 1), local_uri)
    small = {"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "1"}
    s3ddb.dataset(local_uri).update_config(small)
    for i in range(5):
        s3ddb.write_dataset(_table(10 + 10 * i), local_uri, mode="append", max_rows_per_file=3)
    ds = s3ddb.dataset(local_uri)
    assert ds.manifest.format_version == 2
    planner = StreamPlanner(local_uri, {}, skip_change_commits=False)
    end = planner.advance(StreamOffset(1), ds.version)
    assert end == StreamOffset(ds.version + 1)
    emitted = [f.id for _, f in planner.between(StreamOffset(1), end)]
    assert emitted == sorted(f.id for f in ds.get_fragments())


def test_a_position_inside_a_version_splits_its_fragments(local_uri: str) -> None:
    s3ddb.write_dataset(_table(0, 100), local_uri, max_rows_per_file=10)
    planner = StreamPlanner(local_uri, {}, skip_change_commits=False)
    end = planner.advance(StreamOffset(1), 1, max_files=4)
    assert end == StreamOffset(1, index=4)
    first = [f.id for _, f in planner.between(StreamOffset(1), end)]
    rest = [f.id for _, f in planner.between(end, planner.advance(end, 1))]
    assert len(first) == 4 and len(rest) == 6
    assert first + rest == [f.id for f in s3ddb.dataset(local_uri).get_fragments()]
    # Asked again (a replay), by a new planner: the same fragments.
    again = StreamPlanner(local_uri, {}, skip_change_commits=False)
    assert [f.id for _, f in again.between(StreamOffset(1), end)] == first


def test_the_snapshot_segment_has_the_visible_fragments_of_its_version(local_uri: str) -> None:
    _appends(local_uri, 3)
    ds = s3ddb.dataset(local_uri)
    ds.delete("id < 10")  # removes the first fragment entirely
    ds = s3ddb.dataset(local_uri)
    ds.delete("id = 15")  # a deletion file on the second
    planner = StreamPlanner(local_uri, {}, skip_change_commits=False)
    snapshot = planner.segment(5, snapshot=True)
    assert snapshot.fragments == tuple(s3ddb.dataset(local_uri).get_fragments())
    assert snapshot.fragments[0].deletion_file is not None
    assert planner.advance(StreamOffset(5, snapshot=True), 5) == StreamOffset(6)


def test_change_commits_stop_or_are_skipped(local_uri: str) -> None:
    _appends(local_uri, 2)
    s3ddb.dataset(local_uri).delete("id = 3")  # version 3
    s3ddb.write_dataset(_table(20), local_uri, mode="append")  # version 4
    strict = StreamPlanner(local_uri, {}, skip_change_commits=False)
    assert strict.advance(StreamOffset(1), 4) == StreamOffset(3), "stops before the delete"
    with pytest.raises(
        StreamChangeCommitError, match=r"version 3 of .* \(Delete\) changed 1 fragment"
    ):
        strict.advance(StreamOffset(3), 4)
    lenient = StreamPlanner(local_uri, {}, skip_change_commits=True)
    assert lenient.advance(StreamOffset(1), 4) == StreamOffset(5)
    assert len(list(lenient.between(StreamOffset(1), StreamOffset(5)))) == 3


def test_an_update_that_rewrites_columns_is_a_change_commit(local_uri: str) -> None:
    _appends(local_uri, 2)
    s3ddb.dataset(local_uri).update({"v": "'x'"}, "id = 1", rewrite="columns")
    planner = StreamPlanner(local_uri, {}, skip_change_commits=False)
    assert "changed 1 fragment" in planner.segment(3, False).change


def test_a_missing_version_is_a_clear_error(local_uri: str) -> None:
    _appends(local_uri, 2)
    planner = StreamPlanner(local_uri, {}, skip_change_commits=False)
    with pytest.raises(VersionNotFoundError, match="needs version 9 of"):
        planner.segment(9, False)


# --- the reader's offsets ------------------------------------------------------------


def test_the_reader_plans_offsets_as_spark_asks(local_uri: str, tmp_path: Path) -> None:
    _appends(local_uri, 3)
    reader = S3DDBStreamReader({"path": local_uri, "maxFilesPerTrigger": "2"}, SCHEMA)
    assert _at(reader.initialOffset()) == StreamOffset(3, snapshot=True)
    assert reader.initialOffset()["dataset"] == s3ddb.dataset(local_uri).manifest.dataset_id
    assert reader.getDefaultReadLimit() == ReadMaxFiles(2)
    start = StreamOffset(1).to_json()
    assert _at(reader.latestOffset(start, ReadMaxFiles(2))) == StreamOffset(3)
    assert _at(reader.latestOffset(start, ReadMaxBytes(1))) == StreamOffset(2)
    assert _at(reader.latestOffset(start, ReadAllAvailable())) == StreamOffset(4)
    reported = reader.reportLatestOffset()
    assert reported is not None and _at(reported) == StreamOffset(4), "after version 3"
    reader.prepareForTriggerAvailableNow()
    s3ddb.write_dataset(_table(30), local_uri, mode="append")
    assert _at(reader.latestOffset(start, ReadAllAvailable())) == StreamOffset(4), (
        "AvailableNow reads up to the version that was newest when the query started"
    )
    parts = reader.partitions(start, StreamOffset(4).to_json())
    rows = [r for p in parts for b in reader.read(p) for r in b.column("id").to_pylist()]
    assert sorted(rows) == list(range(30))
    with pytest.raises(InvalidInputError, match="dropped and re-created"):
        reader.latestOffset(StreamOffset(9).to_json(), ReadAllAvailable())
    only_bytes = S3DDBStreamReader({"path": local_uri, "maxBytesPerTrigger": "1k"}, SCHEMA)
    assert only_bytes.getDefaultReadLimit() == ReadMaxBytes(1024)


def _rows(reader: S3DDBStreamReader, start: Any, end: Any) -> list[dict[str, Any]]:
    parts = reader.partitions(start, end)
    return sorted(
        (r for p in parts for b in reader.read(p) for r in b.to_pylist()), key=lambda r: r["id"]
    )


def test_a_query_restarted_after_add_columns_reads_older_versions_with_nulls(
    local_uri: str,
) -> None:
    """The reviewer's case: a checkpoint at version 2, add_columns, restart with the
    new schema: the restarted query must go on (it failed forever), reading the
    versions from before the column with nulls in it, and later ones with values."""
    _appends(local_uri, 3)
    first = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, SCHEMA)
    start = first.initialOffset()
    checkpoint = first.latestOffset(start, ReadMaxFiles(1))
    assert _at(checkpoint) == StreamOffset(2)
    s3ddb.dataset(local_uri).add_columns({"x": "id * 2"})  # version 4
    more = _table(30).append_column("x", pa.array([2 * i for i in range(30, 40)], pa.int64()))
    s3ddb.write_dataset(more, local_uri, mode="append")  # version 5
    schema = StructType([*SCHEMA.fields, StructField("x", LongType())])
    restarted = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, schema)
    end = restarted.latestOffset(checkpoint, ReadAllAvailable())
    assert _at(end) == StreamOffset(6)
    rows = _rows(restarted, checkpoint, end)
    assert [r["id"] for r in rows] == list(range(10, 40))
    assert [r["x"] for r in rows] == [None] * 20 + [2 * i for i in range(30, 40)]
    assert rows[0]["v"] == "r10"


def test_a_renamed_column_is_the_same_column_before_and_after_a_restart(
    local_uri: str,
) -> None:
    _appends(local_uri, 2)
    running = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, SCHEMA)
    start = running.initialOffset()
    s3ddb.dataset(local_uri).alter_columns({"path": "v", "name": "w"})  # version 3
    s3ddb.write_dataset(_table(20).rename_columns(["id", "w"]), local_uri, mode="append")
    # The running query reads the renamed column under the name it started with.
    end = running.latestOffset(start, ReadAllAvailable())
    assert _at(end) == StreamOffset(5)
    assert [r["v"] for r in _rows(running, start, end)] == [f"r{i}" for i in range(30)]
    # Restarted with the new name, it reads the older versions' column under it.
    renamed = StructType([SCHEMA.fields[0], StructField("w", StringType())])
    restarted = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, renamed)
    assert [r["w"] for r in _rows(restarted, start, end)] == [f"r{i}" for i in range(30)]


def test_a_column_dropped_while_the_query_runs_stops_it_before_the_version(
    local_uri: str,
) -> None:
    _appends(local_uri, 2)
    reader = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, SCHEMA)
    start = reader.initialOffset()  # the query's columns: id, v (as of version 2)
    s3ddb.dataset(local_uri).drop_columns(["v"])  # version 3
    s3ddb.write_dataset(_table(20).drop_columns(["v"]), local_uri, mode="append")  # 4
    end = reader.latestOffset(start, ReadAllAvailable())
    assert _at(end) == StreamOffset(4), "stops before the first version it cannot read"
    assert len(_rows(reader, start, end)) == 20, "every row before it is read"
    with pytest.raises(SchemaMismatchError, match=r"'v' .* was dropped at version 3") as caught:
        reader.latestOffset(end, ReadAllAvailable())
    assert "Restart the query (from the same checkpoint)" in str(caught.value)
    with pytest.raises(SchemaMismatchError, match="was dropped"):
        reader.partitions(start, StreamOffset(5).to_json())
    # As the message says: restarted from the checkpoint, with the new schema, it goes on.
    only_id = StructType([SCHEMA.fields[0]])
    restarted = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, only_id)
    after = restarted.latestOffset(end, ReadAllAvailable())
    assert [r["id"] for r in _rows(restarted, end, after)] == list(range(20, 30))


def test_a_type_change_stops_the_running_query_and_a_restart_reads_old_values_cast(
    local_uri: str,
) -> None:
    _appends(local_uri, 2)
    running = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, SCHEMA)
    start = running.initialOffset()
    s3ddb.dataset(local_uri).alter_columns({"path": "v", "data_type": pa.large_string()})  # 3
    s3ddb.write_dataset(_table(20), local_uri, mode="append")  # 4
    end = running.latestOffset(start, ReadAllAvailable())
    assert _at(end) == StreamOffset(4) and len(_rows(running, start, end)) == 20
    with pytest.raises(SchemaMismatchError, match=r"got a new type \(alter_columns\) at version 3"):
        running.latestOffset(end, ReadAllAvailable())
    # Restarted from a checkpoint before the change: versions 1-2 hold the old type,
    # whose every value converts to the new one exactly: read, and cast.
    restarted = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, SCHEMA)
    every = restarted.latestOffset(start, ReadAllAvailable())
    assert _at(every) == StreamOffset(5)
    rows = _rows(restarted, start, every)
    assert [(r["id"], r["v"]) for r in rows] == [(i, f"r{i}") for i in range(30)]
    # From the checkpoint after the change (every row before it was emitted): on.
    after = restarted.latestOffset(end, ReadAllAvailable())
    assert [r["id"] for r in _rows(restarted, end, after)] == list(range(20, 30))


def test_a_restart_after_a_numeric_widening_reads_old_values_cast(local_uri: str) -> None:
    table = pa.table({"id": pa.array([1, 2], pa.int64()), "n": pa.array([7, None], pa.int32())})
    s3ddb.write_dataset(table, local_uri)
    s3ddb.dataset(local_uri).alter_columns({"path": "n", "name": "m", "data_type": pa.int64()})
    s3ddb.write_dataset(
        pa.table({"id": pa.array([3], pa.int64()), "m": pa.array([2**40], pa.int64())}),
        local_uri,
        mode="append",
    )
    schema = StructType([StructField("id", LongType(), False), StructField("m", LongType())])
    reader = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, schema)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert [(r["id"], r["m"]) for r in _rows(reader, start, end)] == [
        (1, 7), (2, None), (3, 2**40)
    ]  # fmt: skip


def test_a_column_the_dataset_lacks_fails_the_first_planning(local_uri: str) -> None:
    _appends(local_uri, 1)
    schema = StructType([*SCHEMA.fields, StructField("nope", LongType())])
    with pytest.raises(SchemaMismatchError, match=r"column\(s\) \['nope'\] that version 1"):
        S3DDBStreamReader({"path": local_uri}, schema).initialOffset()


def test_a_starting_version_beyond_the_next_one_is_refused(local_uri: str) -> None:
    _appends(local_uri, 2)
    ahead = S3DDBStreamReader({"path": local_uri, "startingVersion": "3"}, SCHEMA)
    assert _at(ahead.initialOffset()) == StreamOffset(3), "the next version is fine"
    beyond = S3DDBStreamReader({"path": local_uri, "startingVersion": "4"}, SCHEMA)
    with pytest.raises(InvalidInputError, match="startingVersion 4 is beyond the newest"):
        beyond.initialOffset()


def test_a_checkpoint_of_another_dataset_at_the_same_uri_is_refused(local_uri: str) -> None:
    import shutil

    _appends(local_uri, 3)
    reader = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, SCHEMA)
    start = reader.latestOffset(reader.initialOffset(), ReadMaxFiles(1))
    shutil.rmtree(local_uri)
    _appends(local_uri, 3)  # as many versions, another dataset
    again = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, SCHEMA)
    with pytest.raises(InvalidInputError, match="dropped and re-created"):
        again.latestOffset(start, ReadAllAvailable())
    broken = dict(start, index=5)
    fresh = again.latestOffset(again.initialOffset(), ReadMaxFiles(1))
    with pytest.raises(InvalidInputError, match="past the 1 fragment"):
        again.latestOffset(dict(broken, dataset=fresh["dataset"]), ReadAllAvailable())


def test_a_dataset_re_created_while_the_query_runs_is_refused(
    local_uri: str, tmp_path: Path
) -> None:
    """The same reader (a running query) after its dataset was dropped and re-created
    with more versions: it must not read the new dataset's versions as if they
    followed the old ones."""
    import shutil

    _appends(local_uri, 3)
    # Skipping change commits, the new dataset's versions would not even fail.
    options = {"path": local_uri, "startingVersion": "1", "skipChangeCommits": "true"}
    reader = S3DDBStreamReader(options, SCHEMA)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert _at(end) == StreamOffset(4)
    assert sum(b.num_rows for p in reader.partitions(start, end) for b in reader.read(p)) == 30
    shutil.rmtree(local_uri)
    _appends(local_uri, 5)  # versions 1-5 of another dataset
    with pytest.raises(InvalidInputError, match="dropped and re-created while the query ran"):
        reader.latestOffset(end, ReadAllAvailable())


def test_a_checkpoint_copied_to_another_datasets_query_is_refused(tmp_path: Path) -> None:
    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    _appends(first, 3)
    _appends(second, 3)  # the same history, another dataset
    reader = S3DDBStreamReader({"path": first, "startingVersion": "1"}, SCHEMA)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxFiles(1))
    other = S3DDBStreamReader({"path": second, "startingVersion": "1"}, SCHEMA)
    with pytest.raises(InvalidInputError, match="checkpoint was written for dataset"):
        other.latestOffset(end, ReadAllAvailable())
    with pytest.raises(InvalidInputError, match="checkpoint was written for dataset"):
        other.partitions(start, end)


def test_a_dataset_re_created_with_as_many_versions_while_the_query_runs_is_refused(
    local_uri: str,
) -> None:
    """The re-created dataset reaches exactly the version the query had read up to:
    its offsets look in range, so only its identity tells (it stalled silently)."""
    import shutil

    _appends(local_uri, 3)
    reader = S3DDBStreamReader({"path": local_uri, "startingVersion": "1"}, SCHEMA)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert len(_rows(reader, start, end)) == 30
    reader.commit(end)
    shutil.rmtree(local_uri)
    _appends(local_uri, 3)  # versions 1-3 of another dataset
    with pytest.raises(InvalidInputError, match="dropped and re-created while the query ran"):
        reader.latestOffset(end, ReadAllAvailable())
    assert reader.reportLatestOffset() is None, "no progress figure from another dataset"


def _clean(uri: str) -> list[int]:
    import datetime as dt

    stats = s3ddb.dataset(uri).cleanup_old_versions(
        older_than=dt.timedelta(0), claim_window=dt.timedelta(0), delete_unverified=True
    )
    return list(stats.versions_removed)


@pytest.mark.parametrize(
    "option", [{"startingVersion": "3"}, {"startingTimestamp": "2000-01-01T00:00:00"}]
)
def test_a_start_at_the_oldest_kept_version_reads_its_snapshot(
    local_uri: str, option: dict[str, str]
) -> None:
    _appends(local_uri, 3)
    assert _clean(local_uri) == [1, 2]
    reader = S3DDBStreamReader({"path": local_uri, **option}, SCHEMA)
    start = reader.initialOffset()
    assert _at(start) == StreamOffset(3, snapshot=True), "version 2 is gone: its snapshot"
    end = reader.latestOffset(start, ReadAllAvailable())
    assert [r["id"] for r in _rows(reader, start, end)] == list(range(30))
    s3ddb.write_dataset(_table(30), local_uri, mode="append")
    after = reader.latestOffset(end, ReadAllAvailable())
    assert [r["id"] for r in _rows(reader, end, after)] == list(range(30, 40))


def test_a_start_before_the_oldest_kept_version_names_it(local_uri: str) -> None:
    _appends(local_uri, 3)
    _clean(local_uri)
    reader = S3DDBStreamReader({"path": local_uri, "startingVersion": "2"}, SCHEMA)
    with pytest.raises(VersionNotFoundError, match="the oldest version kept is 3"):
        reader.initialOffset()


def test_available_now_reads_the_snapshot_chosen_after_it_fixed_its_bound(
    local_uri: str,
) -> None:
    """Spark calls prepareForTriggerAvailableNow before initialOffset: a version
    committed in between is the snapshot the query starts with, and must be read."""
    _appends(local_uri, 2)
    reader = S3DDBStreamReader({"path": local_uri}, SCHEMA)
    reader.prepareForTriggerAvailableNow()  # bound: version 2
    s3ddb.write_dataset(_table(20), local_uri, mode="append")  # version 3
    start = reader.initialOffset()
    assert _at(start) == StreamOffset(3, snapshot=True)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert _at(end) == StreamOffset(4)
    assert [r["id"] for r in _rows(reader, start, end)] == list(range(30))
    s3ddb.write_dataset(_table(30), local_uri, mode="append")  # after: not this run's
    assert _at(reader.latestOffset(end, ReadAllAvailable())) == StreamOffset(4)


def _restarted_rows(uri: str, schema: StructType) -> list[dict[str, Any]]:
    reader = S3DDBStreamReader(
        {"path": uri, "startingVersion": "1", "skipChangeCommits": "true"}, schema
    )
    start = reader.initialOffset()
    return _rows(reader, start, reader.latestOffset(start, ReadAllAvailable()))


def test_an_overwrite_adding_a_column_of_a_wider_type_is_not_taken_for_a_type_change(
    local_uri: str,
) -> None:
    """An overwrite that drops ``a`` (int32) and adds ``b`` (int64): ``a``'s old values
    are not ``b``'s, whatever the types."""
    int64 = pa.int64()
    s3ddb.write_dataset(
        pa.table({"id": pa.array([1, 2], int64), "a": pa.array([7, 8], pa.int32())}), local_uri
    )
    s3ddb.write_dataset(
        pa.table({"id": pa.array([3], int64), "b": pa.array([100], int64)}),
        local_uri,
        mode="overwrite",
    )
    schema = StructType([StructField("id", LongType(), False), StructField("b", LongType())])
    with pytest.raises(SchemaMismatchError, match="replaced another column at version 2"):
        _restarted_rows(local_uri, schema)


def test_a_type_change_to_not_null_does_not_emit_the_old_nulls(local_uri: str) -> None:
    """Rows with nulls deleted, then the column made int64 NOT NULL: the versions
    before hold nulls, which the NOT NULL column cannot emit."""
    s3ddb.write_dataset(
        pa.table({"id": pa.array([1, 2], pa.int64()), "a": pa.array([7, None], pa.int32())}),
        local_uri,
    )
    s3ddb.dataset(local_uri).delete("a IS NULL")
    s3ddb.dataset(local_uri).alter_columns(
        {"path": "a", "data_type": pa.int64(), "nullable": False}
    )
    schema = StructType([StructField("id", LongType(), False), StructField("a", LongType(), False)])
    with pytest.raises(SchemaMismatchError, match="replaced another column at version 3"):
        _restarted_rows(local_uri, schema)


def test_a_change_feed_checkpoint_of_another_dataset_at_the_same_uri_is_refused(
    local_uri: str,
) -> None:
    """The change feed's reader checks an offset's dataset as the snapshot reader does
    (one check, ``StreamPlanner.checked_offset``), and refuses a snapshot reader's offset."""
    import shutil

    from s3ddb.spark_ext.change_feed_stream import S3DDBChangeFeedStreamReader

    options = {"path": local_uri, "readChangeFeed": "true", "startingVersion": "1"}
    _appends(local_uri, 3)
    reader = S3DDBChangeFeedStreamReader(options, SCHEMA)
    start = reader.initialOffset()
    assert reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    shutil.rmtree(local_uri)
    _appends(local_uri, 3)  # as many versions, another dataset
    again = S3DDBChangeFeedStreamReader(options, SCHEMA)
    with pytest.raises(InvalidInputError, match="dropped and re-created"):
        again.latestOffset(start, ReadAllAvailable())
    snapshot = S3DDBStreamReader({"path": local_uri}, SCHEMA).initialOffset()
    with pytest.raises(InvalidInputError, match="not a change-feed offset"):
        again.latestOffset(snapshot, ReadAllAvailable())
