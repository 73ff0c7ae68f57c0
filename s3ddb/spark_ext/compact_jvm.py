"""Spark's ``compact`` reading and writing with Spark's own Parquet reader and writer.

Where the JVM reaches the dataset's files, ``s3ddb.spark_ext.compact`` plans its
groups of fragments as ``optimize.compact_files`` does (:func:`plan_groups`), then
runs one Spark job: every group's visible rows, read by Spark's Parquet reader with
each row's fragment and position (deleted rows anti-joined away: as the merge reads
its target, :mod:`s3ddb.spark_ext.merge_target`), are partitioned so that task ``g``
writes group ``g`` (:mod:`s3ddb.spark_ext.partition_keys`), sorted by (fragment order
in the group, row position), and written by Spark's Parquet writer into one folder
per group, at most ``target_rows_per_fragment`` rows per file. The files of a group,
taken in the order of their names, hold its rows in order: the same ``Rewrite`` with
its row mapping (the rows each old fragment copied) as the Python compaction commits,
so deletes committed meanwhile still rebase onto the new fragments.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.errors import DataFileError
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_evaluation import all_rows
from s3ddb.maintenance.compaction import (
    CompactionMetrics,
    CompactionOptions,
    plan_groups,
    reserve_fragment_ids,
)
from s3ddb.operations import Rewrite, RewriteGroup
from s3ddb.spark_ext._types import quoted_name, spark_schema_of
from s3ddb.spark_ext.merge_jvm import evaluation_errors
from s3ddb.spark_ext.merge_target import target_frame
from s3ddb.spark_ext.merge_tasks import FRAGMENT, ROW, TARGET_PREFIX
from s3ddb.spark_ext.native_plan import native_type_problem
from s3ddb.spark_ext.native_write import jvm_root_of, value_checks, write_staged_groups
from s3ddb.spark_ext.partition_keys import partition_keys
from s3ddb.versions.pinned import plan_and_commit

__all__ = ["compact_in_jvm", "compact_refusal"]

log = logging.getLogger(__name__)

_GROUP, _ORDER, _TASK = "__s3ddb_group", "__s3ddb_order", "__s3ddb_task"


def compact_refusal(ds: s3ddb.Dataset, jvm_scheme: str | None) -> str | None:
    """Why Spark's reader and writer cannot compact this dataset (then Python tasks
    do), or None."""
    if jvm_root_of(ds.uri, jvm_scheme) is None:
        return "the JVM cannot reach the dataset's files"
    if ds.has_stable_row_ids:
        # Spark's writer cannot carry each row's id and row versions to its new
        # fragment; the Python tasks keep them.
        return "the dataset has stable row ids"
    names = list(ds.schema.names)
    if len({n.lower() for n in names}) != len(names):
        return "column names differ only in case"
    for field in ds.schema:
        problem = native_type_problem(field.type)
        if problem is not None:
            return f"column {field.name!r} has {problem}"
    if value_checks(spark_schema_of(ds.schema, ds.uri), ds.schema, ds.uri) is None:
        return "a column's type is not stored by Spark as the dataset stores it"
    return None


def compact_in_jvm(
    spark: Any,
    ds: s3ddb.Dataset,
    options: CompactionOptions,
    *,
    jvm_scheme: str | None,
    conflict_retries: int | None,
    retry_timeout: float | None,
) -> CompactionMetrics:
    """Compact ``ds`` (see the module doc) and commit the Rewrite.

    Raises:
        DataFileError: the files Spark wrote do not hold the groups' rows (nothing is
            committed; they are deleted).
        RetryableCommitConflictError, TooMuchWriteContentionError: as
            ``optimize.compact_files``.
    """
    root = jvm_root_of(ds.uri, jvm_scheme)
    assert root is not None
    local = ds.handler.store.protocol == "file"
    scheme_map = {"s3": jvm_scheme} if jvm_scheme else ({} if local else None)

    def plan(manifest: Manifest) -> tuple[Rewrite | None, CompactionMetrics]:
        return _plan(spark, ds, manifest, options, root, scheme_map)

    before = ds.last_commit
    planned = plan_and_commit(ds, "compact_files", plan, conflict_retries, retry_timeout)
    committed = ds.last_commit
    if committed is None or committed is before:
        return planned
    op = committed.transaction.operation
    assert isinstance(op, Rewrite)
    return _metrics(op.groups)


def _metrics(groups: Any) -> CompactionMetrics:
    return CompactionMetrics(
        fragments_removed=sum(len(g.old_fragments) for g in groups),
        fragments_added=sum(len(g.new_fragments) for g in groups),
        files_removed=sum(len(f.files) for g in groups for f in g.old_fragments),
        files_added=sum(len(f.files) for g in groups for f in g.new_fragments),
    )


def _plan(
    spark: Any,
    ds: s3ddb.Dataset,
    manifest: Manifest,
    options: CompactionOptions,
    root: str,
    scheme_map: dict[str, str] | None,
) -> tuple[Rewrite | None, CompactionMetrics]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    groups = plan_groups(manifest, options)
    if not groups:
        return None, CompactionMetrics()
    schema = manifest.schema
    arrow = schema.arrow
    names = list(arrow.names)
    store = ds.handler.store
    members = [f for group in groups for f in group]
    target_spark = spark_schema_of(
        pa.schema([f.with_name(TARGET_PREFIX + f.name) for f in arrow]), ds.uri
    )
    read_schema = StructType(
        [*target_spark.fields, StructField(FRAGMENT, LongType()), StructField(ROW, LongType())]
    )
    frame = target_frame(
        spark,
        ds.checkout_version(manifest.version),
        store,
        manifest,
        members,
        names,
        None,
        (),
        read_schema,
        scheme_map,
    )
    keys = partition_keys(len(groups))
    place = spark.createDataFrame(
        pa.table(
            {
                FRAGMENT: pa.array([f.id for f in members], pa.int64()),
                _GROUP: pa.array([g for g, group in enumerate(groups) for _ in group], pa.int32()),
                _ORDER: pa.array([i for group in groups for i in range(len(group))], pa.int32()),
                # Group g goes to task g: numbered 0, 1, ... the groups could share a task
                # (the benchmark's two went to one) while the other core idles.
                _TASK: pa.array([k for k, group in zip(keys, groups) for _ in group], pa.int32()),
            }
        )
    )
    rows = (
        frame.join(F.broadcast(place), FRAGMENT)
        .repartition(len(groups), _TASK)
        .sortWithinPartitions(_GROUP, _ORDER, ROW)
        .select(*[F.col(quoted_name(TARGET_PREFIX + n)).alias(n) for n in names], _GROUP)
    )
    checks = value_checks(spark_schema_of(arrow, ds.uri), arrow, ds.uri) or {}
    with evaluation_errors(f"compaction of {ds.uri}"):
        written = write_staged_groups(
            rows,
            store,
            root,
            schema,
            uuid.uuid4().hex,
            checks,
            max_rows_per_file=options.target_rows_per_fragment,
            group_column=_GROUP,
            groups=len(groups),
        )
    every = [f for group in written for f in group]
    try:
        copied = _copied(ds, manifest, groups)
        for group, new, rows_copied in zip(groups, written, copied):
            expected = sum(len(c) for _fid, c in rows_copied)
            if sum(f.physical_rows for f in new) != expected:
                raise DataFileError(
                    f"Spark wrote {sum(f.physical_rows for f in new)} row(s) for the group of "
                    f"fragments {[f.id for f in group]} of {ds.uri}, which hold {expected}; "
                    "nothing is committed"
                )
        count = sum(len(new) for new in written)
        next_id = (
            reserve_fragment_ids(ds.handler, manifest, ds.commit_config)(count) if count else 0
        )
    except BaseException:
        from s3ddb.format.fragment_metadata import data_file_paths
        from s3ddb.io.written_files import delete_written_files

        delete_written_files(store, data_file_paths(every))
        raise
    numbered = []
    for group, new, rows_copied in zip(groups, written, copied):
        ids = tuple(f.with_id(next_id + i) for i, f in enumerate(new))
        next_id += len(ids)
        numbered.append(RewriteGroup(tuple(group), ids, tuple(rows_copied)))
    return Rewrite(tuple(numbered)), _metrics(numbered)


def _copied(
    ds: s3ddb.Dataset, manifest: Manifest, groups: list[list[FragmentMetadata]]
) -> list[list[tuple[int, Any]]]:
    """Per group, per old fragment: (its id, the row offsets it copied: every row but
    the deleted ones)."""
    files = ds.checkout_version(manifest.version).files()
    out = []
    for group in groups:
        part = []
        for fragment in group:
            rows = all_rows(fragment.physical_rows)
            if fragment.deletion_file is not None:
                rows -= read_deleted_rows(files, fragment)
            part.append((fragment.id, rows))
        out.append(part)
    return out
