"""The options of the ``s3ddb`` Spark data source."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from s3ddb.errors import InvalidInputError
from s3ddb.format.datafile import DEFAULT_MAX_ROWS_PER_FILE
from s3ddb.io.aws import AwsConfig
from s3ddb.io.uri import parse_uri

#: Read partitions hold fragments up to about this many bytes of data files...
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
#: ... and up to this many rows (one default-sized fragment).
DEFAULT_MAX_PARTITION_ROWS = DEFAULT_MAX_ROWS_PER_FILE

# Options Spark itself adds or consumes; never storage options.
_SPARK_OWN = {"path", "checkpointlocation", "queryname", "__partition_columns"}
_READ = {
    "version", "tag", "timestamp", "columns", "maxpartitionbytes", "maxpartitionrows",
    "pushfilters", "readchangefeed", "endingversion",
}  # fmt: skip
# maxRecordsPerFile is Spark's own name for the same cap (its file sources take it).
_WRITE = {"maxrowsperfile", "maxrecordsperfile", "streamid"}
# Streaming reads' own options, parsed by s3ddb.spark_ext.stream_source.
STREAM_READ = {
    "startingversion",
    "startingtimestamp",
    "maxfilespertrigger",
    "maxbytespertrigger",
    "skipchangecommits",
}


def positive_int(name: str, text: str) -> int:
    """Option ``name``'s text as an int >= 1.

    Raises:
        InvalidInputError: not an integer, or below 1.
    """
    try:
        value = int(text)
    except ValueError:
        raise InvalidInputError(f"option {name} must be an integer, got {text!r}") from None
    if value < 1:
        raise InvalidInputError(f"option {name} must be >= 1, got {value}")
    return value


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options. Everything that is not an s3ddb or Spark option is a storage
    option (``aws_endpoint``, ``region``, ... as ``storage_options`` takes them).

    Raises:
        InvalidInputError: no path, an unknown option, or a malformed value.
    """

    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)
    version: int | None = None
    tag: str | None = None
    timestamp: str | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    max_partition_rows: int = DEFAULT_MAX_PARTITION_ROWS
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    stream_id: str | None = None
    push_filters: bool = True
    columns: tuple[str, ...] | None = None
    #: ``readChangeFeed``: read the change feed (s3ddb.spark_ext.change_feed).
    change_feed: bool = False
    #: The change feed's range: ``startingVersion`` or ``startingTimestamp`` (the
    #: first version, included) and ``endingVersion`` (the last, included; default:
    #: the newest). Streaming reads parse their starting options themselves.
    starting_version: int | None = None
    starting_timestamp: str | None = None
    ending_version: int | None = None

    def with_ending_version(self, version: int) -> SourceOptions:
        """These options with the change feed's last version set to ``version``."""
        return replace(self, ending_version=version)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SourceOptions:
        lowered = {str(k).lower(): str(v) for k, v in options.items()}
        uri = lowered.get("path")
        if not uri:
            raise InvalidInputError(
                "the s3ddb data source needs a dataset URI: .load(uri) / .save(uri)"
            )
        parse_uri(uri)
        storage = {
            k: v for k, v in lowered.items() if k not in _SPARK_OWN | _READ | _WRITE | STREAM_READ
        }
        AwsConfig.from_storage_options(storage)  # unknown options fail at planning
        pins = [k for k in ("version", "tag", "timestamp") if k in lowered]
        if len(pins) > 1:
            raise InvalidInputError(f"give one of version, tag, timestamp; got {pins}")
        version = None
        if "version" in lowered:
            version = positive_int("version", lowered["version"])
        stream_id = lowered.get("streamid")
        if stream_id is None and "checkpointlocation" in lowered:
            # A restarted query keeps its checkpoint location, so it names the stream.
            digest = hashlib.sha256(lowered["checkpointlocation"].encode()).hexdigest()
            stream_id = f"checkpoint-{digest[:32]}"
        push = lowered.get("pushfilters", "true").lower()
        if push not in ("true", "false"):
            raise InvalidInputError(f"option pushFilters must be true or false, got {push!r}")
        caps = {k: lowered[k] for k in ("maxrowsperfile", "maxrecordsperfile") if k in lowered}
        if len(set(caps.values())) > 1:
            raise InvalidInputError(
                "options maxRowsPerFile and maxRecordsPerFile (Spark's name for the same "
                f"cap) differ: {caps['maxrowsperfile']!r} and {caps['maxrecordsperfile']!r}"
            )
        change_feed = _change_feed_options(lowered, pins)
        columns = None
        if "columns" in lowered:
            columns = tuple(c.strip() for c in lowered["columns"].split(","))
            if not all(columns):
                raise InvalidInputError(
                    f"option columns must be comma-separated column names, got "
                    f"{lowered['columns']!r}"
                )
        return cls(
            uri=uri,
            columns=columns,
            push_filters=push == "true",
            storage_options=storage,
            version=version,
            tag=lowered.get("tag"),
            timestamp=lowered.get("timestamp"),
            max_partition_bytes=positive_int(
                "maxPartitionBytes",
                lowered.get("maxpartitionbytes", str(DEFAULT_MAX_PARTITION_BYTES)),
            ),
            max_partition_rows=positive_int(
                "maxPartitionRows",
                lowered.get("maxpartitionrows", str(DEFAULT_MAX_PARTITION_ROWS)),
            ),
            max_rows_per_file=positive_int(
                "maxRowsPerFile", next(iter(caps.values()), str(DEFAULT_MAX_ROWS_PER_FILE))
            ),
            stream_id=stream_id,
            **change_feed,
        )


def _change_feed_options(lowered: Mapping[str, str], pins: Sequence[str]) -> dict[str, Any]:
    """The change-feed fields of :class:`SourceOptions` (empty: not a feed read).

    Raises:
        InvalidInputError: readChangeFeed is not true or false; endingVersion without
            it; a version pin beside it; a malformed version.
    """
    flag = lowered.get("readchangefeed", "false").lower()
    if flag not in ("true", "false"):
        raise InvalidInputError(f"option readChangeFeed must be true or false, got {flag!r}")
    if flag == "false":
        if "endingversion" in lowered:
            raise InvalidInputError("option endingVersion needs readChangeFeed=true")
        return {}
    if pins:
        raise InvalidInputError(
            f"option {pins[0]} pins one version; the change feed reads a range: give "
            "startingVersion (or startingTimestamp) and endingVersion"
        )
    starts = [k for k in ("startingversion", "startingtimestamp") if k in lowered]
    if len(starts) > 1:
        raise InvalidInputError("give one of startingVersion, startingTimestamp")
    fields: dict[str, Any] = {"change_feed": True}
    if "startingversion" in lowered and lowered["startingversion"].lower() != "latest":
        # "latest" is for streams (the stream source reads it).
        fields["starting_version"] = positive_int("startingVersion", lowered["startingversion"])
    if "startingtimestamp" in lowered:
        fields["starting_timestamp"] = lowered["startingtimestamp"]
    if "endingversion" in lowered:
        fields["ending_version"] = positive_int("endingVersion", lowered["endingversion"])
    return fields
