"""Repairing a dataset: what ``s3ddb sync`` does.

:func:`sync` repairs what :func:`~s3ddb.maintenance.verify.verify` finds and can be
repaired without judgement: it finishes staged commits (steps 3-4 of docs/protocol.md),
puts back final manifests whose staged copy survived, and deletes staged manifests
nothing refers to. Idempotent, and safe while writers commit: staged manifests younger
than a grace period (a writer may be between writing them and claiming) are never
touched. :func:`table_datasets` finds every dataset of a DynamoDB table, for
``s3ddb sync --all``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from s3ddb.commit import finalizer as finalizers
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.errors import PathOutsideDatasetError, S3DDBError, StoredMetadataError
from s3ddb.external_store.manifest_store import ManifestRow
from s3ddb.format import layout
from s3ddb.format.naming import parse_manifest_name
from s3ddb.io.object_store import ObjectMeta
from s3ddb.maintenance.verify import (
    DEFAULT_GRACE_SECONDS,
    external_rows,
    old_enough,
    staged_objects,
)
from s3ddb.versions.connect import open_handler
from s3ddb.versions.opening import dataset_not_found

__all__ = ["SyncReport", "sync", "table_datasets"]


@dataclass
class SyncReport:
    """What :func:`sync` did: versions finalized, final manifests restored, orphaned
    staged manifests deleted, and what could not be repaired (``failed``)."""

    uri: str
    finalized: list[int] = field(default_factory=list)
    restored: list[int] = field(default_factory=list)
    deleted_staged: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def sync(
    uri: str,
    storage_options: dict[str, Any] | None = None,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
) -> SyncReport:
    """Finish every staged commit of ``uri`` (steps 3-4), put back final manifests
    whose staged copy is left, and delete staged manifests no row refers to that are
    older than ``grace_seconds``. Idempotent; safe while writers commit.

    Other datasets' commit mechanisms have nothing to finish: the report is empty.

    Raises:
        DatasetNotFoundError: nothing of a dataset is there (no row, no manifest).
        BucketNotFoundError: the URI's bucket does not exist.
        S3DDBError: the store or table cannot be read.
    """
    handler = open_handler(uri, storage_options)
    handler.validate()
    report = SyncReport(uri)
    external = external_rows(handler)
    if external is None:
        if next(iter(handler.store.iter_list(f"{layout.VERSIONS_DIR}/")), None) is None:
            raise dataset_not_found(uri)
        return report
    handler, rows = external
    store = handler.store
    objects = {m.path: m for m in store.iter_list(f"{layout.VERSIONS_DIR}/")}
    if not rows and not objects:
        raise dataset_not_found(uri)
    _check_mechanism(handler, objects, rows)
    staged = staged_objects(objects.values())
    referenced = set()
    for row in rows:
        try:
            row = handler.checked_row(row)
        except (PathOutsideDatasetError, StoredMetadataError) as exc:
            report.failed.append(f"version {row.version}: {exc}")
            continue
        if row.is_staged:
            referenced.add(row.path)
            try:
                handler.finalize(row)
                report.finalized.append(row.version)
            except S3DDBError as exc:
                report.failed.append(f"version {row.version}: {exc}")
        elif row.path not in objects:
            try:
                copy = handler.put_back_final(row)
            except S3DDBError as exc:
                report.failed.append(f"version {row.version}: {exc}")
                continue
            if copy is None:
                report.failed.append(
                    f"version {row.version}: final manifest {row.path} is missing and the "
                    "staged manifest its claim recorded is not left; restore it from a backup"
                )
                continue
            referenced.add(copy)
            report.restored.append(row.version)
    now = time.time()
    for path, meta in staged.items():
        if path not in referenced and old_enough(meta, grace_seconds, now):
            store.delete(path)
            report.deleted_staged.append(path)
    # Finalizing queued the staged manifests' deletes: they are done when sync returns.
    finalizers.drain()
    return report


def _check_mechanism(
    handler: CommitHandler, objects: Mapping[str, ObjectMeta], rows: Sequence[ManifestRow]
) -> None:
    """Refuse a sync through another commit mechanism than the dataset's (its newest
    final manifest records it): through another DynamoDB table, whose rows do not
    name the dataset's staged manifests, sync would delete them.

    Raises:
        CommitMechanismError: it records another; nothing is changed.
        ManifestCorruptError, VersionNotFoundError: the table has no row of the
            dataset and its newest manifest cannot be read to tell.
    """
    finals = sorted(
        (parsed[0], path, parsed[1])
        for path in objects
        if (parsed := parse_manifest_name(path.rsplit("/", 1)[-1])) is not None
    )
    if not finals:
        return
    version, path, naming = finals[-1]
    location = ManifestLocation(version, path, naming, objects[path].size)
    try:
        newest = handler.load_manifest(location)
    except S3DDBError:
        if rows:
            return  # the table has the dataset's rows: they decide what sync does
        raise
    handler.check_writable(newest)


def table_datasets(table: str, storage_options: dict[str, Any] | None = None) -> Iterator[str]:
    """The ``s3+ddb://`` URI of every dataset with rows in DynamoDB table ``table``."""
    from s3ddb.io.object_store import ObjectStore
    from s3ddb.io.uri import parse_uri
    from s3ddb.versions.connect import external_store_for

    probe = parse_uri(f"s3+ddb://bucket/x?ddbTableName={table}")
    external = external_store_for(probe, ObjectStore(probe, storage_options))
    for base_uri in external.list_datasets():
        if base_uri.startswith("s3://"):
            yield f"s3+ddb://{base_uri[len('s3://') :]}?ddbTableName={table}"
