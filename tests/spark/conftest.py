"""Fixtures of the Spark tests: one local SparkSession (one JVM) for the whole folder,
which runs in one pytest worker (the ``spark`` xdist group), and the local endpoint's
storage options and a fresh ``s3+ddb://`` URI per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import TEST_BUCKET, TEST_TABLE


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Spark's Python workers run the interpreter PYSPARK_PYTHON names (else python3).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    import s3ddb.spark_ext

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("s3ddb-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    session = s3ddb.spark_ext.configure(builder).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def opts(aws: Any) -> dict[str, str]:
    return dict(aws.storage_options())


@pytest.fixture
def uri(aws: Any) -> str:
    return f"s3+ddb://{TEST_BUCKET}/spark-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test of this folder that starts its Spark applications in child processes and
    never asks for the shared session needs no place in the ``spark`` group: each gets
    a group of its own, so with ``-n`` it may run beside the group on the other worker
    (the group's tests run one after another, the longest chain of the suite). xdist
    joins every ``xdist_group`` name of an item into one group name; this hook runs
    before it."""
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark and mark.args == ("spark",) and "spark" not in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group(f"spark-apart-{item.nodeid}"))
