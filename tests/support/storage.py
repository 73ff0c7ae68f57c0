"""What a dataset's storage holds: its objects, and those no version references."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.external_store.manifest_store import MANIFEST_SHA256_ATTRIBUTE, ManifestRow
from s3ddb.format import layout
from s3ddb.format.framing import frame
from s3ddb.format.manifest import MANIFEST_MAGIC, manifest_sha256, referenced_paths
from s3ddb.io import ObjectStore, parse_uri
from tests.support.proc import append_and_die_after_claim


def objects(uri: str, storage_options: dict[str, Any] | None = None) -> set[str]:
    """Every object under the dataset root (paths relative to it), once this process's
    background finalization (steps 3-4 of its commits) has settled."""
    finalizer.drain()
    return {m.path for m in ObjectStore(uri, storage_options).list("")}


def orphans(uri: str, storage_options: dict[str, Any] | None = None) -> set[str]:
    """Objects (outside _versions/) that no version's manifest references."""
    ds = s3ddb.dataset(uri, storage_options=storage_options)
    referenced: set[str] = set()
    for info in ds.versions():
        manifest = ds.checkout_version(info.version).manifest
        referenced.update(referenced_paths(manifest))
    return {
        p
        for p in objects(uri, storage_options)
        if not p.startswith(f"{layout.VERSIONS_DIR}/") and p not in referenced
    }


def plant_manifest(
    uri: str, edit: Any, storage_options: dict[str, Any] | None = None, *, row: bool = True
) -> str:
    """Rewrite the newest manifest in place with ``edit`` applied to its protobuf, as
    someone with write access to the root could (no commit); returns its path. When the
    version's row in an external store records the manifest's size and digest, ``row``
    rewrites those too, as someone who can also write the table could (without it, the
    planted manifest is refused as replaced). This process's manifest cache is
    emptied, so that it reads the planted manifest."""
    ds = s3ddb.dataset(uri, storage_options=storage_options)
    location = ds.handler.latest_location()
    assert location is not None
    message = ds.manifest.to_pb()
    edit(message)
    data = frame(message.SerializeToString(), MANIFEST_MAGIC)
    ds.handler.store.put(location.path, data)
    if row and location.sha256 is not None:
        record_manifest_in_row(ds.handler, location.version, data)
    MANIFESTS.clear()
    return location.path


def record_manifest_in_row(handler: Any, version: int, data: bytes) -> None:
    """Make the external store's row of ``version`` record ``data`` as its manifest
    (size and digest), as someone who can write the table could."""
    external, base_uri = handler.external, handler.base_uri
    row = external.get(base_uri, version)
    assert row is not None
    digest = {MANIFEST_SHA256_ATTRIBUTE: manifest_sha256(data)}
    external.delete_versions(base_uri, [version])
    external.put_if_not_exists(replace(row, size=len(data), extra={**row.extra, **digest}))


def staged_second_version(aws: Any, uri: str, first: pa.Table) -> ManifestRow:
    """Version 1 of ``first`` at the ``s3+ddb://`` ``uri``, then version 2 (one row, id
    777) from a writer that died right after its claim: version 2's row, still staged."""
    so = aws.storage_options()
    s3ddb.write_dataset(first, uri, storage_options=so)
    finalizer.drain()
    append_and_die_after_claim(aws.env(), uri, "pa.table({'id': pa.array([777], pa.int64())})")
    external = s3ddb.dataset(uri, 1, storage_options=so).handler.external
    row = external.get(parse_uri(uri).base_uri, 2)
    assert row is not None and row.is_staged
    return row  # type: ignore[no-any-return]
