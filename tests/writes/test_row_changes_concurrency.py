"""Deletes, updates and upserts racing in real child processes on s3+ddb:// datasets
(S3 without conditional writes + DynamoDB, on the local AWS endpoint).

Every child opens the dataset (pinning version 1) and waits at a barrier until all have,
so they all read the same version and all but one commit through the conflict
resolver. The history is then checked against the goal of the resolver: each version
equals the previous one with the *logical* operation of the child that committed it
applied (predicate delete, expression update, keyed upsert), and a reader of the
plain s3:// URI, which knows nothing of DynamoDB, sees the same final table.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.io import parse_uri
from tests.support.proc import run_workers

pytestmark = pytest.mark.slow

State = dict[int, int]  # id -> v
Op = Callable[[State], State]


# --- helpers ---------------------------------------------------------------------------


def _seed(aws: Any, uri: str, rows: int, per_file: int) -> State:
    """Version 1: ids 0..rows-1 with v = 10 * id, ``per_file`` rows per fragment."""
    state = {i: 10 * i for i in range(rows)}
    table = pa.table(
        {"id": pa.array(list(state), pa.int64()), "v": pa.array(list(state.values()), pa.int64())}
    )
    ds = s3ddb.write_dataset(
        table, uri, storage_options=aws.storage_options(), max_rows_per_file=per_file
    )
    assert ds.version == 1 and len(ds.get_fragments()) == -(-rows // per_file)
    return state


def _race(aws: Any, tmp_path: Path, commands: Sequence[tuple[str, ...]]) -> list[dict[str, Any]]:
    """Run every command as a child process, all released together once each has
    pinned its read version; return their reports, in command order."""
    barrier = tmp_path / f"barrier-{uuid.uuid4().hex[:8]}"
    full = [(*c, "--barrier", str(barrier), str(len(commands))) for c in commands]
    results = run_workers(full, env=aws.env(), timeout=180)
    reports = []
    for command, r in zip(commands, results):
        assert r.returncode == 0, f"{command}: {r.stderr[-3000:]}"
        lines = r.stdout.strip().splitlines()
        assert lines, f"{command} printed nothing: {r.stderr[-3000:]}"
        reports.append(json.loads(lines[-1]))
    assert all(rep["read_version"] == 1 for rep in reports), reports
    return reports


def _state(ds: s3ddb.Dataset) -> State:
    table = ds.to_table(columns=["id", "v"])
    ids = table.column("id").to_pylist()
    dups = sorted({i for i in ids if ids.count(i) > 1}) if len(ids) != len(set(ids)) else []
    assert not dups, f"version {ds.version}: ids {dups[:10]} appear more than once"
    return dict(zip(ids, table.column("v").to_pylist()))


def _diff(expected: State, actual: State) -> str:
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    changed = sorted(i for i in set(expected) & set(actual) if expected[i] != actual[i])
    return (
        f"missing ids {missing[:10]} ({len(missing)}), unexpected ids {extra[:10]} "
        f"({len(extra)}), wrong v for {[(i, expected[i], actual[i]) for i in changed[:10]]} "
        f"({len(changed)})"
    )


def _check_history(
    aws: Any, uri: str, seed: State, reports: list[dict[str, Any]], ops: list[Op]
) -> dict[int, State]:
    """Versions are contiguous, each committing child owns one, and every version equals
    the one before with the committing child's logical operation applied. A plain
    s3:// reader sees the same final table. Returns the state of every version."""
    so = aws.storage_options()
    ds = s3ddb.dataset(uri, storage_options=so)
    by_version = {rep["version"]: op for rep, op in zip(reports, ops) if rep["committed"]}
    assert len(by_version) == sum(rep["committed"] for rep in reports), "two own one version"
    assert sorted(by_version) == list(range(2, ds.version + 1)), reports
    assert [v.version for v in ds.versions()] == list(range(1, ds.version + 1))
    states = {1: seed}
    expected = seed
    for version in range(2, ds.version + 1):
        expected = by_version[version](expected)
        actual = _state(ds.checkout_version(version))
        assert actual == expected, f"version {version}: {_diff(expected, actual)}"
        states[version] = actual
    plain = s3ddb.dataset(parse_uri(uri).object_url, storage_options=so)
    assert plain.version == ds.version
    assert _state(plain) == expected, "the plain s3:// reader sees another table"
    return states


