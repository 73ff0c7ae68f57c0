"""Reading a published Iceberg version back, checked against the s3ddb manifests.

The manifests are the source of truth; the published files are output. So a
published state is used (to publish the next version, or rewritten by cleanup) only
once everything it would carry into a file s3ddb writes is what s3ddb derives from
the manifests (:func:`read_version`): every snapshot of the window is an s3ddb
version whose manifest list has s3ddb's name under the table, its summary has only
s3ddb's keys and values of their form, every schema has only the shapes and types
s3ddb writes (the current one is the version's own), the manifests the current
snapshot lists are s3ddb's of the groups the version has (by name, the version that
wrote them, their file counts and sizes), the location and table uuid are the
dataset's. :class:`~s3ddb.open_formats.iceberg.IcebergWriter` then also renders the
files again from what was read and compares the bytes, so nothing outside those
fields comes along either; and it renders each of those manifests again from its
group's files and compares it with the stored one (:func:`check_manifests`): the next
version reuses them by reference, and a manifest rewritten with the same length
(another data file path of as many bytes) passes every check of its name and size.

:func:`state_problems` is ``verify``'s broader look: every path every published file
of the newest version and of the snapshots it lists names (manifest lists,
manifests, data and delete files) is inside the table or a base it reads, every
listed snapshot is readable, and the current snapshot's manifests list exactly the
version's files.

Everything is read in bounded time and memory (:mod:`s3ddb.open_formats.iceberg_state`,
:mod:`s3ddb.open_formats.avro`); every problem is a
:class:`~s3ddb.errors.PublishedStateError` (or a sentence) naming the file.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3ddb.errors import (
    ManifestCorruptError,
    OpenFormatError,
    PublishedStateError,
    StoredMetadataError,
)
from s3ddb.format.chunks import MAX_CHUNK_FRAGMENTS, MAX_CHUNKS
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import run_all_beside, run_beside
from s3ddb.open_formats.avro import decode_container, stream_container
from s3ddb.open_formats.iceberg_schema import checked_struct, mapping_names
from s3ddb.open_formats.iceberg_state import (
    DELETE_PATH_ID,
    ENTRY_AVRO,
    MANIFEST_FILE_AVRO,
    MAX_METADATA_BYTES,
    METADATA_DIR,
    SNAPSHOT_WINDOW,
    Checked,
    IcebergState,
    ManifestInfo,
    SnapshotInfo,
    bounded_get,
    bounded_json,
    canonical_json,
    deletion_files,
    manifest_version,
    version_files,
)
from s3ddb.open_formats.model import CUT_KEY, CUT_PATTERN, PublishedFile, TableVersion

__all__ = [
    "MAX_MANIFESTS",
    "MAX_MANIFEST_BYTES",
    "OPERATIONS",
    "SUMMARY_KEYS",
    "DeleteFile",
    "LoadedVersion",
    "check_delete_files",
    "check_manifests",
    "delete_file_sizes",
    "listed_snapshots",
    "manifest_header",
    "read_version",
    "state_problems",
    "written_schema",
]

#: Most manifests a manifest list holds: a data and a delete manifest per group (each
#: fragment-list chunk, and the inline fragments).
MAX_MANIFESTS = 2 * (MAX_CHUNKS + 1)
#: Largest group manifest read back (a chunk of up to 1M fragments, ~100 bytes each).
MAX_MANIFEST_BYTES = 256 << 20
# Values of one s3ddb manifest list record: the record, 13 fields, 2 unions of null.
_MANIFEST_LIST_VALUES = 18 * MAX_MANIFESTS
# Values of one manifest entry, at most: a delete file's has bounds of one entry each.
_ENTRY_VALUES = 64

#: The keys of an s3ddb snapshot summary (see ``IcebergWriter``).
SUMMARY_KEYS = frozenset(
    {
        "operation",
        "s3ddb.version",
        "s3ddb.operation",
        "added-data-files",
        "deleted-data-files",
        "added-records",
        "deleted-records",
        "added-files-size",
        "removed-files-size",
        "total-data-files",
        "total-records",
        "total-delete-files",
        "total-position-deletes",
        "total-equality-deletes",
    }
)
#: The Iceberg operations s3ddb's snapshots name.
OPERATIONS = frozenset({"append", "delete", "overwrite", "replace"})
_COUNTS = SUMMARY_KEYS - {"operation", "s3ddb.version", "s3ddb.operation"}
_COUNT = re.compile(r"0|[1-9][0-9]{0,18}")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_MAPPING_KEY = "schema.name-mapping.default"
_DELETE_FILE = re.compile(rf"{METADATA_DIR}/deletes/[^/]+\.parquet")
# Most problems state_problems reports (the first ones, then how many more).
_MAX_PROBLEMS = 50


@dataclass(frozen=True)
class LoadedVersion:
    """A published version read back and checked (see :func:`read_version`), with
    the bytes of its metadata JSON and manifest list as stored, for the caller to
    compare with what it writes for ``state``."""

    state: IcebergState
    metadata: bytes
    manifest_list: bytes


def read_version(
    store: ObjectStore,
    expected: TableVersion,
    current_schema: str,
    sizes: Mapping[str, int] | None = None,
    *,
    read_manifests: bool = False,
    metadata: bytes | None = None,
) -> LoadedVersion | None:
    """The published state after ``expected.version`` (its ``v<N>.metadata.json`` and
    manifest list), checked against ``expected`` (the version as its manifest gives
    it; ``current_schema`` is its Iceberg schema as :func:`canonical_json`), or None
    when that metadata file does not exist. The sizes of the manifests the current
    snapshot lists are checked against ``sizes`` (a listing of ``metadata/``) or, when
    None, one HEAD each; with ``read_manifests``, not here: the caller reads every one
    of them (:func:`check_manifests`, which checks their sizes too) before it uses the
    state. ``metadata`` is the metadata file's content as the caller read it: then
    those bytes are checked, and the file is not read again (a caller that serves
    them serves exactly what was checked).

    Raises:
        PublishedStateError: either file is over its bounds, malformed, or has
            anything s3ddb does not derive from the manifests (see the module
            docstring); the message and ``path`` name the file.
    """
    version, root = expected.version, expected.root
    path = version_files(version)[0]
    raw = bounded_get(store, path) if metadata is None else metadata
    if raw is None:
        return None
    if len(raw) > MAX_METADATA_BYTES:
        raise PublishedStateError(f"{path}: larger than {MAX_METADATA_BYTES} bytes", path=path)
    c = Checked(path)
    doc = bounded_json(raw, path)
    if c.get(doc, "table-uuid", str) != expected.table_uuid:
        raise c.fail(f"its table-uuid is not the dataset's ({expected.table_uuid})")
    parsed = _parse(c, doc, root, version)
    if parsed.schemas.get(parsed.schema_id) != current_schema:
        raise c.fail(f"its current schema is not version {version}'s")
    snapshot = parsed.snapshots[-1]
    if snapshot.timestamp_ms != expected.timestamp_ms:
        raise c.fail(f"snapshot {version}'s timestamp is not version {version}'s")
    if dict(snapshot.summary)["s3ddb.operation"] != expected.operation:
        raise c.fail(f"snapshot {version}'s operation is not version {version}'s")
    if dict(snapshot.summary).get(CUT_KEY) != expected.cut:
        raise c.fail(f"snapshot {version}'s cut ({CUT_KEY}) is not version {version}'s")
    list_path = version_files(version)[1]
    listed = bounded_get(store, list_path)
    if listed is None:
        raise PublishedStateError(f"{list_path}: missing (its metadata JSON names it)", list_path)
    manifests = _current_manifests(listed, expected)
    summary = dict(snapshot.summary)
    for content, key in ((0, "total-data-files"), (1, "total-delete-files")):
        if summary[key] != str(sum(m.files for m in manifests if m.content == content)):
            raise c.fail(f"{key} disagrees with the manifest list {list_path}")
    if not read_manifests:
        _check_sizes(store, list_path, manifests, sizes)
    state = IcebergState(
        version=version,
        location=root,
        schema_id=parsed.schema_id,
        schemas=tuple(sorted(parsed.schemas.items())),
        last_column_id=parsed.last_column_id,
        snapshots=parsed.snapshots,
        manifests=manifests,
        names=tuple(sorted(parsed.names.items())),
    )
    return LoadedVersion(state, raw, listed)


def listed_snapshots(raw: bytes, path: str) -> list[int]:
    """The snapshot ids metadata file ``path`` (its bytes ``raw``) lists, read within
    the bounds of any published JSON but otherwise unchecked: for callers that only
    ever drop snapshots by it.

    Raises:
        PublishedStateError: it is over its bounds or has no list of snapshot ids.
    """
    c = Checked(path)
    doc = bounded_json(raw, path)
    return [c.get(s, "snapshot-id", int) for s in c.get(doc, "snapshots", list)]


# --- the metadata JSON ----------------------------------------------------------------


@dataclass(frozen=True)
class _Parsed:
    schema_id: int
    schemas: dict[int, str]
    last_column_id: int
    snapshots: tuple[SnapshotInfo, ...]
    names: dict[int, tuple[str, ...]]


def _parse(c: Checked, doc: Any, root: str, version: int) -> _Parsed:
    """What a metadata JSON of ``version`` at ``root`` holds that the next one
    carries, each field checked to be of the form s3ddb writes."""
    if c.get(doc, "format-version", int) != 2:
        raise c.fail("format-version is not 2")
    location = c.get(doc, "location", str)
    if location != root:
        raise c.fail(f"its location {location[:200]!r} is not the dataset root {root!r}")
    if c.get(doc, "current-snapshot-id", int) != version:
        raise c.fail(f"its current snapshot is not {version}: not written by s3ddb")
    schemas: dict[int, str] = {}
    highest = -1
    for schema in c.get(doc, "schemas", list):
        schema_id = c.get(schema, "schema-id", int)
        struct = {k: v for k, v in schema.items() if k != "schema-id"}
        try:
            ids = checked_struct(struct)
        except ValueError as exc:
            raise c.fail(f"schema {schema_id} is not one s3ddb writes: {exc}") from None
        if schema_id in schemas or len(schemas) >= SNAPSHOT_WINDOW:
            raise c.fail(f"schema {schema_id} is repeated, or there are too many schemas")
        schemas[schema_id] = canonical_json(struct)
        highest = max([highest, *ids])
    last_column_id = c.get(doc, "last-column-id", int)
    if not highest <= last_column_id < 2**31:
        raise c.fail("last-column-id is below a field id used, or out of range")
    raw_snapshots = c.get(doc, "snapshots", list)
    if not 1 <= len(raw_snapshots) <= SNAPSHOT_WINDOW:
        raise c.fail(f"it lists {len(raw_snapshots)} snapshots, not 1 to {SNAPSHOT_WINDOW}")
    snapshots = tuple(_snapshot(c, s, root, version) for s in raw_snapshots)
    ids = [s.snapshot_id for s in snapshots]
    if ids != sorted(set(ids)) or ids[-1] != version:
        raise c.fail(f"its snapshots are not increasing versions ending with {version}")
    used = [s.schema_id for s in snapshots]
    schema_id = c.get(doc, "current-schema-id", int)
    if used != sorted(used) or used[-1] != schema_id or set(used) != set(schemas):
        raise c.fail("its schemas are not the ones its snapshots use, in order")
    properties = c.get(doc, "properties", dict)
    if set(properties) != {_MAPPING_KEY}:
        raise c.fail(f"its properties are not {_MAPPING_KEY} alone")
    mapping = bounded_json(c.get(properties, _MAPPING_KEY, str), c.path, "its name mapping")
    try:
        names = mapping_names(mapping)
    except ValueError as exc:
        raise c.fail(str(exc)) from None
    return _Parsed(schema_id, schemas, last_column_id, snapshots, names)


def _snapshot(c: Checked, s: Any, root: str, version: int) -> SnapshotInfo:
    snapshot_id = c.get(s, "snapshot-id", int)
    if not version - SNAPSHOT_WINDOW < snapshot_id <= version:
        raise c.fail(f"snapshot {snapshot_id} is not among the last {SNAPSHOT_WINDOW} versions")
    if c.get(s, "sequence-number", int) != snapshot_id:
        raise c.fail(f"snapshot {snapshot_id} has another sequence number")
    parent = c.get(s, "parent-snapshot-id", int, optional=True)
    if parent not in (None, snapshot_id - 1):
        raise c.fail(f"snapshot {snapshot_id}'s parent is not the version before it")
    manifest_list = c.get(s, "manifest-list", str)
    own = version_files(snapshot_id)[1]
    if manifest_list != f"{root}/{own}":
        raise c.fail(
            f"snapshot {snapshot_id}'s manifest list {manifest_list[:200]!r} is not {own} "
            "under the table"
        )
    timestamp_ms = c.get(s, "timestamp-ms", int)
    summary = c.get(s, "summary", dict)
    keys = set(summary)
    if (
        not keys >= SUMMARY_KEYS
        or not keys <= SUMMARY_KEYS | {CUT_KEY}
        or not all(isinstance(v, str) for v in summary.values())
    ):
        raise c.fail(f"snapshot {snapshot_id}'s summary has other keys than s3ddb writes")
    well_formed = (
        summary["s3ddb.version"] == str(snapshot_id)
        and summary["operation"] in OPERATIONS
        and _KIND.fullmatch(summary["s3ddb.operation"]) is not None
        and all(_COUNT.fullmatch(summary[key]) for key in _COUNTS)
        and (CUT_KEY not in summary or CUT_PATTERN.fullmatch(summary[CUT_KEY]) is not None)
    )
    if not well_formed or timestamp_ms < 0:
        raise c.fail(f"snapshot {snapshot_id}'s summary or timestamp is not what s3ddb writes")
    return SnapshotInfo(
        snapshot_id=snapshot_id,
        parent_id=parent,
        timestamp_ms=timestamp_ms,
        manifest_list=manifest_list,
        schema_id=c.get(s, "schema-id", int),
        summary=tuple(sorted(summary.items())),
    )


# --- the current snapshot's manifest list ------------------------------------------------


def _decoded_list(raw: bytes, path: str) -> tuple[dict[str, bytes], list[Any]]:
    try:
        avro = decode_container(
            raw,
            path,
            schema=MANIFEST_FILE_AVRO,
            max_records=MAX_MANIFESTS,
            max_values=_MANIFEST_LIST_VALUES,
        )
    except PublishedStateError:
        raise
    except StoredMetadataError as exc:
        raise PublishedStateError(str(exc), path) from None
    return avro.metadata, avro.records


def _current_manifests(raw: bytes, expected: TableVersion) -> tuple[ManifestInfo, ...]:
    """The manifests of the current snapshot's manifest list ``raw``: s3ddb's of the
    groups ``expected`` lists, in its order (each group's data manifest, then its
    delete manifest by the same version), with the file counts of the groups."""
    version, root = expected.version, expected.root
    path = version_files(version)[1]
    c = Checked(path)
    groups = {g.name: (i, g.file_count) for i, g in enumerate(expected.groups)}
    _metadata, records = _decoded_list(raw, path)
    manifests: list[ManifestInfo] = []
    previous: tuple[int, int, int] = (-1, 1, 0)  # (group index, content, written by)
    for record in records:
        listed = c.get(record, "manifest_path", str)
        relative = _inside(listed, root)
        named = manifest_version(relative) if relative is not None else None
        if relative is None or named is None:
            raise c.fail(f"manifest {listed[:200]!r} is not one s3ddb writes under the table")
        content, group, written = named
        if group not in groups:
            raise c.fail(f"manifest {relative} is of a group version {version} does not have")
        index, file_count = groups[group]
        files = c.get(record, "added_files_count", int)
        numbers = {
            c.get(record, key, int)
            for key in ("sequence_number", "min_sequence_number", "added_snapshot_id")
        }
        fits = (
            c.get(record, "content", int) == content
            and numbers == {written}
            and 1 <= written <= version
            and (files == file_count if content == 0 else 1 <= files <= file_count)
            and c.get(record, "manifest_length", int) >= 0
            and c.get(record, "added_rows_count", int) >= 0
        )
        if not fits:
            raise c.fail(f"its record of {relative} does not fit version {version}'s group")
        # Groups in the version's order, each data manifest before the delete manifest
        # the same version wrote.
        after = (index, content) > previous[:2] and (
            content == 0 or (previous[0] == index and previous[2] == written)
        )
        if not after:
            raise c.fail(f"manifest {relative} is out of the order s3ddb writes")
        previous = (index, content, written)
        manifests.append(
            ManifestInfo(
                path=relative,
                length=record["manifest_length"],
                content=content,
                sequence_number=written,
                added_snapshot_id=written,
                files=files,
                rows=record["added_rows_count"],
            )
        )
    have = {m.group for m in manifests if m.content == 0}
    missing = [g.name for g in expected.groups if g.file_count and g.name not in have]
    if missing:
        raise c.fail(f"it lists no manifest of group {missing[0]}, which version {version} has")
    return tuple(manifests)


def _check_sizes(
    store: ObjectStore,
    list_path: str,
    manifests: Iterable[ManifestInfo],
    sizes: Mapping[str, int] | None,
) -> None:
    """Every manifest exists with the length the manifest list records for it."""
    c = Checked(list_path)
    manifests = list(manifests)
    if sizes is None:
        heads: list[Future[int]] = [
            run_beside(store, lambda p=m.path: store.head(p).size)  # type: ignore[misc]
            for m in manifests
        ]
        wait(heads)
        found: dict[str, int | None] = {}
        for m, head in zip(manifests, heads, strict=True):
            error = head.exception()
            if error is not None and not isinstance(error, FileNotFoundError):
                raise error
            found[m.path] = None if error is not None else head.result()
    else:
        found = {m.path: sizes.get(m.path) for m in manifests}
    for m in manifests:
        if found[m.path] is None:
            raise c.fail(f"it lists manifest {m.path}, which is missing")
        if found[m.path] != m.length:
            raise c.fail(f"it records {m.path} as {m.length} bytes; it has {found[m.path]}")


# --- the contents of the current snapshot's manifests ----------------------------------


def check_manifests(
    store: ObjectStore,
    state: IcebergState,
    expected_bytes: Callable[[ManifestInfo, bytes], bytes],
    checked: set[str] | None = None,
) -> None:
    """Every manifest ``state``'s current snapshot lists exists with the length its
    manifest list records and is, byte for byte, ``expected_bytes(manifest, stored)``:
    what s3ddb writes for it, which the caller renders from the manifest's group (the
    stored bytes give it only what the s3ddb manifests cannot: see
    :func:`written_schema` and :func:`delete_file_sizes`; it raises
    :class:`~s3ddb.errors.PublishedStateError` naming the manifest when they are not of
    s3ddb's form). A check of the size alone passes a manifest rewritten with the same
    length, which the next version would list by reference.

    One bounded GET of each (side by side on S3, as the HEADs it replaces), in waves
    of at most :data:`MAX_MANIFEST_BYTES` of manifests so that memory stays bounded;
    ``expected_bytes`` may run on the I/O pool. Paths in ``checked`` (found s3ddb's
    earlier by the same caller) are not read again; the ones found s3ddb's now are
    added.

    Raises:
        PublishedStateError: a manifest is missing, of another size than the manifest
            list records (which names it), or not the bytes s3ddb writes for it (its
            own path named).
        OSError: the store cannot be read.
    """
    list_path = version_files(state.version)[1]
    c = Checked(list_path)
    todo = [m for m in state.manifests if checked is None or m.path not in checked]
    waves: list[list[ManifestInfo]] = [[]]
    held = 0
    for m in todo:
        if m.length > MAX_MANIFEST_BYTES:
            raise c.fail(f"it records {m.path} as {m.length} bytes, more than s3ddb reads")
        if waves[-1] and held + m.length > MAX_MANIFEST_BYTES:
            waves.append([])
            held = 0
        waves[-1].append(m)
        held += m.length
    for wave in waves:
        # The first problem in the manifest list's order is raised.
        run_all_beside(
            store,
            (functools.partial(_check_manifest, store, c, m, expected_bytes) for m in wave),
        )
        if checked is not None:
            checked.update(m.path for m in wave)


def _check_manifest(
    store: ObjectStore,
    c: Checked,
    m: ManifestInfo,
    expected_bytes: Callable[[ManifestInfo, bytes], bytes],
) -> None:
    stored = bounded_get(store, m.path, MAX_MANIFEST_BYTES)
    if stored is None:
        raise c.fail(f"it lists manifest {m.path}, which is missing")
    if len(stored) != m.length:
        raise c.fail(f"it records {m.path} as {m.length} bytes; it has {len(stored)}")
    if expected_bytes(m, stored) != stored:
        raise PublishedStateError(
            f"{m.path}: not the manifest s3ddb writes for group {m.group} as version "
            f"{m.added_snapshot_id} listed it (an entry or its metadata was changed)",
            m.path,
        )


# --- the contents of the positional delete files they list -----------------------------

#: Delete files checked at once (each check holds one file and its rendering): the
#: futures of a wave, not of a whole version, are held.
_DELETE_FILES_WAVE = 256


@dataclass(frozen=True)
class DeleteFile:
    """A positional delete file a checked delete manifest lists: its path (relative to
    the root), the size the manifest records, and ``render``, which gives the bytes
    s3ddb writes for it from s3ddb's own deletion file (one read of it)."""

    path: str
    recorded_size: int
    render: Callable[[], bytes]


