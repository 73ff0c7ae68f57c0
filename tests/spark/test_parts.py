"""The Spark integration's parts without a JVM: options, pushed filters, row-group
pruning, and the write's commit/abort contract on the local endpoint."""

from __future__ import annotations

import datetime as dt
import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import CommitStateUnknownError, InvalidInputError, RetryableCommitConflictError
from s3ddb.format import layout
from s3ddb.scan import ColumnStats, read_visible_rows
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support import storage

pytest.importorskip("pyspark")

from pyspark.sql import datasource as sds
from pyspark.sql.types import LongType, StringType, StructField, StructType

from s3ddb.spark_ext import _write
from s3ddb.spark_ext._filters import Condition, split_filters
from s3ddb.spark_ext._options import SourceOptions

ROOT = Path(__file__).resolve().parents[2]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("k", pa.int32()),
        pa.field("s", pa.string()),
        pa.field("x", pa.float64()),
        pa.field("d", pa.date32()),
        pa.field("t", pa.timestamp("us", tz="UTC")),
    ]
)


# --- options ------------------------------------------------------------------------


def test_options_split_into_s3ddb_settings_and_storage_options() -> None:
    parsed = SourceOptions.parse(
        {
            "path": "s3+ddb://bucket/p?ddbTableName=t",
            "Version": "3",
            "region": "eu-west-1",
            "maxRowsPerFile": "10",
            "checkpointLocation": "/cp",
        }
    )
    assert parsed.version == 3
    assert parsed.max_rows_per_file == 10
    assert parsed.storage_options == {"region": "eu-west-1"}
    assert parsed.stream_id and parsed.stream_id.startswith("checkpoint-")
    assert SourceOptions.parse({"path": "/x", "checkpointLocation": "/cp"}).stream_id == (
        parsed.stream_id
    ), "a restarted query finds its stream id again"


