"""Tests of the external manifest stores.

:class:`ManifestStoreContract` is the contract every backend must meet (the fsspec
pattern: each backend's test class inherits it and provides the fixtures). It runs
against :class:`InMemoryManifestStore` and against :class:`DynamoDBManifestStore` on a
real local endpoint (:class:`s3ddb.testing.LocalAWS`, over HTTP). DynamoDB-specific
behaviour (table checks, throttling, lost responses, credentials, create_table, the
CLI) is tested below the contract.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from s3ddb.errors import (
    CredentialsError,
    ExternalStoreError,
    ExternalStoreTableError,
    ExternalStoreThrottledError,
    InvalidInputError,
)
from s3ddb.external_store import (
    DATASET_ID_ATTRIBUTE,
    DynamoDBManifestStore,
    ExternalManifestStore,
    ExternalStoreOutcomeUnknownError,
    Fence,
    FenceFailedError,
    InMemoryManifestStore,
    ManifestRow,
    VersionTakenError,
    create_table,
    describe_table,
    final_path_of,
    same_commit,
)
from s3ddb.io import aws as aws_module
from s3ddb.io import aws_sessions
from s3ddb.io.aws import AwsConfig
from s3ddb.testing import LocalAWS

StoreFactory = Callable[[], ExternalManifestStore]


def staged(version: int, tag: str | None = None) -> str:
    """A staged manifest path with a fresh uuid (V1 naming is enough here)."""
    return f"_versions/{version}.manifest-{tag or uuid.uuid4().hex}"


def make_row(base: str, version: int, path: str | None = None, **kw: Any) -> ManifestRow:
    kw.setdefault("size", 100 + version)
    kw.setdefault("committer", "s3ddb-test/0 writer-1")
    kw.setdefault("committed_at", 1_700_000_000_000 + version)
    return ManifestRow(base, version, path or staged(version), **kw)


# --- child processes racing (module level: spawn pickles the function by name) ----------


def _race_worker(
    spec: tuple[str, dict[str, str]],
    base: str,
    versions: int,
    worker: int,
    start: Any,
    results: Any,
) -> None:
    table, options = spec
    store = DynamoDBManifestStore(table, AwsConfig.from_storage_options(options), base_delay=0.005)
    store.validate()
    start.wait(60)
    outcome: list[tuple[int, str, str, str | None]] = []
    for version in range(1, versions + 1):
        row = make_row(base, version, staged(version, f"w{worker}-{uuid.uuid4().hex}"))
        try:
            store.put_if_not_exists(row)
            outcome.append((version, "won", row.path, None))
        except VersionTakenError as exc:
            outcome.append((version, "lost", row.path, exc.winner.path if exc.winner else None))
    results.put((worker, outcome))


# --- the contract ------------------------------------------------------------------------


class ManifestStoreContract:
    """The behaviour every :class:`ExternalManifestStore` must have.

    Subclasses provide ``make_store`` (a factory of store instances that share one
    backing table, like writers in different processes sharing a DynamoDB table) and,
    if the store can be shared between processes, ``process_spec``: the picklable
    (table, storage_options) a child process builds its own store from.
    """

    @pytest.fixture
    def make_store(self) -> StoreFactory:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def process_spec(self) -> tuple[str, dict[str, str]] | None:
        return None

    @pytest.fixture
    def store(self, make_store: StoreFactory) -> ExternalManifestStore:
        return make_store()

    @pytest.fixture
    def base(self) -> str:
        return f"s3://bucket-{uuid.uuid4().hex[:8]}/datasets/ds"

    # put / get / latest

    def test_validate(self, store: ExternalManifestStore) -> None:
        store.validate()
        store.validate()  # cached / idempotent

    def test_put_then_get_round_trips_every_attribute(
        self, store: ExternalManifestStore, base: str
    ) -> None:
        row = make_row(base, 1, extra={"operation": "append", "read_version": "0"})
        store.put_if_not_exists(row)
        got = store.get(base, 1)
        assert got == row
        assert got is not None and got.extra == {"operation": "append", "read_version": "0"}
        assert got.is_staged

    def test_get_missing(self, store: ExternalManifestStore, base: str) -> None:
        assert store.get(base, 1) is None
        assert store.get_latest(base) is None
        assert list(store.list_versions(base)) == []
        store.put_if_not_exists(make_row(base, 1))
        assert store.get(base, 2) is None

    def test_get_latest_is_highest_version(self, store: ExternalManifestStore, base: str) -> None:
        for v in (1, 3, 2):
            store.put_if_not_exists(make_row(base, v))
        latest = store.get_latest(base)
        assert latest is not None and latest.version == 3
        # Numeric, not lexicographic, order (version is N): 10 > 9.
        for v in range(4, 11):
            store.put_if_not_exists(make_row(base, v))
        latest = store.get_latest(base)
        assert latest is not None and latest.version == 10

    def test_list_versions_order_and_bounds(self, store: ExternalManifestStore, base: str) -> None:
        for v in range(1, 12):
            store.put_if_not_exists(make_row(base, v))

        def versions(**kw: Any) -> list[int]:
            return [r.version for r in store.list_versions(base, **kw)]

        assert versions() == list(range(1, 12))
        assert versions(descending=True) == list(range(11, 0, -1))
        assert versions(start_version=9) == [9, 10, 11]
        assert versions(end_version=3) == [1, 2, 3]
        assert versions(start_version=4, end_version=6) == [4, 5, 6]
        assert versions(start_version=4, end_version=6, descending=True) == [6, 5, 4]
        assert versions(start_version=5, end_version=5) == [5]
        assert versions(start_version=7, end_version=6) == []
        assert versions(start_version=50) == []

    def test_list_versions_many_rows(self, store: ExternalManifestStore, base: str) -> None:
        # More rows than one page of the paginated backends (see page_size).
        rows = [make_row(base, v, extra={"operation": "append"}) for v in range(1, 41)]
        for row in rows:
            store.put_if_not_exists(row)
        assert list(store.list_versions(base)) == rows
        assert list(store.list_versions(base, descending=True)) == rows[::-1]
        assert [r.version for r in store.list_versions(base, start_version=15, end_version=33)] == (
            list(range(15, 34))
        )

    # conflicts

    def test_second_put_loses_and_sees_the_winner(
        self, store: ExternalManifestStore, base: str
    ) -> None:
        first = make_row(base, 1, committer="writer-a")
        second = make_row(base, 1, committer="writer-b")
        store.put_if_not_exists(first)
        with pytest.raises(VersionTakenError) as info:
            store.put_if_not_exists(second)
        assert info.value.winner == first
        assert info.value.winner is not None and info.value.winner.committer == "writer-a"
        assert isinstance(info.value, ExternalStoreError)
        assert store.get(base, 1) == first

    def test_put_is_idempotent_for_the_same_commit(
        self, store: ExternalManifestStore, base: str
    ) -> None:
        row = make_row(base, 1)
        store.put_if_not_exists(row)
        store.put_if_not_exists(row)  # e.g. a caller retrying after an unknown outcome
        assert [r.path for r in store.list_versions(base)] == [row.path]

    def test_put_recognises_own_row_after_finalize(
        self, store: ExternalManifestStore, base: str
    ) -> None:
        row = make_row(base, 1)
        store.put_if_not_exists(row)
        assert store.finalize(base, 1, row.path, final_path_of(row.path))
        store.put_if_not_exists(row)  # our row, finalized by someone else meanwhile
        impostor = make_row(base, 1, path=staged(1), committer="other")
        with pytest.raises(VersionTakenError):
            store.put_if_not_exists(impostor)

    def test_threads_race_exactly_one_winner(self, make_store: StoreFactory, base: str) -> None:
        threads, versions = 8, 6
        barrier = threading.Barrier(threads)
        won: dict[int, list[str]] = {v: [] for v in range(1, versions + 1)}
        losers_saw: dict[int, set[str]] = {v: set() for v in won}
        errors: list[BaseException] = []
        lock = threading.Lock()

        def writer(i: int) -> None:
            store = make_store()  # each writer its own instance, like separate clients
            try:
                barrier.wait(30)
                for v in won:
                    row = make_row(base, v, staged(v, f"t{i}-{uuid.uuid4().hex}"))
                    try:
                        store.put_if_not_exists(row)
                        with lock:
                            won[v].append(row.path)
                    except VersionTakenError as exc:
                        assert exc.winner is not None
                        with lock:
                            losers_saw[v].add(exc.winner.path)
            except BaseException as exc:
                errors.append(exc)

        pool = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(120)
        assert not errors, errors
        store = make_store()
        for v, paths in won.items():
            assert len(paths) == 1, f"version {v} has winners {paths}"
            stored = store.get(base, v)
            assert stored is not None and stored.path == paths[0]
            assert losers_saw[v] <= {paths[0]}

    @pytest.mark.slow
    def test_processes_race_exactly_one_winner(
        self, base: str, process_spec: tuple[str, dict[str, str]] | None
    ) -> None:
        if process_spec is None:
            pytest.skip(f"{type(self).__name__}: the store is not shared between processes")
        spec = process_spec
        processes, versions = 8, 20
        # spawn, not fork: the parent runs the LocalAWS server threads.
        ctx = multiprocessing.get_context("spawn")
        start, results = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_race_worker, args=(spec, base, versions, i, start, results))
            for i in range(processes)
        ]
        for p in procs:
            p.start()
        try:
            start.set()
            outcomes = dict(results.get(timeout=180) for _ in procs)
        finally:
            for p in procs:
                p.join(30)
        assert all(p.exitcode == 0 for p in procs)
        table, options = spec
        store = DynamoDBManifestStore(table, AwsConfig.from_storage_options(options))
        for v in range(1, versions + 1):
            winners = [
                o[2] for out in outcomes.values() for o in out if o[0] == v and o[1] == "won"
            ]
            seen = {o[3] for out in outcomes.values() for o in out if o[0] == v and o[1] == "lost"}
            attempts = [o for out in outcomes.values() for o in out if o[0] == v]
            assert len(attempts) == processes
            assert len(winners) == 1, f"version {v}: winners {winners}"
            stored = store.get(base, v)
            assert stored is not None and stored.path == winners[0]
            assert seen <= {winners[0]}
        assert [r.version for r in store.list_versions(base)] == list(range(1, versions + 1))

    # finalize

    def test_finalize(self, store: ExternalManifestStore, base: str) -> None:
        row = make_row(base, 1, extra={"operation": "overwrite"})
        final = final_path_of(row.path)
        assert final == "_versions/1.manifest"
        store.put_if_not_exists(row)
        assert store.finalize(base, 1, row.path, final) is True
        got = store.get(base, 1)
        assert got is not None and got.path == final and not got.is_staged
        # Only the path changed.
        assert (got.size, got.committer, got.committed_at, got.extra) == (
            row.size,
            row.committer,
            row.committed_at,
            row.extra,
        )
        # Idempotent.
        assert store.finalize(base, 1, row.path, final) is False
        latest = store.get_latest(base)
        assert latest is not None and latest.path == final

    def test_finalize_refuses_a_row_pointing_elsewhere(
        self, store: ExternalManifestStore, base: str
    ) -> None:
        row = make_row(base, 1)
        store.put_if_not_exists(row)
        with pytest.raises(ExternalStoreError, match="version 1") as info:
            store.finalize(base, 1, staged(1), "_versions/1.manifest")
        assert row.path in str(info.value)
        assert store.get(base, 1) == row

    def test_finalize_missing_row(self, store: ExternalManifestStore, base: str) -> None:
        with pytest.raises(ExternalStoreError, match="no such row"):
            store.finalize(base, 7, staged(7), "_versions/7.manifest")
        assert store.get(base, 7) is None  # finalize never creates a row

    # datasets

    def test_delete_dataset(self, store: ExternalManifestStore, base: str) -> None:
        other = base + "-other"
        for v in range(1, 31):  # more than one BatchWriteItem (25)
            store.put_if_not_exists(make_row(base, v))
        store.put_if_not_exists(make_row(other, 1))
        assert store.delete_dataset(base) == 30
        assert store.get_latest(base) is None
        assert list(store.list_versions(base)) == []
        assert store.get(other, 1) is not None
        assert store.delete_dataset(base) == 0
        store.put_if_not_exists(make_row(base, 1))  # the dataset can start again

    def test_two_base_uris_never_collide(self, store: ExternalManifestStore) -> None:
        tag = uuid.uuid4().hex[:8]
        a, b = f"s3://a-{tag}/x", f"s3://b-{tag}/x"
        row_a, row_b = make_row(a, 1), make_row(b, 1)
        store.put_if_not_exists(row_a)
        store.put_if_not_exists(row_b)  # same version, other dataset: no conflict
        store.put_if_not_exists(make_row(a, 2))
        assert store.get(a, 1) == row_a and store.get(b, 1) == row_b
        latest_b = store.get_latest(b)
        assert latest_b is not None and latest_b.version == 1
        assert [r.base_uri for r in store.list_versions(a)] == [a, a]
        assert store.delete_dataset(a) == 2
        assert store.get(b, 1) == row_b

    def test_prefix_base_uris_are_distinct(self, store: ExternalManifestStore, base: str) -> None:
        # "s3://b/x" must not see rows of "s3://b/x2" (exact key, not a prefix match).
        store.put_if_not_exists(make_row(base + "2", 1))
        assert store.get_latest(base) is None
        assert list(store.list_versions(base)) == []

    def test_invalid_rows_are_rejected(self, store: ExternalManifestStore, base: str) -> None:
        with pytest.raises(InvalidInputError):
            store.put_if_not_exists(make_row(base, 0))
        with pytest.raises(InvalidInputError):
            store.put_if_not_exists(make_row(base, 1, extra={"path": "x"}))
        with pytest.raises(InvalidInputError):
            store.put_if_not_exists(make_row("", 1))
        assert store.get_latest(base) is None

    # fenced claims

    def test_fenced_claims(self, store: ExternalManifestStore, base: str) -> None:
        def row(version: int, identity: str | None = "a" * 32) -> ManifestRow:
            extra = {DATASET_ID_ATTRIBUTE: identity} if identity is not None else {}
            return make_row(base, version, extra=extra)

        store.put_if_not_exists(row(1))
        store.put_if_not_exists(row(2), Fence(1, "a" * 32))
        # Predecessor missing: the dataset was dropped.
        with pytest.raises(FenceFailedError, match="no longer exists") as info:
            store.put_if_not_exists(row(5), Fence(4, "a" * 32))
        assert info.value.predecessor is None
        # Predecessor of another identity: re-created.
        with pytest.raises(FenceFailedError, match="b" * 32) as info:
            store.put_if_not_exists(row(3, "b" * 32), Fence(2, "b" * 32))
        assert info.value.predecessor is not None and info.value.predecessor.version == 2
        # A taken version wins over a failed fence: the writer rebases.
        with pytest.raises(VersionTakenError):
            store.put_if_not_exists(row(2, "b" * 32), Fence(1, "b" * 32))
        # Adoption: only while the predecessor has no row.
        with pytest.raises(FenceFailedError, match="already has a row"):
            store.put_if_not_exists(row(3), Fence(2, absent=True))
        store.put_if_not_exists(row(7), Fence(6, absent=True))
        # Rows from before identities were recorded: fenced on having none.
        store.put_if_not_exists(row(8, None), Fence(7, "a" * 32))
        with pytest.raises(FenceFailedError):
            store.put_if_not_exists(row(9), Fence(8, "a" * 32))
        ninth = row(9)
        store.put_if_not_exists(ninth, Fence(8, ""))
        assert [r.version for r in store.list_versions(base)] == [1, 2, 7, 8, 9]
        # Re-putting one's own row is success (a retried claim whose response was lost).
        store.put_if_not_exists(ninth, Fence(8, ""))
        with pytest.raises(InvalidInputError, match="fenced on version 9"):
            store.put_if_not_exists(row(10), Fence(3, "a" * 32))

    def test_threads_race_fenced_claims_exactly_one_winner(
        self, make_store: StoreFactory, base: str
    ) -> None:
        first = make_store()
        first.put_if_not_exists(make_row(base, 1, extra={DATASET_ID_ATTRIBUTE: "a" * 32}))
        outcomes: list[str] = []
        lock = threading.Lock()

        def claim(i: int) -> None:
            row = make_row(base, 2, extra={DATASET_ID_ATTRIBUTE: "a" * 32})
            try:
                make_store().put_if_not_exists(row, Fence(1, "a" * 32))
                result = "won"
            except VersionTakenError:
                result = "lost"
            with lock:
                outcomes.append(result)

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["lost"] * 5 + ["won"]


# --- backends ------------------------------------------------------------------------------


class TestInMemoryManifestStore(ManifestStoreContract):
    @pytest.fixture
    def make_store(self) -> Iterator[StoreFactory]:  # type: ignore[override]
        name = f"contract-{uuid.uuid4().hex}"
        yield lambda: InMemoryManifestStore(name)
        InMemoryManifestStore.reset_shared(name)


@pytest.fixture(scope="session")
def xs_local_aws() -> Iterator[LocalAWS]:
    """One LocalAWS (S3 + DynamoDB over real HTTP) for this module's whole session."""
    with LocalAWS() as server:
        yield server


