"""A published Iceberg version: the names of its files, the state
:class:`~s3ddb.open_formats.iceberg.IcebergWriter` carries from one version to the next,
and reading that state back from the store.

Owns the layout's names (:func:`version_files`, :func:`group_files`,
:func:`deletion_files`, :func:`group_of`, the file-name-safe :data:`SAFE_NAME`), the
state (:class:`IcebergState` with its :class:`SnapshotInfo` window and
:class:`ManifestInfo` list; schemas kept as :func:`canonical_json`), :func:`load_state`
(a version's metadata JSON and manifest list, untrusted: bounded reads, every field
checked, errors naming the file) and :func:`foreign_problems` (files under
``metadata/`` s3ddb would not have written). Writing the files is
:mod:`s3ddb.open_formats.iceberg`'s, whose docstring describes the layout.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from s3ddb.errors import StoredMetadataError
from s3ddb.io.object_store import ObjectStore
from s3ddb.open_formats.avro import decode_container

__all__ = [
    "MAX_METADATA_BYTES",
    "METADATA_DIR",
    "SAFE_NAME",
    "SNAPSHOT_WINDOW",
    "VERSION_HINT",
    "IcebergState",
    "ManifestInfo",
    "SnapshotInfo",
    "canonical_json",
    "deletion_files",
    "foreign_problems",
    "group_files",
    "group_of",
    "load_state",
    "version_files",
]

METADATA_DIR = "metadata"
VERSION_HINT = f"{METADATA_DIR}/version-hint.text"
#: Snapshots (and log entries) one metadata JSON keeps.
SNAPSHOT_WINDOW = 20
#: Largest metadata JSON or manifest list :func:`load_state` reads.
MAX_METADATA_BYTES = 64 << 20
#: A group name or deletion key: what may stand in a file name.
SAFE_NAME = r"[A-Za-z0-9_.\-]+"
_VERSION_JSON = re.compile(rf"{METADATA_DIR}/v(\d+)\.metadata\.json")
_SNAP = re.compile(rf"{METADATA_DIR}/snap-(\d+)\.avro")
_MANIFEST = re.compile(rf"{METADATA_DIR}/([md])-({SAFE_NAME})-(\d+)\.avro")
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


# --- reading published metadata back (untrusted) -------------------------------------


def load_state(store: ObjectStore, version: int) -> IcebergState | None:
    """The state after ``version`` from its ``v<version>.metadata.json`` and its
    manifest list, or None when that metadata file does not exist.

    Raises:
        StoredMetadataError: either file is too large (over
            :data:`MAX_METADATA_BYTES`), malformed, not s3ddb's (its current
            snapshot is not ``version`` with ``s3ddb.version`` in its summary), or
            inconsistent; the message names the file.
    """
    path = version_files(version)[0]
    raw = _bounded_get(store, path)
    if raw is None:
        return None
    return _parse_state(store, path, raw, version)


def _bounded_get(store: ObjectStore, path: str) -> bytes | None:
    """The object at ``path`` (None if missing), refused when over the size bound.

    Raises:
        StoredMetadataError: it is larger than :data:`MAX_METADATA_BYTES`.
    """
    try:
        data = store.get_prefix(path, MAX_METADATA_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_METADATA_BYTES:
        raise StoredMetadataError(f"{path}: larger than {MAX_METADATA_BYTES} bytes")
    return data


class _Checked:
    """Typed access to an untrusted JSON (or Avro) object; errors name the file."""

    def __init__(self, what: str) -> None:
        self.what = what

    def fail(self, message: str) -> StoredMetadataError:
        return StoredMetadataError(f"{self.what}: {message}")

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


def _parse_json(what: str, raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise StoredMetadataError(f"{what}: not JSON: {exc}") from None


def _parse_state(store: ObjectStore, path: str, raw: bytes, version: int) -> IcebergState:
    c = _Checked(path)
    doc = _parse_json(path, raw)
    if c.get(doc, "format-version", int) != 2:
        raise c.fail("format-version is not 2")
    location = c.get(doc, "location", str)
    if c.get(doc, "current-snapshot-id", int) != version:
        raise c.fail(f"current snapshot is not {version}: not written by s3ddb")
    snapshots = []
    for s in c.get(doc, "snapshots", list):
        summary = c.get(s, "summary", dict)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in summary.items()):
            raise c.fail("a snapshot summary holds a value that is not a string")
        snapshot_id = c.get(s, "snapshot-id", int)
        if summary.get("s3ddb.version") != str(snapshot_id):
            raise c.fail(f"snapshot {snapshot_id} is not s3ddb's (no s3ddb.version {snapshot_id})")
        if c.get(s, "sequence-number", int) != snapshot_id:
            raise c.fail(f"snapshot {snapshot_id} has another sequence number")
        snapshots.append(
            SnapshotInfo(
                snapshot_id=snapshot_id,
                parent_id=c.get(s, "parent-snapshot-id", int, optional=True),
                timestamp_ms=c.get(s, "timestamp-ms", int),
                manifest_list=c.get(s, "manifest-list", str),
                schema_id=c.get(s, "schema-id", int),
                summary=tuple(sorted(summary.items())),
            )
        )
    if len(snapshots) > SNAPSHOT_WINDOW or not snapshots or snapshots[-1].snapshot_id != version:
        raise c.fail(f"the snapshots are not a window ending with {version}")
    ids = [s.snapshot_id for s in snapshots]
    if ids != sorted(set(ids)):
        raise c.fail("snapshot ids are not increasing")
    schemas = {}
    for schema in c.get(doc, "schemas", list):
        schema_id = c.get(schema, "schema-id", int)
        c.get(schema, "fields", list)
        struct = {k: v for k, v in schema.items() if k != "schema-id"}
        schemas[schema_id] = canonical_json(struct)
    schema_id = c.get(doc, "current-schema-id", int)
    if schema_id not in schemas or not {s.schema_id for s in snapshots} <= set(schemas):
        raise c.fail("a schema id used is not among the schemas")
    properties = c.get(doc, "properties", dict)
    mapping = _parse_json(path, c.get(properties, "schema.name-mapping.default", str).encode())
    names: dict[int, tuple[str, ...]] = {}
    _mapping_names(c, mapping, names, 0)
    manifests = _load_manifest_list(store, location, snapshots[-1].manifest_list, version)
    # A manifest list cut right after its header still decodes (with no manifests):
    # the summary's totals catch it.
    summary = dict(snapshots[-1].summary)
    for content, key in ((0, "total-data-files"), (1, "total-delete-files")):
        if summary.get(key) != str(sum(m.files for m in manifests if m.content == content)):
            raise c.fail(f"{key} disagrees with the manifest list {version_files(version)[1]}")
    return IcebergState(
        version=version,
        location=location,
        schema_id=schema_id,
        schemas=tuple(sorted(schemas.items())),
        last_column_id=c.get(doc, "last-column-id", int),
        snapshots=tuple(snapshots),
        manifests=manifests,
        names=tuple(sorted(names.items())),
    )


def _mapping_names(c: _Checked, nodes: Any, names: dict[int, tuple[str, ...]], depth: int) -> None:
    if depth > 64 or not isinstance(nodes, list):
        raise c.fail("the name mapping is not a list of fields (or nests too deeply)")
    for node in nodes:
        field_id = c.get(node, "field-id", int)
        listed = c.get(node, "names", list)
        if not listed or not all(isinstance(n, str) for n in listed) or field_id in names:
            raise c.fail(f"the name mapping of field {field_id} is malformed or repeated")
        names[field_id] = tuple(listed)
        children = c.get(node, "fields", list, optional=True)
        if children is not None:
            _mapping_names(c, children, names, depth + 1)


def _load_manifest_list(
    store: ObjectStore, location: str, manifest_list: str, version: int
) -> tuple[ManifestInfo, ...]:
    relative = version_files(version)[1]
    if manifest_list != f"{location}/{relative}":
        raise StoredMetadataError(
            f"{version_files(version)[0]}: manifest list {manifest_list!r} is not {relative}"
        )
    raw = _bounded_get(store, relative)
    if raw is None:
        raise StoredMetadataError(f"{relative}: missing (its metadata JSON names it)")
    c = _Checked(relative)
    prefix = f"{location}/"
    manifests = []
    for record in decode_container(raw, relative).records:
        path = c.get(record, "manifest_path", str)
        relative_path = path[len(prefix) :] if path.startswith(prefix) else ""
        match = _MANIFEST.fullmatch(relative_path)
        content = c.get(record, "content", int)
        if match is None or content != {"m": 0, "d": 1}[match.group(1)]:
            raise c.fail(f"manifest {path!r} is not one s3ddb writes")
        sequence_number = c.get(record, "sequence_number", int)
        if not 0 <= sequence_number <= version:
            raise c.fail(f"manifest {path!r} has sequence number {sequence_number}")
        manifests.append(
            ManifestInfo(
                path=relative_path,
                length=c.get(record, "manifest_length", int),
                content=content,
                sequence_number=sequence_number,
                added_snapshot_id=c.get(record, "added_snapshot_id", int),
                files=c.get(record, "added_files_count", int),
                rows=c.get(record, "added_rows_count", int),
            )
        )
    if len({m.path for m in manifests}) != len(manifests):
        raise c.fail("a manifest is listed twice")
    return tuple(manifests)


def foreign_problems(store: ObjectStore, newest_version: int) -> list[str]:
    """Files under ``metadata/`` that s3ddb would not have written, up to its newest
    version ``newest_version``: names s3ddb never uses, metadata JSON or manifest
    lists of later versions, and a newest metadata (the one the version hint names,
    and any later one) whose current snapshot is not the s3ddb version of its name
    (another engine committed to the table). One listing, and reads only of those
    metadata files.

    Returns:
        Human-readable problems (empty: the metadata is all s3ddb's).

    Raises:
        OSError: the store cannot be listed or read.
    """
    problems: list[str] = []
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
                problems.append(f"{path}: a version after s3ddb's newest ({newest_version})")
                to_read.add(n)
        elif snap_match:
            n = int(snap_match.group(1))
            if n > newest_version:
                problems.append(f"{path}: a manifest list after s3ddb's newest ({newest_version})")
        else:
            problems.append(f"{path}: not a file s3ddb writes")
    try:
        hint_raw = store.get_prefix(VERSION_HINT, 64)
    except FileNotFoundError:
        hint_raw = None
    if hint_raw is not None:
        hint = hint_raw.decode("utf-8", "replace").strip()
        if not hint.isdecimal():
            problems.append(f"{VERSION_HINT}: {hint[:20]!r} is not a version")
        elif int(hint) in listed:
            to_read.add(int(hint))
        else:
            problems.append(f"{VERSION_HINT}: names version {hint}, which has no metadata")
    for n in sorted(to_read):
        path = version_files(n)[0]
        try:
            _check_own(path, _bounded_get(store, path), n)
        except StoredMetadataError as exc:
            problems.append(str(exc))
    return problems


def _check_own(path: str, raw: bytes | None, version: int) -> None:
    """Raise unless ``raw`` is a metadata JSON whose current snapshot is s3ddb's
    ``version``."""
    if raw is None:
        raise StoredMetadataError(f"{path}: vanished while being checked")
    c = _Checked(path)
    doc = _parse_json(path, raw)
    current = c.get(doc, "current-snapshot-id", int, optional=True)
    for snapshot in c.get(doc, "snapshots", list):
        if c.get(snapshot, "snapshot-id", int) == current:
            summary = c.get(snapshot, "summary", dict)
            if summary.get("s3ddb.version") == str(version) and current == version:
                return
    raise c.fail(f"its current snapshot ({current}) is not s3ddb's version {version}")
