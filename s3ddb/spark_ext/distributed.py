"""Row changes and maintenance with the per-fragment work on Spark executors.

Each function plans exactly as its single-process counterpart (``Dataset.delete``,
``update``, ``optimize.compact_files``) and commits one transaction
from the driver, with the same conflict rules, key checks and retry contract
(docs/conflicts.md): only the work per fragment (finding rows, rewriting rows or
columns, compacting a group) runs as Spark tasks, which read and write the dataset's
files themselves and send back metadata.

merge_insert keeps its source on the executors: :mod:`s3ddb.spark_ext.merge`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import pyarrow.compute as pc

import s3ddb
from s3ddb.maintenance.compaction import DEFAULT_TARGET_ROWS_PER_FRAGMENT, CompactionMetrics
from s3ddb.observe.commit_metrics import adding_operation_metrics
from s3ddb.tasks.fragment_map import mapped_by

log = logging.getLogger(__name__)

__all__ = [
    "TASKS_PER_CORE",
    "SparkMapper",
    "compact",
    "delete",
    "update",
]

T = TypeVar("T")

#: At most this many tasks per executor core for one planning stage.
TASKS_PER_CORE = 4


class SparkMapper:
    """Runs ``fn`` over items as Spark tasks; results in the items' order."""

    def __init__(self, spark: Any) -> None:
        self._context = spark.sparkContext

    def __call__(self, fn: Callable[[Any], T], items: list[Any]) -> list[T]:
        slices = max(1, min(len(items), self._context.defaultParallelism * TASKS_PER_CORE))
        return self._context.parallelize(items, slices).map(fn).collect()  # type: ignore[no-any-return]


def _open(uri: str, storage_options: dict[str, Any] | None) -> s3ddb.Dataset:
    return s3ddb.dataset(uri, storage_options=storage_options)


def delete(
    spark: Any,
    uri: str,
    predicate: str | pc.Expression,
    *,
    storage_options: dict[str, Any] | None = None,
    conflict_retries: int | None = None,
    retry_timeout: float | None = None,
) -> dict[str, int]:
    """:meth:`s3ddb.Dataset.delete` on the newest version, rows found on executors.

    Returns ``{"num_deleted_rows": n}``; raises as ``Dataset.delete`` does.
    """
    ds = _open(uri, storage_options)
    with mapped_by(SparkMapper(spark)):
        return ds.delete(predicate, conflict_retries=conflict_retries, retry_timeout=retry_timeout)


def update(
    spark: Any,
    uri: str,
    values: dict[str, str | pc.Expression],
    where: str | pc.Expression | None = None,
    *,
    rewrite: Literal["auto", "rows", "columns"] = "auto",
    storage_options: dict[str, Any] | None = None,
    conflict_retries: int | None = None,
    retry_timeout: float | None = None,
    jvm_scheme: str | None = None,
    writer: Literal["auto", "jvm", "python"] = "auto",
) -> dict[str, int]:
    """:meth:`s3ddb.Dataset.update` on the newest version; executors find the rows
    and write the changed rows or columns.

    ``writer`` says who writes the changed rows: ``"auto"`` and ``"python"``, Python
    tasks, each reading its fragment's files once (faster: see
    :data:`~s3ddb.spark_ext.update_jvm.AUTO_WRITER_REASON`); ``"jvm"``, Spark's own
    Parquet writer where the JVM reaches the files (a local path; ``s3://`` objects
    when ``jvm_scheme`` names the cluster's S3 connector), ``values`` and ``where``
    are SQL text Spark evaluates, and ``rewrite`` is not ``"columns"``
    (:mod:`s3ddb.spark_ext.update_jvm`), Python tasks otherwise.

    Returns ``{"num_rows_updated": n}``; raises as ``Dataset.update`` does, and
    InvalidInputError for a ``writer`` not named above.
    """
    from s3ddb.spark_ext.merge_jvm import check_writer
    from s3ddb.spark_ext.update_jvm import update_in_jvm, update_refusal

    check_writer(writer, "update")
    ds = _open(uri, storage_options)
    refused = update_refusal(ds, values, where, rewrite, jvm_scheme, writer)
    if refused is None:
        done = update_in_jvm(
            spark,
            ds,
            {k: str(v) for k, v in values.items()},
            None if where is None else str(where),
            jvm_scheme=jvm_scheme,
            conflict_retries=conflict_retries,
            retry_timeout=retry_timeout,
        )
        if done is not None:
            return done
    else:
        log.info("s3ddb update: rows written by Python tasks: %s", refused)
    with mapped_by(SparkMapper(spark)), adding_operation_metrics(update_writer="python"):
        return ds.update(
            values,
            where,
            rewrite=rewrite,
            conflict_retries=conflict_retries,
            retry_timeout=retry_timeout,
        )


def compact(
    spark: Any,
    uri: str,
    *,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS_PER_FRAGMENT,
    materialize_deletions: bool = True,
    materialize_deletions_threshold: float = 0.1,
    storage_options: dict[str, Any] | None = None,
    conflict_retries: int | None = None,
    retry_timeout: float | None = None,
    jvm_scheme: str | None = None,
) -> CompactionMetrics:
    """:meth:`s3ddb.maintenance.compaction.DatasetOptimizer.compact_files` on the newest version,
    one Spark task per group of fragments compacted together.

    Where the JVM reaches the files (a local path; ``s3://`` objects when
    ``jvm_scheme`` names the cluster's S3 connector) and Spark stores every column as
    the dataset does, Spark's own Parquet reader and writer move the rows
    (:mod:`s3ddb.spark_ext.compact_jvm`); otherwise Python tasks do."""
    from s3ddb.maintenance.compaction import CompactionOptions
    from s3ddb.spark_ext.compact_jvm import compact_in_jvm, compact_refusal

    ds = _open(uri, storage_options)
    options = CompactionOptions(
        target_rows_per_fragment, materialize_deletions, materialize_deletions_threshold
    )
    refused = compact_refusal(ds, jvm_scheme)
    if refused is None:
        return compact_in_jvm(
            spark,
            ds,
            options,
            jvm_scheme=jvm_scheme,
            conflict_retries=conflict_retries,
            retry_timeout=retry_timeout,
        )
    log.info("s3ddb compact: rows written by Python tasks: %s", refused)
    with mapped_by(SparkMapper(spark)):
        return ds.optimize.compact_files(
            target_rows_per_fragment=target_rows_per_fragment,
            materialize_deletions=materialize_deletions,
            materialize_deletions_threshold=materialize_deletions_threshold,
            conflict_retries=conflict_retries,
            retry_timeout=retry_timeout,
        )