@pytest.fixture
def aws_endpoint(xs_local_aws: LocalAWS) -> Iterator[LocalAWS]:
    """The session's LocalAWS, with faults and request log cleared around each test."""
    xs_local_aws.clear_faults()
    xs_local_aws.clear_requests()
    yield xs_local_aws
    xs_local_aws.clear_faults()


@pytest.fixture
def aws_config(aws_endpoint: LocalAWS) -> AwsConfig:
    return AwsConfig.from_storage_options(aws_endpoint.storage_options())


@pytest.fixture
def table(aws_endpoint: LocalAWS) -> str:
    """A fresh table with the contract key schema."""
    return aws_endpoint.create_table(f"s3ddb-{uuid.uuid4().hex[:12]}")


def ddb_store(table: str, aws: AwsConfig, **kw: Any) -> DynamoDBManifestStore:
    # Tiny delays keep retry tests fast; the policy is the same.
    kw.setdefault("base_delay", 0.001)
    kw.setdefault("max_delay", 0.01)
    return DynamoDBManifestStore(table, aws, **kw)


class TestDynamoDBManifestStore(ManifestStoreContract):
    @pytest.fixture
    def make_store(self, table: str, aws_config: AwsConfig) -> StoreFactory:
        # page_size 7: every multi-row listing and delete spans several Query pages.
        return lambda: ddb_store(table, aws_config, page_size=7)

    @pytest.fixture
    def process_spec(self, table: str, aws_endpoint: LocalAWS) -> tuple[str, dict[str, str]] | None:
        return table, aws_endpoint.storage_options()

    def test_listing_paginates(
        self, store: ExternalManifestStore, base: str, aws_endpoint: LocalAWS
    ) -> None:
        for v in range(1, 23):
            store.put_if_not_exists(make_row(base, v))
        aws_endpoint.clear_requests()
        assert [r.version for r in store.list_versions(base)] == list(range(1, 23))
        assert aws_endpoint.count("dynamodb", "Query") == 4  # 7 + 7 + 7 + 1


