"""Committing an operation built elsewhere again (a retry after an unknown outcome
whose first attempt landed), and the clean-up of a commit that definitely failed:
neither lists a file twice nor deletes a file a committed version needs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
import s3ddb.fragment
from s3ddb.commit.committer import commit_transaction
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.errors import (
    CommitConflictError,
    InvalidInputError,
    RetryableCommitConflictError,
    TransactionAlreadyCommittedError,
)
from s3ddb.format import layout
from s3ddb.operations import Append, Overwrite, Transaction
from tests.conftest import TEST_BUCKET, TEST_TABLE


def _ids(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _files(fragments: list[s3ddb.fragment.FragmentMetadata], root: Path) -> list[Path]:
    return [root / layout.data_file_path(d.path) for f in fragments for d in f.files]


@pytest.mark.parametrize("read_at", ["before it", "it"], ids=["stale read", "read after"])
def test_an_append_committed_again_is_refused(tmp_path: Path, read_at: str) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_ids(0, 5), uri)
    fragments = s3ddb.fragment.write_fragments(_ids(100, 3), uri)
    landed = s3ddb.Dataset.commit(uri, Append(fragments), read_version=1)
    assert landed.version == 2
    read_version = 1 if read_at == "before it" else 2
    with pytest.raises(TransactionAlreadyCommittedError, match="version 2 added it"):
        s3ddb.Dataset.commit(uri, Append(fragments), read_version=read_version)
    ds = s3ddb.dataset(uri)
    assert ds.version == 2 and ds.count_rows() == 8
    assert sorted(ds.to_table()["id"].to_pylist()) == [*range(5), *range(100, 103)]
    assert all(p.exists() for p in _files(fragments, tmp_path / "ds"))


@pytest.mark.parametrize("landed_at", [2, 5], ids=["first since", "last since"])
def test_an_append_committed_again_is_refused_among_many_versions(
    location: tuple[str, dict[str, Any] | None], landed_at: int
) -> None:
    """The versions committed since the read version are read side by side on S3:
    the one that added the files is found wherever it lies among them, and named."""
    uri, so = location
    s3ddb.write_dataset(_ids(0, 5), uri, storage_options=so)
    fragments = s3ddb.fragment.write_fragments(_ids(100, 3), uri, storage_options=so)
    for version in range(2, 7):
        if version == landed_at:
            s3ddb.Dataset.commit(uri, Append(fragments), read_version=1, storage_options=so)
        else:
            s3ddb.write_dataset(_ids(10 * version, 2), uri, mode="append", storage_options=so)
    MANIFESTS.clear()  # a fresh process, as where Spark commits: every version is read
    with pytest.raises(TransactionAlreadyCommittedError, match=f"version {landed_at} added it"):
        s3ddb.Dataset.commit(uri, Append(fragments), read_version=1, storage_options=so)
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.version == 6 and ds.count_rows() == 5 + 3 + 4 * 2


def test_an_operation_listing_a_file_twice_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_ids(0, 5), uri)
    [fragment] = s3ddb.fragment.write_fragments(_ids(100, 3), uri)
    with pytest.raises(InvalidInputError, match="twice"):
        s3ddb.Dataset.commit(uri, Append([fragment, fragment]), read_version=1)
    assert s3ddb.dataset(uri).version == 1


def test_a_failed_commit_keeps_the_files_a_later_version_added(tmp_path: Path) -> None:
    """The commit (an append of version 3's fragments, read at version 1) fails for
    good: version 2 overwrote the dataset. Its clean-up deletes what it wrote itself,
    never the files version 3 added, which it claims as its own."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_ids(0, 5), uri)
    s3ddb.write_dataset(_ids(10, 5), uri, mode="overwrite")  # version 2
    fragments = s3ddb.fragment.write_fragments(_ids(100, 3), uri)
    s3ddb.Dataset.commit(uri, Append(fragments), read_version=2)  # version 3
    ds = s3ddb.dataset(uri, 1)
    with pytest.raises(CommitConflictError):
        commit_transaction(ds.handler, Transaction(1, Append(tuple(fragments))), ds.manifest)
    assert all(p.exists() for p in _files(fragments, tmp_path / "ds"))
    assert sorted(s3ddb.dataset(uri).to_table()["id"].to_pylist()) == [
        *range(10, 15),
        *range(100, 103),
    ]


def test_an_overwrite_keeping_fragments_the_read_version_added_commits(tmp_path: Path) -> None:
    """An overwrite lists what the new version keeps, files already committed among
    them (dropping a fragment, as pylance's Overwrite does): not a retry."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_ids(0, 5), uri)
    ds = s3ddb.write_dataset(_ids(10, 6), uri, mode="append", max_rows_per_file=3)  # version 2
    kept = list(ds.manifest.fragments)[-1:]  # ids 13-15, added by version 2
    done = s3ddb.Dataset.commit(uri, Overwrite(tuple(kept), ds.manifest.schema), read_version=2)
    assert done.version == 3
    assert sorted(done.to_table()["id"].to_pylist()) == [13, 14, 15]


def test_two_identical_retries_racing_commit_once(
    location: tuple[str, dict[str, Any] | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both pass the check for files already committed before either claims (held at
    a barrier right after it): the one that loses the version finds, building on the
    winner's, that its files are there, and commits nothing. (The second used to
    rebase and commit them again: a version listing each file twice, unreadable.)"""
    import threading

    from s3ddb.writes import version_writes

    uri, so = location
    s3ddb.write_dataset(_ids(0, 5), uri, storage_options=so)
    fragments = s3ddb.fragment.write_fragments(_ids(100, 3), uri, storage_options=so)
    barrier = threading.Barrier(2, timeout=60)
    real_check = version_writes.check_not_committed

    def check_then_wait(*args: Any) -> None:
        real_check(*args)
        barrier.wait()

    monkeypatch.setattr(version_writes, "check_not_committed", check_then_wait)
    outcomes: list[object] = []

    def retry() -> None:
        try:
            outcomes.append(
                s3ddb.Dataset.commit(uri, Append(fragments), read_version=1, storage_options=so)
            )
        except Exception as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=retry) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    committed = [o for o in outcomes if isinstance(o, s3ddb.Dataset)]
    refused = [o for o in outcomes if isinstance(o, TransactionAlreadyCommittedError)]
    assert len(committed) == 1 and len(refused) == 1, outcomes
    MANIFESTS.clear()
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.version == 2 and sorted(ds.to_table()["id"].to_pylist()) == [*range(5), 100, 101, 102]


