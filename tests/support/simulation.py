"""Deterministic simulation of concurrent writers, readers and cleanup on the external
manifest store protocol, over in-memory stores, with injected faults.

Each *actor* (a writer doing a random mix of operations, a reader, a cleaner) runs
s3ddb's real code in a thread of its own, but only one actor runs at a time: every
call to the object store or the external store is a *step* at which a seeded
scheduler picks the actor that goes next, and may inject a fault into the call:

* ``crash``: the actor dies before the call (or just after it was applied): like
  SIGKILL, nothing it would still do — its cleanup included — reaches the stores;
* ``error``: the call fails without effect (a dropped request, throttling);
* ``lost``: the call is applied but its response is lost (the caller gets an error).

Actors are like separate processes: each has its own commit handler; they share the
in-memory object store and the in-memory DynamoDB table. The process-wide caches of
s3ddb are shared between them (a stricter test: one actor's cache may serve another).
File names come from per-actor seeded generators, so a seed replays the same run.

:func:`run_schedule` runs one seed and checks the invariants of the protocol; it
returns a :class:`Report`, whose ``violations`` are empty when all hold.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pyarrow as pa

import s3ddb
from s3ddb.commit.external import ExternalStoreCommitHandler
from s3ddb.commit.handlers import ConditionalPutCommitHandler
from s3ddb.errors import (
    CommitConflictError,
    EndpointUnreachableError,
    ExternalStoreUnreachableError,
    S3DDBError,
)
from s3ddb.external_store.identity import CLAIM_ATTRIBUTE, final_path_of
from s3ddb.external_store.manifest_store import (
    ExternalManifestStore,
    ExternalStoreOutcomeUnknownError,
)
from s3ddb.external_store.memory import InMemoryManifestStore
from s3ddb.format import naming
from s3ddb.format.manifest import referenced_paths
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.object_store import MemoryObjectStore, ObjectStore
from s3ddb.open_formats.publisher import (
    CONFIG_KEY,
    expected_table,
    forget_states,
    publish_version,
    writer_of,
)
from s3ddb.operations import Overwrite
from s3ddb.versions.opening import load_latest, placeholder_manifest
from s3ddb.versions.pinned import commit_planned
from tests.support.torture import SCHEMA, allowed_states, apply, perform, plan

NO_BACKOFF = s3ddb.CommitConfig(backoff_base=0.0, backoff_max=0.0, timeout=30.0)
KINDS = ("append", "append", "delete", "update", "upsert", "compact", "config")


class Crash(BaseException):
    """The actor died (not an Exception: s3ddb's handlers must not catch it)."""


class Stuck(Exception):
    """The schedule did not finish (a deadlock between actors, or a hang)."""


@dataclass
class Actor:
    name: str
    body: Callable[[Actor], None]
    rng: random.Random
    log: list[dict[str, Any]] = field(default_factory=list)
    crashed: bool = False
    done: bool = False
    error: BaseException | None = None


class Scheduler:
    """Runs actors one at a time, switching (and injecting faults) at each step."""

    def __init__(self, seed: int, fault_rate: float) -> None:
        self.rng = random.Random(seed)
        self.fault_rate = fault_rate
        self.actors: list[Actor] = []
        self.trace: list[str] = []
        self._cond = threading.Condition()
        self._turn: Actor | None = None
        self._by_thread: dict[int, Actor] = {}
        #: Every staged manifest written, by path: a final manifest must be a copy.
        self.staged: dict[str, bytes] = {}

    def add(self, name: str, body: Callable[[Actor], None]) -> None:
        self.actors.append(Actor(name, body, random.Random(self.rng.randrange(2**63))))

    def current(self) -> Actor | None:
        return self._by_thread.get(threading.get_ident())

    # --- the step every store call goes through --------------------------------------

    def step(self, service: str, operation: str, detail: str, apply: Callable[[], Any]) -> Any:
        actor = self.current()
        if actor is None:  # a helper thread of an actor (parallel reads): not scheduled
            return apply()
        if actor.crashed:
            raise Crash()
        self._switch(actor)
        fault = self._fault(service, operation)
        self.trace.append(
            f"{actor.name}: {service}.{operation}({detail}){' ' + fault if fault else ''}"
        )
        if fault == "crash":
            actor.crashed = True
            raise Crash()
        if fault == "error":
            raise _error(service, operation, applied=False)
        result = apply()
        if fault == "lost":
            raise _error(service, operation, applied=True)
        if fault == "crash-after":
            actor.crashed = True
            raise Crash()
        return result

    def _fault(self, service: str, operation: str) -> str | None:
        if self.rng.random() >= self.fault_rate:
            return None
        kinds = ["crash", "crash-after", "error"]
        if operation not in ("get", "list", "head", "get_latest", "list_versions", "exists"):
            kinds.append("lost")
        return self.rng.choice(kinds)

    def _switch(self, actor: Actor) -> None:
        with self._cond:
            runnable = [a for a in self.actors if not a.done]
            chosen = self.rng.choice(runnable)
            if chosen is actor:
                return
            self._turn = chosen
            self._cond.notify_all()
            self._wait_for_turn(actor)

    def _wait_for_turn(self, actor: Actor) -> None:
        while self._turn is not actor:
            if not self._cond.wait(timeout=60):
                raise Stuck(f"{actor.name} waited 60 s for its turn")

    # --- running ---------------------------------------------------------------------

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._run_actor, args=(a,), daemon=True) for a in self.actors
        ]
        for t in threads:
            t.start()
        with self._cond:
            self._turn = self.rng.choice(self.actors)
            self._cond.notify_all()
        for t in threads:
            t.join(timeout=300)
            if t.is_alive():
                raise Stuck("an actor did not finish within 300 s\n" + "\n".join(self.trace[-30:]))

    def _run_actor(self, actor: Actor) -> None:
        self._by_thread[threading.get_ident()] = actor
        with self._cond:
            self._wait_for_turn(actor)
        try:
            with _seeded_uuids(actor.rng):
                actor.body(actor)
        except Crash:
            pass
        except BaseException as exc:  # a bug: reported as a violation
            actor.error = exc
        finally:
            # Thread ids are reused: a later helper thread must not pass for this actor.
            self._by_thread.pop(threading.get_ident(), None)
            with self._cond:
                actor.done = True
                runnable = [a for a in self.actors if not a.done]
                self._turn = self.rng.choice(runnable) if runnable else None
                self._cond.notify_all()


