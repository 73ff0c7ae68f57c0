"""Defects of groups (``s3ddb.atomic``) found in review, each pinned by a test:
where handles end after a group, application transactions of several changes to one
dataset (and from Spark's ``atomic_batches`` logic), the size bound of a group's
transaction, ``verify`` of rows naming a member table that is gone, and the files of
an operation a group refuses. On ``memory://`` and on ``s3+ddb://`` through the local
AWS endpoint (moto over HTTP) where the store matters.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import AtomicGroupError, TransactionAlreadyCommittedError
from tests.conftest import TEST_BUCKET, TEST_TABLE, before_each_transact_write

APP = "s3ddb.app_txn.job"


def _table(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def _ids(ds: s3ddb.Dataset) -> list[int]:
    return sorted(ds.to_table()["id"].to_pylist())


@pytest.fixture(params=["memory", "ddb"])
def where(request: pytest.FixtureRequest) -> Iterator[tuple[list[str], dict[str, Any] | None]]:
    """Two fresh dataset URIs of one kind and their storage options."""
    if request.param == "memory":
        root = f"memory://group-fixes-{uuid.uuid4().hex}"
        yield [f"{root}/a", f"{root}/b"], None
        import fsspec

        fs = fsspec.filesystem("memory")
        if fs.exists("/" + root.split("://", 1)[1]):
            fs.rm("/" + root.split("://", 1)[1], recursive=True)
        return
    aws = request.getfixturevalue("aws")
    prefix = f"group-fixes-{uuid.uuid4().hex[:10]}"
    yield (
        [f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab"],
        aws.storage_options(),
    )


def _two_versions(uri: str, so: dict[str, Any] | None) -> None:
    """Version 1 holds [1], version 2 holds [1, 2]."""
    s3ddb.write_dataset(_table(1), uri, storage_options=so)
    s3ddb.dataset(uri, storage_options=so).insert(_table(2))


# --- 1. every handle ends on a committed version ----------------------------------


def test_a_checked_out_handle_goes_back_when_the_group_fails(where: Any) -> None:
    """The restore through a checked-out handle moved it onto the group's planned
    version 3; the group fails. If the handle stayed there, its next insert would be
    built on rows that were never committed and erase another writer's version 3."""
    (a, _), so = where
    _two_versions(a, so)
    with pytest.raises(RuntimeError, match="block fails"), s3ddb.atomic(storage_options=so) as tx:
        handle = tx.dataset(a)
        old = handle.checkout_version(1)
        old.restore()
        assert old.version == 3 and handle.version == 3
        raise RuntimeError("block fails")
    assert (handle.version, old.version) == (2, 1)  # where each was pinned before
    s3ddb.dataset(a, storage_options=so).insert(_table(3))  # another writer's v3
    old.insert(_table(9))
    latest = s3ddb.dataset(a, storage_options=so)
    assert latest.version == 4
    assert _ids(latest) == [1, 2, 3, 9]


def test_a_handle_checked_out_at_a_planned_version_goes_back_to_a_committed_one(
    where: Any,
) -> None:
    (a, _), so = where
    _two_versions(a, so)
    with pytest.raises(RuntimeError), s3ddb.atomic(storage_options=so) as tx:
        handle = tx.dataset(a)
        handle.insert(_table(5))
        planned = handle.at(handle.manifest)  # pinned at the planned version 3
        assert planned.version == 3
        raise RuntimeError("block fails")
    assert planned.version == 2 and _ids(planned) == [1, 2]
    planned.insert(_table(7))
    assert _ids(s3ddb.dataset(a, storage_options=so)) == [1, 2, 7]