def check_delete_files(store: ObjectStore, files: Iterable[DeleteFile]) -> None:
    """Every one of ``files`` is, byte for byte, what s3ddb writes for it, and of the
    size its manifest records: the next version lists its delete manifest by
    reference, and its delete file with it, so a delete file rewritten with the same
    length (other positions, which every Iceberg reader of the new version would
    delete instead of s3ddb's) passes every check of the manifest, its name and its
    size. Its bytes, or, written by another pyarrow (whose footer names itself), its
    schema, rows and row groups' statistics, which a reader may use to skip what a
    file holds.

    Each file is read once, bounded by the size its manifest records, beside the
    rendering's read of s3ddb's deletion file (side by side on S3, in waves of
    :data:`_DELETE_FILES_WAVE`); in the order given, the first problem is raised.

    Raises:
        PublishedStateError: naming the delete file: missing, another size than
            recorded, not s3ddb's bytes, or not checkable (``render`` failed:
            s3ddb's deletion file cannot be read).
        OSError: the store cannot be read.
    """
    wave: list[DeleteFile] = []
    for file in files:
        wave.append(file)
        if len(wave) == _DELETE_FILES_WAVE:
            _check_wave(store, wave)
            wave = []
    _check_wave(store, wave)


def _check_wave(store: ObjectStore, wave: list[DeleteFile]) -> None:
    run_all_beside(store, (functools.partial(_check_delete_file, store, f) for f in wave))


