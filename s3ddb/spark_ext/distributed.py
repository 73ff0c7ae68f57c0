"""Row changes and maintenance with the per-fragment work on Spark executors.

Each function plans exactly as its single-process counterpart (``Dataset.delete``,
``update``, ``merge_insert``, ``optimize.compact_files``) and commits one transaction
from the driver, with the same conflict rules, key checks and retry contract
(docs/conflicts.md): only the work per fragment (finding rows, rewriting rows or
columns, compacting a group) runs as Spark tasks, which read and write the dataset's
files themselves and send back metadata.

merge_insert's source DataFrame is collected to the driver as Arrow (the key checks
and the join with the scanned target rows run there); the target is scanned on the
executors, and only its rows whose key the source holds come back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

import s3ddb
from s3ddb.io.fragment_map import mapped_by
from s3ddb.maintenance.compaction import DEFAULT_TARGET_ROWS_PER_FRAGMENT, CompactionMetrics

__all__ = [
    "TASKS_PER_CORE",
    "SparkMapper",
    "compact",
    "delete",
    "merge_insert",
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
) -> dict[str, int]:
    """:meth:`s3ddb.Dataset.update` on the newest version; executors find the rows
    and write the changed rows or columns.

    Returns ``{"num_rows_updated": n}``; raises as ``Dataset.update`` does.
    """
    ds = _open(uri, storage_options)
    with mapped_by(SparkMapper(spark)):
        return ds.update(
            values,
            where,
            rewrite=rewrite,
            conflict_retries=conflict_retries,
            retry_timeout=retry_timeout,
        )


def merge_insert(
    spark: Any,
    uri: str,
    source: Any,
    on: str | list[str],
    *,
    when_matched_update_all: bool | str = True,
    when_not_matched_insert_all: bool = True,
    when_not_matched_by_source_delete: bool | str = False,
    storage_options: dict[str, Any] | None = None,
    conflict_retries: int | None = None,
    retry_timeout: float | None = None,
) -> dict[str, int]:
    """Upsert ``source`` (a Spark DataFrame, or anything ``merge_insert`` takes) into
    the dataset by the key columns ``on``.

    ``when_matched_update_all`` / ``when_not_matched_by_source_delete`` take True or
    a condition (SQL text), as the builder methods of the same names do.

    Returns ``{"num_inserted_rows", "num_updated_rows", "num_deleted_rows"}``; raises
    as :meth:`s3ddb.writes.merge_insert.MergeInsertBuilder.execute` does.
    """
    ds = _open(uri, storage_options)
    data = _arrow_of(source, ds.schema)
    builder = ds.merge_insert(on)
    if when_matched_update_all:
        condition = when_matched_update_all if isinstance(when_matched_update_all, str) else None
        builder = builder.when_matched_update_all(condition)
    if when_not_matched_insert_all:
        builder = builder.when_not_matched_insert_all()
    if when_not_matched_by_source_delete:
        flag = when_not_matched_by_source_delete
        builder = builder.when_not_matched_by_source_delete(flag if isinstance(flag, str) else None)
    if conflict_retries is not None:
        builder = builder.conflict_retries(conflict_retries)
    if retry_timeout is not None:
        builder = builder.retry_timeout(retry_timeout)
    with mapped_by(SparkMapper(spark)):
        return builder.execute(data)


def _arrow_of(source: Any, schema: pa.Schema) -> Any:
    """A Spark DataFrame as an Arrow table with the dataset's types where Spark's
    types stand for them (e.g. timestamps); anything else is passed through."""
    to_arrow = getattr(source, "toArrow", None)
    if to_arrow is None:
        return source
    from s3ddb.spark_ext._types import conform_to_dataset

    table = to_arrow()
    try:
        return conform_to_dataset(table, schema, where="merge_insert source")
    except s3ddb.SchemaMismatchError:
        return table  # execute() reports the mismatch with the dataset's URI


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
) -> CompactionMetrics:
    """:meth:`s3ddb.maintenance.compaction.DatasetOptimizer.compact_files` on the newest version,
    one Spark task per group of fragments compacted together."""
    ds = _open(uri, storage_options)
    with mapped_by(SparkMapper(spark)):
        return ds.optimize.compact_files(
            target_rows_per_fragment=target_rows_per_fragment,
            materialize_deletions=materialize_deletions,
            materialize_deletions_threshold=materialize_deletions_threshold,
            conflict_retries=conflict_retries,
            retry_timeout=retry_timeout,
        )
