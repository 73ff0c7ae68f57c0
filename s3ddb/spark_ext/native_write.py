"""Appends and overwrites written by Spark's own Parquet writer, committed by s3ddb.

    s3ddb.spark_ext.write(df, uri, mode="append")

1. The driver pins the version the write reads and the schema (with field ids) the
   files will carry, as ``df.write.format("s3ddb")`` does. An append checks, in Spark
   while it writes, each value the dataset's column is stricter about than Spark
   (nulls in a NOT NULL column, timestamps finer than the column's unit): the job
   fails with SchemaMismatchError at the first, before anything is committed.
2. Spark writes the rows with its JVM Parquet writer, columns tagged with their field
   ids (``parquet.field.id``), into a staging folder of the dataset,
   ``_spark_staging/<write id>/``, under Spark's own commit protocol: task attempts
   write under ``_temporary/``, and only committed tasks' files reach the folder, so
   files of failed or speculative attempts are never among them.
3. The driver reads the footers of the folder's files (row counts, field ids, column
   statistics), moves each file to ``data/<uuid>.parquet`` and commits one Append or
   Overwrite through the usual commit loop (rebasing over concurrent writers).
4. The write's staging folder is deleted, whatever happened (a failure there is
   logged: it must not stop the commit of the moved files); the shared
   ``_spark_staging/`` stays. The moved files are deleted only if the commit
   definitely failed; after an unknown outcome they are kept.

The JVM must reach the dataset's files, and the driver must list what the executors
wrote: local paths in local mode, or a file system shared by the driver and every
executor; S3 datasets through the cluster's own S3 connector, named by
``jvm_scheme`` (``s3a`` maps ``s3+ddb://bucket/prefix?...`` to ``s3a://bucket/prefix``).
Otherwise the write goes through the Python data source, and says so once.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

import s3ddb
from s3ddb.arguments import check_int
from s3ddb.commit.failpoints import failpoint
from s3ddb.errors import (
    CommitStateUnknownError,
    DataFileError,
    InvalidInputError,
    SchemaMismatchError,
)
from s3ddb.format import layout
from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
from s3ddb.format.parquet_source import file_columns_by_id, read_footer
from s3ddb.format.rowgroups import top_level_leaves
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.stats import (
    ColumnStatistics,
    FileStatistics,
    file_key,
    recorded_type,
    stored_bounds,
)
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.uri import parse_uri
from s3ddb.spark_ext import _write
from s3ddb.spark_ext._options import SourceOptions
from s3ddb.spark_ext._types import arrow_schema_of, quoted_name
from s3ddb.spark_ext.session_settings import session_settings

__all__ = [
    "OBSERVED_WAIT",
    "STAGING_DIR",
    "WRITER_OPTIONS",
    "footer_statistics",
    "jvm_root_of",
    "observed_value",
    "raised_message",
    "value_checks",
    "write",
    "write_staged",
    "write_staged_groups",
]

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

#: A column's check: a Spark condition true for a value that may not be appended,
#: and what the error says then.
_Check = tuple[Any, str]

#: The instants a timestamp[ns] holds, in microseconds since the epoch.
_NS_RANGE_MICROS = (-(2**63) // 1000 + 1, (2**63 - 1) // 1000)

#: Seconds the driver waits, after Spark's job, for the count of rows Spark wrote
#: (it is there when the job returns; the wait only bounds a Spark that never says).
OBSERVED_WAIT = 5.0

#: How many microseconds one unit of a timestamp coarser than Spark's holds.
_UNIT_MICROS = {"s": 1_000_000, "ms": 1_000}

#: Starts the message of a Spark job failed by a check (found in Spark's error).
_CHECK_MARK = "s3ddb-value-check: "


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


def _with_field_ids(
    df: Any, schema: DatasetSchema, checks: Mapping[str, list[_Check]], keep: str | None = None
) -> Any:
    """``df``'s columns tagged with their field ids, each failing the job at the first
    value that breaks one of its ``checks``; ``keep`` (a column not in the dataset)
    passes as it is."""
    from pyspark.sql import functions as F

    columns = []
    for name in df.columns:
        column = F.col(quoted_name(name))
        if name == keep:
            columns.append(column)
            continue
        checked: Any = None
        for condition, message in checks.get(name, []):
            fail = F.raise_error(F.lit(_CHECK_MARK + message))
            when = F.when if checked is None else checked.when
            checked = when(condition, fail)
        if checked is not None:
            column = checked.otherwise(column)
        metadata = {"parquet.field.id": schema.field_id(name)}
        columns.append(column.alias(name, metadata=metadata))
    return df.select(*columns)


def value_checks(
    spark_schema: Any, target: pa.Schema, where: str
) -> dict[str, list[_Check]] | None:
    """What each column's values must pass, in Spark, to be appended to a dataset of
    ``target`` as the Python data source would accept them (its
    :func:`~s3ddb.spark_ext._types.conform_to_dataset`, already checked for the
    types): no nulls in a non-nullable column, and timestamps that fit a coarser (or
    narrower) unit. Columns Spark stores as the dataset has them need nothing, so the
    usual append costs nothing more. None: a column needs a check this does not
    express in Spark (a nested type that differs from the dataset's, a timestamp_ntz
    for a nanosecond column).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType

    checks: dict[str, list[_Check]] = {}
    for field, arrow in zip(spark_schema.fields, arrow_schema_of(spark_schema), strict=True):
        want = target.field(field.name)
        column = F.col(quoted_name(field.name))
        said = f"column {field.name!r} of {where}"
        found: list[_Check] = []
        if field.nullable and not want.nullable:
            found.append((column.isNull(), f"{said} has nulls but is not nullable"))
        have = arrow.type
        if pa.types.is_timestamp(have) and pa.types.is_timestamp(want.type):
            unit = want.type.unit
            micros = F.unix_micros(column)
            if unit in _UNIT_MICROS:
                found.append(
                    (
                        micros % _UNIT_MICROS[unit] != 0,
                        f"{said} is {want.type}: a value has a finer part than a {unit}",
                    )
                )
            elif unit == "ns":
                if isinstance(field.dataType, TimestampNTZType):
                    return None  # its instant depends on the session's time zone
                low, high = _NS_RANGE_MICROS
                found.append(
                    (
                        (micros < low) | (micros > high),
                        f"{said} is {want.type}: a value is out of its range (years 1677 to 2262)",
                    )
                )
        elif not _stored_alike(have, want.type):
            return None
        if found:
            checks[field.name] = found
    return checks


