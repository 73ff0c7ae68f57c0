"""cleanup_old_versions on a local path and on the local endpoint (DynamoDB): kept
versions and tags read back exactly, nothing of a removed version is left, and writers
committing meanwhile lose nothing."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
import s3ddb.maintenance.cleanup
import s3ddb.versions.pinned
from s3ddb.format import layout
from s3ddb.io import ObjectStore
from s3ddb.maintenance.verify import verify
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support import storage
from tests.support.endpoints import endpoint
from tests.support.python_children import start_python

# Cleanup here runs right after commits, with no writer racing it.
pytestmark = pytest.mark.usefixtures("instant_cleanup")

ROOT = Path(__file__).resolve().parents[2]
NOW = dt.timedelta(0)


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [start] * n})


@pytest.fixture(params=["local", "ddb", "seaweedfs+ddb", "seaweedfs"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any] | None]:
    """A fresh dataset and its storage options: a local path; s3+ddb:// on the local
    endpoint; on SeaweedFS (a real S3-compatible store, whose listings cleanup relies
    on) with DynamoDB on moto, and as a plain s3:// dataset (conditional puts)."""
    if request.param == "local":
        return str(tmp_path / "ds"), None
    name = f"t-{uuid.uuid4().hex[:12]}"
    if request.param == "seaweedfs":
        return f"s3://{TEST_BUCKET}/{name}", request.getfixturevalue("seaweedfs").storage_options()
    aws = endpoint(request, "moto" if request.param == "ddb" else "seaweedfs")
    return f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}", aws.storage_options()


def _orphans(uri: str, so: dict[str, Any] | None) -> set[str]:
    return {p for p in storage.orphans(uri, so) if not p.startswith(layout.TAGS_DIR)}


def _history(uri: str, so: dict[str, Any] | None) -> dict[int, pa.Table]:
    """Versions 1..7: appends, a delete, an overwrite, appends."""
    s3ddb.write_dataset(_rows(0, 10), uri, storage_options=so)  # 1
    s3ddb.write_dataset(_rows(10, 10), uri, mode="append", storage_options=so)  # 2
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.delete("id % 3 = 0")  # 3
    s3ddb.write_dataset(_rows(100, 5), uri, mode="overwrite", storage_options=so)  # 4
    s3ddb.write_dataset(_rows(200, 5), uri, mode="append", storage_options=so)  # 5
    s3ddb.dataset(uri, storage_options=so).delete("id = 201")  # 6
    s3ddb.write_dataset(_rows(300, 5), uri, mode="append", storage_options=so)  # 7
    storage.objects(uri, so)  # this process's finalizer has settled
    return {v: s3ddb.dataset(uri, v, storage_options=so).to_table() for v in range(1, 8)}


def test_cleanup_keeps_exactly_what_it_must(target: tuple[str, Any]) -> None:
    uri, so = target
    tables = _history(uri, so)
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.tags.create("audit", 2)
    before = storage.objects(uri, so)
    leftover = layout.data_file_path("crashed-writer.parquet")
    ObjectStore(uri, so).put(leftover, b"not committed")

    stats = ds.cleanup_old_versions(older_than=NOW, retain_versions=2)
    assert stats.versions_removed == [1, 3, 4, 5]
    assert leftover in storage.objects(uri, so), "young unreferenced files are kept"

    # Kept versions and the tag read back exactly.
    for version in (2, 6, 7):
        assert s3ddb.dataset(uri, version, storage_options=so).to_table() == tables[version]
    assert s3ddb.dataset(uri, "audit", storage_options=so).to_table() == tables[2]
    assert s3ddb.dataset(uri, storage_options=so).version == 7
    # Removed versions are gone, with their rows and manifests.
    for version in (1, 3, 4, 5):
        with pytest.raises(s3ddb.VersionNotFoundError):
            s3ddb.dataset(uri, version, storage_options=so)
    assert [v.version for v in ds.versions()] == [2, 6, 7]
    after = storage.objects(uri, so)
    versions_left = {p for p in after if p.startswith(layout.VERSIONS_DIR)}
    assert len(versions_left) == 3, versions_left
    assert after < before | {leftover}
    assert _orphans(uri, so) == {leftover}
    assert stats.files["manifests"] == 4 and stats.bytes_removed > 0
    if "ddbTableName=" in uri:
        assert stats.rows_removed == 4
    # verify: healthy but for the young leftover, which is within its grace period.
    report = verify(uri, so)
    assert report.healthy, report.problems

    stats = ds.cleanup_old_versions(older_than=NOW, retain_versions=2, delete_unverified=True)
    assert stats.versions_removed == [] and stats.files == {"data_files": 1}
    assert _orphans(uri, so) == set()
    assert verify(uri, so, grace_seconds=0).healthy


