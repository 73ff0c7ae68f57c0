"""Iceberg (format v2) table metadata for s3ddb versions.

:class:`IcebergWriter` publishes each s3ddb version ``N`` as Iceberg snapshot ``N``
under ``<root>/metadata``, pointing at s3ddb's own Parquet data files (their
``PARQUET:field_id`` are the Iceberg field ids). Files of a version::

    metadata/m-<group>-<V>.avro      data manifest of a FileGroup (one entry per file),
                                     written by version V
    metadata/d-<group>-<V>.avro      its delete manifest (groups with deleted rows)
    metadata/deletes/<key>.parquet   positional deletes of one data file
    metadata/snap-<N>.avro           manifest list of snapshot N
    metadata/v<N>.metadata.json      table metadata of version N
    metadata/version-hint.text       "N": the newest version (written last)

A group's manifests are written by the first version that lists the group and reused
by the next versions while they list it (a group's name changes with its content).
Every file is a deterministic function of the version and the state before it: JSON
with sorted keys, no wall-clock time, no random ids, Avro from
:mod:`s3ddb.open_formats.avro`.

Snapshot ids and sequence numbers are s3ddb versions. Manifest entries carry explicit
snapshot ids and sequence numbers (the version that wrote the manifest): a group's
data and delete manifests are always written by one version, so each positional
delete's sequence number equals its data file's and applies to it. A group that
reappears after a version without it (a restore) gets new manifests, named by the new
version: a published file never changes, so the lengths older manifest lists record
stay true.

The table metadata keeps the last :data:`SNAPSHOT_WINDOW` snapshots (and the
snapshot-log and metadata-log of the same versions) so its size does not grow with
history; each version stays readable through its own ``v<N>.metadata.json``.

Type mapping (:meth:`IcebergWriter.type_problem`): bool, int32, int64, float32,
float64, string/large_string, binary/large_binary, fixed_size_binary, decimal128
(precision <= 38), date32, time64[us], timestamp[us] (timestamptz with any time zone:
Iceberg keeps the instant, readers return it as UTC), struct, list/large_list and map
map exactly. int8 and int16 are widened to Iceberg ``int`` (readers return int32, every
value unchanged). Everything else has no exact Iceberg v2 counterpart and is refused:
unsigned integers, float16, decimal256 and the narrower decimal types, date64,
time32, time64[ns], timestamps in s, ms or ns, durations, intervals, dictionaries,
views, fixed_size_list, null, extension types. Every column is optional (a data file
written before a column was added lacks it).

Data files written by s3ddb carry ``PARQUET:field_id`` on top-level columns only;
readers that resolve columns by id (pyiceberg) fall back to the table's name mapping
(``schema.name-mapping.default``, which also keeps the earlier names of renamed
fields) for files with nested columns.

This module writes the files. Their names, the state carried from one version to the
next and reading it back (:func:`~s3ddb.open_formats.iceberg_state.load_state`,
:func:`foreign_problems`) are :mod:`s3ddb.open_formats.iceberg_state`'s; the names it
exports are importable from here too.
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from s3ddb.errors import InvalidInputError
from s3ddb.io.object_store import ObjectStore
from s3ddb.open_formats.avro import AvroSchema, encode_container
from s3ddb.open_formats.iceberg_state import (
    MAX_METADATA_BYTES,
    METADATA_DIR,
    SAFE_NAME,
    SNAPSHOT_WINDOW,
    VERSION_HINT,
    IcebergState,
    ManifestInfo,
    SnapshotInfo,
    canonical_json,
    deletion_files,
    foreign_problems,
    group_files,
    group_of,
    load_state,
    version_files,
)
from s3ddb.open_formats.model import (
    DeletedPositions,
    FileGroup,
    Publication,
    PublishedFile,
    TableVersion,
)

__all__ = [
    "MAX_METADATA_BYTES",
    "METADATA_DIR",
    "SNAPSHOT_WINDOW",
    "VERSION_HINT",
    "IcebergState",
    "IcebergWriter",
    "ManifestInfo",
    "SnapshotInfo",
    "deletion_files",
    "foreign_problems",
    "group_files",
    "group_of",
    "iceberg_schema",
    "version_files",
]

# Reserved field ids of positional delete files (Iceberg spec).
_DELETE_PATH_ID = 2147483546
_DELETE_POS_ID = 2147483545
# Field ids from here up are reserved by the Iceberg spec for metadata columns.
_RESERVED_IDS = 2147483000


# --- schemas -------------------------------------------------------------------------


class _TypeProblem(Exception):
    pass


def _field_id(f: pa.Field, path: str) -> int:
    raw = (f.metadata or {}).get(b"PARQUET:field_id")
    try:
        value = int(raw) if raw is not None else -1
    except ValueError:
        value = -1
    if not 0 <= value < _RESERVED_IDS:
        raise _TypeProblem(f"column {path!r} has no valid PARQUET:field_id ({raw!r})")
    return value


def _primitive(t: pa.DataType) -> str | None:
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"  # int8/int16 widen: every value is an Iceberg int
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed[{t.byte_width}]"
    if isinstance(t, pa.Decimal128Type) and t.precision <= 38:
        return f"decimal({t.precision}, {t.scale})"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_time64(t) and t.unit == "us":
        return "time"
    if pa.types.is_timestamp(t) and t.unit == "us":
        return "timestamptz" if t.tz is not None else "timestamp"
    return None


def _type(t: pa.DataType, path: str) -> Any:
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field(t.field(i), path) for i in range(t.num_fields)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = t.value_field
        return {
            "type": "list",
            "element-id": _field_id(element, f"{path}.{element.name}"),
            "element": _type(element.type, f"{path}.{element.name}"),
            "element-required": not element.nullable,
        }
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        return {
            "type": "map",
            "key-id": _field_id(key, f"{path}.{key.name}"),
            "key": _type(key.type, f"{path}.{key.name}"),
            "value-id": _field_id(item, f"{path}.{item.name}"),
            "value": _type(item.type, f"{path}.{item.name}"),
            "value-required": not item.nullable,
        }
    name = _primitive(t)
    if name is None:
        raise _TypeProblem(f"column {path!r} has type {t}, which Iceberg v2 cannot hold exactly")
    return name


def _field(f: pa.Field, parent: str) -> dict[str, Any]:
    path = f"{parent}.{f.name}" if parent else f.name
    # Optional always: files written before a column was added lack it.
    return {
        "id": _field_id(f, path),
        "name": f.name,
        "required": False,
        "type": _type(f.type, path),
    }


def iceberg_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Iceberg schema (a struct, without ``schema-id``) of an Arrow schema whose
    fields, nested ones included, carry ``PARQUET:field_id``.

    Raises:
        InvalidInputError: a type has no exact Iceberg counterpart, a field id is
            missing, or two fields share an id (the message names the column).
    """
    try:
        struct = {"type": "struct", "fields": [_field(f, "") for f in schema]}
    except _TypeProblem as exc:
        raise InvalidInputError(str(exc)) from None
    ids = _ids(struct)
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise InvalidInputError(f"field id(s) {twice} are used by more than one field")
    return struct


