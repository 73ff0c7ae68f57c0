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
from s3ddb.observe import telemetry
from s3ddb.open_formats.iceberg import IcebergWriter
from s3ddb.open_formats.iceberg_state import METADATA_DIR, bounded_get, bounded_json
from s3ddb.open_formats.publisher import publish_version, writer_of
from s3ddb.versions.opening import open_validated, require_latest_location

__all__ = [
    "SERVED_FORMAT",
    "ServedTable",
    "etag_matches",
    "load_served_table",
    "publish_pinned",
]

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


def _root_of(url: str) -> str:
    """The dataset root as the published metadata names it: an absolute local path,
    or ``s3://bucket/prefix``."""
    return url[len("file://") :] if url.startswith("file://") else url.rstrip("/")


def _etag(url: str, version: int, table_uuid: str) -> str:
    """The entity tag of ``version`` of the table at ``url``: changes with the
    version, and with the table's identity (a dataset dropped and written again at
    the same location)."""
    identity = f"{url}\n{table_uuid}\n{version}"
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f'"v{version}-{digest}"'


def _published(uri: str, storage_options: Mapping[str, Any]) -> Dataset:
    """The dataset at its newest committed version, published: opened with s3ddb,
    which finishes a version a writer left staged, then published if its Iceberg
    metadata is missing (this moves it to the newest version, maybe a newer one).

    Raises:
        OpenFormatError: the newest version does not publish Iceberg.
        What opening or publishing the dataset raised (DatasetNotFoundError...).
    """
    ds = dataset(uri, storage_options=dict(storage_options) or None)
    if SERVED_FORMAT not in ds.open_formats:
        raise OpenFormatError(
            f"{uri}: version {ds.version} does not publish Iceberg "
            f"(s3ddb open-formats URI --enable {SERVED_FORMAT})"
        )
    ds.publish_open_formats()
    return ds


def publish_pinned(ds: Dataset) -> None:
    """Publish ``ds``'s pinned version (and the versions before it that should be
    and are not) if its Iceberg metadata file is missing: a version a cut read
    before its writer published it.

    Raises:
        OpenFormatError: the version does not publish Iceberg.
        What publishing raised.
    """
    if SERVED_FORMAT not in ds.open_formats:
        raise OpenFormatError(f"{ds.uri}: version {ds.version} does not publish Iceberg")
    store = ds.handler.store
    if not store.exists(writer_of(SERVED_FORMAT).published_paths(ds.version)[0]):
        publish_version(store, ds.manifest, ds.handler.manifest_if_kept)


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (or is ``*``); a weak tag
    compares by its value."""
    for candidate in (if_none_match or "").split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


def _is_int(value: object, expected: int) -> bool:
    """Whether ``value`` is the JSON integer ``expected`` (not a float, not a bool)."""
    return type(value) is int and value == expected


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
    # Exact types: 2.0 == 2 and True == 1 in Python, not to a client's JSON parser.
    if not _is_int(metadata.get("format-version"), 2):
        raise fail(f"format-version {metadata.get('format-version')!r}, expected 2")
    if metadata.get("location") != root:
        raise fail("its location is not the dataset's")
    if not _is_int(metadata.get("current-snapshot-id"), version):
        raise fail(f"its current snapshot is not version {version}")
    table_uuid = metadata.get("table-uuid")
    if not isinstance(table_uuid, str) or not 0 < len(table_uuid) <= 64:
        raise fail("no table-uuid of at most 64 characters")
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
    uri: str,
    storage_options: Mapping[str, Any],
    *,
    version: int | None = None,
    if_none_match: str | None = None,
) -> ServedTable:
    """The newest committed version of the dataset at ``uri`` with its Iceberg
    metadata, published first if it is not (a writer died between its commit and
    its publication). When ``if_none_match`` (the request's header) names that
    version's entity tag, the metadata is None.

    ``version`` (a cut's: committed, and published when the cut was read) serves
    that version's metadata file instead; it is never published here.

    When the newest version is published this costs two requests: the newest
    version from the commit mechanism (the DynamoDB query, or the listing of the
    committed manifests) and the metadata file.

    Raises:
        OpenFormatError: the newest version does not publish Iceberg.
        PublishedStateError: its metadata file is damaged (see
            :func:`_checked_metadata`), or still missing after publishing.
        DatasetNotFoundError: nothing is committed at ``uri``.
        What opening or publishing the dataset raised.
    """
    plugin = writer_of(SERVED_FORMAT)
    with telemetry.span(
        "s3ddb.catalog.load_table", {"s3ddb.dataset": telemetry.dataset_attribute(uri)}
    ) as span:
        handler = open_validated(uri, dict(storage_options) or None)
        pinned = version is not None
        if version is None:
            # Finishes a version a writer left staged (copy, publish, repoint) on s3+ddb.
            version = require_latest_location(handler, uri).version
        path = plugin.published_paths(version)[0]
        raw = bounded_get(handler.store, path)
        if raw is None and pinned:
            raise PublishedStateError(f"{path}: missing (version {version})", path=path)
        if raw is None:
            ds = _published(uri, storage_options)
            version = ds.version
            path = plugin.published_paths(version)[0]
            raw = bounded_get(handler.store, path)
            if raw is None:
                raise PublishedStateError(
                    f"{path}: missing after publishing version {version}", path=path
                )
        span.set_attribute("s3ddb.version", version)
        root = _root_of(handler.store.url)
        metadata = _checked_metadata(raw, path, root, version)
        etag = _etag(handler.store.url, version, metadata["table-uuid"])
        location = plugin.reader_location(root, version)
        if if_none_match is not None and etag_matches(if_none_match, etag):
            return ServedTable(version, etag, location, None)
        return ServedTable(version, etag, location, metadata)