def _error(service: str, operation: str, applied: bool) -> Exception:
    what = "response lost" if applied else "request failed"
    if service == "dynamodb":
        # As the DynamoDB store reports them: a request that may have applied is an
        # unknown outcome; one that never reached the table is "unreachable".
        if applied:
            return ExternalStoreOutcomeUnknownError(f"simulated: DynamoDB {operation}: {what}")
        return ExternalStoreUnreachableError(f"simulated: DynamoDB {operation}: {what}")
    return EndpointUnreachableError(f"simulated: S3 {operation}: {what}")


_UUID_LOCAL = threading.local()
_real_uuid4 = uuid.uuid4


def _uuid4() -> uuid.UUID:
    rng = getattr(_UUID_LOCAL, "rng", None)
    if rng is None:
        return _real_uuid4()
    return uuid.UUID(int=rng.getrandbits(128), version=4)


class _ActorNameBits(random.Random):
    """The bits of new file names (``naming.name_bits``) during a schedule: the
    running actor's seeded generator, so a seed replays with the same file names;
    other threads' names stay random."""

    def getrandbits(self, k: int) -> int:
        rng = getattr(_UUID_LOCAL, "rng", None)
        return (rng or _REAL_NAME_BITS).getrandbits(k)


_REAL_NAME_BITS = naming.name_bits
_ACTOR_NAME_BITS = _ActorNameBits()


@contextmanager
def seeded_names() -> Iterator[None]:
    """Seeded ids and file names for the block (see :func:`_seeded_uuids`)."""
    uuid.uuid4 = _uuid4  # per-actor seeded names (other threads keep real ones)
    naming.name_bits = _ACTOR_NAME_BITS
    try:
        yield
    finally:
        uuid.uuid4 = _real_uuid4
        naming.name_bits = _REAL_NAME_BITS


