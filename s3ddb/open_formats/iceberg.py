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

This module writes the files, and is the Iceberg plug-in
(:class:`~s3ddb.open_formats.model.OpenFormat`). Their names, the state carried from
one version to the next, bounded reads of the files and what another engine wrote
(:func:`~s3ddb.open_formats.iceberg_state.foreign_problems`) are
:mod:`s3ddb.open_formats.iceberg_state`'s; reading a published version back and
checking it against the manifests is :mod:`s3ddb.open_formats.iceberg_checks`'.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from s3ddb.errors import InvalidInputError, ManifestCorruptError, PublishedStateError
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.open_formats.avro import encode_container
from s3ddb.open_formats.iceberg_checks import (
    DeleteFile,
    LoadedVersion,
    check_delete_files,
    check_manifests,
    delete_file_sizes,
    listed_snapshots,
    manifest_header,
    read_version,
    state_problems,
    written_schema,
)
from s3ddb.open_formats.iceberg_schema import field_ids, iceberg_schema, name_mapping
from s3ddb.open_formats.iceberg_state import (
    DATA_FILE_AVRO,
    DELETE_PATH_ID,
    ENTRY_AVRO,
    ENTRY_HEAD_AVRO,
    MANIFEST_FILE_AVRO,
    METADATA_DIR,
    SAFE_NAME,
    SNAPSHOT_WINDOW,
    VERSION_HINT,
    IcebergState,
    ManifestInfo,
    SnapshotInfo,
    bounded_get,
    canonical_json,
    deletion_files,
    foreign_problems,
    group_files,
    group_of,
    version_files,
)
from s3ddb.open_formats.model import (
    CUT_KEY,
    CUT_TAG_PREFIX,
    DeletedPositions,
    FileGroup,
    Publication,
    PublishedFile,
    Retention,
    TableVersion,
)

__all__ = [
    "CLEANUP_CLAIM_WINDOW_MS",
    "IcebergWriter",
    "expire_snapshots",
]

log = logging.getLogger(__name__)

# Reserved field id of positional delete files' positions (Iceberg spec).
_DELETE_POS_ID = 2147483545
#: Cleanup's default claim window (:data:`s3ddb.maintenance.cleanup.CLAIM_WINDOW`), in
#: milliseconds: a snapshot younger than that cannot have been expired by a cleanup
#: (see :meth:`IcebergWriter.refresh_state`).
CLEANUP_CLAIM_WINDOW_MS = 10 * 60 * 1000


def _data_file(
    content: int, path: str, rows: int, size: int, bound: bytes | None
) -> dict[str, Any]:
    bounds = [{"key": DELETE_PATH_ID, "value": bound}] if bound is not None else None
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
    return DATA_FILE_AVRO.encode(_data_file(content, path, rows, size, bound))