def _ids(node: Any) -> list[int]:
    """Every field id of an Iceberg type."""
    if not isinstance(node, dict):
        return []
    if node["type"] == "struct":
        return [i for f in node["fields"] for i in (f["id"], *_ids(f["type"]))]
    if node["type"] == "list":
        return [node["element-id"], *_ids(node["element"])]
    return [node["key-id"], *_ids(node["key"]), node["value-id"], *_ids(node["value"])]


def _name_mapping(
    struct: Mapping[str, Any], known: Mapping[int, Sequence[str]]
) -> tuple[list[dict[str, Any]], dict[int, tuple[str, ...]]]:
    """The name mapping of ``struct`` and the names it gives each id: a field's
    current name first, then its earlier names (from ``known``) that no sibling uses
    now or had too, so files written before a rename still resolve."""
    names: dict[int, tuple[str, ...]] = {}

    def of_fields(fields: Sequence[tuple[int, str, Any]]) -> list[dict[str, Any]]:
        current = {name for _i, name, _t in fields}
        earlier: dict[str, int] = {}
        for i, name, _t in fields:
            for old in known.get(i, ()):
                if old != name:
                    earlier[old] = earlier.get(old, 0) + 1
        out = []
        for i, name, t in fields:
            extra = [
                old
                for old in known.get(i, ())
                if old != name and old not in current and earlier[old] == 1
            ]
            names[i] = (name, *extra)
            entry: dict[str, Any] = {"field-id": i, "names": list(names[i])}
            children = of_type(t)
            if children:
                entry["fields"] = children
            out.append(entry)
        return out

    def of_type(t: Any) -> list[dict[str, Any]]:
        if not isinstance(t, dict):
            return []
        if t["type"] == "struct":
            return of_fields([(f["id"], f["name"], f["type"]) for f in t["fields"]])
        if t["type"] == "list":
            return of_fields([(t["element-id"], "element", t["element"])])
        return of_fields([(t["key-id"], "key", t["key"]), (t["value-id"], "value", t["value"])])

    return of_type(struct), names


