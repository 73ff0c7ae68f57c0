"""Native reads: a pinned version as an ordinary DataFrame over Spark's Parquet reader.

    df = s3ddb.spark_ext.read(spark, uri, version=3)
    s3ddb.spark_ext.create_temp_view(spark, "events", uri)   # SELECT ... FROM events

The driver pins a version and plans it (:mod:`s3ddb.spark_ext.native_plan`); Spark
then reads the data files itself, so it prunes columns, pushes filters into row
groups and vectorizes, and no row passes through Python. Deleted rows are removed by
position: the rows of files with deletions are anti-joined (broadcast) with their
deleted ``(_metadata.file_name, _metadata.row_index)`` pairs, which tasks read from
the deletion files (the driver holds none of them); files without deletions are read
plain. Fragments stored in several data files are joined back on
(fragment, row index); columns are renamed from each file's own names (found by
field id) and cast where a column was widened.

Where the JVM cannot read the files (``memory://``, a scheme without a Hadoop
connector, a type Spark's reader decodes differently), the read falls back to the
``s3ddb`` Python data source at the same version and warns once per dataset and
reason; ``native=True`` raises instead.
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from s3ddb.dataset import Dataset, dataset
from s3ddb.errors import InvalidInputError, UnsupportedOperationError
from s3ddb.format.bases import FileResolver
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.redact import redact_url
from s3ddb.spark_ext._types import quoted_name, spark_schema_of
from s3ddb.spark_ext.native_plan import (
    DEFAULT_SCHEME_MAP,
    Layout,
    NativePlan,
    Shape,
    plan_native_read,
)
from s3ddb.spark_ext.session_settings import session_settings

__all__ = [
    "BROADCAST_MAX_DELETED",
    "KEY_COLUMNS",
    "DeletedRows",
    "create_temp_view",
    "read",
    "scan_layout",
    "to_dataframe",
]

logger = logging.getLogger(__name__)

#: Columns the plan adds while joining (never in the result).
KEY_COLUMNS = ("__s3ddb_file", "__s3ddb_pos", "__s3ddb_fragment", "__s3ddb_file_size")
_FILE, _POS, _FRAGMENT, _SIZE = KEY_COLUMNS

#: Up to this many deleted positions (counted from the manifest) in one group of
#: fragments read alike are broadcast to the scanning tasks, as Spark does with a
#: small table: the scan is not shuffled. More are left to Spark's choice of join.
BROADCAST_MAX_DELETED = 4_000_000


@dataclass(frozen=True)
class DeletedRows:
    """The deleted rows of fragments (given by id, one column) as (fragment id, row
    offset) pairs named ``fragment`` and ``row``, read from their deletion files on
    the executors. Pickles to executors.

    Raises (in the task):
        ManifestCorruptError, StoredMetadataError: a deletion file is missing or bad.
    """

    store: ObjectStore
    manifest: Manifest
    fragment: str = "fragment"
    row: str = "row"

    @property
    def ddl(self) -> str:
        """The Spark schema of what it yields."""
        return f"`{self.fragment}` long, `{self.row}` long"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files = FileResolver.for_manifest(self.store, self.manifest)
        fragments = {f.id: f for f in self.manifest.fragments}
        schema = pa.schema([pa.field(self.fragment, pa.int64()), pa.field(self.row, pa.int64())])
        for batch in batches:
            for fid in batch.column(0).to_pylist():
                deleted = read_deleted_rows(files, fragments[fid])
                rows = np.fromiter(deleted, np.int64, len(deleted))
                yield pa.RecordBatch.from_arrays(
                    [pa.array(np.full(len(rows), fid, np.int64)), pa.array(rows)], schema=schema
                )


#: Per-read Parquet options: never skip a file silently, whatever the session says,
#: and take the given files as they are (no partition columns from directory names).
_SCAN_OPTIONS = {
    "ignoreMissingFiles": "false",
    "ignoreCorruptFiles": "false",
    "recursiveFileLookup": "true",
    "mergeSchema": "false",
}

# (dataset URI, reason) pairs already warned about in this process.
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn_once(uri: str, reason: str, detail: str = "") -> None:
    """Say once per process, dataset and ``reason`` that ``uri`` is read through the
    Python data source (``detail`` adds what Spark said)."""
    with _warned_lock:
        if (uri, reason) in _warned:
            return
        _warned.add((uri, reason))
    shown = f"{reason} ({detail})" if detail else reason
    message = f"s3ddb reads {redact_url(uri)} through the Python data source, not natively: {shown}"
    logger.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _open(
    uri: str,
    version: int | None,
    tag: str | None,
    timestamp: Any,
    storage_options: dict[str, Any] | None,
) -> Dataset:
    given = (("version", version), ("tag", tag), ("timestamp", timestamp))
    pins = [n for n, v in given if v is not None]
    if len(pins) > 1:
        raise InvalidInputError(f"give one of version, tag, timestamp; got {pins}")
    if tag is not None:
        return dataset(uri, tag, storage_options)
    if timestamp is not None:
        return dataset(uri, storage_options=storage_options, asof=timestamp)
    return dataset(uri, version, storage_options)


def read(
    spark: Any,
    uri: str,
    version: int | None = None,
    *,
    tag: str | None = None,
    timestamp: Any = None,
    storage_options: dict[str, Any] | None = None,
    columns: list[str] | None = None,
    native: bool | None = None,
    scheme_map: Mapping[str, str] | None = None,
) -> Any:
    """The rows of one version of the dataset at ``uri`` as a DataFrame read by
    Spark's own Parquet reader; equal to ``spark.read.format("s3ddb")`` at that
    version.

    Args:
        spark: the SparkSession.
        uri: the dataset, as :func:`s3ddb.dataset` takes it.
        version, tag, timestamp: which version (at most one; default the newest when
            called). The DataFrame keeps reading that version.
        storage_options: as :func:`s3ddb.dataset` takes them (the Python fallback
            gets them as data source options).
        columns: the columns to read, in this order (default all).
        native: None falls back to the Python data source, with a warning, where the
            JVM cannot read the files; True raises instead; False always reads
            through the Python data source.
        scheme_map: object store scheme -> the scheme the JVM reads it by (default
            :data:`~s3ddb.spark_ext.native_plan.DEFAULT_SCHEME_MAP`, ``s3`` -> ``s3a``).

    Raises:
        InvalidInputError: more than one of version, tag, timestamp; ``columns`` not
            a list of names (a comma-separated string is the data source option's
            form, not this one's) or empty, ``native`` not None or a bool,
            ``scheme_map`` not a mapping of scheme names.
        ColumnNotFoundError: an unknown column.
        UnsupportedOperationError: ``native=True`` and the JVM cannot read the files.
        DataFileError, ManifestCorruptError: a data or deletion file is missing or
            does not match the manifest.
    """
    _check_read_arguments(columns, native, scheme_map)
    ds = _open(uri, version, tag, timestamp, storage_options)
    mapping = dict(DEFAULT_SCHEME_MAP if scheme_map is None else scheme_map)
    if native is False:
        return _python_read(spark, uri, ds, storage_options, columns)
    # Deleted positions are read by the tasks, never gathered on the driver.
    plan = plan_native_read(ds, columns, mapping, deleted_positions=False)
    if plan.refused is None:
        plan.refused = _reserved_name(plan)
    if plan.refused is not None:
        if native:
            raise UnsupportedOperationError(
                f"cannot read {redact_url(uri)} natively: {plan.refused}"
            )
        _warn_once(uri, plan.refused)
        return _python_read(spark, uri, ds, storage_options, columns)
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        return to_dataframe(spark, plan, DeletedRows(ds.handler.store, ds.manifest))
    except (PySparkException, Py4JJavaError) as exc:  # the JVM cannot list or open the files
        reason = "Spark cannot open its data files"
        if native:
            raise UnsupportedOperationError(
                f"cannot read {redact_url(uri)} natively: {reason}: {_first_line(exc)}"
            ) from exc
        _warn_once(uri, reason, _first_line(exc))
        return _python_read(spark, uri, ds, storage_options, columns)


def _check_read_arguments(columns: Any, native: Any, scheme_map: Any) -> None:
    """Raises InvalidInputError for arguments of :func:`read` of the wrong kind."""
    if columns is not None and (
        isinstance(columns, (str, bytes)) or not all(isinstance(c, str) for c in columns)
    ):
        raise InvalidInputError(
            f"columns must be a list of column names, got {columns!r:.200}"
            + (f" (write {columns.split(',')!r:.200})" if isinstance(columns, str) else "")
        )
    if columns is not None and len(columns) == 0:
        # The Python data source has no form for "no column": refused on both paths.
        raise InvalidInputError("columns must name at least one column (None reads all)")
    if native is not None and not isinstance(native, bool):
        raise InvalidInputError(f"native must be None, True or False, got {native!r:.100}")
    if scheme_map is not None and not (
        isinstance(scheme_map, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in scheme_map.items())
    ):
        raise InvalidInputError(
            f"scheme_map must map store schemes to JVM schemes (e.g. {{'s3': 's3a'}}), "
            f"got {scheme_map!r:.200}"
        )


def _reserved_name(plan: NativePlan) -> str | None:
    """Why a column name would clash with the names this read relies on, or None:
    Spark's ``_metadata`` column is hidden by a data column of that name, and the
    join keys must not be a column's."""
    reserved = {"_metadata", *KEY_COLUMNS}
    names = {f.name for f in plan.columns}
    names.update(c.physical for shape in plan.shapes for slot in shape.slots for c in slot)
    clash = sorted(n for n in names if n.lower() in reserved)
    return f"column {clash[0]!r} has a name the native read reserves" if clash else None


def create_temp_view(spark: Any, name: str, uri: str, **options: Any) -> Any:
    """:func:`read` ``uri`` (with ``options`` as :func:`read` takes them) and register
    the DataFrame as the temporary view ``name`` (replacing one of that name), for
    SQL: ``SELECT ... FROM name``. The view reads the version pinned now, whatever is
    committed later; call again to move it. Returns the DataFrame.

    Raises:
        InvalidInputError: ``name`` is not a string; or as :func:`read`.
    """
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"the view name must be a non-empty string, got {name!r:.100}")
    df = read(spark, uri, **options)
    df.createOrReplaceTempView(name)
    return df


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _python_read(
    spark: Any,
    uri: str,
    ds: Dataset,
    storage_options: dict[str, Any] | None,
    columns: list[str] | None,
) -> Any:
    reader = spark.read.format("s3ddb").option("version", str(ds.version))
    for key, value in (storage_options or {}).items():
        reader = reader.option(key, str(value))
    if columns is not None:
        ds_columns = set(ds.schema.names)
        missing = [c for c in columns if c not in ds_columns]
        if missing:
            from s3ddb.errors import ColumnNotFoundError

            raise ColumnNotFoundError(f"no column(s) {missing} in {uri}")
        reader = reader.option("columns", ",".join(columns))
    return reader.load(uri)