@contextmanager
def _seeded_uuids(rng: random.Random) -> Iterator[None]:
    _UUID_LOCAL.rng = random.Random(rng.randrange(2**63))
    try:
        yield
    finally:
        _UUID_LOCAL.rng = None


# --- stores whose every call is a step -----------------------------------------------


class SimObjectStore(MemoryObjectStore):
    """The in-memory object store, one step per call."""

    sim: Scheduler

    def _step(self, operation: str, detail: str, apply: Callable[[], Any]) -> Any:
        return self.sim.step("s3", operation, detail, apply)

    def get(self, path: str) -> bytes:
        return self._step("get", path, lambda: super(SimObjectStore, self).get(path))

    def put(self, path: str, data: bytes) -> None:
        self._step("put", path, lambda: super(SimObjectStore, self).put(path, data))

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        apply = lambda: super(SimObjectStore, self).put_if_not_exists(path, data)  # noqa: E731
        self._step("put_if_not_exists", path, apply)

    def put_with_etag(self, path: str, data: bytes) -> str | None:
        if ".manifest-" in path:
            self.sim.staged[path] = data
        apply = lambda: super(SimObjectStore, self).put_with_etag(path, data)  # noqa: E731
        return self._step("put", path, apply)

    def copy(self, src: str, dst: str) -> str | None:
        return self._step(
            "copy", f"{src} -> {dst}", lambda: super(SimObjectStore, self).copy(src, dst)
        )

    def head(self, path: str) -> Any:
        return self._step("head", path, lambda: super(SimObjectStore, self).head(path))

    def exists(self, path: str) -> bool:
        return self._step("exists", path, lambda: super(SimObjectStore, self).exists(path))

    def delete(self, path: str) -> None:
        self._step("delete", path, lambda: super(SimObjectStore, self).delete(path))

    def delete_many(
        self, paths: list[str], *, deleted: Callable[[list[str]], None] | None = None
    ) -> None:
        apply = lambda: super(SimObjectStore, self).delete_many(paths, deleted=deleted)  # noqa: E731
        self._step("delete_many", f"{len(paths)} paths", apply)

    def list(self, prefix: str = "") -> Any:
        return self._step("list", prefix, lambda: super(SimObjectStore, self).list(prefix))


def _external(sim: Scheduler, table: str) -> ExternalManifestStore:
    store = InMemoryManifestStore(table)
    operations = (
        "put_if_not_exists",
        "finalize",
        "get",
        "get_latest",
        "list_versions",
        "delete_versions",
        "put_group",
        "get_group",
    )
    for name in operations:
        original = getattr(store, name)

        def stepped(
            *args: Any, _o: Callable[..., Any] = original, _n: str = name, **kw: Any
        ) -> Any:
            return sim.step("dynamodb", _n, str(args[1:2])[:40], lambda: _o(*args, **kw))

        setattr(store, name, stepped)
    return store


# --- one schedule --------------------------------------------------------------------


@dataclass
class Report:
    seed: int
    trace: list[str]
    logs: dict[str, list[dict[str, Any]]]
    violations: list[str]
    versions: int = 0
    faults: int = 0


