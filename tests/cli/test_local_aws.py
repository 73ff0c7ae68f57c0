"""s3ddb.testing.LocalAWS: a local S3 + DynamoDB endpoint on moto, over real HTTP.

Everything here goes through boto3 (or s3fs) and a real socket: the point of the server
is that clients cannot tell it from AWS, except where a test asks for a difference
(conditional writes off, injected faults).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError

from s3ddb.testing import LocalAWS, RequestRecord, serve_in_subprocess
from s3ddb.testing import _moto_server as moto_server
from s3ddb.testing._faults import fault_response
from s3ddb.testing._requests import detect_operation, detect_service
from tests.support.python_children import PythonChild, run_python, start_python

NO_RETRIES = Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=30)


@pytest.fixture(scope="module")
def server() -> Iterator[LocalAWS]:
    with LocalAWS() as aws:
        yield aws


@pytest.fixture
def aws(server: LocalAWS) -> Iterator[LocalAWS]:
    """The module's server, emptied (state, log, faults) before each test."""
    server.reset()
    server.conditional_writes = True
    yield server
    server.clear_faults()
    server.conditional_writes = True


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _item(key: str, version: int = 1, **extra: str) -> dict[str, Any]:
    item: dict[str, Any] = {"base_uri": {"S": key}, "version": {"N": str(version)}}
    item.update({k: {"S": v} for k, v in extra.items()})
    return item


PUT_NEW = "attribute_not_exists(base_uri) AND attribute_not_exists(version)"


# -- lifecycle and addressing ------------------------------------------------------


def test_start_stop_on_an_os_chosen_port() -> None:
    aws = LocalAWS()
    assert not aws.is_running
    with pytest.raises(RuntimeError):
        _ = aws.endpoint_url
    assert aws.start() is aws
    try:
        assert aws.is_running and aws.port > 0
        assert aws.endpoint_url == f"http://127.0.0.1:{aws.port}"
        assert aws.region == "us-east-1"
        with pytest.raises(RuntimeError, match="already running"):
            aws.start()
        aws.boto3_client("s3").list_buckets()
    finally:
        aws.stop()
    assert not aws.is_running
    aws.stop()  # idempotent
    with pytest.raises(RuntimeError, match="restart"):
        aws.start()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", aws.port), timeout=2):
        pass


def test_env_and_storage_options(aws: LocalAWS, monkeypatch: pytest.MonkeyPatch) -> None:
    env = aws.env()
    assert env["AWS_ENDPOINT_URL"] == aws.endpoint_url
    assert env["AWS_ACCESS_KEY_ID"] == env["AWS_SECRET_ACCESS_KEY"] == "testing"
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert aws.storage_options() == {
        "endpoint_url": aws.endpoint_url,
        "region": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    monkeypatch.setenv("S3DDB_TEST_MARKER", "kept")
    full = aws.env(inherit=True)
    assert "AWS_PROFILE" not in full and full["S3DDB_TEST_MARKER"] == "kept"
    assert full["AWS_ENDPOINT_URL"] == aws.endpoint_url


def test_helpers_ignore_the_callers_aws_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with LocalAWS() as aws:
        bucket = aws.create_bucket(_name("profile"))
        assert [b["Name"] for b in aws.boto3_client("s3").list_buckets()["Buckets"]] == [bucket]


def test_instances_have_separate_state() -> None:
    with LocalAWS() as one, LocalAWS(region="eu-west-1") as two:
        assert one.port != two.port and one.account_id != two.account_id
        # Same table name in both: each instance serves its own moto account.
        for aws in (one, two):
            aws.create_table("commits")
        one.boto3_client("dynamodb").put_item(TableName="commits", Item=_item("a"))
        assert two.boto3_client("dynamodb").scan(TableName="commits")["Count"] == 0
        # Bucket names are one namespace per process, as on AWS.
        bucket = one.create_bucket(_name("shared"))
        with pytest.raises(ClientError) as info:
            two.create_bucket(bucket)
        assert info.value.response["Error"]["Code"] == "BucketAlreadyExists"
        # reset() forgets one instance's state only, and frees its bucket names.
        two.create_bucket(_name("other"))
        one.reset()
        assert one.boto3_client("dynamodb").list_tables()["TableNames"] == []
        assert len(two.boto3_client("s3").list_buckets()["Buckets"]) == 1
        assert two.boto3_client("dynamodb").list_tables()["TableNames"] == ["commits"]
        two.create_bucket(bucket)


def test_reset_clears_versions_log_and_faults(aws: LocalAWS) -> None:
    bucket = aws.create_bucket(_name("reset"))
    s3 = aws.boto3_client("s3")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"1", b"2"):
        s3.put_object(Bucket=bucket, Key="k", Body=body)
    aws.create_table("commits")
    aws.inject_fault("s3", "*", "throttle")
    aws.reset()
    assert aws.requests == [] and aws.faults == []
    assert s3.list_buckets()["Buckets"] == []
    assert aws.boto3_client("dynamodb").list_tables()["TableNames"] == []
    assert aws.create_bucket(bucket) == bucket  # the name is free again