def test_a_failed_rollback_keeps_the_older_versions_files(aws: Any) -> None:
    """pylance's way to roll back: an Overwrite listing version 1's fragments, read
    at version 2, which overwrote them. The commit fails for good (S3 answers 500
    to every upload of its transaction file). Its clean-up deletes what it wrote
    itself; the files the operation lists are the caller's, version 1's here, and
    stay: version 1 reads as before, and the same commit succeeds once S3 does.
    (They used to be deleted: version 1 could no longer be read.)"""
    so = aws.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/rollback-{uuid.uuid4().hex[:10]}?ddbTableName={TEST_TABLE}"
    first = s3ddb.write_dataset(_ids(0, 3), uri, storage_options=so)
    s3ddb.write_dataset(_ids(10, 2), uri, mode="overwrite", storage_options=so)  # version 2
    rollback = Overwrite(tuple(first.manifest.fragments), first.manifest.schema)
    try:
        failing = aws.inject_fault("s3", "PutObject", "server_error", 50, path="/_transactions/")
        with pytest.raises(s3ddb.S3DDBError) as raised:
            s3ddb.Dataset.commit(uri, rollback, read_version=2, storage_options=so)
        assert not isinstance(raised.value, s3ddb.CommitStateUnknownError)
        assert failing.triggered >= 1
    finally:
        aws.clear_faults()
    assert s3ddb.dataset(uri, storage_options=so).version == 2
    old = s3ddb.dataset(uri, version=1, storage_options=so)
    assert sorted(old.to_table()["id"].to_pylist()) == [0, 1, 2]
    done = s3ddb.Dataset.commit(uri, rollback, read_version=2, storage_options=so)
    assert done.version == 3 and sorted(done.to_table()["id"].to_pylist()) == [0, 1, 2]


