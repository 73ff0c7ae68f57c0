"""How each operation turns the manifest of the version it commits on (the *base*)
into the next one. :data:`BUILDERS` (at the end) maps each operation type to its
builder; :func:`s3ddb.commit.build.build_manifest` adds what every commit records
(version, time, transaction file...).

A builder gets ``(base, operation, version, load)``: ``base`` is None when the
dataset does not exist yet, ``load(v)`` reads the manifest of version ``v`` (Restore).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa

from s3ddb.errors import (
    BaseTooOldError,
    CommitConflictError,
    InvalidInputError,
    PathOutsideDatasetError,
    RetryableCommitConflictError,
)
from s3ddb.format.fragment_list import FragmentList
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_lineage import resolve_lineage
from s3ddb.format.stats import live_statistics
from s3ddb.operations import (
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    Delete,
    Merge,
    Operation,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMode,
    replaced_fragment,
)

__all__ = [
    "BUILDERS",
    "STABLE_ROW_IDS_KEY",
    "Builder",
    "LoadManifest",
    "allocate_row_ids",
    "build_append",
    "build_clone",
    "build_create_index",
    "build_data_replacement",
    "build_delete",
    "build_merge",
    "build_overwrite",
    "build_project",
    "build_reserve_fragments",
    "build_restore",
    "build_rewrite",
    "build_update",
    "build_update_bases",
    "build_update_config",
    "require_base",
]

LoadManifest = Callable[[int], Manifest]
Builder = Callable[[Manifest | None, Operation, int, LoadManifest], Manifest]


def require_base(base: Manifest | None, op: Operation) -> Manifest:
    """``base``, which ``op`` needs.

    Raises:
        InvalidInputError: there is no dataset yet.
    """
    if base is None:
        raise InvalidInputError(f"{op.kind} needs an existing dataset")
    return base


#: The config key that asks a new dataset (or an overwrite) for stable row ids; a
#: manifest records the feature itself (format 3), and every later version keeps it.
STABLE_ROW_IDS_KEY = "s3ddb.stable_row_ids"


def allocate_row_ids(
    fragments: tuple[FragmentMetadata, ...] | list[FragmentMetadata],
    next_row_id: int,
    version: int,
) -> tuple[tuple[FragmentMetadata, ...], int]:
    """``fragments`` (new to the version being built) with their pending row ids
    allocated from ``next_row_id`` in order and their pending row versions stamped
    ``version``; and the next free id. Called on every attempt of a commit, on the
    base it is built on, so a commit rebased over another allocates again.

    Raises:
        StoredMetadataError: a fragment's lineage is malformed.
    """
    out = []
    for fragment in fragments:
        fragment, next_row_id = resolve_lineage(fragment, next_row_id, version)
        out.append(fragment)
    return tuple(out), next_row_id


def build_append(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, Append)
    base = require_base(base, op)
    known = {i for _p, i in base.schema.ids}
    first = base.next_fragment_id()
    new = []
    for i, fragment in enumerate(op.fragments):
        for data_file in fragment.files:
            if not {i for i in data_file.fields if i >= 0} <= known:
                raise CommitConflictError(
                    f"appended data file {data_file.path} has field ids the schema of "
                    f"version {base.version} does not know"
                )
        new.append(fragment.with_id(first + i))
    next_row_id = base.next_row_id
    if base.stable_row_ids:
        new[:], next_row_id = allocate_row_ids(new, next_row_id, version)
    return base.evolve(
        fragments=base.fragments + tuple(new),
        max_fragment_id=first + len(new) - 1,
        next_row_id=next_row_id,
    )


def build_overwrite(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, Overwrite)
    # Fragment ids keep increasing across overwrites so that file names keyed by
    # fragment id (deletion files) never collide with an older version's.
    first = base.next_fragment_id() if base is not None else 0
    fragments = tuple(f.with_id(first + i) for i, f in enumerate(op.fragments))
    config = dict(base.config) if base is not None else {}
    config.update(op.config_upsert_values)
    max_id = first + len(fragments) - 1 if fragments else (base.max_fragment_id if base else None)
    # Once on, stable row ids stay on (an overwrite keeps allocating above the ids
    # every earlier version used).
    stable = (base is not None and base.stable_row_ids) or config.get(STABLE_ROW_IDS_KEY) == "true"
    next_row_id = base.next_row_id if base is not None else 0
    if stable:
        fragments, next_row_id = allocate_row_ids(fragments, next_row_id, version)
    return Manifest(
        version=version,
        schema=op.schema,
        fragments=FragmentList(fragments),
        max_fragment_id=max_id,
        config=config,
        table_metadata=dict(base.table_metadata) if base is not None else {},
        # Declared bases stay declared (an overwrite's own files are in the root).
        base_paths=base.base_paths if base is not None else (),
        cloned_from_version=base.cloned_from_version if base is not None else None,
        stable_row_ids=stable,
        next_row_id=next_row_id,
    )


def build_restore(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, Restore)
    base = require_base(base, op)
    source = load(op.version)
    max_ids = [i for i in (base.max_fragment_id, source.max_fragment_id) if i is not None]
    # Restored rows keep their ids; new rows get ids above every id ever allocated.
    return source.evolve(
        max_fragment_id=max(max_ids) if max_ids else None,
        stable_row_ids=source.stable_row_ids or base.stable_row_ids,
        next_row_id=max(source.next_row_id, base.next_row_id),
    )


def build_update_config(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, UpdateConfig)
    base = require_base(base, op)
    config = {k: v for k, v in base.config.items() if k not in op.config_delete}
    config.update(op.config_upsert)
    metadata = {k: v for k, v in base.table_metadata.items() if k not in op.metadata_delete}
    metadata.update(op.metadata_upsert)
    schema = base.schema
    if op.schema_metadata is not None:
        schema = schema.with_schema_metadata(op.schema_metadata.apply(_metadata_of(schema.arrow)))
    for field_id, update in op.field_metadata.items():
        top = {i: p for p, i in schema.ids if len(p) == 1}
        if field_id not in top:
            # Dropped, or replaced by a cast, since the caller resolved the name:
            # planning again on the newest version finds the field's current id.
            raise RetryableCommitConflictError(
                f"UpdateConfig: field id {field_id} is not a top-level field of version "
                f"{base.version} any more"
            )
        current = _metadata_of(schema.arrow.field(top[field_id][0]))
        schema = schema.with_field_metadata(field_id, update.apply(current))
    return base.evolve(config=config, table_metadata=metadata, schema=schema)


def _metadata_of(item: pa.Schema | pa.Field) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (item.metadata or {}).items()}


def _changed_fragments(
    base: Manifest,
    op: Delete | Update,
    updated: tuple[FragmentMetadata, ...],
    removed: tuple[int, ...],
    version: int,
) -> FragmentList:
    """``base``'s fragments with ``updated`` applied and ``removed`` dropped.

    An updated fragment keeps ``base``'s data files and takes the new deletion file,
    or (REWRITE_COLUMNS) takes the new data files and keeps ``base``'s deletion file:
    the conflict resolver has already merged concurrent changes of either into the
    transaction, so each side's latest state is what survives. Only the changed
    fragments are decoded.
    """
    changes = {f.id: f for f in updated}
    gone = set(removed)
    columns = isinstance(op, Update) and op.mode is UpdateMode.REWRITE_COLUMNS

    def change(fragment: FragmentMetadata) -> FragmentMetadata | None:
        if fragment.id in gone:
            return None
        new = changes[fragment.id]
        if columns:
            # Statistics are trusted per file (s3ddb.format.stats): both sides' apply.
            stats = live_statistics(new.files, (*fragment.stats, *new.stats))
            changed = replace(fragment, files=new.files, stats=stats)
            if base.stable_row_ids and new.updated_at:
                # The rows it rewrote keep their ids and take this version as the
                # one that last updated them (the planner marked them pending).
                changed, _ = resolve_lineage(
                    replace(changed, updated_at=new.updated_at), base.next_row_id, version
                )
            return changed
        return fragment.with_deletion_file(new.deletion_file)

    fragments, found = base.fragments.changed(set(changes) | gone, change)
    missing = sorted((set(changes) | gone) - found)
    if missing:
        raise CommitConflictError(
            f"{op.kind} changes fragments {missing} that version {base.version} no longer has"
        )
    return fragments


def build_delete(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, Delete)
    base = require_base(base, op)
    kept = _changed_fragments(base, op, op.updated_fragments, op.deleted_fragment_ids, version)
    return base.evolve(fragments=kept)


def build_update(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, Update)
    base = require_base(base, op)
    kept = _changed_fragments(base, op, op.updated_fragments, op.removed_fragment_ids, version)
    if not op.new_fragments:
        return base.evolve(fragments=kept)
    return build_append(base.evolve(fragments=kept), Append(op.new_fragments), version, load)


def build_rewrite(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, Rewrite)
    base = require_base(base, op)
    current = {f.id: f for f in base.fragments}
    for old in op.old_fragments():
        if current.get(old.id) != old:
            raise CommitConflictError(
                f"Rewrite: fragment {old.id} changed or vanished since it was read "
                f"(version {base.version})"
            )
    # Each group's new fragments take the place of its first old fragment, so the
    # dataset's row order is kept. Groups with a fragment-reuse mapping carry ids
    # that ReserveFragments reserved; the others get theirs here.
    first = base.next_fragment_id()
    replaced: dict[int, list[FragmentMetadata]] = {}
    dropped: set[int] = set()
    for group in op.groups:
        if group.has_mapping:
            _check_reserved(base, group.new_fragments, current)
            new = list(group.new_fragments)
        else:
            new = [f.with_id(first + i) for i, f in enumerate(group.new_fragments)]
            first += len(new)
        replaced[group.old_fragments[0].id] = new
        dropped.update(f.id for f in group.old_fragments[1:])
    fragments: list[FragmentMetadata] = []
    for fragment in base.fragments:
        if fragment.id in replaced:
            fragments.extend(replaced[fragment.id])
        elif fragment.id not in dropped:
            fragments.append(fragment)
    max_id = first - 1 if first > base.next_fragment_id() else base.max_fragment_id
    next_row_id = base.next_row_id
    if base.stable_row_ids:
        # Compaction carries its rows' lineage (nothing pending). A rewrite whose
        # fragments lack it would give rows that live on new ids: refused.
        lacking = [f.id for g in replaced.values() for f in g if f.physical_rows and not f.row_ids]
        if lacking:
            raise InvalidInputError(
                f"Rewrite: fragments {lacking[:5]} carry no row ids, and version "
                f"{base.version} has stable row ids its rows must keep (compact with "
                "Dataset.optimize.compact_files)"
            )
        fragments_out, next_row_id = allocate_row_ids(
            [f for group in replaced.values() for f in group], next_row_id, version
        )
        by_id = {f.id: f for f in fragments_out}
        fragments = [by_id.get(f.id, f) for f in fragments]
    return base.evolve(fragments=tuple(fragments), max_fragment_id=max_id, next_row_id=next_row_id)


def _check_reserved(
    base: Manifest, fragments: tuple[FragmentMetadata, ...], current: dict[int, FragmentMetadata]
) -> None:
    """Reserved ids are at most the base's highest id and belong to no fragment."""
    highest = base.max_fragment_id if base.max_fragment_id is not None else -1
    for fragment in fragments:
        if fragment.id > highest:
            raise BaseTooOldError(
                f"Rewrite: fragment id {fragment.id} is not reserved in version {base.version}"
            )
        if fragment.id in current:
            raise CommitConflictError(
                f"Rewrite: fragment id {fragment.id} is taken in version {base.version}"
            )


