"""Keeping a copy of a dataset from its change feed (Spark), shared by the tests and
the streaming application of tests/support/stream_app.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def last_change_per_key(batch: Any) -> Any:
    """A batch of change rows as one row per ``id``: its last change (by version;
    within a version a row's delete comes before the insert replacing it, as a
    pre-image before its post-image), without the version and time columns."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    kind = F.col("_change_type")
    order = F.when(kind == "update_preimage", 0).when(kind == "delete", 1).otherwise(2)
    latest = Window.partitionBy("id").orderBy(F.col("_commit_version").desc(), order.desc())
    return (
        batch.where("_change_type != 'update_preimage'")
        .withColumn("_n", F.row_number().over(latest))
        .where("_n = 1")
        .drop("_n", "_commit_version", "_commit_timestamp")
    )


def copy_merger(target: str, application: str) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function applying each batch of change rows (``id``, the
    copied columns, ``_change_type``, ``_commit_version``) to ``target`` exactly once."""
    import s3ddb.spark_ext

    merge = s3ddb.spark_ext.merge_batches(
        target, "id", application,
        when_matched_update_all="source._change_type != 'delete'",
        when_matched_delete="source._change_type = 'delete'",
        when_not_matched_insert_all="source._change_type != 'delete'",
    )  # fmt: skip

    def apply(batch: Any, batch_id: int) -> None:
        merge(last_change_per_key(batch), batch_id)

    return apply