def _spark_type(t: pa.DataType, name: str) -> Any:
    return spark_schema_of(pa.schema([pa.field(name, t)]), name).fields[0].dataType


def scan_layout(
    spark: Any, layout: Layout, paths: list[str], keys: bool, sizes: bool = False
) -> Any:
    """One Spark Parquet scan of ``paths``, projected to the dataset's names and
    types for the columns of ``layout``, with the file name and row index if
    ``keys`` (columns :data:`KEY_COLUMNS` ``[0]`` and ``[1]``), and the file's size
    if ``sizes`` too (``[3]``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    schema = StructType(
        [StructField(c.physical, _spark_type(c.physical_type, c.physical)) for c in layout]
    )
    df = _read_parquet(spark, schema, paths)
    if not keys and all(c.name == c.physical for c in layout):
        return df  # the file's names are the dataset's: nothing to rename
    projected = []
    for c in layout:
        column = F.col(quoted_name(c.physical))
        projected.append(column.alias(c.name))
    if keys:
        projected.append(F.col("_metadata.file_name").alias(_FILE))
        projected.append(F.col("_metadata.row_index").alias(_POS))
        if sizes:
            projected.append(F.col("_metadata.file_size").alias(_SIZE))
    return df.select(*projected) if projected else df


#: Spark's setting above which it lists a scan's paths with a Spark job.
_PARALLEL_LISTING = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def _read_parquet(spark: Any, schema: Any, paths: list[str]) -> Any:
    """Spark's Parquet scan of ``paths`` (files) with ``schema``. Local files are
    listed by the driver, however many: Spark would list more than 32 paths with a
    job of its own (about a second on two cores, for what a few ``stat`` calls do);
    remote paths keep Spark's choice, which spreads the requests over executors."""
    reader = spark.read.schema(schema).options(**_SCAN_OPTIONS)
    if not all(p.startswith(("file:", "/")) for p in paths):
        return reader.parquet(*paths)
    with session_settings(spark, {_PARALLEL_LISTING: str(max(32, len(paths) + 1))}):
        return reader.parquet(*paths)


