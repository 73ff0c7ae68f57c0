"""Streaming queries killed with SIGKILL between a batch's output and Spark's commit of
that batch, then restarted from their checkpoints (here, in the tests' session).

A separate Spark application (tests/support/stream_app.py) runs two queries at once,
each one fragment or one version per batch, and holds each after its batch 1 (batch 0
committed): a stream of appends on the local endpoint into per-batch Parquet folders,
and a change-feed stream of a local dataset merged into a copy. Once both hold, the
application is killed with SIGKILL: both queries die exactly where each test needs
them, and the application's JVM, the costly part, is started once for the two tests.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.spark.test_change_feed import _follow, _sorted
from tests.spark.test_stream import _all_ids, _append, _batches, _stream
from tests.support.stream_app import run_and_kill_when_held

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@dataclass(frozen=True)
class Killed:
    """What the killed application's two queries left: the appends stream's dataset,
    storage options and folder (``checkpoint``, ``out``); the change feed's dataset,
    copy and folder, and the copy's version before the kill."""

    uri: str
    opts: dict[str, str]
    appends: Path
    bronze: str
    silver: str
    feed: Path


@pytest.fixture(scope="module")
def killed(aws: Any, tmp_path_factory: pytest.TempPathFactory) -> Killed:
    appends, feed = tmp_path_factory.mktemp("appends"), tmp_path_factory.mktemp("feed")
    # The appends stream: six versions of 10 rows, one fragment per batch.
    opts = dict(aws.storage_options())
    uri = f"s3+ddb://{TEST_BUCKET}/spark-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    for i in range(6):
        _append(uri, opts, i * 10)
    # The change feed: versions 1-4 of a dataset with stable row ids, one per batch.
    bronze, silver = str(feed / "bronze"), str(feed / "silver")
    ds = s3ddb.write_dataset(
        pa.table({"id": pa.array(range(6), pa.int64()), "v": [f"a{i}" for i in range(6)]}),
        bronze, max_rows_per_file=2, enable_stable_row_ids=True,
    )  # fmt: skip
    s3ddb.write_dataset(ds.to_table().slice(0, 0), silver)
    ds.delete("id = 1")  # version 2
    ds.update({"v": "'b'"}, where="id = 4")  # 3
    ds.insert(pa.table({"id": pa.array([7], pa.int64()), "v": ["new"]}))  # 4
    run_and_kill_when_held([
        {"uri": uri, "checkpoint": str(appends / "checkpoint"), "out": str(appends / "out"),
         "options": dict(opts, startingVersion="1", maxFilesPerTrigger="1"), "hold_batch": 1},
        {"uri": bronze, "checkpoint": str(feed / "checkpoint"), "out": str(feed / "out"),
         "options": {"readChangeFeed": "true", "startingVersion": "1", "maxFilesPerTrigger": "1"},
         "hold_batch": 1, "merge_into": silver},
    ])  # fmt: skip
    return Killed(uri, opts, appends, bronze, silver, feed)


def test_exactly_once_across_a_sigkill_and_restart(spark: Any, killed: Killed) -> None:
    """The appends stream was killed after writing batch 1 (batch 0 committed) but
    before Spark committed it; the query restarted from its checkpoint replays batch 1
    and goes on."""
    uri, opts, where = killed.uri, killed.opts, killed.appends
    assert _batches(where)[1] == list(range(10, 20))
    commits = where / "checkpoint" / "commits"
    assert (commits / "0").exists(), "batch 0 was committed"
    assert not (commits / "1").exists(), "killed before Spark committed batch 1"
    (where / "out" / "held").unlink()
    _append(uri, opts, 60)
    # Restarted without the limit: batch 1 is replayed from its logged offsets (the
    # fragment the killed attempt read, not a re-plan under the new options), then
    # one batch takes the rest, rather than one micro-batch per fragment.
    _stream(spark, uri, opts, where, startingVersion=1)
    batches = _batches(where)
    assert batches[1] == list(range(10, 20)), "the replay read what the first attempt read"
    assert batches[2] == list(range(20, 70)), "then the rest, once"
    assert _all_ids(where) == list(range(70)), "no row missing or repeated"


def test_a_copy_kept_from_the_feed_survives_a_sigkill_between_merge_and_spark_commit(
    spark: Any, killed: Killed
) -> None:
    """The change-feed stream was killed after merging batch 1 (batch 0 committed) but
    before Spark committed it; the query restarted from its checkpoint replays batch 1,
    whose merge commits nothing (merge_batches recorded it), and goes on."""
    bronze, silver, checkpoint = killed.bronze, killed.silver, killed.feed / "checkpoint"
    commits = checkpoint / "commits"
    assert (commits / "0").exists() and not (commits / "1").exists(), "killed before the commit"
    merged = s3ddb.dataset(silver).version
    # Batch 1 (bronze version 2, the delete) is merged: silver lacks id 1 already.
    assert 1 not in s3ddb.dataset(silver).to_table()["id"].to_pylist()
    ds = s3ddb.dataset(bronze)
    ds.update({"v": "'c'"}, where="id = 4 OR id = 7")
    ds.delete("id = 0")
    # Restarted without the limit: batch 1 is replayed from its logged offsets, then
    # one batch takes versions 3-6 (one micro-batch, not four: each is a merge).
    assert _follow(spark, bronze, silver, checkpoint) == 2
    assert _sorted(silver) == _sorted(bronze)
    # The replayed batch 1 committed nothing; batch 2 one merge.
    assert s3ddb.dataset(silver).version == merged + 1