def run_schedule(
    seed: int,
    writers: int = 3,
    ops: int = 3,
    fault_rate: float = 0.03,
    open_formats: bool = False,
) -> Report:
    """One seeded schedule: ``writers`` writers of ``ops`` operations each, a reader and
    a cleaner, then the invariants. With ``open_formats`` the dataset publishes Iceberg
    and Delta from its second version on, and the published state is checked too."""
    sim = Scheduler(seed, fault_rate)
    name = f"sim-{seed}-{uuid.uuid4().hex[:8]}"
    url = f"memory://{name}/ds"
    base_uri = f"s3://{name}/ds"

    def handler() -> ExternalStoreCommitHandler:
        store = SimObjectStore(url)
        store.sim = sim
        return ExternalStoreCommitHandler(store, _external(sim, name), base_uri)

    def open_latest() -> s3ddb.Dataset:
        h = handler()
        return s3ddb.Dataset(url, h, load_latest(h, url), commit_config=NO_BACKOFF)

    # A writer that opened the dataset at version 1, two days ago (see _seed_versions).
    stale = s3ddb.Dataset(url, handler(), placeholder_manifest(), commit_config=NO_BACKOFF)
    sim.add("w9", _stale_writer(stale))
    for w in range(1, writers + 1):
        sim.add(f"w{w}", _writer(open_latest, w, ops))
    sim.add("reader", _reader(open_latest))
    sim.add("cleaner", _cleaner(open_latest))
    violations: list[str] = []
    try:
        with seeded_names():
            with _seeded_uuids(random.Random(seed)):
                _seed_versions(url, name, base_uri, stale, open_formats)
            sim.run()
    except Stuck as exc:
        violations.append(str(exc))
    return finish_report(
        seed, sim, name, violations, lambda: _check(url, name, base_uri, sim, open_formats)
    )


def finish_report(
    seed: int, sim: Scheduler, name: str, violations: list[str], check: Callable[[], list[str]]
) -> Report:
    """The report of a finished run: the actors' errors, then (if none) what ``check``
    finds; the run's in-memory objects and rows (under ``name``) are dropped."""
    for actor in sim.actors:
        if actor.error is not None:
            violations.append(f"{actor.name} raised {type(actor.error).__name__}: {actor.error}")
    if not violations:
        try:
            violations += check()
        except Exception as exc:  # the check itself could not read the dataset
            violations.append(f"checking failed: {type(exc).__name__}: {exc}")
    report = Report(seed, sim.trace, {a.name: a.log for a in sim.actors}, violations)
    report.faults = sum(
        1 for line in sim.trace if line.endswith(("crash", "crash-after", "error", "lost"))
    )
    fs = fsspec.filesystem("memory")
    if fs.exists(f"/{name}"):
        fs.rm(f"/{name}", recursive=True)
    InMemoryManifestStore.reset_shared(name)
    return report


def _writer(open_latest: Callable[[], s3ddb.Dataset], w: int, ops: int) -> Callable[[Actor], None]:
    def body(actor: Actor) -> None:
        mine: dict[int, str] = {}
        for n in range(1, ops + 1):
            op = plan(actor.rng, n, w, mine, KINDS, max_rows=2)
            actor.log.append({"start": n, **op})
            try:
                version = perform(open_latest(), op)
            except CommitConflictError:
                actor.log.append({"fail": n})
                continue
            except S3DDBError as exc:  # unknown outcome (a fault): stop, like a crash
                actor.log.append({"unknown": n, "error": f"{type(exc).__name__}: {exc}"})
                return
            apply(op, mine)
            actor.log.append({"ack": n, "version": version})

    return body


def _seed_versions(
    url: str, name: str, base_uri: str, stale: s3ddb.Dataset, open_formats: bool = False
) -> None:
    """Versions 1-4, two days old (so that cleanup may remove them): the seed rows, then
    configuration changes (with ``open_formats``, the first turns on Iceberg and Delta);
    ``stale`` is pinned at version 1, seen as the newest then."""
    seed_handler = ExternalStoreCommitHandler(
        ObjectStore(url), InMemoryManifestStore(name), base_uri
    )
    first = pa.table({"id": [0, 1], "val": ["seed", "seed"]}, schema=SCHEMA)
    fragments = tuple(s3ddb.fragment.write_fragments(first, url))
    with _backdated(days=2):
        ds = s3ddb.Dataset(url, seed_handler, placeholder_manifest())
        commit_planned(ds, Overwrite(fragments, DatasetSchema.assign(SCHEMA)), None)
        stale.move_to(ds.manifest, seen_newest=False)  # seen as the newest two days ago
        for n in range(3):
            # Tiny fragment-list chunks: the actors' commits write, merge and share them.
            chunked = {"s3ddb.chunk_fragments": "16", "s3ddb.inline_fragments": "4"}
            if open_formats:
                chunked[CONFIG_KEY] = "iceberg,delta"
            ds.update_config({"seeded": str(n), **(chunked if n == 0 else {})})