def _entries_manifest(
    version: int,
    data_files: Sequence[tuple[int, str, int, int, bytes | None]],
    metadata: Sequence[tuple[str, bytes]],
) -> bytes:
    """The manifest of ``data_files`` (``_data_file`` arguments) added by ``version``:
    the bytes :func:`encode_container` writes for their entries, from cached parts."""
    try:
        head = ENTRY_HEAD_AVRO.encode(_entry_head(version))
        parts = [head + _data_file_avro(*args) for args in data_files]
    except ValueError:
        parts = None
    if parts is None:  # report what does not fit as encoding the whole would
        entries = [{**_entry_head(version), "data_file": _data_file(*args)} for args in data_files]
        return encode_container(ENTRY_AVRO, entries, metadata)
    return ENTRY_AVRO.container(parts, metadata)


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
            pa.field("file_path", pa.string(), False, {"PARQUET:field_id": str(DELETE_PATH_ID)}),
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
    """The Iceberg plug-in, :class:`~s3ddb.open_formats.model.OpenFormat` (see the
    module docstring for the layout).

    Its state is an :class:`~s3ddb.open_formats.iceberg_state.IcebergState`.
    """

    name = "iceberg"
    title = "Iceberg"
    publishes_apart = True
    prefixes: tuple[str, ...] = (f"{METADATA_DIR}/",)
    #: Readers resolve columns by field id (or the table's name mapping).
    reads_columns_by_name = False

    def published_paths(self, version: int) -> list[str]:
        """``version``'s metadata file."""
        return version_files(version)[:1]

    def reader_location(self, root: str, version: int) -> str:
        """``version``'s metadata file (Iceberg readers open a metadata file)."""
        return f"{root}/{version_files(version)[0]}"

    def foreign_problems(self, store: ObjectStore, newest_version: int) -> list[tuple[str, str]]:
        """See :func:`~s3ddb.open_formats.iceberg_state.foreign_problems`."""
        return foreign_problems(store, newest_version)

    def retire(self, store: ObjectStore, retention: Retention) -> list[ObjectMeta]:
        """The metadata files, manifest lists, positional delete files and group
        manifests only removed versions stood for; first the metadata files of kept
        versions stop listing the snapshots of removed ones (:func:`expire_snapshots`).

        Raises:
            What ``retention.expected`` or writing the store raises.
        """
        keep, gone = retention.keep, retention.gone
        kept_paths = _named_paths(keep.versions, keep.deletion_keys)
        gone_paths = _named_paths(gone.versions, gone.deletion_keys) - kept_paths
        gone_groups = gone.groups - keep.groups
        doomed = []
        listed = set()
        for meta in retention.listed:
            listed.add(meta.path)
            group = group_of(meta.path)
            if meta.path in gone_paths or (group is not None and group in gone_groups):
                doomed.append(meta)
        published = [v for v in retention.kept if version_files(v)[0] in listed]
        expire_snapshots(store, published, retention.kept, retention.expected)
        return doomed

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

    def load_state(
        self, store: ObjectStore, expected: TableVersion, *, metadata: bytes | None = None
    ) -> IcebergState | None:
        """The state after ``expected.version`` from its published metadata file (or
        ``metadata``, its content as the caller read it, checked instead of reading
        it again) and manifest list, or None when that metadata file does not exist;
        returned only once checked against ``expected`` (see
        :func:`~s3ddb.open_formats.iceberg_checks.read_version`) and found to be, byte
        for byte, the files s3ddb writes for what they list, and each manifest the
        current snapshot lists, byte for byte, the one s3ddb writes for its group, and
        each positional delete file they list the one s3ddb writes for its deleted rows
        (the next version reuses them by reference: :func:`_check_manifests`). One GET
        of each file, of each of those manifests and of each delete file with its s3ddb
        deletion file (side by side on S3), and the version's fragment lists.

        Raises:
            PublishedStateError: either file is damaged, over its bounds, or holds
                anything s3ddb does not derive from the manifests; ``path`` names it.
        """
        loaded = read_version(
            store, expected, _current_schema(expected), read_manifests=True, metadata=metadata
        )
        if loaded is None:
            return None
        _check_rendered(loaded, expected)
        _check_manifests(store, loaded, expected)
        return loaded.state

    def state_problems(self, store: ObjectStore, expected: TableVersion) -> list[str]:
        """What is wrong with the published Iceberg files of ``expected.version`` and
        of every snapshot its metadata file lists (see
        :func:`~s3ddb.open_formats.iceberg_checks.state_problems`), each a sentence
        starting with the file it is about; empty when all is s3ddb's.

        Raises:
            OSError: the store cannot be listed or read.
        """
        schema = _current_schema(expected)
        problems = state_problems(store, expected, schema)
        if problems:
            return problems
        # Checked clean just now: what is left is what load_state also compares.
        loaded = read_version(store, expected, schema, read_manifests=True)
        try:
            if loaded is not None:
                _check_rendered(loaded, expected)
                _check_manifests(store, loaded, expected)
        except PublishedStateError as exc:
            return [str(exc)]
        return []

    def kept_checker(
        self, store: ObjectStore, listed: Iterable[ObjectMeta]
    ) -> Callable[[TableVersion], list[str]]:
        """What is wrong with the published Iceberg files of each older kept version,
        which Iceberg readers reach through its own ``vN.metadata.json`` (``listed`` is
        not needed): its metadata file and manifest list as :meth:`load_state` checks
        them, byte for byte what s3ddb renders, then each manifest its snapshot lists
        and each positional delete file those list, against the version's groups and
        s3ddb's deletion files; the first problem of each version, empty when all is
        s3ddb's. A manifest (and its delete files) found s3ddb's for one version is
        not read again for another: its name gives its group and the version that
        wrote it, so its bytes are the same in every version that lists it (the
        check holds their names).

        The check raises OSError when the store cannot be read.
        """
        checked: set[str] = set()

        def check(table: TableVersion) -> list[str]:
            try:
                loaded = read_version(store, table, _current_schema(table), read_manifests=True)
                if loaded is None:
                    return []  # not published: a gap
                _check_rendered(loaded, table)
                _check_manifests(store, loaded, table, checked)
            except PublishedStateError as exc:
                return [str(exc)]
            return []

        return check

    def refresh_state(
        self, store: ObjectStore, state: IcebergState, now_ms: int, kept: Callable[[int], bool]
    ) -> IcebergState:
        """``state`` (one this process published or loaded, so trusted) without the
        snapshots a cleanup has expired since: the publisher's cached state before it
        publishes the next version from it. ``kept`` says whether s3ddb still keeps a
        version (snapshot N is version N), from the manifests.

        A cleanup removes a version only once the version after it is older than the
        claim window (:data:`CLEANUP_CLAIM_WINDOW_MS`, cleanup's default; a shorter one
        is safe only without writers), and rewrites the metadata files that list it
        before it deletes anything. So while every snapshot of the window is younger
        than that (by its own timestamp, which is not later than its successor's),
        none can have gone, and ``state`` is returned as it is: no request. Else
        ``state``'s metadata file is read again (one GET), and the snapshots it no
        longer lists are dropped once ``kept`` confirms that their versions are gone
        (only dropped: what it lists beyond ``state`` is not taken). The file is only
        a hint of what a cleanup removed: one that is gone, unreadable or not
        s3ddb's (damaged, planted) would otherwise thin the history of every later
        version. When it cannot be read, every snapshot of the window is asked of
        ``kept`` (a warning names the file; ``s3ddb open-formats URI --rebuild``
        republishes it). The current snapshot always stays.

        Why this, and not something else: the next metadata file must list only
        readable snapshots, whichever finisher writes it. A state read after a cleanup
        has its window already (cleanup rewrote the file); one read or kept from
        before it does not, and reading the file again at every publication would
        cost warm writers a request per commit. A race between that read and a
        cleanup that starts right after remains, as for any writer that cleanup's
        claim window covers: ``verify`` reports a snapshot listed but gone, and the
        next cleanup rewrites the file.
        """
        if all(s.timestamp_ms + CLEANUP_CLAIM_WINDOW_MS > now_ms for s in state.snapshots):
            return state
        path = version_files(state.version)[0]
        try:
            raw = bounded_get(store, path)
            listed = set(listed_snapshots(raw, path)) if raw is not None else set()
        except PublishedStateError as exc:
            log.warning(
                "%s: %s cannot be read (%s): the snapshots the next version lists are "
                "the kept versions'; `s3ddb open-formats URI --rebuild` republishes it",
                store.url, path, exc,
            )  # fmt: skip
            listed = set()
        unlisted = {s.snapshot_id for s in state.snapshots} - listed - {state.version}
        return _without_snapshots(state, {v for v in sorted(unlisted) if not kept(v)})

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
        # The window: the snapshots of the versions published among the last
        # SNAPSHOT_WINDOW (by number, so a window cleanup thinned stays as short).
        window = (*prev.snapshots, snapshot) if prev else (snapshot,)
        snapshots = tuple(s for s in window if s.snapshot_id > version - SNAPSHOT_WINDOW)
        used = {s.schema_id for s in snapshots}
        schemas = {**{i: c for i, c in prev_schemas.items() if i in used}, schema_id: canonical}
        mapping, names = name_mapping(struct, dict(prev.names) if prev else {})
        last_column_id = max([*field_ids(struct), prev.last_column_id if prev else 0])
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


