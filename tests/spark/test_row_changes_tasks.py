"""``s3ddb.spark_ext.delete`` and ``update(rewrite="rows")`` write their deletion files
(and the rewritten rows) in the Spark tasks, never from the driver process; files the
tasks wrote for a change that fails are deleted. With real local Spark, on datasets at
local paths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import InvalidExpressionError
from s3ddb.format import layout
from s3ddb.io.object_store import LocalObjectStore
from s3ddb.maintenance.verify import verify
from tests.support.storage import objects, orphans

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 200
PER_FILE = 25  # 8 fragments
#: Touches every fragment; deletes the first (ids 0-24) whole.
EVERY_FRAGMENT = "id % 3 = 0 OR id < 25"
WRITTEN_BY_TASKS = (f"{layout.DELETIONS_DIR}/", f"{layout.DATA_DIR}/")


@pytest.fixture
def driver_puts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path this process (the Spark driver) writes to a local dataset from now on.

    Spark runs tasks in Python worker processes: they unpickle the store by its class's
    name and import that class unpatched, so only the driver's writes are recorded.
    """
    driver = os.getpid()
    puts: list[str] = []
    put = LocalObjectStore.put

    def recording_put(self: LocalObjectStore, path: str, data: bytes) -> None:
        if os.getpid() == driver:
            puts.append(path)
        put(self, path, data)

    monkeypatch.setattr(LocalObjectStore, "put", recording_put)
    return puts


def _table(n: int) -> pa.Table:
    ids = list(range(n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array([i * 10 for i in ids], pa.int64()),
            "name": [f"row-{i}" for i in ids],
        }
    )


def _twins(tmp_path: Path) -> tuple[str, str]:
    """Two datasets of the same 8 fragments, one of them with a deletion file already
    (so the tasks merge earlier deletions into the new files)."""
    uris = []
    for name in ("local", "spark"):
        uri = str(tmp_path / name)
        s3ddb.write_dataset(_table(ROWS), uri, max_rows_per_file=PER_FILE)
        s3ddb.dataset(uri).delete("id = 26")
        uris.append(uri)
    return uris[0], uris[1]


def _by_id(uri: str) -> list[dict[str, Any]]:
    return sorted(s3ddb.dataset(uri).to_table().to_pylist(), key=lambda r: r["id"])


def _fragments(uri: str) -> list[tuple[int, int, int]]:
    """(id, physical rows, deleted rows) of each fragment of the newest version."""
    return [
        (f.id, f.physical_rows, f.deletion_file.num_deleted_rows if f.deletion_file else 0)
        for f in s3ddb.dataset(uri).get_fragments()
    ]


def _written_by_driver(puts: list[str]) -> list[str]:
    return [p for p in puts if p.startswith(WRITTEN_BY_TASKS)]


def _assert_clean(uri: str) -> None:
    report = verify(uri, None, grace_seconds=0)
    assert report.healthy, report.problems
    assert orphans(uri) == set()


def test_distributed_delete_writes_no_deletion_file_from_the_driver(
    spark: Any, tmp_path: Path, driver_puts: list[str]
) -> None:
    import s3ddb.spark_ext

    local, dist = _twins(tmp_path)
    before = s3ddb.dataset(dist)
    assert len(before.get_fragments()) == ROWS // PER_FILE
    expected = s3ddb.dataset(local).delete(EVERY_FRAGMENT)
    driver_puts.clear()

    got = s3ddb.spark_ext.delete(spark, dist, EVERY_FRAGMENT)

    assert got == expected and got["num_deleted_rows"] == 25 + 58
    assert _written_by_driver(driver_puts) == [], "the driver wrote files the tasks should"
    assert driver_puts, "the driver still commits (its manifest and transaction)"
    ds = s3ddb.dataset(dist)
    assert [v.operation for v in ds.versions()][-1] == "Delete"
    fragments = ds.get_fragments()
    assert [f.id for f in fragments] == [f.id for f in before.get_fragments()][1:]
    for fragment in fragments:
        assert fragment.deletion_file is not None
        # Named after the version the delete read, as a driver-side write would be.
        assert fragment.deletion_file.read_version == before.version
    assert _by_id(dist) == _by_id(local)
    assert not any(r["id"] % 3 == 0 or r["id"] < 25 or r["id"] == 26 for r in _by_id(dist))
    assert _fragments(dist) == _fragments(local)
    _assert_clean(dist)


def test_distributed_row_rewrite_writes_no_file_from_the_driver(
    spark: Any, tmp_path: Path, driver_puts: list[str]
) -> None:
    import s3ddb.spark_ext

    local, dist = _twins(tmp_path)
    before = s3ddb.dataset(dist)
    values = {"name": "upper(name)", "v": "v + 1"}
    expected = s3ddb.dataset(local).update(values, EVERY_FRAGMENT, rewrite="rows")
    driver_puts.clear()

    got = s3ddb.spark_ext.update(spark, dist, values, EVERY_FRAGMENT, rewrite="rows")

    assert got == expected == {"num_rows_updated": 25 + 58}
    assert _written_by_driver(driver_puts) == [], "the driver wrote files the tasks should"
    ds = s3ddb.dataset(dist)
    assert [v.operation for v in ds.versions()][-1] == "Update"
    old = {f.id for f in before.get_fragments()}
    kept = [f for f in ds.get_fragments() if f.id in old]
    assert len(kept) == len(old) - 1, "the first fragment, all of it updated, is removed"
    for fragment in kept:
        assert fragment.deletion_file is not None
        assert fragment.deletion_file.read_version == before.version
    rows = _by_id(dist)
    assert rows == _by_id(local)
    changed = [r for r in rows if r["id"] % 3 == 0 or r["id"] < 25]
    assert len(changed) == 25 + 58
    assert all(r["name"] == f"ROW-{r['id']}" and r["v"] == r["id"] * 10 + 1 for r in changed)
    assert len(rows) == ROWS - 1
    _assert_clean(dist)


@pytest.mark.parametrize("change", ["delete", "update"])
def test_files_of_tasks_beside_a_failing_one_are_deleted(
    spark: Any, tmp_path: Path, change: str
) -> None:
    """Only the task of the fragment holding id 190 fails (division by zero); the other
    tasks have written their files (deletion files of the even ids, and for the update
    the rewritten rows) by then, and none is left."""
    import s3ddb.spark_ext

    _local, dist = _twins(tmp_path)
    version = s3ddb.dataset(dist).version
    before = objects(dist)
    with pytest.raises(InvalidExpressionError, match="divide by zero"):
        if change == "delete":
            s3ddb.spark_ext.delete(spark, dist, "100 / (id - 190) < 0 AND id % 2 = 0")
        else:
            values = {"v": "100 / (id - 190)"}
            s3ddb.spark_ext.update(spark, dist, values, "id % 2 = 0", rewrite="rows")
    assert objects(dist) == before
    assert s3ddb.dataset(dist).version == version
    _assert_clean(dist)