@contextmanager
def _backdated(days: int) -> Iterator[None]:
    """Commits made inside carry times ``days`` in the past (no actor runs meanwhile)."""
    real_time, real_ns = time.time, time.time_ns
    shift = days * 86_400
    time.time = lambda: real_time() - shift  # type: ignore[assignment]
    time.time_ns = lambda: real_ns() - shift * 1_000_000_000  # type: ignore[assignment]
    try:
        yield
    finally:
        time.time, time.time_ns = real_time, real_ns  # type: ignore[assignment]


def _stale_writer(ds: s3ddb.Dataset) -> Callable[[Actor], None]:
    """Appends its rows on a base seen as the newest long ago (version 1)."""

    def body(actor: Actor) -> None:
        op = {"op": "append", "rows": {9_000_010: "stale", 9_000_011: "stale"}}
        actor.log.append({"start": 1, **op})
        try:
            version = perform(ds, op)
        except CommitConflictError:
            actor.log.append({"fail": 1})
            return
        except S3DDBError as exc:
            actor.log.append({"unknown": 1, "error": f"{type(exc).__name__}: {exc}"})
            return
        actor.log.append({"ack": 1, "version": version})

    return body


def _reader(open_latest: Callable[[], s3ddb.Dataset]) -> Callable[[Actor], None]:
    def body(actor: Actor) -> None:
        seen = 0
        for _ in range(3):
            try:
                ds = open_latest()
                ids = ds.to_table(columns=["id"]).column("id").to_pylist()
            except S3DDBError:
                continue
            actor.log.append({"read": ds.version, "rows": len(ids)})
            if len(ids) != len(set(ids)):
                raise AssertionError(f"version {ds.version} holds duplicated ids")
            if ds.version < seen:
                raise AssertionError(f"read version {ds.version} after {seen}")
            seen = ds.version

    return body


def _cleaner(open_latest: Callable[[], s3ddb.Dataset]) -> Callable[[Actor], None]:
    def body(actor: Actor) -> None:
        try:
            stats = open_latest().cleanup_old_versions(older_than=dt.timedelta(days=1))
        except S3DDBError:
            return
        actor.log.append({"cleanup": list(stats.versions_removed)})

    return body


def _check(
    url: str, name: str, base_uri: str, sim: Scheduler, open_formats: bool = False
) -> list[str]:
    """The invariants, on the stores as the schedule left them (no faults from here)."""
    out: list[str] = []
    external = InMemoryManifestStore(name)
    store = ObjectStore(url)
    rows = list(external.list_versions(base_uri))
    versions = [r.version for r in rows]
    if versions != list(range(versions[0], versions[0] + len(versions))):
        out.append(f"versions are not contiguous: {versions}")
    # Invariant 4: a reader that knows nothing of the external store is at most one behind.
    plain = ConditionalPutCommitHandler(store).latest_location()
    if plain is None or plain.version < versions[-1] - 1:
        out.append(f"a plain reader sees {plain and plain.version}, the table {versions[-1]}")
    # Invariant 4's mechanism: a version is claimed only once the one before it has its
    # final manifest (its row may still name the staged one); invariant 5: a final
    # manifest is a byte copy of the staged manifest its row claimed.
    for r in rows:
        final = final_path_of(r.path) if r.is_staged else r.path
        claimed = r.extra.get(CLAIM_ATTRIBUTE, r.path)
        if not store.exists(final):
            if r is not rows[-1]:
                out.append(f"version {r.version} is not the newest but has no final manifest")
            continue
        if claimed in sim.staged and store.get(final) != sim.staged[claimed]:
            out.append(f"the final manifest of version {r.version} differs from {claimed}")
    # A reader finishes what the writers left, then everything must hold.
    repaired = ExternalStoreCommitHandler(store, external, base_uri)
    ds = s3ddb.Dataset(url, repaired, load_latest(repaired, url))
    for r in external.list_versions(base_uri):
        try:
            manifest = repaired.load_manifest(repaired.location_of(r.version))
        except Exception as exc:
            out.append(f"version {r.version} does not load: {type(exc).__name__}: {exc}")
            continue
        for path in referenced_paths(manifest):
            if not store.exists(path):
                out.append(f"version {r.version} references {path}, which is gone")
    ids = ds.to_table().to_pylist()
    by_id = {r["id"]: r["val"] for r in ids}
    if len(by_id) != len(ids):
        out.append("the newest version holds duplicated ids")
    if {k: by_id.get(k) for k in (0, 1)} != {0: "seed", 1: "seed"}:
        out.append("the seed rows changed")
    for actor in sim.actors:
        if not actor.name.startswith("w"):
            continue
        w = int(actor.name[1:])
        low, high = w * 1_000_000, (w + 1) * 1_000_000
        actual = {k: v for k, v in by_id.items() if low <= k < high}
        allowed = allowed_states(actor.log)
        if actual not in allowed:
            out.append(f"{actor.name} holds {actual}, expected one of {allowed}")
    if open_formats:
        out += _check_published(name, store, repaired, ds)
    return out