def _current_schema(table: TableVersion) -> str:
    """``table``'s Iceberg schema as :func:`canonical_json`.

    Raises:
        PublishedStateError: it has no Iceberg schema, so nothing published is its.
    """
    try:
        return canonical_json(iceberg_schema(table.schema))
    except InvalidInputError as exc:
        path = version_files(table.version)[0]
        message = f"{path}: version {table.version} cannot be published: {exc}"
        raise PublishedStateError(message, path) from None


def _metadata_of(state: IcebergState, table: TableVersion) -> tuple[bytes, bool]:
    """The metadata JSON s3ddb writes for ``state`` (of version ``table``), and
    whether the names its mapping gives are ``state``'s own (the mapping of a state is
    derived from its current schema and names: a state s3ddb wrote is a fixed point)."""
    struct = json.loads(dict(state.schemas)[state.schema_id])
    mapping, names = name_mapping(struct, dict(state.names))
    return _metadata_json(state, table, mapping), names == dict(state.names)


def _check_rendered(loaded: LoadedVersion, table: TableVersion) -> None:
    """Refuse a checked state whose files are not, byte for byte, what s3ddb writes
    for it: then something beside the fields :func:`read_version` checks (a key,
    a log entry, a reference, a manifest list's metadata) was changed or added.

    Raises:
        PublishedStateError: naming the file.
    """
    state = loaded.state
    metadata, fixed = _metadata_of(state, table)
    path = version_files(state.version)[0]
    if not fixed or metadata != loaded.metadata:
        raise PublishedStateError(
            f"{path}: not the metadata file s3ddb writes for what it lists (a field was "
            "changed or added)",
            path,
        )
    parent = state.snapshots[-1].parent_id
    listed = _manifest_list(state.manifests, state.location, state.version, parent)
    if listed != loaded.manifest_list:
        path = version_files(state.version)[1]
        raise PublishedStateError(
            f"{path}: not the manifest list s3ddb writes for the manifests it lists", path
        )