def build_reserve_fragments(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, ReserveFragments)
    base = require_base(base, op)
    return base.evolve(max_fragment_id=base.next_fragment_id() + op.num_fragments - 1)


def build_merge(base: Manifest | None, op: Operation, version: int, load: LoadManifest) -> Manifest:
    assert isinstance(op, Merge)
    base = require_base(base, op)
    # The conflict rules let a Merge land only over commits that leave the fragments
    # alone; check anyway, so a bug there can never drop or resurrect rows.
    mine = {f.id: f for f in op.fragments}
    theirs = {f.id: f for f in base.fragments}
    if set(mine) != set(theirs) or any(
        mine[i].deletion_file != f.deletion_file or mine[i].physical_rows != f.physical_rows
        for i, f in theirs.items()
    ):
        raise RetryableCommitConflictError(
            f"Merge: the fragments of version {base.version} are not the ones it extended"
        )
    # A new column changes no row's values: the rows keep their ids and versions.
    return base.evolve(
        fragments=tuple(
            replace(mine[f.id], row_ids=f.row_ids, created_at=f.created_at, updated_at=f.updated_at)
            for f in base.fragments
        ),
        schema=op.schema,
    )


def build_project(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, Project)
    base = require_base(base, op)
    unknown = {i for _p, i in op.schema.ids} - {i for _p, i in base.schema.ids}
    if unknown:
        raise RetryableCommitConflictError(
            f"Project: field ids {sorted(unknown)} are not in the schema of version {base.version}"
        )
    # An index on a dropped field indexes a column no longer there (and a column added
    # later under the same name gets a new id the index does not cover): drop it, one
    # on several fields as soon as one of them goes. Applied to the newest base, this
    # also drops an index created concurrently on a column this Project drops.
    kept = {i for _p, i in op.schema.ids}
    indices = tuple(x for x in base.indices if all(f in kept for f in x.fields))
    return base.evolve(schema=op.schema, indices=indices)


