"""SIGKILL torture on the local endpoint (S3 without conditional writes + DynamoDB).

K writer processes run a random mix of appends, deletes, updates, upserts and
compactions (tests/support/torture.py) on one s3+ddb dataset and are killed with SIGKILL at
random moments — not at failpoints: in the middle of an upload, a DynamoDB call, a
finalization, a rebase. Each killed writer is replaced by a new one. Afterwards:

* a reader that knows nothing of DynamoDB is at most one version behind;
* ``sync`` finishes what the killed writers left, and ``verify`` finds nothing wrong;
* versions are contiguous, from 1;
* every writer's acknowledged operations are there exactly once, and the one it was
  killed in is there entirely or not at all (replaying its log gives the rows its ids
  must hold, with or without that last operation);
* no id appears twice, no deleted row comes back.

The schedule is random but seeded (``S3DDB_TORTURE_SEED``); the seed is in every
failure message. Outcomes only, never speed: a loaded machine just does fewer
operations per run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.io import ObjectStore, parse_uri
from s3ddb.maintenance.drop import drop
from s3ddb.maintenance.repair import sync
from s3ddb.maintenance.verify import verify
from s3ddb.versions.connect import external_store_for
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.endpoints import endpoint
from tests.support.proc import ROOT
from tests.support.python_children import PythonChild, start_python
from tests.support.torture import allowed_states, table

WRITERS = 3
#: Fragment-list chunks of at most 4 fragments, 1 inline (manifest format 2).
CHUNKED = {"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "1"}
#: How long writers are started and killed (the suite's budget: 6 runs); a slow machine
#: runs on, up to HARD_STOP_SECONDS, until a few operations landed.
RUN_SECONDS = 12.0
HARD_STOP_SECONDS = 120.0


@dataclass
class Generation:
    """One writer process's life: its log and the rows its ids must hold."""

    number: int
    seed: int
    proc: PythonChild
    log: list[dict[str, Any]] = field(default_factory=list)

    def expected(self) -> list[dict[int, str]]:
        """The rows its ids may hold (see :func:`tests.support.torture.allowed_states`)."""
        return allowed_states(self.log)


def _torture(env: dict[str, str], *args: str) -> PythonChild:
    """``python -m tests.support.torture *args`` with ``env`` added to this environment
    (forked from a pre-imported interpreter: tests/support/python_children.py)."""
    return start_python(
        ["-m", "tests.support.torture", *args],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
    )


def _start(uri: str, number: int, seed: int, env: dict[str, str], *mode: str) -> Generation:
    return Generation(number, seed, _torture(env, uri, str(number), str(seed), *mode))


def _reap(running: list[Generation], kill_at: dict[int, float], where: str) -> None:
    """Finish the writers that exited or whose time to be killed has come."""
    for gen in list(running):
        if time.monotonic() >= kill_at[gen.number] or gen.proc.poll() is not None:
            _finish(gen, where)
            running.remove(gen)


def _finish(gen: Generation, where: str) -> None:
    """Kill (SIGKILL) if still running, and collect its log."""
    if gen.proc.poll() is None:
        gen.proc.send_signal(signal.SIGKILL)
    out, err = gen.proc.communicate(timeout=60)
    if gen.proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"{where}: writer {gen.number} failed:\n{err[-3000:]}")
    for line in out.splitlines():
        try:
            gen.log.append(json.loads(line))
        except json.JSONDecodeError:
            break  # the last line may be cut by the kill


@pytest.fixture(params=["moto", "dynalite", "s3rver", "seaweedfs"])
def aws(request: pytest.FixtureRequest) -> Any:
    """DynamoDB on moto, and on dynalite (a second implementation); objects on s3rver
    (a second S3) and on SeaweedFS (a real S3-compatible store), each with moto's
    DynamoDB on another endpoint."""
    return endpoint(request, request.param)


