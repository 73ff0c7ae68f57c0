"""What a dataset's storage holds: its objects, and those no version references."""

from __future__ import annotations

from typing import Any

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.format import layout
from s3ddb.format.manifest import referenced_paths
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
