"""A published Iceberg version: the names and Avro schemas of its files, the state
:class:`~s3ddb.open_formats.iceberg.IcebergWriter` carries from one version to the next,
and the primitives that read published files as untrusted input.

Owns the layout's names (:func:`version_files`, :func:`group_files`,
:func:`deletion_files`, :func:`group_of`, :func:`manifest_version`, the file-name-safe
:data:`SAFE_NAME`), the Avro schemas of manifests and manifest lists, the state
(:class:`IcebergState` with its :class:`SnapshotInfo` window and :class:`ManifestInfo`
list; schemas kept as :func:`canonical_json`), bounded reads (:func:`bounded_get`,
:func:`bounded_json`, :class:`Checked`: sizes, JSON depth and values bounded before
parsing, errors that name the file) and :func:`foreign_problems` (files under
``metadata/`` s3ddb would not have written). Checking a published state against the
manifests is :mod:`s3ddb.open_formats.iceberg_checks`'s; writing the files is
:mod:`s3ddb.open_formats.iceberg`'s, whose docstring describes the layout.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from s3ddb.errors import PublishedStateError, StoredMetadataError
from s3ddb.io.object_store import ObjectStore
from s3ddb.open_formats.avro import AvroSchema

__all__ = [
    "DATA_FILE_AVRO",
    "DELETE_PATH_ID",
    "ENTRY_AVRO",
    "ENTRY_HEAD_AVRO",
    "MANIFEST_FILE_AVRO",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "MAX_METADATA_BYTES",
    "METADATA_DIR",
    "SAFE_NAME",
    "SNAPSHOT_WINDOW",
    "VERSION_HINT",
    "Checked",
    "IcebergState",
    "ManifestInfo",
    "SnapshotInfo",
    "bounded_get",
    "bounded_json",
    "canonical_json",
    "deletion_files",
    "foreign_problems",
    "group_files",
    "group_of",
    "manifest_version",
    "version_files",
]

METADATA_DIR = "metadata"
VERSION_HINT = f"{METADATA_DIR}/version-hint.text"
#: A metadata JSON lists the snapshots (and log entries) of the versions published
#: among the last this many (the version's own included).
SNAPSHOT_WINDOW = 20
#: Largest metadata JSON or manifest list read back.
MAX_METADATA_BYTES = 64 << 20
#: Most values (objects, arrays, strings, numbers...) a JSON read back may hold, counted
#: before it is parsed: what it turns into in memory stays within about 200 MiB.
MAX_JSON_VALUES = 1 << 21
#: Deepest nesting of objects and arrays a JSON read back may have.
MAX_JSON_DEPTH = 256
#: A group name or deletion key: what may stand in a file name.
SAFE_NAME = r"[A-Za-z0-9_.\-]+"
#: The reserved field id of a positional delete file's ``file_path`` (Iceberg spec).
DELETE_PATH_ID = 2147483546
_VERSION_JSON = re.compile(rf"{METADATA_DIR}/v([0-9]+)\.metadata\.json")
_SNAP = re.compile(rf"{METADATA_DIR}/snap-([0-9]+)\.avro")
_MANIFEST = re.compile(rf"{METADATA_DIR}/([md])-({SAFE_NAME})-([0-9]+)\.avro")
_DELETES = re.compile(rf"{METADATA_DIR}/deletes/({SAFE_NAME})\.parquet")


# --- names ---------------------------------------------------------------------------


def version_files(version: int) -> list[str]:
    """The files only version ``version`` writes: its metadata JSON and manifest list
    (relative to the dataset root)."""
    return [f"{METADATA_DIR}/v{version}.metadata.json", f"{METADATA_DIR}/snap-{version}.avro"]


def group_files(group_name: str, version: int) -> list[str]:
    """The data and delete manifests of group ``group_name`` written by version
    ``version`` (the delete manifest exists only for groups with deleted rows). The
    writing version is in the name: a group listed again after versions without it (a
    restore) gets new manifests, and the ones older manifest lists name never change."""
    return [
        f"{METADATA_DIR}/m-{group_name}-{version}.avro",
        f"{METADATA_DIR}/d-{group_name}-{version}.avro",
    ]


def group_of(path: str) -> str | None:
    """The group whose manifest ``path`` is (None: not a group manifest)."""
    match = _MANIFEST.fullmatch(path)
    return match.group(2) if match else None


def manifest_version(path: str) -> tuple[int, str, int] | None:
    """What group manifest ``path`` is named after: its content (0 data, 1 deletes),
    its group and the version that wrote it (None: not a group manifest's name)."""
    match = _MANIFEST.fullmatch(path)
    if match is None or len(match.group(3)) > 19:
        return None
    return {"m": 0, "d": 1}[match.group(1)], match.group(2), int(match.group(3))


def deletion_files(deletion_key: str) -> list[str]:
    """The positional delete file of ``deletion_key``."""
    return [f"{METADATA_DIR}/deletes/{deletion_key}.parquet"]


def canonical_json(value: Any) -> str:
    """``value`` as compact JSON with sorted keys: how :class:`IcebergState` keeps its
    schemas, so one schema is one string."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- state ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestInfo:
    """A manifest listed by the current snapshot, as its manifest list records it.

    Attributes:
        path: relative to the dataset root (``metadata/m-<group>.avro``...).
        length: its size in bytes.
        content: 0 data, 1 deletes.
        sequence_number: of the version that wrote it (its entries' too).
        added_snapshot_id: the version that wrote it.
        files: entries (all added by ``added_snapshot_id``).
        rows: data rows (physical) or deleted positions.
    """

    path: str
    length: int
    content: int
    sequence_number: int
    added_snapshot_id: int
    files: int
    rows: int

    @property
    def group(self) -> str:
        match = _MANIFEST.fullmatch(self.path)
        assert match is not None  # checked when built or loaded
        return match.group(2)


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot of the metadata JSON's window (``parent_id`` None for the first)."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    manifest_list: str
    schema_id: int
    summary: tuple[tuple[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "snapshot-id": self.snapshot_id,
            "sequence-number": self.snapshot_id,
            "timestamp-ms": self.timestamp_ms,
            "manifest-list": self.manifest_list,
            "schema-id": self.schema_id,
            "summary": dict(self.summary),
        }
        if self.parent_id is not None:
            out["parent-snapshot-id"] = self.parent_id
        return out


@dataclass(frozen=True)
class IcebergState:
    """What :class:`~s3ddb.open_formats.iceberg.IcebergWriter` needs of a published
    version to publish the next.

    Attributes:
        version: the s3ddb version (and snapshot id).
        location: the table location (the dataset root).
        schema_id: the current schema's id.
        schemas: (id, canonical JSON) of every schema the window's snapshots use.
        last_column_id: the highest field id ever used.
        snapshots: the window, oldest first; the last is ``version``'s.
        manifests: the current snapshot's manifests, in manifest list order.
        names: field id -> names, as the name mapping gives them.
    """

    version: int
    location: str
    schema_id: int
    schemas: tuple[tuple[int, str], ...]
    last_column_id: int
    snapshots: tuple[SnapshotInfo, ...]
    manifests: tuple[ManifestInfo, ...]
    names: tuple[tuple[int, tuple[str, ...]], ...]


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


#: The Avro schemas of manifests (:data:`ENTRY_AVRO`) and manifest lists
#: (:data:`MANIFEST_FILE_AVRO`), compiled once. A manifest entry's encoding is its head
#: (status, snapshot id, sequence numbers, :data:`ENTRY_HEAD_AVRO`) followed by its data
#: file's (:data:`DATA_FILE_AVRO`): the writer assembles entries from the two parts. A
#: file read back must have exactly these schemas.
ENTRY_AVRO = AvroSchema(_MANIFEST_ENTRY)
assert [f["name"] for f in _MANIFEST_ENTRY["fields"]][-1] == "data_file"
ENTRY_HEAD_AVRO = AvroSchema({**_MANIFEST_ENTRY, "fields": _MANIFEST_ENTRY["fields"][:-1]})
DATA_FILE_AVRO = AvroSchema(_DATA_FILE)
MANIFEST_FILE_AVRO = AvroSchema(_MANIFEST_FILE)


# --- reading published files (untrusted) --------------------------------------------


def bounded_get(store: ObjectStore, path: str, limit: int = MAX_METADATA_BYTES) -> bytes | None:
    """The object at ``path`` (None if missing), refused when over ``limit`` bytes.

    Raises:
        PublishedStateError: it is larger than ``limit``.
    """
    try:
        data = store.get_prefix(path, limit + 1)
    except FileNotFoundError:
        return None
    if len(data) > limit:
        raise PublishedStateError(f"{path}: larger than {limit} bytes", path=path)
    return data


# A JSON string (escapes included): what may hold brackets and commas that are text.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
# +1 for an opening bracket, -1 for a closing one, 0 for any other byte.
_NESTING = np.zeros(256, dtype=np.int8)
_NESTING[[ord("["), ord("{")]] = 1
_NESTING[[ord("]"), ord("}")]] = -1
_DEPTH_CHUNK = 1 << 22


def bounded_json(raw: bytes | str, path: str, what: str = "") -> Any:
    """``raw`` parsed as JSON once its size in values (at most
    :data:`MAX_JSON_VALUES`) and its nesting (at most :data:`MAX_JSON_DEPTH`) are
    known to be bounded: both are counted on the text, strings left out, before the
    parser builds anything. ``path`` names the file (``what`` the part of it) in
    errors.

    Raises:
        PublishedStateError: not JSON, too many values or nested too deeply.
    """
    text = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    where = f"{path}: {what}" if what else f"{path}:"
    bare = _JSON_STRING.sub(b'""', text)
    values = bare.count(b",") + bare.count(b"[") + bare.count(b"{") + 1
    if values > MAX_JSON_VALUES:
        raise PublishedStateError(
            f"{where} holds about {values} JSON values, more than the {MAX_JSON_VALUES} "
            "s3ddb reads",
            path=path,
        )
    depth, deepest = 0, 0
    for start in range(0, len(bare), _DEPTH_CHUNK):
        steps = _NESTING[np.frombuffer(bare, np.uint8, min(_DEPTH_CHUNK, len(bare) - start), start)]
        levels = np.cumsum(steps, dtype=np.int64) + depth
        if len(levels):
            deepest = max(deepest, int(levels.max()))
            depth = int(levels[-1])
        if deepest > MAX_JSON_DEPTH:
            break
    if deepest > MAX_JSON_DEPTH:
        raise PublishedStateError(
            f"{where} nests deeper than the {MAX_JSON_DEPTH} levels s3ddb reads", path=path
        )
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PublishedStateError(f"{where} not JSON: {exc}", path=path) from None


class Checked:
    """Typed access to an untrusted JSON (or Avro) object of the published file
    ``path``; every failure is a :class:`~s3ddb.errors.PublishedStateError` naming it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, message: str) -> PublishedStateError:
        return PublishedStateError(f"{self.path}: {message}", path=self.path)

    def get(
        self, obj: Any, key: str, kind: type | tuple[type, ...], *, optional: bool = False
    ) -> Any:
        if not isinstance(obj, dict):
            raise self.fail(f"expected an object holding {key!r}, got {type(obj).__name__}")
        if key not in obj or obj[key] is None:
            if optional:
                return None
            raise self.fail(f"{key!r} is missing")
        value = obj[key]
        bad_bool = isinstance(value, bool) and kind is not bool
        if bad_bool or not isinstance(value, kind):
            raise self.fail(f"{key!r} is a {type(value).__name__}, not the expected type")
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
            raise self.fail(f"{key!r} is out of range")
        return value


def foreign_problems(store: ObjectStore, newest_version: int) -> list[tuple[str, str]]:
    """Files under ``metadata/`` that s3ddb would not have written, up to its newest
    version ``newest_version``: names s3ddb never uses, metadata JSON or manifest
    lists of later versions, and a newest metadata (the one the version hint names,
    and any later one) whose current snapshot is not the s3ddb version of its name
    (another engine committed to the table). One listing, and reads only of those
    metadata files.

    Returns:
        Each file's path and what is wrong with it (empty: the metadata is all
        s3ddb's).

    Raises:
        OSError: the store cannot be listed or read.
    """
    problems: list[tuple[str, str]] = []
    to_read: set[int] = set()
    listed: set[int] = set()
    for meta in store.list(f"{METADATA_DIR}/"):
        path = meta.path
        if path == VERSION_HINT or _MANIFEST.fullmatch(path) or _DELETES.fullmatch(path):
            continue
        version_match = _VERSION_JSON.fullmatch(path)
        snap_match = _SNAP.fullmatch(path)
        if version_match:
            n = int(version_match.group(1))
            listed.add(n)
            if n > newest_version:
                problems.append((path, f"a version after s3ddb's newest ({newest_version})"))
                to_read.add(n)
        elif snap_match:
            n = int(snap_match.group(1))
            if n > newest_version:
                problems.append((path, f"a manifest list after s3ddb's newest ({newest_version})"))
        else:
            problems.append((path, "not a file s3ddb writes"))
    try:
        hint_raw = store.get_prefix(VERSION_HINT, 64)
    except FileNotFoundError:
        hint_raw = None
    if hint_raw is not None:
        hint = hint_raw.decode("utf-8", "replace").strip()
        if not (hint.isascii() and hint.isdecimal()):
            problems.append((VERSION_HINT, f"{hint[:20]!r} is not a version"))
        elif int(hint) in listed:
            to_read.add(int(hint))
        else:
            problems.append((VERSION_HINT, f"names version {hint}, which has no metadata"))
    for n in sorted(to_read):
        path = version_files(n)[0]
        try:
            _check_own(path, bounded_get(store, path), n)
        except StoredMetadataError as exc:
            why = str(exc)
            problems.append((path, why.removeprefix(f"{path}: ")))
    return problems


def _check_own(path: str, raw: bytes | None, version: int) -> None:
    """Raise unless ``raw`` is a metadata JSON whose current snapshot is s3ddb's
    ``version``."""
    if raw is None:
        raise StoredMetadataError(f"{path}: vanished while being checked")
    c = Checked(path)
    doc = bounded_json(raw, path)
    current = c.get(doc, "current-snapshot-id", int, optional=True)
    for snapshot in c.get(doc, "snapshots", list):
        if c.get(snapshot, "snapshot-id", int) == current:
            summary = c.get(snapshot, "summary", dict)
            if summary.get("s3ddb.version") == str(version) and current == version:
                return
    raise c.fail(f"its current snapshot ({current}) is not s3ddb's version {version}")