def _check_manifests(
    store: ObjectStore,
    loaded: LoadedVersion,
    table: TableVersion,
    checked: set[str] | None = None,
) -> None:
    """Refuse a checked state one of whose manifests (the current snapshot's) is not,
    byte for byte, what s3ddb writes for its group: the next version lists them by
    reference, so a manifest rewritten with the same length (a data file path swapped
    for another of as many bytes) would be published again, and its planted files
    read by every Iceberg reader of the new version. Each is rendered again from its
    group's files (the fragment lists, which are checksummed) as
    :func:`_group_manifests` writes it, and compared with the stored bytes (see
    :func:`~s3ddb.open_formats.iceberg_checks.check_manifests`; ``checked`` as there,
    a manifest added only once its delete files are found s3ddb's too).

    The positional delete files the delete manifests list come along by reference
    as well, and a delete file rewritten with the same length (other positions) is
    read by every Iceberg reader of the new version: each is rendered again from
    s3ddb's deletion file (``table.deleted``) and compared with the stored bytes
    (:func:`~s3ddb.open_formats.iceberg_checks.check_delete_files`). Refused, the
    next version is published afresh, which writes every delete file again under its
    name (a function of the deleted rows), the changed one included. Not for a
    ``table`` without ``deleted`` (built by hand: tests).

    Raises:
        PublishedStateError: naming the file; also when a group's fragments or a
            delete file's deleted rows cannot be read (then it cannot be checked).
        OSError: the store cannot be read.
    """
    state = loaded.state
    todo = {m.group: m.path for m in state.manifests if checked is None or m.path not in checked}
    files: dict[str, tuple[PublishedFile, ...]] = {}
    for group in table.groups:
        if group.name not in todo:
            continue
        try:  # here, not on the I/O pool: a group loads its fragments once
            files[group.name] = group.files()
        except ManifestCorruptError as exc:
            path = todo[group.name]
            raise PublishedStateError(
                f"{path}: cannot be checked: version {table.version}'s group {group.name} "
                f"cannot be read ({exc})",
                path,
            ) from None
    sizes: dict[str, list[int]] = {}  # per delete manifest, as it records them
    render = functools.partial(_expected_manifest, state, table.root, files, sizes)
    found = set(checked) if checked is not None else None
    check_manifests(store, state, render, found)
    if table.deleted is not None:
        check_delete_files(store, _delete_files(state, table, files, sizes, table.deleted))
    if checked is not None and found is not None:
        checked |= found


