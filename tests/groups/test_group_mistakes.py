"""Mistakes a new user makes with ``s3ddb.atomic`` and ``s3ddb.snapshot``, found in
review: each is refused with a typed error that says what to do, or (for a function
that ends its own group) the group's decision stands. Against the local AWS endpoint
over HTTP (moto), as users run them.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import AtomicGroupError, InvalidInputError
from tests.conftest import TEST_BUCKET, TEST_TABLE


def _table(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def _pair(aws: Any) -> tuple[str, str, dict[str, Any]]:
    so = aws.storage_options()
    prefix = f"atomic-usage-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    s3ddb.write_dataset(_table(1), a, storage_options=so)
    s3ddb.write_dataset(_table(2), b, storage_options=so)
    return a, b, so


def _ids(uri: str, so: dict[str, Any]) -> list[int]:
    return sorted(s3ddb.dataset(uri, storage_options=so).to_table().column("id").to_pylist())


def test_write_dataset_on_a_groups_handle_is_refused_not_committed_at_once(aws: Any) -> None:
    """write_dataset(data, handle) commits by the handle's URI at once: on a group's
    handle it would land outside the group, committed even when the group fails."""
    a, _, so = _pair(aws)
    with (
        pytest.raises(RuntimeError, match="the block fails"),
        s3ddb.atomic(storage_options=so) as tx,
    ):
        handle = tx.dataset(a)
        with pytest.raises(AtomicGroupError, match=r"write_dataset.*insert"):
            s3ddb.write_dataset(_table(7), handle, mode="append")
        raise RuntimeError("the block fails")
    assert _ids(a, so) == [1]
    assert s3ddb.dataset(a, storage_options=so).version == 1


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_decorated_function_may_end_its_group_itself(aws: Any, end: str) -> None:
    """The decorator commits when the function returns, unless the function already
    committed or aborted the group: then its decision stands, and no error says a
    committed group failed."""
    a, b, so = _pair(aws)

    @s3ddb.atomic(retries=2, storage_options=so)
    def change(tx: Any) -> str:
        tx.dataset(a).insert(_table(5))
        tx.dataset(b).insert(_table(6))
        getattr(tx, end)()
        return "done"

    assert change() == "done"
    expected = ([1, 5], [2, 6]) if end == "commit" else ([1], [2])
    assert (_ids(a, so), _ids(b, so)) == expected


def test_a_snapshot_of_one_uri_string_says_to_pass_a_list(aws: Any) -> None:
    a, _, so = _pair(aws)
    with pytest.raises(InvalidInputError, match=r"list of dataset URIs.*single URI in a list"):
        s3ddb.snapshot(a, so)
    with pytest.raises(InvalidInputError, match="list of dataset URIs"):
        s3ddb.snapshot(None, so)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="dataset URIs, got int 3"):
        s3ddb.snapshot([a, 3], so)  # type: ignore[list-item]
    assert list(s3ddb.snapshot([a], so)) == [a]


def test_join_and_add_operation_refuse_what_they_do_not_take(aws: Any) -> None:
    a, _, so = _pair(aws)
    with s3ddb.atomic(storage_options=so) as tx:
        with pytest.raises(InvalidInputError, match=r"join takes an open s3ddb\.Dataset"):
            tx.join(a)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="add_operation takes an s3ddb operation"):
            tx.add_operation(a, "append")  # type: ignore[arg-type]
        tx.dataset(a).insert(_table(3))
    assert _ids(a, so) == [1, 3]


def test_a_uri_or_storage_options_of_the_wrong_type_is_a_typed_error(aws: Any) -> None:
    """Not TypeError/ValueError from os.fspath or dict(): an int for a URI, a string
    for storage options, in a group, a snapshot and the plain entry points."""
    from s3ddb.errors import InvalidURIError

    a, _, so = _pair(aws)
    with s3ddb.atomic(storage_options=so) as tx:
        with pytest.raises(InvalidURIError, match="dataset URI must be a non-empty string"):
            tx.dataset(5)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="storage_options must be a dict"):
            tx.dataset(a, storage_options="region=us-east-1")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="storage_options must be a dict"):
        s3ddb.snapshot([a], "region=us-east-1")  # type: ignore[arg-type]
    with pytest.raises(InvalidURIError, match="got int"):
        s3ddb.dataset(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidURIError, match="got int"):
        s3ddb.write_dataset(_table(1), 5)  # type: ignore[arg-type]
    assert s3ddb.dataset(a, storage_options=so).version == 1


def test_a_snapshot_of_one_dataset_under_two_spellings_reads_its_row_once(aws: Any) -> None:
    """DynamoDB refuses a TransactGetItems with two operations on one item; a dataset
    named twice (a trailing slash) must be asked for once, and both spellings answer."""
    a, _, so = _pair(aws)
    other = a.replace("/a?", "/a/?")
    s3ddb.dataset(a, storage_options=so).insert(_table(4))
    client = s3ddb.dataset(a, storage_options=so).handler.external.client()
    sent: list[list[Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        sent.append([item["Get"]["Key"] for item in params["TransactItems"]])

    client.meta.events.register("provide-client-params.dynamodb.TransactGetItems", record)
    try:
        snap = s3ddb.snapshot([a, other], so)
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.TransactGetItems", record)
    assert sent, "the snapshot sent no TransactGetItems"
    for keys in sent:
        assert len(keys) == len({repr(k) for k in keys}), keys
    assert [snap[u].version for u in (a, other)] == [2, 2]
    assert sorted(snap[other].to_table().column("id").to_pylist()) == [1, 4]
