"""Cleanup against tags created meanwhile, and cleanup interrupted: a version is
either whole or invisible, whatever point cleanup stops at, and the next cleanup
removes what an interrupted one left (on a local path and on s3+ddb over the local
AWS endpoint)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
import s3ddb.fragment
import s3ddb.maintenance.cleanup as cleanup_module
from s3ddb.format import layout
from s3ddb.format.naming import NamingScheme, parse_manifest_name
from s3ddb.io import ObjectStore, parse_uri
from s3ddb.maintenance.verify import verify
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support import storage
from tests.support.python_children import run_python

pytestmark = pytest.mark.usefixtures("instant_cleanup")

ROOT = Path(__file__).resolve().parents[2]
NOW = dt.timedelta(0)


def _child(code: str, *args: str, aws: Any = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in another Python process (another client of the dataset; forked
    from a pre-imported interpreter: tests/support/python_children.py)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(aws.env() if aws is not None else {})}
    return run_python(["-c", code, *args], env=env, timeout=300)


def _three_versions(uri: str, so: dict[str, Any] | None) -> dict[int, list[int]]:
    """1: ten rows; 2: half deleted (a deletion file); 3: overwritten. Returns what
    each version reads."""
    s3ddb.write_dataset(pa.table({"a": list(range(10))}), uri, storage_options=so)
    s3ddb.dataset(uri, storage_options=so).delete("a < 5")
    s3ddb.write_dataset(pa.table({"a": [99]}), uri, mode="overwrite", storage_options=so)
    storage.objects(uri, so)  # this process's finalizer has settled
    return {1: list(range(10)), 2: list(range(5, 10)), 3: [99]}


def _manifest_versions(uri: str, so: dict[str, Any] | None) -> set[int]:
    out = set()
    for meta in ObjectStore(uri, so).iter_list(f"{layout.VERSIONS_DIR}/"):
        parsed = parse_manifest_name(meta.path.rsplit("/", 1)[-1])
        if parsed is not None:
            out.add(parsed[0])
    return out


def _clone_target(uri: str, tmp_path: Path) -> str:
    if uri.startswith("s3+ddb://"):
        return f"s3+ddb://{TEST_BUCKET}/clone-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    return str(tmp_path / "clone")


_TAG_AND_CLONE = """
import sys, s3ddb
ds = s3ddb.dataset(sys.argv[1])
ds.tags.create("kept", 1)
ds.shallow_clone(sys.argv[2], version="kept")
print("done")
"""


def test_a_tag_created_after_cleanup_read_the_tags_keeps_its_version(
    location: tuple[str, dict[str, Any] | None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    uri, so = location
    aws = request.getfixturevalue("aws") if so is not None else None
    expected = _three_versions(uri, so)
    clone = _clone_target(uri, tmp_path)
    read = cleanup_module._referenced_by
    created: list[str] = []

    def tag_meanwhile(ds: Any, versions: Any) -> Any:
        # Cleanup has read the tags and chosen what to remove; another process now
        # tags version 1 and clones the dataset by that tag, as docs/clones.md says.
        if not created:
            result = _child(_TAG_AND_CLONE, uri, clone, aws=aws)
            assert result.returncode == 0, result.stderr[-2000:]
            created.append(result.stdout)
        return read(ds, versions)

    with monkeypatch.context() as patch:
        patch.setattr(cleanup_module, "_referenced_by", tag_meanwhile)
        patch.setattr(cleanup_module, "_VERSIONS_A_BATCH", 1)  # tags read after each
        stats = s3ddb.dataset(uri, storage_options=so).cleanup_old_versions(older_than=NOW)
    assert created == ["done\n"]
    assert stats.versions_removed == [2]
    assert {k.version: k.reason for k in stats.versions_kept} == {1: "tagged", 3: "newest"}
    tagged = s3ddb.dataset(uri, "kept", storage_options=so)
    assert tagged.to_table().column("a").to_pylist() == expected[1]
    assert (
        s3ddb.dataset(clone, storage_options=so).to_table().column("a").to_pylist() == (expected[1])
    )
    assert [v.version for v in s3ddb.dataset(uri, storage_options=so).versions()] == [1, 3]
    assert verify(uri, so).healthy


_CLEANUP = """
import datetime as dt, sys, s3ddb
import s3ddb.maintenance.cleanup as c
c.CLAIM_WINDOW = dt.timedelta(0)
s = s3ddb.dataset(sys.argv[1]).cleanup_old_versions(older_than=dt.timedelta(0))
print(s.versions_removed)
"""


def test_a_tag_on_a_version_cleanup_removes_meanwhile_is_refused_and_left_out(
    location: tuple[str, dict[str, Any] | None],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    uri, so = location
    aws = request.getfixturevalue("aws") if so is not None else None
    _three_versions(uri, so)
    ds = s3ddb.dataset(uri, storage_options=so)
    store = ds.handler.store
    put = store.put_if_not_exists
    ran: list[str] = []

    def cleanup_then_put(path: str, data: bytes) -> None:
        # The tag writer has seen version 1; a cleanup in another process removes it
        # before the tag is written.
        if path.startswith(layout.TAGS_DIR) and not ran:
            result = _child(_CLEANUP, uri, aws=aws)
            assert result.returncode == 0, result.stderr[-2000:]
            ran.append(result.stdout)
        put(path, data)

    with monkeypatch.context() as patch:
        patch.setattr(store, "put_if_not_exists", cleanup_then_put)
        with pytest.raises(s3ddb.VersionNotFoundError, match="removed by cleanup while tag"):
            ds.tags.create("late", 1)
    assert ran == ["[1, 2]\n"]
    assert s3ddb.dataset(uri, storage_options=so).tags.list() == {}
    assert _manifest_versions(uri, so) == {3}


class _Cut(Exception):
    """The injected failure: cleanup stops here."""


def _cut_after(monkeypatch: pytest.MonkeyPatch, store: Any, allowed: int) -> list[str]:
    """Make ``store``'s deletions stop with :class:`_Cut` once ``allowed`` objects are
    gone (over all calls); returns the paths deleted, in order."""
    deleted: list[str] = []
    many = store.delete_many

    def delete_many(paths: list[str], **kw: Any) -> None:
        room = allowed - len(deleted)
        many(paths[:room], **kw)
        deleted.extend(paths[:room])
        if len(paths) > room:
            raise _Cut(f"cut after {allowed} objects")

    monkeypatch.setattr(store, "delete_many", delete_many)
    return deleted


def test_an_interrupted_cleanup_leaves_every_visible_version_whole(
    location: tuple[str, dict[str, Any] | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, so = location
    cut = 0
    while True:
        where = f"{uri.split('?')[0]}-cut{cut}" + (f"?{uri.split('?')[1]}" if "?" in uri else "")
        expected = _three_versions(where, so)
        ds = s3ddb.dataset(where, storage_options=so)
        with monkeypatch.context() as patch:
            deleted = _cut_after(patch, ds.handler.store, cut)
            try:
                ds.cleanup_old_versions(older_than=NOW)
                finished = True
            except _Cut:
                finished = False
        # Whatever was deleted, each version a reader can find reads whole.
        visible = [v.version for v in s3ddb.dataset(where, storage_options=so).versions()]
        assert 3 in visible
        for version in visible:
            table = s3ddb.dataset(where, version, storage_options=so).to_table()
            assert table.column("a").to_pylist() == expected[version], (cut, deleted)
        # The next cleanup removes whatever the interrupted one left.
        s3ddb.dataset(where, storage_options=so).cleanup_old_versions(older_than=NOW)
        assert [v.version for v in s3ddb.dataset(where, storage_options=so).versions()] == [3]
        assert _manifest_versions(where, so) == {3}
        assert not {p for p in storage.orphans(where, so) if not p.startswith("_refs")}
        assert verify(where, so).healthy
        if finished:
            break
        cut += 1
    assert cut >= 4  # manifests, transaction files, the data file, the deletion file


_KILLED_CLEANUP = """
import datetime as dt, os, signal, sys, s3ddb
import s3ddb.maintenance.cleanup as c
c.CLAIM_WINDOW = dt.timedelta(0)
ds = s3ddb.dataset(sys.argv[1])
store = ds.handler.store
many = store.delete_many
def one_by_one(paths, **kw):
    for path in paths:
        many([path])
        print(path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # killed once one object is gone
store.delete_many = one_by_one
ds.cleanup_old_versions(older_than=dt.timedelta(0))
"""


def test_a_cleanup_killed_after_one_deletion_leaves_whole_versions_the_next_removes(
    ddb_uri: str, aws: Any
) -> None:
    so = aws.storage_options()
    expected = _three_versions(ddb_uri, so)
    result = _child(_KILLED_CLEANUP, ddb_uri, aws=aws)
    assert result.returncode == -9, result.stderr[-2000:]
    assert len(result.stdout.split()) == 1  # one object deleted, then killed
    visible = [v.version for v in s3ddb.dataset(ddb_uri, storage_options=so).versions()]
    for version in visible:
        table = s3ddb.dataset(ddb_uri, version, storage_options=so).to_table()
        assert table.column("a").to_pylist() == expected[version], result.stdout
    s3ddb.dataset(ddb_uri, storage_options=so).cleanup_old_versions(older_than=NOW)
    assert _manifest_versions(ddb_uri, so) == {3}
    assert not {p for p in storage.orphans(ddb_uri, so) if not p.startswith("_refs")}
    assert verify(ddb_uri, so).healthy


def _five_appends_v1_tagged(uri: str, so: dict[str, Any]) -> s3ddb.Dataset:
    s3ddb.write_dataset(pa.table({"a": [0]}), uri, storage_options=so)
    for i in range(1, 5):
        s3ddb.write_dataset(pa.table({"a": [i]}), uri, mode="append", storage_options=so)
    storage.objects(uri, so)
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.tags.create("keep", 1)
    return ds


def _cleanup_cut_after_its_row_deletes(
    uri: str, so: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> s3ddb.Dataset:
    """Five appends, version 1 tagged, then a cleanup cut once it deleted the rows of
    versions 2..4 and nothing else; the Dataset that ran it."""
    ds = _five_appends_v1_tagged(uri, so)
    with monkeypatch.context() as patch, pytest.raises(_Cut):
        _cut_after(patch, ds.handler.store, 0)
        ds.cleanup_old_versions(older_than=NOW, retain_versions=1)
    return ds


def test_manifests_an_interrupted_cleanup_left_between_kept_rows_are_removed_later(
    ddb_uri: str, aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    so = aws.storage_options()
    _cleanup_cut_after_its_row_deletes(ddb_uri, so, monkeypatch)
    assert [v.version for v in s3ddb.dataset(ddb_uri, storage_options=so).versions()] == [1, 5]
    assert _manifest_versions(ddb_uri, so) == {1, 2, 3, 4, 5}
    # verify names them and says cleanup deletes them.
    problems = [
        p for p in verify(ddb_uri, so, grace_seconds=0).problems if p.kind == "manifest_without_row"
    ]
    assert sorted(p.version for p in problems if p.version is not None) == [2, 3, 4]
    assert all("interrupted cleanup" in p.meaning and "cleanup" in p.fix for p in problems)
    store = ObjectStore(ddb_uri, so)
    (note,) = [m.path for m in store.iter_list("_cleanup/")]
    body = store.get(note)
    store.delete(note)
    # Without the interrupted cleanup's note, they stay within the grace period, and
    # so does what they read (version 3 is still found by its number).
    again = s3ddb.dataset(ddb_uri, storage_options=so)
    stats = again.cleanup_old_versions(older_than=NOW, retain_versions=1)
    assert stats.files.get("manifests", 0) == 0
    table = s3ddb.dataset(ddb_uri, 3, storage_options=so).to_table()
    assert sorted(table.column("a").to_pylist()) == [0, 1, 2]
    # With the note, the next cleanup removes them at once, with what only they read.
    store.put(note, body)
    stats = again.cleanup_old_versions(older_than=NOW, retain_versions=1)
    assert stats.files["manifests"] == 3
    assert _manifest_versions(ddb_uri, so) == {1, 5}
    assert not {p for p in storage.orphans(ddb_uri, so) if not p.startswith("_refs")}
    report = verify(ddb_uri, so, grace_seconds=0)
    assert report.healthy, report.problems
    kept = s3ddb.dataset(ddb_uri, "keep", storage_options=so).to_table()
    assert kept.column("a").to_pylist() == [0]


def test_without_a_note_they_go_once_past_the_grace_period_unless_a_tag_names_one(
    ddb_uri: str, aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    so = aws.storage_options()
    ds = _cleanup_cut_after_its_row_deletes(ddb_uri, so, monkeypatch)
    store = ObjectStore(ddb_uri, so)
    store.delete_many([m.path for m in store.iter_list("_cleanup/")])
    # As a put-back interrupted between manifest and row would leave it: a tag names
    # version 3, which has a manifest and no row.
    ds.tags.create("three", 3)
    stats = ds.cleanup_old_versions(older_than=NOW, retain_versions=1, delete_unverified=True)
    assert stats.files["manifests"] == 2
    assert _manifest_versions(ddb_uri, so) == {1, 3, 5}
    table = s3ddb.dataset(ddb_uri, "three", storage_options=so).to_table()
    assert sorted(table.column("a").to_pylist()) == [0, 1, 2]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{not json", s3ddb.StoredMetadataError),
        (b'["data/x.parquet"]', s3ddb.StoredMetadataError),
        (b'{"files": "data/x.parquet"}', s3ddb.StoredMetadataError),
        (b'{"files": ["../other/data/x.parquet"]}', s3ddb.PathOutsideDatasetError),
    ],
)
def test_a_damaged_cleanup_note_stops_cleanup_before_it_deletes_anything(
    tmp_path: Path, body: bytes, error: type[Exception]
) -> None:
    uri = str(tmp_path / "ds")
    expected = _three_versions(uri, None)
    before = storage.objects(uri)
    ObjectStore(uri).put("_cleanup/planted.json", body)
    with pytest.raises(error, match=r"planted\.json|outside|\.\."):
        s3ddb.dataset(uri).cleanup_old_versions(older_than=NOW)
    assert storage.objects(uri) == before | {"_cleanup/planted.json"}
    for version, rows in expected.items():
        assert s3ddb.dataset(uri, version).to_table().column("a").to_pylist() == rows


def test_a_tag_moved_to_a_version_cleanup_removes_meanwhile_points_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ds")
    _three_versions(uri, None)
    ds = s3ddb.dataset(uri)
    ds.tags.create("t", 3)
    put = ds.handler.store.put
    ran: list[str] = []

    def cleanup_then_put(path: str, data: bytes) -> None:
        if path.startswith(layout.TAGS_DIR) and not ran:
            result = _child(_CLEANUP, uri)
            assert result.returncode == 0, result.stderr[-2000:]
            ran.append(result.stdout)
        put(path, data)

    with monkeypatch.context() as patch:
        patch.setattr(ds.handler.store, "put", cleanup_then_put)
        with pytest.raises(s3ddb.VersionNotFoundError, match="still names version 3"):
            ds.tags.update("t", 1)
    assert ran == ["[1, 2]\n"]
    assert s3ddb.dataset(uri).tags.list() == {"t": 3}
    assert _manifest_versions(uri, None) == {3}


def test_a_removed_version_whose_manifest_is_gone_loses_its_row_too(ddb_uri: str, aws: Any) -> None:
    # A row whose final manifest is gone: readers get VersionNotFoundError for it;
    # cleanup removes the row rather than stopping.
    so = aws.storage_options()
    _three_versions(ddb_uri, so)
    store = ObjectStore(ddb_uri, so)
    store.delete(layout.manifest_path(1, NamingScheme.V2))
    storage.MANIFESTS.clear()
    with pytest.raises(s3ddb.VersionNotFoundError):
        s3ddb.dataset(ddb_uri, 1, storage_options=so)
    stats = s3ddb.dataset(ddb_uri, storage_options=so).cleanup_old_versions(older_than=NOW)
    assert stats.versions_removed == [1, 2]
    assert [v.version for v in s3ddb.dataset(ddb_uri, storage_options=so).versions()] == [3]
    assert _manifest_versions(ddb_uri, so) == {3}


def test_versions_from_before_the_store_are_never_taken_for_leftovers(
    ddb_uri: str, aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    so = aws.storage_options()
    plain = parse_uri(ddb_uri).object_url
    trusted = {**so, "s3_conditional_writes": "trusted"}  # one writer; S3 ignores INM here
    s3ddb.write_dataset(pa.table({"a": [1]}), plain, storage_options=trusted)  # 1, no row
    s3ddb.write_dataset(pa.table({"a": [2]}), plain, mode="append", storage_options=trusted)
    s3ddb.migrate_commits(ddb_uri, storage_options=so)  # 3, the first row
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    ds.insert(pa.table({"a": [4]}))  # 4
    ds.insert(pa.table({"a": [5]}))  # 5
    storage.objects(ddb_uri, so)
    ds.tags.create("old", 1)
    with monkeypatch.context() as patch, pytest.raises(_Cut):
        _cut_after(patch, ds.handler.store, 0)  # rows of 3 and 4 deleted, nothing else
        ds.cleanup_old_versions(older_than=NOW, retain_versions=1)
    # Rows now start at 5: versions 1 to 4 are read through the listing, whole.
    reopened = s3ddb.dataset(ddb_uri, storage_options=so)
    assert [v.version for v in reopened.versions()] == [1, 2, 3, 4, 5]
    expected = {1: [1], 2: [1, 2], 3: [1, 2], 4: [1, 2, 4]}
    for version, rows in expected.items():
        table = s3ddb.dataset(ddb_uri, version, storage_options=so).to_table()
        assert sorted(table.column("a").to_pylist()) == rows
    stats = reopened.cleanup_old_versions(older_than=NOW, retain_versions=1, delete_unverified=True)
    assert stats.versions_removed == [2, 3, 4]
    assert _manifest_versions(ddb_uri, so) == {1, 5}
    assert s3ddb.dataset(ddb_uri, "old", storage_options=so).to_table().column("a").to_pylist() == [
        1
    ]


def test_a_cleanup_note_never_names_a_file_written_after_it(tmp_path: Path) -> None:
    """A note lists what versions removed before it referred to: a file written
    since (a writer's data file, not committed yet) is none of those, whatever a note
    planted or left over says. Cleanup leaves it to its grace period, and the commit
    that follows reads whole."""
    import json

    from s3ddb.operations import Append

    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"a": [0]}), uri)
    s3ddb.write_dataset(pa.table({"a": [1]}), uri, mode="append")
    note = tmp_path / "ds" / "_cleanup" / "planted.json"
    fragments = s3ddb.fragment.write_fragments(pa.table({"a": [7, 8]}), uri)
    files = [layout.data_file_path(d.path) for f in fragments for d in f.files]
    note.parent.mkdir(exist_ok=True)
    note.write_text(json.dumps({"files": files}))
    hour_ago = note.stat().st_mtime - 3600
    os.utime(note, (hour_ago, hour_ago))  # written before the writer's file
    stats = s3ddb.dataset(uri).cleanup_old_versions(older_than=NOW, retain_versions=5)
    assert stats.files.get("data_files", 0) == 0
    assert all((tmp_path / "ds" / p).exists() for p in files)
    committed = s3ddb.Dataset.commit(uri, Append(fragments), read_version=2)
    assert sorted(committed.to_table().column("a").to_pylist()) == [0, 1, 7, 8]


_RESTORE = """
import sys, s3ddb
print(s3ddb.dataset(sys.argv[1], version=1).restore().version)
"""


def test_a_version_restored_while_cleanup_runs_keeps_its_files(
    location: tuple[str, dict[str, Any] | None],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """Cleanup has chosen to remove versions 1 and 2 and read what the kept version
    references; before it makes them unreadable, another process restores version 1
    (version 4 lists version 1's files again). Cleanup reads the versions committed
    since its start before it deletes anything: version 4 reads whole. (Its files
    used to be deleted as only removed versions' files.)"""
    uri, so = location
    aws = request.getfixturevalue("aws") if so is not None else None
    expected = _three_versions(uri, so)
    write = cleanup_module.write_journal
    restored: list[str] = []

    def restore_meanwhile(store: Any, journal: Any) -> Any:
        if not restored:
            result = _child(_RESTORE, uri, aws=aws)
            assert result.returncode == 0, result.stderr[-2000:]
            restored.append(result.stdout)
        return write(store, journal)

    with monkeypatch.context() as patch:
        patch.setattr(cleanup_module, "write_journal", restore_meanwhile)
        stats = s3ddb.dataset(uri, storage_options=so).cleanup_old_versions(older_than=NOW)
    assert restored == ["4\n"]
    assert stats.versions_removed == [1, 2]
    newest = s3ddb.dataset(uri, storage_options=so)
    assert newest.version == 4
    assert sorted(newest.to_table().column("a").to_pylist()) == expected[1]
    assert verify(uri, so).healthy