def _check_delete_file(store: ObjectStore, file: DeleteFile) -> None:
    c = Checked(file.path)
    try:
        expected = file.render()
    except PublishedStateError:
        raise
    except (ManifestCorruptError, OpenFormatError) as exc:  # the truth cannot be read
        raise c.fail(
            f"cannot be checked: its data file's deleted rows cannot be read ({exc})"
        ) from None
    if file.recorded_size > 4 * len(expected) + (1 << 20):
        raise c.fail(
            f"its manifest records {file.recorded_size} bytes, far more than the "
            f"positional deletes s3ddb writes for it ({len(expected)})"
        )
    try:
        stored, size = store.get_bounded(file.path, file.recorded_size)
    except FileNotFoundError:
        raise c.fail("missing (a delete manifest lists it)") from None
    if size != file.recorded_size or (stored != expected and not _same_deletes(stored, expected)):
        raise c.fail(
            "not the positional deletes s3ddb writes for its data file's deleted rows "
            "(its bytes were changed)"
        )


def _same_deletes(stored: bytes, expected: bytes) -> bool:
    """Whether ``stored`` holds what ``expected`` (s3ddb's rendering) does, though not
    byte for byte (another pyarrow wrote it, whose footer names itself): the same
    schema (field ids included), rows, and row groups with the same statistics, which
    a reader may use to skip what a file holds."""
    try:
        ours, theirs = (pq.ParquetFile(pa.BufferReader(b)) for b in (expected, stored))
        if ours.schema_arrow != theirs.schema_arrow or not ours.schema_arrow.equals(
            theirs.schema_arrow, check_metadata=True
        ):
            return False
        mine, found = ours.metadata, theirs.metadata
        if (mine.num_rows, mine.num_row_groups, mine.num_columns) != (
            found.num_rows,
            found.num_row_groups,
            found.num_columns,
        ):
            return False
        for g in range(mine.num_row_groups):
            for col in range(mine.num_columns):
                a, b = mine.row_group(g).column(col), found.row_group(g).column(col)
                stats = (a.statistics, b.statistics)
                if (a.num_values, a.path_in_schema) != (b.num_values, b.path_in_schema):
                    return False
                if (stats[0] is None) != (stats[1] is None) or (
                    stats[0] is not None and not stats[0].equals(stats[1])
                ):
                    return False
        return bool(ours.read().equals(theirs.read()))
    except (pa.ArrowException, OSError, ValueError):
        return False


