"""Deterministic simulation of group commits (``s3ddb.atomic``) and snapshots
(``s3ddb.snapshot``) over two datasets sharing one in-memory DynamoDB table, with the
scheduler and fault injection of tests/support/simulation.py (crashes, failed requests and
lost responses at every store call, the group's TransactWriteItems and
TransactGetItems included).

Actors: group writers, each committing groups that append the same row to both
datasets (and sometimes delete one of its earlier rows from both); a single writer
appending to the first dataset only; a snapshot reader. Invariant 8 is checked by
the reader (a snapshot holds the same group rows in both datasets) and at the end,
after a reader repaired what crashed writers left: every group is in both datasets or
in neither, acknowledged groups are in both, failed ones in neither.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.commit import external
from s3ddb.commit.external import ExternalStoreCommitHandler
from s3ddb.errors import CommitConflictError, S3DDBError
from s3ddb.external_store.memory import InMemoryManifestStore
from s3ddb.format.schema import DatasetSchema
from s3ddb.groups import snapshots
from s3ddb.groups.atomic_group import AtomicGroup
from s3ddb.groups.snapshots import snapshot_of
from s3ddb.io.object_store import ObjectStore
from s3ddb.operations import Overwrite
from s3ddb.versions.opening import load_latest, placeholder_manifest
from s3ddb.versions.pinned import commit_planned
from tests.support.simulation import (
    NO_BACKOFF,
    Actor,
    Report,
    Scheduler,
    SimObjectStore,
    Stuck,
    _external,
    _seeded_uuids,
    finish_report,
    seeded_names,
)

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("val", pa.string())])
NAMES = ("a", "b")
SINGLE = 9  # the single writer's number: its ids are 9_000_000 + n


class _Inline:
    """An executor that runs each task at once, in the caller's thread."""

    def map(self, fn: Callable[[Any], Any], items: Any) -> Any:
        return [fn(i) for i in items]


def _rows(*ids: int, val: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "val": [val] * len(ids)}, SCHEMA)


def run_group_schedule(
    seed: int, writers: int = 2, ops: int = 2, fault_rate: float = 0.03
) -> Report:
    """One seeded schedule of ``writers`` group writers of ``ops`` groups each, a
    single writer and a snapshot reader; then the invariants."""
    sim = Scheduler(seed, fault_rate)
    name = f"gsim-{seed}-{uuid.uuid4().hex[:8]}"
    urls = {n: f"memory://{name}/{n}" for n in NAMES}
    bases = {n: f"s3://{name}/{n}" for n in NAMES}

    def handler(n: str) -> ExternalStoreCommitHandler:
        store = SimObjectStore(urls[n])
        store.sim = sim
        return ExternalStoreCommitHandler(store, _external(sim, name), bases[n])

    def open_latest(n: str) -> s3ddb.Dataset:
        h = handler(n)
        return s3ddb.Dataset(urls[n], h, load_latest(h, urls[n]), commit_config=NO_BACKOFF)

    for w in range(1, writers + 1):
        sim.add(f"g{w}", _group_writer(open_latest, w, ops))
    sim.add("single", _single_writer(open_latest, ops))
    sim.add("snapshots", _snapshot_reader(handler, urls))
    violations: list[str] = []
    # A snapshot's reads run in the reader's own thread, each one a step (others may
    # commit in between), instead of on helper threads that are not scheduled: those
    # of its handlers' latest_together, and its own.
    pool, snapshots.process_pool = snapshots.process_pool, lambda *a, **k: _Inline()
    external.process_pool = snapshots.process_pool
    try:
        with seeded_names():
            with _seeded_uuids(random.Random(seed)):
                for n in NAMES:
                    seed_handler = ExternalStoreCommitHandler(
                        ObjectStore(urls[n]), InMemoryManifestStore(name), bases[n]
                    )
                    ds = s3ddb.Dataset(urls[n], seed_handler, placeholder_manifest())
                    fragments = tuple(
                        s3ddb.fragment.write_fragments(_rows(0, 1, val="seed"), urls[n])
                    )
                    seed = Overwrite(fragments, DatasetSchema.assign(SCHEMA))
                    commit_planned(ds, seed, None)
            sim.run()
    except Stuck as exc:
        violations.append(str(exc))
    finally:
        snapshots.process_pool = pool
        external.process_pool = pool
    return finish_report(seed, sim, name, violations, lambda: _check(urls, name, bases, sim))


def _group_writer(
    open_latest: Callable[[str], s3ddb.Dataset], w: int, ops: int
) -> Callable[[Actor], None]:
    def body(actor: Actor) -> None:
        mine: list[int] = []
        for n in range(1, ops + 1):
            row = w * 1_000_000 + n
            drop = mine[0] if mine and actor.rng.random() < 0.4 else None
            actor.log.append({"start": n, "row": row, "drop": drop})
            try:
                group = AtomicGroup(commit_config=NO_BACKOFF)
                try:
                    for name in NAMES:
                        ds = group.join(open_latest(name))
                        ds.insert(_rows(row))
                        if drop is not None:
                            ds.delete(f"id = {drop}")
                except BaseException:
                    group.abort()
                    raise
                group.commit()
            except CommitConflictError:
                actor.log.append({"fail": n})
                continue
            except S3DDBError as exc:  # unknown outcome, or a fault before the claim
                actor.log.append({"unknown": n, "error": f"{type(exc).__name__}: {exc}"})
                return
            mine.append(row)
            if drop is not None:
                mine.remove(drop)
            actor.log.append({"ack": n})

    return body