# --- Avro schemas of manifests and manifest lists (Iceberg spec, v2) -----------------


def _opt(name: str, field_id: int, t: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", t], "default": None, "field-id": field_id}


def _req(name: str, field_id: int, t: Any) -> dict[str, Any]:
    return {"name": name, "type": t, "field-id": field_id}


def _int_map(name: str, field_id: int, key_id: int, value_id: int, value: str) -> dict[str, Any]:
    # Iceberg writes maps with int keys as arrays of key/value records.
    items = {
        "type": "record",
        "name": f"k{key_id}_v{value_id}",
        "fields": [_req("key", key_id, "int"), _req("value", value_id, value)],
    }
    return _opt(name, field_id, {"type": "array", "logicalType": "map", "items": items})


def _list(name: str, field_id: int, element_id: int, t: str) -> dict[str, Any]:
    return _opt(name, field_id, {"type": "array", "items": t, "element-id": element_id})


_DATA_FILE = {
    "type": "record",
    "name": "r2",
    "fields": [
        _req("content", 134, "int"),
        _req("file_path", 100, "string"),
        _req("file_format", 101, "string"),
        _req("partition", 102, {"type": "record", "name": "r102", "fields": []}),
        _req("record_count", 103, "long"),
        _req("file_size_in_bytes", 104, "long"),
        _int_map("column_sizes", 108, 117, 118, "long"),
        _int_map("value_counts", 109, 119, 120, "long"),
        _int_map("null_value_counts", 110, 121, 122, "long"),
        _int_map("nan_value_counts", 137, 138, 139, "long"),
        _int_map("lower_bounds", 125, 126, 127, "bytes"),
        _int_map("upper_bounds", 128, 129, 130, "bytes"),
        _opt("key_metadata", 131, "bytes"),
        _list("split_offsets", 132, 133, "long"),
        _list("equality_ids", 135, 136, "int"),
        _opt("sort_order_id", 140, "int"),
    ],
}

_MANIFEST_ENTRY: dict[str, Any] = {
    "type": "record",
    "name": "manifest_entry",
    "fields": [
        _req("status", 0, "int"),
        _opt("snapshot_id", 1, "long"),
        _opt("sequence_number", 3, "long"),
        _opt("file_sequence_number", 4, "long"),
        _req("data_file", 2, _DATA_FILE),
    ],
}

_FIELD_SUMMARY = {
    "type": "record",
    "name": "r508",
    "fields": [
        _req("contains_null", 509, "boolean"),
        _opt("contains_nan", 518, "boolean"),
        _opt("lower_bound", 510, "bytes"),
        _opt("upper_bound", 511, "bytes"),
    ],
}

_MANIFEST_FILE = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
        _req("manifest_path", 500, "string"),
        _req("manifest_length", 501, "long"),
        _req("partition_spec_id", 502, "int"),
        _req("content", 517, "int"),
        _req("sequence_number", 515, "long"),
        _req("min_sequence_number", 516, "long"),
        _req("added_snapshot_id", 503, "long"),
        _req("added_files_count", 504, "int"),
        _req("existing_files_count", 505, "int"),
        _req("deleted_files_count", 506, "int"),
        _req("added_rows_count", 512, "long"),
        _req("existing_rows_count", 513, "long"),
        _req("deleted_rows_count", 514, "long"),
        _opt("partitions", 507, {"type": "array", "items": _FIELD_SUMMARY, "element-id": 508}),
        _opt("key_metadata", 519, "bytes"),
    ],
}


