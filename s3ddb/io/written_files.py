"""Files a change wrote before it committed, and deleting them when it fails.

A change (a delete, an update, a schema change, a Spark write, a commit) writes its
files first and commits after. When it fails before committing, no manifest
references those files: they are deleted here, best effort, so nothing half-written
is left behind. A failed deletion never hides the error that made the files garbage
(``cleanup_old_versions`` removes what is left).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites

__all__ = ["FileTracker", "delete_written_files"]


def delete_written_files(
    store: ObjectStore,
    paths: Iterable[str],
    *,
    on_failure: Callable[[str, Exception], None] | None = None,
) -> None:
    """Delete each of ``paths`` from ``store``, in order, best effort.

    A deletion that fails is passed to ``on_failure`` (path, error), typically to log
    it, and the others still run; without ``on_failure`` it is ignored. Never raises
    an ``Exception``: the caller's own error, or its success, is what matters.
    """
    for path in paths:
        try:
            store.delete(path)
        except Exception as exc:  # best effort: the caller's outcome matters more
            if on_failure is not None:
                on_failure(path, exc)


class FileTracker:
    """Remembers the files a plan wrote, to delete them if the plan fails.

    ``pending`` holds the plan's uploads still in flight (files whose writes were
    started beside the commit's own): they are waited for before anything is deleted.
    """

    def __init__(self, store: ObjectStore, pending: PendingWrites | None = None) -> None:
        self.store = store
        self.pending = pending
        self.paths: list[str] = []

    def add(self, *paths: str) -> None:
        self.paths.extend(paths)

    @contextmanager
    def cleanup_on_error(self) -> Iterator[FileTracker]:
        """A block whose failure (any exception, ``KeyboardInterrupt`` too) deletes
        every file added so far, once their uploads in flight finished, silently and
        best effort, then re-raises."""
        try:
            yield self
        except BaseException:
            # The plan's uploads in flight land first, then go with the files it
            # wrote itself (each once: the caller finds none left to delete).
            uploaded = self.pending.settle_and_take_paths() if self.pending is not None else []
            delete_written_files(self.store, list(dict.fromkeys([*self.paths, *uploaded])))
            raise
