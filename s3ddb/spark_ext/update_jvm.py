"""Spark's ``update`` with its SQL in Spark and its rows written by Spark's Parquet writer.

``s3ddb.spark_ext.update(..., writer="jvm")`` runs this way where the JVM reaches the
dataset's files, and ``values`` and ``where`` are SQL text: two Spark jobs over the rows
of the fragments ``where`` may match (read by Spark's own Parquet reader, with each
row's fragment and position, as the merge reads its target:
:mod:`s3ddb.spark_ext.merge_target`):

1. the positions of the rows ``where`` holds for (NULL counts as false) are gathered
   by Spark into bitmaps of 32,768 rows per fragment
   (:func:`~s3ddb.spark_ext.merge_tasks.removed_buckets`), and tasks by fragment
   write the new deletion files
   (:class:`~s3ddb.spark_ext.merge_tasks.DeletionTask`);
2. the same rows, with each value computed as Spark SQL and cast to its column's
   type, are written by Spark's Parquet writer into ``data/``
   (:func:`~s3ddb.spark_ext.native_write.write_staged`).

The driver commits one Update that rewrites rows, as ``Dataset.update(rewrite="rows")``
plans it (values and predicate compiled by s3ddb, for the conflict checks of
concurrent commits), through the same commit loop. Otherwise (and with
``writer="auto"``, :data:`AUTO_WRITER_REASON`) the update runs as ``Dataset.update``
with its per-fragment work on executors.
"""

from __future__ import annotations

import logging
import pickle
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

import s3ddb
from s3ddb.expressions.compiled import compile_filter
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.observe.commit_metrics import add_operation_metrics
from s3ddb.operations import RowChangePlan, Update, UpdateMode
from s3ddb.scan.visible_rows import fragment_may_match
from s3ddb.spark_ext._types import quoted_name, spark_schema_of
from s3ddb.spark_ext.merge_jvm import evaluation_errors
from s3ddb.spark_ext.merge_target import target_frame
from s3ddb.spark_ext.merge_tasks import (
    FRAGMENT,
    RESULT_DDL,
    ROW,
    ROWS_PER_TASK,
    TARGET_PREFIX,
    DeletionTask,
    delete_change_files,
    deletion_tasks,
    removed_buckets,
)
from s3ddb.spark_ext.native_write import jvm_root_of, value_checks, write_staged
from s3ddb.spark_ext.scan_balance import balanced_scan_settings
from s3ddb.spark_ext.session_settings import session_settings
from s3ddb.versions.pinned import plan_and_commit, rows_landed_since
from s3ddb.writes.row_changes import compile_values, predicate_text

__all__ = ["AUTO_WRITER_REASON", "update_in_jvm", "update_refusal"]

log = logging.getLogger(__name__)


#: Why ``writer="auto"`` leaves an update's rows to Python tasks. Unlike a merge's
#: rows, an update's never pass from the JVM to Python: each task reads its
#: fragment's files with pyarrow and writes the changed rows itself, once, while
#: Spark's path scans the candidate files twice (positions, then rows). Measured
#: (docs/performance.md, "Spark updates by Python tasks"): 20,000,000 rows on
#: ``local[2]``, 10 % changed in 2.3 s against 3.7 s through Spark's writer, 50 % in
#: 4.1 s against 6.4 s, every row in 4.6 s against 10.0 s.
AUTO_WRITER_REASON = (
    'writer="auto": Python tasks read each fragment once and write its changed rows; '
    "Spark's writer would scan the files twice"
)


def update_refusal(
    ds: s3ddb.Dataset,
    values: Mapping[str, Any],
    where: Any,
    rewrite: str,
    jvm_scheme: str | None,
    writer: str,
) -> str | None:
    """Why the update does not run in the JVM (then Python tasks run it), or None;
    ``writer`` is one of :data:`~s3ddb.spark_ext.merge_jvm.WRITERS`."""
    if writer == "python":
        return 'writer="python" was asked for'
    if writer == "auto":
        return AUTO_WRITER_REASON
    if jvm_root_of(ds.uri, jvm_scheme) is None:
        return "the JVM cannot reach the dataset's files"
    if rewrite == "columns":
        return "rewrite='columns' writes column files"
    if ds.has_stable_row_ids:
        # Spark's writer cannot carry each changed row's id and creation version to
        # the file it lands in; the Python tasks keep them.
        return "the dataset has stable row ids"
    if not all(isinstance(v, str) for v in values.values()) or not (
        where is None or isinstance(where, str)
    ):
        return "a value or the condition is a pyarrow Expression, not SQL"
    names = list(ds.schema.names)
    if len({n.lower() for n in names}) != len(names):
        return "column names differ only in case"
    return None