# -- S3 and DynamoDB round trips -------------------------------------------------


def test_s3_roundtrip(aws: LocalAWS) -> None:
    bucket = aws.create_bucket(_name("rt"))
    s3 = aws.boto3_client("s3")
    s3.put_object(Bucket=bucket, Key="dir/a b.txt", Body=b"hello", Metadata={"my_key": "v"})
    got = s3.get_object(Bucket=bucket, Key="dir/a b.txt")
    assert got["Body"].read() == b"hello" and got["Metadata"] == {"my_key": "v"}
    s3.copy_object(
        Bucket=bucket, Key="dir/copy", CopySource={"Bucket": bucket, "Key": "dir/a b.txt"}
    )
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="dir/")
    assert sorted(o["Key"] for o in listed["Contents"]) == ["dir/a b.txt", "dir/copy"]
    assert s3.head_object(Bucket=bucket, Key="dir/copy")["ContentLength"] == 5
    s3.delete_object(Bucket=bucket, Key="dir/copy")
    big = os.urandom(3 * 1024 * 1024)  # large enough for Expect: 100-continue
    s3.put_object(Bucket=bucket, Key="big", Body=big)
    assert s3.get_object(Bucket=bucket, Key="big", Range="bytes=10-19")["Body"].read() == big[10:20]