# Compiled once. A manifest entry's encoding is its head (status, snapshot id, sequence
# numbers) followed by its data file's: entries are assembled from the two parts.
_ENTRY_AVRO = AvroSchema(_MANIFEST_ENTRY)
assert [f["name"] for f in _MANIFEST_ENTRY["fields"]][-1] == "data_file"
_ENTRY_HEAD_AVRO = AvroSchema({**_MANIFEST_ENTRY, "fields": _MANIFEST_ENTRY["fields"][:-1]})
_DATA_FILE_AVRO = AvroSchema(_DATA_FILE)
_MANIFEST_FILE_AVRO = AvroSchema(_MANIFEST_FILE)


def _data_file(
    content: int, path: str, rows: int, size: int, bound: bytes | None
) -> dict[str, Any]:
    bounds = [{"key": _DELETE_PATH_ID, "value": bound}] if bound is not None else None
    return {
        "content": content,
        "file_path": path,
        "file_format": "PARQUET",
        "partition": {},
        "record_count": rows,
        "file_size_in_bytes": size,
        "column_sizes": None,
        "value_counts": None,
        "null_value_counts": None,
        "nan_value_counts": None,
        # A positional delete file's path bounds name its one data file, so readers
        # apply it to that file only.
        "lower_bounds": bounds,
        "upper_bounds": bounds,
        "key_metadata": None,
        "split_offsets": None,
        "equality_ids": None,
        "sort_order_id": None,
    }


# typed: 1, True and 1.0 are one key otherwise (and not one encoding).
@functools.lru_cache(maxsize=8192, typed=True)
def _data_file_avro(content: int, path: str, rows: int, size: int, bound: bytes | None) -> bytes:
    """The Avro encoding of a ``data_file`` record: a version lists most files its
    predecessor listed, in a group written again (the inline one) each time.

    Raises:
        ValueError: a value does not fit (the caller encodes the entries again to
            report it as the whole manifest would).
    """
    return _DATA_FILE_AVRO.encode(_data_file(content, path, rows, size, bound))


def _entries_manifest(
    version: int,
    data_files: Sequence[tuple[int, str, int, int, bytes | None]],
    metadata: Sequence[tuple[str, bytes]],
) -> bytes:
    """The manifest of ``data_files`` (``_data_file`` arguments) added by ``version``:
    the bytes :func:`encode_container` writes for their entries, from cached parts."""
    try:
        head = _ENTRY_HEAD_AVRO.encode(_entry_head(version))
        parts = [head + _data_file_avro(*args) for args in data_files]
    except ValueError:
        parts = None
    if parts is None:  # report what does not fit as encoding the whole would
        entries = [{**_entry_head(version), "data_file": _data_file(*args)} for args in data_files]
        return encode_container(_ENTRY_AVRO, entries, metadata)
    return _ENTRY_AVRO.container(parts, metadata)


def _entry_head(version: int) -> dict[str, Any]:
    # Explicit ids and sequence numbers: nothing is left to inheritance.
    return {
        "status": 1,
        "snapshot_id": version,
        "sequence_number": version,
        "file_sequence_number": version,
    }


