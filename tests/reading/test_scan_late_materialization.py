"""How a filtered scan reads: the filter's columns first and the others only for row
groups with a match (late materialization) while row groups without a match turn up,
every column in one pass while nearly every row group matches; and a read that
finishes ahead of its turn frees its thread for the next one.

Reads are observed by wrapping the real ``ParquetSource.read`` (and the stream's
``read_planned``): every result is still the real one, checked against the data.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import s3ddb
import s3ddb.scan.stream
from s3ddb.format.parquet_source import ParquetSource
from s3ddb.scan.visible_rows import MatchHistory

ROWS = 50  # per fragment: one row group each


def _write(uri: str, ks: list[list[int]]) -> s3ddb.Dataset:
    """One fragment (one row group) per list of ``k`` values, ids counting up."""
    start = 0
    for i, k in enumerate(ks):
        ids = list(range(start, start + len(k)))
        start += len(k)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "k": pa.array(k, pa.int32()),
                "s": [f"s{n}" for n in ids],
            }
        )
        s3ddb.write_dataset(table, uri, mode="create" if i == 0 else "append")
    return s3ddb.dataset(uri)


def _record_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The file columns of every ``ParquetSource.read``, in order (sorted per read)."""
    reads: list[tuple[str, ...]] = []
    real = ParquetSource.read

    def read(self: ParquetSource, groups: list[int], names: list[str], *a: Any) -> pa.Table:
        reads.append(tuple(sorted(names)))
        return real(self, groups, names, *a)

    monkeypatch.setattr(ParquetSource, "read", read)
    return reads


def _one_at_a_time(ds: s3ddb.Dataset, text: str | pc.Expression) -> pa.Table:
    # One read in flight at a time: the reads come in fragment order.
    return ds.scanner(filter=text, fragment_readahead=1, readahead_bytes=1).to_table()


def test_a_scan_whose_row_groups_all_match_reads_every_column_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fragments = 24
    ds = _write(str(tmp_path / "ds"), [[i % 7 for i in range(ROWS)]] * fragments)
    expected = ds.to_table().filter(pa.compute.field("k") < 3)
    reads = _record_reads(monkeypatch)
    # ``k + 0 < 3``: no condition on the statistics, so no estimate of the matches
    # (see the next test); the history alone decides.
    got = _one_at_a_time(ds, pc.add(pc.field("k"), 0) < 3)
    assert got.equals(expected)
    seen = MatchHistory.MIN_SEEN
    # Late materialization until enough row groups were seen, all with a match...
    assert reads[: 2 * seen] == [("k",), ("id", "s")] * seen
    # ...then each fragment in one read of every column.
    assert reads[2 * seen :] == [("id", "k", "s")] * (fragments - seen)


def test_a_scan_returns_to_late_materialization_when_row_groups_stop_matching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fragments whose statistics admit ``k = 5`` but hold no 5 (k is 4 or 6) after
    fragments that all match: the scan goes back to reading ``k`` alone."""
    matching, missing = 16, 24
    ks = [[5] * ROWS] * matching + [[4, 6] * (ROWS // 2)] * missing
    ds = _write(str(tmp_path / "ds"), ks)
    reads = _record_reads(monkeypatch)
    got = _one_at_a_time(ds, "k = 5")
    assert got.column("id").to_pylist() == list(range(matching * ROWS))
    assert ("id", "k", "s") in reads  # one pass while every row group matched
    # Two row groups without a match in the latest 18 seen: late materialization again,
    # and the other columns of the fragments without a match are never read.
    assert reads[-(missing - 2) :] == [("k",)] * (missing - 2)


def test_the_first_reads_take_one_pass_where_row_group_statistics_promise_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the scan has seen a row group, the statistics decide: ``k`` spread over
    0..99 in every row group promises about 5 matches of ``k < 10`` in each of 50
    rows, so even the first read takes every column at once. ``k = 5`` promises
    half a match per row group: the filter column first. ``s LIKE`` says nothing
    the statistics can estimate: the filter columns first too."""
    uri = str(tmp_path / "ds")
    table = pa.table(
        {
            "id": pa.array(range(400), pa.int64()),
            "k": pa.array([(i * 37) % 100 for i in range(400)], pa.int32()),
            "s": [f"s{n}" for n in range(400)],
        }
    )
    s3ddb.write_dataset(table, uri, max_rows_per_group=50)  # one fragment, 8 row groups
    ds = s3ddb.dataset(uri)
    reads = _record_reads(monkeypatch)
    for text, expected, first in [
        ("k < 10", pc.field("k") < 10, [("id", "k", "s")]),
        ("k = 5", pc.field("k") == 5, [("k",), ("id", "s")]),
        ("k < 10 AND s LIKE 's%'", pc.field("k") < 10, [("k", "s"), ("id",)]),
    ]:
        reads.clear()
        got = ds.scanner(filter=text, fragment_readahead=1).to_table()
        assert got.equals(table.filter(expected)), text
        assert reads == first, text


