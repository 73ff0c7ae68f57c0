"""Fixtures of the Spark tests: one local SparkSession (one JVM) per pytest worker that
runs a test asking for it (with ``-n 2`` the folder's tests spread over both workers),
and the local endpoint's storage options and a fresh ``s3+ddb://`` URI per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import TEST_BUCKET, TEST_TABLE

#: Every JVM of the Spark tests (the shared session's, and the applications tests start
#: in child processes, which inherit this environment) compiles with C1 only and
#: collects garbage on one thread: short runs on small data, where C2's compilations and
#: parallel GC's threads cost more CPU than they save (the JVM of
#: tests/spark/test_native_read.py spent 47% less). Performance flags only: the
#: same code runs with the same results. A PYSPARK_SUBMIT_ARGS of one's own wins.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options '{JVM_OPTIONS}' pyspark-shell")


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
