"""A native write's driver killed midway (real Spark applications in child processes):
nothing is committed, the committed rows are intact, and what it left (a staging
folder; files moved into data/) is reported by verify and removed by cleanup, never
while a write may still be running. And a write whose tasks' first attempts all fail
commits each row once: the application that is killed mid-write makes that write
first (one JVM started for both tests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit.failpoints import EXIT_CODE
from s3ddb.maintenance.cleanup import STAGING_KIND
from s3ddb.maintenance.staging import LEFTOVER_KIND
from s3ddb.maintenance.verify import verify
from tests.spark.test_native_write import _staging_left
from tests.support import storage

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DAY = 24 * 3600.0


def _app(uri: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The native write application of tests/support/native_write_app.py, in its own process
    group (its JVM and Python workers are killed with it)."""
    full = dict(os.environ, PYSPARK_PYTHON=sys.executable, **(env or {}))
    full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.native_write_app", uri, *args],
        cwd=ROOT, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def _kill_group(child: subprocess.Popen[str]) -> str:
    """SIGKILL the application's process group (if it still runs); its stdout."""
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGKILL)
    return child.communicate(timeout=60)[0]


def _committed(uri: str) -> s3ddb.Dataset:
    s3ddb.write_dataset(
        pa.table({"id": pa.array(range(1000, 1010), pa.int64()), "s": ["c"] * 10}), uri
    )
    return s3ddb.dataset(uri)


def _staging_files(uri: str) -> list[Path]:
    return sorted(p for p in (Path(uri) / "_spark_staging").rglob("*") if p.is_file())


def _age(paths: list[Path], seconds: float) -> None:
    then = time.time() - seconds
    for p in paths:
        os.utime(p, (then, then))


def _kinds(uri: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for problem in verify(uri, grace_seconds=0).problems:
        out.setdefault(problem.kind, []).append(problem.path)
    return out


@dataclass(frozen=True)
class KilledMidWrite:
    """The application killed while its second write hung in a task: what it printed,
    the dataset its first write (first attempts failing) created, and the dataset the
    hung write was appending to."""

    printed: list[dict[str, object]]
    retried_uri: str
    local_uri: str


@pytest.fixture(scope="module")
def killed_mid_write(tmp_path_factory: pytest.TempPathFactory) -> KilledMidWrite:
    tmp = tmp_path_factory.mktemp("killed")
    retried_uri, local_uri = str(tmp / "retried"), str(tmp / "ds")
    _committed(local_uri)
    marker = tmp / "hanging"
    child = _app(
        local_uri, "--rows", "1000", "--hang", str(marker),
        "--first-uri", retried_uri, "--first-rows", "1000",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (marker.exists() and _staging_files(local_uri)):
            if child.poll() is not None:
                pytest.fail(f"the application exited early: {child.communicate()[1][-3000:]}")
            assert time.monotonic() < deadline, "the application never reached its write"
            time.sleep(0.2)
    finally:
        out = _kill_group(child)
    printed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return KilledMidWrite(printed, retried_uri, local_uri)


def test_retried_task_attempts_commit_each_row_once(killed_mid_write: KilledMidWrite) -> None:
    """Every task's first attempt fails after writing files; the retries succeed. Only
    the committed attempts' files are in the version, and no other file is left."""
    uri = killed_mid_write.retried_uri
    assert killed_mid_write.printed == [{"uri": uri, "version": 1}]
    ds = s3ddb.dataset(uri)
    ids = sorted(ds.to_table().column("id").to_pylist())
    assert ids == list(range(1000)), "no row missing or repeated"
    assert storage.orphans(uri) == set()
    assert _staging_left(uri) == []


def test_a_driver_killed_mid_write_leaves_a_staging_folder_that_cleanup_removes(
    killed_mid_write: KilledMidWrite,
) -> None:
    local_uri = killed_mid_write.local_uri
    ds = s3ddb.dataset(local_uri)
    assert ds.version == 1 and sorted(ds.to_table().column("id").to_pylist()) == list(
        range(1000, 1010)
    )
    left = _staging_files(local_uri)
    assert left, "the killed write left its staging folder"
    orphans = storage.orphans(local_uri)
    assert orphans and all(p.startswith("_spark_staging/") for p in orphans)
    (folder,) = {p.split("/")[1] for p in orphans}

    assert _kinds(local_uri)[LEFTOVER_KIND] == [f"_spark_staging/{folder}/"]
    assert LEFTOVER_KIND not in {p.kind for p in verify(local_uri).problems}, "young: not yet"

    # Every file but one is 8 days old: the folder may still be a write in progress.
    _age(left[1:], 8 * DAY)
    stats = ds.cleanup_old_versions()
    assert STAGING_KIND not in stats.files and _staging_files(local_uri) == left
    # Its newest file too: the write is over.
    _age(left[:1], 8 * DAY)
    stats = ds.cleanup_old_versions()
    assert stats.files[STAGING_KIND] == len(left)
    assert storage.orphans(local_uri) == set()
    assert not (Path(local_uri) / "_spark_staging" / folder).exists()
    assert verify(local_uri, grace_seconds=0).healthy
    assert s3ddb.dataset(local_uri).to_table().num_rows == 10


def test_a_driver_killed_after_moving_files_leaves_them_unreferenced_until_cleanup(
    local_uri: str,
) -> None:
    ds = _committed(local_uri)
    child = _app(
        local_uri, "--rows", "400", env={"S3DDB_FAILPOINTS": "native_write.after_move=exit"}
    )
    try:
        _, err = child.communicate(timeout=600)
    finally:
        _kill_group(child)
    assert child.returncode == EXIT_CODE, err[-3000:]
    assert s3ddb.dataset(local_uri).version == 1, "nothing committed"
    orphans = storage.orphans(local_uri)
    moved = {p for p in orphans if p.startswith("data/")}
    assert len(moved) >= 8, "400 rows in files of at most 50, moved into data/"
    assert orphans - moved and all(p.startswith("_spark_staging/") for p in orphans - moved)
    # The moved files' age counts from the move (after Spark's job wrote _SUCCESS), so
    # cleanup's grace period protects a commit about to reference them.
    root = Path(local_uri)
    assert min(os.stat(root / p).st_mtime_ns for p in moved) >= max(
        os.stat(root / p).st_mtime_ns for p in orphans - moved
    )
    kinds = _kinds(local_uri)
    assert set(kinds["unreferenced_file"]) == moved
    assert len(kinds[LEFTOVER_KIND]) == 1

    stats = ds.cleanup_old_versions()
    assert stats.files == {}, "young files may be a write in progress: kept"
    assert storage.orphans(local_uri) == orphans
    # delete_unverified: no write runs, every leftover goes at any age.
    stats = ds.cleanup_old_versions(delete_unverified=True)
    assert stats.files["data_files"] == len(moved)
    assert stats.files[STAGING_KIND] == len(orphans - moved)
    assert storage.orphans(local_uri) == set()
    assert verify(local_uri, grace_seconds=0).healthy
    assert sorted(s3ddb.dataset(local_uri).to_table().column("id").to_pylist()) == list(
        range(1000, 1010)
    )