def _positional_deletes(data_path: str, positions: np.ndarray) -> bytes:
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), False, {"PARQUET:field_id": str(_DELETE_PATH_ID)}),
            pa.field("pos", pa.int64(), False, {"PARQUET:field_id": str(_DELETE_POS_ID)}),
        ]
    )
    paths = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(len(positions), dtype=np.int32)), pa.array([data_path])
    ).dictionary_decode()
    table = pa.table([paths, pa.array(positions, pa.int64())], schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def _checked_positions(file: PublishedFile, positions: Sequence[int]) -> np.ndarray:
    array = np.asarray(positions, dtype=np.int64)
    ok = (
        array.ndim == 1
        and len(array) == file.deleted_rows
        and (len(array) == 0 or (array[0] >= 0 and array[-1] < file.physical_rows))
        and bool(np.all(np.diff(array) > 0))
    )
    if not ok:
        raise InvalidInputError(
            f"deleted positions of {file.path} (key {file.deletion_key}) are not "
            f"{file.deleted_rows} sorted distinct positions below {file.physical_rows}"
        )
    return array


# --- the writer ----------------------------------------------------------------------


def _changes(table: TableVersion) -> tuple[list[PublishedFile], list[PublishedFile]]:
    """The data files ``table`` added and removed, for Iceberg: every file when it
    starts publication; a file whose deleted rows changed is in both ``added`` and
    ``removed`` but neither here (it gained a delete file, it stays)."""
    if table.previous is None:
        return table.all_files(), []
    removed_paths = {f.path for f in table.removed}
    added_paths = {f.path for f in table.added}
    return (
        [f for f in table.added if f.path not in removed_paths],
        [f for f in table.removed if f.path not in added_paths],
    )


def _operation(table: TableVersion) -> str:
    """The Iceberg operation: what happened to data files, s3ddb's kind deciding
    between the two readings of a rewrite and a delete."""
    added_files, removed_files = _changes(table)
    added = {f.path for f in added_files}
    removed = {f.path for f in removed_files}
    changed_deletes = bool(table.added or table.removed) and not (added or removed)
    if table.operation == "Rewrite":
        return "replace"  # compaction: the same rows in other files
    if table.operation == "Delete" or (removed and not added) or changed_deletes:
        return "delete"
    if added and not removed:
        return "append"
    if not added and not removed:
        return "replace"  # schema, index or config only: no data changed
    return "overwrite"


class IcebergWriter:
    """The Iceberg format writer (see the module docstring for the layout).

    Its state is an :class:`IcebergState`.
    """

    name = "iceberg"

    def type_problem(self, schema: pa.Schema) -> str | None:
        """Why ``schema`` cannot be published exactly, naming the column, or None.

        Refused: unsigned ints, float16, decimal256, date64, time32, time64[ns],
        timestamps not in microseconds, durations, intervals, dictionaries, views,
        fixed_size_list, null and extension types; fields without a valid
        ``PARQUET:field_id``; two fields with one id. int8/int16 are accepted (widened
        to Iceberg int); list and large_list both map to Iceberg list.
        """
        try:
            iceberg_schema(schema)
        except InvalidInputError as exc:
            return str(exc)
        return None

    def load_state(self, store: ObjectStore, expected: TableVersion) -> IcebergState | None:
        """The state after ``version`` (see :func:`load_state`), or None when its
        metadata JSON does not exist.

        Raises:
            StoredMetadataError: the stored metadata is too large, malformed, not
                s3ddb's, or inconsistent; the message names the file.
        """
        version = expected.version  # TODO(trust): check the state against expected
        return load_state(store, version)

    def publish(
        self, table: TableVersion, previous: Any | None, deleted: DeletedPositions
    ) -> tuple[Publication, IcebergState]:
        """The files of ``table`` (content: new manifests, delete files and the manifest
        list; then: the metadata JSON and the version hint) and the state after it.

        Raises:
            InvalidInputError: the schema cannot be published (see
                :meth:`type_problem`), ``previous`` is not the state after
                ``table.previous``, two groups share a name, a group or deletion key
                is not file-name-safe, or deleted positions disagree with their file.
        """
        struct = iceberg_schema(table.schema)
        prev = _checked_previous(table, previous)
        version = table.version
        root = table.root
        content: list[tuple[str, bytes]] = []

        canonical = canonical_json(struct)
        prev_schemas = dict(prev.schemas) if prev else {}
        if prev is not None and prev_schemas.get(prev.schema_id) == canonical:
            schema_id = prev.schema_id
        else:
            schema_id = prev.schema_id + 1 if prev is not None else 0
        schema = (_schema_text(canonical, schema_id), schema_id)

        reused: dict[str, list[ManifestInfo]] = {}
        for info in prev.manifests if prev else ():
            reused.setdefault(info.group, []).append(info)
        manifests: list[ManifestInfo] = []
        seen: set[str] = set()
        for group in table.groups:
            if group.name in seen or not re.fullmatch(SAFE_NAME, group.name):
                raise InvalidInputError(
                    f"group name {group.name!r} is repeated or not file-name-safe"
                )
            seen.add(group.name)
            if group.name in reused:
                manifests.extend(reused[group.name])
                continue
            written, delete_files = _group_manifests(group, table, schema, deleted)
            for info, data in written:
                content.append((info.path, data))
                manifests.append(info)
            content.extend(delete_files)

        manifest_list = _manifest_list(manifests, root, version, table.previous if prev else None)
        content.append((version_files(version)[1], manifest_list))

        snapshot = SnapshotInfo(
            snapshot_id=version,
            parent_id=table.previous if prev is not None else None,
            timestamp_ms=table.timestamp_ms,
            manifest_list=f"{root}/{version_files(version)[1]}",
            schema_id=schema_id,
            summary=_summary(table, manifests),
        )
        snapshots = ((*prev.snapshots, snapshot) if prev else (snapshot,))[-SNAPSHOT_WINDOW:]
        used = {s.schema_id for s in snapshots}
        schemas = {**{i: c for i, c in prev_schemas.items() if i in used}, schema_id: canonical}
        mapping, names = _name_mapping(struct, dict(prev.names) if prev else {})
        last_column_id = max([*_ids(struct), prev.last_column_id if prev else 0])
        state = IcebergState(
            version=version,
            location=root,
            schema_id=schema_id,
            schemas=tuple(sorted(schemas.items())),
            last_column_id=last_column_id,
            snapshots=snapshots,
            manifests=tuple(manifests),
            names=tuple(sorted(names.items())),
        )
        metadata = _metadata_json(state, table, mapping)
        publication = Publication(
            content=content,
            then=[(version_files(version)[0], metadata), (VERSION_HINT, str(version).encode())],
        )
        return publication, state


def _checked_previous(table: TableVersion, previous: Any | None) -> IcebergState | None:
    if table.previous is None:
        if previous is not None:
            raise InvalidInputError(
                f"version {table.version} starts publication: no previous state"
            )
        return None
    if not isinstance(previous, IcebergState) or previous.version != table.previous:
        raise InvalidInputError(
            f"publishing version {table.version} needs the Iceberg state after version "
            f"{table.previous}, got {type(previous).__name__}"
            + (f" of version {previous.version}" if isinstance(previous, IcebergState) else "")
        )
    if previous.location != table.root:
        raise InvalidInputError(
            f"the Iceberg state is of table {previous.location!r}, not {table.root!r}"
        )
    return previous


def _absolute(root: str, file: PublishedFile) -> str:
    return f"{root}/{file.path}" if file.is_relative else file.path


@functools.lru_cache(maxsize=64, typed=True)
def _schema_text(canonical: str, schema_id: int) -> bytes:
    """The canonical JSON of the schema ``canonical`` (a struct) with its id."""
    return canonical_json({**json.loads(canonical), "schema-id": schema_id}).encode()


def _manifest_metadata(schema_text: bytes, schema_id: int, content: str) -> list[tuple[str, bytes]]:
    return [
        ("schema", schema_text),
        ("schema-id", str(schema_id).encode()),
        ("partition-spec", b"[]"),
        ("partition-spec-id", b"0"),
        ("format-version", b"2"),
        ("content", content.encode()),
    ]


def _group_manifests(
    group: FileGroup,
    table: TableVersion,
    schema: tuple[bytes, int],
    deleted: DeletedPositions,
) -> tuple[list[tuple[ManifestInfo, bytes]], list[tuple[str, bytes]]]:
    """The data manifest and (when some file has deleted rows) delete manifest of a
    group this version lists first, and the group's positional delete files.
    ``schema``: the schema's canonical JSON (with its id) and id."""
    version, root = table.version, table.root
    files = group.files()
    if not files:
        return [], []
    data = _entries_manifest(
        version,
        [(0, _absolute(root, f), f.physical_rows, f.size, None) for f in files],
        _manifest_metadata(*schema, "data"),
    )
    rows = sum(f.physical_rows for f in files)
    data_info = ManifestInfo(
        group_files(group.name, version)[0], len(data), 0, version, version, len(files), rows
    )
    manifests = [(data_info, data)]
    delete_files: list[tuple[str, bytes]] = []
    delete_entries: list[tuple[int, str, int, int, bytes | None]] = []
    for f in files:
        if f.deletion_key is None:
            continue
        if not re.fullmatch(SAFE_NAME, f.deletion_key):
            raise InvalidInputError(f"deletion key {f.deletion_key!r} is not file-name-safe")
        data_path = _absolute(root, f)
        blob = _positional_deletes(data_path, _checked_positions(f, deleted(f)))
        path = deletion_files(f.deletion_key)[0]
        delete_files.append((path, blob))
        delete_entries.append((1, f"{root}/{path}", f.deleted_rows, len(blob), data_path.encode()))
    if delete_entries:
        blob = _entries_manifest(version, delete_entries, _manifest_metadata(*schema, "deletes"))
        positions = sum(rows for _c, _p, rows, _s, _b in delete_entries)
        info = ManifestInfo(
            group_files(group.name, version)[1],
            len(blob),
            1,
            version,
            version,
            len(delete_entries),
            positions,
        )
        manifests.append((info, blob))
    return manifests, delete_files


def _manifest_list(
    manifests: Sequence[ManifestInfo], root: str, version: int, parent: int | None
) -> bytes:
    records = [
        {
            "manifest_path": f"{root}/{m.path}",
            "manifest_length": m.length,
            "partition_spec_id": 0,
            "content": m.content,
            "sequence_number": m.sequence_number,
            "min_sequence_number": m.sequence_number,
            "added_snapshot_id": m.added_snapshot_id,
            "added_files_count": m.files,
            "existing_files_count": 0,
            "deleted_files_count": 0,
            "added_rows_count": m.rows,
            "existing_rows_count": 0,
            "deleted_rows_count": 0,
            "partitions": None,
            "key_metadata": None,
        }
        for m in manifests
    ]
    metadata = [
        ("snapshot-id", str(version).encode()),
        ("parent-snapshot-id", str(parent).encode() if parent is not None else b"null"),
        ("sequence-number", str(version).encode()),
        ("format-version", b"2"),
    ]
    return encode_container(_MANIFEST_FILE_AVRO, records, metadata)


def _summary(table: TableVersion, manifests: Sequence[ManifestInfo]) -> tuple[tuple[str, str], ...]:
    added, removed = _changes(table)
    data = [m for m in manifests if m.content == 0]
    deletes = [m for m in manifests if m.content == 1]
    summary = {
        "operation": _operation(table),
        "s3ddb.version": str(table.version),
        "s3ddb.operation": table.operation,
        "added-data-files": str(len(added)),
        "deleted-data-files": str(len(removed)),
        "added-records": str(sum(f.physical_rows for f in added)),
        "deleted-records": str(sum(f.physical_rows for f in removed)),
        "added-files-size": str(sum(f.size for f in added)),
        "removed-files-size": str(sum(f.size for f in removed)),
        "total-data-files": str(sum(m.files for m in data)),
        "total-records": str(sum(m.rows for m in data)),
        "total-delete-files": str(sum(m.files for m in deletes)),
        "total-position-deletes": str(sum(m.rows for m in deletes)),
        "total-equality-deletes": "0",
    }
    return tuple(sorted(summary.items()))


def _metadata_json(state: IcebergState, table: TableVersion, mapping: Any) -> bytes:
    root = state.location
    document = {
        "format-version": 2,
        "table-uuid": table.table_uuid,
        "location": root,
        "last-sequence-number": state.version,
        "last-updated-ms": table.timestamp_ms,
        "last-column-id": state.last_column_id,
        "current-schema-id": state.schema_id,
        "schemas": [_schema_document(i, c) for i, c in state.schemas],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {"schema.name-mapping.default": canonical_json(mapping)},
        "current-snapshot-id": state.version,
        "refs": {"main": {"snapshot-id": state.version, "type": "branch"}},
        "snapshots": [_snapshot_document(s) for s in state.snapshots],
        "snapshot-log": [_snapshot_log(s.snapshot_id, s.timestamp_ms) for s in state.snapshots],
        "metadata-log": [
            _metadata_log(root, s.snapshot_id, s.timestamp_ms) for s in state.snapshots[:-1]
        ],
    }
    out: list[str] = []
    _render(document, "\n", out)
    return "".join(out).encode("utf-8")


class _Rendered(str):
    """JSON text as ``json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False)``
    writes it, at the outermost level."""

    __slots__ = ()


def _dumps_indented(value: Any) -> _Rendered:
    return _Rendered(json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False))


