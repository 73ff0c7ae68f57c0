"""Deletion files: deleted row offsets of a fragment, as portable Roaring bitmaps."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from s3ddb.errors import ManifestCorruptError, StoredMetadataError
from s3ddb.format import layout
from s3ddb.format.bases import Files, as_resolver
from s3ddb.format.fragment_metadata import DeletionFile, FragmentMetadata
from s3ddb.format.naming import unique_hex
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites

__all__ = [
    "deletion_path",
    "max_deletion_file_bytes",
    "read_deleted_rows",
    "read_deletion_mask",
    "write_deletion_file",
]


def deletion_path(fragment: FragmentMetadata) -> str:
    """Path of ``fragment``'s deletion file under the root that holds it (its own or
    its base's: see :class:`~s3ddb.format.bases.FileResolver`)."""
    d = fragment.deletion_file
    assert d is not None
    return layout.deletion_file_path(fragment.id, d.read_version, d.id, d.extension)


def max_deletion_file_bytes(physical_rows: int) -> int:
    """The largest deletion file a fragment of ``physical_rows`` rows can have: a
    Roaring bitmap takes at most 2 bytes per offset or 8 KiB per 65,536 rows, an Arrow
    array 4 bytes per offset, plus a few hundred bytes of headers."""
    return 64 * 1024 + 4 * physical_rows


def read_deleted_rows(files: Files, fragment: FragmentMetadata) -> BitMap:
    """Offsets of the deleted rows of ``fragment`` (empty if it has no deletion file),
    read from the dataset's root or the file's base.

    The file is checked before anything is built from it: it is read only up to the
    size such a file can have (:func:`max_deletion_file_bytes`), every offset must be
    below the fragment's physical rows, each listed once, and their count must be the
    manifest's ``num_deleted_rows``.

    Raises:
        ManifestCorruptError: the deletion file is missing or unreadable.
        StoredMetadataError: it is too large, or its offsets fail those checks (the
            message names the file and the fragment).
    """
    deletion = fragment.deletion_file
    if deletion is None:
        return BitMap()
    store, path = as_resolver(files).deletion_file(fragment)
    where = f"deletion file {store.url}/{path} of fragment {fragment.id}"
    limit = max_deletion_file_bytes(fragment.physical_rows)
    try:
        data = store.get_prefix(path, limit + 1)
    except FileNotFoundError as exc:
        raise ManifestCorruptError(f"{where} is missing") from exc
    if len(data) > limit:
        raise StoredMetadataError(
            f"{where} is larger than a deletion file of {fragment.physical_rows} rows can "
            f"be ({limit} bytes)"
        )
    try:
        if deletion.kind == "roaring":
            deleted = BitMap.deserialize(data)
        else:
            deleted = _arrow_offsets(data, fragment, where)
    except StoredMetadataError:
        raise
    except (
        ValueError,
        TypeError,
        OverflowError,
        IndexError,
        MemoryError,
        pa.ArrowException,
    ) as exc:
        raise ManifestCorruptError(f"{where} is corrupt: {exc}") from exc
    if deleted and deleted.max() >= fragment.physical_rows:
        raise StoredMetadataError(
            f"{where}: offset {deleted.max()} is beyond the fragment's "
            f"{fragment.physical_rows} physical rows ({len(deleted)} offsets)"
        )
    if len(deleted) != deletion.num_deleted_rows:
        raise StoredMetadataError(
            f"{where}: holds {len(deleted)} offsets, the manifest says {deletion.num_deleted_rows}"
        )
    return deleted


def _arrow_offsets(data: bytes, fragment: FragmentMetadata, where: str) -> BitMap:
    """The offsets of an Arrow IPC deletion file: one uint32 column, checked for its
    length before its values are read.

    Raises:
        StoredMetadataError: another layout, more offsets than the manifest says, or
            an offset listed twice.
    """
    expected = fragment.deletion_file.num_deleted_rows if fragment.deletion_file else 0
    reader = pa.ipc.open_stream(data)
    if len(reader.schema) != 1 or reader.schema.field(0).type != pa.uint32():
        raise StoredMetadataError(
            f"{where}: holds {reader.schema.types[:2]!r}, not one column of uint32 offsets"
        )
    chunks = []
    rows = 0
    for batch in reader:
        rows += batch.num_rows
        if rows > expected:
            raise StoredMetadataError(
                f"{where}: holds {rows} offsets or more, the manifest says {expected}"
            )
        column = batch.column(0)
        column.validate(full=True)
        chunks.append(column.to_numpy(zero_copy_only=False))
    offsets = np.concatenate(chunks) if chunks else np.empty(0, np.uint32)
    if offsets.size and int(offsets.max()) >= fragment.physical_rows:
        raise StoredMetadataError(
            f"{where}: offset {int(offsets.max())} is beyond the fragment's "
            f"{fragment.physical_rows} physical rows"
        )
    deleted = BitMap(offsets)
    if len(deleted) != offsets.size:
        raise StoredMetadataError(f"{where}: lists an offset twice")
    return deleted


def read_deletion_mask(files: Files, fragment: FragmentMetadata) -> pa.Array:
    """A boolean array over the fragment's physical rows: True where the row is kept.

    Raises:
        ManifestCorruptError, StoredMetadataError: as :func:`read_deleted_rows`.
    """
    keep = np.ones(fragment.physical_rows, dtype=bool)
    deleted = read_deleted_rows(files, fragment)
    if len(deleted):
        keep[np.fromiter(deleted, dtype=np.int64, count=len(deleted))] = False
    return pa.array(keep)


def write_deletion_file(
    store: ObjectStore,
    fragment_id: int,
    read_version: int,
    deleted: BitMap,
    pending: PendingWrites | None = None,
) -> DeletionFile:
    """Write ``deleted`` as a new deletion file in ``store`` (the dataset's own root,
    also for fragments whose files live in a base); returns its metadata. With
    ``pending`` the upload is only started: the commit waits for it before claiming
    a version."""
    deletion = DeletionFile("roaring", read_version, unique_hex(), len(deleted))
    path = layout.deletion_file_path(fragment_id, read_version, deletion.id, deletion.extension)
    if pending is not None:
        pending.put(store, path, deleted.serialize())
    else:
        store.put(path, deleted.serialize())
    return deletion