def _stored_alike(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether every value Spark writes as ``have`` reads back as ``want`` (the
    reader casts: string to large_string, date32 to date64...)."""
    if have.equals(want):
        return True
    pairs = (
        (pa.types.is_string, pa.types.is_large_string),
        (pa.types.is_binary, pa.types.is_large_binary),
        (pa.types.is_date32, pa.types.is_date64),
    )
    return any(a(have) and b(want) for a, b in pairs)


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
    leaves = top_level_leaves(metadata, arrow)
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

    failpoint("native_write.remove_staging")
    paths = [m.path for m in store.list(staging + "/")]
    delete_written_files(store, paths, on_failure=warn)
    if store.is_local:
        # Empty directories stay behind on a local file system. The shared parent
        # stays: a write starting now may be creating its own folder in it.
        for folder, _, _ in os.walk(store.full_path(staging), topdown=False):
            try:
                os.rmdir(folder)
            except OSError:
                pass


def _python_write(
    df: Any,
    uri: str,
    mode: str,
    options: dict[str, str],
    max_rows_per_file: int | None,
) -> s3ddb.Dataset:
    """Write through the ``s3ddb`` Python data source; the newest version after it."""
    writer = df.write.format("s3ddb").mode(mode).options(**options)
    if max_rows_per_file is not None:
        writer = writer.option("maxRowsPerFile", max_rows_per_file)
    writer.save(uri)
    return s3ddb.dataset(uri, storage_options=options)


def _counted(df: Any, write_id: str) -> tuple[Any, Any]:
    """(observation, ``df`` observed by it): Spark counts the rows it writes, in the
    JVM, as they pass (no extra job)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(f"s3ddb_write_{write_id}")
    return observation, df.observe(observation, F.count(F.lit(1)).alias("rows"))


def observed_value(observation: Any, name: str) -> int | None:
    """The value ``name`` Spark observed (an aggregate of an ``observe`` over a
    DataFrame an action ran), or None if it has not reported it within
    :data:`OBSERVED_WAIT` seconds of the job's end (then nothing is checked: Spark
    reports it as the job ends, but a wait without bound could hang the write)."""
    try:
        future = observation._jo.future()  # PySpark's blocking get has no time limit
        deadline = time.monotonic() + OBSERVED_WAIT
        while not future.isCompleted():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        value = observation.get[name]
        return None if value is None else int(value)
    except Exception as exc:  # Spark Connect, or a version without this API
        log.debug("s3ddb: no observed %s from Spark: %s", name, exc)
        return None


def _observed_rows(observation: Any) -> int | None:
    """The rows Spark counted (see :func:`observed_value`)."""
    return observed_value(observation, "rows")


def _check_row_count(
    observation: Any, collected: list[tuple[str, FragmentMetadata]], where: str
) -> None:
    """Check that the staging folder's files hold every row Spark wrote.

    Raises:
        DataFileError: they hold fewer (or more): the driver does not see the files
            the executors wrote.
    """
    written = _observed_rows(observation)
    found = sum(fragment.physical_rows for _, fragment in collected)
    if written is not None and written != found:
        raise DataFileError(
            f"Spark wrote {written} row(s) into {where}, the driver finds {found} there; "
            "nothing is committed. On a cluster, a local path must be one file system "
            "shared by the driver and every executor"
        )


def _run(writer: Any, path: str) -> None:
    """Run Spark's Parquet write of ``writer`` into ``path``.

    Raises:
        SchemaMismatchError: a value failed a check of :func:`value_checks` (Spark
            aborted the job: no task's files reached ``path``).
    """
    try:
        writer.parquet(path)
    except Exception as exc:
        message = raised_message(exc, _CHECK_MARK)
        if message is None:
            raise
        raise SchemaMismatchError(f"data does not match the schema: {message}") from None


def raised_message(exc: BaseException, mark: str) -> str | None:
    """The message a job's ``raise_error`` gave, from the failure ``exc`` Spark
    reported, when it starts with ``mark``: its first line after the mark, without
    Spark's SQLSTATE; None when ``exc`` carries no such message."""
    text = str(exc)
    if mark not in text:
        return None
    return text.split(mark, 1)[1].splitlines()[0].split(" SQLSTATE:")[0]


def write_staged(
    df: Any,
    store: ObjectStore,
    root: str,
    schema: DatasetSchema,
    write_id: str,
    checks: Mapping[str, list[Any]] | None = None,
    *,
    max_rows_per_file: int | None = None,
) -> list[FragmentMetadata]:
    """Write ``df`` (the dataset's columns, by name) with Spark's Parquet writer into
    ``<root>/_spark_staging/<write_id>/`` (``root``: the dataset root as the JVM names
    it, :func:`jvm_root_of`), columns tagged with ``schema``'s field ids and each value
    checked by ``checks`` (:func:`value_checks`); then move every committed file into
    ``data/`` of ``store``. Returns their fragments (id 0, not yet committed: the
    caller commits them or deletes them). The staging folder is removed whatever
    happens; on an error no moved file is left.

    Raises:
        SchemaMismatchError: a value failed a check (Spark aborted the job).
        DataFileError: the staging folder does not hold the rows Spark wrote, or a
            file lacks a field id.
    """
    groups = write_staged_groups(
        df, store, root, schema, write_id, checks, max_rows_per_file=max_rows_per_file
    )
    return groups[0]


def write_staged_groups(
    df: Any,
    store: ObjectStore,
    root: str,
    schema: DatasetSchema,
    write_id: str,
    checks: Mapping[str, list[Any]] | None = None,
    *,
    max_rows_per_file: int | None = None,
    group_column: str | None = None,
    groups: int = 1,
) -> list[list[FragmentMetadata]]:
    """:func:`write_staged`, with ``df``'s rows split by ``group_column`` (integers
    0 to ``groups`` - 1, not written): Spark writes each group's rows into a folder of
    its own, and the fragments come back per group, each group's in the order of the
    names Spark gave its files (one task writing a group's rows in order makes them
    the rows' order). Without ``group_column``, one group of every row.

    Raises:
        As :func:`write_staged`.
    """
    staging = f"{STAGING_DIR}/{write_id}"
    written = [c for c in df.columns if c != group_column]
    fields = tuple(schema.top_level_ids(written))
    spark = df.sparkSession
    # The session setting is changed for this write only, and only when it matters.
    conf = _SESSION_CONF if "timestamp" in df.schema.simpleString() else {}
    moved: list[FragmentMetadata] = []
    out: list[list[FragmentMetadata]] = []
    try:
        tagged = _with_field_ids(df, schema, checks or {}, keep=group_column)
        observation, counted = _counted(tagged, write_id)
        writer = counted.write.mode("overwrite").options(**WRITER_OPTIONS)
        if max_rows_per_file:
            writer = writer.option("maxRecordsPerFile", max_rows_per_file)
        if group_column is not None:
            writer = writer.partitionBy(group_column)
        with session_settings(spark, conf):
            _run(writer, f"{root.rstrip('/')}/{staging}")
        folders = (
            [f"{staging}/{group_column}={g}" for g in range(groups)]
            if group_column is not None
            else [staging]
        )
        collected = [
            sorted(_collect(store, folder, fields), key=lambda c: c[0]) for folder in folders
        ]
        _check_row_count(
            observation, [c for group in collected for c in group], f"{store.url}/{staging}"
        )
        for group in collected:
            out.append([])
            for src, fragment in group:
                _move(store, src, layout.data_file_path(fragment.files[0].path))
                moved.append(fragment)
                out[-1].append(fragment)
        failpoint("native_write.after_move")
    except BaseException:
        _write.delete_files(store, moved)
        raise
    finally:
        try:
            _remove_staging(store, staging)
        except Exception as exc:
            # Left behind, the folder costs storage only (cleanup and verify find it);
            # failing here would orphan the moved files of a write about to commit.
            log.warning("s3ddb: could not remove %s/%s: %s", store.url, staging, exc)
    return out


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
        DataFileError: the staging folder does not hold the rows Spark wrote (the
            driver does not see the executors' files); nothing is committed.
        SchemaMismatchError: an append whose columns or types do not match, or
            whose values do not fit the dataset's columns (nulls in a non-nullable
            column, a timestamp finer than the column's unit): nothing is committed,
            and no file is left.
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
        return _python_write(df, uri, mode, options, max_rows_per_file)
    plan = _write.WritePlan.make(
        SourceOptions.parse({"path": uri, **options}), df.schema, mode == "overwrite"
    )
    checks: dict[str, list[_Check]] = {}
    if plan.read_version and not plan.overwrite:
        found = value_checks(df.schema, plan.schema.arrow, uri)
        if found is None:
            log.warning(
                "s3ddb: a column of the DataFrame differs from %s's in a way the native "
                "write does not check (a nested type, or nanoseconds from timestamp_ntz); "
                "writing through the Python data source, which checks each value",
                parse_uri(uri).object_url,
            )
            return _python_write(df, uri, mode, options, max_rows_per_file)
        checks = found
    store = plan.store()
    moved = write_staged(
        df, store, root, plan.schema, plan.write_id, checks, max_rows_per_file=max_rows_per_file
    )
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