def _single_writer(
    open_latest: Callable[[str], s3ddb.Dataset], ops: int
) -> Callable[[Actor], None]:
    def body(actor: Actor) -> None:
        for n in range(1, ops + 1):
            actor.log.append({"start": n})
            try:
                open_latest("a").insert(_rows(SINGLE * 1_000_000 + n))
            except CommitConflictError:
                actor.log.append({"fail": n})
                continue
            except S3DDBError as exc:
                actor.log.append({"unknown": n, "error": f"{type(exc).__name__}: {exc}"})
                return
            actor.log.append({"ack": n})

    return body


def _group_rows(ds: s3ddb.Dataset) -> set[int]:
    ids = ds.to_table(columns=["id"]).column("id").to_pylist()
    if len(ids) != len(set(ids)):
        raise AssertionError(f"version {ds.version} of {ds.uri} holds duplicated ids")
    return {i for i in ids if 1_000_000 <= i < SINGLE * 1_000_000}


def _snapshot_reader(
    handler: Callable[[str], ExternalStoreCommitHandler], urls: dict[str, str]
) -> Callable[[Actor], None]:
    def body(actor: Actor) -> None:
        for _ in range(3):
            try:
                snap = snapshot_of([handler(n) for n in NAMES], [urls[n] for n in NAMES])
                rows = [_group_rows(snap[urls[n]]) for n in NAMES]
            except S3DDBError:
                continue
            actor.log.append({"snapshot": [snap[urls[n]].version for n in NAMES]})
            if rows[0] != rows[1]:
                raise AssertionError(f"a snapshot shows half a group: {rows}")

    return body


def _check(urls: dict[str, str], name: str, bases: dict[str, str], sim: Scheduler) -> list[str]:
    out: list[str] = []
    external = InMemoryManifestStore(name)
    final: dict[str, dict[int, str]] = {}
    for n in NAMES:
        versions = [r.version for r in external.list_versions(bases[n])]
        if versions != list(range(1, len(versions) + 1)):
            out.append(f"versions of {n} are not contiguous: {versions}")
        # A reader finishes what crashed writers left.
        repaired = ExternalStoreCommitHandler(ObjectStore(urls[n]), external, bases[n])
        ds = s3ddb.Dataset(urls[n], repaired, load_latest(repaired, urls[n]))
        rows = ds.to_table().to_pylist()
        final[n] = {r["id"]: r["val"] for r in rows}
        if len(final[n]) != len(rows):
            out.append(f"{n} holds duplicated ids")
        if {k: final[n].get(k) for k in (0, 1)} != {0: "seed", 1: "seed"}:
            out.append(f"the seed rows of {n} changed")
    groups = [{i for i in final[n] if 1_000_000 <= i < SINGLE * 1_000_000} for n in NAMES]
    if groups[0] != groups[1]:
        out.append(f"half a group is visible: a has {groups[0]}, b has {groups[1]}")
    for actor in sim.actors:
        if actor.name.startswith("g"):
            out += _check_groups(actor, groups[0])
        elif actor.name == "single":
            acked = {SINGLE * 1_000_000 + e["ack"] for e in actor.log if "ack" in e}
            failed = {SINGLE * 1_000_000 + e["fail"] for e in actor.log if "fail" in e}
            present = {i for i in final["a"] if i >= SINGLE * 1_000_000}
            if not acked <= present or present & failed:
                out.append(f"single writer: acked {acked}, failed {failed}, present {present}")
    return out


def _check_groups(actor: Actor, present: set[int]) -> list[str]:
    """Acknowledged groups are there (unless a later acknowledged group of the same
    writer deleted the row), failed ones are not."""
    out = []
    w = int(actor.name[1:])
    mine = {i for i in present if w * 1_000_000 <= i < (w + 1) * 1_000_000}
    starts = {e["start"]: e for e in actor.log if "start" in e}
    acked = {e["ack"] for e in actor.log if "ack" in e}
    failed = {e["fail"] for e in actor.log if "fail" in e}
    # Unknown: an unknown outcome, or the writer crashed during the group.
    unknown = set(starts) - acked - failed
    dropped_by_ack = {starts[n]["drop"] for n in acked | unknown if starts[n]["drop"] is not None}
    for n, start in starts.items():
        row = start["row"]
        if n in acked and row not in mine and row not in dropped_by_ack:
            out.append(f"{actor.name}: acknowledged group {n} (row {row}) is lost")
        if n in failed and row in mine:
            out.append(f"{actor.name}: failed group {n} (row {row}) is visible")
    return out