@pytest.mark.parametrize("theirs", ["append", "delete elsewhere"])
def test_a_hand_built_delete_is_not_emptied_by_a_rebase(tmp_path: Path, theirs: str) -> None:
    """pylance's LanceOperation.Delete names the fragments it deletes, not the rows:
    read at version 1 and committed after another writer's commit, it cannot be
    moved onto the newer version (a rebase checks and moves the rows recorded). It
    used to commit as an empty Delete: reported done, nothing deleted."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_ids(0, 4), uri, max_rows_per_file=2)  # fragments 0 and 1
    if theirs == "append":
        s3ddb.dataset(uri).insert(_ids(100, 1))
    else:
        s3ddb.dataset(uri).delete("id = 3")
    mine = s3ddb.LanceOperation.Delete([], [0], "id < 2")
    with pytest.raises(RetryableCommitConflictError, match="does not record which rows"):
        s3ddb.Dataset.commit(uri, mine, read_version=1)
    assert s3ddb.dataset(uri).version == 2
    done = s3ddb.Dataset.commit(uri, mine, read_version=2)  # built again on the newest
    assert sorted(done.to_table()["id"].to_pylist()) == ([2, 3, 100] if theirs == "append" else [2])


def test_a_hand_built_update_does_not_bring_back_a_row_deleted_meanwhile(
    tmp_path: Path,
) -> None:
    """pylance's LanceOperation.Update rewriting fragment 0 (read at version 1) after
    another writer deleted one of its rows: refused for a retry. It used to commit,
    and the deleted row was back."""
    uri = str(tmp_path / "ds")
    first = s3ddb.write_dataset(_ids(0, 3), uri)
    rewritten = s3ddb.fragment.write_fragments(first.to_table(), uri, schema=first.manifest.schema)
    s3ddb.dataset(uri).delete("id = 1")  # version 2
    mine = s3ddb.LanceOperation.Update(removed_fragment_ids=[0], new_fragments=rewritten)
    with pytest.raises(RetryableCommitConflictError, match="does not record which rows"):
        s3ddb.Dataset.commit(uri, mine, read_version=1)
    assert sorted(s3ddb.dataset(uri).to_table()["id"].to_pylist()) == [0, 2]


@pytest.mark.parametrize("kind", ["Delete", "Update"])
def test_a_hand_built_change_of_a_fragment_compacted_meanwhile_is_retried(
    tmp_path: Path, kind: str
) -> None:
    """A hand-built Delete (or Update) that gives fragment 0 a deletion file, read at
    version 1, committed after a compaction rewrote fragment 0: the rows it deleted
    are not recorded, so they cannot follow the compaction to their new addresses.
    Retried; it used to commit, reported done, and change nothing (an Update with new
    rows kept the old row beside the new one)."""
    from pyroaring import BitMap

    from s3ddb.format.deletion import write_deletion_file

    uri = str(tmp_path / "ds")
    first = s3ddb.write_dataset(_ids(0, 8), uri, max_rows_per_file=2)
    fragment = first.manifest.fragments[0]
    deletion = write_deletion_file(first.handler.store, fragment.id, 1, BitMap([1]))
    changed = fragment.with_deletion_file(deletion)
    mine = (
        s3ddb.LanceOperation.Delete([changed], [], "id = 1")
        if kind == "Delete"
        else s3ddb.LanceOperation.Update(updated_fragments=[changed])
    )
    s3ddb.dataset(uri).optimize.compact_files()
    compacted = s3ddb.dataset(uri).version
    with pytest.raises(RetryableCommitConflictError, match="does not record which rows"):
        s3ddb.Dataset.commit(uri, mine, read_version=1)
    after = s3ddb.dataset(uri)
    assert after.version == compacted
    assert sorted(after.to_table()["id"].to_pylist()) == list(range(8))
