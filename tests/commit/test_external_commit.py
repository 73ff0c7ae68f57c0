"""s3+ddb:// datasets on the local AWS endpoint (S3 without conditional writes):
the four-step protocol end to end, crashes at every step, repair, and bad set-ups."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from typing import Any

import pytest

import s3ddb
import s3ddb.versions.pinned
from s3ddb.commit import finalizer
from s3ddb.commit.external_versions import OWN_COMMITS
from s3ddb.commit.failpoints import EXIT_CODE
from s3ddb.errors import (
    CommitMechanismError,
    CredentialsError,
    ExternalStoreTableError,
    ExternalStoreThrottledError,
    ManifestFinalizationError,
)
from s3ddb.external_store.manifest_store import ManifestRow
from s3ddb.io import ObjectStore, parse_uri
from s3ddb.versions.connect import external_store_for
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.endpoints import endpoint
from tests.support.proc import run_workers
from tests.support.python_children import run_python
from tests.support.storage import orphans
from tests.support.workers import rows_for


@pytest.fixture(params=["moto", "dynalite", "s3rver"])
def aws(request: pytest.FixtureRequest) -> Any:
    """Every test here runs against moto (S3 and DynamoDB on one endpoint), against
    moto's S3 with dynalite's DynamoDB, and against s3rver's S3 with moto's DynamoDB on
    another endpoint (second, independent implementations of each service); those
    marked ``also_seaweedfs`` against SeaweedFS's S3 with moto's DynamoDB too."""
    return endpoint(request, request.param)


#: A representative subset runs on SeaweedFS too (a real S3-compatible store; all of
#: it would cost the suite minutes): the protocol end to end, crashes at every step, a
#: plain writer refused, a stale guess; and many writers (below).
also_seaweedfs = pytest.mark.parametrize(
    "aws", ["moto", "dynalite", "s3rver", "seaweedfs"], indirect=True
)


def _rows(aws: Any, uri: str) -> list[ManifestRow]:
    """The dataset's rows once this process's background finalization has settled."""
    finalizer.drain()
    parsed = parse_uri(uri)
    store = external_store_for(parsed, ObjectStore(parsed, aws.storage_options()))
    return list(store.list_versions(parsed.base_uri))


def _plain(uri: str) -> str:
    """The same dataset as an s3:// URI: a reader that knows nothing of DynamoDB."""
    return parse_uri(uri).object_url


def _prefix(uri: str) -> str:
    return parse_uri(uri).path.split("/", 1)[1]


def _keys(aws: Any, prefix: str) -> list[str]:
    finalizer.drain()
    s3 = aws.boto3_client("s3")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=TEST_BUCKET, Prefix=prefix + "/")
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


@also_seaweedfs
def test_create_append_read_and_history(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, storage_options=so)
    ds = s3ddb.write_dataset(rows_for(0, 1, 2), ddb_uri, mode="append", storage_options=so)
    assert ds.version == 2 and ds.count_rows() == 4
    assert [(v.version, v.operation) for v in ds.versions()] == [(1, "Overwrite"), (2, "Append")]
    rows = _rows(aws, ddb_uri)
    assert [r.version for r in rows] == [1, 2] and not any(r.is_staged for r in rows)
    assert rows[0].base_uri == "s3://" + ddb_uri.split("://")[1].split("?")[0]
    assert all(r.committer.startswith("s3ddb/") and r.committed_at > 0 and r.size > 0 for r in rows)
    assert s3ddb.dataset(ddb_uri, version=1, storage_options=so).count_rows() == 2
    assert s3ddb.dataset(_plain(ddb_uri), storage_options=so).version == 2


@also_seaweedfs
def test_configuration_from_the_environment(
    aws: Any, ddb_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in aws.env().items():
        monkeypatch.setenv(key, value)
    ds = s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri)
    assert ds.version == 1
    assert s3ddb.dataset(ddb_uri).count_rows() == 1


