"""Groups of changes across datasets (``s3ddb.atomic``) and consistent snapshots
(``s3ddb.snapshot``), in one process: on ``memory://`` and on ``s3+ddb://`` through
the local AWS endpoint (moto over HTTP). Crashes and concurrent processes are in
tests/groups/test_group_processes.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import (
    AtomicGroupError,
    CommitConflictError,
    CommitStateUnknownError,
    DatasetRecreatedError,
    RetryableCommitConflictError,
)
from tests.conftest import TEST_BUCKET, TEST_TABLE, before_each_transact_write

Where = tuple[list[str], dict[str, Any] | None, Any]


def _ids(uri: str, so: dict[str, Any] | None, version: int | None = None) -> list[int]:
    ds = s3ddb.dataset(uri, version=version, storage_options=so)
    return sorted(ds.to_table(columns=["id"])["id"].to_pylist())


def _table(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "tag": [f"t{i}" for i in ids]})


@pytest.fixture(params=["memory", "ddb"])
def where(request: pytest.FixtureRequest) -> Any:
    """Three fresh dataset URIs of one kind, their storage options, and the endpoint
    (None for memory)."""
    if request.param == "memory":
        uris = [f"memory://atomic-{uuid.uuid4().hex}/{n}" for n in "abc"]
        yield uris, None, None
        import fsspec

        fs = fsspec.filesystem("memory")
        for uri in uris:
            root = "/" + uri.split("://", 1)[1]
            if fs.exists(root):
                fs.rm(root, recursive=True)
        return
    aws = request.getfixturevalue("aws")
    prefix = f"atomic-{uuid.uuid4().hex[:10]}"
    uris = [f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "abc"]
    yield uris, aws.storage_options(), aws


def _create(uris: list[str], so: dict[str, Any] | None) -> None:
    for i, uri in enumerate(uris):
        s3ddb.write_dataset(_table(100 * i + 1, 100 * i + 2, 100 * i + 3), uri, storage_options=so)


def _files(uri: str, so: dict[str, Any] | None) -> set[str]:
    ds = s3ddb.dataset(uri, storage_options=so)
    return {m.path for m in ds.handler.store.list("") if not m.path.startswith("_versions/")}


# --- all or nothing -------------------------------------------------------------------
def test_versions_of_a_group_record_the_calls_that_made_them(where: Where) -> None:
    """A group holds each change until the block ends; the versions it commits still
    name the call that planned them and its figures, as a single commit's do."""
    (a, b, _), so, aws = where
    _create([a, b], so)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).delete("id = 2")
        tx.dataset(a).update({"tag": "'changed'"}, where="id = 3")
        tx.dataset(b).merge_insert(
            "id"
        ).when_matched_update_all().when_not_matched_insert_all().execute(_table(101, 104))
    first = s3ddb.dataset(a, storage_options=so).versions()[-2:]
    assert [v.api_operation for v in first] == ["delete", "update"]
    assert first[0].metrics["num_deleted_rows"] == 1
    assert first[1].metrics["num_updated_rows"] == 1
    merged = s3ddb.dataset(b, storage_options=so).versions()[-1]
    assert merged.api_operation == "merge_insert"
    assert (merged.metrics["matched_rows"], merged.metrics["inserted_rows"]) == (1, 1)
    assert merged.group_id == first[0].group_id
    if aws is not None:  # the group is read from the DynamoDB rows
        assert merged.group_id is not None


