"""What the catalog's ``loadTable`` serves of a registered dataset: the Iceberg
metadata of its newest committed version.

The version comes from the dataset's commit mechanism (opening it with s3ddb: the
DynamoDB row or the committed manifest), never from ``version-hint.text``, which can
lag under concurrent writers. Opening an ``s3+ddb://`` dataset finishes a version a
writer left staged (copy, publish, repoint); on local paths and ``s3://`` a writer
that died between its commit and its publication leaves the version committed and
unpublished, and loading it publishes it first (the same bytes the writer would have
written). The metadata file is read as untrusted input: bounded in size and JSON
values, and checked to be the version's own metadata of this dataset, whose
snapshots' manifest lists are this dataset's files, before it is served.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from s3ddb.dataset import Dataset, dataset
from s3ddb.errors import OpenFormatError, PublishedStateError
from s3ddb.open_formats.iceberg import IcebergWriter
from s3ddb.open_formats.iceberg_state import METADATA_DIR, bounded_get, bounded_json
from s3ddb.open_formats.publisher import writer_of

__all__ = ["SERVED_FORMAT", "ServedTable", "etag_matches", "load_served_table"]

#: The open format the catalog serves (its plug-in's name: what a dataset's
#: ``open_formats`` must include).
SERVED_FORMAT = IcebergWriter.name


@dataclass(frozen=True)
class ServedTable:
    """One version of a registered dataset as ``loadTable`` returns it.

    Attributes:
        version: the s3ddb version (the Iceberg snapshot id).
        etag: the HTTP entity tag of this version of this dataset (quoted).
        metadata_location: the absolute location of ``metadata/vN.metadata.json``.
        metadata: that file's content, checked; None when the client has this
            version already (its ``If-None-Match`` names :attr:`etag`).
    """

    version: int
    etag: str
    metadata_location: str
    metadata: dict[str, Any] | None


def _root(ds: Dataset) -> str:
    """The dataset root as the published metadata names it: an absolute local path,
    or ``s3://bucket/prefix``."""
    url: str = ds.handler.store.url
    return url[len("file://") :] if url.startswith("file://") else url.rstrip("/")


def _etag(ds: Dataset) -> str:
    """The entity tag of ``ds``'s pinned version: changes with the version, and with
    the dataset's identity (a dataset dropped and written again at the same URI)."""
    identity = f"{ds.handler.store.url}\n{ds.manifest.dataset_id}\n{ds.version}"
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f'"v{ds.version}-{digest}"'


def _open(uri: str, storage_options: Mapping[str, Any]) -> Dataset:
    """The dataset at its newest committed version, publishing Iceberg.

    Raises:
        OpenFormatError: the newest version does not publish Iceberg.
        What opening the dataset raised (DatasetNotFoundError...).
    """
    ds = dataset(uri, storage_options=dict(storage_options) or None)
    if SERVED_FORMAT not in ds.open_formats:
        raise OpenFormatError(
            f"{uri}: version {ds.version} does not publish Iceberg "
            f"(s3ddb open-formats URI --enable {SERVED_FORMAT})"
        )
    return ds


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (or is ``*``); a weak tag
    compares by its value."""
    for candidate in (if_none_match or "").split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


def _checked_metadata(raw: bytes, path: str, root: str, version: int) -> dict[str, Any]:
    """``raw`` (the file at ``path``) parsed and checked to be version ``version``'s
    Iceberg metadata of the dataset at ``root``.

    Raises:
        PublishedStateError: not bounded JSON, not an object, another format version,
            location or current snapshot, or a snapshot whose manifest list is not
            ``<root>/metadata/snap-<id>.avro``; naming the file.
    """
    metadata = bounded_json(raw, path)

    def fail(what: str) -> PublishedStateError:
        return PublishedStateError(f"{path}: {what}", path=path)

    if not isinstance(metadata, dict):
        raise fail("not a JSON object")
    if metadata.get("format-version") != 2:
        raise fail(f"format-version {metadata.get('format-version')!r}, expected 2")
    if metadata.get("location") != root:
        raise fail("its location is not the dataset's")
    if metadata.get("current-snapshot-id") != version:
        raise fail(f"its current snapshot is not version {version}")
    snapshots = metadata.get("snapshots")
    if not isinstance(snapshots, list) or not snapshots:
        raise fail("no snapshots")
    for snapshot in snapshots:
        snapshot_id = snapshot.get("snapshot-id") if isinstance(snapshot, dict) else None
        if not isinstance(snapshot_id, int) or isinstance(snapshot_id, bool):
            raise fail("a snapshot without an integer snapshot-id")
        expected = f"{root}/{METADATA_DIR}/snap-{snapshot_id}.avro"
        if snapshot.get("manifest-list") != expected:
            raise fail(f"snapshot {snapshot_id}'s manifest list is not {expected}")
    return metadata


def load_served_table(
    uri: str, storage_options: Mapping[str, Any], *, if_none_match: str | None = None
) -> ServedTable:
    """The newest committed version of the dataset at ``uri`` with its Iceberg
    metadata, published first if it is not (a writer died between its commit and
    its publication). When ``if_none_match`` (the request's header) names that
    version's entity tag, nothing more is read and the metadata is None.

    Raises:
        OpenFormatError: the newest version does not publish Iceberg.
        PublishedStateError: its metadata file is damaged (see
            :func:`_checked_metadata`), or still missing after publishing.
        What opening or publishing the dataset raised.
    """
    ds = _open(uri, storage_options)
    plugin = writer_of(SERVED_FORMAT)
    root = _root(ds)
    if if_none_match is not None and etag_matches(if_none_match, _etag(ds)):
        return ServedTable(ds.version, _etag(ds), plugin.reader_location(root, ds.version), None)
    store = ds.handler.store
    path = plugin.published_paths(ds.version)[0]
    raw = bounded_get(store, path)
    if raw is None:
        # Committed, not published: publish it (and what it catches up with), as the
        # writer would have. This moves to the newest version, which may be newer.
        ds.publish_open_formats()
        path = plugin.published_paths(ds.version)[0]
        raw = bounded_get(store, path)
        if raw is None:
            raise PublishedStateError(
                f"{path}: missing after publishing version {ds.version}", path=path
            )
    metadata = _checked_metadata(raw, path, root, ds.version)
    return ServedTable(
        version=ds.version,
        etag=_etag(ds),
        metadata_location=plugin.reader_location(root, ds.version),
        metadata=metadata,
    )
