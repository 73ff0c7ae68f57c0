"""The Delta state s3ddb publishes, as data, and its actions written and read back.

:class:`DeltaState` is what publishing the next version needs: the protocol, the
table metadata and every live ``add``. Its actions are written as a commit's JSON
lines (:func:`dumps`) and as a checkpoint's rows (:func:`checkpoint_bytes`), and read
back strictly (:func:`parse_commit_line`, :func:`checkpoint_state`): an action is
accepted only when it is one s3ddb writes, byte for byte in a commit and field for
field in a checkpoint, with a configuration and a protocol from the few s3ddb writes,
every string within its bound and every deletion vector under ``dv/``. Anything else
raises :class:`~s3ddb.errors.PublishedStateError` naming the file. Whether a state
agrees with the manifests is :mod:`s3ddb.open_formats.delta_log`'s to check.

Reading never allocates in proportion to a declared number before checking it: a
commit line is bounded in bytes and JSON depth, and a checkpoint is opened through
:func:`~s3ddb.open_formats.parquet_bounds.open_bounded` with its strings read as
dictionaries, checked before any of them is expanded into Python.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3ddb.errors import PublishedStateError, StoredMetadataError
from s3ddb.open_formats.deletion_vectors import (
    DV_PREFIX,
    DeletionVectorDescriptor,
    deletion_vector_uuid,
    dv_path,
    parse_u_descriptor,
    z85_encode,
)
from s3ddb.open_formats.model import CUT_KEY, CUT_PATTERN, PublishedFile
from s3ddb.open_formats.parquet_bounds import ParquetBounds, open_bounded

__all__ = [
    "ALLOWED_FEATURES",
    "CHECKPOINT_INTERVAL",
    "DV_FILE_OVERHEAD",
    "ENABLE_DV",
    "LAST_CHECKPOINT",
    "LOG_DIR",
    "MAX_ACTION_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_PATH_BYTES",
    "MAX_SCHEMA_BYTES",
    "VERSION_KEY",
    "CommitInfo",
    "DeltaAdd",
    "DeltaMetadata",
    "DeltaState",
    "Protocol",
    "checkpoint_bytes",
    "checkpoint_path",
    "checkpoint_state",
    "commit_path",
    "deletion_files",
    "dumps",
    "dv_descriptor",
    "log_path",
    "log_version",
    "needed_protocol",
    "parse_commit_line",
    "required_features",
    "version_files",
]

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"
#: A checkpoint is written at every version N with N % CHECKPOINT_INTERVAL == 0.
CHECKPOINT_INTERVAL = 10
#: The commitInfo key naming the s3ddb version a commit publishes.
VERSION_KEY = "s3ddb.version"
#: The table property s3ddb sets once a file has deleted rows.
ENABLE_DV = "delta.enableDeletionVectors"
#: The table features s3ddb uses (reader 3 / writer 7 lists them).
ALLOWED_FEATURES = frozenset({"deletionVectors", "timestampNtz"})
#: Bytes of a DV file beside its bitmap: a version byte, the size and the CRC-32.
DV_FILE_OVERHEAD = 9
#: The longest line of a commit read (a metaData line holds the schema).
MAX_ACTION_BYTES = 16 << 20
#: The deepest JSON a commit line may nest (s3ddb's actions nest 4 deep).
MAX_JSON_DEPTH = 8
#: The longest ``add`` path read (URL-encoded: a local path of 4,096 bytes and more).
MAX_PATH_BYTES = 16 << 10
#: The longest ``schemaString`` read.
MAX_SCHEMA_BYTES = MAX_ACTION_BYTES
# Any other string of an action (ids, features, configuration, stats, operations).
_MAX_STRING_BYTES = 256

_COMMIT_RE = re.compile(r"^([0-9]{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^([0-9]{20})\.checkpoint\.parquet$")


# --- naming ---------------------------------------------------------------------------


def commit_path(version: int) -> str:
    """``_delta_log/<20-digit version>.json``."""
    return f"{LOG_DIR}/{version:020d}.json"


def checkpoint_path(version: int) -> str:
    """``_delta_log/<20-digit version>.checkpoint.parquet``."""
    return f"{LOG_DIR}/{version:020d}.checkpoint.parquet"


def version_files(version: int) -> list[str]:
    """The files that publish ``version`` in the log: its commit json."""
    return [commit_path(version)]


def deletion_files(deletion_key: str) -> list[str]:
    """The deletion vector file published for an s3ddb deletion key."""
    return [dv_path(deletion_vector_uuid(deletion_key))]


def log_version(path: str) -> tuple[int, str] | None:
    """The version and kind (``"commit"`` or ``"checkpoint"``) of a log file s3ddb
    writes, from its path relative to the root; None for any other path."""
    if not path.startswith(f"{LOG_DIR}/"):
        return None
    name = path[len(LOG_DIR) + 1 :]
    if match := _COMMIT_RE.match(name):
        return int(match.group(1)), "commit"
    if match := _CHECKPOINT_RE.match(name):
        return int(match.group(1)), "checkpoint"
    return None


# --- the state -------------------------------------------------------------------------


@dataclass(frozen=True)
class Protocol:
    """A Delta ``protocol`` action (features are None below reader 3 / writer 7)."""

    min_reader: int
    min_writer: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "minReaderVersion": self.min_reader,
            "minWriterVersion": self.min_writer,
        }
        if self.reader_features is not None:
            out["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            out["writerFeatures"] = list(self.writer_features)
        return out

    @property
    def features(self) -> frozenset[str]:
        return frozenset((self.reader_features or ()) + (self.writer_features or ()))

    def covers(self, other: Protocol) -> bool:
        """Whether this protocol is ``other`` or above it (never lowered)."""
        return (
            self.min_reader >= other.min_reader
            and self.min_writer >= other.min_writer
            and self.features >= other.features
        )


@dataclass(frozen=True)
class DeltaMetadata:
    """A Delta ``metaData`` action (the fields s3ddb sets)."""

    table_id: str
    schema_string: str
    configuration: tuple[tuple[str, str], ...]
    created_time: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.table_id,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": self.schema_string,
            "partitionColumns": [],
            "configuration": dict(self.configuration),
            "createdTime": self.created_time,
        }


@dataclass(frozen=True)
class DeltaAdd:
    """A live file: an ``add`` action (``path`` as in the log, URL-encoded)."""

    path: str
    size: int
    modification_time: int
    stats: str
    deletion_vector: DeletionVectorDescriptor | None

    def to_json(self, *, data_change: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "partitionValues": {},
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": data_change,
            "stats": self.stats,
        }
        if self.deletion_vector is not None:
            out["deletionVector"] = self.deletion_vector.to_json()
        return out


@dataclass(frozen=True)
class DeltaState:
    """What publishing the version after ``version`` needs: the protocol, the table
    metadata and every live ``add`` (by its log path). Treat as immutable: each
    publication builds a new one."""

    version: int
    protocol: Protocol
    metadata: DeltaMetadata
    adds: dict[str, DeltaAdd]


@dataclass(frozen=True)
class CommitInfo:
    """A commit's ``commitInfo``: the s3ddb version it publishes, its time and operation."""

    version: int
    timestamp: int
    operation: str
    cut: str | None = None

    def to_json(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "timestamp": self.timestamp,
            "operation": self.operation,
            "operationParameters": {},
            VERSION_KEY: self.version,
            "engineInfo": "s3ddb",
        }
        if self.cut is not None:
            info[CUT_KEY] = self.cut
        return info