def _delete(matches: Callable[[int, int], bool]) -> Op:
    return lambda state: {i: v for i, v in state.items() if not matches(i, v)}


def _update(matches: Callable[[int, int], bool], value: Callable[[int], int]) -> Op:
    return lambda state: {i: value(v) if matches(i, v) else v for i, v in state.items()}


def _in_range(lo: int, hi: int) -> Callable[[int, int], bool]:
    return lambda i, v: lo <= i < hi


def _residue(modulus: int, rest: int) -> Callable[[int, int], bool]:
    return lambda i, v: i % modulus == rest


def _upsert(rows: State) -> Op:
    return lambda state: {**state, **rows}


def _one_won_first_try(reports: list[dict[str, Any]]) -> None:
    """All read version 1, so exactly one child committed (version 2) without meeting
    a concurrent commit; every other one lost a version (attempts > 1) or was
    re-executed after a retryable conflict, or was refused."""
    firsts = [
        r for r in reports if r["committed"] and r["attempts"] == 1 and r["reexecutions"] == 0
    ]
    assert len(firsts) == 1 and firsts[0]["version"] == 2, reports


# --- the races -----------------------------------------------------------------------------


def test_disjoint_concurrent_deletes_all_land(aws: Any, ddb_uri: str, tmp_path: Path) -> None:
    # 240 rows in 6 fragments of 40: every fragment holds 5 rows of every id % 8.
    seed = _seed(aws, ddb_uri, 240, 40)
    reports = _race(aws, tmp_path, [("delete", ddb_uri, f"id % 8 = {w}") for w in range(6)])
    for rep in reports:
        assert rep["outcome"] == "ok" and rep["committed"], rep
        assert rep["num_deleted_rows"] == 30, rep
    _one_won_first_try(reports)
    ops = [_delete(_residue(8, w)) for w in range(6)]
    states = _check_history(aws, ddb_uri, seed, reports, ops)
    assert max(states) == 7
    assert states[7] == {i: 10 * i for i in range(240) if i % 8 >= 6}


def test_overlapping_concurrent_deletes_never_resurrect_a_row(
    aws: Any, ddb_uri: str, tmp_path: Path
) -> None:
    # Ranges [30w, 30w + 50) overlap their neighbours; two of them cover a whole
    # fragment (40..79, 120..159), which that delete removes outright.
    seed = _seed(aws, ddb_uri, 240, 40)
    ranges = [(30 * w, 30 * w + 50) for w in range(5)]
    commands = [("delete", ddb_uri, f"id >= {lo} AND id < {hi}") for lo, hi in ranges]
    reports = _race(aws, tmp_path, commands)
    for rep in reports:
        assert rep["outcome"] == "ok" and rep["committed"], rep
    _one_won_first_try(reports)
    ops = [_delete(_in_range(lo, hi)) for lo, hi in ranges]
    states = _check_history(aws, ddb_uri, seed, reports, ops)
    for version in range(2, max(states) + 1):
        gone = set(states[version - 1]) - set(states[version])
        later = [v for v in states if v >= version and gone & set(states[v])]
        assert not later, f"rows deleted by version {version} reappear in versions {later}"
    for rep, (lo, hi) in zip(reports, ranges):
        before = states[rep["version"] - 1]
        landed = sum(lo <= i < hi for i in before)
        assert rep["num_deleted_rows"] == landed, (rep, landed)
    assert states[max(states)] == {i: 10 * i for i in range(170, 240)}


