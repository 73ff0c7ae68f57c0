"""A claim whose response was lost, resent, and cancelled on the commit's own rows,
on an endpoint whose cancellations carry no old item (some DynamoDB-compatible
stores; moto with ``condition_items=False``): the claim reads the row back to learn
whose it is, and that read fails. The first attempt may have landed, so the commit
must end committed (its rows read back) or as an unknown outcome with every file
kept; never as a failure that deletes the files of a committed version.

The commits run against the local AWS endpoint over HTTP (moto), with faults
injected into real exchanges; the retry policy's rule itself is checked on
botocore's own exceptions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.external_store.dynamodb import DynamoDBManifestStore
from tests.conftest import TEST_BUCKET, TEST_TABLE

#: Every attempt of one GetItem (the store's retries): the lookup fails for good.
LOOKUP_ATTEMPTS = DynamoDBManifestStore("x").max_retries + 1


def _table(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def _uris(n: int) -> list[str]:
    prefix = f"lost-lookup-{uuid.uuid4().hex[:10]}"
    return [f"s3+ddb://{TEST_BUCKET}/{prefix}/{c}?ddbTableName={TEST_TABLE}" for c in "ab"[:n]]


def _ids(uri: str, so: dict[str, Any]) -> tuple[int, list[int]]:
    ds = s3ddb.dataset(uri, storage_options=so)
    return ds.version, sorted(ds.to_table()["id"].to_pylist())


@pytest.fixture
def no_old_items(aws: Any) -> Iterator[Any]:
    """The endpoint answers failed conditions without the item that failed them."""
    finalizer.drain()  # no background request of an earlier test takes a fault
    aws.condition_items = False
    try:
        yield aws
    finally:
        aws.condition_items = True
        aws.clear_faults()


def _lose_claim_then_fail_lookups(aws: Any) -> tuple[Any, Any]:
    lost = aws.inject_fault("dynamodb", "TransactWriteItems", "apply_then_drop")
    lookups = aws.inject_fault("dynamodb", "GetItem", "throttle", LOOKUP_ATTEMPTS, after=lost)
    return lost, lookups


def test_the_endpoint_can_answer_without_old_items(no_old_items: Any) -> None:
    """The premise of the tests below: moto returns the item unless told not to."""
    client = no_old_items.boto3_client("dynamodb")
    key = {"base_uri": {"S": f"s3://probe/{uuid.uuid4().hex}"}, "version": {"N": "1"}}
    client.put_item(TableName=TEST_TABLE, Item=key)
    request = {
        "TableName": TEST_TABLE,
        "Item": key,
        "ConditionExpression": "attribute_not_exists(base_uri)",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    with pytest.raises(client.exceptions.ConditionalCheckFailedException) as without:
        client.put_item(**request)
    no_old_items.condition_items = True
    with pytest.raises(client.exceptions.ConditionalCheckFailedException) as with_item:
        client.put_item(**request)
    assert "Item" not in without.value.response
    assert with_item.value.response.get("Item") == key


def test_a_group_whose_resend_cannot_look_up_its_own_rows_stays_committed(
    no_old_items: Any,
) -> None:
    """The group's TransactWriteItems applies, its response is lost; the resend is
    cancelled on the group's own rows (moto does not dedupe tokens) without their
    items, and the GetItem that would name the holder is throttled out. That error
    says nothing of the first attempt: the group reads its rows back, finds them,
    and is committed, with every file in place."""
    aws = no_old_items
    so = aws.storage_options()
    a, b = _uris(2)
    s3ddb.write_dataset(_table(1), a, storage_options=so)
    s3ddb.write_dataset(_table(2), b, storage_options=so)
    lost, lookups = _lose_claim_then_fail_lookups(aws)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(10))
        tx.dataset(b).insert(_table(20))
    assert (lost.triggered, lookups.triggered) == (1, LOOKUP_ATTEMPTS)
    finalizer.drain()
    assert _ids(a, so) == (2, [1, 10])
    assert _ids(b, so) == (2, [2, 20])


def test_a_commit_whose_resend_cannot_look_up_its_own_row_stays_committed(
    no_old_items: Any,
) -> None:
    """The same on one dataset: its fenced claim (one TransactWriteItems) applies and
    its response is lost, the resend is cancelled on the commit's own row and the
    lookup of that row is throttled out. The commit reads its row back and is
    committed; its staged manifest and data are not deleted."""
    aws = no_old_items
    so = aws.storage_options()
    (uri,) = _uris(1)
    s3ddb.write_dataset(_table(1), uri, storage_options=so)
    ds = s3ddb.dataset(uri, storage_options=so)
    lost, lookups = _lose_claim_then_fail_lookups(aws)
    ds.insert(_table(2))
    assert (lost.triggered, lookups.triggered) == (1, LOOKUP_ATTEMPTS)
    finalizer.drain()
    assert _ids(uri, so) == (2, [1, 2])


def _cancelled() -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"}},
        "TransactWriteItems",
    )


@pytest.mark.parametrize(
    "second",
    [
        "lookup throttled",  # an ExternalStoreError of interpret
        "lookup broke",  # any other error of interpret
        "send broke",  # an error of send that is not botocore's
    ],
)
@pytest.mark.parametrize("first_maybe_applied", [True, False])
def test_once_an_attempt_may_have_applied_every_later_error_is_an_unknown_outcome(
    second: str, first_maybe_applied: bool
) -> None:
    """The retry policy of every claim (one version's or a group's), on botocore's
    own exceptions: after an attempt that may have applied, a later error of any
    type becomes ``unknown``; before any, it is reported as it is (nothing applied)."""
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

    from s3ddb.errors import ExternalStoreThrottledError
    from s3ddb.external_store.manifest_store import ExternalStoreOutcomeUnknownError

    store = DynamoDBManifestStore("t", sleep=lambda _seconds: None)
    first: Exception = (
        ConnectionClosedError(endpoint_url="http://127.0.0.1:1")  # the response was lost
        if first_maybe_applied
        else EndpointConnectionError(endpoint_url="http://127.0.0.1:1")  # never sent
    )
    errors = {
        "lookup throttled": ExternalStoreThrottledError("GetItem throttled"),
        "lookup broke": KeyError("Item"),
        "send broke": RuntimeError("send broke"),
    }
    attempts = iter([first, errors[second] if second == "send broke" else _cancelled()])

    def send() -> None:
        raise next(attempts)

    def interpret(exc: BaseException, failure: Any) -> Any:
        if exc is first:
            return failure
        raise errors[second]

    def unknown(attempts: int, last: BaseException) -> Exception:
        return ExternalStoreOutcomeUnknownError(f"unknown after {attempts}: {last!r}")

    expected = ExternalStoreOutcomeUnknownError if first_maybe_applied else type(errors[second])
    with pytest.raises(expected) as raised:
        store.claim_retrying("TransactWriteItems", send, interpret, unknown)
    assert raised.type is expected


@pytest.mark.parametrize("first_maybe_applied", [True, False])
def test_a_refusal_read_from_the_rows_decides_a_claim_after_a_lost_response(
    first_maybe_applied: bool,
) -> None:
    """A refusal (the version read back is another commit's) is a decided outcome
    whether or not an earlier attempt may have applied: it is raised as it is."""
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

    from s3ddb.external_store.manifest_store import (
        ExternalStoreOutcomeUnknownError,
        VersionTakenError,
    )

    store = DynamoDBManifestStore("t", sleep=lambda _seconds: None)
    first: Exception = (
        ConnectionClosedError(endpoint_url="http://127.0.0.1:1")
        if first_maybe_applied
        else EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    )
    attempts = iter([first, _cancelled()])

    def send() -> None:
        raise next(attempts)

    def interpret(exc: BaseException, failure: Any) -> Any:
        if exc is first:
            return failure
        raise VersionTakenError("version 2 of s3://b/d is already taken by another commit")

    with pytest.raises(VersionTakenError):
        store.claim_retrying(
            "TransactWriteItems",
            send,
            interpret,
            lambda n, last: ExternalStoreOutcomeUnknownError(f"unknown after {n}"),
        )


def test_a_commit_whose_credentials_expire_after_its_lost_claim_keeps_its_files(
    aws: Any,
) -> None:
    """The fenced claim applies and its response is lost; from then on DynamoDB
    refuses the writer's credentials as expired (a session token running out
    mid-commit), so neither the resend nor the read-back can tell. The outcome is
    unknown, and every file stays: the row points at the staged manifest, which a
    reader with fresh credentials finishes. (A CredentialsError used to pass for a
    definite failure: the staged manifest and the transaction file were deleted,
    and the dataset could no longer be opened.)"""
    so = aws.storage_options()
    (uri,) = _uris(1)
    s3ddb.write_dataset(_table(1), uri, storage_options=so)
    ds = s3ddb.dataset(uri, storage_options=so)
    finalizer.drain()
    try:
        lost = aws.inject_fault("dynamodb", "TransactWriteItems", "apply_then_drop")
        expired = aws.inject_fault("dynamodb", "*", "expired_token", 50, after=lost)
        with pytest.raises(s3ddb.CommitStateUnknownError):
            ds.insert(_table(2))
        assert lost.triggered == 1 and expired.triggered >= 2  # the resend and a read
    finally:
        aws.clear_faults()
    finalizer.drain()
    assert _ids(uri, so) == (2, [1, 2])