def needed_protocol(previous: Protocol | None, features: set[str]) -> Protocol:
    """The protocol of a state that uses ``features`` after one at ``previous``:
    reader 3 / writer 7 listing every feature once one is used, else (1, 2); never
    below ``previous``."""
    features = set(features) | set(previous.features if previous else ())
    legacy_reader = previous.min_reader if previous else 1
    legacy_writer = previous.min_writer if previous else 2
    if "deletionVectors" in features or "timestampNtz" in features or legacy_reader >= 3:
        ordered = tuple(sorted(features))
        return Protocol(3, 7, ordered, ordered)
    return Protocol(max(1, legacy_reader), max(2, legacy_writer))


def _uses_ntz(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.tz is None
    if pa.types.is_struct(t):
        return any(_uses_ntz(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _uses_ntz(t.value_type)
    if pa.types.is_map(t):
        return _uses_ntz(t.key_type) or _uses_ntz(t.item_type)
    return False


def required_features(configuration: dict[str, str], schema: pa.Schema) -> set[str]:
    """The table features a table of ``configuration`` and ``schema`` uses."""
    features: set[str] = set()
    if configuration.get(ENABLE_DV) == "true":
        features.add("deletionVectors")
    if _uses_ntz(pa.struct(list(schema))):
        features.add("timestampNtz")
    return features


# --- writing ---------------------------------------------------------------------------


def log_path(f: PublishedFile) -> str:
    """The path of ``f`` in the log: a URL-encoded RFC 2396 URI reference, relative to
    the table root when the file is under it, else absolute."""
    if "://" in f.path:
        scheme, rest = f.path.split("://", 1)
        return f"{scheme}://{quote(rest, safe='/')}"
    # Relative, or an absolute local path: kept without a scheme, a reference that
    # resolves against the (local) table root to the same file. DuckDB's delta
    # extension 1.5.5 joins file:// URIs to the table root; deltalake reads both.
    return quote(f.path, safe="/")


def dv_descriptor(deletion_key: str, size: int, cardinality: int) -> DeletionVectorDescriptor:
    """The ``deletionVector`` of the file whose deleted rows are ``deletion_key``."""
    return DeletionVectorDescriptor(
        storage_type="u",
        path_or_inline_dv=DV_PREFIX + z85_encode(deletion_vector_uuid(deletion_key).bytes),
        offset=1,
        size_in_bytes=size,
        cardinality=cardinality,
    )


def dumps(value: Any) -> str:
    """JSON as s3ddb writes it in the log: compact, keys in the order given."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_STR_MAP = pa.map_(pa.string(), pa.string())
_DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
_CHECKPOINT_SCHEMA = pa.schema(
    [
        (
            "txn",
            pa.struct(
                [("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())]
            ),
        ),
        (
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", _STR_MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("stats", pa.string()),
                    ("tags", _STR_MAP),
                    ("deletionVector", _DV_TYPE),
                    ("baseRowId", pa.int64()),
                    ("defaultRowCommitVersion", pa.int64()),
                    ("clusteringProvider", pa.string()),
                ]
            ),
        ),
        (
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("extendedFileMetadata", pa.bool_()),
                    ("partitionValues", _STR_MAP),
                    ("size", pa.int64()),
                    ("deletionVector", _DV_TYPE),
                    ("baseRowId", pa.int64()),
                    ("defaultRowCommitVersion", pa.int64()),
                ]
            ),
        ),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", _STR_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("createdTime", pa.int64()),
                    ("configuration", _STR_MAP),
                ]
            ),
        ),
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
    ]
)


def _protocol_row(protocol: Protocol) -> dict[str, Any]:
    row = protocol.to_json()
    row.setdefault("readerFeatures", None)
    row.setdefault("writerFeatures", None)
    return row


def _metadata_row(metadata: DeltaMetadata) -> dict[str, Any]:
    row = metadata.to_json()
    row["format"]["options"] = []
    row["configuration"] = list(metadata.configuration)
    return row


def checkpoint_bytes(state: DeltaState) -> tuple[bytes, int]:
    """The classic single-file checkpoint of ``state`` and its number of actions:
    ``protocol``, ``metaData``, then an ``add`` per live file, sorted by path.
    Deterministic: one row group, no Arrow schema in the footer, so the bytes depend
    only on the state (and the pyarrow version, named in the footer)."""
    rows: list[dict[str, Any]] = [
        {"protocol": _protocol_row(state.protocol)},
        {"metaData": _metadata_row(state.metadata)},
    ]
    for path in sorted(state.adds):
        add = state.adds[path].to_json(data_change=False)
        add["partitionValues"] = []
        rows.append({"add": add})
    table = pa.Table.from_pylist(rows, schema=_CHECKPOINT_SCHEMA)
    buffer = io.BytesIO()
    pq.write_table(
        table,
        buffer,
        compression="zstd",
        store_schema=False,
        row_group_size=max(1, len(rows)),
        write_page_index=False,
    )
    return buffer.getvalue(), len(rows)


# --- reading: values ---------------------------------------------------------------------


class _Where:
    """Raises the errors of one file (its path, relative to the root)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, why: str) -> PublishedStateError:
        return PublishedStateError(f"{self.path}: {why}", path=self.path)

    def integer(self, value: Any, what: str, low: int = 0, high: int = (1 << 63) - 1) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise self.fail(f"{what} is not an integer from {low} to {high}")
        return value

    def string(self, value: Any, what: str, limit: int = _MAX_STRING_BYTES) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{what} is not a string")
        if len(value) > limit:
            raise self.fail(f"{what} is longer than {limit} characters")
        return value


def _protocol(c: _Where, value: Any) -> Protocol:
    if not isinstance(value, dict):
        raise c.fail("protocol is not an object")
    features: list[tuple[str, ...] | None] = []
    for key in ("readerFeatures", "writerFeatures"):
        listed = value.get(key)
        if listed is not None and not isinstance(listed, list):
            raise c.fail(f"protocol {key} is not a list")
        features.append(
            None if listed is None else tuple(c.string(f, "a protocol feature") for f in listed)
        )
    protocol = Protocol(
        c.integer(value.get("minReaderVersion"), "minReaderVersion"),
        c.integer(value.get("minWriterVersion"), "minWriterVersion"),
        features[0],
        features[1],
    )
    # Only the protocols s3ddb writes: (1, 2), or reader 3 / writer 7 listing the
    # features it uses (sorted, the same for readers and writers).
    listed = protocol.reader_features
    legacy = protocol == Protocol(1, 2)
    modern = (
        (protocol.min_reader, protocol.min_writer) == (3, 7)
        and listed is not None
        and listed == protocol.writer_features
        and listed == tuple(sorted(set(listed)))
        and len(listed) > 0
        and set(listed) <= ALLOWED_FEATURES
    )
    if not (legacy or modern):
        raise c.fail(f"protocol {protocol.to_json()} is not one s3ddb writes")
    return protocol


def _configuration(c: _Where, items: list[tuple[Any, Any]]) -> tuple[tuple[str, str], ...]:
    config = tuple(
        (c.string(k, "a configuration key"), c.string(v, "a configuration value")) for k, v in items
    )
    if config not in ((), ((ENABLE_DV, "true"),)):
        raise c.fail(f"configuration {dict(config)} is not one s3ddb writes")
    return config


def _metadata(c: _Where, value: Any, config: tuple[tuple[str, str], ...]) -> DeltaMetadata:
    if not isinstance(value, dict):
        raise c.fail("metaData is not an object")
    return DeltaMetadata(
        c.string(value.get("id"), "metaData id"),
        c.string(value.get("schemaString"), "schemaString", MAX_SCHEMA_BYTES),
        config,
        c.integer(value.get("createdTime"), "createdTime"),
    )


def _deletion_vector(c: _Where, value: Any) -> DeletionVectorDescriptor | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise c.fail("deletionVector is not an object")
    storage = c.string(value.get("storageType"), "storageType")
    inline = c.string(value.get("pathOrInlineDv"), "pathOrInlineDv")
    if storage != "u":
        raise c.fail(f"deletion vector storage type {storage!r} (s3ddb writes 'u')")
    try:
        prefix, _ = parse_u_descriptor(inline)
    except StoredMetadataError as e:
        raise c.fail(str(e)) from e
    if prefix != DV_PREFIX:
        # Readers resolve <root>/<prefix>/...: s3ddb's deletion vectors are all in dv/.
        raise c.fail(f"deletion vector {inline!r} is not under {DV_PREFIX}/")
    return DeletionVectorDescriptor(
        storage,
        inline,
        c.integer(value.get("offset"), "deletion vector offset", 1, (1 << 31) - 1),
        c.integer(value.get("sizeInBytes"), "deletion vector sizeInBytes", 0, (1 << 31) - 1),
        c.integer(value.get("cardinality"), "deletion vector cardinality"),
    )


def _add(c: _Where, value: dict[str, Any]) -> DeltaAdd:
    return DeltaAdd(
        c.string(value.get("path"), "add path", MAX_PATH_BYTES),
        c.integer(value.get("size"), "add size"),
        c.integer(value.get("modificationTime"), "modificationTime"),
        c.string(value.get("stats"), "stats"),
        _deletion_vector(c, value.get("deletionVector")),
    )


# --- reading: commit lines -------------------------------------------------------------

# Escapes, quotes and brackets, in order: enough to track JSON nesting in one pass.
_JSON_TOKENS = re.compile(rb'\\.|"|[\[\]{}]', re.DOTALL)


def _json_depth(line: bytes) -> int:
    """How deep ``line`` nests (brackets inside strings do not count); a quick upper
    bound when it has few brackets."""
    brackets = line.count(b"{") + line.count(b"[")
    if brackets <= MAX_JSON_DEPTH:
        return brackets
    depth = deepest = 0
    in_string = False
    for match in _JSON_TOKENS.finditer(line):
        token = match.group()
        if token == b'"':
            in_string = not in_string
        elif in_string or len(token) == 2:
            continue
        elif token in (b"{", b"["):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return deepest
        else:
            depth -= 1
    return deepest


CommitAction = tuple[str, Any]


def parse_commit_line(
    line: bytes, where: str, version: int, first: bool, info: CommitInfo | None
) -> CommitAction:
    """One line of commit ``where`` (of Delta ``version``) as ``(kind, value)``: the
    ``commitInfo`` (a :class:`CommitInfo`, only as the ``first`` line), ``protocol``
    (:class:`Protocol`), ``metaData`` (:class:`DeltaMetadata`), ``add``
    (:class:`DeltaAdd`, its ``modificationTime`` the commit's time, from ``info``) or
    ``remove`` (the path).

    Raises:
        PublishedStateError: a line longer than :data:`MAX_ACTION_BYTES`, nested
            deeper than :data:`MAX_JSON_DEPTH`, not JSON, or not byte for byte an
            action s3ddb writes (naming ``where``).
    """
    c = _Where(where)
    if len(line) > MAX_ACTION_BYTES:
        raise c.fail(f"a line longer than {MAX_ACTION_BYTES} bytes")
    if _json_depth(line) > MAX_JSON_DEPTH:
        raise c.fail(f"JSON nested deeper than {MAX_JSON_DEPTH}")
    try:
        action = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise c.fail("a line that is not JSON") from e
    if not isinstance(action, dict) or len(action) != 1:
        raise c.fail("a line that is not one action")
    kind, value = next(iter(action.items()))
    if first != (kind == "commitInfo"):
        raise c.fail(
            f"not a commit s3ddb wrote (no commitInfo with {VERSION_KEY} = {version} first)"
        )
    canonical: Any
    parsed: Any
    if kind == "commitInfo":
        if not isinstance(value, dict) or value.get(VERSION_KEY) != version:
            raise c.fail(f"not a commit s3ddb wrote (no commitInfo with {VERSION_KEY} = {version})")
        cut = value.get(CUT_KEY)
        if cut is not None and (not isinstance(cut, str) or CUT_PATTERN.fullmatch(cut) is None):
            raise c.fail(f"commitInfo {CUT_KEY} is not a cut id")
        parsed = CommitInfo(
            version,
            c.integer(value.get("timestamp"), "timestamp"),
            c.string(value.get("operation"), "operation"),
            cut,
        )
        canonical = parsed.to_json()
    elif kind == "protocol":
        parsed = _protocol(c, value)
        canonical = parsed.to_json()
    elif kind == "metaData":
        config = value.get("configuration") if isinstance(value, dict) else None
        if not isinstance(config, dict):
            raise c.fail("metaData configuration is not an object")
        parsed = _metadata(c, value, _configuration(c, list(config.items())))
        canonical = parsed.to_json()
    elif kind == "add" and isinstance(value, dict):
        parsed = _add(c, value)
        canonical = parsed.to_json()
        if info is not None and parsed.modification_time != info.timestamp:
            raise c.fail(f"add {parsed.path}: modificationTime is not the commit's timestamp")
    elif kind == "remove" and isinstance(value, dict):
        old = DeltaAdd(
            c.string(value.get("path"), "remove path", MAX_PATH_BYTES),
            c.integer(value.get("size"), "remove size"),
            0,
            "",
            _deletion_vector(c, value.get("deletionVector")),
        )
        canonical = {
            "path": old.path,
            "deletionTimestamp": info.timestamp if info is not None else None,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {},
            "size": old.size,
        }
        if old.deletion_vector is not None:
            canonical["deletionVector"] = old.deletion_vector.to_json()
        parsed = old.path
    else:
        raise c.fail(f"a {kind!r} action, which s3ddb does not write")
    if dumps({kind: canonical}).encode() != line:
        raise c.fail(f"a {kind} action that is not one s3ddb writes")
    return kind, parsed


# --- reading: checkpoints --------------------------------------------------------------


@functools.cache
def _reference() -> tuple[pq.ParquetSchema, tuple[str, ...]]:
    """The Parquet schema of s3ddb's checkpoints and its string columns (paths)."""
    empty = DeltaState(0, Protocol(1, 2), DeltaMetadata("", "", (), 0), {})
    parquet = pq.ParquetFile(pa.BufferReader(checkpoint_bytes(empty)[0]))
    strings = tuple(
        column.path for column in parquet.schema if column.physical_type == "BYTE_ARRAY"
    )
    return parquet.schema, strings


# The string columns allowed longer than _MAX_STRING_BYTES, and the list and map
# columns allowed entries (how many, over the whole checkpoint), by Arrow field path.
_LONG_STRINGS = {
    "add.path": MAX_PATH_BYTES,
    "remove.path": MAX_PATH_BYTES,
    "metaData.schemaString": MAX_SCHEMA_BYTES,
}
_ENTRIES = {
    "metaData.configuration": 16,
    "protocol.readerFeatures": len(ALLOWED_FEATURES),
    "protocol.writerFeatures": len(ALLOWED_FEATURES),
}


def _check_arrays(c: _Where, array: pa.Array, name: str) -> None:
    """Refuse a dictionary entry longer than its column allows, or list and map
    entries where s3ddb writes none or few, before anything is expanded."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        lengths = pc.binary_length(array.dictionary)
        longest = pc.max(lengths).as_py() if len(lengths) else 0
        limit = _LONG_STRINGS.get(name, _MAX_STRING_BYTES)
        if longest is not None and longest > limit:
            raise c.fail(f"a {name} of {longest} bytes (at most {limit})")
    elif pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            _check_arrays(c, array.field(i), f"{name}.{kind.field(i).name}")
    elif pa.types.is_map(kind) or pa.types.is_list(kind):
        children = [array.keys, array.items] if pa.types.is_map(kind) else [array.values]
        entries = len(children[0])
        if entries > _ENTRIES.get(name, 0):
            raise c.fail(f"{entries} entries in {name} (s3ddb writes {_ENTRIES.get(name, 0)})")
        for child in children:
            _check_arrays(c, child, name)


def checkpoint_state(
    data: bytes, path: str, bounds: ParquetBounds
) -> tuple[Protocol, DeltaMetadata, list[DeltaAdd]]:
    """The protocol, metadata and live files of checkpoint ``path`` (its bytes
    ``data``), read within ``bounds``: s3ddb's schema, one row group, ``protocol``
    then ``metaData`` then one ``add`` per file sorted by path, each field as s3ddb
    writes it.

    Raises:
        PublishedStateError: anything else (naming ``path``).
    """
    c = _Where(path)
    schema, strings = _reference()
    parquet = open_bounded(data, path, bounds, read_dictionary=list(strings))
    if not parquet.schema.equals(schema):
        raise c.fail("not the schema of an s3ddb checkpoint")
    if parquet.metadata.num_row_groups != 1:
        raise c.fail(f"{parquet.metadata.num_row_groups} row groups (s3ddb writes one)")
    try:
        table = parquet.read_row_group(0, use_threads=False).combine_chunks()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise c.fail(f"not a readable Parquet checkpoint ({e})") from e
    rows = table.num_rows
    if rows < 2:
        raise c.fail("no protocol and metaData")
    columns = {name: table.column(name).chunk(0) for name in table.column_names}
    for name, array in columns.items():
        _check_arrays(c, array, name)
    # Which rows hold which action: protocol, metaData, then adds; nothing else.
    valid = {name: array.is_valid() for name, array in columns.items()}
    expected_nulls = {"txn": rows, "remove": rows, "protocol": rows - 1, "metaData": rows - 1}
    expected_nulls["add"] = 2
    for name, nulls in expected_nulls.items():
        if columns[name].null_count != nulls:
            raise c.fail(f"not the rows of an s3ddb checkpoint ({name})")
    if not (valid["protocol"][0].as_py() and valid["metaData"][1].as_py()):
        raise c.fail("not the rows of an s3ddb checkpoint (protocol, metaData first)")
    head = table.slice(0, 2).select(["protocol", "metaData"]).to_pylist()
    protocol = _protocol(c, head[0]["protocol"])
    raw_metadata = head[1]["metaData"]
    config = _configuration(c, raw_metadata.get("configuration") or [])
    metadata = _metadata(c, raw_metadata, config)
    written = {**_metadata_row(metadata), "name": None, "description": None}
    if head[0]["protocol"] != _protocol_row(protocol) or raw_metadata != written:
        raise c.fail("a protocol or metaData row that is not one s3ddb writes")
    return protocol, metadata, _checkpoint_adds(c, columns["add"].slice(2))


def _checkpoint_adds(c: _Where, adds: pa.StructArray) -> list[DeltaAdd]:
    field = {adds.type.field(i).name: adds.field(i) for i in range(adds.type.num_fields)}
    for name in ("tags", "baseRowId", "defaultRowCommitVersion", "clusteringProvider"):
        if field[name].null_count != len(adds):
            raise c.fail(f"an add with {name} (s3ddb writes none)")
    for name in ("path", "partitionValues", "size", "modificationTime", "dataChange", "stats"):
        if field[name].null_count:
            raise c.fail(f"an add without {name}")
    if pc.any(field["dataChange"]).as_py():
        raise c.fail("an add with dataChange (s3ddb's checkpoints have none)")
    paths = field["path"]
    if pc.count_distinct(paths.indices).as_py() != len(adds):
        raise c.fail("a path added twice")
    # Each distinct path once: expanding them takes no more than their dictionary.
    names = paths.dictionary.to_pylist()
    path_list = [names[i] for i in paths.indices.to_pylist()]
    if any(b <= a for a, b in itertools.pairwise(path_list)):
        raise c.fail("adds not sorted by path")
    stats_names = field["stats"].dictionary.to_pylist()
    stats = [stats_names[i] for i in field["stats"].indices.to_pylist()]
    dvs = field["deletionVector"].to_pylist()
    out = []
    for path, size, mtime, stat, dv in zip(
        path_list, field["size"].to_pylist(), field["modificationTime"].to_pylist(), stats, dvs
    ):
        out.append(
            DeltaAdd(
                c.string(path, "add path", MAX_PATH_BYTES),
                c.integer(size, "add size"),
                c.integer(mtime, "modificationTime"),
                c.string(stat, "stats"),
                _deletion_vector(c, dv),
            )
        )
    return out
