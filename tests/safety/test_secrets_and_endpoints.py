"""Credentials never leave: not in a repr, an error, a log record or CLI output. An
endpoint that cannot be reached is a typed error naming the service and the endpoint,
never "throttled"."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import (
    EndpointUnreachableError,
    ExternalStoreThrottledError,
    ExternalStoreUnreachableError,
    S3DDBError,
)
from s3ddb.io import AwsConfig, ObjectStore
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.python_children import run_python

SECRET = "PLANTED-s3cr3t-9f1c2e7d"
TOKEN = "PLANTED-t0ken-4b8a"
KEY_ID = "AKIAPLANTEDKEY0001"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _no_secret(text: str) -> None:
    for planted in (SECRET, TOKEN, KEY_ID):
        assert planted not in text, f"{planted} leaked in: {text[:500]}"


def _own_log(caplog: pytest.LogCaptureFixture) -> str:
    """s3ddb's log records (botocore's own DEBUG log shows signed requests; that is
    botocore's, and off unless a user turns it on)."""
    records = [r for r in caplog.records if r.name.split(".")[0] == "s3ddb"]
    return "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in records)


def _planted_options(endpoint: str) -> dict[str, str]:
    return {
        "endpoint_url": endpoint,
        "region": "us-east-1",
        "aws_access_key_id": KEY_ID,
        "aws_secret_access_key": SECRET,
        "aws_session_token": TOKEN,
    }


def test_reprs_never_show_credentials() -> None:
    so = _planted_options("http://127.0.0.1:1")
    config = AwsConfig.from_storage_options(so)
    store = ObjectStore(f"s3://{TEST_BUCKET}/x", so)
    for text in (repr(config), str(config), repr(store), repr(store.aws)):
        _no_secret(text)
    assert "explicit credentials" in repr(config)
    assert config.aws_secret_access_key == SECRET  # still there, only never shown


def test_unreachable_s3_is_typed_and_names_the_endpoint_without_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(EndpointUnreachableError) as info:
        s3ddb.write_dataset(
            pa.table({"a": [1]}),
            f"s3://{TEST_BUCKET}/unreachable",
            storage_options=_planted_options(endpoint),
        )
    message = str(info.value)
    assert endpoint.split("//")[1] in message and "S3" in message
    _no_secret(message)
    _no_secret(repr(info.value))
    _no_secret(_own_log(caplog))


def test_unreachable_dynamodb_is_typed_not_throttled(
    aws: Any, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    so = {**_planted_options(aws.endpoint_url), "dynamodb_endpoint": endpoint}
    caplog.set_level(logging.DEBUG)
    uri = f"s3+ddb://{TEST_BUCKET}/ddb-unreachable?ddbTableName={TEST_TABLE}"
    with pytest.raises(ExternalStoreUnreachableError) as info:
        s3ddb.write_dataset(pa.table({"a": [1]}), uri, storage_options=so)
    assert not isinstance(info.value, ExternalStoreThrottledError)
    assert isinstance(info.value, EndpointUnreachableError)
    message = str(info.value)
    assert endpoint.split("//")[1] in message and "DynamoDB" in message
    _no_secret(message)
    _no_secret(_own_log(caplog))


def test_cli_output_never_shows_credentials(aws: Any, tmp_path: Any) -> None:
    uri = f"s3+ddb://{TEST_BUCKET}/cli-secret?ddbTableName={TEST_TABLE}"
    so = aws.storage_options()
    s3ddb.write_dataset(pa.table({"a": [1, 2]}), uri, storage_options=so)
    env = {
        **aws.env(inherit=True),
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": TOKEN,
    }
    closed = f"http://127.0.0.1:{_closed_port()}"
    runs = [
        ["info", uri],
        ["history", uri],
        ["show", uri, "--format", "json"],
        ["info", uri, "--endpoint-url", closed],  # an error path
        ["info", f"s3+ddb://{TEST_BUCKET}/cli-secret?ddbTableName=missing_table"],
    ]
    outputs = []
    for argv in runs:
        done = run_python(["-m", "s3ddb.cli.main", *argv], env=env, cwd=os.getcwd(), timeout=300)
        outputs.append((argv, done.returncode, done.stdout + done.stderr))
    for _argv, _code, text in outputs:
        _no_secret(text)
    assert outputs[0][1] == 0 and outputs[3][1] != 0 and outputs[4][1] != 0
    assert "127.0.0.1" in outputs[3][2]


def test_every_unreachable_error_is_an_s3ddb_error() -> None:
    assert issubclass(EndpointUnreachableError, S3DDBError)
    assert issubclass(EndpointUnreachableError, ConnectionError)
    assert issubclass(ExternalStoreUnreachableError, EndpointUnreachableError)
