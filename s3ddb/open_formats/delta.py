"""Delta Lake ``_delta_log`` for s3ddb versions (:class:`DeltaWriter`).

Delta version N is s3ddb version N. What each version writes:

* ``_delta_log/<N>.json``: ``commitInfo`` (``s3ddb.version`` = N, the operation, the
  s3ddb commit time as ``timestamp``), ``protocol`` and ``metaData`` when they change,
  then ``remove`` for the files the version no longer lists and ``add`` for the files
  it lists anew (a file whose deleted rows changed is removed with its old deletion
  vector and added with its new one). Paths are sorted; JSON keys are in a fixed order.
* at the first published version and every version N with N % 10 == 0, a classic
  single-file checkpoint ``_delta_log/<N>.checkpoint.parquet`` with the whole state,
  then ``_delta_log/_last_checkpoint``;
* deletion vector files ``dv/deletion_vector_<uuid>.bin``
  (:mod:`s3ddb.open_formats.deletion_vectors`), named from the s3ddb deletion key.

Publication may start at any version N (``TableVersion.previous`` is None): commit N
then holds ``protocol``, ``metaData`` and an ``add`` for every file, and a checkpoint
at N is written. Both readers tested (deltalake 1.6 and DuckDB's delta extension
1.5.5, latest and time travel to N) read a log whose first commit is N > 0 with no
``00000000000000000000.json``: they list the log and start from the checkpoint (or
from the first commit, which carries ``protocol`` and ``metaData``), so nothing more
is needed. Time travel to a version before N fails in both, as it should.

Everything written is a function of the :class:`~s3ddb.open_formats.model.TableVersion`
and the state after the version before: no wall-clock time, no random ids; the
checkpoint is written by pyarrow without its Arrow schema, and is byte-identical for
one pyarrow version (its footer names the pyarrow version that wrote it).

Protocol: (1, 2) while the table needs nothing more. Deletion vectors (and
``timestampNtz``) need reader 3 / writer 7 with those table features. The protocol is
part of the state and never lowered.

No column mapping: the schema written is the current Arrow schema, by name. s3ddb
rewrites every data file of a Delta-publishing dataset when a column is renamed (and
whole files on add-column and type widening), so the column names in data files are
always the current schema's. Mapping would not help the readers tested anyway:
deltalake 1.6 and DuckDB's delta extension 1.5.5 resolve columns by
``delta.columnMapping.physicalName``, not by Parquet field id, so files written under a
renamed column's new name would read as nulls.

``dataChange`` is true on every action: always correct (false only lets streaming
readers skip rearrangements, and which s3ddb operations only rearrange is not this
module's to decide).

Schema types (:meth:`DeltaWriter.type_problem`): see :func:`delta_type_problem`.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from s3ddb.errors import InvalidInputError, StoredMetadataError
from s3ddb.io.object_store import ObjectStore
from s3ddb.open_formats.deletion_vectors import (
    DV_PREFIX,
    DeletionVectorDescriptor,
    deletion_vector_uuid,
    dv_file_bytes,
    dv_path,
    parse_u_descriptor,
    z85_encode,
)
from s3ddb.open_formats.model import DeletedPositions, Publication, PublishedFile, TableVersion

__all__ = [
    "CHECKPOINT_INTERVAL",
    "LAST_CHECKPOINT",
    "LOG_DIR",
    "MAX_LOG_FILE_BYTES",
    "MAX_REPLAY",
    "DeltaState",
    "DeltaWriter",
    "Protocol",
    "checkpoint_files",
    "commit_path",
    "deletion_files",
    "delta_schema",
    "delta_type_problem",
    "expired_log_files",
    "foreign_problems",
    "version_files",
]

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"
#: A checkpoint is written at every version N with N % CHECKPOINT_INTERVAL == 0.
CHECKPOINT_INTERVAL = 10
#: The largest log file (commit json, checkpoint) :meth:`DeltaWriter.load_state` reads.
MAX_LOG_FILE_BYTES = 1 << 30
#: The most commits :meth:`DeltaWriter.load_state` replays after a checkpoint.
MAX_REPLAY = 1000
#: The commitInfo key naming the s3ddb version a commit publishes.
VERSION_KEY = "s3ddb.version"

_ENABLE_DV = "delta.enableDeletionVectors"
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MAX_LINE_ACTIONS = 10_000_000


# --- naming ---------------------------------------------------------------------------


def commit_path(version: int) -> str:
    """``_delta_log/<20-digit version>.json``."""
    return f"{LOG_DIR}/{version:020d}.json"


def _checkpoint_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.checkpoint.parquet"


def version_files(version: int) -> list[str]:
    """The files that publish ``version`` in the log: its commit json."""
    return [commit_path(version)]


def checkpoint_files(version: int) -> list[str]:
    """The checkpoint files of ``version`` (one classic single-file checkpoint),
    whether or not that version has one."""
    return [_checkpoint_path(version)]


def deletion_files(deletion_key: str) -> list[str]:
    """The deletion vector file published for an s3ddb deletion key."""
    return [dv_path(deletion_vector_uuid(deletion_key))]


def _list_log(store: ObjectStore) -> tuple[dict[int, str], dict[int, str], list[str]]:
    # One listing: commit jsons and checkpoints by version, and every other path.
    commits: dict[int, str] = {}
    checkpoints: dict[int, str] = {}
    others: list[str] = []
    for meta in store.iter_list(f"{LOG_DIR}/"):
        name = meta.path[len(LOG_DIR) + 1 :] if meta.path.startswith(f"{LOG_DIR}/") else meta.path
        if match := _COMMIT_RE.match(name):
            commits[int(match.group(1))] = meta.path
        elif match := _CHECKPOINT_RE.match(name):
            checkpoints[int(match.group(1))] = meta.path
        else:
            others.append(meta.path)
    return commits, checkpoints, others


def expired_log_files(store: ObjectStore, oldest_kept: int) -> list[str]:
    """The commit jsons and checkpoints no reader needs once versions before
    ``oldest_kept`` are gone: everything before the newest checkpoint at or before
    ``oldest_kept`` (that checkpoint and every later file are kept, so time travel to
    ``oldest_kept`` and later still works). Nothing expires without such a checkpoint.
    One listing; sorted."""
    commits, checkpoints, _ = _list_log(store)
    kept = [v for v in checkpoints if v <= oldest_kept]
    if not kept:
        return []
    newest = max(kept)
    expired = [p for v, p in commits.items() if v < newest]
    expired += [p for v, p in checkpoints.items() if v < newest]
    return sorted(expired)


def foreign_problems(store: ObjectStore, newest_version: int) -> list[str]:
    """What in ``_delta_log/`` s3ddb did not write: commits after ``newest_version``
    (the newest s3ddb version), a newest commit at or before it whose ``commitInfo``
    lacks ``s3ddb.version`` equal to its version, and files of kinds s3ddb never
    writes (checksums, compacted logs, other checkpoint kinds, staged commits), which
    readers would use. One listing and one read (the newest commit); empty when all is
    s3ddb's.

    Raises:
        What the store raises reading (FileNotFoundError is not raised: a commit
        deleted meanwhile is skipped).
    """
    commits, _, others = _list_log(store)
    problems = [
        f"{path}: Delta commit {version} is newer than s3ddb version {newest_version}"
        for version, path in sorted(commits.items())
        if version > newest_version
    ]
    problems += [
        f"{path}: not a file s3ddb writes in {LOG_DIR}/"
        for path in others
        if path != LAST_CHECKPOINT
    ]
    ours = [v for v in commits if v <= newest_version]
    if ours:
        version = max(ours)
        path = commits[version]
        try:
            problem = _foreign_commit_problem(store.get(path), path, version)
        except FileNotFoundError:
            problem = None
        if problem is not None:
            problems.append(problem)
    return problems


def _foreign_commit_problem(data: bytes, path: str, version: int) -> str | None:
    first = data.split(b"\n", 1)[0]
    try:
        action = json.loads(first)
    except ValueError:
        return f"{path}: not a commit s3ddb wrote (its first line is not JSON)"
    info = action.get("commitInfo") if isinstance(action, dict) else None
    if not isinstance(info, dict) or info.get(VERSION_KEY) != version:
        return f"{path}: not a commit s3ddb wrote (no commitInfo with {VERSION_KEY} = {version})"
    return None


# --- schema ---------------------------------------------------------------------------


def _field_id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(b"PARQUET:field_id")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _primitive_type(t: pa.DataType) -> str | None:
    if pa.types.is_boolean(t):
        return "boolean"
    for check, name in (
        (pa.types.is_int8, "byte"),
        (pa.types.is_int16, "short"),
        (pa.types.is_int32, "integer"),
        (pa.types.is_int64, "long"),
        (pa.types.is_float32, "float"),
        (pa.types.is_float64, "double"),
        (pa.types.is_date32, "date"),
    ):
        if check(t):
            return name
    # Large variants are an Arrow in-memory choice: Parquet stores the same bytes.
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t) and t.unit in ("ms", "us"):
        # Parquet keeps ms as TIMESTAMP(MILLIS) and readers widen it to microseconds
        # exactly; Delta's timestamp is UTC-adjusted, timestamp_ntz is not.
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    return None


def _type_problem(t: pa.DataType, where: str) -> str | None:
    if pa.types.is_struct(t):
        return _fields_problem(list(t), where + ".")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _fields_problem([t.value_field], where + ".", check_names=False)
    if pa.types.is_map(t):
        return _fields_problem([t.key_field, t.item_field], where + ".", check_names=False)
    if _primitive_type(t) is not None:
        return None
    if pa.types.is_timestamp(t):
        why = (
            "nanosecond timestamps are not exact in Delta (microseconds)"
            if t.unit == "ns"
            else "second timestamps are stored as milliseconds"
        )
        if t.unit == "s":
            # pyarrow writes timestamp[s] as TIMESTAMP(MILLIS): exact, but the Arrow
            # type readers return differs; Delta's type is still exact.
            return None
        return f"column {where!r}: {why}"
    return f"column {where!r}: Arrow type {t} has no exact Delta type"


def _fields_problem(
    fields: Sequence[pa.Field], prefix: str, *, check_names: bool = True
) -> str | None:
    seen: dict[str, str] = {}
    for f in fields:
        where = f"{prefix}{f.name}"
        if _field_id(f) is None:
            return f"column {where!r} has no PARQUET:field_id"
        if check_names:
            folded = f.name.casefold()
            if folded in seen:
                return (
                    f"columns {seen[folded]!r} and {where!r} differ only by case (Delta forbids it)"
                )
            seen[folded] = where
        problem = _type_problem(f.type, where)
        if problem is not None:
            return problem
    return None


def delta_type_problem(schema: pa.Schema) -> str | None:
    """Why ``schema`` cannot be published as Delta exactly (naming the column), or
    None.

    Accepted: booleans, signed integers, float32/64, strings and binaries (large ones
    too), decimal128, date32, timestamps in s, ms and us (with a time zone: Delta
    ``timestamp``; without: ``timestamp_ntz``), structs, lists (large too) and maps of
    those. Refused: unsigned integers, float16, nanosecond timestamps (Delta keeps
    microseconds), time of day, durations, intervals, decimal256, date64, fixed-size
    binaries and lists, dictionaries, views, null columns, a field without
    ``PARQUET:field_id``, and sibling names that differ only by case.
    """
    return _fields_problem(list(schema), "")


def _delta_type(t: pa.DataType) -> Any:
    primitive = _primitive_type(t)
    if primitive is not None:
        return primitive
    if pa.types.is_timestamp(t) and t.unit == "s":
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": _delta_fields(list(t))}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {
            "type": "array",
            "elementType": _delta_type(t.value_type),
            "containsNull": t.value_field.nullable,
        }
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": _delta_type(t.key_type),
            "valueType": _delta_type(t.item_type),
            "valueContainsNull": t.item_field.nullable,
        }
    raise InvalidInputError(f"Arrow type {t} has no exact Delta type")


def _delta_fields(fields: Iterable[pa.Field]) -> list[dict[str, Any]]:
    return [
        {"name": f.name, "type": _delta_type(f.type), "nullable": f.nullable, "metadata": {}}
        for f in fields
    ]


def delta_schema(schema: pa.Schema) -> str:
    """The Delta ``schemaString`` of an Arrow schema: its fields by name.

    Raises:
        InvalidInputError: a type :func:`delta_type_problem` refuses.
    """
    return _dumps({"type": "struct", "fields": _delta_fields(list(schema))})


# --- state ----------------------------------------------------------------------------


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


@dataclass(frozen=True)
class _Metadata:
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
class _Add:
    path: str  # as in the log (URL-encoded)
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
    metadata: _Metadata
    adds: dict[str, _Add]


# --- paths ------------------------------------------------------------------------------


def _log_path(f: PublishedFile) -> str:
    # Delta paths are URL-encoded RFC 2396 URI references: relative to the table root
    # when the file is under it, else absolute.
    if "://" in f.path:
        scheme, rest = f.path.split("://", 1)
        return f"{scheme}://{quote(rest, safe='/')}"
    # Relative, or an absolute local path: kept without a scheme, a reference that
    # resolves against the (local) table root to the same file. DuckDB's delta
    # extension 1.5.5 joins file:// URIs to the table root; deltalake reads both.
    return quote(f.path, safe="/")


def _descriptor(deletion_key: str, size: int, cardinality: int) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor(
        storage_type="u",
        path_or_inline_dv=DV_PREFIX + z85_encode(deletion_vector_uuid(deletion_key).bytes),
        offset=1,
        size_in_bytes=size,
        cardinality=cardinality,
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# --- checkpoint ------------------------------------------------------------------------

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


def _map_rows(value: Mapping[str, str]) -> list[tuple[str, str]]:
    return list(value.items())


def _checkpoint_bytes(state: DeltaState) -> tuple[bytes, int]:
    rows: list[dict[str, Any]] = []
    protocol = state.protocol.to_json()
    protocol.setdefault("readerFeatures", None)
    protocol.setdefault("writerFeatures", None)
    rows.append({"protocol": protocol})
    metadata = state.metadata.to_json()
    metadata["format"]["options"] = _map_rows(metadata["format"]["options"])
    metadata["configuration"] = _map_rows(metadata["configuration"])
    rows.append({"metaData": metadata})
    for path in sorted(state.adds):
        add = state.adds[path].to_json(data_change=False)
        add["partitionValues"] = []
        rows.append({"add": add})
    table = pa.Table.from_pylist(rows, schema=_CHECKPOINT_SCHEMA)
    buffer = io.BytesIO()
    # No Arrow schema in the footer (readers need none) and one row group: the bytes
    # depend only on the rows (and the pyarrow version, named in the footer).
    pq.write_table(
        table,
        buffer,
        compression="zstd",
        store_schema=False,
        row_group_size=max(1, len(rows)),
        write_page_index=False,
    )
    return buffer.getvalue(), len(rows)


# --- reading the log -------------------------------------------------------------------


class _Replay:
    """Applies stored actions to a state under construction, checking their types."""

    def __init__(self) -> None:
        self.protocol: Protocol | None = None
        self.metadata: _Metadata | None = None
        self.adds: dict[str, _Add] = {}

    def apply(self, action: Any, where: str) -> None:
        if not isinstance(action, dict):
            raise StoredMetadataError(f"{where}: an action that is not an object")
        if (p := action.get("protocol")) is not None:
            self.protocol = _parse_protocol(p, where)
        if (m := action.get("metaData")) is not None:
            self.metadata = _parse_metadata(m, where)
        if (r := action.get("remove")) is not None:
            if not isinstance(r, dict) or not isinstance(r.get("path"), str):
                raise StoredMetadataError(f"{where}: a remove without a path")
            self.adds.pop(r["path"], None)
        if (a := action.get("add")) is not None:
            add = _parse_add(a, where)
            self.adds[add.path] = add

    def state(self, version: int, where: str) -> DeltaState:
        if self.protocol is None or self.metadata is None:
            raise StoredMetadataError(f"{where}: the log has no protocol or metaData")
        return DeltaState(version, self.protocol, self.metadata, self.adds)


def _int(value: Any, where: str, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise StoredMetadataError(f"{where}: {what} is not an integer")
    return value


def _str(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise StoredMetadataError(f"{where}: {what} is not a string")
    return value


def _str_map(value: Any, where: str, what: str) -> dict[str, str]:
    # JSON has objects; the checkpoint's maps come back as lists of pairs.
    if value is None:
        return {}
    items: list[Any]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = value
    else:
        raise StoredMetadataError(f"{where}: {what} is not a map")
    out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise StoredMetadataError(f"{where}: {what} is not a map")
        out[_str(item[0], where, what)] = _str(item[1], where, what)
    return out


def _features(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise StoredMetadataError(f"{where}: protocol features are not a list")
    return tuple(sorted(_str(v, where, "a protocol feature") for v in value))


def _parse_protocol(p: Any, where: str) -> Protocol:
    if not isinstance(p, dict):
        raise StoredMetadataError(f"{where}: protocol is not an object")
    return Protocol(
        _int(p.get("minReaderVersion"), where, "minReaderVersion"),
        _int(p.get("minWriterVersion"), where, "minWriterVersion"),
        _features(p.get("readerFeatures"), where),
        _features(p.get("writerFeatures"), where),
    )


def _parse_metadata(m: Any, where: str) -> _Metadata:
    if not isinstance(m, dict):
        raise StoredMetadataError(f"{where}: metaData is not an object")
    created = m.get("createdTime")
    config = _str_map(m.get("configuration"), where, "configuration")
    return _Metadata(
        _str(m.get("id"), where, "metaData id"),
        _str(m.get("schemaString"), where, "schemaString"),
        tuple(sorted(config.items())),
        _int(created, where, "createdTime") if created is not None else 0,
    )


def _parse_dv(value: Any, where: str) -> DeletionVectorDescriptor | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise StoredMetadataError(f"{where}: deletionVector is not an object")
    storage = _str(value.get("storageType"), where, "storageType")
    if storage != "u":
        raise StoredMetadataError(
            f"{where}: deletion vector storage type {storage!r} (s3ddb writes 'u')"
        )
    inline = _str(value.get("pathOrInlineDv"), where, "pathOrInlineDv")
    try:
        parse_u_descriptor(inline)
    except StoredMetadataError as e:
        raise StoredMetadataError(f"{where}: {e}") from e
    offset = value.get("offset")
    return DeletionVectorDescriptor(
        storage,
        inline,
        _int(offset, where, "offset") if offset is not None else 0,
        _int(value.get("sizeInBytes"), where, "sizeInBytes"),
        _int(value.get("cardinality"), where, "cardinality"),
    )


def _parse_add(a: Any, where: str) -> _Add:
    if not isinstance(a, dict):
        raise StoredMetadataError(f"{where}: add is not an object")
    size = _int(a.get("size"), where, "add size")
    if size < 0:
        raise StoredMetadataError(f"{where}: add size {size} is negative")
    stats = a.get("stats")
    return _Add(
        _str(a.get("path"), where, "add path"),
        size,
        _int(a.get("modificationTime"), where, "modificationTime"),
        _str(stats, where, "stats") if stats is not None else "",
        _parse_dv(a.get("deletionVector"), where),
    )


def _read_bounded(store: ObjectStore, path: str) -> bytes:
    # One ranged GET, one byte past the bound: a larger file is refused unread.
    data = store.get_prefix(path, MAX_LOG_FILE_BYTES + 1)
    if len(data) > MAX_LOG_FILE_BYTES:
        raise StoredMetadataError(
            f"{path}: {len(data)} bytes (at most {MAX_LOG_FILE_BYTES} are read)"
        )
    return data


def _commit_actions(data: bytes, path: str, version: int) -> list[Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StoredMetadataError(f"{path}: not UTF-8") from e
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > _MAX_LINE_ACTIONS:
        raise StoredMetadataError(f"{path}: too many actions")
    actions = []
    for line in lines:
        try:
            actions.append(json.loads(line))
        except ValueError as e:
            raise StoredMetadataError(f"{path}: a line that is not JSON") from e
    info = actions[0].get("commitInfo") if actions and isinstance(actions[0], dict) else None
    if not isinstance(info, dict) or info.get(VERSION_KEY) != version:
        raise StoredMetadataError(
            f"{path}: not a commit s3ddb wrote (no commitInfo with {VERSION_KEY} = {version})"
        )
    return actions


def _checkpoint_actions(data: bytes, path: str) -> list[Any]:
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise StoredMetadataError(f"{path}: not a readable Parquet checkpoint ({e})") from e
    columns = [c for c in ("protocol", "metaData", "add", "remove") if c in table.column_names]
    actions: list[Any] = []
    for row in table.select(columns).to_pylist():
        actions.append({k: v for k, v in row.items() if v is not None})
    return actions


def _newest_checkpoint(store: ObjectStore, version: int) -> int | None:
    # _last_checkpoint names the newest checkpoint; only when it is newer than the
    # version asked for does the log need listing.
    try:
        raw = store.get(LAST_CHECKPOINT)
    except FileNotFoundError:
        raw = None
    if raw is not None and len(raw) < 1 << 16:
        try:
            last = json.loads(raw)
        except ValueError:
            last = None
        checkpoint = last.get("version") if isinstance(last, dict) else None
        if (
            isinstance(checkpoint, int)
            and not isinstance(checkpoint, bool)
            and 0 <= checkpoint <= version
        ):
            return checkpoint
    _, checkpoints, _ = _list_log(store)
    older = [v for v in checkpoints if v <= version]
    return max(older) if older else None


def _load_state(store: ObjectStore, version: int) -> DeltaState | None:
    path = commit_path(version)
    try:
        head = _read_bounded(store, path)
    except FileNotFoundError:
        return None
    replay = _Replay()
    start = _newest_checkpoint(store, version)
    if start is not None:
        where = _checkpoint_path(start)
        try:
            data = _read_bounded(store, where)
        except FileNotFoundError as e:
            raise StoredMetadataError(f"{where}: missing, though {LAST_CHECKPOINT} names it") from e
        for action in _checkpoint_actions(data, where):
            replay.apply(action, where)
        first = start + 1
    else:
        # No checkpoint: replay from the first commit (s3ddb's first holds protocol and
        # metaData).
        commits, _, _ = _list_log(store)
        first = min((v for v in commits if v <= version), default=version)
    if version - first >= MAX_REPLAY:
        raise StoredMetadataError(
            f"{path}: {version - first + 1} commits since the last checkpoint"
        )
    for v in range(first, version + 1):
        where = commit_path(v)
        try:
            data = head if v == version else _read_bounded(store, where)
        except FileNotFoundError as e:
            raise StoredMetadataError(f"{where}: missing from the log before {path}") from e
        for action in _commit_actions(data, where, v):
            replay.apply(action, where)
    return replay.state(version, path)


# --- the writer ----------------------------------------------------------------------------


def _needed_protocol(previous: Protocol | None, features: set[str]) -> Protocol:
    features = set(features) | set(previous.features if previous else ())
    legacy_reader = previous.min_reader if previous else 1
    legacy_writer = previous.min_writer if previous else 2
    if "deletionVectors" in features or "timestampNtz" in features or legacy_reader >= 3:
        # Table features: list every one in use.
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


class DeltaWriter:
    """The Delta Lake :class:`~s3ddb.open_formats.model.FormatWriter` (see the module
    docstring). Stateless: its state is a :class:`DeltaState`."""

    name = "delta"

    def type_problem(self, schema: pa.Schema) -> str | None:
        """See :func:`delta_type_problem`."""
        return delta_type_problem(schema)

    def load_state(self, store: ObjectStore, expected: TableVersion) -> DeltaState | None:
        """The state after ``version`` rebuilt from ``_delta_log/`` (``store`` rooted at
        the dataset): the newest checkpoint at or before ``version`` (found through
        ``_last_checkpoint``, else one listing) and the commits after it. None when
        ``_delta_log/<version>.json`` does not exist.

        Raises:
            StoredMetadataError: a log file that is too large, malformed, of the wrong
                types, missing between the checkpoint and ``version``, or a commit s3ddb
                did not write (naming the file).
        """
        version = expected.version  # TODO(trust): check the state against expected
        return _load_state(store, version)

    def publish(
        self, table: TableVersion, previous: Any | None, deleted: DeletedPositions
    ) -> tuple[Publication, DeltaState]:
        """The files of ``table`` and the state after it (see the module docstring).

        ``previous`` is the :class:`DeltaState` after ``table.previous`` (None when it is
        None: publication starts at this version).

        Raises:
            InvalidInputError: ``table.schema`` has a problem (:meth:`type_problem`),
                ``previous`` is missing or not a DeltaState while ``table.previous`` is
                set, or a deletion key's positions are not valid row positions.
        """
        problem = delta_type_problem(table.schema)
        if problem is not None:
            raise InvalidInputError(f"cannot publish version {table.version} as Delta: {problem}")
        state: DeltaState | None
        if table.previous is None:
            state = None
        elif isinstance(previous, DeltaState):
            state = previous
        else:
            raise InvalidInputError(
                f"publishing Delta version {table.version} needs the state after {table.previous}"
            )
        publication = Publication()
        version = table.version

        # Files: the whole list when publication starts, else the change.
        if state is None:
            removed: list[PublishedFile] = []
            added = list(table.all_files())
            adds: dict[str, _Add] = {}
        else:
            removed = list(table.removed)
            added = list(table.added)
            adds = dict(state.adds)
        remove_actions: list[dict[str, Any]] = []
        for f in sorted(removed, key=_log_path):
            path = _log_path(f)
            old = adds.pop(path, None)
            action: dict[str, Any] = {
                "path": path,
                "deletionTimestamp": table.timestamp_ms,
                "dataChange": True,
                "extendedFileMetadata": True,
                "partitionValues": {},
                "size": old.size if old is not None else f.size,
            }
            if old is not None and old.deletion_vector is not None:
                action["deletionVector"] = old.deletion_vector.to_json()
            remove_actions.append({"remove": action})
        add_actions: list[dict[str, Any]] = []
        dv_files: dict[str, bytes] = {}
        for f in sorted(added, key=_log_path):
            descriptor = None
            if f.deletion_key is not None:
                try:
                    data, size, cardinality = dv_file_bytes(deleted(f))
                except ValueError as e:
                    raise InvalidInputError(f"{f.path}: deleted rows: {e}") from e
                dv_files[deletion_files(f.deletion_key)[0]] = data
                descriptor = _descriptor(f.deletion_key, size, cardinality)
            add = _Add(
                _log_path(f),
                f.size,
                table.timestamp_ms,
                _dumps({"numRecords": f.physical_rows}),
                descriptor,
            )
            adds[add.path] = add
            add_actions.append({"add": add.to_json()})
        publication.content.extend(sorted(dv_files.items()))

        # Schema, configuration and protocol.
        schema_string = delta_schema(table.schema)
        config = dict(state.metadata.configuration) if state else {}
        features: set[str] = set()
        if any(a.deletion_vector is not None for a in adds.values()):
            config[_ENABLE_DV] = "true"
        if config.get(_ENABLE_DV) == "true":
            features.add("deletionVectors")
        if _uses_ntz(pa.struct(list(table.schema))):
            features.add("timestampNtz")
        protocol = _needed_protocol(state.protocol if state else None, features)
        metadata = _Metadata(
            state.metadata.table_id if state else table.table_uuid,
            schema_string,
            tuple(sorted(config.items())),
            state.metadata.created_time if state else table.timestamp_ms,
        )

        # The commit.
        commit_info: dict[str, Any] = {
            "timestamp": table.timestamp_ms,
            "operation": table.operation,
            "operationParameters": {},
            VERSION_KEY: version,
            "engineInfo": "s3ddb",
        }
        actions: list[dict[str, Any]] = [{"commitInfo": commit_info}]
        if state is None or protocol != state.protocol:
            actions.append({"protocol": protocol.to_json()})
        if state is None or metadata != state.metadata:
            actions.append({"metaData": metadata.to_json()})
        actions += remove_actions + add_actions
        publication.then.append(
            (commit_path(version), ("\n".join(_dumps(a) for a in actions) + "\n").encode())
        )
        new_state = DeltaState(version, protocol, metadata, adds)
        if state is None or version % CHECKPOINT_INTERVAL == 0:
            checkpoint, rows = _checkpoint_bytes(new_state)
            publication.then.append((_checkpoint_path(version), checkpoint))
            last = {
                "version": version,
                "size": rows,
                "sizeInBytes": len(checkpoint),
                "numOfAddFiles": len(adds),
            }
            publication.then.append((LAST_CHECKPOINT, _dumps(last).encode()))
        return publication, new_state
