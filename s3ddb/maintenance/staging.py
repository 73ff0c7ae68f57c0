"""Leftovers of native Spark writes: ``_spark_staging/<write id>/`` folders.

A native write (``s3ddb.spark_ext.write``) has Spark write into its own staging
folder, then moves the files into ``data/``, commits, and deletes the folder. A driver
that crashed or was killed before the end leaves the folder behind. No version ever
refers to anything in it, so it is harmless to readers; it only costs storage.

A folder is judged whole, by its newest file: a write in progress keeps adding files
(tasks finishing, then the driver moving them), so a folder whose newest file is older
than a grace period belongs to a write that is over. :func:`cleanup_old_versions
<s3ddb.maintenance.cleanup.cleanup_old_versions>` deletes such folders once their
newest file is 7 days old (or at any age with ``delete_unverified``: no write may be
running then), and :func:`verify <s3ddb.maintenance.verify.verify>` reports them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from s3ddb.format import layout
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.maintenance.problems import ReportProblem

__all__ = [
    "LEFTOVER_KIND",
    "StagingFolder",
    "check_staging",
    "remove_empty_folders",
    "staging_folders",
]

#: The kind of problem :func:`check_staging` reports.
LEFTOVER_KIND = "spark_staging_leftover"


@dataclass
class StagingFolder:
    """One write's staging folder (``_spark_staging/<write id>``) and its files."""

    path: str
    files: list[ObjectMeta] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(m.size for m in self.files)

    def idle_for(self, seconds: float, now: float) -> bool:
        """Whether no file in the folder is younger than ``seconds`` (a file without a
        modification time counts as old, as cleanup counts other files)."""
        return all(m.modified is None or now - m.modified >= seconds for m in self.files)


def _folder_of(path: str) -> str | None:
    """``_spark_staging/<write id>`` of a path under the staging directory."""
    parts = path.split("/", 2)
    if len(parts) < 2 or parts[0] != layout.SPARK_STAGING_DIR:
        return None
    return f"{parts[0]}/{parts[1]}"


def staging_folders(objects: Iterable[ObjectMeta]) -> dict[str, StagingFolder]:
    """The staging folders among ``objects`` (a listing of the dataset root), by path."""
    folders: dict[str, StagingFolder] = {}
    for meta in objects:
        folder = _folder_of(meta.path)
        if folder is not None:
            folders.setdefault(folder, StagingFolder(folder)).files.append(meta)
    return folders


def check_staging(
    objects: Iterable[ObjectMeta],
    problem: ReportProblem,
    grace_seconds: float,
    now: float,
) -> None:
    """Report (through ``problem``, as verify does) every staging folder whose newest
    file is older than ``grace_seconds``: a native write that did not finish."""
    for folder in staging_folders(objects).values():
        if folder.idle_for(grace_seconds, now):
            problem(
                LEFTOVER_KIND,
                folder.path + "/",
                f"{len(folder.files)} file(s), {folder.size} bytes, of a native Spark write "
                "(s3ddb.spark_ext.write) whose driver stopped before the end; no version "
                "refers to them",
                "harmless to readers; s3ddb cleanup deletes the folder once its newest file "
                "is 7 days old (at any age with --delete-unverified, when no write runs)",
            )


def remove_empty_folders(store: ObjectStore, deleted: Iterable[str]) -> None:
    """Remove the directories left, on a local file system, of the staging folders
    whose files (``deleted``, paths) were deleted; object stores have none.
    Directories still holding something stay (``rmdir`` refuses them). The shared
    ``_spark_staging/`` stays: a write starting now may be creating its folder in it."""
    if not store.is_local:
        return
    folders = {f for f in map(_folder_of, deleted) if f is not None}
    for folder in sorted(folders):
        for directory, _, _ in os.walk(store.full_path(folder), topdown=False):
            try:
                os.rmdir(directory)
            except OSError:
                pass
