"""Building the next manifest: apply a transaction's operation to a base manifest."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa

from s3ddb.commit.row_operations import Delete, ReserveFragments, Rewrite, Update, UpdateMode
from s3ddb.commit.transaction import (
    Append,
    Operation,
    Overwrite,
    Restore,
    Transaction,
    UpdateConfig,
)
from s3ddb.errors import (
    BaseTooOldError,
    CommitConflictError,
    InvalidInputError,
    RetryableCommitConflictError,
    TransactionAlreadyCommittedError,
    UnsupportedOperationError,
)
from s3ddb.format.fragment import FragmentMetadata
from s3ddb.format.fragment_list import FragmentList
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import NamingScheme
from s3ddb.format.stats import live_statistics
from s3ddb.index.maintenance import drop_stale_coverage

#: Transaction properties under this prefix are application transactions
#: (``<prefix><application id>`` = sequence number, e.g. a streaming query's batch id).
#: Every later manifest remembers the highest number committed per application, so a
#: replayed batch is refused in the same conditional write that would commit it.
APP_TRANSACTION_PREFIX = "s3ddb.app_txn."

LoadManifest = Callable[[int], Manifest]
Builder = Callable[[Manifest | None, Operation, int, LoadManifest], Manifest]

_BUILDERS: dict[type[Operation], Builder] = {}


def register_builder(op_type: type[Operation], builder: Builder) -> None:
    """Register how ``op_type`` turns a base manifest into the next one."""
    _BUILDERS[op_type] = builder


def build_manifest(
    base: Manifest | None,
    txn: Transaction,
    version: int,
    naming: NamingScheme,
    load_manifest: LoadManifest,
) -> Manifest:
    """The manifest of ``version`` = ``base`` + ``txn``.

    Raises:
        InvalidInputError: the operation cannot apply to a missing dataset.
        CommitConflictError: the operation cannot apply to ``base``.
    """
    builder = _BUILDERS.get(type(txn.operation))
    if builder is None:
        raise UnsupportedOperationError(f"s3ddb cannot commit {txn.kind} operations")
    manifest = builder(base, txn.operation, version, load_manifest)
    if base is not None and not isinstance(txn.operation, (Overwrite, Restore)):
        # Indices stop covering fragments whose indexed column this commit changed.
        manifest = drop_stale_coverage(base, manifest)
    metadata = _app_transactions(base, txn, manifest)
    if metadata is not None:
        manifest = manifest.evolve(table_metadata=metadata)
    return manifest.evolve(
        version=version,
        naming_scheme=base.naming_scheme if base is not None else naming,
        # Never before the base's time, whatever this writer's clock says: commit
        # times increase with versions, so time travel can bisect history.
        timestamp_nanos=max(time.time_ns(), base.timestamp_nanos + 1 if base else 0),
        transaction_file=txn.file_name,
        operation=txn.kind,
    )


def _app_transactions(
    base: Manifest | None, txn: Transaction, built: Manifest
) -> dict[str, str] | None:
    """``built``'s table metadata with ``txn``'s application transactions recorded and
    ``base``'s carried over (a Restore must not forget them); None if unchanged.

    Raises:
        TransactionAlreadyCommittedError: ``base`` already holds an equal or newer
            number for one of ``txn``'s applications.
    """
    mine = {k: v for k, v in txn.properties.items() if k.startswith(APP_TRANSACTION_PREFIX)}
    before = base.table_metadata if base is not None else {}
    carried = {
        k: v
        for k, v in before.items()
        if k.startswith(APP_TRANSACTION_PREFIX) and built.table_metadata.get(k) != v
    }
    if not mine and not carried:
        return None
    metadata = dict(built.table_metadata)
    for key, value in carried.items():
        if _sequence(metadata.get(key)) < _sequence(value):
            metadata[key] = value
    for key, value in mine.items():
        done = _sequence(before.get(key))
        if _sequence(value) <= done:
            raise TransactionAlreadyCommittedError(
                f"application transaction {key[len(APP_TRANSACTION_PREFIX) :]!r} "
                f"{value} is already committed (version {base.version if base else 0} "
                f"records {done})"
            )
        metadata[key] = value
    return metadata


def _sequence(value: str | None) -> int:
    if value is None:
        return -1
    try:
        return int(value)
    except ValueError:
        raise InvalidInputError(
            f"application transaction number {value!r} is not an integer"
        ) from None


def _require_base(base: Manifest | None, op: Operation) -> Manifest:
    if base is None:
        raise InvalidInputError(f"{op.kind} needs an existing dataset")
    return base


def _append(base: Manifest | None, op: Operation, version: int, load: LoadManifest) -> Manifest:
    assert isinstance(op, Append)
    base = _require_base(base, op)
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
    return base.evolve(
        fragments=base.fragments + tuple(new),
        max_fragment_id=first + len(new) - 1,
    )


def _overwrite(base: Manifest | None, op: Operation, version: int, load: LoadManifest) -> Manifest:
    assert isinstance(op, Overwrite)
    # Fragment ids keep increasing across overwrites so that file names keyed by
    # fragment id (deletion files) never collide with an older version's.
    first = base.next_fragment_id() if base is not None else 0
    fragments = tuple(f.with_id(first + i) for i, f in enumerate(op.fragments))
    config = dict(base.config) if base is not None else {}
    config.update(op.config_upsert_values)
    max_id = first + len(fragments) - 1 if fragments else (base.max_fragment_id if base else None)
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
    )


def _restore(base: Manifest | None, op: Operation, version: int, load: LoadManifest) -> Manifest:
    assert isinstance(op, Restore)
    base = _require_base(base, op)
    source = load(op.version)
    max_ids = [i for i in (base.max_fragment_id, source.max_fragment_id) if i is not None]
    return source.evolve(max_fragment_id=max(max_ids) if max_ids else None)


def _update_config(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, UpdateConfig)
    base = _require_base(base, op)
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
            return replace(fragment, files=new.files, stats=stats)
        return fragment.with_deletion_file(new.deletion_file)

    fragments, found = base.fragments.changed(set(changes) | gone, change)
    missing = sorted((set(changes) | gone) - found)
    if missing:
        raise CommitConflictError(
            f"{op.kind} changes fragments {missing} that version {base.version} no longer has"
        )
    return fragments


def _delete(base: Manifest | None, op: Operation, version: int, load: LoadManifest) -> Manifest:
    assert isinstance(op, Delete)
    base = _require_base(base, op)
    kept = _changed_fragments(base, op, op.updated_fragments, op.deleted_fragment_ids)
    return base.evolve(fragments=kept)


def _update(base: Manifest | None, op: Operation, version: int, load: LoadManifest) -> Manifest:
    assert isinstance(op, Update)
    base = _require_base(base, op)
    kept = _changed_fragments(base, op, op.updated_fragments, op.removed_fragment_ids)
    if not op.new_fragments:
        return base.evolve(fragments=kept)
    return _append(base.evolve(fragments=kept), Append(op.new_fragments), version, load)


def _rewrite(base: Manifest | None, op: Operation, version: int, load: LoadManifest) -> Manifest:
    assert isinstance(op, Rewrite)
    base = _require_base(base, op)
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
    return base.evolve(fragments=tuple(fragments), max_fragment_id=max_id)


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


def _reserve_fragments(
    base: Manifest | None, op: Operation, version: int, load: LoadManifest
) -> Manifest:
    assert isinstance(op, ReserveFragments)
    base = _require_base(base, op)
    return base.evolve(max_fragment_id=base.next_fragment_id() + op.num_fragments - 1)


register_builder(Append, _append)
register_builder(Overwrite, _overwrite)
register_builder(Restore, _restore)
register_builder(UpdateConfig, _update_config)
register_builder(Delete, _delete)
register_builder(Update, _update)
register_builder(Rewrite, _rewrite)
register_builder(ReserveFragments, _reserve_fragments)

# Clone and UpdateBases live with the base-path code; schema evolution (Merge,
# Project) registers its builders with the ones above.
from s3ddb.commit import base_operations as _bases  # noqa: E402
from s3ddb.commit import schema_ops as _schema_ops  # noqa: E402,F401

register_builder(_bases.Clone, _bases.build_clone)
register_builder(_bases.UpdateBases, _bases.build_update_bases)