class TestDynaliteManifestStore(ManifestStoreContract):
    """The same contract on dynalite, a second, independent DynamoDB implementation."""

    @pytest.fixture
    def dynalite_table(self, dynalite: Any) -> str:
        return str(dynalite.create_table(f"s3ddb-{uuid.uuid4().hex[:12]}"))

    @pytest.fixture
    def make_store(self, dynalite_table: str, dynalite: Any) -> StoreFactory:
        config = AwsConfig.from_storage_options(dynalite.storage_options())
        return lambda: ddb_store(dynalite_table, config, page_size=7)

    @pytest.fixture
    def process_spec(self, dynalite_table: str, dynalite: Any) -> tuple[str, dict[str, str]]:
        return dynalite_table, dynalite.storage_options()

    _NO_TRANSACTIONS = (
        "dynalite does not implement TransactWriteItems, which a fenced claim is; "
        "test_fenced_claim_without_transactions_is_a_typed_error checks what it gets"
    )

    def test_fenced_claims(self, store: ExternalManifestStore, base: str) -> None:
        pytest.skip(self._NO_TRANSACTIONS)

    def test_threads_race_fenced_claims_exactly_one_winner(
        self, make_store: StoreFactory, base: str
    ) -> None:
        pytest.skip(self._NO_TRANSACTIONS)

    def test_fenced_claim_without_transactions_is_a_typed_error(
        self, dynalite_table: str, dynalite: Any, base: str
    ) -> None:
        config = AwsConfig.from_storage_options(dynalite.storage_options())
        store = ddb_store(dynalite_table, config, transactions=True)
        store.put_if_not_exists(make_row(base, 1))
        with pytest.raises(ExternalStoreError, match="dynamodb_transactions=false"):
            store.put_if_not_exists(make_row(base, 2), Fence(1))
        assert store.get(base, 2) is None
        # With transactions off, the claim is a plain conditional PutItem (no fence).
        plain = ddb_store(dynalite_table, config, transactions=False)
        plain.put_if_not_exists(make_row(base, 2), Fence(1))
        assert [r.version for r in plain.list_versions(base)] == [1, 2]


