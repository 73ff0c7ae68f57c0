"""The background finalizer: steps 3-4 of a process's own commits off the caller's path,
batched deletes of staged manifests, and the rule that version N-1 is final before N is
claimed (a reader of ``_versions/`` is at most one version behind)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.commit.finalizer import BackgroundFinalizer, FinalizeTicket
from s3ddb.io import ObjectStore, parse_uri
from s3ddb.io.object_store import MemoryObjectStore
from s3ddb.versions.pinned import commit_planned
from tests.conftest import TEST_BUCKET
from tests.support.workers import rows_for


class PausedFinalizer(BackgroundFinalizer):
    """A finalizer whose thread starts working only once ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(idle_flush=3600)
        self.release = threading.Event()

    def _run(self) -> None:
        self.release.wait()
        super()._run()


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[PausedFinalizer]:
    """From here on, this process's commits are finished only once released."""
    private = PausedFinalizer()

    def pause() -> PausedFinalizer:
        finalizer.drain()
        monkeypatch.setattr(finalizer, "process_finalizer", lambda: private)
        return private

    yield pause  # type: ignore[misc]
    private.release.set()
    private.drain()


def test_deferred_deletes_go_out_in_one_batch(aws: Any) -> None:
    store = ObjectStore(f"s3://{TEST_BUCKET}/batch-deletes", aws.storage_options())
    paths = [f"_versions/{i}.manifest-x" for i in range(5)]
    for path in paths:
        store.put(path, b"staged")
    worker = BackgroundFinalizer(idle_flush=3600)
    for path in paths:
        worker.defer_delete(store, path)
    assert len(store.list("_versions/")) == 5, "nothing is deleted before a flush"
    aws.clear_requests()
    assert worker.drain()
    assert Counter(r.operation for r in aws.requests) == Counter({"DeleteObjects": 1})
    assert store.list("_versions/") == []


def test_many_deferred_deletes_flush_without_blocking_the_thread(memory_uri: str) -> None:
    store = ObjectStore(memory_uri)
    worker = BackgroundFinalizer(max_pending=1, idle_flush=3600, flush_at=2)
    for i in range(6):
        store.put(f"s{i}", b"x")

    def work(ticket: FinalizeTicket) -> str:
        # Deleting from the worker thread itself with the queue full must not deadlock.
        for i in range(6):
            worker.defer_delete(store, f"s{i}")
        return "final"

    tickets = [worker.submit(("s3://b/d", v), f"staged-{v}", work) for v in (1, 2, 3)]
    assert all(t.wait_done(timeout=30) for t in tickets)
    assert worker.drain(timeout=30)
    assert store.list("") == []


def test_ticket_reports_copied_or_failed() -> None:
    worker = BackgroundFinalizer()

    def fails_before_copy(ticket: FinalizeTicket) -> str:
        raise OSError("copy refused")

    def copies_then_fails(ticket: FinalizeTicket) -> str:
        ticket.mark_copied()
        raise OSError("repoint refused")

    failed = worker.submit(("s3://b/d", 1), "a", fails_before_copy)
    half = worker.submit(("s3://b/d", 2), "b", copies_then_fails)
    ok = worker.submit(("s3://b/d", 3), "c", lambda ticket: "final-3")
    assert failed.wait_copied(timeout=30) is False and failed.wait_done(timeout=30) is False
    assert half.wait_copied(timeout=30) is True and half.wait_done(timeout=30) is False
    assert ok.wait_copied(timeout=30) is True and ok.wait_done(timeout=30) is True
    assert ok.result == "final-3" and isinstance(failed.error, OSError)
    assert worker.ticket(("s3://b/d", 3), "c") is ok
    assert worker.ticket(("s3://b/d", 3), "other-staged-path") is None


def test_the_next_version_waits_for_the_previous_final_copy(
    aws: Any, ddb_uri: str, paused: Callable[[], PausedFinalizer]
) -> None:
    so = aws.storage_options()
    plain = parse_uri(ddb_uri).object_url
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    worker = paused()
    ds = s3ddb.write_dataset(rows_for(0, 1, 1), ddb_uri, mode="append", storage_options=so)
    assert ds.version == 2, "the caller does not wait for steps 3-4"
    # Version 2 is decided but staged: a reader without DynamoDB is one behind.
    assert s3ddb.dataset(plain, storage_options=so).version == 1

    outcome: list[Any] = []

    def third() -> None:
        try:
            outcome.append(
                s3ddb.write_dataset(rows_for(0, 2, 1), ddb_uri, mode="append", storage_options=so)
            )
        except BaseException as exc:  # reported below
            outcome.append(exc)

    writer = threading.Thread(target=third)
    writer.start()
    writer.join(timeout=1.0)
    assert writer.is_alive(), "version 3 may not be claimed while version 2 is not final"
    assert s3ddb.dataset(plain, storage_options=so).version == 1
    worker.release.set()
    writer.join(timeout=120)
    assert not writer.is_alive()
    [result] = outcome
    assert isinstance(result, s3ddb.Dataset) and result.version == 3
    assert worker.drain()
    assert s3ddb.dataset(plain, storage_options=so).version == 3
    ids = sorted(s3ddb.dataset(ddb_uri, storage_options=so).to_table().column("id").to_pylist())
    assert ids == [0, 1000, 2000]


