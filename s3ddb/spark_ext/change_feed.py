"""``spark.read.format("s3ddb").option("readChangeFeed", "true")``: the change feed.

    (spark.read.format("s3ddb")
        .option("readChangeFeed", "true")
        .option("startingVersion", 5)          # or startingTimestamp; inclusive
        .option("endingVersion", 9)            # optional; default: the newest
        .load(uri))

The rows are those of :meth:`s3ddb.Dataset.changes` for the versions from
``startingVersion`` up to ``endingVersion``, both included (as Delta Lake's
``readChangeFeed`` counts them): the dataset's columns as of ``endingVersion``, then
``_change_type`` (``insert``, ``delete``, and with stable row ids ``update_preimage``
and ``update_postimage``), ``_commit_version`` and ``_commit_timestamp``. Each version
is one task, which reads only what that version changed; the range is checked when
the query is planned (a version removed by cleanup is named then).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from s3ddb.dataset import Dataset, dataset
from s3ddb.errors import InvalidInputError
from s3ddb.reading.changes import change_schema, change_tables, version_change_tables
from s3ddb.spark_ext._options import SourceOptions
from s3ddb.spark_ext._types import arrow_schema_of, cast_for_spark, spark_schema_of
from s3ddb.spark_ext.stream_plan import starting_version_at

__all__ = [
    "ChangeFeedRange",
    "S3DDBChangeFeedReader",
    "VersionPartition",
    "change_feed_range",
    "change_feed_schema",
]

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 64 * 1024


@dataclass(frozen=True)
class ChangeFeedRange:
    """The versions a change-feed read covers: ``first`` to ``last``, both included."""

    first: int
    last: int


def change_feed_range(options: SourceOptions) -> tuple[Dataset, ChangeFeedRange]:
    """The dataset at the feed's last version and the range of versions, checked.

    Raises:
        InvalidInputError: no starting option; a starting version after the ending
            one, or after the newest; a version of the range missing (removed by
            cleanup: named).
    """
    end = dataset(options.uri, options.ending_version, options.storage_options)
    if options.starting_version is not None:
        first = options.starting_version
    elif options.starting_timestamp is not None:
        when = options.starting_timestamp
        first = starting_version_at(options.uri, options.storage_options, when)
    else:
        raise InvalidInputError(
            f"reading the change feed of {options.uri}: give startingVersion (the first "
            "version whose changes are read, included) or startingTimestamp"
        )
    if first > end.version:
        raise InvalidInputError(
            f"reading the change feed of {options.uri}: the starting version {first} is "
            f"after the ending version {end.version}"
        )
    # Checks that every version of the range is there (nothing is read yet).
    change_tables(end.handler, end.uri, first - 1, end.manifest)
    return end, ChangeFeedRange(first, end.version)


def change_feed_schema(options: SourceOptions) -> tuple[Any, int]:
    """The Spark schema of the feed's rows (the columns of its ending version: the
    newest if not given) and that version. The range is checked by the reader.

    Raises:
        InvalidInputError: the dataset has a column named like a change column.
    """
    end = dataset(options.uri, options.ending_version, options.storage_options)
    return spark_schema_of(change_schema(end.schema), options.uri), end.version


class VersionPartition(InputPartition):
    """One read task: the changes of one version, with the columns of
    ``columns_version`` (None: the reader's ending version)."""

    def __init__(self, index: int, version: int, columns_version: int | None = None) -> None:
        super().__init__(index)
        self.version = version
        self.columns_version = columns_version


class S3DDBChangeFeedReader(DataSourceReader):
    """Reads the change feed of a range of versions, one task per version."""

    def __init__(self, options: SourceOptions, ending: int | None, schema: Any) -> None:
        if ending is not None:
            options = options.with_ending_version(ending)
        end, versions = change_feed_range(options)
        self._options = options.with_ending_version(end.version)
        self._range = versions
        expected = change_schema(end.schema)
        target = arrow_schema_of(schema)
        if target.names != expected.names:
            raise InvalidInputError(
                f"reading the change feed of {options.uri}: a given schema must name the "
                f"feed's columns, {expected.names}; select columns after load()"
            )
        self._target = target

    def partitions(self) -> Sequence[InputPartition]:
        versions = range(self._range.first, self._range.last + 1)
        return [VersionPartition(i, v) for i, v in enumerate(versions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, VersionPartition)
        options = self._options
        end = dataset(options.uri, options.ending_version, options.storage_options)
        for table in version_change_tables(end.handler, end.uri, partition.version, end.manifest):
            yield from cast_for_spark(table, self._target).to_batches(BATCH_ROWS)