def _delete_files(
    state: IcebergState,
    table: TableVersion,
    files: Mapping[str, tuple[PublishedFile, ...]],
    sizes: Mapping[str, list[int]],
    deleted: DeletedPositions,
) -> Iterator[DeleteFile]:
    """The delete files of the delete manifests just checked (those in ``sizes``),
    each with its rendering from ``deleted`` (run later, on the I/O pool)."""
    for m in state.manifests:
        if m.content != 1 or m.path not in sizes:
            continue
        group = [f for f in files[m.group] if f.deletion_key is not None]
        for f, size in zip(group, sizes[m.path], strict=True):
            assert f.deletion_key is not None  # for mypy: every one has
            yield DeleteFile(
                deletion_files(f.deletion_key)[0],
                size,
                functools.partial(_rendered_deletes, table.root, f, deleted),
            )


def _rendered_deletes(root: str, file: PublishedFile, deleted: DeletedPositions) -> bytes:
    """The positional delete file :func:`_group_manifests` writes for ``file``."""
    return _positional_deletes(_absolute(root, file), _checked_positions(file, deleted(file)))


def _expected_manifest(
    state: IcebergState,
    root: str,
    files: Mapping[str, tuple[PublishedFile, ...]],
    sizes: dict[str, list[int]],
    manifest: ManifestInfo,
    stored: bytes,
) -> bytes:
    """The bytes s3ddb writes for ``manifest`` (of a group whose files are in
    ``files``), as :func:`_group_manifests` did for the version that wrote it. From
    ``stored`` come only the schema of a writer out of ``state``'s window and a delete
    manifest's delete file sizes (see :mod:`~s3ddb.open_formats.iceberg_checks`),
    which are put in ``sizes`` under its path for the check of the delete files; the
    manifest list's counts of the manifest are checked against the group too, as the
    next manifest list carries them.

    Raises:
        PublishedStateError: naming the manifest or the manifest list.
    """
    path, written = manifest.path, manifest.added_snapshot_id
    group = files[manifest.group]
    header = manifest_header(stored, path)
    canonical, schema_id = written_schema(state, written, header, path)
    schema = (_schema_text(canonical, schema_id), schema_id)
    entries: list[tuple[int, str, int, int, bytes | None]]
    if manifest.content == 0:
        entries = [(0, _absolute(root, f), f.physical_rows, f.size, None) for f in group]
        kind = "data"
    else:
        deleted = [f for f in group if f.deletion_key is not None]
        recorded = delete_file_sizes(stored, path, len(deleted))
        sizes[path] = recorded  # one key per task: no two threads write one
        entries = [
            (
                1,
                f"{root}/{deletion_files(f.deletion_key)[0]}",
                f.deleted_rows,
                size,
                _absolute(root, f).encode(),
            )
            for f, size in zip(deleted, recorded, strict=True)
            if f.deletion_key is not None  # for mypy: every one has
        ]
        kind = "deletes"
    rows = sum(rows for _c, _p, rows, _s, _b in entries)
    if not entries or (manifest.files, manifest.rows) != (len(entries), rows):
        list_path = version_files(state.version)[1]
        raise PublishedStateError(
            f"{list_path}: its record of {path} does not count group {manifest.group}'s "
            f"{len(entries)} files and {rows} rows",
            list_path,
        )
    return _entries_manifest(written, entries, _manifest_metadata(*schema, kind))


def _named_paths(versions: Iterable[int], deletion_keys: Iterable[str]) -> set[str]:
    """The files named after ``versions`` and ``deletion_keys`` (group manifests aside:
    their names also carry the version that wrote them)."""
    out = {p for version in versions for p in version_files(version)}
    out.update(p for key in deletion_keys for p in deletion_files(key))
    return out


