"""The commit loop: cleanup on definite failure, retries, create races, failpoints,
and the four-step external-store handler over the in-memory store."""

from __future__ import annotations

import pytest

import s3ddb
from s3ddb.commit.committer import CommitConfig, commit_transaction
from s3ddb.commit.external import ExternalStoreCommitHandler
from s3ddb.commit.failpoints import EXIT_CODE
from s3ddb.commit.handlers import ConditionalPutCommitHandler
from s3ddb.errors import (
    CommitStateUnknownError,
    DatasetAlreadyExistsError,
    ExternalStoreThrottledError,
    InjectedFault,
    InvalidInputError,
    ManifestFinalizationError,
    TooMuchWriteContentionError,
    TransactionAlreadyCommittedError,
)
from s3ddb.external_store.memory import InMemoryManifestStore
from s3ddb.format.datafile import write_fragments_from_table
from s3ddb.format.schema import DatasetSchema
from s3ddb.io import ObjectStore
from s3ddb.operations import Append, Overwrite, Transaction
from tests.conftest import make_table
from tests.support.proc import run_workers
from tests.support.workers import rows_for


def _objects(store: ObjectStore) -> set[str]:
    return {m.path for m in store.list("")}


@pytest.mark.parametrize("point", ["commit.after_transaction_file"])
def test_raise_before_the_decision_cleans_up(
    local_uri: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3ddb.write_dataset(make_table(0, 2), local_uri)
    store = ObjectStore(local_uri)
    before = _objects(store)
    monkeypatch.setenv("S3DDB_FAILPOINTS", f"{point}=raise")
    with pytest.raises(InjectedFault):
        s3ddb.write_dataset(make_table(2, 2), local_uri, mode="append")
    monkeypatch.delenv("S3DDB_FAILPOINTS")
    assert _objects(store) == before, "data and transaction files of a failed commit are deleted"
    assert s3ddb.dataset(local_uri).version == 1


def test_bad_failpoint_spec(local_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s3ddb.write_dataset(make_table(0, 1), local_uri)
    monkeypatch.setenv("S3DDB_FAILPOINTS", "commit.nowhere=exit")
    with pytest.raises(InvalidInputError, match=r"commit\.nowhere"):
        s3ddb.write_dataset(make_table(1, 1), local_uri, mode="append")


@pytest.mark.slow
def test_crash_after_transaction_file_leaves_no_version(local_uri: str) -> None:
    s3ddb.write_dataset(rows_for(0, 0, 1), local_uri)
    [result] = run_workers(
        [("append", local_uri, "1", "1")],
        env={"S3DDB_FAILPOINTS": "commit.after_transaction_file=exit"},
    )
    assert result.returncode == EXIT_CODE
    assert s3ddb.dataset(local_uri).version == 1
    ds = s3ddb.write_dataset(rows_for(2, 0, 1), local_uri, mode="append")
    assert ds.version == 2 and ds.count_rows() == 2


def test_contention_exhaustion_cleans_up(local_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 1), local_uri)
    stale = s3ddb.dataset(local_uri, commit_config=CommitConfig(max_retries=0))
    s3ddb.write_dataset(make_table(1, 1), local_uri, mode="append")
    store = ObjectStore(local_uri)
    before = _objects(store)
    with pytest.raises(TooMuchWriteContentionError, match="1 attempts"):
        stale.insert(make_table(2, 1))
    assert _objects(store) == before
    stale2 = s3ddb.dataset(local_uri, version=1)
    stale2.insert(make_table(3, 1))  # the default policy rebases
    assert stale2.version == 3


def _overwrite_txn(store: ObjectStore, start: int) -> Transaction:
    table = make_table(start, 2)
    schema = DatasetSchema.assign(table.schema)
    return Transaction(
        0, Overwrite(tuple(write_fragments_from_table(store, table, schema)), schema)
    )


def test_create_race_loser_gets_already_exists_and_cleans_up(local_uri: str) -> None:
    handler = ConditionalPutCommitHandler(ObjectStore(local_uri))
    loser = _overwrite_txn(handler.store, 100)  # computed while no dataset existed
    s3ddb.write_dataset(make_table(0, 2), local_uri)
    before = _objects(handler.store)
    with pytest.raises(DatasetAlreadyExistsError, match="created by another writer"):
        commit_transaction(handler, loser, None, on_existing="error")
    assert _objects(handler.store) - before == set()


def test_append_create_race_turns_into_an_append(local_uri: str) -> None:
    handler = ConditionalPutCommitHandler(ObjectStore(local_uri))
    late = _overwrite_txn(handler.store, 100)
    s3ddb.write_dataset(make_table(0, 2), local_uri)
    result = commit_transaction(handler, late, None, on_existing="append")
    assert result.transaction.kind == "Append" and result.manifest.version == 2
    assert sorted(s3ddb.dataset(local_uri).to_table().column("id").to_pylist()) == [0, 1, 100, 101]


# --- the four-step protocol over the in-memory external store --------------------------


@pytest.fixture
def ext(memory_uri: str) -> tuple[ExternalStoreCommitHandler, InMemoryManifestStore]:
    store = InMemoryManifestStore()
    handler = ExternalStoreCommitHandler(ObjectStore(memory_uri), store, "s3://bucket/ds")
    return handler, store


def _append(handler: ExternalStoreCommitHandler, start: int) -> int:
    latest = handler.latest_location()
    base = handler.load_manifest(latest) if latest else None
    table = make_table(start, 2)
    schema = base.schema if base else DatasetSchema.assign(table.schema)
    fragments = tuple(write_fragments_from_table(handler.store, table, schema))
    op = Append(fragments) if base else Overwrite(fragments, schema)
    result = commit_transaction(handler, Transaction(base.version if base else 0, op), base)
    return result.manifest.version


def test_four_steps_leave_a_final_row_and_no_staged_object(ext) -> None:  # type: ignore[no-untyped-def]
    handler, store = ext
    assert _append(handler, 0) == 1
    assert _append(handler, 10) == 2
    rows = list(store.list_versions("s3://bucket/ds"))
    assert [r.version for r in rows] == [1, 2]
    assert not any(r.is_staged for r in rows)
    assert rows[1].extra.get("operation") == "Append"
    names = {m.path for m in handler.store.list("_versions/")}
    assert names == {r.path for r in rows}, "staged manifests are deleted after finalizing"


@pytest.mark.parametrize(
    "point",
    ["commit.after_external_put", "commit.after_copy_final", "commit.after_external_finalize"],
)
def test_failures_after_the_decision_report_success(
    ext, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    handler, store = ext
    _append(handler, 0)
    monkeypatch.setenv("S3DDB_FAILPOINTS", f"{point}=raise")
    assert _append(handler, 10) == 2  # success despite the injected fault
    monkeypatch.delenv("S3DDB_FAILPOINTS")
    latest = handler.latest_location()  # a reader finalizes what is left
    assert latest is not None and latest.version == 2
    row = store.get("s3://bucket/ds", 2)
    assert row is not None and not row.is_staged
    staged_left = [m.path for m in handler.store.list("_versions/") if "manifest-" in m.path]
    if point == "commit.after_external_finalize":
        # Repointed but the staged copy was not deleted: a harmless orphan that
        # version cleanup removes; it is never read because the row is final.
        assert len(staged_left) == 1
    else:
        assert staged_left == []
    assert handler.load_manifest(latest).num_rows == 4


def test_missing_staged_manifest_refuses_to_load(ext, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    handler, store = ext
    _append(handler, 0)
    monkeypatch.setenv("S3DDB_FAILPOINTS", "commit.after_external_put=raise")
    _append(handler, 10)
    monkeypatch.delenv("S3DDB_FAILPOINTS")
    row = store.get("s3://bucket/ds", 2)
    assert row is not None and row.is_staged
    handler.store.delete(row.path)
    with pytest.raises(ManifestFinalizationError, match=r"version 2 .*missing"):
        handler.latest_location()
    after = store.get("s3://bucket/ds", 2)
    assert after is not None and after.path == row.path, "nothing is marked complete"


def test_lost_put_response_is_recognised_as_ours(ext) -> None:  # type: ignore[no-untyped-def]
    handler, store = ext
    _append(handler, 0)
    store.inject_fault("put_if_not_exists", "apply_then_unknown")
    assert _append(handler, 10) == 2
    assert handler.load_manifest(handler.latest_location()).num_rows == 4  # type: ignore[arg-type]


def test_unknown_outcome_keeps_files(ext) -> None:  # type: ignore[no-untyped-def]
    handler, store = ext
    _append(handler, 0)
    before = _objects(handler.store)
    store.inject_fault("put_if_not_exists", "unknown")
    store.inject_fault("get", "unknown")
    with pytest.raises(CommitStateUnknownError, match="kept"):
        _append(handler, 10)
    added = _objects(handler.store) - before
    assert any(p.startswith("data/") for p in added), "data files are kept"
    assert any(p.startswith("_transactions/") for p in added)
    assert handler.latest_location().version == 1  # type: ignore[union-attr]


def test_throttled_put_is_a_definite_failure(ext) -> None:  # type: ignore[no-untyped-def]
    handler, store = ext
    _append(handler, 0)
    before = _objects(handler.store)
    store.inject_fault("put_if_not_exists", "throttle")
    with pytest.raises(ExternalStoreThrottledError):
        _append(handler, 10)
    assert _objects(handler.store) == before


def test_dataset_commit_stores_transaction_properties_and_commits_an_app_txn_once(
    memory_uri: str,
) -> None:
    schema = DatasetSchema.assign(make_table(0, 1).schema)
    fragments = tuple(s3ddb.fragment.write_fragments(make_table(0, 3), memory_uri))
    ds = s3ddb.Dataset.commit(memory_uri, Overwrite(fragments, schema), None)
    batch = {"s3ddb.app_txn.stream-1": "7", "writer": "w"}
    more = tuple(s3ddb.fragment.write_fragments(make_table(3, 2), memory_uri))
    ds = s3ddb.Dataset.commit(ds, Append(more), ds.version, transaction_properties=batch)
    assert ds.last_commit is not None
    assert ds.last_commit.transaction.properties == batch
    assert ds.count_rows() == 5
    again = tuple(s3ddb.fragment.write_fragments(make_table(5, 2), memory_uri))
    with pytest.raises(TransactionAlreadyCommittedError, match="stream-1"):
        s3ddb.Dataset.commit(ds, Append(again), ds.version, transaction_properties=batch)
    assert s3ddb.dataset(memory_uri).count_rows() == 5


def test_dataset_commit_on_existing_append_turns_a_racing_create_into_an_append(
    memory_uri: str,
) -> None:
    schema = DatasetSchema.assign(make_table(0, 1).schema)
    mine = tuple(s3ddb.fragment.write_fragments(make_table(3, 2), memory_uri))
    theirs = tuple(s3ddb.fragment.write_fragments(make_table(0, 3), memory_uri))
    s3ddb.Dataset.commit(memory_uri, Overwrite(theirs, schema), None)
    with pytest.raises(DatasetAlreadyExistsError):
        s3ddb.Dataset.commit(memory_uri, Overwrite(mine, schema), None, on_existing="error")
    ds = s3ddb.Dataset.commit(memory_uri, Overwrite(mine, schema), None, on_existing="append")
    assert (ds.version, ds.count_rows()) == (2, 5)
    assert ds.versions()[-1].operation == "Append"
