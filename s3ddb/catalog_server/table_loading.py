"""What the catalog's ``loadTable`` serves of a registered dataset: the Iceberg
metadata of its newest committed version, exactly as s3ddb publishes it.

The version comes from the dataset's commit mechanism (opening it with s3ddb: the
DynamoDB row or the committed manifest), never from ``version-hint.text``, which can
lag under concurrent writers. Opening an ``s3+ddb://`` dataset finishes a version a
writer left staged (copy, publish, repoint); on local paths and ``s3://`` a writer
that died between its commit and its publication leaves the version committed and
unpublished, and loading it publishes it first (the same bytes the writer would have
written).

Whoever can write the bucket can write ``metadata/``, so the metadata file is
untrusted input. It is served only once the version's manifest enables Iceberg and
the file, its manifest list and the manifests it lists are, byte for byte, what
s3ddb publishes for that version (:meth:`IcebergWriter.load_state
<s3ddb.open_formats.iceberg.IcebergWriter.load_state>`, the check a publication makes
of the version before it). A file found damaged (a planted schema, a statistics file
elsewhere, an extra property) is published again from the manifest, checked again,
and only then served. A cut's version is published again only when the cut is made
(:func:`publish_pinned`); a load under the cut refuses a damaged file instead, as
the version may no longer be the newest. The check reads the version's manifest,
fragment lists and every manifest it lists, so its verdict is kept per metadata file
content (:class:`_CheckedFiles`): a later load of the same bytes costs two requests,
the newest version and the metadata file.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from s3ddb.commit.handlers import CommitHandler
from s3ddb.dataset import Dataset
from s3ddb.errors import OpenFormatError, PublishedStateError, StoredMetadataError
from s3ddb.format.manifest import Manifest
from s3ddb.observe import telemetry
from s3ddb.open_formats.iceberg import IcebergWriter
from s3ddb.open_formats.iceberg_state import bounded_get, bounded_json
from s3ddb.open_formats.publisher import (
    enabled_formats,
    expected_table,
    forget_states,
    publish_version,
)
from s3ddb.versions.opening import (
    load_newest,
    load_version,
    open_validated,
    require_latest_location,
)

__all__ = [
    "MAX_CHECKED_FILES",
    "SERVED_FORMAT",
    "ServedTable",
    "etag_matches",
    "load_served_table",
    "publish_pinned",
]

log = logging.getLogger("s3ddb.catalog_server")

_WRITER = IcebergWriter()
#: The open format the catalog serves (its plug-in's name: what a dataset's
#: ``open_formats`` must include).
SERVED_FORMAT = _WRITER.name
#: How many checked metadata files a server process remembers (the oldest are
#: forgotten first, and checked again when next served).
MAX_CHECKED_FILES = 4096


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


class _CheckedFiles:
    """The metadata files found to be what s3ddb publishes, by dataset root, version
    and SHA-256 digest of their content (bounded, LRU; thread-safe).

    The content is what is served, and it names the table's uuid (the dataset's
    identity) and the version's commit time: the same bytes at the same root and
    version are the same version's metadata, checked once. A file changed since has
    another digest and is checked again. What the file lists (the manifest list, the
    manifests) is checked with it, once: an engine reads those from the store
    itself, and ``s3ddb verify`` reports them if they are changed afterwards.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._keys: OrderedDict[tuple[str, int, bytes], None] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(url: str, version: int, raw: bytes) -> tuple[str, int, bytes]:
        return url, version, hashlib.sha256(raw).digest()

    def known(self, key: tuple[str, int, bytes]) -> bool:
        with self._lock:
            if key not in self._keys:
                return False
            self._keys.move_to_end(key)
            return True

    def add(self, key: tuple[str, int, bytes]) -> None:
        with self._lock:
            self._keys[key] = None
            self._keys.move_to_end(key)
            while len(self._keys) > self._limit:
                self._keys.popitem(last=False)


_CHECKED = _CheckedFiles(MAX_CHECKED_FILES)


def _root_of(url: str) -> str:
    """The dataset root as the published metadata names it: an absolute local path,
    or ``s3://bucket/prefix``."""
    return url[len("file://") :] if url.startswith("file://") else url.rstrip("/")