def _without_deleted(spark: Any, df: Any, shape: Shape, deleted_rows: DeletedRows) -> Any:
    """``df`` (with file and position keys) without the deleted rows of ``shape``'s
    fragments: tasks read their positions from the deletion files, and Spark
    anti-joins them (no position reaches the driver)."""
    from pyspark.sql import functions as F

    parts = [p[0] for p in shape.fragments]
    mapping = spark.createDataFrame(
        pa.table(
            {
                _FILE: pa.array([p.name for p in parts], pa.string()),
                deleted_rows.fragment: pa.array([p.fragment_id for p in parts], pa.int64()),
            }
        )
    )
    tasks = max(1, min(len(parts), spark.sparkContext.defaultParallelism * 4))
    deleted = (
        spark.createDataFrame([(p.fragment_id,) for p in parts], "fid long")
        .repartition(tasks)
        .mapInArrow(deleted_rows, deleted_rows.ddl)
        .join(F.broadcast(mapping), deleted_rows.fragment)
        .select(_FILE, F.col(deleted_rows.row).alias(_POS))
    )
    manifest = {f.id: f for f in deleted_rows.manifest.fragments}
    count = 0
    for p in parts:
        deletion_file = manifest[p.fragment_id].deletion_file
        count += deletion_file.num_deleted_rows if deletion_file is not None else 0
    if count <= BROADCAST_MAX_DELETED:
        deleted = F.broadcast(deleted)
    return df.join(deleted, [_FILE, _POS], "left_anti")


