"""DynamoDB rows someone other than s3ddb wrote: a commit time at or past what a
date can hold, and staged rows planted under one group id. Each is a typed error or a
result, in bounded time and requests, never a raw ``ValueError``/``OverflowError``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.errors import StoredMetadataError
from s3ddb.external_store.ddb_items import MAX_COMMITTED_AT
from s3ddb.external_store.manifest_store import MAX_GROUP_ACTIONS
from s3ddb.format import layout
from s3ddb.format.naming import NamingScheme
from s3ddb.io import parse_uri
from tests.conftest import TEST_TABLE


def _ids(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def _three_versions(uri: str, so: dict[str, Any]) -> tuple[s3ddb.Dataset, str]:
    ds = s3ddb.write_dataset(_ids(0, 1, 2), uri, storage_options=so)
    ds.insert(_ids(3))
    ds.insert(_ids(4))
    finalizer.drain()
    return ds, parse_uri(uri).base_uri


def _set_committed_at(aws: Any, base: str, version: int, ms: int) -> None:
    aws.boto3_client("dynamodb").update_item(
        TableName=TEST_TABLE,
        Key={"base_uri": {"S": base}, "version": {"N": str(version)}},
        UpdateExpression="SET committed_at = :t",
        ExpressionAttributeValues={":t": {"N": str(ms)}},
    )


def test_the_latest_commit_time_a_row_may_hold_is_a_date(aws: Any, ddb_uri: str) -> None:
    """The bound is a manifest's own (April 2262): history, time travel and cleanup
    all work with a row at it (the version is kept: its time has not come)."""
    so = aws.storage_options()
    _ds, base = _three_versions(ddb_uri, so)
    _set_committed_at(aws, base, 2, MAX_COMMITTED_AT)
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert ds.versions()[1].timestamp.year == 2262
    assert s3ddb.dataset(ddb_uri, storage_options=so, asof=dt.datetime(2030, 1, 1)).version == 3
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(days=1))
    assert 2 in [k.version for k in stats.versions_kept]
    assert ds.cleanup_old_versions(older_than=dt.timedelta.max).versions_removed == []


def test_a_commit_time_past_the_bound_is_a_typed_error(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    _ds, base = _three_versions(ddb_uri, so)
    _set_committed_at(aws, base, 2, 253_402_300_000_000)  # 9999-12-31: past datetime's room
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    for call in (ds.versions, lambda: ds.cleanup_old_versions(older_than=dt.timedelta(days=1))):
        with pytest.raises(StoredMetadataError, match="committed_at") as raised:
            call()
        assert "version 2" in str(raised.value)


def test_staged_rows_planted_under_one_group_are_walked_back_boundedly(
    aws: Any, ddb_uri: str
) -> None:
    """A reader finishing a staged row of a group first finishes the group's earlier
    versions, walking back row by row. One request claims a group, so it holds at
    most MAX_GROUP_ACTIONS versions: a longer walk stops there with a typed error."""
    so = aws.storage_options()
    _ds, base = _three_versions(ddb_uri, so)
    client = aws.boto3_client("dynamodb")
    row = client.get_item(
        TableName=TEST_TABLE, Key={"base_uri": {"S": base}, "version": {"N": "3"}}
    )["Item"]
    planted = 3 * MAX_GROUP_ACTIONS
    items = []
    for version in range(4, 4 + planted):
        item = dict(row)
        item["version"] = {"N": str(version)}
        item["path"] = {"S": layout.manifest_path(version, NamingScheme.V2) + "-" + "ab" * 16}
        item["group_id"] = {"S": "g"}
        item["group_members"] = {"S": f'[["{base}", {version}, ""]]'}
        items.append({"PutRequest": {"Item": item}})
    for start in range(0, len(items), 25):
        client.batch_write_item(RequestItems={TEST_TABLE: items[start : start + 25]})
    aws.clear_requests()
    with pytest.raises(s3ddb.S3DDBError):
        s3ddb.dataset(ddb_uri, storage_options=so).to_table()
    gets = sum(1 for r in aws.requests if r.operation == "GetItem")
    assert gets <= 3 * MAX_GROUP_ACTIONS, gets  # two walks of at most MAX_GROUP_ACTIONS
