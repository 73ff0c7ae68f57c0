"""SQL table functions: ``SELECT * FROM s3ddb_versions('<uri>')``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

VERSIONS_SCHEMA = (
    "version BIGINT, timestamp TIMESTAMP, operation STRING, metadata MAP<STRING, STRING>"
)


class S3DDBVersions:
    """``s3ddb_versions(uri [, storage options map])``: one row per version, oldest first."""

    def eval(self, uri: str, options: dict[str, str] | None = None) -> Iterator[tuple[Any, ...]]:
        import s3ddb

        ds = s3ddb.dataset(uri, storage_options=dict(options) if options else None)
        for info in ds.versions():
            yield info.version, info.timestamp, info.operation, dict(info.metadata)


def register_functions(spark: Any) -> None:
    """Register s3ddb's table functions in ``spark``."""
    from pyspark.sql.functions import udtf

    spark.udtf.register("s3ddb_versions", udtf(S3DDBVersions, returnType=VERSIONS_SCHEMA))