def manifest_header(stored: bytes, path: str) -> dict[str, bytes]:
    """The file metadata of the manifest ``stored`` (at ``path``), whose Avro schema
    is s3ddb's; its entries are not decoded.

    Raises:
        PublishedStateError: it is not such an Avro file.
    """
    try:
        metadata, _records = stream_container(stored, path, schema=ENTRY_AVRO)
    except PublishedStateError:
        raise
    except StoredMetadataError as exc:
        raise PublishedStateError(str(exc), path) from None
    return metadata


def delete_file_sizes(stored: bytes, path: str, count: int) -> list[int]:
    """The sizes of the delete files the delete manifest ``stored`` (at ``path``) lists,
    in its order: the one field of a delete manifest the s3ddb manifests do not give
    (a positional delete file is Parquet as pyarrow wrote it). Everything else of the
    manifest the caller compares with what it renders from the group, these sizes in.

    Raises:
        PublishedStateError: it does not decode as a manifest of ``count`` entries.
    """
    try:
        _metadata, records = stream_container(
            stored,
            path,
            schema=ENTRY_AVRO,
            max_records=MAX_CHUNK_FRAGMENTS,
            max_record_values=_ENTRY_VALUES,
        )
        sizes = [r["data_file"]["file_size_in_bytes"] for r in records]
    except PublishedStateError:
        raise
    except StoredMetadataError as exc:
        raise PublishedStateError(str(exc), path) from None
    if len(sizes) != count or not all(type(s) is int and s > 0 for s in sizes):
        raise PublishedStateError(
            f"{path}: it does not list {count} delete files, as its group has", path
        )
    return sizes


