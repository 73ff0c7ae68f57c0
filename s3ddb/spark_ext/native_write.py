"""Appends and overwrites written by Spark's own Parquet writer, committed by s3ddb.

    s3ddb.spark_ext.write(df, uri, mode="append")

1. The driver pins the version the write reads and the schema (with field ids) the
   files will carry, as ``df.write.format("s3ddb")`` does.
2. Spark writes the rows with its JVM Parquet writer, columns tagged with their field
   ids (``parquet.field.id``), into a staging folder of the dataset,
   ``_spark_staging/<write id>/``, under Spark's own commit protocol: task attempts
   write under ``_temporary/``, and only committed tasks' files reach the folder, so
   files of failed or speculative attempts are never among them.
3. The driver reads the footers of the folder's files (row counts, field ids, column
   statistics), moves each file to ``data/<uuid>.parquet`` and commits one Append or
   Overwrite through the usual commit loop (rebasing over concurrent writers).
4. The staging folder is deleted, whatever happened. The moved files are deleted
   only if the commit definitely failed; after an unknown outcome they are kept.

The JVM must reach the dataset's files: local paths always; S3 datasets through the
cluster's own S3 connector, named by ``jvm_scheme`` (``s3a`` maps
``s3+ddb://bucket/prefix?...`` to ``s3a://bucket/prefix``). Otherwise the write goes
through the Python data source, and says so once.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

import s3ddb
from s3ddb.commit.failpoints import failpoint
from s3ddb.errors import CommitStateUnknownError, DataFileError, InvalidInputError
from s3ddb.format import layout
from s3ddb.format.fragment import DataFile, FragmentMetadata
from s3ddb.format.parquet_source import file_columns_by_id, read_footer
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.stats import (
    ColumnStatistics,
    FileStatistics,
    file_key,
    recorded_type,
    stored_bounds,
)
from s3ddb.io.arguments import check_int
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.uri import parse_uri
from s3ddb.spark_ext import _write
from s3ddb.spark_ext._options import SourceOptions

__all__ = ["STAGING_DIR", "WRITER_OPTIONS", "footer_statistics", "jvm_root_of", "write"]

log = logging.getLogger(__name__)

#: Where Spark writes before the driver moves committed files into ``data/``.
STAGING_DIR = layout.SPARK_STAGING_DIR

#: Spark writes timestamps as INT96 by default, which Arrow reads as nanoseconds; a
#: write with timestamp columns sets this in the session while it runs.
_SESSION_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}

#: Hadoop settings of every native write (writer options reach its Hadoop conf):
#: - footer min/max strings whole: a cluster may truncate them, and a truncated max
#:   is no upper bound we can check (over 4 KiB they are left out: only costs reads);
#: - FileOutputCommitter's algorithm 1: version 2 moves each task attempt's files into
#:   the folder when the task commits, so an attempt that fails midway through its
#:   commit, and its retry, may both leave files: rows written twice. (Clusters with
#:   S3A's committers do not use FileOutputCommitter; this changes nothing there.)
WRITER_OPTIONS = {
    "parquet.statistics.truncate.length": str(2**31 - 1),
    "mapreduce.fileoutputcommitter.algorithm.version": "1",
}

_fallback_said = False


def jvm_root_of(uri: str, jvm_scheme: str | None = None) -> str | None:
    """The dataset root as the JVM names it, or None if the JVM cannot reach it.

    Raises:
        InvalidURIError: ``uri`` is not a dataset URI.
    """
    parsed = parse_uri(uri)
    if parsed.storage_protocol == "file":
        return "file://" + parsed.path
    if parsed.storage_protocol == "s3" and jvm_scheme:
        return f"{jvm_scheme}://{parsed.path}"
    return None


def _with_field_ids(df: Any, schema: DatasetSchema) -> Any:
    from pyspark.sql import functions as F

    columns = [
        F.col(f"`{name}`").alias(name, metadata={"parquet.field.id": schema.field_id(name)})
        for name in df.columns
    ]
    return df.select(*columns)


def footer_statistics(metadata: pq.FileMetaData, data_file: DataFile) -> FileStatistics:
    """Statistics of the file's columns over all its rows, from the row groups' footer
    statistics, meaning exactly what the Python writer's mean
    (:func:`s3ddb.format.stats.stored_bounds`): for the same types (integers,
    booleans, floats, strings, dates; none for timestamps), with the same encoding.

    Where a footer cannot give the Python writer's bound, the bound is left out
    (unknown: the fragment is read, never wrongly skipped): a row group without
    statistics, a string that is not UTF-8, and floats with NaN (Parquet writers put
    NaN in a footer's max, while the Python writer's bounds leave NaN out).
    """
    arrow = metadata.schema.to_arrow_schema()
    by_id = file_columns_by_id(arrow)
    # Row groups index leaf columns: a top-level column is the leaf whose path is its
    # name (nested columns before it shift the positions).
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    columns = []
    for field_id in data_file.fields:
        name = by_id[field_id]
        t = arrow.field(name).type
        index = leaves.get(name)
        if index is not None and recorded_type(t):
            column = _column_statistics(metadata, index, field_id, t)
            if column is not None:
                columns.append(column)
    return FileStatistics(file_key(data_file.path), tuple(columns))


def _column_statistics(
    metadata: pq.FileMetaData, index: int, field_id: int, t: pa.DataType
) -> ColumnStatistics | None:
    """The statistics of leaf column ``index`` over all row groups (None: a row group
    has no null count, or values without bounds)."""
    lows: list[Any] = []
    highs: list[Any] = []
    nulls = 0
    readable = True
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        stats = group.column(index).statistics
        if stats is None or not stats.has_null_count:
            return None
        nulls += stats.null_count
        if stats.has_min_max:
            try:
                lows.append(stats.min)
                highs.append(stats.max)
            except UnicodeDecodeError:  # Spark strings may hold bytes that are not UTF-8
                readable = False
        elif stats.null_count != group.num_rows:
            return None  # values without bounds
    if not readable or (pa.types.is_floating(t) and any(math.isnan(v) for v in (*lows, *highs))):
        return ColumnStatistics(field_id, nulls, None, None)
    try:
        low, high = (min(lows), max(highs)) if lows else (None, None)
    except TypeError:  # row groups whose bounds are not of one kind
        return ColumnStatistics(field_id, nulls, None, None)
    return ColumnStatistics(field_id, nulls, *stored_bounds(t, low, high))


def _collect(
    store: ObjectStore, staging: str, fields: tuple[int, ...]
) -> list[tuple[str, FragmentMetadata]]:
    """(staged path, fragment) of every committed file Spark left in ``staging``.

    Raises:
        DataFileError: a file is not Parquet or lacks a column's field id.
    """
    found = []
    for meta in store.list(staging + "/"):
        name = meta.path[len(staging) + 1 :]
        if "/" in name or not name.endswith(".parquet") or name.startswith(("_", ".")):
            continue  # _SUCCESS, checksums, _temporary/ of unfinished attempts
        metadata = read_footer(store, meta.path, meta.size)
        if metadata.num_rows == 0:
            continue
        ids = file_columns_by_id(metadata.schema.to_arrow_schema())
        missing = sorted(set(fields) - set(ids))
        if missing:
            raise DataFileError(
                f"{store.url}/{meta.path}: Spark wrote no column with field id(s) {missing} "
                "(is spark.sql.parquet.fieldId.write.enabled off?)"
            )
        data_file = DataFile(
            path=layout.new_data_file_name(), fields=fields, file_size_bytes=meta.size
        )
        fragment = FragmentMetadata(
            id=0,
            files=(data_file,),
            physical_rows=metadata.num_rows,
            stats=(footer_statistics(metadata, data_file),),
        )
        found.append((meta.path, fragment))
    return found


def _move(store: ObjectStore, src: str, dst: str) -> None:
    if store.is_local:
        target = store.full_path(dst)
        os.makedirs(os.path.dirname(target), exist_ok=True)  # a new dataset has no data/
        os.replace(store.full_path(src), target)
        # Cleanup spares unreferenced files by age: this one's counts from now, as a
        # copy's would, not from when Spark wrote it.
        os.utime(target)
    else:
        store.copy(src, dst)
        store.delete(src)


def _remove_staging(store: ObjectStore, staging: str) -> None:
    def warn(path: str, exc: Exception) -> None:
        log.warning("s3ddb: could not delete %s/%s: %s", store.url, path, exc)

    from s3ddb.io.written_files import delete_written_files

    paths = [m.path for m in store.list(staging + "/")]
    delete_written_files(store, paths, on_failure=warn)
    if store.is_local:
        # Empty directories stay behind on a local file system; the shared parent
        # goes too once no other write uses it (rmdir refuses a non-empty one).
        folders = [f for f, _, _ in os.walk(store.full_path(staging), topdown=False)]
        for folder in [*folders, store.full_path(STAGING_DIR)]:
            try:
                os.rmdir(folder)
            except OSError:
                pass


def write(
    df: Any,
    uri: str,
    mode: Literal["append", "overwrite"] = "append",
    *,
    storage_options: Mapping[str, str] | None = None,
    jvm_scheme: str | None = None,
    max_rows_per_file: int | None = None,
) -> s3ddb.Dataset | None:
    """Write ``df`` to the dataset at ``uri`` with Spark's Parquet writer and commit
    one transaction (see the module docstring); an append to a missing dataset
    creates it.

    Returns the dataset at the committed version (None: an empty append committed
    nothing). Through the Python data source (the JVM cannot reach the files), the
    commit runs in a Python worker: the dataset returned is then the newest version
    after the write, which a concurrent writer may have passed.

    Raises:
        InvalidInputError: a bad ``mode``, or ``max_rows_per_file`` not None or
            an int >= 1.
        SchemaMismatchError: an append whose columns or types do not match.
        CommitConflictError: definitely not committed (its files are deleted).
        CommitStateUnknownError: the outcome is unknown (its files are kept).
    """
    global _fallback_said
    if mode not in ("append", "overwrite"):
        raise InvalidInputError(f"mode must be 'append' or 'overwrite', got {mode!r}")
    if max_rows_per_file is not None:
        # Spark takes 0 or less as "no limit" and fails late on text: say so now.
        check_int("max_rows_per_file", max_rows_per_file, minimum=1)
    options = dict(storage_options or {})
    root = jvm_root_of(uri, jvm_scheme)
    if root is None:
        if not _fallback_said:
            _fallback_said = True
            log.warning(
                "s3ddb: Spark cannot reach %s's files (pass jvm_scheme='s3a' if the "
                "cluster has an S3 connector); writing through the Python data source",
                parse_uri(uri).object_url,
            )
        writer = df.write.format("s3ddb").mode(mode).options(**options)
        if max_rows_per_file is not None:
            writer = writer.option("maxRowsPerFile", max_rows_per_file)
        writer.save(uri)
        return s3ddb.dataset(uri, storage_options=options)
    plan = _write.WritePlan.make(
        SourceOptions.parse({"path": uri, **options}), df.schema, mode == "overwrite"
    )
    store = plan.store()
    staging = f"{STAGING_DIR}/{plan.write_id}"
    fields = tuple(plan.schema.top_level_ids(df.columns))
    spark = df.sparkSession
    # The session setting is changed for this write only, and only when it matters.
    conf = _SESSION_CONF if "timestamp" in df.schema.simpleString() else {}
    saved = {k: spark.conf.get(k, None) for k in conf}
    moved: list[FragmentMetadata] = []
    try:
        for key, value in conf.items():
            spark.conf.set(key, value)
        writer = _with_field_ids(df, plan.schema).write.mode("overwrite")
        writer = writer.options(**WRITER_OPTIONS)
        if max_rows_per_file:
            writer = writer.option("maxRecordsPerFile", max_rows_per_file)
        writer.parquet(f"{root.rstrip('/')}/{staging}")
        for src, fragment in _collect(store, staging, fields):
            _move(store, src, layout.data_file_path(fragment.files[0].path))
            moved.append(fragment)
        failpoint("native_write.after_move")
    except BaseException:
        _write.delete_files(store, moved)
        raise
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
        _remove_staging(store, staging)
    try:
        return _write.commit_write(plan, [_write.FragmentsWritten(tuple(moved))])
    except CommitStateUnknownError:
        raise
    except Exception:
        # Definitely not committed (the commit loop deletes its files too; again is
        # harmless). An interrupt (KeyboardInterrupt...) may have come mid-claim: kept.
        _write.delete_files(store, moved)
        raise
    finally:
        # The outcome the commit recorded on the driver is for the data source's
        # abort phase; a native write has none, and decided above.
        _write.forget_outcome(plan.write_id)