def _metadata_path(version: int) -> str:
    return _WRITER.published_paths(version)[0]


def _etag(url: str, version: int, table_uuid: str) -> str:
    """The entity tag of ``version`` of the table at ``url``: changes with the
    version, and with the table's identity (a dataset dropped and written again at
    the same location)."""
    identity = f"{url}\n{table_uuid}\n{version}"
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f'"v{version}-{digest}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (or is ``*``); a weak tag
    compares by its value."""
    for candidate in (if_none_match or "").split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


def _require_iceberg(uri: str, manifest: Manifest) -> None:
    """Refuse a version whose manifest does not enable Iceberg: whatever file lies at
    its metadata path, s3ddb did not publish it for this version.

    Raises:
        OpenFormatError: naming the dataset and the version.
    """
    if SERVED_FORMAT not in enabled_formats(manifest):
        raise OpenFormatError(
            f"{uri}: version {manifest.version} does not publish Iceberg "
            f"(s3ddb open-formats URI --enable {SERVED_FORMAT})"
        )


def _verdict(
    handler: CommitHandler, manifest: Manifest, raw: bytes | None
) -> bytes | StoredMetadataError:
    """``raw`` when it is the metadata file s3ddb publishes for ``manifest``'s
    version, else why not (``raw`` None: the file is missing). The whole published
    state of the version is compared with what s3ddb renders from the manifests: the
    metadata file (these bytes, not a second read of the file, so what is served is
    what was checked), its manifest list, and the manifests and positional delete
    files the version lists. A content found good is remembered
    (:class:`_CheckedFiles`).

    Raises:
        What reading the version's manifests or fragment lists raised
        (ManifestCorruptError...): s3ddb's own files, which no publication mends.
    """
    path = _metadata_path(manifest.version)
    if raw is None:
        return PublishedStateError(f"{path}: missing (version {manifest.version})", path=path)
    store = handler.store
    expected = expected_table(store, manifest, handler.manifest_if_kept, SERVED_FORMAT)
    try:
        _WRITER.load_state(store, expected, metadata=raw)
    except StoredMetadataError as exc:  # PublishedStateError, or a published file's decoding
        return exc
    _CHECKED.add(_CheckedFiles.key(store.url, manifest.version, raw))
    return raw


def _checked(
    uri: str, handler: CommitHandler, manifest: Manifest, raw: bytes | None, *, mend: bool
) -> bytes:
    """``raw``, the content of ``manifest``'s version's metadata file (None: missing),
    once checked to be what s3ddb publishes for that version (:func:`_verdict`);
    with ``mend``, a missing or damaged file is first published again from the
    manifest (the bytes a writer publishes; with the versions before it that are
    missing too), then read back and checked, and that content returned.

    A damaged file is said in a warning (logger ``s3ddb.catalog_server``) and
    counted in ``s3ddb.damaged_publications``.

    Raises:
        OpenFormatError: the version does not publish Iceberg.
        PublishedStateError: the file is missing or damaged, and ``mend`` is False or
            publishing it again did not mend it (a store that refuses the write, say);
            naming the file.
        StoredMetadataError: a published file does not decode, and ``mend`` is False.
        What reading the version's manifests or the store raised.
    """
    _require_iceberg(uri, manifest)
    store, version = handler.store, manifest.version
    verdict = _verdict(handler, manifest, raw)
    if isinstance(verdict, bytes):
        return verdict
    if not mend:
        raise verdict
    if raw is not None:
        log.warning(
            "%s: %s; version %d is published again from its manifest before it is served",
            uri, verdict, version,
        )  # fmt: skip
        telemetry.add("s3ddb.damaged_publications", 1, {"s3ddb.format": SERVED_FORMAT})
    # A version left unpublished is published in every format it enables, as its
    # writer would have; of a published one, only the Iceberg files are this server's
    # business.
    formats = None if raw is None else (SERVED_FORMAT,)
    failed = False
    try:
        # Build on the published files as they are (checked), not on what this
        # process remembers publishing: that may be what was overwritten since.
        forget_states()
        publish_version(store, manifest, handler.manifest_if_kept, formats=formats)
    except Exception:
        # Whatever failed, the file is read and checked again below: that decides.
        log.warning("%s: publishing version %d failed", uri, version, exc_info=True)
        failed = True
    path = _metadata_path(version)
    verdict = _verdict(handler, manifest, bounded_get(store, path))
    if isinstance(verdict, bytes):
        return verdict
    outcome = "failed (the catalog server's log says why)" if failed else "did not mend it"
    raise PublishedStateError(
        f"{verdict}; publishing version {version} again from its manifest {outcome}; "
        "`s3ddb open-formats URI --rebuild` republishes the kept versions",
        path=path,
    )


def publish_pinned(ds: Dataset) -> None:
    """Make sure ``ds``'s pinned version (a cut's, read together with other datasets'
    versions) is served: its Iceberg metadata file is published if it is missing (a
    version read before its writer published it) or not what s3ddb publishes for it
    (damaged, planted), and checked (see :func:`load_served_table`).

    Raises:
        OpenFormatError: the version does not publish Iceberg.
        PublishedStateError: its metadata file is damaged, and publishing it again did
            not mend it; naming the file.
        What reading or publishing the dataset raised.
    """
    handler = ds.handler
    raw = bounded_get(handler.store, _metadata_path(ds.version))
    if raw is not None and _CHECKED.known(_CheckedFiles.key(handler.store.url, ds.version, raw)):
        return
    _checked(ds.uri, handler, ds.manifest, raw, mend=True)


def load_served_table(
    uri: str,
    storage_options: Mapping[str, Any],
    *,
    version: int | None = None,
    if_none_match: str | None = None,
) -> ServedTable:
    """The newest committed version of the dataset at ``uri`` with its Iceberg
    metadata, published first if it is missing (a writer died between its commit
    and its publication) or damaged. Served only once checked: the version's
    manifest enables Iceberg, and its published state is, byte for byte, what s3ddb
    publishes for it (see :func:`_checked`). When ``if_none_match`` (the request's
    header) names that version's entity tag, the metadata is None.

    ``version`` (a cut's: committed, and published when the cut was read) serves
    that version's metadata file instead; it is never published here, so a missing
    or damaged file is refused.

    A version's state is checked once per metadata file content (the first load
    reads the version's manifests, fragment lists and published files); after that,
    a load costs two requests: the newest version from the commit mechanism (the
    DynamoDB query, or the listing of the committed manifests) and the metadata
    file.

    Raises:
        OpenFormatError: the version does not publish Iceberg.
        PublishedStateError: its metadata file is missing or damaged, and could not
            be mended (or is a cut's); naming the file.
        StoredMetadataError: a published file does not decode.
        DatasetNotFoundError: nothing is committed at ``uri``.
        What opening or publishing the dataset raised.
    """
    with telemetry.span(
        "s3ddb.catalog.load_table", {"s3ddb.dataset": telemetry.dataset_attribute(uri)}
    ) as span:
        handler = open_validated(uri, dict(storage_options) or None)
        store = handler.store
        newest = None
        if version is None:
            # Finishes a version a writer left staged (copy, publish, repoint) on s3+ddb.
            newest = require_latest_location(handler, uri)
            version = newest.version
        raw = bounded_get(store, _metadata_path(version))
        if raw is None or not _CHECKED.known(_CheckedFiles.key(store.url, version, raw)):
            if newest is None:
                manifest = load_version(handler, version, uri)
            else:
                manifest = load_newest(handler, newest)
                if manifest.version != version:  # cleanup removed it: a newer one came
                    version = manifest.version
                    raw = bounded_get(store, _metadata_path(version))
            raw = _checked(uri, handler, manifest, raw, mend=newest is not None)
        span.set_attribute("s3ddb.version", version)
        path = _metadata_path(version)
        metadata = bounded_json(raw, path)
        root = _root_of(store.url)
        etag = _etag(store.url, version, metadata["table-uuid"])
        location = _WRITER.reader_location(root, version)
        if if_none_match is not None and etag_matches(if_none_match, etag):
            return ServedTable(version, etag, location, None)
        return ServedTable(version, etag, location, metadata)