def test_sparks_name_for_the_file_cap_is_taken_too() -> None:
    assert SourceOptions.parse({"path": "/x", "maxRecordsPerFile": "7"}).max_rows_per_file == 7
    both = {"path": "/x", "maxRecordsPerFile": "7", "maxRowsPerFile": "7"}
    assert SourceOptions.parse(both).max_rows_per_file == 7
    assert SourceOptions.parse({"path": "/x"}).storage_options == {}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs a dataset URI"),
        ({"path": "/x", "regoin": "eu-west-1"}, "regoin"),
        ({"path": "/x", "version": "two"}, "version must be an integer"),
        ({"path": "/x", "version": "0"}, "version must be >= 1"),
        ({"path": "/x", "version": "1", "tag": "a"}, "give one of version, tag, timestamp"),
        ({"path": "/x", "maxRowsPerFile": "5", "maxRecordsPerFile": "6"}, "differ: '5' and '6'"),
        ({"path": "/x", "maxRecordsPerFile": "0"}, "maxRowsPerFile must be >= 1"),
        ({"path": "/x", "pushFilters": "maybe"}, "pushFilters must be true or false"),
    ],
)
def test_bad_options_are_refused_with_what_is_wrong(options: dict, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        SourceOptions.parse(options)


# --- pushed filters -----------------------------------------------------------------


def test_filters_s3ddb_evaluates_exactly_are_taken_the_rest_go_back() -> None:
    taken = [
        sds.EqualTo(("id",), 5),
        sds.GreaterThan(("k",), 1),
        sds.LessThanOrEqual(("s",), "m"),
        sds.In(("k",), (1, 2, None)),
        sds.IsNull(("s",)),
        sds.IsNotNull(("id",)),
        sds.Not(sds.IsNull(("k",))),
        sds.Not(sds.EqualTo(("k",), 4)),
        sds.StringStartsWith(("s",), "ab"),
        sds.EqualNullSafe(("k",), None),
        sds.GreaterThanOrEqual(("d",), dt.date(2026, 1, 1)),
    ]
    rejected = [
        sds.GreaterThan(("x",), 1.5),  # NaN orders differently in Spark and Arrow
        sds.LessThan(("t",), dt.datetime(2026, 1, 1)),  # time zones
        sds.EqualTo(("id",), "five"),  # a value of another type
        sds.EqualTo(("k",), 2**40),  # does not fit int32
        sds.EqualTo(("nested", "field"), 1),
        sds.StringContains(("s",), "b"),
        sds.Not(sds.GreaterThan(("k",), 1)),
    ]
    pushed, back = split_filters(taken + rejected, SCHEMA)
    assert len(pushed.conditions) == len(taken)
    assert back == rejected
    table = pa.table(
        {
            "id": pa.array([5, 6], pa.int64()),
            "k": pa.array([2, None], pa.int32()),
            "s": ["abc", None],
            "x": [1.0, 2.0],
            "d": pa.array([dt.date(2026, 2, 1)] * 2),
            "t": pa.array([0, 0], pa.timestamp("us", tz="UTC")),
        }
    )
    expr = pushed.expression()
    assert expr is not None
    # Row 0 fails IS NULL(s); row 1 fails id = 5: nothing matches all of them.
    assert table.filter(expr).num_rows == 0


@pytest.mark.parametrize(
    ("condition", "lo", "hi", "nulls", "expected"),
    [
        (Condition("eq", "k", 5), 1, 4, 0, False),
        (Condition("eq", "k", 4), 1, 4, 0, True),
        (Condition("gt", "k", 4), 1, 4, 0, False),
        (Condition("ge", "k", 4), 1, 4, 0, True),
        (Condition("lt", "k", 1), 1, 4, 0, False),
        (Condition("le", "k", 1), 1, 4, 0, True),
        (Condition("in", "k", values=(0, 9)), 1, 4, 0, False),
        (Condition("in", "k", values=(0, 3)), 1, 4, 0, True),
        (Condition("is_null", "k"), 1, 4, 0, False),
        (Condition("is_null", "k"), 1, 4, 2, True),
        (Condition("eq", "k", 2), None, None, 10, False),  # all NULL
        (Condition("starts_with", "s", "ab"), "ac", "az", 0, False),
        (Condition("starts_with", "s", "ab"), "aa", "az", 0, True),
        (Condition("ne", "k", 2), 2, 2, 0, True),  # never prunes
    ],
)
def test_row_group_statistics_rule_out_only_what_cannot_match(
    condition: Condition, lo: Any, hi: Any, nulls: int, expected: bool
) -> None:
    assert condition.may_match(ColumnStats(lo, hi, nulls, 10), 10) is expected
    assert condition.may_match(None, 10) is True


def test_pruned_reads_skip_row_groups_and_keep_deletions(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    n = 300_000  # several row groups of 64Ki rows
    table = pa.table(
        {"id": pa.array(range(n), pa.int64()), "k": pa.array([i % 7 for i in range(n)], pa.int32())}
    )
    ds = s3ddb.write_dataset(table, uri)
    ds.delete("id % 1000 = 1")
    fragment = ds.get_fragments()[0]
    store = ds.handler.store
    pushed, _ = split_filters([sds.GreaterThanOrEqual(("id",), 250_001)], table.schema)
    seen: list[int] = []

    def counting(stats: Any, rows: int) -> bool:
        keep = pushed.may_match(stats, rows)
        seen.append(keep)
        return keep

    pruned = read_visible_rows(
        store, fragment, ds.manifest.schema, ["id", "k"], pushed.expression(), counting
    )
    # First the fragment's statistics from the manifest (they admit it), then its five
    # row groups: only the last two are read.
    assert seen[0] is True
    assert len(seen[1:]) == 5 and seen[1:].count(True) == 2, "only the last two row groups"
    assert pruned == ds.to_table(filter="id >= 250001")
    assert 250_001 not in pruned.column("id").to_pylist(), "deleted rows stay deleted"
    none = read_visible_rows(
        store, fragment, ds.manifest.schema, ["id"], pc_false(), lambda s, r: False
    )
    assert none.num_rows == 0 and none.schema.names == ["id"]


def pc_false() -> Any:
    import pyarrow.compute as pc

    return pc.scalar(False)


# --- the write's commit and abort ---------------------------------------------------


@pytest.fixture
def uri(aws: Any) -> str:
    return f"s3+ddb://{TEST_BUCKET}/parts-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"


SPARK_SCHEMA = StructType([StructField("id", LongType(), False), StructField("s", StringType())])


def _planned(uri: str, opts: dict) -> tuple[_write.WritePlan, list[Any]]:
    s3ddb.write_dataset(pa.table({"id": pa.array([0], pa.int64()), "s": ["a"]}), uri,
                        mode="append", storage_options=opts)  # fmt: skip
    plan = _write.WritePlan.make(SourceOptions.parse({"path": uri, **opts}), SPARK_SCHEMA, False)
    batch = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "s": ["b", "c"]})
    return plan, [_write.write_task(plan, iter([batch])), None]


def _data_files(uri: str, opts: dict) -> set[str]:
    return {p for p in storage.objects(uri, opts) if p.startswith(layout.DATA_DIR)}


def test_abort_after_a_failed_task_deletes_the_written_files(aws: Any, uri: str) -> None:
    opts = aws.storage_options()
    plan, messages = _planned(uri, opts)
    assert len(_data_files(uri, opts)) == 2, "the dataset's file and the task's"
    _write.abort_write(plan, messages)  # Spark never called commit()
    assert len(_data_files(uri, opts)) == 1
    assert s3ddb.dataset(uri, storage_options=opts).count_rows() == 1
    assert storage.orphans(uri, opts) == set()


