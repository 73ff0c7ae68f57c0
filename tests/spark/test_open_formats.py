"""Spark writes to a dataset that publishes Iceberg and Delta: native writes
(``s3ddb.spark_ext.write``) and the ``format("s3ddb")`` data source commit through
the same path as Python writers, so every version they make is published, and
pyiceberg, deltalake and DuckDB read what s3ddb reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.open_formats.readers import (
    deltalake_read,
    duckdb_read,
    pyiceberg_read,
    rows_of,
    same_rows,
)

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _df(spark: Any, start: int, n: int) -> Any:
    return spark.range(start, start + n, numPartitions=2).selectExpr(
        "id",
        "CAST(id % 10 AS INT) AS k",
        "CONCAT('s', CAST(id AS STRING)) AS s",
        "TIMESTAMP_SECONDS(id) AS t",
    )


def test_spark_writes_are_published(spark: Any, tmp_path: Path) -> None:
    import s3ddb.spark_ext

    uri = str(tmp_path / "ds")
    first = _df(spark, 0, 100).toArrow()
    first = first.cast(
        pa.schema(
            [f.with_type(pa.timestamp("us", "UTC")) if f.name == "t" else f for f in first.schema]
        )
    )
    s3ddb.write_dataset(first, uri, open_formats=["iceberg", "delta"])
    s3ddb.spark_ext.write(_df(spark, 100, 50), uri, mode="append")
    _df(spark, 150, 20).write.format("s3ddb").mode("append").save(uri)
    ds = s3ddb.dataset(uri)
    ds.delete("k = 3")
    ds = s3ddb.dataset(uri)
    assert ds.version == 4
    for version in range(1, 5):
        expected = ds.checkout_version(version).to_table()
        want = rows_of(expected)
        metadata = f"{uri}/metadata/v{version}.metadata.json"
        assert same_rows(pyiceberg_read(metadata), expected) == want, version
        assert same_rows(deltalake_read(uri, version), expected) == want, version
        got = duckdb_read(f"select * from iceberg_scan('{metadata}')")
        assert same_rows(got, expected) == want, version
