"""Deterministic simulation of the external-store protocol (see tests/support/simulation.py).

A thousand seeded schedules per run (more with S3DDB_SIM_SCHEDULES) of writers (every
operation kind), a stale writer, a reader and cleanup, interleaved step by step with
crashes, failed requests and lost responses injected at every store call; the
invariants are checked after each.

    S3DDB_SIM_SCHEDULES=100000 pytest tests/commit/test_simulation.py   # a longer soak
    S3DDB_SIM_SEED=1234 pytest tests/commit/test_simulation.py -k replay  # one seed, with trace

A failing seed replays exactly (the same steps, the same faults, the same file names)
and the failure prints the smallest schedule of that seed that still fails.

The dataset keeps its fragment list in tiny chunks; some schedules also publish it as
Iceberg and Delta, and check the published state after them.
"""

from __future__ import annotations

import os

import pytest

from s3ddb.commit.external import ExternalStoreCommitHandler
from s3ddb.commit.handlers import ConditionalPutCommitHandler
from s3ddb.versions.pinned import PinnedVersion
from tests.support.group_simulation import run_group_schedule
from tests.support.simulation import describe, run_schedule, shape, shrink

SCHEDULES = int(os.environ.get("S3DDB_SIM_SCHEDULES", "1000"))
#: Schedules of group commits and snapshots (two datasets), per run.
GROUP_SCHEDULES = int(os.environ.get("S3DDB_SIM_GROUP_SCHEDULES", "200"))
#: Schedules of a dataset publishing Iceberg and Delta, per run (about 0.2 s each).
PUBLISHING_SCHEDULES = int(os.environ.get("S3DDB_SIM_PUBLISHING_SCHEDULES", "40"))
CHUNKS = 8


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_schedule_keeps_every_invariant(chunk: int) -> None:
    faults = steps = 0
    for seed in range(chunk, SCHEDULES, CHUNKS):
        params = shape(seed)
        report = run_schedule(seed, **params)
        if report.violations:
            pytest.fail(describe(shrink(seed, params)), pytrace=False)
        faults += report.faults
        steps += len(report.trace)
    assert steps > 0
    print(f"chunk {chunk}: {steps} steps, {faults} faults injected, 0 violations")


def test_every_schedule_of_a_publishing_dataset_keeps_every_invariant() -> None:
    """The same schedules on a dataset in fragment-list chunks that publishes Iceberg
    and Delta (from its second version, before any actor runs): besides every other
    invariant, once a publication caught up with what the actors left, the newest
    version's published state agrees with the manifests and deltalake reads it as
    s3ddb does (tests/support/simulation.py, ``_check_published``)."""
    faults = steps = 0
    for seed in range(PUBLISHING_SCHEDULES):
        params = {**shape(seed), "open_formats": True}
        report = run_schedule(seed, **params)
        if report.violations:
            pytest.fail(describe(shrink(seed, params)), pytrace=False)
        faults += report.faults
        steps += len(report.trace)
    assert steps > 0 and faults > 0
    print(f"publishing: {steps} steps, {faults} faults injected, 0 violations")


@pytest.mark.parametrize("chunk", range(CHUNKS // 2))
def test_every_group_schedule_keeps_every_invariant(chunk: int) -> None:
    """Groups across two datasets, a single writer and snapshots, with faults at every
    step (tests/support/group_simulation.py): never half a group, nothing acknowledged lost."""
    faults = steps = 0
    for seed in range(chunk, GROUP_SCHEDULES, CHUNKS // 2):
        params = shape(seed)
        report = run_group_schedule(
            seed, writers=1 + seed % 2, ops=params["ops"], fault_rate=params["fault_rate"]
        )
        if report.violations:
            pytest.fail(describe(report), pytrace=False)
        faults += report.faults
        steps += len(report.trace)
    assert steps > 0 and faults > 0
    print(f"group chunk {chunk}: {steps} steps, {faults} faults injected, 0 violations")


@pytest.mark.skipif("S3DDB_SIM_SEED" not in os.environ, reason="set S3DDB_SIM_SEED to replay")
def test_replay() -> None:
    seed = int(os.environ["S3DDB_SIM_SEED"])
    report = run_schedule(seed, **shape(seed))
    print(describe(report))
    assert not report.violations


def test_a_seed_replays_exactly() -> None:
    for seed in (5, 7, 8):
        first, again = run_schedule(seed, **shape(seed)), run_schedule(seed, **shape(seed))
        assert first.trace == again.trace and first.logs == again.logs
        assert first.faults > 0 or seed % 3 == 0


def test_a_planted_bug_is_found_and_shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    # A bug the simulation found: a writer holding a base it saw as the newest long ago
    # claims the next number at once, which cleanup may have freed below the newest.
    # Fenced claims close it too (the freed number's predecessor is gone), so the fence
    # is planted away with it.
    monkeypatch.setattr(PinnedVersion, "base_is_fresh", lambda self, base: True)
    with monkeypatch.context() as unfenced:
        unfenced.setattr(ExternalStoreCommitHandler, "_fence", lambda self, *a: None)
        unfenced.setattr(ConditionalPutCommitHandler, "_check_predecessor", lambda *a: None)
        failing = next(
            (seed for seed in range(400) if run_schedule(seed, **shape(seed)).violations), None
        )
        assert failing is not None, "400 schedules missed a known bug"
        full = run_schedule(failing, **shape(failing))
        assert full.violations, "a failing seed must fail again"
        smallest = shrink(failing, shape(failing))
        assert smallest.violations
        assert len(smallest.trace) <= len(full.trace)
        assert f"seed {failing}" in describe(smallest)
    # With the fence, the same schedule (still without the catch-up) breaks nothing.
    assert not run_schedule(failing, **shape(failing)).violations


def test_a_planted_half_snapshot_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    # A snapshot that skips its check that no dataset has a next version can show
    # half of a group: the group simulation must find a schedule where it does.
    import s3ddb.commit.external

    monkeypatch.setattr(s3ddb.commit.external, "_any_next_version", lambda newest: False)
    found = []
    for seed in range(130):
        params = shape(seed)
        report = run_group_schedule(
            seed, writers=1 + seed % 2, ops=params["ops"], fault_rate=params["fault_rate"]
        )
        found += [v for v in report.violations if "half a group" in v]
        if found:  # one schedule showing half a group is the finding (seed 80 today)
            break
    assert found, "130 group schedules missed a snapshot that skips its check"