def test_concurrent_upserts_of_one_key_leave_one_row(
    aws: Any, ddb_uri: str, tmp_path: Path
) -> None:
    seed = _seed(aws, ddb_uri, 120, 40)
    workers = range(6)
    commands = [
        ("upsert", ddb_uri, "1000", str(100 + w), "--private", f"{2000 + w}:{w}") for w in workers
    ]
    reports = _race(aws, tmp_path, commands)
    for rep in reports:
        assert rep["outcome"] == "ok" and rep["committed"], rep
    _one_won_first_try(reports)
    inserted_shared = [r for r in reports if r["num_inserted_rows"] == 2]
    assert len(inserted_shared) == 1 and inserted_shared[0]["num_updated_rows"] == 0, reports
    others = [r for r in reports if r is not inserted_shared[0]]
    assert all(r["num_inserted_rows"] == 1 and r["num_updated_rows"] == 1 for r in others)
    # Each planned on version 1, where key 1000 was absent: landing that plan after
    # another insert of the key would duplicate it, so each was re-executed.
    assert all(r["reexecutions"] >= 1 for r in others), reports
    ops = [_upsert({1000: 100 + w, 2000 + w: w}) for w in workers]
    states = _check_history(aws, ddb_uri, seed, reports, ops)
    last = max(workers, key=lambda w: reports[w]["version"])
    final = states[max(states)]
    assert final[1000] == 100 + last, "the value of the last commit wins"
    assert final == {**seed, 1000: 100 + last, **{2000 + w: w for w in workers}}
    final_ds = s3ddb.dataset(ddb_uri, storage_options=aws.storage_options())
    assert final_ds.count_rows("id = 1000") == 1


def test_update_racing_a_delete_of_the_same_rows_never_resurrects_them(
    aws: Any, ddb_uri: str, tmp_path: Path
) -> None:
    # Three (update, delete) pairs, each on its own range of 50 ids; the ranges share
    # fragments (of 40 rows) with each other and with untouched rows.
    seed = _seed(aws, ddb_uri, 180, 40)
    ranges = [(60 * p, 60 * p + 50) for p in range(3)]
    modes = ["rows", "columns", "auto"]
    commands: list[tuple[str, ...]] = []
    ops: list[Op] = []
    for (lo, hi), mode in zip(ranges, modes):
        where = f"id >= {lo} AND id < {hi}"
        commands.append(("update", ddb_uri, "v", "v + 1000", where, "--rewrite", mode))
        ops.append(_update(_in_range(lo, hi), lambda v: v + 1000))
        commands.append(("delete", ddb_uri, where))
        ops.append(_delete(_in_range(lo, hi)))
    reports = _race(aws, tmp_path, commands)
    for rep in reports:
        assert rep["outcome"] == "ok", rep
    _one_won_first_try(reports)
    states = _check_history(aws, ddb_uri, seed, reports, ops)
    orders = []
    for p, (lo, hi) in enumerate(ranges):
        update, delete = reports[2 * p], reports[2 * p + 1]
        assert delete["committed"], delete
        in_range = [
            v for v in states if v >= delete["version"] and any(lo <= i < hi for i in states[v])
        ]
        assert not in_range, f"rows {lo}..{hi - 1} are back in versions {in_range}"
        if update["committed"] and update["version"] < delete["version"]:
            orders.append("update first")
            assert update["num_rows_updated"] == 50 and delete["num_deleted_rows"] == 50
        else:
            orders.append("delete first")
            assert not update["committed"] and update["num_rows_updated"] == 0, update
    print("orders:", orders)
    outside = {i: v for i, v in seed.items() if not any(lo <= i < hi for lo, hi in ranges)}
    assert states[max(states)] == outside