def test_abort_after_a_definitely_failed_commit_deletes(aws: Any, uri: str) -> None:
    opts = aws.storage_options()
    plan, messages = _planned(uri, opts)
    s3ddb.write_dataset(pa.table({"id": pa.array([9], pa.int64()), "s": ["z"]}), uri,
                        mode="overwrite", storage_options=opts)  # fmt: skip
    with pytest.raises(RetryableCommitConflictError):
        _write.commit_write(plan, messages)
    _write.abort_write(plan, messages)
    assert storage.orphans(uri, opts) == set()
    assert s3ddb.dataset(uri, storage_options=opts).to_table().column("id").to_pylist() == [9]


def test_abort_keeps_files_when_the_outcome_is_unknown(aws: Any, uri: str) -> None:
    opts = aws.storage_options()
    plan, messages = _planned(uri, opts)
    written = _data_files(uri, opts)
    # The claim lands but its response is lost, and every request after it fails:
    # the commit cannot learn whether it landed.
    lost = aws.inject_fault("dynamodb", "TransactWriteItems", "apply_then_drop")
    aws.inject_fault("dynamodb", "*", "server_error", times=10_000, after=lost)
    try:
        with pytest.raises(CommitStateUnknownError):
            _write.commit_write(plan, messages)
    finally:
        aws.clear_faults()
    _write.abort_write(plan, messages)
    assert _data_files(uri, opts) == written, "abort kept every file"
    ds = s3ddb.dataset(uri, storage_options=opts)
    assert sorted(ds.to_table().column("id").to_pylist()) == [0, 1, 2], "it had landed"


def test_abort_keeps_files_when_the_commit_worker_died_midway(
    aws: Any, uri: str, tmp_path: Path
) -> None:
    opts = aws.storage_options()
    plan, messages = _planned(uri, opts)
    written = _data_files(uri, opts)
    state = tmp_path / "plan.pickle"
    state.write_bytes(pickle.dumps((plan, messages)))
    code = (
        "import pickle, sys; from s3ddb.spark_ext import _write; "
        "plan, messages = pickle.load(open(sys.argv[1], 'rb')); "
        "_write.commit_write(plan, messages)"
    )
    env = dict(os.environ, S3DDB_FAILPOINTS="commit.after_external_put=exit",
               PYTHONPATH=str(ROOT))  # fmt: skip
    child = subprocess.run([sys.executable, "-c", code, str(state)], env=env, timeout=120)
    assert child.returncode == 86, "the commit worker crashed right after claiming"
    _write.abort_write(plan, messages)
    assert _data_files(uri, opts) == written
    ds = s3ddb.dataset(uri, storage_options=opts)  # the reader finishes the commit
    assert sorted(ds.to_table().column("id").to_pylist()) == [0, 1, 2]


def test_abort_keeps_files_when_the_commit_was_interrupted_after_the_claim(
    aws: Any, uri: str, tmp_path: Path
) -> None:
    """A KeyboardInterrupt in the commit worker right after the claim landed: the
    commit was recorded as failed, and abort deleted the files of a landed version."""
    opts = aws.storage_options()
    plan, messages = _planned(uri, opts)
    written = _data_files(uri, opts)
    state = tmp_path / "plan.pickle"
    state.write_bytes(pickle.dumps((plan, messages)))
    code = "\n".join(
        [
            "import pickle, sys",
            "from s3ddb.commit import external",
            "from s3ddb.spark_ext import _write",
            "def interrupt(name):",
            "    if name == 'commit.after_external_put':",
            "        raise KeyboardInterrupt",
            "external.failpoint = interrupt",
            "plan, messages = pickle.load(open(sys.argv[1], 'rb'))",
            "_write.commit_write(plan, messages)",
        ]
    )
    child = subprocess.run(
        [sys.executable, "-c", code, str(state)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode != 0 and "KeyboardInterrupt" in child.stderr, child.stderr[-2000:]
    assert _write.read_outcome(plan.write_id) == "unknown"
    _write.abort_write(plan, messages)
    assert _data_files(uri, opts) == written, "abort kept every file"
    ds = s3ddb.dataset(uri, storage_options=opts)  # the reader finishes the commit
    assert sorted(ds.to_table().column("id").to_pylist()) == [0, 1, 2]


def test_a_value_spark_cannot_hold_is_a_typed_error_naming_the_column() -> None:
    from s3ddb.errors import SchemaMismatchError
    from s3ddb.spark_ext._types import cast_for_spark

    target = pa.schema([pa.field("at", pa.timestamp("us", tz="UTC"))])
    whole = pa.table({"at": pa.array([1_000, 2_000], pa.timestamp("ns", tz="UTC"))})
    assert cast_for_spark(whole, target)["at"].to_pylist() == [
        v.as_py() for v in whole["at"].cast(pa.timestamp("us", tz="UTC"))
    ]
    nanos = pa.table({"at": pa.array([1_001], pa.timestamp("ns", tz="UTC"))})
    with pytest.raises(SchemaMismatchError, match=r"column 'at'.*microseconds"):
        cast_for_spark(nanos, target)