def test_every_change_commits_together(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    with s3ddb.atomic(storage_options=so) as tx:
        orders = tx.dataset(a)
        assert tx.dataset(a) is orders  # pinned when first touched, then the same
        orders.delete("id = 2")
        ledger = tx.dataset(b)
        ledger.insert(_table(104))
        ledger.insert(_table(105))  # a second change: the next version, claimed together
        # Planned changes are visible through the group's handles only.
        assert orders.count_rows() == 2 and ledger.count_rows() == 5
        assert s3ddb.dataset(a, storage_options=so).version == 1
        assert _ids(b, so) == [101, 102, 103]
    assert (orders.version, ledger.version) == (2, 3)
    assert _ids(a, so) == [1, 3]
    assert _ids(b, so) == [101, 102, 103, 104, 105]
    assert _ids(b, so, version=2) == [101, 102, 103, 104]


def test_an_exception_in_the_block_commits_nothing_and_deletes_its_files(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    before = {uri: _files(uri, so) for uri in (a, b)}
    with (
        pytest.raises(RuntimeError, match="changed my mind"),
        s3ddb.atomic(storage_options=so) as tx,
    ):
        tx.dataset(a).delete("id = 1")
        tx.dataset(b).insert(_table(7, 8))
        tx.dataset(b).update({"tag": "'x'"}, where="id = 101")
        assert _files(b, so) != before[b]  # data files were written
        raise RuntimeError("changed my mind")
    for uri in (a, b):
        assert s3ddb.dataset(uri, storage_options=so).version == 1
        assert _files(uri, so) == before[uri]


def test_a_group_is_over_after_its_block(where: Where) -> None:
    (a, _, _), so, _aws = where
    _create([a], so)
    with s3ddb.atomic(storage_options=so) as tx:
        ds = tx.dataset(a)
    with pytest.raises(AtomicGroupError, match="is over"):
        tx.dataset(a)
    ds.insert(_table(9))  # the handle is an ordinary dataset again
    assert ds.version == 2


def test_an_empty_group_commits_nothing(where: Where) -> None:
    (a, _, _), so, _aws = where
    _create([a], so)
    with s3ddb.atomic(storage_options=so) as tx:
        assert tx.dataset(a).count_rows() == 3
    assert s3ddb.dataset(a, storage_options=so).version == 1


# --- conflicts ------------------------------------------------------------------------


def test_a_member_that_moved_is_rebased(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(10))
        tx.dataset(b).delete("id = 102")
        # Another writer commits to both members before the group does.
        s3ddb.dataset(b, storage_options=so).insert(_table(200))
        s3ddb.dataset(a, storage_options=so).delete("id = 3")
    assert _ids(a, so) == [1, 2, 10]
    assert _ids(b, so) == [101, 103, 200]
    assert [s3ddb.dataset(u, storage_options=so).version for u in (a, b)] == [3, 3]


@pytest.mark.parametrize("conflicting", [0, 1])
def test_a_conflict_on_any_member_fails_the_whole_group(where: Where, conflicting: int) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    bad, good = (a, b) if conflicting == 0 else (b, a)
    first = 2 if bad == a else 102
    before = _files(good, so)
    with pytest.raises(CommitConflictError), s3ddb.atomic(storage_options=so) as tx:
        for uri in (a, b):  # the conflicting member first, or second
            if uri == good:
                tx.dataset(good).insert(_table(300))
            else:
                tx.dataset(bad).update({"tag": "'group'"}, where=f"id = {first}")
        # Another writer deletes the row the group updates: not rebasable.
        s3ddb.dataset(bad, storage_options=so).delete(f"id = {first}")
    assert s3ddb.dataset(good, storage_options=so).version == 1
    assert 300 not in _ids(good, so)
    assert _files(good, so) == before
    assert first not in _ids(bad, so)
    assert s3ddb.dataset(bad, storage_options=so).version == 2


def test_a_dataset_with_several_changes_that_moved_fails_retryably(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    with (
        pytest.raises(RetryableCommitConflictError, match="several changes"),
        s3ddb.atomic(storage_options=so) as tx,
    ):
        tx.dataset(a).insert(_table(11))
        tx.dataset(a).insert(_table(12))
        tx.dataset(b).insert(_table(13))
        s3ddb.dataset(a, storage_options=so).insert(_table(99))
    assert _ids(a, so) == [1, 2, 3, 99]
    assert _ids(b, so) == [101, 102, 103]


def test_retries_run_the_function_again_on_a_retryable_conflict(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    runs = []

    @s3ddb.atomic(retries=2, storage_options=so)
    def move(tx: s3ddb.groups.AtomicGroup, row: int) -> str:
        runs.append(row)
        tx.dataset(a).insert(_table(row))
        tx.dataset(a).insert(_table(row + 1))
        tx.dataset(b).insert(_table(row))
        if len(runs) == 1:  # someone else commits to a while the first run is open
            s3ddb.dataset(a, storage_options=so).insert(_table(50))
        return "done"

    assert move(40) == "done"
    assert len(runs) == 2
    assert _ids(a, so) == [1, 2, 3, 40, 41, 50]
    assert _ids(b, so) == [40, 101, 102, 103]

    @s3ddb.atomic(storage_options=so)
    def once(tx: s3ddb.groups.AtomicGroup) -> None:
        tx.dataset(a).insert(_table(60))
        tx.dataset(a).insert(_table(61))
        s3ddb.dataset(a, storage_options=so).insert(_table(62))

    with pytest.raises(RetryableCommitConflictError):
        once()
    assert 60 not in _ids(a, so)


def test_retries_need_a_function(where: Where) -> None:
    with pytest.raises(AtomicGroupError, match="decorate"), s3ddb.atomic(retries=1):
        pass


def test_a_dropped_and_recreated_member_fails_the_group(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    with pytest.raises(DatasetRecreatedError), s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(20))
        tx.dataset(b).insert(_table(21))
        from s3ddb.maintenance.drop import drop

        drop(b, so)
        s3ddb.write_dataset(_table(7), b, storage_options=so)
    assert _ids(a, so) == [1, 2, 3]
    assert _ids(b, so) == [7]


# --- limits ---------------------------------------------------------------------------


def test_members_must_be_of_one_transactional_kind(where: Where, tmp_path: Any) -> None:
    (a, _, _), so, _aws = where
    _create([a], so)
    local = str(tmp_path / "local")
    s3ddb.write_dataset(_table(1), local)
    with (
        pytest.raises(AtomicGroupError, match="cannot join"),
        s3ddb.atomic(storage_options=so) as tx,
    ):
        tx.dataset(a).insert(_table(5))
        tx.dataset(local)
    assert s3ddb.dataset(a, storage_options=so).version == 1
    with pytest.raises(AtomicGroupError, match="only s3\\+ddb:// datasets"):
        s3ddb.snapshot([local])
    other = f"memory://atomic-{uuid.uuid4().hex}" if so else None
    if other is not None:  # s3+ddb and memory:// in one group
        s3ddb.write_dataset(_table(1), other)
        with pytest.raises(AtomicGroupError, match="cannot join"), s3ddb.atomic() as tx:
            tx.dataset(a, storage_options=so)
            tx.dataset(other)
        with pytest.raises(AtomicGroupError):
            s3ddb.snapshot([a, other], so)


def test_tables_behind_another_endpoint_or_region_cannot_join(aws: Any) -> None:
    so = aws.storage_options()
    a = f"s3+ddb://{TEST_BUCKET}/atomic-{uuid.uuid4().hex[:10]}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(_table(1), a, storage_options=so)
    elsewhere = {**so, "dynamodb_region": "eu-west-3"}
    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig

    try:
        create_table(TEST_TABLE, AwsConfig.from_storage_options(elsewhere))
    except s3ddb.ExternalStoreError:
        pass  # created by an earlier run in this session
    with pytest.raises(AtomicGroupError, match="one endpoint, region"), s3ddb.atomic() as tx:
        tx.dataset(a, storage_options=so)
        tx.dataset(a.replace("atomic-", "other-"), storage_options=elsewhere)
    assert s3ddb.dataset(a, storage_options=so).version == 1


def test_more_changes_than_one_transaction_holds_is_a_typed_error(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    # Per change one action (two for the first on each dataset, which checks its
    # predecessor, on DynamoDB): 100 at most.
    limit = 98 if so else 100
    with (
        pytest.raises(AtomicGroupError, match="at most 100 actions"),
        s3ddb.atomic(storage_options=so) as tx,
    ):
        tx.dataset(b).update_config({"k": "v"})
        for i in range(limit + 1):
            tx.dataset(a).update_config({"n": str(i)})
    assert [s3ddb.dataset(u, storage_options=so).version for u in (a, b)] == [1, 1]
    with pytest.raises(AtomicGroupError, match="at most 100"):
        s3ddb.snapshot([f"{a}-{i}" for i in range(101)], so)


def test_a_group_does_not_create_datasets(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a], so)
    with pytest.raises(s3ddb.DatasetNotFoundError), s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(b)


# --- snapshots ------------------------------------------------------------------------


def test_snapshot_pins_every_dataset_at_its_newest_version(where: Where) -> None:
    uris, so, _aws = where
    _create(uris, so)
    with s3ddb.atomic(storage_options=so) as tx:
        for uri in uris[:2]:
            tx.dataset(uri).insert(_table(7))
    snap = s3ddb.snapshot(uris, so)
    assert list(snap) == uris
    assert [snap[u].version for u in uris] == [2, 2, 1]
    assert [7 in snap[u].to_table()["id"].to_pylist() for u in uris] == [True, True, False]


def test_a_snapshot_that_raced_a_group_reads_again(
    where: Where, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group commits between the snapshot's first reads and its check: the check
    sees the next version and the snapshot reads again, so it shows the whole group."""
    (a, b, _), so, _aws = where
    if so is None:
        pytest.skip("memory:// snapshots read every dataset under one lock: no race")
    _create([a, b], so)
    # The consistent read of the s3+ddb:// handlers' latest_together.
    import s3ddb.commit.external as claims_module

    real = claims_module.read_rows
    checks = []

    def group_commits_first(keys: Any) -> Any:
        if not checks:
            with s3ddb.atomic(storage_options=so) as tx:
                tx.dataset(a).insert(_table(30))
                tx.dataset(b).insert(_table(30))
        rows = real(keys)
        checks.append([r is not None for r in rows])
        return rows

    monkeypatch.setattr(claims_module, "read_rows", group_commits_first)
    snap = s3ddb.snapshot([a, b], so)
    assert checks == [[True, True], [False, False]]
    assert [snap[u].version for u in (a, b)] == [2, 2]


def test_history_shows_each_versions_group(aws: Any) -> None:
    so = aws.storage_options()
    prefix = f"atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    _create([a, b], so)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(1))
        tx.dataset(b).insert(_table(2))
        tx.dataset(b).insert(_table(3))
    history = s3ddb.dataset(b, storage_options=so).versions()
    assert [v.group_id for v in history] == [None, tx.group_id, tx.group_id]
    base = f"s3://{TEST_BUCKET}/{prefix}"
    expected = (
        (f"{base}/a", 2, TEST_TABLE),
        (f"{base}/b", 2, TEST_TABLE),
        (f"{base}/b", 3, TEST_TABLE),
    )
    assert history[-1].group_members == expected
    assert s3ddb.dataset(a, storage_options=so).versions()[-1].group_members == expected


# --- lost responses (DynamoDB) --------------------------------------------------------


@pytest.mark.parametrize("kind", ["drop", "apply_then_drop", "apply_then_server_error"])
def test_a_lost_group_response_is_resolved_without_guessing(aws: Any, kind: str) -> None:
    so = aws.storage_options()
    prefix = f"atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    _create([a, b], so)
    fault = aws.inject_fault("dynamodb", "TransactWriteItems", kind, times=1)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(40))
        tx.dataset(b).insert(_table(41))
    assert fault.triggered == 1
    # Exactly once: one new version each, holding the rows once.
    assert [s3ddb.dataset(u, storage_options=so).version for u in (a, b)] == [2, 2]
    assert _ids(a, so) == [1, 2, 3, 40]
    assert _ids(b, so) == [41, 101, 102, 103]


def test_an_outcome_that_stays_unknown_keeps_the_files(aws: Any) -> None:
    so = aws.storage_options()
    prefix = f"atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    _create([a, b], so)
    before = _files(a, so)
    # The claim applies and its response is lost; then every request to DynamoDB
    # (the resent claim, the read back) is lost too.
    claim = aws.inject_fault("dynamodb", "TransactWriteItems", "apply_then_drop", times=1)
    aws.inject_fault("dynamodb", "*", "drop", times=10_000, after=claim)
    try:
        with (
            pytest.raises(CommitStateUnknownError, match="did not confirm"),
            s3ddb.atomic(storage_options=so) as tx,
        ):
            tx.dataset(a).insert(_table(50))
            tx.dataset(b).insert(_table(51))
    finally:
        aws.clear_faults()
    assert len(_files(a, so)) > len(before)  # kept: they may belong to the group
    # The group did land (its claim applied before the response was lost).
    assert _ids(a, so) == [1, 2, 3, 50]
    assert _ids(b, so) == [51, 101, 102, 103]


def test_verify_checks_every_member_of_every_group(aws: Any) -> None:
    from s3ddb.commit import finalizer
    from s3ddb.external_store.ddb_items import item_key
    from s3ddb.io.uri import parse_uri
    from s3ddb.maintenance.verify import verify

    so = aws.storage_options()
    prefix = f"atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    _create([a, b], so)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(1))
        tx.dataset(b).insert(_table(2))
    finalizer.drain()  # steps 3-4 of the group's versions, in the background
    assert verify(a, so, grace_seconds=0).healthy
    # B's member of the group is deleted by hand: A's group is no longer whole.
    aws.boto3_client("dynamodb").delete_item(
        TableName=TEST_TABLE, Key=item_key(parse_uri(b).base_uri, 2)
    )
    report = verify(a, so, grace_seconds=0)
    problems = [p for p in report.problems if p.kind == "missing_group_member"]
    assert [p.version for p in problems] == [2], report.problems
    assert "has no row" in problems[0].meaning


def test_history_on_the_command_line_shows_groups(
    aws: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from tests.support.cli_runner import run_cli

    for key, value in aws.env().items():
        monkeypatch.setenv(key, value)
    # This endpoint's DynamoDB has transactions: nothing left from another endpoint's
    # settings turns them off.
    monkeypatch.delenv("S3DDB_DYNAMODB_TRANSACTIONS", raising=False)
    prefix = f"atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    _create([a, b], None)
    with s3ddb.atomic() as tx:
        tx.dataset(a).delete("id = 1")
        tx.dataset(b).insert(_table(9))
    code, out, err = run_cli(capsys, "history", a, "--json")
    assert code == 0, err
    entries = json.loads(out)
    assert [e["version"] for e in entries] == [2, 1]
    assert entries[1]["group"] is None
    base = f"s3://{TEST_BUCKET}/{prefix}"
    assert entries[0]["group"] == {
        "id": tx.group_id,
        "members": [
            {"base_uri": f"{base}/a", "version": 2, "table": TEST_TABLE},
            {"base_uri": f"{base}/b", "version": 2, "table": TEST_TABLE},
        ],
    }
    code, out, err = run_cli(capsys, "versions", b)
    assert code == 0, err
    assert f"{tx.group_id}: {base}/a@2, {base}/b@2" in out


def test_a_dynamodb_without_transactions_is_a_typed_error(aws: Any) -> None:
    """As dynalite is used (dynamodb_transactions=false: it has no TransactWriteItems),
    groups and snapshots are refused before anything is written."""
    so = {**aws.storage_options(), "dynamodb_transactions": "false"}
    a = f"s3+ddb://{TEST_BUCKET}/atomic-{uuid.uuid4().hex[:10]}?ddbTableName={TEST_TABLE}"
    _create([a], so)
    with (
        pytest.raises(AtomicGroupError, match="without transactions"),
        s3ddb.atomic(storage_options=so) as tx,
    ):
        tx.dataset(a)
    with pytest.raises(AtomicGroupError, match="without transactions"):
        s3ddb.snapshot([a], so)
    assert s3ddb.dataset(a, storage_options=so).version == 1


def test_a_block_may_commit_or_abort_its_group_itself(where: Where) -> None:
    (a, b, _), so, _aws = where
    _create([a, b], so)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(70))
        tx.commit()
        assert s3ddb.dataset(a, storage_options=so).version == 2
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(b).insert(_table(71))
        tx.abort()
    assert _ids(a, so) == [1, 2, 3, 70]
    assert _ids(b, so) == [101, 102, 103]


def test_operations_with_an_application_transaction_commit_once(where: Where) -> None:
    """Fragments written elsewhere (e.g. by executors) join a group as an Append; an
    application transaction number on every member makes a replay fail as a whole."""
    (a, b, _), so, _aws = where
    _create([a, b], so)

    def batch(n: int) -> None:
        props = {"s3ddb.app_txn.sinks": str(n)}
        with s3ddb.atomic(storage_options=so) as tx:
            for uri in (a, b):
                schema = tx.dataset(uri).manifest.schema
                frags = s3ddb.fragment.write_fragments(
                    _table(500 + n), uri, schema, storage_options=so
                )
                tx.add_operation(uri, s3ddb.operations.Append(tuple(frags)), props)

    batch(1)
    before = _files(b, so)
    with pytest.raises(s3ddb.TransactionAlreadyCommittedError):
        batch(1)  # replayed after a restart
    batch(2)
    for uri in (a, b):
        assert [i for i in _ids(uri, so) if i >= 500] == [501, 502]
        assert s3ddb.dataset(uri, storage_options=so).version == 3
    assert len(_files(b, so) - before) == 2  # batch 2's data and transaction files only


def test_a_group_over_four_megabytes_is_a_typed_error() -> None:
    # Each row of a group lists every member: with long dataset names, 4 MB (DynamoDB's
    # limit per transaction) comes before 100 actions.
    uri = f"memory://atomic-{uuid.uuid4().hex}/{'n' * 1500}"
    s3ddb.write_dataset(_table(1), uri)
    with (
        pytest.raises(AtomicGroupError, match="4194304 bytes"),
        s3ddb.atomic() as tx,
    ):
        for i in range(60):
            tx.dataset(uri).update_config({"n": str(i)})
    assert s3ddb.dataset(uri).version == 1


def test_the_in_memory_store_claims_groups_all_or_nothing() -> None:
    from s3ddb.external_store.manifest_store import (
        ExternalStoreOutcomeUnknownError,
        Fence,
        FenceFailedError,
        GroupClaim,
        GroupRefusedError,
        ManifestRow,
        VersionTakenError,
        claim_group,
        read_rows,
    )
    from s3ddb.external_store.memory import InMemoryManifestStore

    name = f"group-{uuid.uuid4().hex}"
    one, two = InMemoryManifestStore(name), InMemoryManifestStore(name)
    ident = {"dataset_id": "d1"}

    def row(uri: str, version: int, tag: str) -> ManifestRow:
        return ManifestRow(uri, version, f"_versions/{version}.manifest-{tag}", 10, "w", 1, ident)

    for uri in ("s3://b/a", "s3://b/b"):
        one.put_if_not_exists(row(uri, 1, "seed"))
    group = [
        GroupClaim(one, row("s3://b/a", 2, "g1"), Fence(1, "d1")),
        GroupClaim(two, row("s3://b/b", 2, "g1"), Fence(1, "d1")),
    ]
    # Another writer takes b's version 2: nothing of the group applies.
    two.put_if_not_exists(row("s3://b/b", 2, "other"))
    with pytest.raises(GroupRefusedError) as refused:
        claim_group(group, "t1")
    assert refused.value.refusals[0] is None
    assert isinstance(refused.value.refusals[1], VersionTakenError)
    assert one.get("s3://b/a", 2) is None
    # A fence of another identity refuses too.
    fenced = [GroupClaim(one, row("s3://b/a", 2, "g2"), Fence(1, "other-identity"))]
    with pytest.raises(GroupRefusedError) as refused:
        claim_group(fenced, "t2")
    assert isinstance(refused.value.refusals[0], FenceFailedError)
    # Applied, then the response lost: resending finds the group's own rows.
    group = [
        GroupClaim(one, row("s3://b/a", 2, "g3"), Fence(1, "d1")),
        GroupClaim(two, row("s3://b/b", 3, "g3"), Fence(2, "d1")),
    ]
    one.inject_fault("put_group", "apply_then_unknown")
    with pytest.raises(ExternalStoreOutcomeUnknownError):
        claim_group(group, "t3")
    claim_group(group, "t3")
    rows = read_rows([(one, "s3://b/a", 2), (two, "s3://b/b", 3), (one, "s3://b/a", 3)])
    assert [r.path if r else None for r in rows] == [
        "_versions/2.manifest-g3",
        "_versions/3.manifest-g3",
        None,
    ]


def test_a_cancelled_claim_is_sent_again_under_a_new_token(
    aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group claim cancelled for a transient reason (TransactionConflict) applied
    nothing: it is sent again, under a new ClientRequestToken (DynamoDB may answer a
    reused token with the cancellation it remembers), and lands once."""
    from botocore.exceptions import ClientError

    so = aws.storage_options()
    prefix = f"atomic-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    _create([a, b], so)
    tokens: list[str] = []

    def conflict_once(request: dict[str, Any]) -> None:
        tokens.append(request["ClientRequestToken"])
        if len(tokens) == 1:
            reasons = [{"Code": "TransactionConflict"} for _ in request["TransactItems"]]
            raise ClientError(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "conflict"},
                    "CancellationReasons": reasons,
                },
                "TransactWriteItems",
            )

    before_each_transact_write(monkeypatch, conflict_once)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(60))
        tx.dataset(b).insert(_table(61))
    assert len(tokens) == 2 and tokens[0] != tokens[1]
    assert [s3ddb.dataset(u, storage_options=so).version for u in (a, b)] == [2, 2]
    assert _ids(a, so) == [1, 2, 3, 60]
    assert _ids(b, so) == [61, 101, 102, 103]
