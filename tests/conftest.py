"""Shared fixtures."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings

# Property tests: no per-example deadline and no "too slow" health check, whatever
# the environment (Hypothesis relaxes them itself only where it detects a CI service):
# on a loaded machine both fail correct code.
settings.register_profile("s3ddb", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("s3ddb")


@pytest.fixture
def local_uri(tmp_path: Path) -> str:
    return str(tmp_path / "ds")


@pytest.fixture
def memory_uri() -> Iterator[str]:
    name = f"memory://test-{uuid.uuid4().hex}"
    yield name
    import fsspec

    fs = fsspec.filesystem("memory")
    root = "/" + name.split("://", 1)[1]
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture(params=["local", "memory"])
def any_uri(request: pytest.FixtureRequest, local_uri: str, memory_uri: str) -> str:
    return local_uri if request.param == "local" else memory_uri


def make_table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids]})


# --- the local AWS endpoint (S3 without conditional writes + DynamoDB) -----------------

TEST_BUCKET = "s3ddb-test"
TEST_TABLE = "s3ddb_test_manifests"


@pytest.fixture(scope="session")
def aws(moto_aws: object) -> object:
    """The local endpoint most tests use (a module may override ``aws`` to run its
    tests against other servers too; ``moto_aws`` is always moto)."""
    return moto_aws


@pytest.fixture(scope="session")
def moto_aws() -> Iterator[object]:
    """One local endpoint per test process; S3 behaves as a store without conditional
    writes, as the external-store protocol must not need them."""
    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig
    from s3ddb.testing import LocalAWS

    with LocalAWS(conditional_writes=False) as server:
        server.create_bucket(TEST_BUCKET)
        create_table(TEST_TABLE, AwsConfig.from_storage_options(server.storage_options()))
        yield server


@pytest.fixture(scope="session")
def dynalite() -> Iterator[object]:
    """dynalite, a second DynamoDB implementation, with the test table (skipped, with
    the reason, where Node.js or the package is missing: ``make test`` installs it)."""
    from tests.support.node_servers import Dynalite, missing

    reason = missing("dynalite")
    if reason:
        pytest.skip(reason)
    with Dynalite() as server:
        server.create_table(TEST_TABLE)
        yield server


@pytest.fixture(scope="session")
def s3rver() -> Iterator[object]:
    """s3rver, a second S3 implementation (no conditional writes), with the test
    bucket (skipped, with the reason, where Node.js or the package is missing)."""
    from tests.support.node_servers import S3rver, missing

    reason = missing("s3rver")
    if reason:
        pytest.skip(reason)
    with S3rver(buckets=[TEST_BUCKET]) as server:
        yield server


@pytest.fixture(scope="session")
def s3rver_split(s3rver: object, moto_aws: object) -> object:
    """S3 on s3rver, DynamoDB on the moto endpoint (see tests/support/endpoints.py)."""
    from tests.support.endpoints import SplitEndpoints

    return SplitEndpoints(s3rver, moto_aws, name="s3rver")


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[object]:
    """SeaweedFS, a real S3-compatible store (If-None-Match honoured), with the test
    bucket: started once per test process (skipped, with the reason, only where its
    binary cannot run on the platform; the dev extra installs it)."""
    from tests.support.seaweedfs import SeaweedFS, cannot_run

    reason = cannot_run()
    if reason:
        pytest.skip(reason)
    with SeaweedFS(buckets=[TEST_BUCKET]) as server:
        yield server


@pytest.fixture(scope="session")
def seaweedfs_split(seaweedfs: object, moto_aws: object) -> object:
    """S3 on SeaweedFS, DynamoDB on the moto endpoint (see tests/support/endpoints.py)."""
    from tests.support.endpoints import SplitEndpoints

    return SplitEndpoints(seaweedfs, moto_aws, name="seaweedfs")


@pytest.fixture(scope="session")
def split_aws(moto_aws: object, dynalite: object) -> object:
    """S3 on the moto endpoint, DynamoDB on dynalite (see tests/support/endpoints.py)."""
    from tests.support.endpoints import SplitEndpoints

    return SplitEndpoints(moto_aws, dynalite)  # type: ignore[arg-type]


@pytest.fixture
def ddb_uri(aws: object) -> str:
    return f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"


@pytest.fixture
def instant_cleanup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cleanup may remove a version at once, however young its successor (tests that
    clean up right after committing, with no writer racing the cleanup)."""
    import datetime as dt

    import s3ddb.maintenance.cleanup

    monkeypatch.setattr(s3ddb.maintenance.cleanup, "CLAIM_WINDOW", dt.timedelta(0))


@pytest.fixture(params=["local", "ddb"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any] | None]:
    """A fresh dataset location and its storage options: a local path, and an
    ``s3+ddb://`` URI on the local AWS endpoint (S3 without conditional writes)."""
    if request.param == "local":
        return str(tmp_path / "ds"), None
    aws = request.getfixturevalue("aws")
    uri = f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    return uri, aws.storage_options()


def before_each_transact_write(
    monkeypatch: pytest.MonkeyPatch, hook: Callable[[dict[str, Any]], None]
) -> None:
    """Call ``hook(request)`` before every TransactWriteItems s3ddb's DynamoDB store
    sends (it may record the request, or raise to stand for a refusal), then send it."""
    from s3ddb.external_store.dynamodb import DynamoDBManifestStore

    real_client = DynamoDBManifestStore.client

    class Hooked:
        def __init__(self, client: Any) -> None:
            self._client = client

        def transact_write_items(self, **request: Any) -> Any:
            hook(request)
            return self._client.transact_write_items(**request)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._client, name)

    monkeypatch.setattr(DynamoDBManifestStore, "client", lambda self: Hooked(real_client(self)))