@pytest.mark.slow
def test_writers_killed_at_random_moments_lose_nothing(aws: Any, ddb_uri: str) -> None:
    seed = int(os.environ.get("S3DDB_TORTURE_SEED", random.randrange(2**31)))
    where = f"S3DDB_TORTURE_SEED={seed}"
    rng = random.Random(seed)
    so = aws.storage_options()
    s3ddb.write_dataset(table({0: "seed", 1: "seed"}), ddb_uri, storage_options=so)
    # Tiny fragment-list chunks: the writers' commits write, merge and share chunks.
    s3ddb.dataset(ddb_uri, storage_options=so).update_config(CHUNKED)

    generations: list[Generation] = []
    running: list[Generation] = []
    deadline = time.monotonic() + RUN_SECONDS
    number = 1
    kill_at: dict[int, float] = {}
    hard_stop = time.monotonic() + HARD_STOP_SECONDS

    def acknowledged() -> int:
        return sum(1 for g in generations for line in g.log if "ack" in line)

    # Run for RUN_SECONDS, and on a slow machine on until a few operations landed.
    while time.monotonic() < deadline or (acknowledged() < 5 and time.monotonic() < hard_stop):
        while len(running) < WRITERS:
            gen = _start(ddb_uri, number, rng.randrange(2**31), aws.env())
            # Past the deadline (a slow machine), writers live longer: one killed within
            # seconds may not have finished importing, let alone committed.
            late = time.monotonic() >= deadline
            kill_at[number] = time.monotonic() + rng.uniform(1.5, 6.0) * (4 if late else 1)
            number += 1
            running.append(gen)
            generations.append(gen)
        time.sleep(0.05)
        _reap(running, kill_at, where)
    for gen in running:
        _finish(gen, where)

    for server in (getattr(aws, "ddb", None), getattr(aws, "s3", None)):
        if server is not None and hasattr(server, "log"):  # node servers must survive
            assert server.is_running(), f"{where}: {server!r} stopped: {server.log()[-3000:]}"
    # A reader that knows nothing of DynamoDB: at most one version behind the table.
    parsed = parse_uri(ddb_uri)
    finalizer.drain()
    rows = list(external_store_for(parsed, ObjectStore(parsed, so)).list_versions(parsed.base_uri))
    plain = s3ddb.dataset(parsed.object_url, storage_options=so).version
    assert plain >= rows[-1].version - 1, f"{where}: plain reader at {plain}, table at {rows[-1]}"

    # Repair, then check.
    assert sync(ddb_uri, so).ok, where
    report = verify(ddb_uri, so)
    assert report.healthy, f"{where}: {report.problems}"
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert [v.version for v in ds.versions()] == list(range(1, ds.version + 1)), where
    final = ds.to_table().to_pylist()
    ids = Counter(r["id"] for r in final)
    assert all(c == 1 for c in ids.values()), f"{where}: duplicated ids {ids.most_common(3)}"
    by_id = {r["id"]: r["val"] for r in final}
    assert {k: by_id.get(k) for k in (0, 1)} == {0: "seed", 1: "seed"}, where
    for gen in generations:
        low, high = gen.number * 1_000_000, (gen.number + 1) * 1_000_000
        actual = {k: v for k, v in by_id.items() if low <= k < high}
        allowed = gen.expected()
        assert actual in allowed, (
            f"{where}: writer {gen.number} (seed {gen.seed}) holds {actual}, "
            f"expected one of {allowed}\nlog: {gen.log}"
        )
    assert len(by_id) == sum(1 for _ in final)
    print(
        f"{where}: {len(generations)} writers killed, {acknowledged()} operations "
        f"acknowledged, {ds.version} versions"
    )
    assert acknowledged() > 0, f"{where}: no writer got anything done"


# --- the dataset's lifecycle: drop and re-create, and a writer bypassing DynamoDB ------


def _allowed_in(gen: Generation, identity: str) -> list[dict[int, str]]:
    """A writer's rows in the dataset of ``identity``: its operations acknowledged there,
    replayed; an operation it was cut in may have landed there or not."""
    log: list[dict[str, Any]] = []
    for line in gen.log:
        if "ack" in line and line.get("identity") != identity:
            # Acknowledged by the dropped dataset: gone with it.
            log.append({"fail": line["ack"]})
        else:
            log.append(line)
    return allowed_states(log)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["moto", "seaweedfs"])