# The schemas and snapshots of the window are the same from one version to the next:
# each is rendered once.
@functools.lru_cache(maxsize=256, typed=True)
def _schema_document(schema_id: int, canonical: str) -> _Rendered:
    return _dumps_indented({**json.loads(canonical), "schema-id": schema_id})


def _snapshot_document(snapshot: SnapshotInfo) -> _Rendered:
    s = snapshot
    exact = type(s.snapshot_id) is type(s.timestamp_ms) is type(s.schema_id) is int
    if exact and (s.parent_id is None or type(s.parent_id) is int):
        return _cached_snapshot_document(snapshot)
    return _dumps_indented(snapshot.to_json())  # 1.0 == 1: not one key of the cache


@functools.lru_cache(maxsize=1024)
def _cached_snapshot_document(snapshot: SnapshotInfo) -> _Rendered:
    return _dumps_indented(snapshot.to_json())


@functools.lru_cache(maxsize=1024, typed=True)
def _snapshot_log(snapshot_id: int, timestamp_ms: int) -> _Rendered:
    return _dumps_indented({"snapshot-id": snapshot_id, "timestamp-ms": timestamp_ms})


@functools.lru_cache(maxsize=1024, typed=True)
def _metadata_log(root: str, snapshot_id: int, timestamp_ms: int) -> _Rendered:
    return _dumps_indented(
        {
            "metadata-file": f"{root}/{version_files(snapshot_id)[0]}",
            "timestamp-ms": timestamp_ms,
        }
    )