@pytest.mark.parametrize("aws", ["seaweedfs"], indirect=True)
def test_clients_follow_credentials_changed_in_the_environment(
    aws: Any, ddb_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process keeps one client per settings; credentials boto3's chain finds in
    the environment are part of them, so a client built under a wrong secret is not
    reused once the environment holds the right one (SeaweedFS checks signatures;
    before, the first client stayed and every later request failed)."""
    for key, value in aws.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(s3ddb.errors.CredentialsError):
        s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", aws.env()["AWS_SECRET_ACCESS_KEY"])
    assert s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri).version == 1
    assert s3ddb.dataset(ddb_uri).count_rows() == 1


@pytest.fixture
def batching_finalizer(monkeypatch: pytest.MonkeyPatch) -> finalizer.BackgroundFinalizer:
    """A process finalizer that sends deferred deletes only when drained, so that
    request counts do not depend on timing."""
    finalizer.drain()
    private = finalizer.BackgroundFinalizer(idle_flush=3600)
    monkeypatch.setattr(finalizer, "process_finalizer", lambda: private)
    yield private  # type: ignore[misc]
    private.drain()


# What one append costs: the caller waits for three uploads sent side by side and the
# deciding write (a process that committed the newest version builds on it without a
# Query); copy and repoint run on the background finalizer, and staged manifests are
# deleted in batches. A change that adds a round trip fails.
def claim_op(aws: Any) -> str:
    """The request that claims a version: a fenced TransactWriteItems (a ConditionCheck
    of the predecessor and the conditional Put), or a PutItem where the DynamoDB
    implementation has no transactions (dynalite)."""
    return "TransactWriteItems" if getattr(aws, "transactions", True) else "PutItem"


def caller_path(aws: Any) -> dict[tuple[str, str], int]:
    return {
        ("s3", "PutObject"): 3,  # data file, transaction, staged manifest, in parallel
        ("dynamodb", claim_op(aws)): 1,  # step 2: the decision
    }


BACKGROUND = {
    ("s3", "CopyObject"): 1,  # step 3 (verified by ETag, no HEAD)
    ("dynamodb", "UpdateItem"): 1,  # step 4: repoint
}


def test_sequential_appends_cost_fixed_requests(
    aws: Any, ddb_uri: str, batching_finalizer: finalizer.BackgroundFinalizer
) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    batching_finalizer.drain()
    aws.clear_requests()
    appends = 5
    for i in range(1, appends + 1):
        s3ddb.write_dataset(rows_for(0, i, 1), ddb_uri, mode="append", storage_options=so)
    batching_finalizer.drain()
    ops = Counter((r.service, r.operation) for r in aws.requests)
    expected = Counter({k: v * appends for k, v in {**caller_path(aws), **BACKGROUND}.items()})
    expected[("s3", "DeleteObjects")] = 1  # the five staged manifests, in one batch
    assert ops == expected, ops
    assert sum(ops.values()) / appends <= 6.2
    assert not any(r.is_staged for r in _rows(aws, ddb_uri))
    assert not [k for k in _keys(aws, _prefix(ddb_uri)) if ".manifest-" in k]


def test_creating_a_dataset_costs_fixed_requests(
    aws: Any, ddb_uri: str, batching_finalizer: finalizer.BackgroundFinalizer
) -> None:
    """The first write asks DynamoDB for the newest row, lists ``_versions/`` once (a
    dataset written before its table was used has manifests there, no rows), then
    commits as an append does."""
    so = aws.storage_options()
    aws.clear_requests()
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    batching_finalizer.drain()
    ops = Counter((r.service, r.operation) for r in aws.requests)
    ops.pop(("dynamodb", "DescribeTable"), None)  # once per process and table
    claim = ("dynamodb", "PutItem")  # version 1 has no predecessor to fence
    expected = Counter(
        {
            ("dynamodb", "Query"): 1,
            ("s3", "ListObjectsV2"): 1,
            ("s3", "PutObject"): 3,
            claim: 1,
            **BACKGROUND,
            ("s3", "DeleteObject"): 1,  # the staged manifest (a batch of one)
        }
    )
    assert ops == expected, ops


def test_one_lost_round_costs_fixed_requests(
    aws: Any,
    ddb_uri: str,
    batching_finalizer: finalizer.BackgroundFinalizer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stale handle must stay "fresh" however long the child takes on a loaded
    # machine: an older base is caught up before the claim, and no round is lost.
    monkeypatch.setattr(s3ddb.versions.pinned, "FRESH_BASE_SECONDS", 3600.0)
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    stale = s3ddb.dataset(ddb_uri, storage_options=so)  # pinned at version 1
    [other] = run_workers([("append", ddb_uri, "1", "1", "1")], env=aws.env())
    assert other.returncode == 0, other.stderr[-2000:]
    batching_finalizer.drain()
    aws.clear_requests()
    stale.insert(rows_for(0, 1, 1))
    batching_finalizer.drain()
    assert stale.version == 3 and stale.last_commit is not None
    assert stale.last_commit.attempts == 2
    ops = Counter((r.service, r.operation) for r in aws.requests)
    # The first attempt as above (its data and transaction files are reused), then one
    # lost round: the failed PutItem, a Query of what landed, the winner's manifest,
    # and the next staged manifest. The winner's row is final, so no HEAD.
    assert ops == Counter(
        {
            ("s3", "PutObject"): 3 + 1,
            ("dynamodb", claim_op(aws)): 1 + 1,
            ("dynamodb", "Query"): 1,
            ("s3", "GetObject"): 1,
            **BACKGROUND,
            ("s3", "DeleteObjects"): 1,  # the lost and the final staged manifest
        }
    ), ops
    assert sorted(stale.to_table(columns=["id"]).column("id").to_pylist()) == [
        0,
        1000,
        1_000_000,
    ]


@also_seaweedfs
def test_two_buckets_with_the_same_prefix_never_collide(aws: Any) -> None:
    so = aws.storage_options()
    other = aws.create_bucket(f"s3ddb-other-{uuid.uuid4().hex[:8]}")
    prefix = f"same/{uuid.uuid4().hex[:8]}"
    a = f"s3+ddb://{TEST_BUCKET}/{prefix}?ddbTableName={TEST_TABLE}"
    b = f"s3+ddb://{other}/{prefix}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(rows_for(1, 0, 1), a, storage_options=so)
    s3ddb.write_dataset(rows_for(1, 1, 1), a, mode="append", storage_options=so)
    s3ddb.write_dataset(rows_for(2, 0, 3), b, storage_options=so)
    assert s3ddb.dataset(a, storage_options=so).version == 2
    dsb = s3ddb.dataset(b, storage_options=so)
    assert dsb.version == 1 and dsb.count_rows() == 3
    assert {r.base_uri for r in _rows(aws, b)} == {f"s3://{other}/{prefix}"}


def test_missing_table_fails_before_writing(aws: Any) -> None:
    so = aws.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/no-table?ddbTableName=does_not_exist"
    with pytest.raises(ExternalStoreTableError) as info:
        s3ddb.write_dataset(rows_for(0, 0, 1), uri, storage_options=so)
    message = str(info.value)
    assert "does_not_exist" in message and "base_uri" in message and "version" in message
    assert "create-table" in message
    assert _keys(aws, "no-table") == []


def test_wrong_key_schema_is_refused(aws: Any) -> None:
    so = aws.storage_options()
    table = f"wrong_schema_{uuid.uuid4().hex[:8]}"
    aws.boto3_client("dynamodb").create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    uri = f"s3+ddb://{TEST_BUCKET}/wrong?ddbTableName={table}"
    with pytest.raises(ExternalStoreTableError, match="base_uri"):
        s3ddb.write_dataset(rows_for(0, 0, 1), uri, storage_options=so)
    assert _keys(aws, "wrong") == []


def test_missing_credentials_say_so(
    aws: Any, ddb_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    uri = ddb_uri.replace("?", "-nocreds?")
    with pytest.raises(CredentialsError, match="credentials"):
        s3ddb.write_dataset(
            rows_for(0, 0, 1), uri, storage_options={"endpoint_url": aws.endpoint_url}
        )


def test_throttled_putitem_is_retried(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    aws.inject_fault("dynamodb", claim_op(aws), "throttle", times=2)
    ds = s3ddb.write_dataset(rows_for(0, 1, 1), ddb_uri, mode="append", storage_options=so)
    assert ds.version == 2 and ds.count_rows() == 2


def test_throttling_that_never_ends_is_a_typed_error_and_commits_nothing(
    aws: Any, ddb_uri: str
) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    prefix = ddb_uri.split("/", 3)[3].split("?")[0]
    before = set(_keys(aws, prefix))
    aws.inject_fault("dynamodb", claim_op(aws), "provisioned_throughput", times=1000)
    try:
        with pytest.raises(ExternalStoreThrottledError, match=claim_op(aws)):
            s3ddb.write_dataset(rows_for(0, 1, 1), ddb_uri, mode="append", storage_options=so)
    finally:
        aws.clear_faults()
    assert set(_keys(aws, prefix)) == before, "a definitely failed commit leaves no files"
    assert s3ddb.dataset(ddb_uri, storage_options=so).version == 1


@pytest.mark.parametrize("kind", ["apply_then_server_error", "apply_then_drop"])
def test_lost_putitem_response(aws: Any, ddb_uri: str, kind: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    aws.inject_fault("dynamodb", claim_op(aws), kind, times=1)
    ds = s3ddb.write_dataset(rows_for(0, 1, 1), ddb_uri, mode="append", storage_options=so)
    assert ds.version == 2
    latest = s3ddb.dataset(ddb_uri, storage_options=so)
    assert latest.version == 2, "the applied put is recognised as ours, not committed twice"
    assert sorted(latest.to_table(columns=["id"]).column("id").to_pylist()) == [0, 1000]


@also_seaweedfs
def test_plain_dataset_moves_to_dynamodb_only_explicitly(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    plain = _plain(ddb_uri)
    # One writer at a time: trusted even where the store ignores If-None-Match.
    trusted = {**so, "s3_conditional_writes": "trusted"}
    s3ddb.write_dataset(rows_for(0, 0, 1), plain, storage_options=trusted)
    s3ddb.write_dataset(rows_for(0, 1, 1), plain, mode="append", storage_options=trusted)
    ds = s3ddb.dataset(ddb_uri, storage_options=so)  # no rows yet: falls back to _versions/
    assert ds.version == 2
    # The dataset commits by conditional put: a DynamoDB writer refuses, naming the URI.
    with pytest.raises(CommitMechanismError, match=re.escape(plain)):
        ds.insert(rows_for(0, 2, 1))
    assert not _rows(aws, ddb_uri)
    moved = s3ddb.migrate_commits(ddb_uri, storage_options=so)
    assert moved.version == 3 and moved.count_rows() == 2
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    ds.insert(rows_for(0, 2, 1))
    assert ds.version == 4
    # ...and now the plain writer refuses, naming the s3+ddb:// URI.
    with pytest.raises(CommitMechanismError, match="ddbTableName="):
        s3ddb.write_dataset(rows_for(0, 3, 1), plain, mode="append", storage_options=so)
    assert s3ddb.dataset(plain, storage_options=so).count_rows() == 3
    assert [r.version for r in _rows(aws, ddb_uri)] == [3, 4]
    assert [v.version for v in s3ddb.dataset(ddb_uri, storage_options=so).versions()] == [
        1, 2, 3, 4
    ]  # fmt: skip


# --- crashes at every protocol step (real child processes, os._exit) -----------------

BEFORE_DECISION = ["commit.after_transaction_file", "commit.after_stage_manifest"]
AFTER_DECISION = [
    "commit.after_external_put",
    "commit.after_copy_final",
    "commit.after_external_finalize",
]


def _copy_prefix(aws: Any, src: str, dst: str) -> None:
    s3 = aws.boto3_client("s3")
    for key in _keys(aws, src):
        s3.copy_object(
            Bucket=TEST_BUCKET,
            Key=dst + key[len(src) :],
            CopySource={"Bucket": TEST_BUCKET, "Key": key},
        )


@pytest.mark.slow
@also_seaweedfs
@pytest.mark.parametrize("point", BEFORE_DECISION + AFTER_DECISION)
def test_crash_at_each_step(aws: Any, ddb_uri: str, point: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, storage_options=so)
    [crashed] = run_workers(
        [("append", ddb_uri, "1", "1", "2")], env={**aws.env(), "S3DDB_FAILPOINTS": f"{point}=exit"}
    )
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-2000:]
    decided = point in AFTER_DECISION

    # A reader that knows nothing of DynamoDB sees a prefix of history, at most one behind.
    plain_version = s3ddb.dataset(_plain(ddb_uri), storage_options=so).version
    assert plain_version in ((1, 2) if decided else (1,))

    # The next reader sees the decided version and finalizes it.
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert ds.version == (2 if decided else 1)
    rows = _rows(aws, ddb_uri)
    assert [r.version for r in rows] == ([1, 2] if decided else [1])
    assert not any(r.is_staged for r in rows)
    assert s3ddb.dataset(_plain(ddb_uri), storage_options=so).version == ds.version

    # The next writer is not blocked.
    after = s3ddb.write_dataset(rows_for(2, 0, 2), ddb_uri, mode="append", storage_options=so)
    assert after.version == ds.version + 1
    ids = Counter(after.to_table(columns=["id"]).column("id").to_pylist())
    assert all(c == 1 for c in ids.values())
    assert (1_000_000 in ids) == decided

    # The dataset's objects copied elsewhere read without DynamoDB.
    prefix = parse_uri(ddb_uri).path.split("/", 1)[1]
    _copy_prefix(aws, prefix, prefix + "-copy")
    copy = s3ddb.dataset(f"s3://{TEST_BUCKET}/{prefix}-copy", storage_options=so)
    assert copy.version == after.version
    assert copy.to_table().sort_by("id").equals(after.to_table().sort_by("id"))


@pytest.mark.slow
@also_seaweedfs
def test_missing_staged_manifest_refuses_to_load(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    [crashed] = run_workers(
        [("append", ddb_uri, "1", "1", "1")],
        env={**aws.env(), "S3DDB_FAILPOINTS": "commit.after_external_put=exit"},
    )
    assert crashed.returncode == EXIT_CODE
    [row] = [r for r in _rows(aws, ddb_uri) if r.version == 2]
    assert row.is_staged
    prefix = parse_uri(ddb_uri).path.split("/", 1)[1]
    aws.boto3_client("s3").delete_object(Bucket=TEST_BUCKET, Key=f"{prefix}/{row.path}")
    with pytest.raises(ManifestFinalizationError) as info:
        s3ddb.dataset(ddb_uri, storage_options=so)
    assert "version 2" in str(info.value) and row.path in str(info.value)
    [still] = [r for r in _rows(aws, ddb_uri) if r.version == 2]
    assert still.path == row.path, "nothing is marked complete"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("aws", "writers"),
    # Sixteen on moto; eight on dynalite and s3rver (the same races, at half the
    # suite's time); six on SeaweedFS: 16 writer processes and a whole S3 store
    # (master, volume server, filer, gateway) crowd a small machine's cores for over
    # a minute.
    [("moto", 10), ("dynalite", 6), ("s3rver", 6), ("seaweedfs", 6)],
    indirect=["aws"],
)
def test_writers_x_10_appends(aws: Any, ddb_uri: str, writers: int) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(999, 0, 1), ddb_uri, storage_options=so)
    results = run_workers(
        [("append", ddb_uri, str(w), "10", "2") for w in range(writers)],
        env=aws.env(),
        timeout=500,
    )
    failures = [r.stderr[-2000:] for r in results if r.returncode != 0]
    assert not failures, failures[0]
    commits = writers * 10
    assert sum(r.stdout.count("ok ") for r in results) == commits
    attempts = sorted(int(line.split()[4]) for r in results for line in r.stdout.splitlines())
    print(
        "commit attempts: median",
        attempts[commits // 2],
        "p95",
        attempts[commits * 95 // 100],
        "max",
        attempts[-1],
    )
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert ds.version == commits + 1
    assert [v.version for v in ds.versions()] == list(range(1, commits + 2))
    ids = Counter(ds.to_table(columns=["id"]).column("id").to_pylist())
    assert all(c == 1 for c in ids.values())
    assert len(ids) == 1 + commits * 2
    rows = _rows(aws, ddb_uri)
    assert [r.version for r in rows] == list(range(1, commits + 2))
    assert not any(r.is_staged for r in rows), "every row is finalized"
    assert len({r.path for r in rows}) == commits + 1


def _other_process(aws: Any, code: str) -> None:
    """Run ``code`` (with ``s3ddb``, ``pa`` and ``rows_for`` imported) in a child."""
    prelude = "import s3ddb, pyarrow as pa\nfrom tests.support.workers import rows_for\n"
    done = run_python(["-c", prelude + code], env=aws.env(inherit=True), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_writer_that_was_alone_builds_on_its_own_commit_and_recovers_when_not(
    aws: Any,
    ddb_uri: str,
    batching_finalizer: finalizer.BackgroundFinalizer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # However slowly the other process starts, this one still remembers it lost.
    monkeypatch.setattr(OWN_COMMITS, "QUIET_SECONDS", 3600.0)
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 1), ddb_uri, storage_options=so)
    # Another process appends: this one's guess (build on version 1) loses, once.
    _other_process(aws, f"s3ddb.write_dataset(rows_for(1, 0, 1), {ddb_uri!r}, mode='append')")
    batching_finalizer.drain()
    aws.clear_requests()
    ds = s3ddb.write_dataset(rows_for(0, 1, 1), ddb_uri, mode="append", storage_options=so)
    assert ds.version == 3 and ds.last_commit is not None and ds.last_commit.attempts == 2
    assert Counter(r.operation for r in aws.requests)[claim_op(aws)] == 2
    # Having lost, it asks first for a while: no lost round the next time.
    _other_process(aws, f"s3ddb.write_dataset(rows_for(1, 1, 1), {ddb_uri!r}, mode='append')")
    aws.clear_requests()
    ds = s3ddb.write_dataset(rows_for(0, 2, 1), ddb_uri, mode="append", storage_options=so)
    assert ds.version == 5 and ds.last_commit is not None and ds.last_commit.attempts == 1
    ops = Counter(r.operation for r in aws.requests)
    assert ops["Query"] == 1 and ops[claim_op(aws)] == 1, ops
    ids = sorted(ds.to_table(columns=["id"]).column("id").to_pylist())
    assert ids == [0, 1000, 2000, 1_000_000, 1_001_000]


@also_seaweedfs
def test_a_stale_guess_is_planned_again_on_the_newest_version(
    aws: Any, ddb_uri: str, batching_finalizer: finalizer.BackgroundFinalizer
) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, storage_options=so)
    # Another process overwrites: an append cannot rebase over that, so this process
    # appends to the new data, exactly as if it had asked for the newest version first.
    _other_process(aws, f"s3ddb.write_dataset(rows_for(7, 0, 3), {ddb_uri!r}, mode='overwrite')")
    ds = s3ddb.write_dataset(rows_for(0, 1, 1), ddb_uri, mode="append", storage_options=so)
    assert ds.version == 3
    ids = sorted(ds.to_table(columns=["id"]).column("id").to_pylist())
    assert ids == [1000, 7_000_000, 7_000_001, 7_000_002]
    assert orphans(ddb_uri, so) == set(), "the stale attempt's files are deleted"
