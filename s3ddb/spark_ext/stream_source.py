"""``spark.readStream.format("s3ddb").load(uri)``: the rows each version appended.

    (spark.readStream.format("s3ddb")
        .option("maxFilesPerTrigger", 100)        # admission control
        .load(uri)
        .writeStream.option("checkpointLocation", cp).start(...))

Offsets are :class:`~s3ddb.spark_ext.stream_plan.StreamOffset`s (a version, plus a
position among its fragments), so a micro-batch replayed after a restart reads exactly
what it read before (see :mod:`s3ddb.spark_ext.stream_plan` for which versions emit
what). Options: ``startingVersion`` (a number or ``latest``) or ``startingTimestamp``
(default: the whole newest version first, then what later versions append),
``maxFilesPerTrigger`` (default 1000 when ``maxBytesPerTrigger`` is not set) and
``maxBytesPerTrigger``, ``skipChangeCommits``; ``Trigger.AvailableNow`` reads up to
the newest version when the query starts (at least the version its first batch
starts with), in batches of the admitted size. The query's progress reports the offset
after the newest version as ``latestOffset``. Columns are read by field id (see
:class:`~s3ddb.spark_ext.stream_plan.QueryColumns`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from s3ddb.errors import InvalidInputError, S3DDBError, VersionNotFoundError
from s3ddb.format.bases import BasePath, FileResolver
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.object_store import ObjectStore
from s3ddb.scan import read_visible_rows
from s3ddb.spark_ext._options import SourceOptions, positive_int
from s3ddb.spark_ext._types import arrow_schema_of, cast_for_spark
from s3ddb.spark_ext.stream_plan import (
    QueryColumns,
    Segment,
    StreamOffset,
    StreamPlanner,
    fragment_bytes,
    starting_version_at,
)

__all__ = [
    "DEFAULT_MAX_FILES_PER_TRIGGER",
    "S3DDBStreamReader",
    "StreamOptions",
    "StreamPartition",
]

#: Fragments per micro-batch when neither maxFilesPerTrigger nor maxBytesPerTrigger
#: is set (Delta Lake's default too).
DEFAULT_MAX_FILES_PER_TRIGGER = 1000

log = logging.getLogger(__name__)

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 64 * 1024

_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _size(name: str, text: str) -> int:
    match = _SIZE.match(text)
    if not match or int(match.group(1)) < 1:
        raise InvalidInputError(
            f"option {name} must be a size in bytes >= 1 (e.g. 1048576, 512m, 1g), got {text!r}"
        )
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


@dataclass(frozen=True)
class StreamOptions:
    """The options of a streaming read (on top of :class:`SourceOptions`).

    Raises:
        InvalidInputError: a malformed value, both starting options, or a batch
            read's pin (``version``/``tag``/``timestamp``).
    """

    source: SourceOptions
    starting_version: int | None = None  # None: a snapshot first, unless...
    starting_latest: bool = False  # ... startingVersion=latest: only new versions
    starting_timestamp: str | None = None
    max_files: int | None = None
    max_bytes: int | None = None
    skip_change_commits: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StreamOptions:
        source = SourceOptions.parse(options)
        lowered = {str(k).lower(): str(v) for k, v in options.items()}
        pinned = [k for k in ("version", "tag", "timestamp") if k in lowered]
        if pinned:
            raise InvalidInputError(
                f"option {pinned[0]} pins a batch read; a stream starts at "
                "startingVersion or startingTimestamp"
            )
        if "startingversion" in lowered and "startingtimestamp" in lowered:
            raise InvalidInputError("give startingVersion or startingTimestamp, not both")
        starting = lowered.get("startingversion")
        latest = starting is not None and starting.strip().lower() == "latest"
        skip = lowered.get("skipchangecommits", "false").strip().lower()
        if skip not in ("true", "false"):
            raise InvalidInputError(f"option skipChangeCommits must be true or false, got {skip!r}")
        max_files = lowered.get("maxfilespertrigger")
        max_bytes = lowered.get("maxbytespertrigger")
        return cls(
            source=source,
            starting_version=(
                positive_int("startingVersion", starting) if starting and not latest else None
            ),
            starting_latest=latest,
            starting_timestamp=lowered.get("startingtimestamp"),
            max_files=positive_int("maxFilesPerTrigger", max_files) if max_files else None,
            max_bytes=_size("maxBytesPerTrigger", max_bytes) if max_bytes else None,
            skip_change_commits=skip == "true",
        )

    def default_read_limit(self) -> ReadLimit:
        """Spark's limit per micro-batch from the per-trigger options."""
        if self.max_files is None and self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadMaxFiles(self.max_files or DEFAULT_MAX_FILES_PER_TRIGGER)

    def admitted(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        """(files, bytes) a micro-batch may take under Spark's ``limit``: none when
        Spark asks for everything, else both per-trigger options with ``limit``'s own."""
        if isinstance(limit, ReadAllAvailable):
            return None, None
        max_files, max_bytes = self.max_files, self.max_bytes
        if isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        return max_files, max_bytes


@dataclass(frozen=True)
class _Item:
    """One fragment to read, with what reading it needs from its version: the names
    the query's columns have in it (None: a column added later, read as nulls)."""

    version: int
    fragment: FragmentMetadata
    schema: DatasetSchema
    base_paths: tuple[BasePath, ...]
    names: tuple[str | None, ...]


class StreamPartition(InputPartition):
    """One task of a micro-batch: fragments read one after another."""

    def __init__(self, index: int, items: Sequence[_Item]) -> None:
        super().__init__(index)
        self.items = tuple(items)


class S3DDBStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader. Spark keeps one instance on the driver for the whole
    query (planning: offsets and partitions) and ships copies to tasks (``read``);
    nothing is read from storage until Spark asks."""

    def __init__(self, options: Mapping[str, Any], schema: Any) -> None:
        self._options = StreamOptions.parse(options)
        self._columns = [f.name for f in schema.fields]
        self._nullable = [bool(f.nullable) for f in schema.fields]
        self._target = arrow_schema_of(schema)
        self._planner: StreamPlanner | None = None
        # The query's columns by field id, resolved at its first planning.
        self._query: QueryColumns | None = None
        self._available_now: int | None = None  # the last version AvailableNow reads

    def __getstate__(self) -> dict[str, Any]:
        # Tasks need only the options and the schema, not the driver's cached manifests.
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    def _plan(self) -> StreamPlanner:
        if self._planner is None:
            source = self._options.source
            self._planner = StreamPlanner(
                source.uri,
                source.storage_options,
                skip_change_commits=self._options.skip_change_commits,
            )
        return self._planner

    # --- offsets, on the driver ------------------------------------------------------

    def _query_columns(self) -> QueryColumns:
        """The query's columns by field id, resolved once, on the newest version when
        the query first plans (its schema is the dataset's as of its start): every
        version is then read by field id.

        Raises:
            SchemaMismatchError: the query's schema names a column the dataset lacks.
        """
        if self._query is None:
            planner = self._plan()
            newest = planner.manifest(planner.latest_version())
            self._query = QueryColumns.resolve(self._columns, self._nullable, newest, planner.uri)
        return self._query

    def _readable(self, segment: Segment) -> tuple[str | None, ...]:
        """The names of the query's columns in ``segment``'s version.

        Raises:
            SchemaMismatchError: the version cannot be read with the query's columns.
        """
        return self._plan().columns_in(self._query_columns(), segment.version)

    def _offset(self, data: Any, what: str) -> StreamOffset:
        """An offset Spark hands back, checked to be of this dataset.

        Raises:
            InvalidInputError: malformed, or of another dataset (one re-created at
                the same URI: the checkpoint's positions mean nothing in it).
        """
        return self._plan().checked_offset(data, what)

    def _out(self, offset: StreamOffset) -> dict[str, Any]:
        return replace(offset, dataset=self._plan().dataset_id()).to_json()

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts (a restarted one starts from its checkpoint).

        A start at a version whose predecessor cleanup removed (the oldest retained
        version, or a ``startingTimestamp`` before it) cannot tell which of its rows
        that version appended: it starts with the version's snapshot (every visible
        row), as a query without a starting option does.

        Raises:
            InvalidInputError: ``startingVersion`` is beyond the next version, or
                ``startingTimestamp`` is not ISO 8601.
            DatasetNotFoundError: nothing is committed at the URI.
            VersionNotFoundError: the starting version was removed by cleanup.
        """
        options = self._options
        source = options.source
        self._query_columns()
        if options.starting_version is not None:
            latest = self._plan().latest_version()
            if options.starting_version > latest + 1:
                raise InvalidInputError(
                    f"startingVersion {options.starting_version} is beyond the newest "
                    f"version of {source.uri}, {latest} (the next is {latest + 1})"
                )
            return self._out(self._start_at(options.starting_version, latest))
        if options.starting_timestamp is not None:
            when = options.starting_timestamp
            first = starting_version_at(source.uri, source.storage_options, when)
            return self._out(self._start_at(first, self._plan().latest_version()))
        latest = self._plan().latest_version()
        if options.starting_latest:
            return self._out(StreamOffset(latest + 1))
        return self._out(StreamOffset(latest, snapshot=True))

    def _start_at(self, version: int, latest: int) -> StreamOffset:
        """The offset of a start at ``version``: its appended rows, or its snapshot if
        the version before it is gone (so what it appended cannot be told).

        Raises:
            VersionNotFoundError: ``version`` itself is gone (naming the oldest kept).
        """
        if version > latest:
            return StreamOffset(version)
        planner = self._plan()
        try:
            planner.manifest(version)
        except VersionNotFoundError:
            kept = planner.oldest_version()
            raise VersionNotFoundError(
                f"the stream cannot start at version {version} of {planner.uri}: cleanup "
                f"removed it; the oldest version kept is {kept}. Start at "
                f"startingVersion {kept} or later"
            ) from None
        if version == 1:
            return StreamOffset(version)
        try:
            planner.manifest(version - 1)
        except VersionNotFoundError:
            return StreamOffset(version, snapshot=True)
        return StreamOffset(version)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self._options.default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._plan().latest_version()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: within ``limit`` (and, unless Spark asks
        for everything, both per-trigger options), up to the newest version or the one
        ``Trigger.AvailableNow`` fixed.

        Raises:
            StreamChangeCommitError: the stream is at a change commit.
            InvalidInputError: ``start`` is not an s3ddb offset, or is past the
                dataset's newest version (the dataset was re-created?).
        """
        planner = self._plan()
        position = self._offset(start, "start")
        self._query_columns()
        latest = planner.latest_version()
        if position.version > latest + 1:
            raise InvalidInputError(
                f"the stream's checkpoint is at version {position.version} of {planner.uri}, "
                f"whose newest version is {latest}: was the dataset dropped and re-created? "
                "Start the query with a new checkpoint"
            )
        last = latest
        if self._available_now is not None:
            # A snapshot start (its version chosen by initialOffset, maybe after
            # prepareForTriggerAvailableNow fixed the bound) is read whole.
            bound = max(self._available_now, position.version if position.snapshot else 0)
            last = min(latest, bound)
        max_files, max_bytes = self._options.admitted(limit)
        return self._out(planner.advance(position, last, max_files, max_bytes, self._readable))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The offset after the newest version: what the query has yet to read shows
        in its progress (``sources[].latestOffset``) next to ``endOffset``. None if
        the newest version cannot be read now (a metric only: the next batch's
        planning reports the error)."""
        try:
            return self._out(StreamOffset(self._plan().latest_version() + 1))
        except S3DDBError as exc:
            log.debug("s3ddb: no latest offset for %s: %s", self._options.source.uri, exc)
            return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The tasks that read the fragments from ``start`` up to ``end``: the same
        fragments, grouped the same way, whenever Spark asks (a replayed batch).

        Raises:
            SchemaMismatchError: a version cannot be read with the query's columns
                (see :meth:`StreamPlanner.columns_in`).
            StreamChangeCommitError: a change commit lies in between (the option was
                turned off since the batch was planned).
        """
        planner = self._plan()
        first, last = self._offset(start, "start"), self._offset(end, "end")
        self._query_columns()
        source = self._options.source
        groups: list[StreamPartition] = []
        current: list[_Item] = []
        size = rows = 0
        for segment, fragment in planner.between(first, last):
            manifest = segment.manifest
            names = self._readable(segment)
            cost = fragment_bytes(fragment)
            if current and (
                size + cost > source.max_partition_bytes
                or rows + fragment.physical_rows > source.max_partition_rows
            ):
                groups.append(StreamPartition(len(groups), current))
                current, size, rows = [], 0, 0
            current.append(
                _Item(segment.version, fragment, manifest.schema, manifest.base_paths, names)
            )
            size += cost
            rows += fragment.physical_rows
        if current:
            groups.append(StreamPartition(len(groups), current))
        planner.forget_before(first.version)
        return groups

    def commit(self, end: dict[str, Any]) -> None:
        """Spark is done with everything before ``end``: forget it."""
        position = StreamOffset.from_json(
            end, f"the committed offset of {self._options.source.uri}"
        )
        self._plan().forget_before(position.version)

    # --- rows, in tasks --------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The visible rows of the partition's fragments, each as of its version."""
        assert isinstance(partition, StreamPartition)
        source = self._options.source
        store = ObjectStore(source.uri, source.storage_options)
        for item in partition.items:
            files = FileResolver(store, item.base_paths)
            present = [n for n in item.names if n is not None]
            table = read_visible_rows(files, item.fragment, item.schema, present)
            if not table.num_rows:
                continue
            # By field id: each column under the query's name, nulls for one added
            # after the item's version.
            columns = [
                table.column(n) if n is not None else pa.nulls(table.num_rows, f.type)
                for n, f in zip(item.names, self._target, strict=True)
            ]
            named = pa.Table.from_arrays(columns, names=self._target.names)
            yield from cast_for_spark(named, self._target).to_batches(BATCH_ROWS)