def test_recent_versions_are_kept_by_default(target: tuple[str, Any]) -> None:
    uri, so = target
    _history(uri, so)
    stats = s3ddb.dataset(uri, storage_options=so).cleanup_old_versions()
    assert stats.versions_removed == [] and stats.files == {}
    assert [v.version for v in s3ddb.dataset(uri, storage_options=so).versions()] == list(
        range(1, 8)
    )


def test_bad_arguments_change_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 3), uri)
    ds = s3ddb.dataset(uri)
    with pytest.raises(s3ddb.InvalidInputError):
        ds.cleanup_old_versions(older_than=dt.timedelta(days=-1))
    with pytest.raises(s3ddb.InvalidInputError):
        ds.cleanup_old_versions(retain_versions=0)


@pytest.mark.slow
@pytest.mark.parametrize("s3", ["moto", "seaweedfs"])
def test_writers_committing_during_cleanup_lose_nothing(
    s3: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On moto, and on SeaweedFS's S3 with moto's DynamoDB."""
    aws = endpoint(request, s3)
    # Writers race the cleanup here: versions go only once their successor is a few
    # seconds old (the claim window), as they would in production after ten minutes.
    window = dt.timedelta(seconds=5)
    monkeypatch.setattr(s3ddb.maintenance.cleanup, "CLAIM_WINDOW", window)
    so = aws.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/clean-race-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(_rows(0, 2), uri, storage_options=so)
    code = (
        "import sys, pyarrow as pa, s3ddb, s3ddb.versions.pinned\n"
        # The writers' fresh-base limit scaled as the window is (production: 10 s
        # against 10 min): a base older than it is caught up before a claim.
        "s3ddb.versions.pinned.FRESH_BASE_SECONDS = 1.0\n"
        "w = int(sys.argv[2])\n"
        "for i in range(12):\n"
        "    start = w * 1000 + i * 10\n"
        "    ids = pa.array(range(start, start + 10), pa.int64())\n"
        "    t = pa.table({'id': ids, 'v': [start] * 10})\n"
        "    while True:\n"
        "        try:\n"
        "            s3ddb.write_dataset(t, sys.argv[1], mode='append')\n"
        "            break\n"
        "        except s3ddb.RetryableCommitConflictError:\n"
        "            pass  # a version it checked was cleaned up: append again\n"
        "    print(start, flush=True)\n"
    )
    env = {**os.environ, **aws.env(), "PYTHONPATH": str(ROOT)}
    writers = [start_python(["-c", code, uri, str(w)], env=env) for w in (1, 2)]
    ds = s3ddb.dataset(uri, storage_options=so)
    rounds = 0
    while any(w.poll() is None for w in writers) or rounds < 2:
        ds.cleanup_old_versions(older_than=NOW, retain_versions=1)
        rounds += 1
    acknowledged = []
    for w in writers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-2000:]
        acknowledged += [int(x) for x in out.split()]
    assert len(acknowledged) == 24
    table = s3ddb.dataset(uri, storage_options=so).to_table()
    ids = sorted(table.column("id").to_pylist())
    expected = sorted([0, 1] + [s + k for s in acknowledged for k in range(10)])
    assert ids == expected, "every acknowledged row exactly once"
    # The writers are done: no claim can race this cleanup, so it needs no window
    # (rather than waiting the window out; how the window keeps versions is
    # test_a_version_goes_only_once_its_successor_is_older_than_the_claim_window's).
    ds.cleanup_old_versions(older_than=NOW, retain_versions=1, claim_window=NOW)
    assert len(ds.versions()) == 1
    assert verify(uri, so).healthy


def test_a_writer_on_an_old_base_never_claims_a_number_cleanup_freed(
    target: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, so = target
    s3ddb.write_dataset(_rows(0, 2), uri, storage_options=so)
    stale_append = s3ddb.dataset(uri, storage_options=so)  # pinned at version 1
    stale_delete = s3ddb.dataset(uri, storage_options=so)
    for start in (10, 20, 30):
        s3ddb.write_dataset(_rows(start, 2), uri, mode="append", storage_options=so)
    latest = s3ddb.dataset(uri, storage_options=so)
    latest.cleanup_old_versions(older_than=NOW, retain_versions=1)  # keeps only 4
    assert [v.version for v in latest.versions()] == [4]
    # Their base (version 1) was seen as the newest long ago: before claiming version
    # 2 — a number cleanup freed — they look for newer versions, find 2 and 3 gone, and
    # re-execute on the newest instead.
    monkeypatch.setattr(s3ddb.versions.pinned, "FRESH_BASE_SECONDS", 0.0)
    stale_append.insert(_rows(40, 2))
    assert stale_append.version == 5 and stale_append.last_conflict_retries == 1
    assert stale_delete.delete("id = 0") == {"num_deleted_rows": 1}
    assert stale_delete.version == 6
    final = s3ddb.dataset(uri, storage_options=so)
    assert [v.version for v in final.versions()] == [4, 5, 6]
    ids = sorted(final.to_table().column("id").to_pylist())
    assert ids == [1, 10, 11, 20, 21, 30, 31, 40, 41]


def test_a_version_goes_only_once_its_successor_is_older_than_the_claim_window(
    target: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, so = target
    monkeypatch.setattr(s3ddb.maintenance.cleanup, "CLAIM_WINDOW", dt.timedelta(minutes=10))
    s3ddb.write_dataset(_rows(0, 2), uri, storage_options=so)
    ds = s3ddb.write_dataset(_rows(10, 2), uri, mode="append", storage_options=so)
    # Version 2 was committed just now: a writer that saw version 1 as the newest may
    # still be claiming 2, so version 1 stays (and with it, row and number).
    assert ds.cleanup_old_versions(older_than=NOW).versions_removed == []
    assert [v.version for v in ds.versions()] == [1, 2]
    monkeypatch.setattr(s3ddb.maintenance.cleanup, "CLAIM_WINDOW", dt.timedelta(0))
    assert ds.cleanup_old_versions(older_than=NOW).versions_removed == [1]


def test_a_version_removed_while_a_commit_checks_it_is_a_retryable_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 10), uri)
    stale = s3ddb.dataset(uri)
    other = s3ddb.dataset(uri)
    other.insert(_rows(10, 5))  # version 2: decided by kind against a delete
    other.delete("id = 5")  # version 3: the same fragment, so version 2 is read too
    listed = stale.handler.locations_since

    def listed_then_cleaned(start: int, *, finalize: bool = True) -> list[Any]:
        # Cleanup removes version 2 between the listing and the reading of it.
        locations = listed(start, finalize=finalize)
        s3ddb.dataset(uri).cleanup_old_versions(older_than=NOW, retain_versions=1)
        return locations

    monkeypatch.setattr(stale.handler, "locations_since", listed_then_cleaned)
    with pytest.raises(
        s3ddb.RetryableCommitConflictError, match=r"version 2 of .* was removed by cleanup while"
    ):
        stale.delete("id = 4", conflict_retries=0)
    assert s3ddb.dataset(uri).version == 3  # nothing committed


def _six_versions(uri: str) -> s3ddb.Dataset:
    """Versions 1..6 (appends), version 3 tagged ``t``."""
    for start in range(0, 60, 10):
        s3ddb.write_dataset(_rows(start, 2), uri, mode="append")
    ds = s3ddb.dataset(uri)
    ds.tags.create("t", 3)
    return ds


def _reasons(stats: s3ddb.CleanupStats) -> dict[int, str]:
    return {k.version: k.reason for k in stats.versions_kept}


def test_cleanup_says_why_it_kept_each_version_and_when_it_can_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = _six_versions(str(tmp_path / "ds"))
    history = {v.version: v.timestamp for v in ds.versions()}
    # The default claim window: right after the commits even older_than=0 removes
    # nothing, and says so.
    monkeypatch.setattr(s3ddb.maintenance.cleanup, "CLAIM_WINDOW", dt.timedelta(minutes=10))
    stats = ds.cleanup_old_versions(older_than=NOW)
    assert stats.versions_removed == []
    assert _reasons(stats) == {
        1: "claim_window", 2: "claim_window", 3: "tagged",
        4: "claim_window", 5: "claim_window", 6: "newest",
    }  # fmt: skip
    kept = {k.version: k for k in stats.versions_kept}
    assert kept[1].removable_after == history[2] + dt.timedelta(minutes=10)
    assert kept[3].removable_after is None and kept[6].removable_after is None

    day = dt.timedelta(days=1)
    stats = ds.cleanup_old_versions(older_than=day, retain_versions=2, claim_window=NOW)
    assert stats.versions_removed == []
    assert _reasons(stats) == {
        1: "older_than", 2: "older_than", 3: "tagged",
        4: "older_than", 5: "retain_versions", 6: "newest",
    }  # fmt: skip
    assert stats.versions_kept[0].removable_after == history[1] + day

    stats = ds.cleanup_old_versions(older_than=NOW, retain_versions=2, claim_window=NOW)
    assert stats.versions_removed == [1, 2, 4]
    assert _reasons(stats) == {3: "tagged", 5: "retain_versions", 6: "newest"}
    with pytest.raises(s3ddb.InvalidInputError, match="claim_window must be a timedelta"):
        ds.cleanup_old_versions(claim_window=dt.timedelta(seconds=-1))


def test_cli_cleanup_summary_names_what_it_kept_and_versions_shows_what_it_knows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.cli_runner import run_cli

    uri = str(tmp_path / "ds")
    _six_versions(uri)
    code, out, _ = run_cli(capsys, "cleanup", uri, "--older-than", "0m", "--claim-window", "10m")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("removed 0 version(s),")
    assert lines[1] == "kept 6 version(s):"
    assert lines[2].split() == ["6", "the", "newest"] and lines[4].split() == ["3", "tagged"]
    assert lines[3].startswith("  4, 5 ") and "10m claim window" in lines[3]
    assert "the first removable after 20" in lines[3]

    ds = s3ddb.dataset(uri)
    ds.delete("id = 0")  # 7, tagged: a delete whose predecessor cleanup will remove
    ds.tags.create("d", 7)
    for start in (100, 110):  # 8, 9
        s3ddb.write_dataset(_rows(start, 2), uri, mode="append")
    keep_two = ("--older-than", "0", "--retain-versions", "2", "--claim-window", "0")
    code, out, _ = run_cli(capsys, "cleanup", uri, *keep_two)
    # The tagged version 3 stayed: the range does not run over it.
    assert code == 0 and out.startswith("removed 5 version(s) (1, 2, 4..6), ")
    assert "  8          among the 2 newest (--retain-versions)" in out.splitlines()
    assert "  3, 7       tagged" in out.splitlines()

    code, out, _ = run_cli(capsys, "versions", uri)
    lines = out.splitlines()
    writer = "s3ddb/" + s3ddb.__version__
    assert code == 0 and "?" not in out
    # An append's rows are known from its transaction even where the version before
    # it is gone; a delete's are not.
    # (added, removed, the commit's attempts, the writer; after the call column)
    assert [line.split()[:1] + line.split()[4:8] for line in lines[2:6]] == [
        ["9", "2", "0", "1", writer],
        ["8", "2", "0", "1", writer],
        ["7", "-", "-", "1", writer],
        ["3", "2", "0", "1", writer],
    ]
    assert lines[6] == (
        "-: rows added and removed are not known where cleanup removed the version "
        "before (version 7)"
    )
    code, out, _ = run_cli(capsys, "versions", uri, "--json")
    entries = {e["version"]: e for e in json.loads(out)}
    assert entries[7]["rows_added"] is None and entries[7]["committer"] == writer
    assert entries[3]["rows_added"] == 2
