"""Building the next manifest: apply a transaction's operation to a base manifest."""

from __future__ import annotations

import time
from collections.abc import Callable

from s3ddb.commit.transaction import (
    Append,
    Operation,
    Overwrite,
    Restore,
    Transaction,
    UpdateConfig,
)
from s3ddb.errors import CommitConflictError, InvalidInputError
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import NamingScheme

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
        raise InvalidInputError(f"s3ddb cannot commit {txn.kind} operations yet")
    manifest = builder(base, txn.operation, version, load_manifest)
    return manifest.evolve(
        version=version,
        naming_scheme=base.naming_scheme if base is not None else naming,
        timestamp_nanos=time.time_ns(),
        transaction_file=txn.file_name,
        operation=txn.kind,
    )


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
            if not set(data_file.fields) <= known:
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
        fragments=fragments,
        max_fragment_id=max_id,
        config=config,
        table_metadata=dict(base.table_metadata) if base is not None else {},
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
    return base.evolve(config=config, table_metadata=metadata)


register_builder(Append, _append)
register_builder(Overwrite, _overwrite)
register_builder(Restore, _restore)
register_builder(UpdateConfig, _update_config)