# --- DynamoDB specifics --------------------------------------------------------------------


class TestDynamoDBTable:
    def test_missing_table(self, aws_endpoint: LocalAWS, aws_config: AwsConfig) -> None:
        name = f"missing-{uuid.uuid4().hex[:8]}"
        store = ddb_store(name, aws_config)
        with pytest.raises(ExternalStoreTableError) as info:
            store.validate()
        message = str(info.value)
        for needle in (
            name,
            aws_endpoint.endpoint_url,
            "us-east-1",
            "does not exist",
            "base_uri  S  HASH",
            "version   N  RANGE",
            f"s3ddb create-table {name}",
            "infra/terraform/modules/s3ddb-table",
            f"aws dynamodb create-table --table-name {name}",
            "AttributeName=base_uri,KeyType=HASH",
        ):
            assert needle in message, needle
        # Every operation reports it the same way, never a raw botocore error.
        with pytest.raises(ExternalStoreTableError):
            store.put_if_not_exists(make_row("s3://b/x", 1))
        with pytest.raises(ExternalStoreTableError):
            store.get_latest("s3://b/x")

    @pytest.mark.parametrize(
        ("keys", "attrs"),
        [
            ([("id", "HASH")], [("id", "S")]),
            ([("base_uri", "HASH"), ("version", "RANGE")], [("base_uri", "S"), ("version", "S")]),
            ([("base_uri", "HASH")], [("base_uri", "S")]),
        ],
        ids=["other-keys", "version-is-string", "no-range-key"],
    )
    def test_wrong_key_schema(
        self,
        aws_endpoint: LocalAWS,
        aws_config: AwsConfig,
        keys: list[tuple[str, str]],
        attrs: list[tuple[str, str]],
    ) -> None:
        name = f"wrong-{uuid.uuid4().hex[:8]}"
        aws_endpoint.boto3_client("dynamodb").create_table(
            TableName=name,
            KeySchema=[{"AttributeName": n, "KeyType": k} for n, k in keys],
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in attrs],
            BillingMode="PAY_PER_REQUEST",
        )
        with pytest.raises(ExternalStoreTableError) as info:
            ddb_store(name, aws_config).get_latest("s3://b/x")
        message = str(info.value)
        assert name in message and aws_endpoint.endpoint_url in message
        assert "has the key schema" in message and "s3ddb needs" in message
        assert f"    {keys[0][0]:<9} {attrs[0][1]}  HASH" in message  # the actual schema
        assert "base_uri  S  HASH" in message and "version   N  RANGE" in message
        assert "s3ddb create-table" in message and "aws dynamodb create-table" in message
        with pytest.raises(ExternalStoreTableError, match="has the key schema"):
            create_table(name, aws_config)

    def test_validate_is_cached_per_process(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str
    ) -> None:
        aws_endpoint.clear_requests()
        for _ in range(3):
            store = ddb_store(table, aws_config)
            store.validate()
            store.get_latest("s3://b/x")
        assert aws_endpoint.count("dynamodb", "DescribeTable") == 1

    def test_store_pickles(self, aws_config: AwsConfig, table: str) -> None:
        store = ddb_store(table, aws_config)
        store.put_if_not_exists(make_row("s3://b/x", 1))
        clone = pickle.loads(pickle.dumps(store))
        assert clone.get("s3://b/x", 1) == store.get("s3://b/x", 1)
        assert clone.describe()["table"] == table