def written_schema(
    state: IcebergState, written: int, header: Mapping[str, bytes], path: str
) -> tuple[str, int]:
    """The schema (as :func:`canonical_json`, without its id) and schema id version
    ``written`` wrote its manifests with, for the manifest at ``path`` (its file
    metadata ``header``) that ``state`` lists: snapshot ``written``'s when ``state``
    lists it. Else (an older version, out of the window) the one ``header`` names, once
    it is a schema s3ddb writes whose id fits between the ids of the snapshots around
    ``written`` (ids grow with the versions of one publication, a schema keeping its
    id) and whose field ids are ``state``'s: a schema no s3ddb file keeps any more
    cannot be derived, but nothing else of it is taken.

    Raises:
        PublishedStateError: the schema ``header`` names is not of that form.
    """
    schemas = dict(state.schemas)
    before = [s for s in state.snapshots if s.snapshot_id <= written]
    if before and before[-1].snapshot_id == written:
        return schemas[before[-1].schema_id], before[-1].schema_id
    after = [s for s in state.snapshots if s.snapshot_id > written]
    c = Checked(path)
    raw_id = header.get("schema-id", b"")
    if not re.fullmatch(rb"0|[1-9][0-9]{0,9}", raw_id):
        raise c.fail("its schema-id is not one s3ddb writes")
    schema_id = int(raw_id)
    low = before[-1].schema_id if before else 0
    high = after[0].schema_id if after else low
    doc = bounded_json(header.get("schema", b""), path, "its schema")
    if not isinstance(doc, dict) or doc.get("schema-id") != schema_id:
        raise c.fail("its schema is not one s3ddb writes")
    struct = {k: v for k, v in doc.items() if k != "schema-id"}
    try:
        ids = checked_struct(struct)
    except ValueError as exc:
        raise c.fail(f"its schema is not one s3ddb writes: {exc}") from None
    canonical = canonical_json(struct)
    fits = (
        low <= schema_id <= high
        and max(ids, default=0) <= state.last_column_id
        and schemas.get(schema_id, canonical) == canonical
    )
    if not fits:
        raise c.fail(f"its schema {schema_id} is not one version {written} can have written")
    return canonical, schema_id


