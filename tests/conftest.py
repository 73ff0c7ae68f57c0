"""Shared fixtures."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest


@pytest.fixture
def local_uri(tmp_path: Path) -> str:
    return str(tmp_path / "ds")


@pytest.fixture
def memory_uri() -> Iterator[str]:
    name = f"memory://test-{uuid.uuid4().hex}"
    yield name
    import fsspec

    fs = fsspec.filesystem("memory")
    root = "/" + name.split("://", 1)[1]
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture(params=["local", "memory"])
def any_uri(request: pytest.FixtureRequest, local_uri: str, memory_uri: str) -> str:
    return local_uri if request.param == "local" else memory_uri


def make_table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids]})


# --- the local AWS endpoint (S3 without conditional writes + DynamoDB) -----------------

TEST_BUCKET = "s3ddb-test"
TEST_TABLE = "s3ddb_test_manifests"


@pytest.fixture(scope="session")
def aws() -> Iterator[object]:
    """One local endpoint per test process; S3 behaves as a store without conditional
    writes, as the external-store protocol must not need them."""
    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig
    from s3ddb.testing import LocalAWS

    with LocalAWS(conditional_writes=False) as server:
        server.create_bucket(TEST_BUCKET)
        create_table(TEST_TABLE, AwsConfig.from_storage_options(server.storage_options()))
        yield server


@pytest.fixture
def ddb_uri(aws: object) -> str:
    return f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