class TestDynamoDBRetries:
    @pytest.mark.parametrize("kind", ["throttle", "provisioned_throughput", "server_error", "drop"])
    def test_reads_retry_then_succeed(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str, kind: str
    ) -> None:
        store = ddb_store(table, aws_config)
        row = make_row("s3://b/x", 1)
        store.put_if_not_exists(row)
        aws_endpoint.clear_requests()
        aws_endpoint.inject_fault("dynamodb", "GetItem", kind, times=3)  # type: ignore[arg-type]
        aws_endpoint.inject_fault("dynamodb", "Query", kind, times=2)  # type: ignore[arg-type]
        assert store.get("s3://b/x", 1) == row
        assert store.get_latest("s3://b/x") == row
        assert aws_endpoint.count("dynamodb", "GetItem") == 4
        assert aws_endpoint.count("dynamodb", "Query") == 3

    def test_put_retries_throttling(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str
    ) -> None:
        store = ddb_store(table, aws_config)
        store.validate()
        aws_endpoint.inject_fault("dynamodb", "PutItem", "provisioned_throughput", times=2)
        aws_endpoint.inject_fault("dynamodb", "PutItem", "throttle", times=2)
        row = make_row("s3://b/x", 1)
        store.put_if_not_exists(row)
        assert store.get("s3://b/x", 1) == row
        assert aws_endpoint.count("dynamodb", "PutItem") == 5

    def test_throttling_exhausted(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str
    ) -> None:
        store = ddb_store(table, aws_config, max_retries=3)
        row = make_row("s3://b/x", 1)
        store.put_if_not_exists(row)
        aws_endpoint.clear_requests()
        aws_endpoint.inject_fault("dynamodb", "GetItem", "throttle", times=4)
        with pytest.raises(ExternalStoreThrottledError) as info:
            store.get("s3://b/x", 1)
        message = str(info.value)
        assert "GetItem" in message and table in message and "4 attempts" in message
        assert "ThrottlingException" in message
        assert aws_endpoint.count("dynamodb", "GetItem") == 4  # 1 + max_retries, no more

        # A put rejected every time by throttling definitely did not claim the version.
        aws_endpoint.inject_fault("dynamodb", "PutItem", "provisioned_throughput", times=4)
        with pytest.raises(ExternalStoreThrottledError, match="PutItem"):
            store.put_if_not_exists(make_row("s3://b/x", 2))
        assert store.get("s3://b/x", 2) is None

        aws_endpoint.inject_fault("dynamodb", "UpdateItem", "server_error", times=4)
        with pytest.raises(ExternalStoreThrottledError, match="UpdateItem"):
            store.finalize("s3://b/x", 1, row.path, final_path_of(row.path))

    @pytest.mark.parametrize("kind", ["apply_then_server_error", "apply_then_drop"])
    def test_lost_put_response_recognises_own_row(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str, kind: str
    ) -> None:
        store = ddb_store(table, aws_config)
        store.validate()
        aws_endpoint.inject_fault("dynamodb", "PutItem", kind)  # type: ignore[arg-type]
        row = make_row("s3://b/x", 1)
        store.put_if_not_exists(row)  # success: the retry finds our own row
        assert store.get("s3://b/x", 1) == row
        assert aws_endpoint.count("dynamodb", "PutItem") == 2
        assert [r.applied for r in aws_endpoint.requests if r.operation == "PutItem"] == [
            True,
            True,
        ]

    def test_lost_put_then_someone_else_holds_the_version(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str
    ) -> None:
        store = ddb_store(table, aws_config)
        theirs = make_row("s3://b/x", 1, committer="other")
        store.put_if_not_exists(theirs)
        aws_endpoint.inject_fault("dynamodb", "PutItem", "server_error")
        with pytest.raises(VersionTakenError) as info:
            store.put_if_not_exists(make_row("s3://b/x", 1))
        assert info.value.winner == theirs

    def test_outcome_still_unknown_after_retries(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str
    ) -> None:
        store = ddb_store(table, aws_config, max_retries=2)
        store.validate()
        aws_endpoint.inject_fault("dynamodb", "PutItem", "apply_then_server_error", times=3)
        row = make_row("s3://b/x", 1)
        with pytest.raises(ExternalStoreOutcomeUnknownError) as info:
            store.put_if_not_exists(row)
        assert "outcome unknown" in str(info.value) and row.path in str(info.value)
        assert store.get("s3://b/x", 1) == row  # it did land: never report it as failed

    def test_unknown_then_throttled_stays_unknown(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str
    ) -> None:
        store = ddb_store(table, aws_config, max_retries=2)
        store.validate()
        aws_endpoint.inject_fault("dynamodb", "PutItem", "apply_then_drop")
        aws_endpoint.inject_fault("dynamodb", "PutItem", "throttle", times=2)
        with pytest.raises(ExternalStoreOutcomeUnknownError):
            store.put_if_not_exists(make_row("s3://b/x", 1))

    def test_lost_finalize_response(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str
    ) -> None:
        store = ddb_store(table, aws_config)
        row = make_row("s3://b/x", 1)
        store.put_if_not_exists(row)
        aws_endpoint.inject_fault("dynamodb", "UpdateItem", "apply_then_drop")
        assert store.finalize("s3://b/x", 1, row.path, "_versions/1.manifest") is False
        got = store.get("s3://b/x", 1)
        assert got is not None and got.path == "_versions/1.manifest"

    def test_delete_dataset_retries(
        self, aws_endpoint: LocalAWS, aws_config: AwsConfig, table: str
    ) -> None:
        store = ddb_store(table, aws_config, page_size=10)
        for v in range(1, 41):
            store.put_if_not_exists(make_row("s3://b/x", v))
        aws_endpoint.inject_fault("dynamodb", "BatchWriteItem", "throttle", times=2)
        aws_endpoint.inject_fault("dynamodb", "Query", "server_error")
        assert store.delete_dataset("s3://b/x") == 40
        assert store.get_latest("s3://b/x") is None

    def test_full_jitter_backoff_is_bounded(self) -> None:
        slept: list[float] = []
        store = DynamoDBManifestStore("t", base_delay=0.05, max_delay=2.0, sleep=slept.append)
        for attempt in range(1, 12):
            cap = min(2.0, 0.05 * 2 ** (attempt - 1))
            slept.clear()
            for _ in range(50):
                store.back_off(attempt)
            assert len(slept) == 50 and all(0 <= delay <= cap for delay in slept)


