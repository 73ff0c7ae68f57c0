"""Writes of rows and versions: ``write_dataset``, ``insert``, ``delete``, ``update``,
``update_config``, ``restore`` and ``Dataset.commit``, each planned on a pinned
version and committed through :func:`~s3ddb.versions.pinned.plan_and_commit` or
:func:`~s3ddb.versions.pinned.commit_planned`."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.commit.build import APP_TRANSACTION_PREFIX
from s3ddb.commit.builders import STABLE_ROW_IDS_KEY
from s3ddb.commit.committer import CommitConfig, OnExisting, check_not_committed
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.errors import (
    CommitMechanismError,
    DatasetAlreadyExistsError,
    DatasetRecreatedError,
    InvalidInputError,
    OpenFormatError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    UnsupportedOperationError,
)
from s3ddb.format.datafile import FileLayout, write_fragments_from_table
from s3ddb.format.manifest import DYNAMODB, Manifest
from s3ddb.format.naming import NamingScheme
from s3ddb.format.schema import DatasetSchema, conform
from s3ddb.io.parallel import PendingWrites
from s3ddb.observe.commit_metrics import operation_metrics
from s3ddb.operations import (
    Append,
    DataReplacement,
    Delete,
    Operation,
    Overwrite,
    Restore,
    Update,
    UpdateConfig,
    check_replacement,
)
from s3ddb.versions.connect import open_handler
from s3ddb.versions.opening import load_latest, load_newest, load_version, open_validated
from s3ddb.versions.opening import placeholder_manifest as placeholder
from s3ddb.versions.pinned import (
    PinnedVersion,
    commit_planned,
    plan_and_commit,
    rows_landed_since,
)
from s3ddb.writes.row_changes import plan_delete, plan_update
from s3ddb.writes.user_data import to_arrow_table

__all__ = [
    "MIGRATED_TO_KEY",
    "MODES",
    "WriteMode",
    "commit_operation",
    "delete",
    "insert",
    "migrate_commits",
    "restore",
    "update",
    "update_config",
    "write_dataset",
]

WriteMode = Literal["create", "append", "overwrite"]
MODES = ("create", "append", "overwrite")
P = TypeVar("P", bound=PinnedVersion)
log = logging.getLogger(__name__)


def insert(
    ds: PinnedVersion,
    data: Any,
    mode: Literal["append", "overwrite"],
    conflict_retries: int | None,
    retry_timeout: float | None,
) -> None:
    """See :meth:`s3ddb.Dataset.insert`."""
    if mode not in ("append", "overwrite"):
        raise InvalidInputError(f"insert mode must be 'append' or 'overwrite', got {mode!r}")
    table = to_arrow_table(data)
    store = ds.handler.store

    def plan(manifest: Manifest, pending: PendingWrites) -> tuple[Operation | None, None]:
        if mode == "overwrite":
            schema = manifest.schema.with_arrow(table.schema)
            fragments = write_fragments_from_table(store, table, schema, pending=pending)
            return Overwrite(tuple(fragments), schema), None
        rows = conform(table, manifest.schema.arrow, where=ds.uri)
        if rows.num_rows == 0:
            return None, None
        fragments = write_fragments_from_table(store, rows, manifest.schema, pending=pending)
        return Append(tuple(fragments)), None

    plan_and_commit(ds, "insert", plan, conflict_retries, retry_timeout, uploads=True)


def delete(
    ds: PinnedVersion,
    predicate: str | pc.Expression,
    conflict_retries: int | None,
    retry_timeout: float | dt.timedelta | None,
) -> dict[str, int]:
    """See :meth:`s3ddb.Dataset.delete`."""

    def plan(manifest: Manifest, pending: PendingWrites) -> tuple[Operation | None, None]:
        return plan_delete(ds.handler.store, manifest, predicate, pending), None

    prior = ds.last_commit
    plan_and_commit(ds, "delete", plan, conflict_retries, retry_timeout, uploads=True)
    return {"num_deleted_rows": rows_landed_since(ds, prior, Delete)}


def update(
    ds: PinnedVersion,
    values: dict[str, str | pc.Expression],
    where: str | pc.Expression | None,
    rewrite: Literal["auto", "rows", "columns"],
    conflict_retries: int | None,
    retry_timeout: float | dt.timedelta | None,
) -> dict[str, int]:
    """See :meth:`s3ddb.Dataset.update`."""

    def plan(manifest: Manifest, pending: PendingWrites) -> tuple[Operation | None, None]:
        store = ds.handler.store
        update = plan_update(
            store, manifest, values, where, rewrite=rewrite, uri=ds.uri, pending=pending
        )
        return update, None

    prior = ds.last_commit
    plan_and_commit(ds, "update", plan, conflict_retries, retry_timeout, uploads=True)
    return {"num_rows_updated": rows_landed_since(ds, prior, Update)}


def update_config(
    ds: PinnedVersion,
    upsert: dict[str, str] | None,
    delete: list[str] | tuple[str, ...],
    metadata_upsert: dict[str, str] | None,
    metadata_delete: list[str] | tuple[str, ...],
) -> None:
    """See :meth:`s3ddb.Dataset.update_config`."""
    operation = UpdateConfig(
        config_upsert=dict(upsert or {}),
        config_delete=tuple(delete),
        metadata_upsert=dict(metadata_upsert or {}),
        metadata_delete=tuple(metadata_delete),
    )
    keys = [*operation.metadata_upsert, *operation.metadata_delete]
    reserved = [k for k in keys if k.startswith(APP_TRANSACTION_PREFIX)]
    if reserved:
        raise InvalidInputError(f"table metadata keys {reserved} are reserved by s3ddb")
    if not (keys or operation.config_upsert or operation.config_delete):
        raise InvalidInputError("update_config needs at least one key to set or delete")
    plan_and_commit(ds, "update_config", lambda manifest: (operation, None), None, None)


#: Table metadata key recording, in the version ``migrate_commits`` writes, the
#: mechanism the dataset moved to.
MIGRATED_TO_KEY = "s3ddb.commit_mechanism"


def migrate_commits(ds: PinnedVersion) -> bool:
    """See :func:`s3ddb.migrate_commits`. Returns whether a version was written.

    Raises:
        CommitMechanismError: the dataset commits through a DynamoDB table that still
            holds its rows at this location, and ``ds`` would commit another way.
    """
    handler = ds.handler
    latest = load_latest(handler, ds.uri, finalize=False)
    mechanism, table = handler.mechanism_record()
    recorded = (
        latest.commit_mechanism,
        latest.commit_table if latest.commit_mechanism == DYNAMODB else "",
    )
    if recorded == (mechanism, table):
        return False
    if latest.commit_mechanism == DYNAMODB and latest.commit_table != table:
        _refuse_if_rows_remain(ds, latest)
    handler.adopt_dataset()
    label = f"{mechanism}:{table}" if table else mechanism
    with operation_metrics(api_operation="migrate_commits"):
        commit_planned(ds, UpdateConfig(metadata_upsert={MIGRATED_TO_KEY: label}), latest)
    return True


def _refuse_if_rows_remain(ds: PinnedVersion, latest: Manifest) -> None:
    """Moving off a DynamoDB table in place would leave its writers claiming versions
    there, and their finalization would overwrite this mechanism's manifests.

    Raises:
        CommitMechanismError: the table still has rows for this dataset's location.
    """
    store = ds.handler.store
    if not store.url.startswith("s3://"):
        return  # a copy elsewhere: no row of that table can name this location
    old_uri = f"s3+ddb://{store.url[len('s3://') :]}?ddbTableName={latest.commit_table}"
    old = open_handler(old_uri, ds.storage_options)
    if old.latest_location(finalize=False) is None:
        return
    raise CommitMechanismError(
        f"refusing to move {store.url} off DynamoDB table {latest.commit_table!r}: the table "
        "still holds this dataset's rows, so its writers would keep committing there. Copy "
        f"the dataset elsewhere instead (Dataset.deep_clone), or stop every writer and "
        f"delete its rows first"
    )


def restore(ds: PinnedVersion) -> None:
    """See :meth:`s3ddb.Dataset.restore`.

    Raises:
        DatasetRecreatedError: the dataset at ``ds``'s location is no longer the one
            ``ds`` pinned (dropped and re-created since): its version number would name
            the new dataset's version. Nothing is committed.
    """
    latest = load_latest(ds.handler, ds.uri, finalize=False)
    pinned = ds.manifest.dataset_id
    # The committer fences on ``latest``'s identity (a re-creation after this read is
    # refused there); a re-creation before it is only visible against the pin.
    if pinned and latest.dataset_id != pinned:
        raise DatasetRecreatedError(
            f"refusing to restore {ds.handler.store.url} to version {ds.version}: that "
            f"version was read from dataset identity {pinned}, but the latest version "
            f"{latest.version} belongs to identity {latest.dataset_id or 'none'} (the "
            "dataset was dropped and re-created meanwhile). Nothing was committed."
        )
    with operation_metrics(api_operation="restore"):
        commit_planned(ds, Restore(ds.version), latest)


def commit_operation(
    cls: type[P],
    uri: str,
    operation: Operation,
    read_version: int | None,
    storage_options: dict[str, Any] | None,
    commit_config: CommitConfig | None,
    transaction_properties: dict[str, str] | None = None,
    on_existing: OnExisting = "rebase",
) -> P:
    """See :meth:`s3ddb.Dataset.commit`; the result is a ``cls``."""
    handler = open_validated(uri, storage_options)
    base = load_version(handler, read_version, uri) if read_version else None
    if (
        base is None
        and handler.latest_location() is not None
        and not isinstance(operation, Overwrite)
    ):
        raise InvalidInputError("read_version is required for an existing dataset")
    if isinstance(operation, DataReplacement) and base is not None:
        check_replacement(handler.store, base, operation)
    check_not_committed(handler, base, operation)
    ds = cls(
        uri,
        handler,
        base or placeholder(),
        storage_options=storage_options,
        commit_config=commit_config,
    )
    ds.forget_newest_seen()  # the caller's read version may be long past
    return commit_planned(
        ds, operation, base, on_existing, properties=transaction_properties, built_elsewhere=True
    )


def write_dataset(
    cls: type[P],
    table: pa.Table,
    uri: str,
    mode: WriteMode,
    storage_options: dict[str, Any] | None,
    layout: FileLayout,
    commit_config: CommitConfig | None,
    naming: NamingScheme,
    config: dict[str, str] | None = None,
) -> P:
    """See :func:`s3ddb.write_dataset`; the result is a ``cls``. ``config`` is set
    by the version when it creates or overwrites the dataset (open formats)."""
    handler = open_validated(uri, storage_options)

    def write(latest: ManifestLocation | None) -> P:
        return _write_version(
            cls, handler, uri, table, mode, latest, naming, layout,
            storage_options, commit_config, config or {},
        )  # fmt: skip

    # A process that committed the newest version it knows of builds on it without
    # asking (the conditional write still decides). If another writer changed the
    # dataset meanwhile in a way the write cannot rebase over, plan it again on the
    # real newest version.
    presumed = handler.presumed_latest() if mode != "create" else None
    if presumed is not None:
        try:
            return write(presumed)
        except (RetryableCommitConflictError, SchemaMismatchError, DatasetRecreatedError):
            # (Re-created: dropped and written again since this process's commit.)
            log.info("write to %s: the dataset changed since this process's commit", uri)
    return write(handler.latest_location(finalize=False))


def _write_version(
    cls: type[P],
    handler: CommitHandler,
    text: str,
    table: pa.Table,
    mode: WriteMode,
    latest: ManifestLocation | None,
    naming: NamingScheme,
    layout: FileLayout,
    storage_options: dict[str, Any] | None,
    commit_config: CommitConfig | None,
    config: dict[str, str],
) -> P:
    """write_dataset's plan and commit on top of ``latest``."""
    store = handler.store
    # Data files upload beside the transaction file and manifest (S3).
    pending = PendingWrites()
    base: Manifest | None = None
    on_existing: OnExisting = "rebase"
    if latest is not None:
        if mode == "create":
            raise DatasetAlreadyExistsError(
                f"a dataset already exists at {text} (version {latest.version}); "
                "use mode='append' or mode='overwrite'"
            )
        base = load_newest(handler, latest)
    operation: Operation
    if base is not None and mode == "append":
        if config.get(STABLE_ROW_IDS_KEY) == "true" and not base.stable_row_ids:
            raise UnsupportedOperationError(
                f"write_dataset(enable_stable_row_ids=True) appends to {text}, which has "
                "no stable row ids: a dataset gets them when it is created or overwritten"
            )
        config = {k: v for k, v in config.items() if k != STABLE_ROW_IDS_KEY}
        for key, value in config.items():
            if base.config.get(key) != value:
                raise OpenFormatError(
                    f"{text} already exists and publishes "
                    f"{base.config.get(key) or 'no open formats'}; an append keeps that: "
                    "use Dataset.enable_open_formats to publish more"
                )
        table = conform(table, base.schema.arrow, where=text)
        if table.num_rows == 0:
            return cls(
                text, handler, base, storage_options=storage_options, commit_config=commit_config
            )
        fragments = layout.write(store, table, base.schema, pending)
        operation = Append(tuple(fragments))
    else:
        ds_schema = (
            base.schema.with_arrow(table.schema)
            if base is not None
            else DatasetSchema.assign(table.schema)
        )
        fragments = layout.write(store, table, ds_schema, pending)
        operation = Overwrite(tuple(fragments), ds_schema, config_upsert_values=config or None)
        if base is None:
            on_existing = {"create": "error", "append": "append", "overwrite": "rebase"}[mode]  # type: ignore[assignment]
    ds = cls(
        text,
        handler,
        base or placeholder(),
        storage_options=storage_options,
        commit_config=commit_config,
    )
    return commit_planned(ds, operation, base, on_existing, naming, pending)