def _check_published(
    name: str, store: ObjectStore, handler: ExternalStoreCommitHandler, ds: s3ddb.Dataset
) -> list[str]:
    """The newest version's Iceberg and Delta state, once a publication caught up with
    what the actors left (a crashed finisher's version, say): it agrees with the
    manifests, and deltalake reads the rows s3ddb reads (from a copy of the objects on
    local disk: the Delta log's paths are relative)."""
    import tempfile
    from pathlib import Path

    from tests.open_formats.readers import deltalake_read

    out: list[str] = []
    manifest = ds.manifest
    forget_states()  # where each format stands is read from its files
    publish_version(store, manifest, handler.manifest_if_kept)
    for format_name in ("iceberg", "delta"):
        expected = expected_table(store, manifest, handler.manifest_if_kept, format_name)
        try:
            state = writer_of(format_name).load_state(store, expected)
        except S3DDBError as exc:
            out.append(f"version {manifest.version} as {format_name}: {exc}")
            continue
        if state is None:
            out.append(f"version {manifest.version} is not published as {format_name}")
    fs = fsspec.filesystem("memory")
    with tempfile.TemporaryDirectory() as local:
        for path in fs.find(f"/{name}/ds"):
            target = Path(local, path[len(f"/{name}/ds/") :])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(fs.cat_file(path))
        got = deltalake_read(local, manifest.version).to_pylist()
    want = ds.to_table().to_pylist()
    key = lambda r: r["id"]  # noqa: E731
    if sorted(got, key=key) != sorted(want, key=key):
        out.append(f"deltalake reads version {manifest.version} otherwise than s3ddb")
    return out


# --- many schedules, and the smallest failing one ------------------------------------


def shape(seed: int) -> dict[str, Any]:
    """How big a schedule a seed runs, and how faulty: varied with the seed."""
    return {"writers": 1 + seed % 3, "ops": 2 + seed % 3, "fault_rate": (0.0, 0.03, 0.1)[seed % 3]}


def shrink(seed: int, params: dict[str, Any]) -> Report:
    """The smallest schedule of ``seed`` (fewest writers, then operations; no faults if
    it still fails without them) that still breaks an invariant."""
    best = run_schedule(seed, **params)
    publishing = bool(params.get("open_formats"))
    for writers in range(1, params["writers"] + 1):
        for ops in range(1, params["ops"] + 1):
            for fault_rate in sorted({0.0, params["fault_rate"]}):
                if (writers, ops) == (params["writers"], params["ops"]) and fault_rate == params[
                    "fault_rate"
                ]:
                    return best
                report = run_schedule(
                    seed, writers=writers, ops=ops, fault_rate=fault_rate, open_formats=publishing
                )
                if report.violations:
                    return report
    return best


def describe(report: Report) -> str:
    lines = [f"seed {report.seed}: {len(report.violations)} invariant(s) broken:"]
    lines += [f"  - {v}" for v in report.violations]
    lines += ["actors' logs:"] + [f"  {name}: {log}" for name, log in report.logs.items()]
    lines += [f"schedule ({len(report.trace)} steps):"] + [f"  {t}" for t in report.trace]
    return "\n".join(lines)