def _shape_frame(spark: Any, shape: Shape, deleted_rows: DeletedRows) -> Any:
    """The visible rows of the fragments of ``shape``, with the dataset's names for
    the columns its files serve."""
    from pyspark.sql import functions as F

    deletions = shape.with_deletions
    if len(shape.slots) == 1:
        paths = [parts[0].path for parts in shape.fragments]
        df = scan_layout(spark, shape.slots[0], paths, keys=deletions)
        if deletions:
            df = _without_deleted(spark, df, shape, deleted_rows).drop(_FILE, _POS)
        return df
    # Fragments in several files: each slot's rows get their fragment id (from the
    # file name), then the slots are joined on (fragment, row index).
    mapping = spark.createDataFrame(
        pa.table(
            {
                _FILE: pa.array([p.name for parts in shape.fragments for p in parts], pa.string()),
                _FRAGMENT: pa.array(
                    [p.fragment_id for parts in shape.fragments for p in parts], pa.int64()
                ),
            }
        )
    )
    joined: Any = None
    for slot, layout in enumerate(shape.slots):
        df = scan_layout(spark, layout, [parts[slot].path for parts in shape.fragments], keys=True)
        if slot == 0 and deletions:
            df = _without_deleted(spark, df, shape, deleted_rows)
        df = df.join(F.broadcast(mapping), _FILE).drop(_FILE)
        joined = df if joined is None else joined.join(df, [_FRAGMENT, _POS], "inner")
    return joined.drop(_FRAGMENT, _POS)


def to_dataframe(spark: Any, plan: NativePlan, deleted_rows: DeletedRows) -> Any:
    """The DataFrame of a plan :func:`~s3ddb.spark_ext.native_plan.plan_native_read`
    made (and did not refuse): the plan's columns, in order, with the Spark types the
    ``s3ddb`` data source gives them; ``deleted_rows`` reads the deleted positions of
    the plan's version in the tasks.

    Raises:
        pyspark's errors where Spark cannot list or open the files.
    """
    from pyspark.sql import functions as F

    assert plan.refused is None
    target = spark_schema_of(pa.schema(plan.columns), "the native read")
    if not plan.shapes:
        return spark.createDataFrame([], target)
    frames = []
    for shape in plan.shapes:
        df = _shape_frame(spark, shape, deleted_rows)
        served = {c.name: c for layout in shape.slots for c in layout}
        if list(served) == target.names and all(
            _spark_type(c.physical_type, c.name) == f.dataType
            for c, f in zip(served.values(), target.fields)
        ):
            frames.append(df)  # already the target's columns, in order, of its types
            continue
        out = []
        for field in target.fields:
            column = served.get(field.name)
            if column is None:  # no file of these fragments holds it: nulls
                out.append(F.lit(None).cast(field.dataType).alias(field.name))
                continue
            expr = F.col(quoted_name(field.name))
            if _spark_type(column.physical_type, field.name) != field.dataType:
                expr = expr.cast(field.dataType)  # a column widened after the file
            out.append(expr.alias(field.name))
        frames.append(df.select(*out))
    return functools.reduce(lambda a, b: a.union(b), frames)
