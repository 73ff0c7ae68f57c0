"""``s3ddb doctor``: the verdict against stores with and without conditional writes, a
mixed deployment, a wrong key schema, a missing table, an unreachable endpoint, refused
credentials and a missing permission (on an endpoint that enforces IAM); scratch
objects and items never stay behind."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from s3ddb.cli.main import main
from s3ddb.testing import LocalAWS

BUCKET = "s3ddb-doctor"
TABLE = "s3ddb_doctor_commits"


def _doctor(capsys: pytest.CaptureFixture[str], uri: str, options: dict[str, str]) -> Any:
    """Run the verb with ``--json``; returns (exit status, report)."""
    argv = ["doctor", uri, "--json"]
    for key, value in options.items():
        argv += ["--storage-option", f"{key}={value}"]
    status = main(argv)
    return status, json.loads(capsys.readouterr().out)


def _checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def plain_store() -> Iterator[LocalAWS]:
    """S3 without conditional writes, with DynamoDB (same endpoint)."""
    with LocalAWS(conditional_writes=False) as server:
        server.create_bucket(BUCKET)
        server.create_table(TABLE)
        yield server


@pytest.fixture(scope="module")
def conditional_store() -> Iterator[LocalAWS]:
    with LocalAWS(conditional_writes=True) as server:
        server.create_bucket(BUCKET + "-c")
        server.create_table(TABLE)
        yield server


def _no_scratch_left(server: Any, bucket: str) -> None:
    s3 = server.boto3_client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert not [k for k in keys if "_s3ddb_doctor" in k], keys


def _no_scratch_items(server: Any) -> None:
    items = server.boto3_client("dynamodb").scan(TableName=TABLE)["Items"]
    assert not [i for i in items if i["base_uri"]["S"].startswith("s3ddb-doctor://")]


def test_s3_uri_on_a_store_without_conditional_writes_is_refused(
    plain_store: LocalAWS, capsys: pytest.CaptureFixture[str]
) -> None:
    status, report = _doctor(capsys, f"s3://{BUCKET}/sales", plain_store.storage_options())
    assert status == 1 and not report["ok"] and report["conditional_writes"] is False
    probe = _checks(report)["s3.conditional_put"]
    assert probe["status"] == "fail" and "ignores If-None-Match" in probe["detail"]
    assert f"s3+ddb://{BUCKET}/sales?ddbTableName=" in probe["fix"]
    assert "NOT OK" in report["verdict"] and "s3+ddb://" in report["verdict"]
    _no_scratch_left(plain_store, BUCKET)


def test_s3_uri_on_a_store_with_conditional_writes_is_ok(
    conditional_store: LocalAWS, capsys: pytest.CaptureFixture[str]
) -> None:
    status, report = _doctor(capsys, f"s3://{BUCKET}-c/sales", conditional_store.storage_options())
    assert status == 0 and report["ok"] and report["conditional_writes"] is True
    assert "If-None-Match" in report["mechanism"] and "dynamodb" not in report["services"]
    assert {c["status"] for c in report["checks"]} == {"ok"}
    _no_scratch_left(conditional_store, BUCKET + "-c")


def test_s3ddb_uri_on_a_store_with_conditional_writes_says_plain_s3_would_do(
    conditional_store: LocalAWS, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"s3+ddb://{BUCKET}-c/sales?ddbTableName={TABLE}"
    status, report = _doctor(capsys, uri, conditional_store.storage_options())
    assert status == 0 and f"s3://{BUCKET}-c/sales would commit safely" in report["verdict"]
    _no_scratch_items(conditional_store)


def test_mixed_deployment_s3rver_objects_and_dynamodb_elsewhere(
    capsys: pytest.CaptureFixture[str], plain_store: LocalAWS
) -> None:
    from tests.support.node_servers import S3rver, missing

    if missing("s3rver"):
        pytest.skip(str(missing("s3rver")))
    with S3rver(access_keys={"S3ONLYKEY": "s3-secret"}, buckets=["lake"]) as s3:
        options = {
            "s3_endpoint": s3.endpoint_url,
            "s3_region": "us-west-2",
            "s3_access_key_id": "S3ONLYKEY",
            "s3_secret_access_key": "s3-secret",
            "dynamodb_endpoint": plain_store.endpoint_url,
            "dynamodb_region": "us-east-1",
            "dynamodb_access_key_id": "DDBONLYKEY",
            "dynamodb_secret_access_key": "x",
        }
        plain_store.clear_requests()
        uri = f"s3+ddb://lake/sales?ddbTableName={TABLE}"
        status, report = _doctor(capsys, uri, options)
        assert status == 0 and report["ok"], report
        assert report["conditional_writes"] is False
        assert "s3+ddb://" in _checks(report)["s3.conditional_put"]["detail"]
        assert report["services"]["s3"]["endpoint"] == s3.endpoint_url
        # Which key, without showing it (the last four characters, like `aws configure list`).
        assert (
            (report["services"]["s3"]["credentials"])
            == "access key ****YKEY (storage option s3_access_key_id)"
        )
        assert "S3ONLYKEY" not in json.dumps(report) and "DDBONLYKEY" not in json.dumps(report)
        assert report["services"]["dynamodb"]["region_source"] == "storage option dynamodb_region"
        assert {r.access_key_id for r in s3.requests} == {"S3ONLYKEY"}
        assert {(r.service, r.access_key_id) for r in plain_store.requests} == {
            ("dynamodb", "DDBONLYKEY")
        }
        _no_scratch_left(s3, "lake")
        _no_scratch_items(plain_store)

        # The same store with a key it does not know: an access error, exit status 2.
        status, report = _doctor(capsys, uri, {**options, "s3_access_key_id": "NOSUCHKEY"})
        assert status == 2
        reach = _checks(report)["s3.reachable"]
        assert reach["status"] == "fail" and "InvalidAccessKeyId" in reach["detail"]
        assert "s3_access_key_id" in reach["fix"]
        # DynamoDB is checked on its own, with its own key.
        assert _checks(report)["dynamodb.table"]["status"] == "ok"


def test_wrong_key_schema(plain_store: LocalAWS, capsys: pytest.CaptureFixture[str]) -> None:
    table = f"wrong_{uuid.uuid4().hex[:8]}"
    plain_store.boto3_client("dynamodb").create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    uri = f"s3+ddb://{BUCKET}/sales?ddbTableName={table}"
    status, report = _doctor(capsys, uri, plain_store.storage_options())
    assert status == 2  # an access error, as for every verb: the table is not s3ddb's
    check = _checks(report)["dynamodb.table"]
    assert check["status"] == "fail" and "pk" in check["detail"] and "base_uri" in check["detail"]
    assert f"s3ddb create-table {table}-s3ddb" in check["fix"]
    assert "dynamodb.permissions" not in _checks(report), "no scratch item in a wrong table"


def test_missing_table_and_unreachable_endpoint(
    plain_store: LocalAWS, capsys: pytest.CaptureFixture[str]
) -> None:
    so = plain_store.storage_options()
    status, report = _doctor(capsys, f"s3+ddb://{BUCKET}/s?ddbTableName=nope", so)
    assert status == 2 and "s3ddb create-table nope" in _checks(report)["dynamodb.table"]["fix"]
    status, report = _doctor(capsys, f"s3+ddb://no-such-bucket/s?ddbTableName={TABLE}", so)
    assert status == 2
    assert "create bucket 'no-such-bucket'" in _checks(report)["s3.reachable"]["fix"]
    unreachable = {**so, "dynamodb_endpoint": "http://127.0.0.1:9"}
    status, report = _doctor(capsys, f"s3+ddb://{BUCKET}/s?ddbTableName={TABLE}", unreachable)
    assert status == 2
    fix = _checks(report)["dynamodb.table"]["fix"]
    assert "dynamodb_endpoint" in fix and "AWS_ENDPOINT_URL_DYNAMODB" in fix
    assert "http://127.0.0.1:9" in fix


def test_text_output_and_local_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "verdict: OK" in out and "local file system" in out
    assert main(["doctor", "s3+ddb://bkt/p"]) == 2  # no table in the URI: a usage error
    assert "ddbTableName" in capsys.readouterr().err


# moto enforces IAM after INITIAL_NO_AUTH_ACTION_COUNT unauthenticated requests; the
# set-up below makes exactly this many: bucket, table, and per user (two): the user, its
# inline policy and its access key.
_SETUP_REQUESTS = 8


def _policy(*dynamodb_actions: str) -> str:
    # moto checks DynamoDB actions, not table ARNs.
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
                {
                    "Effect": "Allow",
                    "Resource": "*",
                    "Action": [f"dynamodb:{a}" for a in dynamodb_actions],
                },
            ],
        }
    )


def test_a_missing_permission_names_the_action(capsys: pytest.CaptureFixture[str]) -> None:
    import boto3
    import botocore.config

    from s3ddb.testing.process import serve_in_subprocess

    enforcing = serve_in_subprocess(
        conditional_writes=False, env={"INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_REQUESTS)}
    )
    with enforcing as server:
        admin = {
            "endpoint_url": server.endpoint_url,
            "region_name": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "config": botocore.config.Config(retries={"max_attempts": 1}),
        }
        boto3.client("s3", **admin).create_bucket(Bucket="lake")
        boto3.client("dynamodb", **admin).create_table(
            TableName=TABLE,
            KeySchema=[
                {"AttributeName": "base_uri", "KeyType": "HASH"},
                {"AttributeName": "version", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "base_uri", "AttributeType": "S"},
                {"AttributeName": "version", "AttributeType": "N"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        iam = boto3.client("iam", **admin)
        policies = {
            # Everything s3ddb needs except dynamodb:UpdateItem (Scan: for this test).
            "committer": _policy(
                "DescribeTable",
                "GetItem",
                "PutItem",
                "Query",
                "DeleteItem",
                "BatchWriteItem",
                "Scan",
            ),
            # What commits need, without BatchWriteItem (cleanup and drop use it).
            # (A fenced claim: moto authorizes TransactWriteItems itself; AWS authorizes
            # each item's action, ConditionCheckItem for the predecessor's check.)
            "no-batch": _policy(
                "DescribeTable",
                "GetItem",
                "PutItem",
                "Query",
                "UpdateItem",
                "DeleteItem",
                "Scan",
                "TransactWriteItems",
                "ConditionCheckItem",
            ),
        }
        users = {}
        for user, policy in policies.items():
            iam.create_user(UserName=user)
            iam.put_user_policy(UserName=user, PolicyName="s3ddb", PolicyDocument=policy)
            key = iam.create_access_key(UserName=user)["AccessKey"]
            users[user] = {
                "endpoint_url": server.endpoint_url,
                "region": "us-east-1",
                "aws_access_key_id": key["AccessKeyId"],
                "aws_secret_access_key": key["SecretAccessKey"],
            }
        options = users["committer"]
        status, report = _doctor(capsys, f"s3+ddb://lake/sales?ddbTableName={TABLE}", options)
        assert status == 1, report
        checks = _checks(report)
        assert checks["s3.permissions"]["status"] == "ok"
        assert checks["dynamodb.table"]["status"] == "ok"
        denied = checks["dynamodb.permissions"]
        assert denied["status"] == "fail" and "UpdateItem" in denied["detail"]
        assert "grant dynamodb:UpdateItem" in denied["fix"]
        assert "dynamodb:UpdateItem" in report["verdict"]
        # The scratch item was deleted (DeleteItem is allowed; Scan only for this check).
        user = {
            **admin,
            "aws_access_key_id": options["aws_access_key_id"],
            "aws_secret_access_key": options["aws_secret_access_key"],
        }
        scan = boto3.client("dynamodb", **user).scan
        assert not [
            i
            for i in scan(TableName=TABLE)["Items"]
            if i["base_uri"]["S"].startswith("s3ddb-doctor://")
        ]

        # Without BatchWriteItem commits still work: reported, not failed.
        status, report = _doctor(
            capsys, f"s3+ddb://lake/sales?ddbTableName={TABLE}", users["no-batch"]
        )
        assert status == 0 and report["ok"], report
        note = _checks(report)["dynamodb.cleanup_permissions"]
        assert note["status"] == "info" and "grant dynamodb:BatchWriteItem" in note["fix"]
        assert not [
            i
            for i in scan(TableName=TABLE)["Items"]
            if i["base_uri"]["S"].startswith("s3ddb-doctor://")
        ]


def test_per_service_flags_override_the_shared_options(
    plain_store: LocalAWS, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"s3+ddb://{BUCKET}/s?ddbTableName={TABLE}"
    argv = [
        "doctor",
        uri,
        "--json",
        "--endpoint-url",
        plain_store.endpoint_url,
        "--region",
        "us-east-1",
        "--dynamodb-endpoint",
        "http://127.0.0.1:9",
        "--storage-option",
        "aws_access_key_id=testing",
        "--storage-option",
        "aws_secret_access_key=testing",
    ]
    assert main(argv) == 2
    report = json.loads(capsys.readouterr().out)
    ddb = report["services"]["dynamodb"]
    assert ddb["endpoint"] == "http://127.0.0.1:9"
    assert ddb["endpoint_source"] == "storage option dynamodb_endpoint"
    assert report["services"]["s3"]["endpoint"] == plain_store.endpoint_url
    assert _checks(report)["s3.permissions"]["status"] == "ok"