def update_in_jvm(
    spark: Any,
    ds: s3ddb.Dataset,
    values: Mapping[str, str],
    where: str | None,
    *,
    jvm_scheme: str | None,
    conflict_retries: int | None,
    retry_timeout: float | None,
) -> dict[str, int] | None:
    """Run the update (see the module doc) and commit it; None when Spark cannot
    write its rows as the dataset stores them (the caller then runs the Python path;
    nothing was written).

    Raises:
        As ``Dataset.update``: ColumnNotFoundError, InvalidExpressionError,
        SchemaMismatchError (a bad value or condition, or a value that does not fit
        its column: nothing is left), RetryableCommitConflictError,
        TooMuchWriteContentionError.
    """
    root = jvm_root_of(ds.uri, jvm_scheme)
    assert root is not None
    local = ds.handler.store.protocol == "file"
    scheme_map = {"s3": jvm_scheme} if jvm_scheme else ({} if local else None)
    refused: list[str] = []

    def plan(manifest: Manifest) -> tuple[Update | None, None]:
        op, problem = _plan(spark, ds, manifest, values, where, root, scheme_map)
        if problem is not None:
            refused.append(problem)
        add_operation_metrics(update_writer="jvm")
        return op, None

    prior = ds.last_commit
    plan_and_commit(ds, "update", plan, conflict_retries, retry_timeout)
    if refused:
        log.info("s3ddb update: rows written by Python tasks: %s", refused[-1])
        return None
    return {"num_rows_updated": rows_landed_since(ds, prior, Update)}


def _plan(
    spark: Any,
    ds: s3ddb.Dataset,
    manifest: Manifest,
    values: Mapping[str, str],
    where: str | None,
    root: str,
    scheme_map: dict[str, str] | None,
) -> tuple[Update | None, str | None]:
    """The Update for ``manifest``'s version, or (None, why) when Spark cannot write
    the rows as the dataset stores them."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    schema = manifest.schema
    arrow = schema.arrow
    exprs = compile_values(values, arrow)
    compiled = compile_filter(where, arrow) if where is not None else None
    pruner = compiled.may_match if compiled is not None else None
    candidates = [f for f in manifest.fragments if fragment_may_match(f, schema, pruner)]
    if not candidates:
        return None, None
    names = list(arrow.names)
    target_spark = spark_schema_of(
        pa.schema([f.with_name(TARGET_PREFIX + f.name) for f in arrow]), ds.uri
    )
    read_schema = StructType(
        [*target_spark.fields, StructField(FRAGMENT, LongType()), StructField(ROW, LongType())]
    )
    store = ds.handler.store
    frame = target_frame(
        spark,
        ds.checkout_version(manifest.version),
        store,
        manifest,
        candidates,
        names,
        pruner,
        (),
        read_schema,
        scheme_map,
    )
    from pyspark.errors import PySparkException

    rows = frame.select(
        *[F.col(quoted_name(TARGET_PREFIX + n)).alias(n) for n in names], FRAGMENT, ROW
    )
    types = spark_schema_of(arrow, ds.uri)
    try:
        if where is not None:
            rows = rows.where(F.coalesce(F.expr(where).cast("boolean"), F.lit(False)))
        changed = rows.select(
            *[
                F.expr(values[n]).cast(types[n].dataType).alias(n) if n in values else F.col(n)
                for n in names
            ]
        )
    except PySparkException as exc:  # SQL s3ddb reads but Spark does not
        return None, f"Spark SQL cannot evaluate it ({str(exc).splitlines()[0][:200]})"
    checks = value_checks(changed.schema, arrow, ds.uri)
    if checks is None:
        return None, "a value's Spark type is not stored as the dataset's column"
    fragments = {f.id: f for f in candidates}
    touched = deletion_tasks(len(candidates), spark.sparkContext.defaultParallelism)
    what = f"update of {ds.uri}"
    # Both jobs scan the candidates: in tasks that fill the cores to the end.
    sizes = [d.file_size_bytes for f in candidates for d in f.files]
    balanced = balanced_scan_settings(spark, sizes)
    with evaluation_errors(what), session_settings(spark, balanced):
        results = (
            removed_buckets(rows)
            .repartition(touched, "fid")
            .mapInArrow(DeletionTask(store, manifest, fragments), RESULT_DDL)
            .collect()
        )
    counted = sum(
        len(BitMap.deserialize(data)) for kind, _fid, data in results if kind == "affected"
    )
    deletions = [pickle.loads(data) for kind, _fid, data in results if kind == "deletion"]
    if not counted:
        return None, None
    written: list[FragmentMetadata] = []
    try:
        with evaluation_errors(what), session_settings(spark, balanced):
            written = write_staged(
                changed,
                store,
                root,
                schema,
                uuid.uuid4().hex,
                checks,
                max_rows_per_file=ROWS_PER_TASK,
            )
        if sum(f.physical_rows for f in written) != counted:
            raise s3ddb.errors.DataFileError(
                f"Spark wrote {sum(f.physical_rows for f in written)} updated row(s) into "
                f"{ds.uri}, its address job found {counted}; nothing is committed"
            )
    except BaseException:
        delete_change_files(store, written, results)
        raise
    affected = {fid: BitMap.deserialize(d) for kind, fid, d in results if kind == "affected"}
    gone = sorted(fid for kind, fid, _d in results if kind == "gone")
    predicate = compiled.predicate if compiled is not None else None
    op = Update(
        removed_fragment_ids=tuple(gone),
        updated_fragments=tuple(sorted(deletions, key=lambda f: f.id)),
        new_fragments=tuple(written),
        mode=UpdateMode.REWRITE_ROWS,
        predicate=predicate_text(where) if where is not None else "",
        affected_rows=affected,
        plan=RowChangePlan(
            predicate_expr=predicate if predicate is not None else pc.scalar(True),
            value_exprs=exprs,
        ),
    )
    return op, None