def test_a_client_keeps_one_connection_across_requests(
    aws: LocalAWS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As S3 and DynamoDB do, the server keeps a connection open for the client's next
    request (HTTP/1.1 keep-alive), across every kind of answer: bodies large and
    empty, HEAD, errors, a fault answered without applying. Each answer still reaches
    the request that asked for it."""
    bucket = aws.create_bucket(_name("keep"))
    aws.create_table("commits")
    s3, ddb = aws.boto3_client("s3", config=NO_RETRIES), aws.boto3_client("dynamodb")
    s3.head_bucket(Bucket=bucket)
    ddb.list_tables()
    connects = []
    real_connect = socket.socket.connect

    def counting(self: socket.socket, address: Any) -> Any:
        connects.append(address)
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", counting)
    big = os.urandom(3 * 1024 * 1024)  # large enough for Expect: 100-continue
    for i in range(3):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"v%d" % i)
        assert s3.get_object(Bucket=bucket, Key=f"k{i}")["Body"].read() == b"v%d" % i
        assert s3.head_object(Bucket=bucket, Key=f"k{i}")["ContentLength"] == 2
        with pytest.raises(ClientError, match="NoSuchKey"):
            s3.get_object(Bucket=bucket, Key="missing")
        s3.put_object(Bucket=bucket, Key="big", Body=big)
        assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == big
        ddb.put_item(TableName="commits", Item=_item("k", i + 1), ConditionExpression=PUT_NEW)
        with pytest.raises(ClientError, match="ConditionalCheckFailed"):
            ddb.put_item(TableName="commits", Item=_item("k", i + 1), ConditionExpression=PUT_NEW)
    aws.inject_fault("s3", "GetObject", "throttle")
    with pytest.raises(ClientError, match="SlowDown"):
        s3.get_object(Bucket=bucket, Key="k0")
    assert s3.get_object(Bucket=bucket, Key="k0")["Body"].read() == b"v0"
    assert connects == []


def test_request_log_counts_response_bytes(aws: LocalAWS) -> None:
    """What a client read is in the log: a ranged GET's bytes, a whole GET's, no body."""
    bucket = aws.create_bucket(_name("bytes"))
    s3 = aws.boto3_client("s3")
    s3.put_object(Bucket=bucket, Key="k", Body=b"x" * 1000)
    aws.clear_requests()
    assert len(s3.get_object(Bucket=bucket, Key="k", Range="bytes=100-199")["Body"].read()) == 100
    s3.get_object(Bucket=bucket, Key="k")["Body"].read()
    s3.head_object(Bucket=bucket, Key="k")
    sent = [(r.operation, r.response_bytes) for r in aws.requests]
    assert sent == [("GetObject", 100), ("GetObject", 1000), ("HeadObject", 0)]


def test_s3fs_client(aws: LocalAWS) -> None:
    """aiobotocore (s3fs) pools connections too; every request still completes."""
    s3fs = pytest.importorskip("s3fs")
    bucket = aws.create_bucket(_name("fs"))
    opts = aws.storage_options()
    fs = s3fs.S3FileSystem(
        key=opts["aws_access_key_id"],
        secret=opts["aws_secret_access_key"],
        endpoint_url=opts["endpoint_url"],
        client_kwargs={"region_name": opts["region"]},
        skip_instance_cache=True,
    )
    for i in range(20):
        fs.pipe(f"{bucket}/d/{i}", str(i).encode())
    assert len(fs.ls(f"{bucket}/d")) == 20
    assert fs.cat(f"{bucket}/d/7") == b"7"


def test_dynamodb_table_and_conditional_put(aws: LocalAWS) -> None:
    assert aws.create_table("commits") == "commits"
    ddb = aws.boto3_client("dynamodb", config=NO_RETRIES)
    desc = ddb.describe_table(TableName="commits")["Table"]
    assert desc["KeySchema"] == [
        {"AttributeName": "base_uri", "KeyType": "HASH"},
        {"AttributeName": "version", "KeyType": "RANGE"},
    ]
    ddb.put_item(
        TableName="commits", Item=_item("s3://b/x", path="p1"), ConditionExpression=PUT_NEW
    )
    with pytest.raises(ClientError) as info:
        ddb.put_item(
            TableName="commits", Item=_item("s3://b/x", path="p2"), ConditionExpression=PUT_NEW
        )
    assert info.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    got = ddb.get_item(TableName="commits", Key=_item("s3://b/x"), ConsistentRead=True)
    assert got["Item"]["path"] == {"S": "p1"}


# -- conditional writes on and off -----------------------------------------------


def test_conditional_writes_honoured(aws: LocalAWS) -> None:
    bucket = aws.create_bucket(_name("cw"))
    s3 = aws.boto3_client("s3", config=NO_RETRIES)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"one", IfNoneMatch="*")["ETag"]
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfNoneMatch="*")
    assert info.value.response["Error"]["Code"] == "PreconditionFailed"
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfMatch='"0123"')
    assert info.value.response["Error"]["Code"] == "PreconditionFailed"
    s3.put_object(Bucket=bucket, Key="k", Body=b"three", IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"three"
    assert aws.count("s3", "PutObject") == 4


def test_conditional_writes_dropped() -> None:
    with LocalAWS(conditional_writes=False) as aws:
        bucket = aws.create_bucket(_name("nocw"))
        s3 = aws.boto3_client("s3", config=NO_RETRIES)
        etag = s3.put_object(Bucket=bucket, Key="k", Body=b"one", IfNoneMatch="*")["ETag"]
        # The store "lacks" conditional writes: both conditions are silently ignored.
        s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfNoneMatch="*")
        s3.put_object(Bucket=bucket, Key="k", Body=b"three", IfMatch='"0123"')
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"three"
        assert [r.status for r in aws.requests if r.operation == "PutObject"] == [200, 200, 200]
        # Conditional reads are another (universal) feature and still work.
        with pytest.raises(ClientError) as info:
            s3.get_object(Bucket=bucket, Key="k", IfMatch=etag)
        assert info.value.response["Error"]["Code"] == "PreconditionFailed"
        # DynamoDB is unaffected.
        aws.create_table("commits")
        ddb = aws.boto3_client("dynamodb", config=NO_RETRIES)
        ddb.put_item(TableName="commits", Item=_item("a"), ConditionExpression=PUT_NEW)
        with pytest.raises(ClientError, match="ConditionalCheckFailed"):
            ddb.put_item(TableName="commits", Item=_item("a"), ConditionExpression=PUT_NEW)
        # The switch works while running.
        aws.conditional_writes = True
        with pytest.raises(ClientError, match="PreconditionFailed"):
            s3.put_object(Bucket=bucket, Key="k", Body=b"four", IfNoneMatch="*")


# -- request log -------------------------------------------------------------------


def test_request_log_names_operations(aws: LocalAWS) -> None:
    bucket = aws.create_bucket(_name("log"))
    aws.create_table("commits")
    aws.clear_requests()
    s3 = aws.boto3_client("s3")
    ddb = aws.boto3_client("dynamodb")
    s3.head_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="a/b", Body=b"x")
    s3.head_object(Bucket=bucket, Key="a/b")
    s3.get_object(Bucket=bucket, Key="a/b")["Body"].read()
    s3.copy_object(Bucket=bucket, Key="a/c", CopySource={"Bucket": bucket, "Key": "a/b"})
    s3.list_objects_v2(Bucket=bucket, Prefix="a/")
    s3.delete_object(Bucket=bucket, Key="a/c")
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a/b"}]})
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"p")
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mp",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    ddb.put_item(TableName="commits", Item=_item("a"))
    ddb.query(
        TableName="commits",
        KeyConditionExpression="base_uri = :b",
        ExpressionAttributeValues={":b": {"S": "a"}},
    )
    assert [(r.service, r.operation) for r in aws.requests] == [
        ("s3", "HeadBucket"),
        ("s3", "PutObject"),
        ("s3", "HeadObject"),
        ("s3", "GetObject"),
        ("s3", "CopyObject"),
        ("s3", "ListObjectsV2"),
        ("s3", "DeleteObject"),
        ("s3", "DeleteObjects"),
        ("s3", "CreateMultipartUpload"),
        ("s3", "UploadPart"),
        ("s3", "CompleteMultipartUpload"),
        ("dynamodb", "PutItem"),
        ("dynamodb", "Query"),
    ]
    first = aws.requests[1]
    assert first == RequestRecord(
        "s3", "PutObject", "PUT", f"/{bucket}/a/b", 200,
        access_key_id="testing", region=aws.region,
    )  # fmt: skip
    assert aws.count() == 13
    assert aws.count("s3") == 11 and aws.count("dynamodb") == 2
    assert aws.count(operation="PutItem") == 1 and aws.count("s3", "PutItem") == 0
    log = aws.requests
    log.clear()  # a copy
    assert aws.count() == 13
    aws.clear_requests()
    assert aws.requests == [] and aws.count() == 0


def test_operation_names_from_raw_requests() -> None:
    def env(method: str, path: str, query: str = "", **headers: str) -> dict[str, Any]:
        e: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query}
        e.update({"HTTP_" + k.upper(): v for k, v in headers.items()})
        return e

    auth = "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/s3/aws4_request, X=y"
    cases = {
        ("GET", "/", ""): "ListBuckets",
        ("PUT", "/b", ""): "CreateBucket",
        ("GET", "/b", "list-type=2&prefix=x"): "ListObjectsV2",
        ("GET", "/b", "prefix=x"): "ListObjects",
        ("GET", "/b", "versioning"): "GetBucketVersioning",
        ("PUT", "/b", "policy"): "PutBucketPolicy",
        ("DELETE", "/b", ""): "DeleteBucket",
        ("GET", "/b/k", "uploadId=1"): "ListParts",
        ("PUT", "/b/k", "partNumber=1&uploadId=1"): "UploadPart",
        ("DELETE", "/b/k", "uploadId=1"): "AbortMultipartUpload",
        ("PUT", "/b/k", "tagging"): "PutObjectTagging",
    }
    for (method, path, query), operation in cases.items():
        e = env(method, path, query, AUTHORIZATION=auth)
        assert detect_service(e) == "s3"
        assert detect_operation(e, "s3") == operation, (method, path, query)
    copy = env("PUT", "/b/k", "partNumber=1&uploadId=1", X_AMZ_COPY_SOURCE="/b/src")
    assert detect_operation(copy, "s3") == "UploadPartCopy"
    ddb = env("POST", "/", X_AMZ_TARGET="DynamoDB_20120810.TransactWriteItems")
    assert detect_service(ddb) == "dynamodb"
    assert detect_operation(ddb, "dynamodb") == "TransactWriteItems"
    sts = env("POST", "/", AUTHORIZATION=auth.replace("/s3/", "/sts/"))
    sts["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
    assert detect_service(sts) == "sts"
    assert detect_operation(sts, "sts", b"Action=GetCallerIdentity&Version=2011-06-15") == (
        "GetCallerIdentity"
    )
    assert detect_service(env("POST", "/moto-api/reset")) == "moto-api"


# -- faults ------------------------------------------------------------------------


def _dynamodb_error(aws: LocalAWS, kind: str) -> tuple[dict[str, Any], Any]:
    """Arm ``kind`` on PutItem, try one put; return the error response (or exception)."""
    ddb = aws.boto3_client("dynamodb", config=NO_RETRIES)
    fault = aws.inject_fault("dynamodb", "PutItem", kind)  # type: ignore[arg-type]
    with pytest.raises((ClientError, ConnectionClosedError)) as info:
        ddb.put_item(TableName="commits", Item=_item("k"), ConditionExpression=PUT_NEW)
    assert fault.triggered == 1 and fault.remaining == 0 and aws.faults == []
    got = ddb.get_item(TableName="commits", Key=_item("k"), ConsistentRead=True)
    error = info.value.response if isinstance(info.value, ClientError) else {}
    return error, got.get("Item")


@pytest.mark.parametrize(
    ("kind", "code", "status"),
    [
        ("throttle", "ThrottlingException", 400),
        ("provisioned_throughput", "ProvisionedThroughputExceededException", 400),
        ("server_error", "InternalServerError", 500),
    ],
)
def test_dynamodb_faults_that_do_not_apply(
    aws: LocalAWS, kind: str, code: str, status: int
) -> None:
    aws.create_table("commits")
    error, item = _dynamodb_error(aws, kind)
    assert error["Error"]["Code"] == code
    assert error["ResponseMetadata"]["HTTPStatusCode"] == status
    assert item is None
    put = [r for r in aws.requests if r.operation == "PutItem"]
    assert [(r.status, r.fault, r.applied) for r in put] == [(status, kind, False)]


def test_dynamodb_apply_then_server_error(aws: LocalAWS) -> None:
    aws.create_table("commits")
    error, item = _dynamodb_error(aws, "apply_then_server_error")
    assert error["Error"]["Code"] == "InternalServerError"
    assert item is not None  # applied: the write landed although the client saw a 500
    put = [r for r in aws.requests if r.operation == "PutItem"]
    assert [(r.status, r.fault, r.applied) for r in put] == [(500, "apply_then_server_error", True)]


@pytest.mark.parametrize(("kind", "applied"), [("apply_then_drop", True), ("drop", False)])
def test_dynamodb_dropped_connection(aws: LocalAWS, kind: str, applied: bool) -> None:
    aws.create_table("commits")
    error, item = _dynamodb_error(aws, kind)
    assert error == {}  # no response at all: ConnectionClosedError
    assert (item is not None) is applied
    put = [r for r in aws.requests if r.operation == "PutItem"]
    assert [(r.status, r.fault, r.applied) for r in put] == [(0, kind, applied)]


def test_lost_response_then_retry_sees_own_write(aws: LocalAWS) -> None:
    """The reason these faults exist: a retried conditional put after a lost response
    fails its condition on the writer's own row."""
    aws.create_table("commits")
    # legacy mode: botocore's DynamoDB backoff starts at 50 ms (standard mode's at ~1 s).
    ddb = aws.boto3_client("dynamodb", config=Config(retries={"mode": "legacy", "max_attempts": 3}))
    aws.inject_fault("dynamodb", "PutItem", "apply_then_drop")
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        ddb.put_item(TableName="commits", Item=_item("k"), ConditionExpression=PUT_NEW)
    assert [r.status for r in aws.requests if r.operation == "PutItem"] == [0, 400]


def test_faults_are_consumed_in_order_and_retried_past(aws: LocalAWS) -> None:
    aws.create_table("commits")
    ddb = aws.boto3_client("dynamodb", config=Config(retries={"mode": "legacy", "max_attempts": 5}))
    throttle = aws.inject_fault("dynamodb", "PutItem", "throttle", times=2)
    error = aws.inject_fault("dynamodb", "*", "server_error")
    ddb.put_item(TableName="commits", Item=_item("k"))  # botocore retries past all three
    assert (throttle.triggered, error.triggered) == (2, 1)
    assert [(r.status, r.fault) for r in aws.requests if r.operation == "PutItem"] == [
        (400, "throttle"),
        (400, "throttle"),
        (500, "server_error"),
        (200, None),
    ]
    aws.inject_fault("*", "*", "server_error", times=5)
    aws.clear_faults()
    assert aws.faults == []
    ddb.get_item(TableName="commits", Key=_item("k"))


def test_s3_faults(aws: LocalAWS) -> None:
    bucket = aws.create_bucket(_name("fault"))
    s3 = aws.boto3_client("s3", config=NO_RETRIES)
    aws.inject_fault("s3", "PutObject", "throttle")
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert info.value.response["Error"]["Code"] == "SlowDown"
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    aws.inject_fault("s3", "PutObject", "server_error")
    with pytest.raises(ClientError, match="InternalError"):
        s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    aws.inject_fault("s3", "CopyObject", "apply_then_server_error")
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with pytest.raises(ClientError, match="InternalError"):
        s3.copy_object(Bucket=bucket, Key="k2", CopySource={"Bucket": bucket, "Key": "k"})
    assert s3.get_object(Bucket=bucket, Key="k2")["Body"].read() == b"x"
    aws.inject_fault("s3", "HeadObject", "throttle")
    with pytest.raises(ClientError) as info:
        s3.head_object(Bucket=bucket, Key="k")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    aws.inject_fault("s3", "PutObject", "apply_then_drop")
    with pytest.raises(ConnectionClosedError):
        s3.put_object(Bucket=bucket, Key="k3", Body=os.urandom(2 * 1024 * 1024))
    assert s3.head_object(Bucket=bucket, Key="k3")["ContentLength"] == 2 * 1024 * 1024


def test_fault_arguments_are_checked(aws: LocalAWS) -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        aws.inject_fault("dynamodb", "PutItem", "explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="times"):
        aws.inject_fault("dynamodb", "PutItem", "throttle", times=0)
    with pytest.raises(ValueError, match="DynamoDB"):
        aws.inject_fault("s3", "PutObject", "provisioned_throughput")
    status, headers, body = fault_response("throttle", "dynamodb", "POST")
    assert status == 400 and json.loads(body) == {
        "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
        "message": "Rate of requests exceeds the allowed throughput.",
    }
    assert ("Content-Type", "application/x-amz-json-1.0") in headers


# -- concurrency: many client processes --------------------------------------------

_WORKER = r"""
import fcntl, json, sys, boto3
from botocore.config import Config
from botocore.exceptions import ClientError
worker, keys, table, bucket = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
config = Config(retries={"mode": "standard", "max_attempts": 10})
ddb, s3 = boto3.client("dynamodb", config=config), boto3.client("s3", config=config)
print("ready", flush=True)
with open(sys.argv[5]) as gate:  # the test holds it locked until every client is ready
    fcntl.flock(gate, fcntl.LOCK_SH)
won = {"ddb": [], "s3": []}
for i in range(keys):
    try:
        ddb.put_item(
            TableName=table,
            Item={"base_uri": {"S": f"k{i}"}, "version": {"N": "1"}, "w": {"N": str(worker)}},
            ConditionExpression="attribute_not_exists(base_uri) AND attribute_not_exists(version)",
        )
        won["ddb"].append(i)
    except ClientError as e:
        if e.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
    try:
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=str(worker).encode(), IfNoneMatch="*")
        won["s3"].append(i)
    except ClientError as e:
        if e.response["Error"]["Code"] != "PreconditionFailed":
            raise
    s3.put_object(Bucket=bucket, Key=f"w{worker}/{i}", Body=b"x" * 512)
print(json.dumps(won), flush=True)
"""


def _race(
    aws: LocalAWS, processes: int, keys: int
) -> tuple[dict[int, dict[str, list[int]]], float]:
    table, bucket = aws.create_table(_name("race")), aws.create_bucket(_name("race"))
    env = aws.env(inherit=True)
    # Each client is a process of its own (forked from the pre-imported interpreter of
    # tests/support/python_children.py: boto3 is not imported again twenty times); they
    # all wait on a lock the test holds, and start together when it lets go.
    with tempfile.NamedTemporaryFile(prefix="race-gate-") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        procs = [
            start_python(["-c", _WORKER, str(w), str(keys), table, bucket, gate.name], env=env)
            for w in range(processes)
        ]
        try:
            # Every client is up (clients made) before anyone starts. Nothing follows
            # "ready" on a client's stdout before the lock is let go, so the line read
            # here leaves the rest for communicate().
            for p in procs:
                assert p.stdout.readline().strip() == "ready"
            started = time.monotonic()
            fcntl.flock(gate, fcntl.LOCK_UN)
            outputs = [p.communicate(timeout=120)[0] for p in procs]
            elapsed = time.monotonic() - started
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    assert [p.returncode for p in procs] == [0] * processes
    won = {w: json.loads(out.strip().splitlines()[-1]) for w, out in enumerate(outputs)}
    ddb = aws.boto3_client("dynamodb")
    s3 = aws.boto3_client("s3")
    for i in range(keys):
        ddb_winners = [w for w, got in won.items() if i in got["ddb"]]
        s3_winners = [w for w, got in won.items() if i in got["s3"]]
        assert len(ddb_winners) == 1, f"key {i}: DynamoDB winners {ddb_winners}"
        assert len(s3_winners) == 1, f"key {i}: S3 winners {s3_winners}"
        item = ddb.get_item(TableName=table, Key=_item(f"k{i}"), ConsistentRead=True)["Item"]
        assert item["w"] == {"N": str(ddb_winners[0])}
        body = s3.get_object(Bucket=bucket, Key=f"k{i}")["Body"].read()
        assert body == str(s3_winners[0]).encode()
    return won, elapsed


def test_processes_race_conditional_puts_exactly_one_winner(aws: LocalAWS) -> None:
    _race(aws, processes=8, keys=20)
    statuses = Counter((r.operation, r.status) for r in aws.requests)
    assert statuses[("PutItem", 200)] == 20 and statuses[("PutItem", 400)] == 7 * 20
    assert statuses[("PutObject", 412)] == 7 * 20


@pytest.mark.slow
def test_many_client_processes_all_complete(aws: LocalAWS) -> None:
    """12 clients at once, each with its own connection pool: nobody starves."""
    processes, keys = 12, 20
    aws.clear_requests()
    _, elapsed = _race(aws, processes=processes, keys=keys)
    served = sum(1 for r in aws.requests if r.operation in ("PutItem", "PutObject"))
    assert served == processes * keys * 3
    # Shown with -s; a rough figure for this machine, not an assertion.
    print(
        f"\nLocalAWS: {served} requests from {processes} processes in {elapsed:.1f}s "
        f"= {served / elapsed:.0f} requests/s"
    )


# -- command line and subprocess server -------------------------------------------


def test_cli_local_aws_serves_until_terminated() -> None:
    bucket = _name("cli")
    # The command in a child forked from the pre-imported interpreter of
    # tests/support/python_children.py, as `python -m s3ddb.cli.main` would run it.
    proc = start_python(
        ["-m", "s3ddb.cli.main", "local-aws", "--bucket", bucket, "--table", "commits",
         "--no-conditional-writes"],
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and int(url.rsplit(":", 1)[1]) > 0
        exports = [proc.stdout.readline().strip() for _ in range(7)]
        assert f"export AWS_ENDPOINT_URL={url}" in exports
        assert "export AWS_ACCESS_KEY_ID=testing" in exports
        assert "export AWS_REGION=us-east-1" in exports
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        s3.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
        s3.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")  # not conditional
        ddb = boto3.client(
            "dynamodb",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        assert ddb.list_tables()["TableNames"] == ["commits"]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped" in err


def _start_cli_local_aws(*flags: str) -> tuple[PythonChild, str]:
    """``s3ddb local-aws FLAGS`` in a child process (forked from the pre-imported
    interpreter of tests/support/python_children.py, as ``python -m s3ddb.cli.main``
    would run it), and the endpoint URL it announced."""
    proc = start_python(["-m", "s3ddb.cli.main", "local-aws", *flags])
    return proc, proc.stdout.readline().strip()


def _cli_clients(url: str) -> tuple[Any, Any]:
    import boto3

    settings: dict[str, Any] = {
        "endpoint_url": url,
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    return boto3.client("s3", **settings), boto3.client("dynamodb", **settings)


def _second_conditional_put_refused(s3: Any, bucket: str) -> bool:
    s3.put_object(Bucket=bucket, Key="probe", Body=b"1", IfNoneMatch="*")
    try:
        s3.put_object(Bucket=bucket, Key="probe", Body=b"2", IfNoneMatch="*")
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "PreconditionFailed"
        return True
    return False


@pytest.mark.parametrize(
    ("flags", "buckets", "tables", "conditional"),
    [
        # What the docs show: no conditional writes, their bucket and table.
        ((), ["my-bucket"], ["s3ddb_manifests"], False),
        (("--conditional-writes",), ["my-bucket"], ["s3ddb_manifests"], True),
        (
            ("--bucket", "bucket-1", "--bucket", "bucket-2", "--table", "t1"),
            ["bucket-1", "bucket-2"],
            ["t1"],
            False,
        ),
        (("--empty", "--table", "t1"), [], ["t1"], False),
        (("--empty",), [], [], False),
    ],
)
def test_cli_local_aws_defaults_serve_the_docs(
    flags: tuple[str, ...], buckets: list[str], tables: list[str], conditional: bool
) -> None:
    proc, url = _start_cli_local_aws(*flags)
    try:
        assert url.startswith("http://127.0.0.1:"), url
        s3, ddb = _cli_clients(url)
        assert sorted(b["Name"] for b in s3.list_buckets()["Buckets"]) == buckets
        assert ddb.list_tables()["TableNames"] == tables
        if buckets:
            assert _second_conditional_put_refused(s3, buckets[0]) is conditional
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert f"tables: {', '.join(tables) or 'none'}" in err


def test_cli_local_aws_refused_bucket_name_is_a_usage_error() -> None:
    done = run_python(["-m", "s3ddb.cli.main", "local-aws", "--bucket", "b1"], timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert (
        "s3ddb local-aws: error: cannot create the bucket 'b1' (--bucket): InvalidBucketName"
        in done.stderr
    )
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr


def test_cli_local_aws_help_documents_every_flag() -> None:
    done = run_python(["-m", "s3ddb.cli.main", "local-aws", "--help"], timeout=60)
    assert done.returncode == 0, done.stderr
    flags = ["--host", "--port", "--region", "--conditional-writes", "--bucket", "--table"]
    for flag in [*flags, "--no-conditional-writes", "--empty"]:
        assert flag in done.stdout
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "deployments.md")) as f:
        deployments = f.read()
    for flag in [*flags, "--empty"]:
        assert f"`{flag}" in deployments, f"{flag} is not documented in docs/deployments.md"


def test_serve_in_subprocess() -> None:
    with serve_in_subprocess(buckets=[_name("sub")], tables=["commits"]) as aws:
        assert aws.is_running and aws.endpoint_url.startswith("http://127.0.0.1:")
        assert len(aws.boto3_client("s3").list_buckets()["Buckets"]) == 1
        assert aws.boto3_client("dynamodb").list_tables()["TableNames"] == ["commits"]
    assert not aws.is_running


def test_missing_moto_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    moto_server.server_machinery.cache_clear()
    monkeypatch.setitem(sys.modules, "moto.moto_server.werkzeug_app", None)
    try:
        with pytest.raises(ImportError, match=r"pip install 's3ddb\[testing\]'"):
            LocalAWS().start()
    finally:
        monkeypatch.undo()
        moto_server.server_machinery.cache_clear()
