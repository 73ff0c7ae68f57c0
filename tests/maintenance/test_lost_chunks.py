"""A version whose fragment-list chunk was lost (deleted by hand, by an attacker with
write access to the prefix, or by an unlucky operator) is one damaged version: history
lists every version, restore moves away from it whatever the dataset publishes, cleanup
removes it, and a commit that fails on it deletes what it wrote."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import ManifestCorruptError
from s3ddb.format.chunks import clear_chunk_cache
from s3ddb.maintenance.verify import verify
from tests.open_formats.readers import deltalake_read, pyiceberg_read
from tests.support.cli_runner import run_cli

pytestmark = pytest.mark.usefixtures("instant_cleanup")

SMALL = {"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "1"}
FORMATS = ["iceberg", "delta"]
NOW = dt.timedelta(0)


def _ids(rows: range) -> pa.Table:
    return pa.table({"id": pa.array(list(rows), pa.int64())})


def _chunked(uri: str, formats: list[str] | None = None) -> None:
    """Version 3 of a dataset of 19 fragments of two rows (ids 0-37) in chunks of 4
    fragments (one fragment of id 38 first)."""
    s3ddb.write_dataset(_ids(range(38, 39)), uri, open_formats=formats)
    s3ddb.dataset(uri).update_config(SMALL)
    s3ddb.write_dataset(_ids(range(38)), uri, mode="append", max_rows_per_file=2)


def _lose_own_chunks(root: Path, version: int) -> list[str]:
    """Delete the chunks ``version`` lists that the version before it does not (those
    it wrote); their names. As a new process, nothing is cached."""
    uri = str(root)
    before = {
        r.name for r in s3ddb.dataset(uri, version=version - 1).manifest.fragments.chunk_refs()
    }
    own = [
        r.name
        for r in s3ddb.dataset(uri, version=version).manifest.fragments.chunk_refs()
        if r.name not in before
    ]
    assert own
    for name in own:
        (root / "_fragments" / name).unlink()
    clear_chunk_cache()
    return own


def _files(root: Path, folder: str) -> set[str]:
    return {p.name for p in (root / folder).iterdir()}


@pytest.mark.parametrize("formats", [None, FORMATS], ids=["plain", "publishing"])
def test_restore_moves_away_from_a_version_whose_chunk_is_lost(
    tmp_path: Path, formats: list[str] | None
) -> None:
    root = tmp_path / "ds"
    uri = str(root)
    _chunked(uri, formats)
    s3ddb.dataset(uri).delete("id = 2")  # version 4 rewrites one chunk
    _lose_own_chunks(root, 4)
    with pytest.raises(ManifestCorruptError, match=r"\.chunk is missing"):
        s3ddb.dataset(uri).to_table()
    transactions = _files(root, "_transactions")

    ds = s3ddb.dataset(uri, version=3).restore()
    assert ds.version == 5
    assert sorted(s3ddb.dataset(uri).to_table().column("id").to_pylist()) == list(range(39))
    # One transaction more: the restore's.
    assert len(_files(root, "_transactions") - transactions) == 1
    if formats:
        # The version before cannot be read: the restore is published afresh.
        expected = list(range(39))
        assert sorted(deltalake_read(uri, 5).column("id").to_pylist()) == expected
        metadata = str(root / "metadata" / "v5.metadata.json")
        assert sorted(pyiceberg_read(metadata).column("id").to_pylist()) == expected


def test_a_commit_failing_on_a_lost_chunk_deletes_its_transaction_file(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    uri = str(root)
    _chunked(uri)
    s3ddb.dataset(uri).delete("id = 2")
    [lost] = _lose_own_chunks(root, 4)
    transactions = _files(root, "_transactions")
    # Publishing the newest version needs its every fragment: a definite failure.
    with pytest.raises(ManifestCorruptError, match=lost):
        s3ddb.dataset(uri).enable_open_formats(FORMATS)
    assert s3ddb.dataset(uri).version == 4
    assert _files(root, "_transactions") == transactions
    assert not (root / "metadata").exists() and not (root / "_delta_log").exists()


def test_cleanup_removes_a_version_whose_chunk_is_lost(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    uri = str(root)
    _chunked(uri)
    s3ddb.dataset(uri).delete("id = 2")  # version 4: a deletion file for fragment (2, 3)
    deletions_of_4 = _files(root, "_deletions")
    s3ddb.dataset(uri).delete("id = 3")  # version 5: the fragment goes, with that file
    s3ddb.write_dataset(_ids(range(100, 102)), uri, mode="append")  # version 6
    only_4 = deletions_of_4 - {
        Path(f.deletion_file.path).name
        for f in s3ddb.dataset(uri).manifest.fragments
        if f.deletion_file is not None
    }
    assert only_4
    _lose_own_chunks(root, 4)
    expected = sorted([*range(38), 38, 100, 101])
    expected.remove(2)
    expected.remove(3)

    stats = s3ddb.dataset(uri).cleanup_old_versions(older_than=NOW)
    assert stats.versions_removed == [1, 2, 3, 4, 5]
    ds = s3ddb.dataset(uri)
    assert [v.version for v in ds.versions()] == [6]
    assert sorted(ds.to_table().column("id").to_pylist()) == expected
    # What only the unreadable version listed is not known to be unreferenced by it:
    # like any file no version lists, it goes once older than the grace period.
    assert only_4 <= _files(root, "_deletions")
    s3ddb.dataset(uri).cleanup_old_versions(older_than=NOW, delete_unverified=True)
    assert not only_4 & _files(root, "_deletions")
    assert verify(uri, grace_seconds=0).healthy
    assert sorted(s3ddb.dataset(uri).to_table().column("id").to_pylist()) == expected


def test_cleanup_refuses_when_a_kept_version_lost_a_chunk(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    uri = str(root)
    _chunked(uri)
    s3ddb.dataset(uri).delete("id = 2")
    [lost] = _lose_own_chunks(root, 4)  # of the newest, which cleanup keeps
    before = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    with pytest.raises(ManifestCorruptError, match=lost):
        s3ddb.dataset(uri).cleanup_old_versions(older_than=NOW)
    # It cannot know what the newest lists: nothing is deleted.
    assert sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file()) == before


def test_history_lists_every_version_around_a_lost_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ds"
    uri = str(root)
    _chunked(uri)
    s3ddb.dataset(uri).delete("id = 2")
    s3ddb.dataset(uri).delete("id = 3")
    [lost] = _lose_own_chunks(root, 4)
    assert [v.version for v in s3ddb.dataset(uri).versions()] == [1, 2, 3, 4, 5]
    # Opening version 4 works; reading it is an error local to it, naming the chunk.
    with pytest.raises(ManifestCorruptError, match=lost):
        s3ddb.dataset(uri, version=4).to_table()
    assert s3ddb.dataset(uri, version=3).count_rows() == 39
    assert s3ddb.dataset(uri).count_rows() == 37

    code, out, err = run_cli(capsys, "history", uri, "--json")
    assert code == 0, err
    entries = {e["version"]: e for e in json.loads(out)}
    # Version 4's changes, and version 5's against it, cannot be read.
    for version in (4, 5):
        assert entries[version]["rows_added"] is None
        assert lost in entries[version]["problem"]
    assert all(entries[v]["problem"] is None for v in (1, 2, 3))
    assert entries[3]["rows_added"] == 38
    code, out, err = run_cli(capsys, "history", uri)
    assert code == 0, err
    assert "version 4: rows added and removed are unknown: chunk" in out and lost in out