def test_every_handle_moves_to_the_version_the_group_committed(where: Any) -> None:
    """Another writer takes version 3 while the group holds a restore: the group is
    rebased and commits version 4; both handles that moved with the restore end there,
    not on the planned version 3 (which is someone else's)."""
    (a, b), so = where
    _two_versions(a, so)
    s3ddb.write_dataset(_table(1), b, storage_options=so)
    with s3ddb.atomic(storage_options=so) as tx:
        handle = tx.dataset(a)
        old = handle.checkout_version(1)
        old.restore()
        planned = handle.at(handle.manifest)
        tx.dataset(b).insert(_table(4))
        s3ddb.dataset(a, storage_options=so).insert(_table(3))
    latest = s3ddb.dataset(a, storage_options=so)
    assert latest.version == 4 and latest.versions()[-1].operation == "Restore"
    for ds in (handle, old, planned):
        assert ds.version == 4 and _ids(ds) == [1]
    assert old.last_commit is not None and old.last_commit.manifest.version == 4
    old.insert(_table(8))
    assert _ids(s3ddb.dataset(a, storage_options=so)) == [1, 8]


# --- 2. application transactions of several changes to one dataset ----------------


def _respell(uri: str) -> str:
    """Another spelling of ``uri`` (a trailing slash on its path)."""
    path, sep, query = uri.partition("?")
    return f"{path}/{sep}{query}"


def _append_all(group: s3ddb.groups.AtomicGroup, frames: dict[str, pa.Table], number: str) -> None:
    """What write_atomic does on the driver: one Append per URI, each recording
    ``number`` for the application."""
    for uri, table in frames.items():
        ds = group.dataset(uri)
        fragments = s3ddb.fragment.write_fragments(
            table, uri, ds.manifest.schema, storage_options=ds.storage_options
        )
        group.add_operation(uri, s3ddb.operations.Append(fragments), {APP: number})


def test_two_changes_to_one_dataset_may_carry_the_same_batch_id(where: Any) -> None:
    """Two spellings of one dataset in a batch's route are one handle with two
    changes: the second must not be refused because the first (not committed) records
    the batch id, which made atomic_batches skip the whole batch as "committed"."""
    (a, b), so = where
    for uri in (a, b):
        s3ddb.write_dataset(_table(0), uri, storage_options=so)
    group = s3ddb.groups.AtomicGroup(so)
    _append_all(group, {a: _table(1), _respell(a): _table(2), b: _table(3)}, "7")
    assert len(group.datasets) == 2  # one handle for both spellings
    group.commit()
    da, db = (s3ddb.dataset(u, storage_options=so) for u in (a, b))
    assert (da.version, _ids(da)) == (3, [0, 1, 2])
    assert (db.version, _ids(db)) == (2, [0, 3])
    assert [d.manifest.table_metadata.get(APP) for d in (da, db)] == ["7", "7"]
    # A replay of the batch is refused on its first change, and writes nothing.
    replay = s3ddb.groups.AtomicGroup(so)
    with pytest.raises(TransactionAlreadyCommittedError, match="version 3 records 7"):
        _append_all(replay, {a: _table(1), b: _table(3)}, "7")
    replay.abort()
    assert [s3ddb.dataset(u, storage_options=so).version for u in (a, b)] == [3, 2]


def test_a_further_change_is_checked_against_the_committed_versions() -> None:
    a = f"memory://group-fixes-{uuid.uuid4().hex}/a"
    s3ddb.write_dataset(_table(0), a)
    with s3ddb.atomic() as tx:
        _append_all(tx, {a: _table(9)}, "5")
    with s3ddb.atomic() as tx:
        _append_all(tx, {a: _table(1)}, "6")
        with pytest.raises(TransactionAlreadyCommittedError, match="version 2 records 5"):
            _append_all(tx, {a: _table(2)}, "5")  # committed already, whatever the plan
        _append_all(tx, {a: _table(3)}, "8")  # a newer number is recorded
    ds = s3ddb.dataset(a)
    assert (ds.version, _ids(ds)) == (4, [0, 1, 3, 9])
    assert ds.manifest.table_metadata.get(APP) == "8"


# --- 3. the size of a group's transaction is bounded from above -------------------