def _render(value: Any, newline: str, out: list[str]) -> None:
    """Append the text ``json.dumps(value, sort_keys=True, indent=1,
    ensure_ascii=False)`` writes for ``value`` nested ``len(newline) - 1`` levels
    deep (``newline``: a newline and the indentation of that level) to ``out``.

    The standard encoder renders indented JSON in pure Python; this does the same
    for the shapes of a metadata JSON and takes parts already rendered
    (:class:`_Rendered`: the standard encoder's text, whose line breaks only need
    the deeper indentation, strings holding none).
    """
    if isinstance(value, _Rendered):
        out.append(value.replace("\n", newline) if len(newline) > 1 else value)
    elif isinstance(value, str):
        out.append(_json_string(value))
    elif type(value) is int:
        out.append(int.__repr__(value))
    elif isinstance(value, dict) and all(isinstance(key, str) for key in value):
        if not value:
            out.append("{}")
            return
        inner = newline + " "
        separator = "{" + inner
        for key in sorted(value):
            out.append(separator)
            out.append(_json_string(key))
            out.append(": ")
            _render(value[key], inner, out)
            separator = "," + inner
        out.append(newline + "}")
    elif isinstance(value, list):
        if not value:
            out.append("[]")
            return
        inner = newline + " "
        separator = "[" + inner
        for item in value:
            out.append(separator)
            _render(item, inner, out)
            separator = "," + inner
        out.append(newline + "]")
    elif isinstance(value, (dict, tuple)):
        _render(_dumps_indented(value), newline, out)
    else:  # int, bool, None, float
        out.append(json.dumps(value))


_json_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
