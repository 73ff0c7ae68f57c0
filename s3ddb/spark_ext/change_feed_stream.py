"""``spark.readStream.format("s3ddb").option("readChangeFeed", "true")``: the change
feed as a stream.

    (spark.readStream.format("s3ddb")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)          # or latest, or startingTimestamp
        .load(uri)
        .writeStream.option("checkpointLocation", cp).foreachBatch(apply).start())

Each micro-batch holds the change rows (:meth:`s3ddb.Dataset.changes`) of whole
versions, in version order: offsets are :class:`~s3ddb.spark_ext.stream_plan.StreamOffset`
positions at a version boundary (the next version to read), so a batch replayed after
a restart reads exactly the same versions. A starting option is required
(``startingVersion`` N reads the changes of N and later, ``1`` the whole history;
``latest`` only versions committed after the query starts). Admission control counts
the fragments each version changed (``maxFilesPerTrigger``, default 1000) or their
bytes (``maxBytesPerTrigger``), always admitting at least one version;
``Trigger.AvailableNow`` reads up to the newest version when the query starts. The
columns are the dataset's when the query first plans: a column added later is not
read, one dropped later reads as nulls (matched by field id, as the feed does).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    SupportsTriggerAvailableNow,
)

from s3ddb.dataset import dataset
from s3ddb.errors import InvalidInputError
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.reading.changes import version_change_tables
from s3ddb.spark_ext._types import arrow_schema_of, cast_for_spark
from s3ddb.spark_ext.change_feed import VersionPartition
from s3ddb.spark_ext.stream_plan import StreamOffset, StreamPlanner, starting_version_at
from s3ddb.spark_ext.stream_source import StreamOptions

__all__ = ["S3DDBChangeFeedStreamReader", "changed_fragments"]

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 64 * 1024


def changed_fragments(previous: Manifest | None, current: Manifest) -> list[FragmentMetadata]:
    """The fragments of ``current`` whose rows differ from ``previous`` (None: the
    version before the first): added ones, and ones with other data or deletion files;
    with the fragments only ``previous`` has, what the version's change rows cost."""
    before = {f.id: f for f in previous.fragments} if previous is not None else {}
    changed = [
        f
        for f in current.fragments
        if f.id not in before
        or before[f.id].files != f.files
        or before[f.id].deletion_file != f.deletion_file
    ]
    now = {f.id for f in current.fragments}
    return changed + [f for i, f in before.items() if i not in now]


class S3DDBChangeFeedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The change feed's streaming reader (module docstring). Spark keeps one
    instance on the driver (offsets, partitions) and ships copies to tasks."""

    def __init__(self, options: Mapping[str, Any], schema: Any) -> None:
        self._options = StreamOptions.parse(options)
        if self._options.skip_change_commits:
            raise InvalidInputError(
                "option skipChangeCommits does not apply to the change feed, which "
                "reads every change"
            )
        self._target = arrow_schema_of(schema)
        self._planner: StreamPlanner | None = None
        #: The version whose columns the query reads (fixed at its first planning).
        self._columns_version: int | None = None
        self._available_now: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None  # tasks open what they read themselves
        return state

    def _plan(self) -> StreamPlanner:
        if self._planner is None:
            source = self._options.source
            self._planner = StreamPlanner(
                source.uri, source.storage_options, skip_change_commits=False
            )
        return self._planner

    def _columns_at(self) -> int:
        if self._columns_version is None:
            self._columns_version = self._plan().latest_version()
        return self._columns_version

    def _offset(self, data: Any, what: str) -> StreamOffset:
        """An offset Spark hands back, checked to be of this dataset.

        Raises:
            InvalidInputError: malformed, of another dataset, or not at a version
                boundary (not written by this reader).
        """
        planner = self._plan()
        offset = planner.checked_offset(data, what)
        if offset.snapshot or offset.index:
            raise InvalidInputError(
                f"the {what} offset of {planner.uri} is not a change-feed offset (a "
                "checkpoint of a stream without readChangeFeed?): start the query with "
                "a new checkpoint"
            )
        return offset

    def _out(self, version: int) -> dict[str, Any]:
        return replace(StreamOffset(version), dataset=self._plan().dataset_id()).to_json()

    def initialOffset(self) -> dict[str, Any]:
        """The next version to read when a new query starts.

        Raises:
            InvalidInputError: no starting option; ``startingVersion`` beyond the
                next version; ``startingTimestamp`` not ISO 8601.
        """
        options = self._options
        source = options.source
        latest = self._plan().latest_version()
        self._columns_at()
        if options.starting_latest:
            return self._out(latest + 1)
        if options.starting_version is not None:
            if options.starting_version > latest + 1:
                raise InvalidInputError(
                    f"startingVersion {options.starting_version} is beyond the newest "
                    f"version of {source.uri}, {latest} (the next is {latest + 1})"
                )
            return self._out(options.starting_version)
        if options.starting_timestamp is not None:
            when = options.starting_timestamp
            return self._out(starting_version_at(source.uri, source.storage_options, when))
        raise InvalidInputError(
            f"a change-feed stream of {source.uri} needs startingVersion (a number: that "
            "version's changes and later ones; 1: the whole history; latest: versions "
            "committed from now on) or startingTimestamp"
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        return self._options.default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._plan().latest_version()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: whole versions within ``limit``, at least
        one, up to the newest (or the one ``Trigger.AvailableNow`` fixed).

        Raises:
            InvalidInputError: ``start`` is not this reader's offset, or is past the
                newest version (the dataset was re-created?).
        """
        planner = self._plan()
        first = self._offset(start, "start").version
        latest = planner.latest_version()
        if first > latest + 1:
            raise InvalidInputError(
                f"the stream's checkpoint is at version {first} of {planner.uri}, whose "
                f"newest version is {latest}: was the dataset dropped and re-created? "
                "Start the query with a new checkpoint"
            )
        last = latest if self._available_now is None else min(latest, self._available_now)
        max_files, max_bytes = self._options.admitted(limit)
        end = first
        files = size = 0
        while end <= last:
            previous = planner.manifest(end - 1) if end > 1 else None
            changed = changed_fragments(previous, planner.manifest(end))
            files += len(changed)
            size += sum(d.file_size_bytes for f in changed for d in f.files)
            over = (max_files is not None and files > max_files) or (
                max_bytes is not None and size > max_bytes
            )
            if over and end > first:
                break
            end += 1
        return self._out(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._out(self._plan().latest_version() + 1)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One task per version from ``start`` up to ``end`` (excluded): the same
        versions whenever Spark asks (a replayed batch)."""
        first = self._offset(start, "start").version
        stop = self._offset(end, "end").version
        columns = self._columns_at()
        self._plan().forget_before(max(first - 1, 1))
        return [VersionPartition(i, v, columns) for i, v in enumerate(range(first, stop))]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark is done with everything before ``end``: forget it."""
        position = self._offset(end, "committed")
        self._plan().forget_before(max(position.version - 1, 1))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The change rows of the partition's version, with the query's columns."""
        assert isinstance(partition, VersionPartition)
        source = self._options.source
        columns = dataset(source.uri, partition.columns_version, source.storage_options)
        tables = version_change_tables(
            columns.handler, columns.uri, partition.version, columns.manifest
        )
        for table in tables:
            yield from cast_for_spark(table, self._target).to_batches(BATCH_ROWS)
