"""The ``s3ddb`` PySpark data source: batch reads and writes, and a streaming sink.

    df.write.format("s3ddb").mode("append").save(uri)
    spark.read.format("s3ddb").option("version", 3).load(uri)
    df.writeStream.format("s3ddb").option("checkpointLocation", cp).start(uri)
    spark.readStream.format("s3ddb").load(uri)   # see stream_source

Options: ``version`` / ``tag`` / ``timestamp`` pin what a read sees (default: the
newest version when the query is planned); ``columns`` (comma-separated) reads only
those columns, as a user-given schema (``.schema("a long, b string")``) does;
``readChangeFeed`` (true) with ``startingVersion`` or ``startingTimestamp`` and
``endingVersion`` reads the change feed of those versions (see
:mod:`s3ddb.spark_ext.change_feed`); ``maxPartitionBytes`` and
``maxPartitionRows`` size read partitions; ``maxRowsPerFile`` caps written
fragments; ``streamId`` names a stream (default: derived from
``checkpointLocation``). Any other option is a storage option (``aws_endpoint``,
``region``, ...), as ``storage_options`` takes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
)

from s3ddb.dataset import Dataset, dataset
from s3ddb.errors import InvalidInputError, S3DDBError
from s3ddb.format.bases import FileResolver
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.object_store import ObjectStore
from s3ddb.reading.version_reader import resolve_columns
from s3ddb.scan import fragment_may_match, read_visible_rows
from s3ddb.spark_ext import _write
from s3ddb.spark_ext._filters import PushedFilters, split_filters
from s3ddb.spark_ext._options import SourceOptions
from s3ddb.spark_ext._types import (
    arrow_schema_of,
    cast_for_spark,
    check_projection,
    spark_schema_of,
)

__all__ = [
    "BATCH_ROWS",
    "SOURCE_NAME",
    "FragmentGroup",
    "S3DDBDataSource",
    "S3DDBFilteringDataSource",
    "S3DDBFilteringReader",
    "S3DDBReader",
    "S3DDBStreamWriter",
    "S3DDBWriter",
]

SOURCE_NAME = "s3ddb"

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 64 * 1024


def _open(options: SourceOptions, version: int | None = None) -> Dataset:
    if version is not None:
        return dataset(options.uri, version, options.storage_options)
    if options.tag is not None:
        return dataset(options.uri, options.tag, options.storage_options)
    if options.timestamp is not None:
        return dataset(options.uri, storage_options=options.storage_options, asof=options.timestamp)
    return dataset(options.uri, options.version, options.storage_options)


class S3DDBDataSource(DataSource):
    """``format("s3ddb")``: see the module docstring."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._options = SourceOptions.parse(options)
        # The version schema() saw; the read then uses exactly that version.
        self._pinned: int | None = None

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> Any:
        if self._options.change_feed:
            from s3ddb.spark_ext.change_feed import change_feed_schema

            spark_schema, self._pinned = change_feed_schema(self._options)
            return spark_schema
        ds = _open(self._options)
        self._pinned = ds.version
        arrow = ds.schema
        if self._options.columns is not None:
            names = resolve_columns(ds, list(self._options.columns))
            arrow = pa.schema([arrow.field(n) for n in names])
        return spark_schema_of(arrow, self._options.uri)

    def reader(self, schema: Any) -> DataSourceReader:
        if self._options.change_feed:
            from s3ddb.spark_ext.change_feed import S3DDBChangeFeedReader

            return S3DDBChangeFeedReader(self._options, self._pinned, schema)
        return S3DDBReader(self._options, self._pinned, schema)

    def writer(self, schema: Any, overwrite: bool) -> S3DDBWriter:
        return S3DDBWriter(_write.WritePlan.make(self._options, schema, overwrite))

    def streamWriter(self, schema: Any, overwrite: bool) -> S3DDBStreamWriter:
        return S3DDBStreamWriter(_write.WritePlan.make(self._options, schema, overwrite))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """``spark.readStream.format("s3ddb")``: see :mod:`s3ddb.spark_ext.stream_source`.

        Raises:
            S3DDBError: PySpark is older than 4.2 (no admission control API).
        """
        import pyspark

        if tuple(int(p) for p in pyspark.__version__.split(".")[:2]) < (4, 2):
            raise S3DDBError(
                f"s3ddb streaming reads need PySpark >= 4.2, found {pyspark.__version__}"
            )
        if self._options.change_feed:
            from s3ddb.spark_ext.change_feed_stream import S3DDBChangeFeedStreamReader

            return S3DDBChangeFeedStreamReader(self.options, schema)
        from s3ddb.spark_ext.stream_source import S3DDBStreamReader

        return S3DDBStreamReader(self.options, schema)


class FragmentGroup(InputPartition):
    """One read partition: fragments read one after another by one task."""

    def __init__(self, index: int, fragments: Sequence[FragmentMetadata]) -> None:
        super().__init__(index)
        self.fragments = tuple(fragments)


