"""Group commits (``s3ddb.atomic``) across real processes on the local AWS endpoint:
a child killed at every failpoint of a group, groups racing groups and single
writers, and a reader taking snapshots while another process commits groups.

DynamoDB's transactions are needed: the endpoint is moto (dynalite has none, so a
group there is a typed error, see tests/groups/test_groups.py).
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit.failpoints import EXIT_CODE
from s3ddb.maintenance.verify import verify
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.proc import ROOT
from tests.support.python_children import PythonChild, start_python

pytestmark = pytest.mark.slow

FAILPOINTS_BEFORE = ["commit.after_transaction_file", "commit.after_stage_manifest"]
FAILPOINTS_AFTER = [
    "commit.after_external_put",
    "commit.after_copy_final",
    "commit.after_external_finalize",
]


def _start(*args: str, env: dict[str, str]) -> PythonChild:
    """``python -m tests.support.group_workers *args`` with ``env`` added to this
    environment (forked from a pre-imported interpreter: tests/support/python_children.py)."""
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    return start_python(["-m", "tests.support.group_workers", *args], env=full_env, cwd=ROOT)


def _finish(proc: PythonChild) -> tuple[int, list[int], str]:
    out, err = proc.communicate(timeout=300)
    acked = [int(line.split()[1]) for line in out.splitlines() if line.startswith("ok ")]
    return proc.returncode, acked, err


def _pair(aws: Any) -> tuple[str, str, dict[str, Any]]:
    so = aws.storage_options()
    prefix = f"atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    for uri in (a, b):
        s3ddb.write_dataset(
            pa.table({"id": pa.array([0], pa.int64()), "tag": ["t0"]}), uri, storage_options=so
        )
    return a, b, so


def _ids(ds: s3ddb.Dataset) -> list[int]:
    return sorted(ds.to_table(columns=["id"])["id"].to_pylist())


@pytest.mark.parametrize("point", FAILPOINTS_BEFORE + FAILPOINTS_AFTER)
def test_a_group_killed_at_any_failpoint_is_all_or_nothing(aws: Any, point: str) -> None:
    a, b, so = _pair(aws)
    proc = _start("group", a, b, "7", "1", env={**aws.env(), "S3DDB_FAILPOINTS": f"{point}=exit"})
    code, acked, err = _finish(proc)
    assert code == EXIT_CODE, err[-2000:]
    # Killed before acknowledging; steps 3-4 run on the background finalizer, which
    # may reach its failpoint before or after the group is acknowledged.
    assert acked in (([], [7]) if point in FAILPOINTS_AFTER[1:] else ([],)), err[-2000:]
    # Readers through DynamoDB see both members' versions or neither, and repair
    # a group killed after its decision.
    snap = s3ddb.snapshot([a, b], so)
    decided = point in FAILPOINTS_AFTER
    assert [_ids(snap[u]) for u in (a, b)] == [[0, 7], [0, 7]] if decided else [[0], [0]]
    for uri in (a, b):
        ds = s3ddb.dataset(uri, storage_options=so)
        assert ds.version == (2 if decided else 1)
        assert _ids(ds) == _ids(snap[uri])
        report = verify(uri, so, grace_seconds=0)
        # What a killed writer leaves behind is harmless to readers, nothing else.
        leftovers = {"unreferenced_file", "orphaned_staged_manifest"}
        assert not [p for p in report.problems if p.kind not in leftovers], report.to_json()
    # The datasets take the next group as usual.
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(pa.table({"id": pa.array([8], pa.int64()), "tag": ["t8"]}))
        tx.dataset(b).insert(pa.table({"id": pa.array([8], pa.int64()), "tag": ["t8"]}))
    expected = [0, 7, 8] if decided else [0, 8]
    assert [_ids(s3ddb.dataset(u, storage_options=so)) for u in (a, b)] == [expected, expected]


@pytest.mark.parametrize("point", ["commit.after_external_put", "commit.after_copy_final"])
def test_a_group_of_several_versions_of_one_dataset_killed_is_finished_by_readers(
    aws: Any, point: str
) -> None:
    """Two versions of one dataset claimed together, their writer killed after the
    decision: a reader of the dataset finishes both (not only the newest)."""
    a, b, so = _pair(aws)
    proc = _start("chain", a, b, "7", env={**aws.env(), "S3DDB_FAILPOINTS": f"{point}=exit"})
    code, _acked, err = _finish(proc)
    assert code == EXIT_CODE, err[-2000:]
    snap = s3ddb.snapshot([a, b], so)
    assert [snap[a].version, snap[b].version] == [3, 2]
    assert _ids(snap[a]) == [0, 7, 8] and _ids(snap[b]) == [0, 7]
    # Reading the newest version finished the one before it too.
    from s3ddb.external_store.dynamodb import DynamoDBManifestStore
    from s3ddb.io import AwsConfig
    from s3ddb.io.uri import parse_uri

    rows = DynamoDBManifestStore(TEST_TABLE, AwsConfig.from_storage_options(so))
    assert not rows.get(parse_uri(a).base_uri, 2).is_staged  # type: ignore[union-attr]
    assert _ids(s3ddb.dataset(a, version=2, storage_options=so)) == [0, 7]
    for uri in (a, b):
        report = verify(uri, so, grace_seconds=0)
        leftovers = {"unreferenced_file", "orphaned_staged_manifest"}
        assert not [p for p in report.problems if p.kind not in leftovers], report.to_json()


def test_a_reader_finishes_a_killed_groups_versions_oldest_first(aws: Any) -> None:
    """Versions 2 and 3 of one dataset claimed together, their writer killed right
    after the decision; the copy of version 2 to its final name keeps failing. The
    reader that finishes version 3 must finish 2 first, and since 2 cannot be, leave
    3 staged: a reader listing ``_versions/`` (no DynamoDB) sees a prefix of history,
    never 1 and 3 without 2. Readers (and snapshots) read 3 from its staged manifest
    meanwhile; the next reader finishes both, in order."""
    from s3ddb.external_store.dynamodb import DynamoDBManifestStore
    from s3ddb.external_store.identity import final_path_of
    from s3ddb.format.naming import parse_manifest_name
    from s3ddb.io import AwsConfig
    from s3ddb.io.uri import parse_uri

    a, b, so = _pair(aws)
    proc = _start(
        "chain", a, b, "7", env={**aws.env(), "S3DDB_FAILPOINTS": "commit.after_external_put=exit"}
    )
    code, _acked, err = _finish(proc)
    assert code == EXIT_CODE, err[-2000:]
    rows = DynamoDBManifestStore(TEST_TABLE, AwsConfig.from_storage_options(so))
    base = parse_uri(a).base_uri

    def staged() -> list[int]:
        return [r.version for r in rows.list_versions(base) if r.is_staged]

    def final_versions() -> list[int]:
        store = s3ddb.dataset(a, version=1, storage_options=so).handler.store
        names = [m.path.split("/", 1)[1] for m in store.list("_versions/")]
        return sorted(p[0] for p in map(parse_manifest_name, names) if p is not None)

    assert staged() == [2, 3]
    second = rows.get(base, 2)
    assert second is not None
    # The CopyObject request's path is the destination: bucket, dataset, final name.
    key = f"{base.split('://', 1)[1]}/{final_path_of(second.path)}"
    failing = aws.inject_fault("s3", "CopyObject", "server_error", times=100, path=key)
    try:
        ds = s3ddb.dataset(a, storage_options=so)
        assert ds.version == 3 and _ids(ds) == [0, 7, 8]  # read from its staged manifest
        snap = s3ddb.snapshot([a, b], so)  # which finishes what it reads, as readers do
        assert [snap[a].version, _ids(snap[a])] == [3, [0, 7, 8]]
        finals = final_versions()
    finally:
        aws.clear_faults()
    assert failing.triggered >= 1
    assert finals == [1], f"a version became final before the one before it: {finals}"
    assert staged() == [2, 3]
    assert _ids(s3ddb.dataset(a, storage_options=so)) == [0, 7, 8]
    assert final_versions() == [1, 2, 3]
    assert staged() == []


def test_concurrent_groups_and_single_writers_lose_nothing(aws: Any) -> None:
    a, b, so = _pair(aws)
    env = aws.env()
    procs = [
        _start("group", a, b, "1000", "6", env=env),
        _start("group", a, b, "2000", "6", env=env),
        _start("single", a, "3000", "6", env=env),
        _start("single", b, "4000", "6", env=env),
    ]
    results = [_finish(p) for p in procs]
    for code, _acked, err in results:
        assert code == 0, err[-3000:]
    groups = results[0][1] + results[1][1]
    assert len(groups) == 12
    ids_a = s3ddb.dataset(a, storage_options=so).to_table(columns=["id"])["id"].to_pylist()
    ids_b = s3ddb.dataset(b, storage_options=so).to_table(columns=["id"])["id"].to_pylist()
    # Every acknowledged row exactly once, nothing else.
    assert Counter(ids_a) == Counter([0, *groups, *results[2][1]])
    assert Counter(ids_b) == Counter([0, *groups, *results[3][1]])
    # Every group's versions are in both histories, with the same members.
    history = {
        uri: {
            v.group_id: v.group_members
            for v in s3ddb.dataset(uri, storage_options=so).versions()
            if v.group_id
        }
        for uri in (a, b)
    }
    assert len(history[a]) == 12
    assert history[a] == history[b]
    for uri in (a, b):
        report = verify(uri, so, grace_seconds=0)
        assert report.healthy, report.to_json()


def test_snapshots_never_see_half_a_group(aws: Any) -> None:
    a, b, so = _pair(aws)
    writer = _start("group", a, b, "1", "15", env=aws.env())
    seen = []
    while writer.poll() is None or not seen:
        snap = s3ddb.snapshot([a, b], so)
        ids = [_ids(snap[a]), _ids(snap[b])]
        assert ids[0] == ids[1], f"half a group: {ids}"
        seen.append(len(ids[0]))
    code, acked, err = _finish(writer)
    assert code == 0, err[-3000:]
    assert len(acked) == 15
    snap = s3ddb.snapshot([a, b], so)
    assert _ids(snap[a]) == _ids(snap[b]) == list(range(16))
