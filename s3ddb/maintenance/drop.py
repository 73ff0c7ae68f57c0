"""Deleting a dataset: what ``s3ddb drop`` does.

:func:`drop` deletes every object under the dataset root, then every DynamoDB row of
it, newest first, and looks again until a pass finds nothing, so a writer still
committing cannot leave anything behind (docs/operations.md, Removing data). A pass
that finds nothing is confirmed by one more after :data:`DROP_SETTLE_SECONDS`: a copy
a writer sent before its staged manifest was deleted may still be under way at the
store, and lands after the listing that found nothing.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from s3ddb.maintenance.verify import Progress, no_progress
from s3ddb.versions.connect import open_handler
from s3ddb.versions.opening import dataset_not_found

__all__ = ["DROP_PASSES", "DROP_SETTLE_SECONDS", "DropReport", "drop"]


@dataclass
class DropReport:
    """What :func:`drop` deleted: objects (and their bytes) and DynamoDB rows."""

    uri: str
    objects: int = 0
    bytes: int = 0
    rows: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: How many times :func:`drop` looks again for what writers racing it left.
DROP_PASSES = 10

#: How long :func:`drop` waits, once a pass found nothing, before the pass that
#: confirms it. A writer whose claim won just before the drop copies its staged
#: manifest to the final name; the store may read the staged object before the drop
#: deletes it and write the copy after the drop's listing found nothing (seen on
#: SeaweedFS under load), which would leave the dropped dataset's manifest as the
#: newest version plain ``s3://`` readers list. Only a drop on a remote store that
#: deleted something waits: a local file is written by the writer's own process, and
#: nothing of a dataset that was not there can be in flight.
DROP_SETTLE_SECONDS = 1.0


def drop(
    uri: str,
    storage_options: dict[str, Any] | None = None,
    *,
    progress: Progress = no_progress,
    missing_ok: bool = False,
) -> DropReport:
    """Delete every object under the dataset root and every DynamoDB row of it.

    Objects go first, so an interrupted drop leaves rows that ``verify`` reports and a
    second drop finishes. Rows go newest first: a writer still committing needs the
    newest row to claim the next version (its claim is fenced on it), so once that is
    gone no claim lands. A writer that claimed or wrote just before is caught by the
    next pass: passes repeat until a pass finds nothing and a pass
    :data:`DROP_SETTLE_SECONDS` later confirms it (at most :data:`DROP_PASSES`).
    ``progress`` hears ``"deleting objects"`` while objects go and ``"waiting for
    writes in flight"`` before the confirming pass.

    Raises:
        DatasetNotFoundError: the first pass found no object and no row, unless
            ``missing_ok``.
        BucketNotFoundError: the URI's bucket does not exist.
    """
    handler = open_handler(uri, storage_options)
    handler.validate()
    store = handler.store
    report = DropReport(uri)
    external, base_uri = handler.manifest_store() or (None, "")
    confirming = False
    for _ in range(DROP_PASSES):
        listed = store.list("")
        sizes = {m.path: m.size for m in listed}

        def count(batch: list[str], sizes: dict[str, int] = sizes) -> None:
            report.objects += len(batch)
            report.bytes += sum(sizes[path] for path in batch)
            progress("deleting objects", report.objects, len(sizes))

        store.delete_many(list(sizes), deleted=count)
        rows = 0
        if external is not None:
            newest = external.get_latest(base_uri)
            if newest is not None:
                external.delete_versions(base_uri, [newest.version])
                rows = 1 + external.delete_dataset(base_uri)
            report.rows += rows
        if listed or rows:
            confirming = False
            continue
        if report.objects == report.rows == 0:
            if not missing_ok:
                raise dataset_not_found(uri)
            break
        if confirming or not store.is_remote:
            break
        progress("waiting for writes in flight", 0, None)
        time.sleep(DROP_SETTLE_SECONDS)
        confirming = True
    return report