class S3DDBFilteringDataSource(S3DDBDataSource):
    """The source :func:`s3ddb.spark_ext.register` installs: its reader takes Spark's
    pushed filters. PySpark refuses a reader that implements ``pushFilters`` in a
    session where ``spark.sql.python.filterPushdown.enabled`` is off, and a data source
    cannot see session settings, so the self-registered source (``pyspark_s3ddb``)
    reads without pushdown, and ``register`` turns the setting on with this one.
    ``option("pushFilters", "false")`` reads without pushdown here too."""

    def reader(self, schema: Any) -> DataSourceReader:
        if self._options.change_feed or not self._options.push_filters:
            return super().reader(schema)
        return S3DDBFilteringReader(self._options, self._pinned, schema)


class S3DDBReader(DataSourceReader):
    """Reads one pinned version; results equal ``s3ddb.dataset(uri, version).to_table()``."""

    def __init__(self, options: SourceOptions, pinned: int | None, schema: Any) -> None:
        ds = _open(options, pinned)
        self._options = options
        self._version = ds.version
        self._dataset_schema: DatasetSchema = ds.manifest.schema
        self._fragments = tuple(ds.manifest.fragments)
        self._base_paths = ds.manifest.base_paths
        self._columns = [f.name for f in schema.fields]
        # A user-given schema (a projection) must name real columns, with their types.
        resolve_columns(ds, self._columns)
        if options.columns is not None:
            # Spark passes the schema() derived from ``columns`` unless the user gave
            # one; a given schema naming other columns than ``columns`` is ambiguous.
            chosen = resolve_columns(ds, list(options.columns))
            if chosen != self._columns:
                raise InvalidInputError(
                    f"reading {options.uri}: the given schema names columns "
                    f"{self._columns} but the 'columns' option names {chosen}; give one "
                    "of them, or the same columns in the same order"
                )
        check_projection(schema, ds.schema, options.uri)
        self._target = arrow_schema_of(schema)
        self._filters = PushedFilters()

    def partitions(self) -> Sequence[InputPartition]:
        # Small fragments (e.g. of streaming appends) share a task; a fragment of
        # about the default file size gets its own, so reads spread over the cores.
        groups: list[FragmentGroup] = []
        current: list[FragmentMetadata] = []
        size = rows = 0
        # Fragments whose statistics in the manifest rule the pushed filters out get
        # no task (pushFilters runs before partitions are planned).
        may_match = self._filters.may_match if self._filters.conditions else None
        for fragment in self._fragments:
            if not fragment_may_match(fragment, self._dataset_schema, may_match):
                continue
            fragment_bytes = sum(f.file_size_bytes for f in fragment.files)
            if current and (
                size + fragment_bytes > self._options.max_partition_bytes
                or rows + fragment.physical_rows > self._options.max_partition_rows
            ):
                groups.append(FragmentGroup(len(groups), current))
                current, size, rows = [], 0, 0
            current.append(fragment)
            size += fragment_bytes
            rows += fragment.physical_rows
        if current or not groups:
            groups.append(FragmentGroup(len(groups), current))
        return groups

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FragmentGroup)
        store = ObjectStore(self._options.uri, self._options.storage_options)
        files = FileResolver(store, self._base_paths)
        predicate = self._filters.expression()
        may_match = self._filters.may_match if self._filters.conditions else None
        for fragment in partition.fragments:
            table = read_visible_rows(
                files, fragment, self._dataset_schema, self._columns, predicate, may_match
            )
            if table.num_rows:
                yield from cast_for_spark(table, self._target).to_batches(BATCH_ROWS)


class S3DDBFilteringReader(S3DDBReader):
    """A reader that takes the filters s3ddb evaluates exactly (and prunes row groups
    with them), and hands the rest back to Spark."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        self._filters, rejected = split_filters(filters, self._dataset_schema.arrow)
        yield from rejected


class S3DDBWriter(DataSourceArrowWriter):
    """A batch write: one transaction, read at the version pinned when planned."""

    def __init__(self, plan: _write.WritePlan) -> None:
        self._plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
        return _write.write_task(self._plan, iterator)

    def commit(self, messages: list[Any]) -> None:
        _write.commit_write(self._plan, messages)

    def abort(self, messages: list[Any]) -> None:
        _write.abort_write(self._plan, messages)


class S3DDBStreamWriter(DataSourceStreamArrowWriter):
    """An exactly-once streaming sink: each micro-batch commits once per stream."""

    def __init__(self, plan: _write.WritePlan) -> None:
        self._plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
        return _write.write_task(self._plan, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        _write.commit_stream_batch(self._plan, messages, batchId)

    def abort(self, messages: list[Any], batchId: int) -> None:
        _write.abort_write(_write.batch_plan(self._plan, batchId), messages)
