"""Shallow and deep clones: a new dataset whose version 1 is another dataset's version.

A shallow clone copies nothing: its manifest references the source's data and
deletion files through a base path pointing at the source's root (a clone of a clone
carries the source's own bases over). A deep clone copies every file the version
references into its own root (server-side on S3) and has no base paths.

Writes to either kind of clone only ever write under the clone's root; reads of a
shallow clone read the source's files, so the source must keep them: tag the version
before cloning it (see docs/clones.md).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from s3ddb.arguments import is_int
from s3ddb.catalogs import CATALOG_CONFIG_KEYS
from s3ddb.errors import DatasetAlreadyExistsError, InvalidInputError
from s3ddb.format import layout
from s3ddb.format.bases import BasePath, FileResolver
from s3ddb.format.fragment_list import FragmentList
from s3ddb.format.fragment_metadata import DataFile, DeletionFile, FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import unique_hex
from s3ddb.format.row_lineage import encode_versions
from s3ddb.io.object_store import ObjectStore
from s3ddb.open_formats.model import GROUP_METADATA_KEY
from s3ddb.operations import Clone
from s3ddb.versions.opening import open_validated, placeholder_manifest
from s3ddb.versions.pinned import PinnedVersion, commit_planned

if TYPE_CHECKING:
    from s3ddb.commit.handlers import CommitHandler

__all__ = [
    "COPY_PARALLELISM",
    "deep_clone",
    "shallow_clone",
]

P = TypeVar("P", bound=PinnedVersion)

#: Copies in flight at once during a deep clone.
COPY_PARALLELISM = 16


def _source(ds: P, version: int | str | None) -> tuple[P, str]:
    """The source version (a PinnedVersion pinned there) and its tag name ("" if none)."""
    if version is None:
        return ds, ""
    if not (is_int(version) or isinstance(version, str)):
        raise InvalidInputError(f"version must be an int or a tag name, got {version!r}")
    return ds.checkout_version(version), version if isinstance(version, str) else ""


def _open_target(
    ds: PinnedVersion, target: str | os.PathLike[str], storage_options: dict[str, Any] | None
) -> tuple[str, CommitHandler, dict[str, Any]]:
    """The target's URI, commit handler and storage options (default: the source's).

    Raises:
        DatasetAlreadyExistsError: a dataset exists at ``target``.
        InvalidInputError: ``target`` is the source's root.
    """
    text = os.fspath(target)
    options = ds.storage_options if storage_options is None else dict(storage_options)
    handler = open_validated(text, options)
    if handler.store.url == ds.handler.store.url:
        raise InvalidInputError(f"cannot clone {ds.uri} onto itself")
    latest = handler.latest_location()
    if latest is not None:
        raise DatasetAlreadyExistsError(
            f"a dataset already exists at {text} (version {latest.version}); "
            "clone into a new location"
        )
    return text, handler, options


def _template(
    source: Manifest, fragments: tuple[FragmentMetadata, ...], **changes: Any
) -> Manifest:
    """The clone's version 1: the source's schema, config and metadata, but not the
    catalog table the source names (a Glue table stands for one dataset). With
    stable row ids, rows keep their ids and are stamped as created by version 1 (the
    source's version numbers mean nothing in the clone's history)."""
    if source.stable_row_ids:
        fragments = tuple(_first_version_rows(f) for f in fragments)
        changes = {"stable_row_ids": True, "next_row_id": source.next_row_id, **changes}
    return Manifest(
        version=1,
        schema=source.schema,
        fragments=FragmentList(fragments),
        max_fragment_id=source.max_fragment_id,
        config={k: v for k, v in source.config.items() if k not in CATALOG_CONFIG_KEYS},
        # The group that made the source's version did not make the clone's.
        table_metadata={k: v for k, v in source.table_metadata.items() if k != GROUP_METADATA_KEY},
        cloned_from_version=source.version,
        **changes,
    )


def _first_version_rows(fragment: FragmentMetadata) -> FragmentMetadata:
    """``fragment`` with every row created and last updated by version 1."""
    ones = encode_versions(np.ones(fragment.physical_rows, dtype=np.int64))
    return replace(fragment, created_at=ones, updated_at=ones)


def _commit_clone(
    text: str, handler: CommitHandler, options: dict[str, Any], ds: P, op: Clone
) -> P:
    # The clone's handle is of the caller's class, on the target, built by
    # PinnedVersion's constructor: a subclass may open differently (LanceDataset takes
    # pylance's arguments), but its state is a PinnedVersion's.
    clone = type(ds).__new__(type(ds))
    PinnedVersion.__init__(
        clone,
        text,
        handler,
        placeholder_manifest(),
        storage_options=options,
        commit_config=ds.commit_config,
    )
    return commit_planned(clone, op, None, on_existing="error", naming=ds.manifest.naming_scheme)


def shallow_clone(
    ds: P,
    target: str | os.PathLike[str],
    version: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> P:
    """See :meth:`s3ddb.Dataset.shallow_clone`."""
    src, tag = _source(ds, version)
    text, handler, options = _open_target(src, target, storage_options)
    manifest = src.manifest
    root = src.handler.store.url
    base_id = max((b.id for b in manifest.base_paths), default=0) + 1
    base = BasePath(base_id, root, name=tag or None)

    def rebased(fragment: FragmentMetadata) -> FragmentMetadata:
        files = tuple(
            replace(d, base_id=base_id) if d.base_id is None else d for d in fragment.files
        )
        deletion = fragment.deletion_file
        if deletion is not None and deletion.base_id is None:
            deletion = replace(deletion, base_id=base_id)
        return replace(fragment, files=files, deletion_file=deletion)

    template = _template(
        manifest,
        tuple(rebased(f) for f in manifest.fragments),
        base_paths=(*manifest.base_paths, base),
    )
    op = Clone(True, tag, manifest.version, root, template=template)
    return _commit_clone(text, handler, options, src, op)


def deep_clone(
    ds: P,
    target: str | os.PathLike[str],
    version: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> P:
    """See :meth:`s3ddb.Dataset.deep_clone`."""
    src, tag = _source(ds, version)
    text, handler, options = _open_target(src, target, storage_options)
    manifest = src.manifest
    fragments, copies = _copies(FileResolver.for_manifest(src.handler.store, manifest), manifest)
    written = [dst for _store, _path, dst in copies]
    target_store = handler.store

    def copy(planned: tuple[ObjectStore, str, str]) -> None:
        store, path, dst = planned
        store.copy_to(target_store, path, dst)

    try:
        with ThreadPoolExecutor(max_workers=COPY_PARALLELISM) as pool:
            list(pool.map(copy, copies))
    except BaseException:
        # Nothing was committed: the copies are ours alone.
        target_store.delete_many(written)
        raise
    template = _template(manifest, tuple(fragments))
    op = Clone(False, tag, manifest.version, src.handler.store.url, template, tuple(written))
    return _commit_clone(text, handler, options, src, op)


def _copies(
    sources: FileResolver, manifest: Manifest
) -> tuple[list[FragmentMetadata], list[tuple[ObjectStore, str, str]]]:
    """A deep clone's plan: ``manifest``'s fragments renamed to the copies, and each
    copy to make (source store, source path, path in the clone's root)."""
    # Copies get new names: a clone racing this one into the same target can then
    # never overwrite (or, failing, delete) a file of the winner.
    copies: list[tuple[ObjectStore, str, str]] = []
    fragments = []
    for fragment in manifest.fragments:
        files = []
        for d in fragment.files:
            store, path = sources.data_file(d)
            name = layout.new_data_file_name(
                d.path.rsplit(".", 1)[-1] if "." in d.path else "parquet"
            )
            copies.append((store, path, layout.data_file_path(name)))
            files.append(DataFile(name, d.fields, d.file_format, d.file_size_bytes))
        deletion = fragment.deletion_file
        if deletion is not None:
            store, path = sources.deletion_file(fragment)
            deletion = DeletionFile(
                deletion.kind, deletion.read_version, unique_hex(), deletion.num_deleted_rows
            )
            dst = layout.deletion_file_path(
                fragment.id, deletion.read_version, deletion.id, deletion.extension
            )
            copies.append((store, path, dst))
        fragments.append(replace(fragment, files=tuple(files), deletion_file=deletion))
    return fragments, copies