def _inside(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` when it is a plain path under it (no ``.``,
    ``..`` or empty segment), else None."""
    if not path.startswith(root + "/"):
        return None
    relative = path[len(root) + 1 :]
    if any(part in ("", ".", "..") for part in relative.split("/")):
        return None
    return relative


# --- verify's look -----------------------------------------------------------------------


def state_problems(store: ObjectStore, expected: TableVersion, current_schema: str) -> list[str]:
    """What is wrong with the published Iceberg files of ``expected.version`` and of
    every snapshot its metadata file lists, each a sentence starting with the file
    (relative to the root) it is about: what :func:`read_version` refuses, then every
    manifest list, manifest, data file and delete file path that is not s3ddb's name
    inside the table (data files may be in a base the version reads, a shallow
    clone's source), every listed snapshot whose files are missing or do not decode,
    and the current snapshot's manifests against the version's files. Empty when
    the version is not published (``verify`` says that otherwise). One listing of
    ``metadata/``, and one read of each file, bounded as :func:`read_version`.

    Raises:
        OSError: the store cannot be listed or read.
    """
    listing = {m.path: m.size for m in store.iter_list(f"{METADATA_DIR}/")}
    version = expected.version
    path = version_files(version)[0]
    if path not in listing:
        return []
    walk = _Walk(store, expected, listing)
    try:
        read_version(store, expected, current_schema, listing)
    except PublishedStateError as exc:
        walk.problems.append(str(exc))
    try:
        raw = bounded_get(store, path)
        doc = bounded_json(raw or b"", path)
    except PublishedStateError:
        return walk.reported()
    snapshots = doc.get("snapshots") if isinstance(doc, dict) else None
    listed = snapshots[: 2 * SNAPSHOT_WINDOW] if isinstance(snapshots, list) else []
    # The current snapshot first: its manifests are compared with the version's files
    # as they are read.
    first = sorted(
        range(len(listed)),
        key=lambda i: not (isinstance(listed[i], dict) and listed[i].get("snapshot-id") == version),
    )
    for i in first:
        walk.snapshot(path, listed[i])
    return walk.reported()


class _Walk:
    """The files of the snapshots a metadata file lists, each read once."""

    def __init__(self, store: ObjectStore, expected: TableVersion, listing: dict[str, int]):
        self.store = store
        self.expected = expected
        self.root = expected.root
        self.listing = listing
        self.problems: list[str] = []
        # Bases the version reads data files from (a shallow clone's source).
        self.bases = {
            f.path.rsplit("/data/", 1)[0] for f in expected.all_files() if not f.is_relative
        }
        self.read: set[str] = set()  # manifests read (or found unreadable)

    def note(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def reported(self) -> list[str]:
        unique = list(dict.fromkeys(self.problems))
        if len(unique) > _MAX_PROBLEMS:
            more = len(unique) - _MAX_PROBLEMS
            unique = [*unique[:_MAX_PROBLEMS], f"{unique[_MAX_PROBLEMS].split(':')[0]}: "
                      f"and {more} more problems like these"]  # fmt: skip
        return unique

    def _data_path(self, path: str) -> bool:
        relative = _inside(path, self.root)
        if relative is not None:
            return relative.startswith("data/")
        return any(_inside(path, base) is not None for base in self.bases)

    def _of(self, file: PublishedFile) -> str:
        return f"{self.root}/{file.path}" if file.is_relative else file.path

    def snapshot(self, metadata: str, snapshot: Any) -> None:
        """Check the manifest list of ``snapshot`` (as ``metadata`` lists it) and the
        manifests it names."""
        snapshot_id = snapshot.get("snapshot-id") if isinstance(snapshot, dict) else None
        listed = snapshot.get("manifest-list") if isinstance(snapshot, dict) else None
        if type(snapshot_id) is not int or not isinstance(listed, str):
            self.note(metadata, "lists a snapshot without an id or a manifest list")
            return
        own = version_files(snapshot_id)[1]
        if listed != f"{self.root}/{own}":
            self.note(
                metadata,
                f"snapshot {snapshot_id}'s manifest list {listed[:200]!r} is not {own} "
                "under the table",
            )
            return
        if own not in self.listing:
            self.note(
                metadata,
                f"it lists snapshot {snapshot_id}, whose manifest list {own} is missing: "
                "reading that snapshot fails",
            )
            return
        try:
            raw = bounded_get(self.store, own)
            metadata_entries, records = _decoded_list(raw or b"", own)
        except PublishedStateError as exc:
            self.note(metadata, f"it lists snapshot {snapshot_id}, which cannot be read: {exc}")
            return
        if metadata_entries.get("snapshot-id") != str(snapshot_id).encode():
            self.note(own, f"it is not the manifest list of snapshot {snapshot_id}")
        for record in records:
            manifest = record.get("manifest_path") if isinstance(record, dict) else None
            self._manifest(own, snapshot_id, record, str(manifest))

    def _manifest(self, owner: str, snapshot_id: int, record: dict[str, Any], listed: str) -> None:
        relative = _inside(listed, self.root)
        named = manifest_version(relative) if relative is not None else None
        if relative is None or named is None:
            self.note(owner, f"it lists manifest {listed[:200]!r}, not s3ddb's in the table")
            return
        content, group, written = named
        numbers = {record.get(k) for k in ("sequence_number", "added_snapshot_id")}
        if record.get("content") != content or numbers != {written} or written > snapshot_id:
            self.note(owner, f"its record of {relative} is not what s3ddb writes for it")
        size = self.listing.get(relative)
        if size is None:
            self.note(owner, f"it lists manifest {relative}, which is missing")
            return
        if size != record.get("manifest_length"):
            self.note(owner, f"it records {relative} as {record.get('manifest_length')} bytes; "
                      f"it has {size}")  # fmt: skip
        if relative in self.read:
            return
        self.read.add(relative)
        entries = self._read_manifest(relative, content, written)
        if entries is not None and snapshot_id == self.expected.version:
            self._compare(relative, content, group, entries)

    def _read_manifest(
        self, path: str, content: int, written: int
    ) -> Counter[tuple[str, int, int | None, str | None]] | None:
        """The entries of manifest ``path`` as (path, rows, size, bound) (no size for
        delete files: the version does not know them), each checked to be s3ddb's and
        inside the table; None (said) when it cannot be read."""
        try:
            raw = bounded_get(self.store, path, MAX_MANIFEST_BYTES)
            metadata, records = stream_container(
                raw or b"",
                path,
                schema=ENTRY_AVRO,
                max_records=MAX_CHUNK_FRAGMENTS,
                max_record_values=_ENTRY_VALUES,
            )
            if metadata.get("content") != (b"data" if content == 0 else b"deletes"):
                self.note(path, "its content is not what its name says")
            entries: Counter[tuple[str, int, int | None, str | None]] = Counter()
            for entry in records:
                checked = self._entry(path, entry, content, written)
                if checked is None:
                    return None
                entries[checked] += 1
            return entries
        except StoredMetadataError as exc:
            self.note(path, f"it cannot be read: {str(exc).removeprefix(path + ': ')}")
            return None

    def _entry(
        self, path: str, entry: dict[str, Any], content: int, written: int
    ) -> tuple[str, int, int | None, str | None] | None:
        data = entry["data_file"]
        numbers = {entry[k] for k in ("snapshot_id", "sequence_number", "file_sequence_number")}
        file_path, rows, size = data["file_path"], data["record_count"], data["file_size_in_bytes"]
        if entry["status"] != 1 or numbers != {written} or data["content"] != content:
            self.note(path, f"its entry of {file_path[:200]!r} is not what s3ddb writes")
            return None
        if content == 0:
            if not self._data_path(file_path):
                self.note(path, f"it lists data file {file_path[:200]!r}, outside the table")
                return None
            return file_path, rows, size, None
        relative = _inside(file_path, self.root)
        if relative is None or not _DELETE_FILE.fullmatch(relative):
            self.note(path, f"it lists delete file {file_path[:200]!r}, not s3ddb's in the table")
            return None
        bounds = [data["lower_bounds"], data["upper_bounds"]]
        bound = None
        if bounds[0] == bounds[1] and isinstance(bounds[0], list) and len(bounds[0]) == 1:
            item = bounds[0][0]
            if item["key"] == DELETE_PATH_ID:
                bound = item["value"].decode("utf-8", "replace")
        if bound is None or not self._data_path(bound):
            self.note(path, f"delete file {relative} applies to no data file of the table")
            return None
        if self.listing.get(relative) != size:
            self.note(path, f"it lists delete file {relative} of {size} bytes, which is missing "
                      "or of another size")  # fmt: skip
            return None
        return relative, rows, None, bound

    def _compare(
        self,
        path: str,
        content: int,
        group: str,
        have: Counter[tuple[str, int, int | None, str | None]],
    ) -> None:
        """A manifest of the current snapshot lists exactly its group's files (or
        their deleted rows) as the version has them."""
        groups = {g.name: g for g in self.expected.groups}
        if group not in groups:
            return  # read_version says so
        files = groups[group].files()
        want: Counter[tuple[str, int, int | None, str | None]]
        if content == 0:
            want = Counter((self._of(f), f.physical_rows, f.size, None) for f in files)
        else:
            want = Counter(
                (deletion_files(f.deletion_key)[0], f.deleted_rows, None, self._of(f))
                for f in files
                if f.deletion_key is not None
            )
        if have != want:
            odd = sorted(str(e[0]) for e in have - want) or sorted(str(e[0]) for e in want - have)
            self.note(
                path,
                f"it does not list group {group}'s files as version {self.expected.version} "
                f"has them ({odd[0][:200]!r} differs)",
            )
