"""What a dataset's storage holds: its objects, and those no version references."""

from __future__ import annotations

from typing import Any

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.format import layout
from s3ddb.format.framing import frame
from s3ddb.format.manifest import MANIFEST_MAGIC, referenced_paths
from s3ddb.io import ObjectStore


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


def plant_manifest(uri: str, edit: Any, storage_options: dict[str, Any] | None = None) -> str:
    """Rewrite the newest manifest in place with ``edit`` applied to its protobuf, as
    someone with write access to the root could (no commit); returns its path. This
    process's manifest cache is emptied, so that it reads the planted manifest."""
    ds = s3ddb.dataset(uri, storage_options=storage_options)
    location = ds.handler.latest_location()
    assert location is not None
    message = ds.manifest.to_pb()
    edit(message)
    ds.handler.store.put(location.path, frame(message.SerializeToString(), MANIFEST_MAGIC))
    MANIFESTS.clear()
    return location.path