class TestCredentials:
    @pytest.fixture
    def no_credentials(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        for var in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_SECURITY_TOKEN",
            "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE",
            "AWS_ROLE_ARN",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        ):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        # Sessions and clients are cached per process with the credentials they found:
        # none are reused here, and none made here are reused after.
        for cache in (aws_sessions.SESSIONS, aws_module.CLIENTS):
            cache.clear()
        yield
        for cache in (aws_sessions.SESSIONS, aws_module.CLIENTS):
            cache.clear()

    @pytest.mark.usefixtures("no_credentials")
    def test_missing_credentials(self, aws_endpoint: LocalAWS, table: str) -> None:
        aws = AwsConfig(dynamodb_endpoint=aws_endpoint.endpoint_url, region="us-east-1")
        store = ddb_store(table, aws)
        with pytest.raises(CredentialsError) as info:
            store.validate()
        message = str(info.value)
        assert "no AWS credentials were found" in message
        assert table in message and aws_endpoint.endpoint_url in message
        for source in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "~/.aws/credentials", "metadata"):
            assert source in message
        assert isinstance(info.value, PermissionError)
        with pytest.raises(CredentialsError):
            create_table(f"t-{uuid.uuid4().hex[:8]}", aws)

    @pytest.mark.parametrize(
        "code",
        ["AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException"],
    )
    def test_refused_credentials(
        self, monkeypatch: pytest.MonkeyPatch, aws_config: AwsConfig, table: str, code: str
    ) -> None:
        from botocore.exceptions import ClientError

        store = ddb_store(table, aws_config)
        store.validate()

        class Refusing:
            def put_item(self, **kwargs: Any) -> None:
                response: Any = {"Error": {"Code": code, "Message": "denied"}}
                raise ClientError(response, "PutItem")

        monkeypatch.setattr(store, "client", Refusing)
        with pytest.raises(CredentialsError, match=f"refused the credentials.*{code}") as info:
            store.put_if_not_exists(make_row("s3://b/x", 1))
        assert "dynamodb:PutItem" in str(info.value)