# --- the order tests are handed to the workers -----------------------------------------
# With -n and --dist loadscope, xdist hands scopes out in collection order to whichever
# worker is almost out of work: a module whose tests share a fixture, else one test
# (pytest_xdist_make_scheduler below). Longest first (the classic rule for two machines
# and many jobs): the run then ends on short tests rather than on one worker still busy
# with a long one while the other waits. How long a test takes comes from
# tests/durations.txt, written from an earlier run by scripts/test_durations.py; a test
# not listed there counts as short, unless it has a long mark (slow, spark, terraform:
# multi-process, crash, Spark and Terraform tests), then as a few seconds. Ties keep
# the collection order.

_DURATIONS = Path(__file__).resolve().parent / "durations.txt"
#: Seconds assumed for a test durations.txt does not list (new since it was written).
_UNLISTED_LONG, _UNLISTED_SHORT = 5.0, 0.1


def _recorded_durations() -> dict[str, float]:
    durations: dict[str, float] = {}
    if _DURATIONS.exists():
        for line in _DURATIONS.read_text(encoding="utf-8").splitlines():
            seconds, _, nodeid = line.partition(" ")
            if nodeid:
                durations[nodeid] = float(seconds)
    return durations


def _expected_seconds(item: pytest.Item, recorded: dict[str, float]) -> float:
    if item.nodeid in recorded:
        return recorded[item.nodeid]
    long_marks = ("slow", "spark", "terraform")
    long = any(item.get_closest_marker(mark) for mark in long_marks)
    return _UNLISTED_LONG if long else _UNLISTED_SHORT


_SHARED_SCOPE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")
_SHARES: dict[str, bool] = {}


def _module_shares_fixtures(path: Path) -> bool:
    """Whether the test module defines a fixture set up once per module or class
    (a test may also ask for one by name, with ``request.getfixturevalue``): such a
    module's tests stay together, or that fixture would be set up again each time a
    worker comes back to the module (and, say, create its bucket a second time)."""
    key = str(path)
    if key not in _SHARES:
        try:
            _SHARES[key] = bool(_SHARED_SCOPE.search(path.read_text(encoding="utf-8")))
        except OSError:
            _SHARES[key] = False
    return _SHARES[key]


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadscope``: the scope a worker takes whole is a module whose tests
    share a fixture, else a single test. One worker then runs such a module's tests one
    after the other and sets its fixture up once (handed out one by one, the two tests
    of a crash module went to both workers, and each started the costly application
    its fixture runs); every other test goes to whichever worker is free."""
    if config.getvalue("dist") != "loadscope":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class ModuleFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if _module_shares_fixtures(root / module) else nodeid

    return ModuleFixtureScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    recorded = _recorded_durations()
    seconds = {item.nodeid: _expected_seconds(item, recorded) for item in items}
    # The unit handed out: a test, or a whole module whose tests share a fixture
    # (ordered by its tests' summed time; its tests keep their collection order).
    unit = {
        item.nodeid: item.nodeid.split("::", 1)[0]
        if _module_shares_fixtures(Path(item.path))
        else item.nodeid
        for item in items
    }
    total: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        u = unit[item.nodeid]
        total[u] = total.get(u, 0.0) + seconds[item.nodeid]
        first.setdefault(u, i)
    order = {item.nodeid: i for i, item in enumerate(items)}
    items.sort(
        key=lambda item: (
            -total[unit[item.nodeid]],
            first[unit[item.nodeid]],
            order[item.nodeid],
        )
    )


# --- each folder's time, printed at the end of every run ------------------------------
# The suite must stay within its budget; a folder whose tests grow is seen when it grows.
# Summed over setup, call and teardown of its tests (with -n, across the workers: the
# master process receives every worker's reports).

_FOLDER_SECONDS: dict[str, float] = {}
_FOLDER_TESTS: dict[str, int] = {}


def _folder_of(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # S3DDB_TEST_TIMES=<file>: each phase's time as it ends (read it during a long run).
    times = os.environ.get("S3DDB_TEST_TIMES")
    if times and "PYTEST_XDIST_WORKER" not in os.environ:  # the controller gets them all
        with open(times, "a", encoding="utf-8") as f:
            f.write(f"{report.duration:.2f} {report.when} {report.nodeid}\n")
    folder = _folder_of(report.nodeid)
    _FOLDER_SECONDS[folder] = _FOLDER_SECONDS.get(folder, 0.0) + report.duration
    if report.when == "call":
        _FOLDER_TESTS[folder] = _FOLDER_TESTS.get(folder, 0) + 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FOLDER_SECONDS:
        return
    total = sum(_FOLDER_SECONDS.values())
    terminalreporter.section("time per folder (setup + call + teardown, summed)")
    for folder, seconds in sorted(_FOLDER_SECONDS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(
            f"{seconds:8.1f} s  {100 * seconds / total:5.1f} %  "
            f"{_FOLDER_TESTS.get(folder, 0):5d} tests  {folder}"
        )
    terminalreporter.write_line(f"{total:8.1f} s  total")
