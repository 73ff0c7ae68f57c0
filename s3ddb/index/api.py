"""The Dataset methods of indices: ``create_scalar_index``, ``optimize_indices``, and
``list_indices``, ``describe_indices`` and ``index_statistics`` as pylance reports
them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from s3ddb.errors import (
    ColumnNotFoundError,
    IndexExistsError,
    InvalidInputError,
    UnsupportedIndexError,
)
from s3ddb.format.index import index_by_name
from s3ddb.format.manifest import Manifest
from s3ddb.index.btree import build_btree, indexed_column
from s3ddb.operations import CreateIndex
from s3ddb.versions.pinned import plan_and_commit

if TYPE_CHECKING:
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "PYLANCE_INDEX_TYPES",
    "SUPPORTED_INDEX_TYPES",
    "IndexDescription",
    "IndexSegmentDescription",
    "create_scalar_index",
    "describe_indices",
    "index_statistics",
    "list_indices",
    "optimize_indices",
]

SUPPORTED_INDEX_TYPES = ("BTREE",)

#: pylance's names of index types, where they differ from the stored ones.
PYLANCE_INDEX_TYPES = {"BTREE": "BTree"}


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
        # Checked again on every plan: a re-plan on a newer version may find the
        # column dropped by a concurrent commit.
        if column not in manifest.schema.arrow.names:
            raise ColumnNotFoundError(
                f"cannot index column {column!r}: version {manifest.version} of {ds.uri} "
                f"has no such column (dropped since); columns are {manifest.schema.arrow.names}"
            )
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


def optimize_indices(ds: PinnedVersion, index_names: Sequence[str] | None) -> None:
    """Rebuild every index (or those named) that does not cover every fragment of the
    version, in one ``CreateIndex`` commit; nothing is committed when all cover every
    fragment. See :meth:`s3ddb.maintenance.compaction.DatasetOptimizer.optimize_indices`.

    Raises:
        InvalidInputError: ``index_names`` is not a list of names, or names an index
            the pinned version does not have.
    """
    names = None if index_names is None else _index_names(index_names)
    if names is not None:
        missing = sorted(set(names) - {i.name for i in ds.manifest.indices})
        if missing:
            raise InvalidInputError(
                f"optimize_indices: no index named {missing} on {ds.uri} (version "
                f"{ds.version}); indices are {[i.name for i in ds.manifest.indices]}"
            )
    store = ds.handler.store

    def plan(manifest: Manifest) -> tuple[CreateIndex | None, None]:
        fragments = {f.id for f in manifest.fragments}
        stale, rebuilt = [], []
        for index in manifest.indices:
            if names is not None and index.name not in names:
                continue
            if set(index.fragment_ids) == fragments:
                continue
            # Only what s3ddb builds (other index types are left as they are).
            column = indexed_column(manifest, index)
            if column is None:
                continue
            stale.append(index)
            rebuilt.append(build_btree(store, manifest, column, index.name))
        if not rebuilt:
            return None, None
        return CreateIndex(tuple(rebuilt), tuple(stale)), None

    plan_and_commit(ds, "optimize_indices", plan, None, None)


def _index_names(value: Any) -> list[str]:
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not all(isinstance(n, str) for n in value)
    ):
        raise InvalidInputError(f"index_names must be a list of names, got {value!r}")
    return list(value)


def list_indices(manifest: Manifest) -> list[dict[str, Any]]:
    """The indices of ``manifest``'s version, as pylance describes them."""
    out = []
    for index in manifest.indices:
        out.append(
            {
                "name": index.name,
                "type": PYLANCE_INDEX_TYPES.get(index.index_type, index.index_type),
                "uuid": index.uuid,
                "fields": manifest.schema.names_for_ids(list(index.fields)),
                "version": index.dataset_version,
                "fragment_ids": set(index.fragment_ids),
                "base_id": index.base_id,
            }
        )
    return out


@dataclass(frozen=True)
class IndexSegmentDescription:
    """One segment of an index, as pylance's ``IndexSegmentDescription`` (an s3ddb
    index is one segment)."""

    uuid: str
    dataset_version_at_last_update: int
    fragment_ids: frozenset[int]
    index_version: int = 0
    created_at: dt.datetime | None = None
    size_bytes: int | None = None
    base_id: int | None = None
    covering_fields: tuple[int, ...] = ()


@dataclass(frozen=True)
class IndexDescription:
    """One index, as pylance's ``describe_indices`` describes it."""

    name: str
    type_url: str
    index_type: str
    num_rows_indexed: int
    fields: tuple[int, ...]
    field_names: list[str]
    segments: list[IndexSegmentDescription]
    details: dict[str, str]
    total_size_bytes: int | None = None


def _rows_of(manifest: Manifest, fragment_ids: frozenset[int]) -> int:
    return sum(f.num_rows for f in manifest.fragments if f.id in fragment_ids)


def describe_indices(manifest: Manifest) -> list[IndexDescription]:
    """The indices of ``manifest``'s version, as pylance's ``describe_indices``."""
    return [
        IndexDescription(
            name=index.name,
            type_url="",
            index_type=PYLANCE_INDEX_TYPES.get(index.index_type, index.index_type),
            num_rows_indexed=_rows_of(manifest, index.fragment_ids),
            fields=index.fields,
            field_names=manifest.schema.names_for_ids(list(index.fields)),
            segments=[
                IndexSegmentDescription(
                    uuid=index.uuid,
                    dataset_version_at_last_update=index.dataset_version,
                    fragment_ids=index.fragment_ids,
                    base_id=index.base_id,
                    covering_fields=index.fields,
                )
            ],
            details=dict(index.details),
        )
        for index in manifest.indices
    ]


def index_statistics(manifest: Manifest, name: str, uri: str) -> dict[str, Any]:
    """pylance's ``index_statistics(name)``: the index's type and the fragments and
    rows it covers and does not.

    Raises:
        InvalidInputError: no index named ``name`` in this version.
    """
    index = index_by_name(manifest.indices, name)
    if index is None:
        names = [i.name for i in manifest.indices]
        raise InvalidInputError(
            f"no index named {name!r} in version {manifest.version} of {uri}; indices are {names}"
        )
    index_type = PYLANCE_INDEX_TYPES.get(index.index_type, index.index_type)
    ids = {f.id for f in manifest.fragments}
    covered = index.fragment_ids & ids
    indexed_rows = _rows_of(manifest, frozenset(covered))
    return {
        "index_type": index_type,
        "name": index.name,
        "num_indices": 1,
        "indices": [
            {"index_type": index_type, "uuid": index.uuid, "fragment_ids": sorted(covered)}
        ],
        "num_indexed_fragments": len(covered),
        "num_indexed_rows": indexed_rows,
        "num_unindexed_fragments": len(ids - covered),
        "num_unindexed_rows": manifest.num_rows - indexed_rows,
    }