def test_a_reader_waits_for_its_own_process_instead_of_racing(
    aws: Any, ddb_uri: str, paused: Callable[[], PausedFinalizer]
) -> None:
    so = aws.storage_options()
    worker = paused()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, storage_options=so)
    aws.clear_requests()
    threading.Timer(0.2, worker.release.set).start()
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert ds.version == 1 and ds.count_rows() == 2
    ops = Counter(r.operation for r in aws.requests)
    # One copy and one repoint, both by the finalizer: the reader did neither.
    assert ops["CopyObject"] == 1 and ops["UpdateItem"] == 1, ops
    assert ops["HeadObject"] == 0, ops


class _RewritingStore(MemoryObjectStore):
    """An object store that, like s3rver, shows a final manifest as missing, then
    part-written, for a moment after it was (re)written."""

    settling: dict[str, int]

    def head(self, path: str) -> Any:
        left = self.settling.get(path, 0)
        if left:
            self.settling[path] = left - 1
            if left > 1:
                raise FileNotFoundError(path)
            real = super().head(path)
            return type(real)(real.path, real.size // 2, real.modified)
        return super().head(path)


def test_finalizing_waits_for_a_store_that_rewrites_objects_in_place(memory_uri: str) -> None:
    from s3ddb.commit.external import ExternalStoreCommitHandler
    from s3ddb.external_store.identity import final_path_of
    from s3ddb.external_store.memory import InMemoryManifestStore
    from s3ddb.format import layout
    from s3ddb.versions.opening import placeholder_manifest

    store = _RewritingStore(memory_uri)
    store.settling = {}
    handler = ExternalStoreCommitHandler(store, InMemoryManifestStore(), "s3://b/settling")
    ds = s3ddb.Dataset(memory_uri, handler, placeholder_manifest())
    table = rows_for(0, 0, 2)
    schema = s3ddb.format.schema.DatasetSchema.assign(table.schema)
    fragments = tuple(s3ddb.fragment.write_fragments(table, memory_uri, schema=schema))
    final = layout.manifest_path(1, ds.manifest.naming_scheme)
    store.settling[final] = 3  # missing twice, then part-written once
    commit_planned(ds, s3ddb.operations.Overwrite(fragments, schema), None)
    (row,) = handler.external.list_versions("s3://b/settling")
    assert not row.is_staged and row.path == final_path_of(row.path) == final
    assert store.settling[final] == 0


class _TornReadStore(MemoryObjectStore):
    """An object store that, like s3rver while another writer rewrites a final
    manifest, returns it missing, then torn, for a moment."""

    settling: dict[str, int]

    def _settled(self, path: str) -> bytes | None:
        """None once ``path`` has settled; before, raises (missing) or the torn bytes."""
        left = self.settling.get(path, 0)
        if not left:
            return None
        self.settling[path] = left - 1
        if left > 1:
            raise FileNotFoundError(path)
        return super().get(path)[:10]

    def get(self, path: str) -> bytes:
        torn = self._settled(path)
        return super().get(path) if torn is None else torn

    def get_bounded(self, path: str, limit: int) -> tuple[bytes, int]:
        torn = self._settled(path)
        return super().get_bounded(path, limit) if torn is None else (torn, len(torn))


def test_a_final_manifest_read_while_another_writer_rewrites_it_is_read_again(
    memory_uri: str,
) -> None:
    from s3ddb.commit import manifest_cache
    from s3ddb.commit.external import ExternalStoreCommitHandler
    from s3ddb.external_store.memory import InMemoryManifestStore
    from s3ddb.format import layout
    from s3ddb.versions.opening import load_latest, placeholder_manifest

    external = InMemoryManifestStore()
    writer = ExternalStoreCommitHandler(ObjectStore(memory_uri), external, "s3://b/torn")
    table = rows_for(0, 0, 2)
    schema = s3ddb.format.schema.DatasetSchema.assign(table.schema)
    fragments = tuple(s3ddb.fragment.write_fragments(table, memory_uri, schema=schema))
    ds = s3ddb.Dataset(memory_uri, writer, placeholder_manifest())
    commit_planned(ds, s3ddb.operations.Overwrite(fragments, schema), None)
    manifest_cache.MANIFESTS.clear()
    store = _TornReadStore(memory_uri)
    final = layout.manifest_path(1, ds.manifest.naming_scheme)
    store.settling = {final: 3}  # missing twice, then torn once
    reader = ExternalStoreCommitHandler(store, external, "s3://b/torn")
    assert load_latest(reader, memory_uri) == ds.manifest
    assert store.settling[final] == 0
