"""Native Spark writes' staging folders (``_spark_staging/<write id>/``) in verify and
cleanup, without Spark (tests/spark/test_native_crash.py kills real drivers): each
folder is judged whole by its newest file, on a local path and on the local endpoint."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.io import ObjectStore
from s3ddb.maintenance.cleanup import STAGING_KIND
from s3ddb.maintenance.staging import LEFTOVER_KIND
from s3ddb.maintenance.verify import verify
from tests.support import storage

DAY = 24 * 3600.0

#: Three writes' folders: one over (every file 8 days old), one whose newest file is
#: young (a write in progress), and one only just started.
FILES = {
    "_spark_staging/over/part-0.parquet": 8 * DAY,
    "_spark_staging/over/_temporary/0/task_1/part-1.parquet": 9 * DAY,
    "_spark_staging/running/_temporary/0/task_0/part-0.parquet": 8 * DAY,
    "_spark_staging/running/_temporary/0/_temporary/attempt_1/part-1.parquet": 60.0,
    "_spark_staging/new/_temporary/0/_temporary/attempt_0/part-0.parquet": 0.0,
}


def _dataset(uri: str, so: dict[str, Any] | None) -> s3ddb.Dataset:
    s3ddb.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri, storage_options=so)
    store = ObjectStore(uri, so)
    for path in FILES:
        store.put(path, b"PAR1 spark wrote this PAR1")
    return s3ddb.dataset(uri, storage_options=so)


def _age(uri: str) -> None:
    for path, age in FILES.items():
        then = time.time() - age
        os.utime(Path(uri) / path, (then, then))


def test_cleanup_removes_a_staging_folder_once_its_newest_file_is_old(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = _dataset(uri, None)
    _age(uri)
    problems = [p for p in verify(uri).problems if p.kind == LEFTOVER_KIND]
    assert [p.path for p in problems] == ["_spark_staging/over/"], "the others are young"
    assert "2 file(s)" in problems[0].meaning and "s3ddb cleanup" in problems[0].fix

    stats = ds.cleanup_old_versions()
    assert stats.files == {STAGING_KIND: 2}
    left = {p for p in storage.orphans(uri) if p.startswith("_spark_staging/")}
    assert left == {p for p in FILES if not p.startswith("_spark_staging/over/")}
    assert not (Path(uri) / "_spark_staging" / "over").exists(), "no empty folders left"
    assert (Path(uri) / "_spark_staging" / "new").is_dir()
    assert ds.to_table().num_rows == 10


def test_delete_unverified_removes_staging_folders_at_any_age(
    location: tuple[str, dict[str, Any] | None],
) -> None:
    uri, so = location
    ds = _dataset(uri, so)
    kinds = [p.path for p in verify(uri, so, grace_seconds=0).problems if p.kind == LEFTOVER_KIND]
    assert sorted(kinds) == [
        "_spark_staging/new/",
        "_spark_staging/over/",
        "_spark_staging/running/",
    ]
    assert STAGING_KIND not in ds.cleanup_old_versions().files, "young: kept by default"
    stats = ds.cleanup_old_versions(delete_unverified=True)
    assert stats.files[STAGING_KIND] == len(FILES)
    assert storage.orphans(uri, so) == set()
    assert verify(uri, so, grace_seconds=0).healthy