def test_drop_recreate_and_a_plain_writer_lose_nothing(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """K DynamoDB writers killed at random moments, a writer configured with the plain
    ``s3://`` URI appending all along, and the dataset dropped and re-created halfway:
    the plain writer is always refused, the re-created dataset's versions are
    contiguous and all of its identity, and every operation acknowledged in it is
    there exactly once. On moto, and on SeaweedFS's S3 (whose conditional puts the
    plain writer could win, were it not fenced) with moto's DynamoDB; not on dynalite,
    which has no TransactWriteItems, which fenced claims need, nor on s3rver, which
    once stopped accepting connections under this load (the four-step protocol's
    torture above runs on both)."""
    aws = endpoint(request, kind)
    ddb_uri = f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    seed = int(os.environ.get("S3DDB_TORTURE_SEED", random.randrange(2**31)))
    where = f"S3DDB_TORTURE_SEED={seed} ({kind})"
    rng = random.Random(seed)
    so = aws.storage_options()
    seed_rows = table({0: "seed", 1: "seed"})
    s3ddb.write_dataset(seed_rows, ddb_uri, storage_options=so)
    s3ddb.dataset(ddb_uri, storage_options=so).update_config(CHUNKED)
    plain_uri = parse_uri(ddb_uri).object_url
    plain = _torture(aws.env(), "plain", plain_uri)

    generations: list[Generation] = []
    running: list[Generation] = []
    started = time.monotonic()
    deadline = started + RUN_SECONDS
    recreate_at = started + RUN_SECONDS / 2
    recreated = False
    number = 1
    kill_at: dict[int, float] = {}

    new_identity = ""

    def landed() -> int:
        """Operations acknowledged in the re-created dataset (by finished writers)."""
        return sum(1 for g in generations for line in g.log if line.get("identity") == new_identity)

    # On a slow machine, run on until a few operations landed in the re-created dataset;
    # writers started then live longer: on a loaded machine a writer killed within
    # seconds may not have finished importing, let alone committed.
    hard_stop = started + HARD_STOP_SECONDS
    while (
        time.monotonic() < deadline
        or not recreated
        or (landed() < 3 and time.monotonic() < hard_stop)
    ):
        while len(running) < WRITERS:
            gen = _start(ddb_uri, number, rng.randrange(2**31), aws.env(), "lifecycle")
            late = time.monotonic() >= deadline
            kill_at[number] = time.monotonic() + rng.uniform(1.5, 6.0) * (4 if late else 1)
            number += 1
            running.append(gen)
            generations.append(gen)
        if not recreated and time.monotonic() >= recreate_at:
            finalizer.drain()
            drop(ddb_uri, so)
            new = s3ddb.write_dataset(seed_rows, ddb_uri, mode="create", storage_options=so)
            new_identity = new.manifest.dataset_id
            recreated = True
        time.sleep(0.05)
        _reap(running, kill_at, where)
    for gen in running:
        _finish(gen, where)
    plain.send_signal(signal.SIGKILL)
    out, err = plain.communicate(timeout=60)
    plain_log = [json.loads(line) for line in out.splitlines()[:-1]]
    assert plain.returncode == -signal.SIGKILL, f"{where}: plain writer failed:\n{err[-3000:]}"
    assert not [line for line in plain_log if "ack" in line], f"{where}: {plain_log}"
    assert any("refused" in line for line in plain_log), f"{where}: {plain_log[-5:]}"

    assert sync(ddb_uri, so).ok, where
    report = verify(ddb_uri, so)
    assert report.healthy, f"{where}: {report.problems}"
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    identity = ds.manifest.dataset_id
    assert [v.version for v in ds.versions()] == list(range(1, ds.version + 1)), where
    assert {ds.checkout_version(v).manifest.dataset_id for v in range(1, ds.version + 1)} == {
        identity
    }, where
    parsed = parse_uri(ddb_uri)
    rows = list(external_store_for(parsed, ObjectStore(parsed, so)).list_versions(parsed.base_uri))
    assert {r.extra.get("dataset_id") for r in rows} == {identity}, where
    final = ds.to_table().to_pylist()
    ids = Counter(r["id"] for r in final)
    assert all(c == 1 for c in ids.values()), f"{where}: duplicated ids {ids.most_common(3)}"
    by_id = {r["id"]: r["val"] for r in final}
    assert {k: by_id.get(k) for k in (0, 1)} == {0: "seed", 1: "seed"}, where
    assert not [k for k in by_id if k < 0], f"{where}: the plain writer's rows landed"
    assert identity == new_identity, where
    for gen in generations:
        low, high = gen.number * 1_000_000, (gen.number + 1) * 1_000_000
        actual = {k: v for k, v in by_id.items() if low <= k < high}
        allowed = _allowed_in(gen, identity)
        assert actual in allowed, (
            f"{where}: writer {gen.number} holds {actual}, expected one of {allowed}\n"
            f"log: {gen.log}"
        )
    errors = Counter(line.get("error") for g in generations for line in g.log if "fail" in line)
    refused = sum("refused" in line for line in plain_log)
    print(f"{where}: {len(generations)} writers, {landed()} operations acknowledged after "
          f"the re-creation, {ds.version} versions; plain writer refused {refused} times; "
          f"failures {dict(errors)}")  # fmt: skip
    assert landed() > 0, f"{where}: nothing landed in the re-created dataset"
