"""SQL table functions: ``SELECT * FROM s3ddb_versions('<uri>')``, ``s3ddb_verify``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = [
    "VERIFY_SCHEMA",
    "VERSIONS_SCHEMA",
    "S3DDBVerify",
    "S3DDBVersions",
    "register_functions",
]

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


VERIFY_SCHEMA = "kind STRING, version BIGINT, path STRING, meaning STRING, fix STRING"


class S3DDBVerify:
    """``s3ddb_verify(uri [, options map [, grace seconds]])``: one row per problem
    ``s3ddb verify`` finds (none: the dataset is healthy). Objects younger than the grace
    period (default an hour) are not judged: a writer may be committing them."""

    def eval(
        self, uri: str, options: dict[str, str] | None = None, grace: float | None = None
    ) -> Iterator[tuple[Any, ...]]:
        from s3ddb.maintenance.verify import DEFAULT_GRACE_SECONDS, verify

        report = verify(
            uri,
            dict(options) if options else None,
            grace_seconds=DEFAULT_GRACE_SECONDS if grace is None else float(grace),
        )
        for p in report.problems:
            yield p.kind, p.version, p.path, p.meaning, p.fix


def register_functions(spark: Any) -> None:
    """Register s3ddb's table functions in ``spark``."""
    from pyspark.sql.functions import udtf

    spark.udtf.register("s3ddb_versions", udtf(S3DDBVersions, returnType=VERSIONS_SCHEMA))
    spark.udtf.register("s3ddb_verify", udtf(S3DDBVerify, returnType=VERIFY_SCHEMA))