def _value_bytes(value: dict[str, Any]) -> int:
    """DynamoDB's size of an attribute value (a number counted as its digits, more
    than DynamoDB counts)."""
    ((_, text),) = value.items()
    return len(str(text).encode())


def _item_bytes(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + _value_bytes(v) for name, v in item.items())


def _long_table(aws: Any) -> str:
    """A DynamoDB table with the longest name DynamoDB allows (255 characters)."""
    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig

    name = ("t" + uuid.uuid4().hex) * 8
    name = name[:255]
    create_table(name, AwsConfig.from_storage_options(aws.storage_options()))
    return name


def _long_uris(table: str, count: int) -> list[str]:
    prefix = "p" * 300 + uuid.uuid4().hex[:10]
    return [f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={table}" for n in "abcd"[:count]]


def test_the_size_bound_covers_every_item_the_claim_sends(
    aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3ddb.groups.atomic_group import claim_bytes_bound

    so = aws.storage_options()
    uris = _long_uris(_long_table(aws), 3)
    for uri in uris:
        s3ddb.write_dataset(_table(1), uri, storage_options=so)
    sent: list[int] = []

    def measure(request: dict[str, Any]) -> None:
        items = [
            a["Put"]["Item"] if "Put" in a else a["ConditionCheck"]["Key"]
            for a in request["TransactItems"]
        ]
        sent.append(sum(_item_bytes(i) for i in items))

    before_each_transact_write(monkeypatch, measure)
    with s3ddb.atomic(storage_options=so) as tx:
        for uri in uris:
            tx.dataset(uri).insert(_table(2))
        tx.dataset(uris[0]).update_config({"k": "v"})
        bound = claim_bytes_bound([h.part for h in tx._held])
    versions = [s3ddb.dataset(u, storage_options=so).version for u in uris]
    assert len(sent) == 1 and versions == [3, 2, 2]
    assert bound >= sent[0]


def test_a_group_too_large_for_one_transaction_is_refused_before_anything_is_written(
    aws: Any,
) -> None:
    """99 changes to one dataset are 100 actions, within DynamoDB's limit; but each row
    carries every member with its table name (255 characters here), over 4 MB in all.
    The estimate left the table names out: the group passed the check and failed
    only when DynamoDB refused the request."""
    so = aws.storage_options()
    (uri,) = _long_uris(_long_table(aws), 1)
    s3ddb.write_dataset(_table(1), uri, storage_options=so)
    before = {m.path for m in s3ddb.dataset(uri, storage_options=so).handler.store.list("")}
    held = 0
    with (
        pytest.raises(AtomicGroupError, match="Split the group"),
        s3ddb.atomic(storage_options=so) as tx,
    ):
        handle = tx.dataset(uri)
        for i in range(99):
            handle.update_config({"k": str(i)})
            held += 1
    assert 0 < held < 99  # refused while planning, not by DynamoDB
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.version == 1
    assert {m.path for m in ds.handler.store.list("")} == before


# --- 4. verify of a member whose table is gone ----------------------------------------


@pytest.mark.parametrize("how", ["dropped", "planted"])
def test_verify_reports_a_member_whose_table_is_gone(
    aws: Any, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """The other member's table was deleted (with its dataset), or a row names a
    table nobody created: verify reports missing_group_member (exit 1), it does not
    fail on the table (ExternalStoreTableError, exit 2)."""
    from s3ddb.external_store.ddb_items import item_key
    from s3ddb.io.uri import parse_uri
    from s3ddb.maintenance.verify import verify
    from tests.support import storage
    from tests.support.cli_runner import run_cli

    so = aws.storage_options()
    other = _long_table(aws)
    prefix = f"group-fixes-{uuid.uuid4().hex[:10]}"
    a = f"s3+ddb://{TEST_BUCKET}/{prefix}/a?ddbTableName={TEST_TABLE}"
    b = f"s3+ddb://{TEST_BUCKET}/{prefix}/b?ddbTableName={other}"
    for uri in (a, b):
        s3ddb.write_dataset(_table(1), uri, storage_options=so)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(a).insert(_table(2))
        tx.dataset(b).insert(_table(3))
    storage.objects(a, so)  # the group's versions are final
    assert [p.kind for p in verify(a, so).problems] == []
    client = aws.boto3_client("dynamodb")
    if how == "dropped":
        client.update_table(TableName=other, DeletionProtectionEnabled=False)
        client.delete_table(TableName=other)
    else:
        base_a, base_b = parse_uri(a).base_uri, parse_uri(b).base_uri
        members = f'[["{base_a}", 2, "{TEST_TABLE}"], ["{base_b}", 2, "no_such_table_x"]]'
        client.update_item(
            TableName=TEST_TABLE,
            Key=item_key(base_a, 2),
            UpdateExpression="SET group_members = :m",
            ExpressionAttributeValues={":m": {"S": members}},
        )
    problems = [p for p in verify(a, so).problems if p.kind == "missing_group_member"]
    assert len(problems) == 1 and "does not exist" in problems[0].meaning
    flags = [f"--storage-option={k}={v}" for k, v in so.items()]
    code, out, err = run_cli(capsys, "verify", a, *flags)
    assert code == 1, err
    assert "missing_group_member" in out


# --- 5. the files of an operation a group refuses ---------------------------------


def _data_files(uri: str) -> set[str]:
    from s3ddb.io import ObjectStore

    return {m.path for m in ObjectStore(uri).list("") if m.path.startswith("data/")}


def test_an_operation_for_a_uri_that_cannot_join_has_its_files_deleted(tmp_path: Any) -> None:
    member = f"memory://group-fixes-{uuid.uuid4().hex}/a"
    local = str(tmp_path / "local")
    s3ddb.write_dataset(_table(1), member)
    s3ddb.write_dataset(_table(1), local)
    committed = _data_files(local)
    fragments = s3ddb.fragment.write_fragments(
        _table(5), local, s3ddb.dataset(local).manifest.schema
    )
    assert _data_files(local) > committed
    with s3ddb.atomic() as tx:
        tx.dataset(member).insert(_table(2))
        with pytest.raises(AtomicGroupError, match="cannot join"):
            tx.add_operation(local, s3ddb.operations.Append(fragments))
        # An operation naming the dataset's committed files by mistake: refused, and
        # the committed files stay.
        with pytest.raises(AtomicGroupError, match="cannot join"):
            tx.add_operation(local, s3ddb.operations.Append(s3ddb.dataset(local).get_fragments()))
    assert _data_files(local) == committed
    assert _ids(s3ddb.dataset(local)) == [1]
    assert _ids(s3ddb.dataset(member)) == [1, 2]


def test_an_operation_for_no_dataset_or_an_ended_group_has_its_files_deleted() -> None:
    root = f"memory://group-fixes-{uuid.uuid4().hex}"
    a, missing = f"{root}/a", f"{root}/missing"
    s3ddb.write_dataset(_table(1), a)
    schema = s3ddb.dataset(a).manifest.schema
    tx = s3ddb.groups.AtomicGroup()
    tx.dataset(a)
    orphans = s3ddb.fragment.write_fragments(_table(5), missing, schema)
    assert _data_files(missing)
    with pytest.raises(s3ddb.DatasetNotFoundError):
        tx.add_operation(missing, s3ddb.operations.Append(orphans))
    assert _data_files(missing) == set()
    tx.commit()
    late = s3ddb.fragment.write_fragments(_table(6), a, schema)
    before = _data_files(a)
    with pytest.raises(AtomicGroupError, match="is over"):
        tx.add_operation(a, s3ddb.operations.Append(late))
    gone = {p for p in before if any(p.endswith(f.files[0].path) for f in late)}
    assert gone and _data_files(a) == before - gone
    assert _ids(s3ddb.dataset(a)) == [1]
