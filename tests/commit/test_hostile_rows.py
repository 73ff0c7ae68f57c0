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
from tests.support.storage import staged_second_version


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


# --- finishing a version: only from what its row committed ----------------------------------


def test_sync_never_puts_back_a_staged_manifest_its_row_did_not_claim(
    aws: Any, ddb_uri: str
) -> None:
    """The final manifest of version 2 is lost; a staged manifest of version 2 of the
    row's size is there, but not the one the row's claim recorded (a writer's that
    lost, or one planted). sync reports the version lost, and copies nothing."""
    from s3ddb.external_store.identity import CLAIM_ATTRIBUTE
    from s3ddb.io import ObjectStore
    from s3ddb.maintenance.repair import sync

    so = aws.storage_options()
    _ds, base = _three_versions(ddb_uri, so)
    store = ObjectStore(ddb_uri, so)
    row = s3ddb.dataset(ddb_uri, storage_options=so).handler.external.get(base, 2)
    assert row is not None and row.extra.get(CLAIM_ATTRIBUTE)
    store.put(f"{row.path}-{'ab' * 16}", b"\0" * row.size)
    store.delete(row.path)
    report = sync(ddb_uri, so, grace_seconds=3600)
    assert report.restored == [] and report.failed, report
    assert "version 2" in report.failed[0]
    assert row.path not in {m.path for m in store.iter_list("_versions/")}


def test_a_staged_row_is_finished_from_its_own_manifest_not_an_object_at_the_final_name(
    aws: Any, ddb_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 2's writer died after its claim; an object of the row's size sits at
    the final name. The next writer finishes version 2 before claiming 3: from the
    staged manifest the row committed (verified, copied over that name), never by
    repointing the row to whatever is there."""
    from s3ddb.commit import external_versions
    from s3ddb.external_store.identity import final_path_of
    from s3ddb.io import ObjectStore

    so = aws.storage_options()
    row = staged_second_version(aws, ddb_uri, _ids(1, 2, 3))
    store = ObjectStore(ddb_uri, so)
    staged = store.get(row.path)
    store.put(final_path_of(row.path), b"\0" * row.size)
    monkeypatch.setattr(external_versions, "_ABANDONED_AFTER_MS", 0)
    s3ddb.write_dataset(_ids(888), ddb_uri, mode="append", storage_options=so)
    finalizer.drain()
    assert store.get(final_path_of(row.path)) == staged
    version_2 = s3ddb.dataset(ddb_uri, 2, storage_options=so).to_table()
    assert sorted(version_2["id"].to_pylist()) == [1, 2, 3, 777]


@pytest.mark.parametrize("verb", ["sync", "cleanup"])
def test_maintenance_through_another_table_is_refused(aws: Any, ddb_uri: str, verb: str) -> None:
    """Through a URI naming another DynamoDB table (no row of the dataset), the
    staged manifest of a version committed through the dataset's own table would
    look unreferenced and go: refused, as writers are, and nothing deleted."""
    import datetime as dt
    import uuid

    from s3ddb.errors import CommitMechanismError
    from s3ddb.io import ObjectStore
    from s3ddb.maintenance.repair import sync

    so = aws.storage_options()
    staged_second_version(aws, ddb_uri, _ids(1, 2, 3))
    other = aws.create_table(f"other_{uuid.uuid4().hex[:8]}")
    wrong = ddb_uri.replace(f"ddbTableName={TEST_TABLE}", f"ddbTableName={other}")
    before = {m.path for m in ObjectStore(ddb_uri, so).iter_list("")}
    with pytest.raises(CommitMechanismError, match=TEST_TABLE):
        if verb == "sync":
            sync(wrong, so, grace_seconds=0)
        else:
            s3ddb.dataset(wrong, storage_options=so).cleanup_old_versions(
                older_than=dt.timedelta(0), delete_unverified=True
            )
    assert {m.path for m in ObjectStore(ddb_uri, so).iter_list("")} == before
    version_2 = s3ddb.dataset(ddb_uri, storage_options=so).to_table()
    assert sorted(version_2["id"].to_pylist()) == [1, 2, 3, 777]