def test_concurrent_increments_of_one_row_are_all_applied(
    aws: Any, ddb_uri: str, tmp_path: Path
) -> None:
    seed = _seed(aws, ddb_uri, 80, 40)
    commands = [
        ("update", ddb_uri, "v", "v + 1", "id = 7", "--rewrite", mode)
        for mode in ("rows", "columns", "rows", "columns")
    ]
    reports = _race(aws, tmp_path, commands)
    for rep in reports:
        assert rep["outcome"] == "ok" and rep["committed"] and rep["num_rows_updated"] == 1, rep
    _one_won_first_try(reports)
    # Landing a plan made on version 1 after another increment would lose that one.
    assert sorted(r["reexecutions"] >= 1 for r in reports) == [False, True, True, True]
    increment = _update(lambda i, v: i == 7, lambda v: v + 1)
    states = _check_history(aws, ddb_uri, seed, reports, [increment] * 4)
    assert [states[v][7] for v in sorted(states)] == [70, 71, 72, 73, 74]
    assert states[5] == {**seed, 7: 74}


def test_concurrent_increments_without_retries_lose_nothing(
    aws: Any, ddb_uri: str, tmp_path: Path
) -> None:
    seed = _seed(aws, ddb_uri, 80, 40)
    commands = [
        ("update", ddb_uri, "v", "v + 1", "id = 7", "--rewrite", mode, "--retries", "0")
        for mode in ("rows", "columns", "rows", "columns")
    ]
    reports = _race(aws, tmp_path, commands)
    ok = [r for r in reports if r["outcome"] == "ok"]
    refused = [r for r in reports if r["outcome"] != "ok"]
    assert all(r["committed"] for r in ok)
    assert all(
        r["outcome"] == "RetryableCommitConflictError" and not r["committed"] for r in refused
    ), refused
    # All read version 1: the first commit changed the row the others read.
    assert len(ok) == 1, reports
    _one_won_first_try(reports)
    increment = _update(lambda i, v: i == 7, lambda v: v + 1)
    states = _check_history(aws, ddb_uri, seed, reports, [increment] * 4)
    assert states[max(states)] == {**seed, 7: 70 + len(ok)}


# --- crashes -----------------------------------------------------------------------------

BEFORE_DECISION = ["commit.after_transaction_file", "commit.after_stage_manifest"]
AFTER_DECISION = [
    "commit.after_external_put",
    "commit.after_copy_final",
    "commit.after_external_finalize",
]


@pytest.mark.parametrize("point", BEFORE_DECISION + AFTER_DECISION)
def test_update_crashing_mid_commit_is_all_or_nothing(aws: Any, ddb_uri: str, point: str) -> None:
    """An update (deletion files + new fragments) killed at each step of the commit is
    either wholly visible (its version was decided in DynamoDB) or not at all, and a
    writer that read the version before it still lands with the serial result."""
    from s3ddb.commit.failpoints import EXIT_CODE

    so = aws.storage_options()
    state = _seed(aws, ddb_uri, rows=12, per_file=4)
    stale = s3ddb.dataset(ddb_uri, storage_options=so)  # pinned before the crash
    [crashed] = run_workers(
        [("update", ddb_uri, "v", "v + 1000", "id < 6", "--rewrite", "rows")],
        env={**aws.env(), "S3DDB_FAILPOINTS": f"{point}=exit"},
    )
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-2000:]
    decided = point in AFTER_DECISION
    updated = {i: v + 1000 if i < 6 else v for i, v in state.items()}

    ds = s3ddb.dataset(ddb_uri, storage_options=so)  # finalizes a decided version
    assert ds.version == (2 if decided else 1)
    assert _state(ds) == (updated if decided else state)
    assert _state(s3ddb.dataset(parse_uri(ddb_uri).object_url, storage_options=so)) == _state(ds)

    # The writer that read version 1 deletes ids < 3: after a decided update those rows
    # live in a new fragment, and the delete must still remove them (as if run second).
    result = stale.delete("id < 3")
    expected = {i: v for i, v in (updated if decided else state).items() if i >= 3}
    assert result == {"num_deleted_rows": 3}
    assert stale.version == ds.version + 1
    assert _state(s3ddb.dataset(ddb_uri, storage_options=so)) == expected