def build_data_replacement(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    """``base`` with ``op``'s data files swapped in.

    Raises:
        InvalidInputError: no dataset.
        CommitConflictError: a fragment vanished, or has no file of those fields.
    """
    assert isinstance(op, DataReplacement)
    base = require_base(base, op)
    by_id = {f.id: f for f in base.fragments}
    for group in op.replacements:
        fragment = by_id.get(group.fragment_id)
        if fragment is None:
            raise CommitConflictError(
                f"DataReplacement: fragment {group.fragment_id} is not in version {base.version}"
            )
        by_id[group.fragment_id] = replaced_fragment(fragment, group.new_file, base.version)
    return base.evolve(fragments=tuple(by_id[f.id] for f in base.fragments))


def build_create_index(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    """``base`` with ``op``'s indices added and removed.

    Raises:
        InvalidInputError: no dataset.
        CommitConflictError: an indexed field is gone, or another index took a new
            index's name.
    """
    assert isinstance(op, CreateIndex)
    base = require_base(base, op)
    known = {i for _p, i in base.schema.ids}
    removed = {i.uuid for i in op.removed_indices}
    kept = [i for i in base.indices if i.uuid not in removed]
    present = {f.id for f in base.fragments}
    for index in op.new_indices:
        missing = set(index.fields) - known
        if missing:
            raise CommitConflictError(
                f"index {index.name!r}: fields {sorted(missing)} are not in version {base.version}"
            )
        if any(k.name == index.name for k in kept):
            raise CommitConflictError(
                f"an index named {index.name!r} exists in version {base.version}"
            )
    new = [i.covering(present) for i in op.new_indices]
    return base.evolve(indices=tuple(kept + new))


def build_clone(base: Manifest | None, op: Operation, version: int, load: LoadManifest) -> Manifest:
    """Clone's manifest: its template, as the dataset's first version.

    Raises:
        InvalidInputError: the dataset exists already, or the Clone has no template.
    """
    assert isinstance(op, Clone)
    if base is not None:
        raise InvalidInputError(
            f"Clone is only valid as a dataset's first commit (version {base.version} exists)"
        )
    if op.template is None:
        raise InvalidInputError("this Clone was read from a transaction file: clone again")
    return op.template


def build_update_bases(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    """``base`` with ``op``'s bases added.

    Raises:
        InvalidInputError: no dataset yet.
        PathOutsideDatasetError: an id, name or root the dataset's bases already use.
    """
    assert isinstance(op, UpdateBases)
    base = require_base(base, op)
    ids = {b.id: b for b in base.base_paths}
    paths = {b.path for b in base.base_paths}
    names = {b.name for b in base.base_paths if b.name}
    for new in op.new_bases:
        if new.id in ids:
            raise PathOutsideDatasetError(
                f"base path id {new.id} is already used by {ids[new.id].path} "
                f"in version {base.version}"
            )
        if new.path in paths:
            raise PathOutsideDatasetError(f"base path {new.path} is already declared")
        if new.name and new.name in names:
            raise PathOutsideDatasetError(f"base path name {new.name!r} is already used")
    return base.evolve(base_paths=base.base_paths + op.new_bases)


#: How each operation s3ddb commits builds the next manifest: one entry per committable
#: class of :data:`s3ddb.operations.kinds.OPERATIONS` (tests/commit/test_operations_tables.py
#: checks). An operation type not listed cannot be committed.
BUILDERS: dict[type[Operation], Builder] = {
    Append: build_append,
    Overwrite: build_overwrite,
    Restore: build_restore,
    UpdateConfig: build_update_config,
    Delete: build_delete,
    Update: build_update,
    Rewrite: build_rewrite,
    ReserveFragments: build_reserve_fragments,
    Merge: build_merge,
    Project: build_project,
    DataReplacement: build_data_replacement,
    CreateIndex: build_create_index,
    Clone: build_clone,
    UpdateBases: build_update_bases,
}
