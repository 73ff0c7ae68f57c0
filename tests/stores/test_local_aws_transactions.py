"""The local endpoint's TransactWriteItems backs up only the items it names
(s3ddb/testing/_moto_transactions.py): a cancelled transaction still leaves every item
of every table it named exactly as it was, and a successful one applies every
operation."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError


def _table(ddb: Any) -> str:
    name = f"tx-{uuid.uuid4().hex[:10]}"
    ddb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "k", "KeyType": "HASH"},
            {"AttributeName": "v", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "k", "AttributeType": "S"},
            {"AttributeName": "v", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for k in ("a", "b", "d"):
        ddb.put_item(
            TableName=name,
            Item={"k": {"S": k}, "v": {"N": "1"}, "x": {"N": "1"}, "tags": {"SS": ["t"]}},
        )
    return name


def _items(ddb: Any, table: str) -> list[dict[str, Any]]:
    return sorted(ddb.scan(TableName=table)["Items"], key=lambda i: (i["k"]["S"], i["v"]["N"]))


def _key(k: str) -> dict[str, Any]:
    return {"k": {"S": k}, "v": {"N": "1"}}


def _writes(one: str, two: str) -> list[dict[str, Any]]:
    """An update in place, a put of a new item and a delete in ``one``; an update in
    ``two``."""
    return [
        {"Update": {"TableName": one, "Key": _key("a"), "UpdateExpression": "SET x = :x "
                    "ADD tags :t", "ExpressionAttributeValues": {":x": {"N": "10"},
                                                                 ":t": {"SS": ["u"]}}}},
        {"Put": {"TableName": one, "Item": {**_key("c"), "x": {"N": "3"}}}},
        {"Delete": {"TableName": one, "Key": _key("b")}},
        {"Update": {"TableName": two, "Key": _key("a"), "UpdateExpression": "SET x = :x",
                    "ExpressionAttributeValues": {":x": {"N": "20"}}}},
    ]  # fmt: skip


def test_a_cancelled_transaction_leaves_every_item_it_named_as_it_was(moto_aws: Any) -> None:
    ddb = moto_aws.boto3_client("dynamodb")
    one, two = _table(ddb), _table(ddb)
    before = (_items(ddb, one), _items(ddb, two))
    failing = {
        "ConditionCheck": {
            "TableName": one, "Key": _key("d"), "ConditionExpression": "x = :no",
            "ExpressionAttributeValues": {":no": {"N": "999"}},
        }
    }  # fmt: skip
    # The failing check after the writes (moto applies them one by one) and before.
    for items in ([*_writes(one, two), failing], [failing, *_writes(one, two)]):
        with pytest.raises(ClientError) as info:
            ddb.transact_write_items(TransactItems=items)
        assert info.value.response["Error"]["Code"] == "TransactionCanceledException"
        assert (_items(ddb, one), _items(ddb, two)) == before


def test_a_transaction_naming_an_item_twice_is_refused_and_changes_nothing(
    moto_aws: Any,
) -> None:
    ddb = moto_aws.boto3_client("dynamodb")
    one, two = _table(ddb), _table(ddb)
    before = (_items(ddb, one), _items(ddb, two))
    twice = [*_writes(one, two), {"Delete": {"TableName": one, "Key": _key("a")}}]
    with pytest.raises(ClientError):
        ddb.transact_write_items(TransactItems=twice)
    assert (_items(ddb, one), _items(ddb, two)) == before


def test_a_transaction_that_succeeds_applies_every_operation(moto_aws: Any) -> None:
    ddb = moto_aws.boto3_client("dynamodb")
    one, two = _table(ddb), _table(ddb)
    ddb.transact_write_items(TransactItems=_writes(one, two))
    got = {(i["k"]["S"], i["x"]["N"]) for i in _items(ddb, one)}
    assert got == {("a", "10"), ("c", "3"), ("d", "1")}
    assert set(_items(ddb, one)[0]["tags"]["SS"]) == {"t", "u"}
    assert {(i["k"]["S"], i["x"]["N"]) for i in _items(ddb, two)} == {
        ("a", "20"), ("b", "1"), ("d", "1")
    }  # fmt: skip
