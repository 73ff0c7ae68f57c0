"""Deletion files: deleted row offsets of a fragment, as portable Roaring bitmaps."""

from __future__ import annotations

import uuid

import pyarrow as pa
from pyroaring import BitMap

from s3ddb.errors import ManifestCorruptError
from s3ddb.format import layout
from s3ddb.format.bases import Files, as_resolver
from s3ddb.format.fragment import DeletionFile, FragmentMetadata
from s3ddb.io.object_store import ObjectStore


def deletion_path(fragment: FragmentMetadata) -> str:
    """Path of ``fragment``'s deletion file under the root that holds it (its own or
    its base's: see :class:`~s3ddb.format.bases.FileResolver`)."""
    d = fragment.deletion_file
    assert d is not None
    return layout.deletion_file_path(fragment.id, d.read_version, d.id, d.extension)


def read_deleted_rows(files: Files, fragment: FragmentMetadata) -> BitMap:
    """Offsets of the deleted rows of ``fragment`` (empty if it has no deletion file),
    read from the dataset's root or the file's base.

    Raises:
        ManifestCorruptError: the deletion file is missing or unreadable.
    """
    if fragment.deletion_file is None:
        return BitMap()
    store, path = as_resolver(files).deletion_file(fragment)
    try:
        data = store.get(path)
    except FileNotFoundError as exc:
        raise ManifestCorruptError(
            f"deletion file {store.url}/{path} of fragment {fragment.id} is missing"
        ) from exc
    try:
        if fragment.deletion_file.kind == "roaring":
            return BitMap.deserialize(data)
        reader = pa.ipc.open_stream(data)
        return BitMap(reader.read_all().column(0).to_pylist())
    except Exception as exc:
        raise ManifestCorruptError(f"deletion file {store.url}/{path} is corrupt: {exc}") from exc


def read_deletion_mask(files: Files, fragment: FragmentMetadata) -> pa.Array:
    """A boolean array over the fragment's physical rows: True where the row is kept."""
    import numpy as np

    keep = np.ones(fragment.physical_rows, dtype=bool)
    deleted = read_deleted_rows(files, fragment)
    if len(deleted):
        keep[np.fromiter(deleted, dtype=np.int64, count=len(deleted))] = False
    return pa.array(keep)


def write_deletion_file(
    store: ObjectStore, fragment_id: int, read_version: int, deleted: BitMap
) -> DeletionFile:
    """Write ``deleted`` as a new deletion file in ``store`` (the dataset's own root,
    also for fragments whose files live in a base); returns its metadata."""
    deletion = DeletionFile("roaring", read_version, uuid.uuid4().hex, len(deleted))
    path = layout.deletion_file_path(fragment_id, read_version, deletion.id, deletion.extension)
    store.put(path, deleted.serialize())
    return deletion