class TestCreateTable:
    def test_create_is_idempotent(self, aws_endpoint: LocalAWS, aws_config: AwsConfig) -> None:
        name = f"created-{uuid.uuid4().hex[:8]}"
        assert create_table(name, aws_config) is True
        assert create_table(name, aws_config) is False
        table = describe_table(name, aws_config)
        assert table["KeySchema"] == [
            {"AttributeName": "base_uri", "KeyType": "HASH"},
            {"AttributeName": "version", "KeyType": "RANGE"},
        ]
        assert sorted(table["AttributeDefinitions"], key=lambda d: d["AttributeName"]) == [
            {"AttributeName": "base_uri", "AttributeType": "S"},
            {"AttributeName": "version", "AttributeType": "N"},
        ]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert table["PointInTimeRecovery"] == "ENABLED"
        assert table["DeletionProtectionEnabled"] is True
        tags = aws_endpoint.boto3_client("dynamodb").list_tags_of_resource(
            ResourceArn=table["TableArn"]
        )["Tags"]
        assert {"Key": "s3ddb:role", "Value": "external-manifest-store"} in tags
        ddb_store(name, aws_config).validate()

    def test_provisioned(self, aws_config: AwsConfig) -> None:
        name = f"prov-{uuid.uuid4().hex[:8]}"
        with pytest.raises(InvalidInputError, match="read_capacity"):
            create_table(name, aws_config, billing_mode="PROVISIONED")
        with pytest.raises(InvalidInputError):
            create_table(name, aws_config, read_capacity=5)
        with pytest.raises(InvalidInputError):
            create_table(name, aws_config, billing_mode="FREE")
        assert create_table(
            name,
            aws_config,
            billing_mode="provisioned",
            read_capacity=5,
            write_capacity=3,
            point_in_time_recovery=False,
            deletion_protection=False,
            tags={"team": "data"},
        )
        table = describe_table(name, aws_config)
        assert table["ProvisionedThroughput"]["ReadCapacityUnits"] == 5
        assert table["ProvisionedThroughput"]["WriteCapacityUnits"] == 3
        assert table["DeletionProtectionEnabled"] is False
        assert table["PointInTimeRecovery"] == "DISABLED"

    def test_cli(
        self,
        aws_endpoint: LocalAWS,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        from s3ddb.cli.main import main

        for key, value in aws_endpoint.env().items():
            monkeypatch.setenv(key, value)
        name = f"cli-{uuid.uuid4().hex[:8]}"
        argv = ["create-table", name, "--endpoint-url", aws_endpoint.endpoint_url]
        assert main([*argv, "--region", "us-east-1", "--tag", "team=data"]) == 0
        out = capsys.readouterr().out
        assert f"created DynamoDB table {name!r}" in out
        assert "point-in-time recovery: ENABLED" in out and "PAY_PER_REQUEST" in out
        assert main(argv) == 0
        assert "already exists with the expected key schema" in capsys.readouterr().out
        assert main([*argv, "--tag", "oops"]) == 2  # a usage error
        assert "--tag expects KEY=VALUE" in capsys.readouterr().err

        wrong = f"cli-wrong-{uuid.uuid4().hex[:8]}"
        aws_endpoint.boto3_client("dynamodb").create_table(
            TableName=wrong,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        # The table is not usable: a configuration error.
        assert main(["create-table", wrong, "--endpoint-url", aws_endpoint.endpoint_url]) == 2
        assert "ExternalStoreTableError" in capsys.readouterr().err


# --- the in-memory store's extras -----------------------------------------------------------


class TestInMemoryFaults:
    def test_apply_then_unknown(self) -> None:
        store = InMemoryManifestStore()
        store.inject_fault("put_if_not_exists", "apply_then_unknown")
        row = make_row("s3://b/x", 1)
        with pytest.raises(ExternalStoreOutcomeUnknownError):
            store.put_if_not_exists(row)
        assert store.get("s3://b/x", 1) == row
        store.put_if_not_exists(row)  # the fault is spent; re-put of our row succeeds

    def test_unknown_not_applied_and_throttle(self) -> None:
        store = InMemoryManifestStore()
        store.inject_fault("put_if_not_exists", "unknown")
        store.inject_fault("get", "throttle", times=2)
        with pytest.raises(ExternalStoreOutcomeUnknownError):
            store.put_if_not_exists(make_row("s3://b/x", 1))
        for _ in range(2):
            with pytest.raises(ExternalStoreThrottledError):
                store.get("s3://b/x", 1)
        assert store.get("s3://b/x", 1) is None
        assert store.calls["get"] == 3

    def test_custom_exception_wildcard_and_hook(self) -> None:
        store = InMemoryManifestStore()
        seen: list[str] = []
        store.hook = lambda op, args: seen.append(op)
        store.inject_fault("*", exception=lambda op: RuntimeError(f"boom in {op}"))
        with pytest.raises(RuntimeError, match="boom in get_latest"):
            store.get_latest("s3://b/x")
        assert store.get_latest("s3://b/x") is None
        assert seen == ["get_latest", "get_latest"]
        store.inject_fault("finalize", "error")
        store.clear_faults()
        with pytest.raises(ExternalStoreError, match="no such row"):
            store.finalize("s3://b/x", 1, staged(1), "_versions/1.manifest")
        with pytest.raises(ValueError):
            store.inject_fault("nope", "error")
        with pytest.raises(ValueError):
            store.inject_fault("get", "bogus")  # type: ignore[arg-type]

    def test_named_stores_share_rows_private_ones_do_not(self) -> None:
        name = f"shared-{uuid.uuid4().hex}"
        try:
            a, b = InMemoryManifestStore(name), InMemoryManifestStore(name)
            a.put_if_not_exists(make_row("s3://b/x", 1))
            assert b.get("s3://b/x", 1) is not None
            assert InMemoryManifestStore().get("s3://b/x", 1) is None
        finally:
            InMemoryManifestStore.reset_shared(name)


def test_same_commit_identity() -> None:
    mine = make_row("s3://b/x", 3)
    final = ManifestRow(
        mine.base_uri, 3, final_path_of(mine.path), mine.size, mine.committer, mine.committed_at
    )
    assert same_commit(mine, mine) and same_commit(mine, final)
    assert not same_commit(mine, make_row("s3://b/x", 3))
    other_writer = ManifestRow(mine.base_uri, 3, final.path, mine.size, "other", mine.committed_at)
    assert not same_commit(mine, other_writer)
    assert final_path_of("_versions/18446744073709551614.manifest-ab-12") == (
        "_versions/18446744073709551614.manifest"
    )
    assert final_path_of("_versions/1.manifest") == "_versions/1.manifest"


def test_dynamodb_module_does_not_import_boto3() -> None:
    import subprocess
    import sys

    code = (
        "import sys, s3ddb.external_store, s3ddb.external_store.dynamodb, s3ddb.cli.create_table;"
        "print('boto3' in sys.modules or 'botocore' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_environment_turning_transactions_off_is_never_served_stale(
    aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's DynamoDB stores are shared per table and settings; the environment
    variable that turns transactions off is one of the settings (a store made while
    it was set must not serve the same table once it is unset)."""
    from s3ddb.versions.connect import open_handler
    from tests.conftest import TEST_BUCKET, TEST_TABLE

    uri = f"s3+ddb://{TEST_BUCKET}/env-{uuid.uuid4().hex[:10]}?ddbTableName={TEST_TABLE}"
    options = dict(aws.storage_options())
    monkeypatch.setenv("S3DDB_DYNAMODB_TRANSACTIONS", "false")
    assert open_handler(uri, options).external.transactions is False
    monkeypatch.delenv("S3DDB_DYNAMODB_TRANSACTIONS")
    assert open_handler(uri, options).external.transactions is True
