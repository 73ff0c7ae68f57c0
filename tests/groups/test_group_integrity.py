"""Data-integrity corners of group commits (``s3ddb.atomic``) found in review: a
resend after a lost response that is refused before DynamoDB processes it, and
group attributes of DynamoDB rows treated as untrusted input. Each runs against the
local AWS endpoint over HTTP (moto), with faults injected into real exchanges.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import CommitStateUnknownError, StoredMetadataError
from s3ddb.external_store.manifest_store import parse_members
from tests.conftest import TEST_BUCKET, TEST_TABLE


def _table(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def _pair(aws: Any) -> tuple[str, str, dict[str, Any]]:
    so = aws.storage_options()
    prefix = f"atomic-review-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    s3ddb.write_dataset(_table(1), a, storage_options=so)
    s3ddb.write_dataset(_table(2), b, storage_options=so)
    return a, b, so


def _files(uri: str, so: dict[str, Any]) -> set[str]:
    ds = s3ddb.dataset(uri, storage_options=so)
    return {m.path for m in ds.handler.store.list("")}


def test_a_resend_refused_after_a_lost_response_keeps_the_files(aws: Any) -> None:
    """The claim's responses are lost (the request may still be in flight), the read
    back finds no row yet, and the resend with the same token is throttled until the
    retries run out. The first request may still apply: the outcome is unknown, so
    the writer must say so and keep every file, never delete the staged manifests."""
    from s3ddb.external_store.dynamodb import DynamoDBManifestStore

    a, b, so = _pair(aws)
    before = _files(a, so)
    sends = DynamoDBManifestStore("x").max_retries + 1
    lost = aws.inject_fault("dynamodb", "TransactWriteItems", "drop", times=sends)
    refused = aws.inject_fault("dynamodb", "TransactWriteItems", "throttle", times=10 * sends)
    try:
        with (
            pytest.raises(CommitStateUnknownError),
            s3ddb.atomic(storage_options=so) as tx,
        ):
            tx.dataset(a).insert(_table(10))
            tx.dataset(b).insert(_table(20))
    finally:
        aws.clear_faults()
    assert lost.triggered == sends and refused.triggered >= 1
    after = _files(a, so)
    staged = [p for p in after - before if p.startswith("_versions/")]
    assert staged, "the staged manifest of a group whose outcome is unknown was deleted"
    assert any(p.startswith("data/") for p in after - before)
    # Nothing applied in fact: both datasets are where they were.
    assert [s3ddb.dataset(u, storage_options=so).version for u in (a, b)] == [1, 1]


@pytest.mark.parametrize(
    "members",
    [
        '[["s3://b/a", 1, "../../etc"]]',  # not a DynamoDB table name
        '[["s3://b/a", 0, "t_1"]]',  # versions start at 1
        '[["no-scheme", 1, "t_1"]]',
        '[["' + "x" * 5000 + '", 1, "t_1"]]',  # a base URI no dataset has
        '[["s3://b/a\\u0000", 1, "t_1"]]',  # control characters
        '[["s3://b/a", 18446744073709551617, "t_1"]]',  # beyond any version
    ],
)
def test_group_members_read_from_a_row_are_checked(members: str) -> None:
    with pytest.raises(StoredMetadataError, match="row of version 3"):
        parse_members("g", members, "row of version 3")


def test_well_formed_group_members_are_read() -> None:
    text = '[["s3://bucket/a/b", 2, "s3ddb_manifests"], ["s3://bucket/c", 7, "t.x-1"]]'
    assert parse_members("g", text, "row") == [
        ("s3://bucket/a/b", 2, "s3ddb_manifests"),
        ("s3://bucket/c", 7, "t.x-1"),
    ]


def test_verify_reports_a_planted_member_table_instead_of_failing(aws: Any) -> None:
    """A row whose group names a table no dataset can use is a problem verify
    reports, not a request it sends to DynamoDB (which would fail verify)."""
    from s3ddb.external_store.ddb_items import item_key
    from s3ddb.io.uri import parse_uri
    from s3ddb.maintenance.verify import verify

    a, b, so = _pair(aws)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(3))
        tx.dataset(b).insert(_table(4))
    base_a = parse_uri(a).base_uri
    aws.boto3_client("dynamodb").update_item(
        TableName=TEST_TABLE,
        Key=item_key(base_a, 2),
        UpdateExpression="SET group_members = :m",
        ExpressionAttributeValues={":m": {"S": f'[["{base_a}", 2, "no/such table"]]'}},
    )
    report = verify(a, so, grace_seconds=0)
    kinds = [p.kind for p in report.problems]
    assert "malformed_group" in kinds, report.problems


@pytest.mark.parametrize("attempts", [0, -1, 1.5, True, "3"])
def test_a_snapshot_needs_a_positive_number_of_attempts(attempts: Any) -> None:
    from s3ddb.errors import InvalidInputError

    uri = f"memory://snap-{uuid.uuid4().hex}/a"
    s3ddb.write_dataset(_table(1), uri)
    with pytest.raises(InvalidInputError, match="max_attempts"):
        s3ddb.snapshot([uri], max_attempts=attempts)
    assert s3ddb.snapshot([uri], max_attempts=1)[uri].version == 1


def test_a_handle_of_another_group_cannot_join() -> None:
    """A handle of an open group is pinned at a version that group only planned;
    another group building on it could claim the next version on top of a manifest
    that never committed (or committed rebased)."""
    from s3ddb.errors import AtomicGroupError

    root = f"memory://join-{uuid.uuid4().hex}"
    a, b = f"{root}/a", f"{root}/b"
    s3ddb.write_dataset(_table(1), a)
    s3ddb.write_dataset(_table(2), b)
    with s3ddb.atomic() as first:
        held = first.dataset(a)
        held.insert(_table(3))  # planned as version 2, not committed
        with s3ddb.atomic() as second:
            with pytest.raises(AtomicGroupError, match=f"group {first.group_id}"):
                second.join(held)
            with pytest.raises(AtomicGroupError, match=f"group {first.group_id}"):
                second.join(held.checkout_version(1))
            second.dataset(b).insert(_table(4))
    assert [s3ddb.dataset(u).version for u in (a, b)] == [2, 2]


def test_a_failed_copy_of_a_groups_version_leaves_no_gap_for_readers_without_dynamodb(
    aws: Any,
) -> None:
    """A group made versions 2 and 3 of one dataset. Finishing version 2 fails in the
    background (its copy to the final name keeps failing); version 3 must not become
    final before it: a reader that lists ``_versions/`` would see 1 and 3, not a
    prefix of history. Readers through DynamoDB finish both later."""
    from s3ddb.commit import finalizer
    from s3ddb.format.naming import parse_manifest_name

    a, b, so = _pair(aws)
    finalizer.drain()
    attempts = 3  # botocore's tries of one CopyObject on HTTP 500
    failing = aws.inject_fault("s3", "CopyObject", "server_error", times=attempts)
    try:
        with s3ddb.atomic(storage_options=so) as tx:
            tx.dataset(a).insert(_table(10))
            tx.dataset(a).insert(_table(11))
            tx.dataset(b).insert(_table(20))
        finalizer.drain()
    finally:
        aws.clear_faults()
    assert failing.triggered == attempts

    def final_versions() -> list[int]:
        store = s3ddb.dataset(a, storage_options=so).handler.store
        names = [m.path.split("/", 1)[1] for m in store.list("_versions/")]
        return sorted(p[0] for p in map(parse_manifest_name, names) if p is not None)

    finals = final_versions()
    assert finals in ([1], [1, 2], [1, 2, 3]), f"not a prefix of history: {finals}"
    # A reader without DynamoDB (s3://) reads the newest final version, whole.
    plain = s3ddb.dataset(a.split("?")[0].replace("s3+ddb://", "s3://"), storage_options=so)
    assert plain.version == finals[-1]
    expected = {1: [1], 2: [1, 10], 3: [1, 10, 11]}[plain.version]
    assert sorted(plain.to_table()["id"].to_pylist()) == expected
    # A reader through DynamoDB sees the whole group, and leaves it finished.
    assert sorted(s3ddb.dataset(a, storage_options=so).to_table()["id"].to_pylist()) == [1, 10, 11]
    finalizer.drain()
    assert final_versions() == [1, 2, 3]
