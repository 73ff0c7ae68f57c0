"""The Dataset methods of indices: ``create_scalar_index`` and ``list_indices``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from s3ddb.errors import (
    ColumnNotFoundError,
    IndexExistsError,
    InvalidInputError,
    UnsupportedIndexError,
)
from s3ddb.format.index import index_by_name
from s3ddb.format.manifest import Manifest
from s3ddb.index.btree import build_btree
from s3ddb.operations import CreateIndex
from s3ddb.versions.pinned import plan_and_commit

if TYPE_CHECKING:
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "SUPPORTED_INDEX_TYPES",
    "create_scalar_index",
    "list_indices",
]

SUPPORTED_INDEX_TYPES = ("BTREE",)


def create_scalar_index(
    ds: PinnedVersion, column: str, index_type: str, name: str | None, replace: bool
) -> None:
    """See :meth:`s3ddb.Dataset.create_scalar_index`."""
    if not isinstance(column, str) or column not in ds.schema.names:
        raise ColumnNotFoundError(
            f"cannot index column {column!r}: no such column in {ds.uri}; columns are "
            f"{ds.schema.names}"
        )
    kind = index_type.upper() if isinstance(index_type, str) else index_type
    if kind not in SUPPORTED_INDEX_TYPES:
        raise UnsupportedIndexError(
            f"index type {index_type!r} is not supported; s3ddb builds {SUPPORTED_INDEX_TYPES}"
        )
    index_name = f"{column}_idx" if name is None else name
    if not isinstance(index_name, str) or not index_name.strip():
        raise InvalidInputError(f"index name must be a non-empty string, got {name!r}")
    store = ds.handler.store

    def plan(manifest: Manifest) -> tuple[CreateIndex, None]:
        existing = index_by_name(manifest.indices, index_name)
        if existing is not None and not replace:
            raise IndexExistsError(
                f"an index named {index_name!r} exists on {ds.uri} (version "
                f"{manifest.version}); pass replace=True to rebuild it"
            )
        index = build_btree(store, manifest, column, index_name)
        removed = (existing,) if existing is not None else ()
        return CreateIndex((index,), removed), None

    plan_and_commit(ds, "create_scalar_index", plan, None, None)


def list_indices(manifest: Manifest) -> list[dict[str, Any]]:
    """The indices of ``manifest``'s version, as pylance describes them."""
    out = []
    for index in manifest.indices:
        out.append(
            {
                "name": index.name,
                "type": index.index_type,
                "uuid": index.uuid,
                "fields": manifest.schema.names_for_ids(list(index.fields)),
                "version": index.dataset_version,
                "fragment_ids": set(index.fragment_ids),
            }
        )
    return out