def _without_snapshots(state: IcebergState, gone: set[int]) -> IcebergState:
    """``state`` without the snapshots ``gone`` (never its own) and the schemas only
    they used. Their ids may stay as parents, as after Iceberg's snapshot expiry."""
    gone = gone - {state.version}
    if not gone & {s.snapshot_id for s in state.snapshots}:
        return state
    snapshots = tuple(s for s in state.snapshots if s.snapshot_id not in gone)
    used = {s.schema_id for s in snapshots}
    schemas = tuple((i, c) for i, c in state.schemas if i in used)
    return dataclasses.replace(state, snapshots=snapshots, schemas=schemas)


def expire_snapshots(
    store: ObjectStore,
    published: Iterable[int],
    kept: Collection[int],
    expected_of: Callable[[int], TableVersion | None],
) -> list[str]:
    """Rewrite the metadata file of every version of ``kept`` (the versions cleanup
    keeps) that lists a snapshot of a version not kept, without those snapshots (and
    their metadata-log entries, and the schemas only they used), so that every
    snapshot a kept metadata file lists stays readable once cleanup deletes the
    files of the others. ``published`` are the versions whose metadata file exists
    (from cleanup's listing); ``expected_of`` gives a kept version as its manifest
    gives it (None: it does not publish Iceberg).

    Each file is read and checked as :meth:`IcebergWriter.load_state` checks it
    before it is rewritten, and the rewrite is a function of what it lists and of
    ``kept`` (two cleanups write the same bytes; a publication that reads it after
    builds on it). A file found damaged is left as it is and said (logged):
    ``verify`` reports it and ``s3ddb open-formats URI --rebuild`` republishes it.
    Returns the paths rewritten.

    Raises:
        What writing the store or ``expected_of`` raises.
    """
    kept = set(kept)
    rewritten = []
    checked: set[str] = set()  # manifests found s3ddb's (many versions list one)
    for version in sorted(kept & set(published)):
        window = range(max(1, version - SNAPSHOT_WINDOW + 1), version)
        if all(v in kept for v in window):
            continue  # the file lists nothing cleanup removes
        path = version_files(version)[0]
        try:
            raw = bounded_get(store, path)
            if raw is None or set(listed_snapshots(raw, path)) <= kept:
                continue
            table = expected_of(version)
            if table is None:
                continue
            loaded = read_version(store, table, _current_schema(table), read_manifests=True)
            if loaded is None:
                continue
            _check_rendered(loaded, table)
            _check_manifests(store, loaded, table, checked)
        except PublishedStateError as exc:
            log.warning(
                "%s: cleanup leaves %s as it is, damaged (%s): it may list snapshots "
                "cleanup removes; `s3ddb open-formats URI --rebuild` republishes it",
                store.url, path, exc,
            )  # fmt: skip
            continue
        gone = {s.snapshot_id for s in loaded.state.snapshots} - kept
        state = _without_snapshots(loaded.state, gone)
        store.put(path, _metadata_of(state, table)[0])
        rewritten.append(path)
    return rewritten


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
    return encode_container(MANIFEST_FILE_AVRO, records, metadata)


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
    if table.cut is not None:
        summary[CUT_KEY] = table.cut
    return tuple(sorted(summary.items()))


def _refs(state: IcebergState) -> dict[str, Any]:
    """The branch ``main`` at the version, and a tag per group cut a kept snapshot
    names (``s3ddb-cut-<group id>``, at the newest snapshot naming it: a group may
    commit several versions of one table), so that engines read a table as of a cut
    by name (``VERSION AS OF 's3ddb-cut-...'``). Derived from the snapshots' summaries,
    which come from the manifests."""
    refs: dict[str, Any] = {"main": {"snapshot-id": state.version, "type": "branch"}}
    for snapshot in state.snapshots:
        cut = dict(snapshot.summary).get(CUT_KEY)
        if cut is not None:
            refs[CUT_TAG_PREFIX + cut] = {"snapshot-id": snapshot.snapshot_id, "type": "tag"}
    return refs


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
        "refs": _refs(state),
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
