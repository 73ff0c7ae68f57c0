"""Building the next manifest: apply a transaction's operation to a base manifest."""

from __future__ import annotations

import time

from s3ddb.commit.builders import BUILDERS, LoadManifest
from s3ddb.commit.index_coverage import drop_stale_coverage
from s3ddb.errors import (
    InvalidInputError,
    TransactionAlreadyCommittedError,
    UnsupportedOperationError,
)
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import NamingScheme
from s3ddb.open_formats.model import GROUP_METADATA_KEY
from s3ddb.operations import Overwrite, Restore, Transaction

__all__ = ["APP_TRANSACTION_PREFIX", "BUILDERS", "LoadManifest", "build_manifest"]

#: Transaction properties under this prefix are application transactions
#: (``<prefix><application id>`` = sequence number, e.g. a streaming query's batch id).
#: Every later manifest remembers the highest number committed per application, so a
#: replayed batch is refused in the same conditional write that would commit it.
APP_TRANSACTION_PREFIX = "s3ddb.app_txn."


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
        UnsupportedOperationError: the operation is not one s3ddb commits.
        TransactionAlreadyCommittedError: an application transaction of ``txn`` is
            already committed.
    """
    builder = BUILDERS.get(type(txn.operation))
    if builder is None:
        raise UnsupportedOperationError(f"s3ddb cannot commit {txn.kind} operations")
    manifest = builder(base, txn.operation, version, load_manifest)
    if base is not None and not isinstance(txn.operation, (Overwrite, Restore)):
        # Indices stop covering fragments whose indexed column this commit changed.
        manifest = drop_stale_coverage(base, manifest)
    metadata = _app_transactions(base, txn, manifest)
    if metadata is not None:
        manifest = manifest.evolve(table_metadata=metadata)
    manifest = _with_group(txn, manifest)
    return manifest.evolve(
        version=version,
        naming_scheme=base.naming_scheme if base is not None else naming,
        # Never before the base's time, whatever this writer's clock says: commit
        # times increase with versions, so time travel can bisect history.
        timestamp_nanos=max(time.time_ns(), base.timestamp_nanos + 1 if base else 0),
        transaction_file=txn.file_name,
        operation=txn.kind,
    )


def _with_group(txn: Transaction, manifest: Manifest) -> Manifest:
    """``manifest`` recording the group ``txn`` was committed in (its property
    :data:`GROUP_METADATA_KEY`), and no other: the key is the version's own, never
    carried over from the base (nor set by a transaction outside a group). Publication
    names it as the version's cut."""
    group = txn.properties.get(GROUP_METADATA_KEY)
    if manifest.table_metadata.get(GROUP_METADATA_KEY) == group:
        return manifest
    metadata = {k: v for k, v in manifest.table_metadata.items() if k != GROUP_METADATA_KEY}
    if group is not None:
        metadata[GROUP_METADATA_KEY] = group
    return manifest.evolve(table_metadata=metadata)


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