def test_history_decides_from_the_latest_row_groups() -> None:
    history = MatchHistory()
    assert history.late_materialization_pays()  # nothing seen yet
    history.record([True] * (MatchHistory.MIN_SEEN - 1))
    assert history.late_materialization_pays()
    history.record([True])
    assert not history.late_materialization_pays()
    history.record([False] * 2)  # 2 misses in 10: more than 1 in 16
    assert history.late_materialization_pays()
    history.record([True] * MatchHistory.WINDOW)  # the misses left the window
    assert not history.late_materialization_pays()


def test_a_read_finishing_ahead_of_its_turn_frees_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two threads, the first read waits until the third has started: the
    second finishing must start the third, though the first (the next result in
    order) is still running."""
    ds = _write(str(tmp_path / "ds"), [[i % 7 for i in range(ROWS)]] * 5)
    expected = ds.to_table().filter(pa.compute.field("k") < 3)
    order = [f.id for f in ds.manifest.fragments]
    third_started = threading.Event()
    first_saw_third: list[bool] = []
    real = s3ddb.scan.stream.read_planned

    def read_planned(plan: Any, *args: Any) -> pa.Table:
        index = order.index(plan.fragment.id)
        if index == 2:
            third_started.set()
        if index == 0:
            # Bounded: a scan that never starts the third read fails, it does not hang.
            first_saw_third.append(third_started.wait(timeout=10))
        return real(plan, *args)

    monkeypatch.setattr(s3ddb.scan.stream, "read_planned", read_planned)
    got = ds.scanner(filter="k < 3", fragment_readahead=2).to_table()
    assert got.equals(expected)
    assert first_saw_third == [True]


def test_a_local_scan_plans_its_first_fragment_itself_and_splits_its_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a local dataset the first fragment is planned in the consumer's thread (its
    read starts before other plans can hold the GIL), and the last fragment is read
    in a piece per CPU (its columns would otherwise end the scan on one thread each);
    the other fragments in one read each. The rows are the same as one at a time."""
    ids = pa.array(range(40), pa.int64())
    uri = str(tmp_path / "ds")
    for i in range(3):  # three fragments of four 10-row row groups
        table = pa.table({"id": pa.array(range(i * 40, (i + 1) * 40), pa.int64()), "k": ids})
        s3ddb.write_dataset(
            table, uri, mode="create" if i == 0 else "append", max_rows_per_group=10
        )
    ds = s3ddb.dataset(uri)
    expected = _one_at_a_time(ds, "k < 35")  # a match in every row group
    order = [f.id for f in ds.manifest.fragments]
    planned_in: list[tuple[int, bool]] = []
    reads: list[tuple[int, int]] = []
    real_plan, real_read = s3ddb.scan.stream.plan_fragment, s3ddb.scan.stream.read_planned

    def plan_fragment(files: Any, fragment: Any, *args: Any, **kwargs: Any) -> Any:
        here = threading.current_thread() is threading.main_thread()
        planned_in.append((order.index(fragment.id), here))
        return real_plan(files, fragment, *args, **kwargs)

    def read_planned(
        plan: Any, schema: Any, columns: Any, predicate: Any, groups: Any, *a: Any
    ) -> pa.Table:
        reads.append((order.index(plan.fragment.id), len(groups)))
        return real_read(plan, schema, columns, predicate, groups, *a)

    monkeypatch.setattr(s3ddb.scan.stream, "plan_fragment", plan_fragment)
    monkeypatch.setattr(s3ddb.scan.stream, "read_planned", read_planned)
    monkeypatch.setattr(s3ddb.scan.stream, "_TAIL_PIECES", 2)
    got = ds.scanner(filter="k < 35").to_table()
    assert got.equals(expected)
    assert sorted(planned_in) == [(0, True), (1, False), (2, False)]
    assert sorted(reads) == [(0, 4), (1, 4), (2, 2), (2, 2)]
