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
