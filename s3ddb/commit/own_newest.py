"""The newest version this process committed to each dataset, while it keeps winning.

A writer that is alone builds on the version it committed last without asking the
store for the newest (a DynamoDB ``Query``, or a listing of ``_versions/`` and a read of
the manifest): the claim of the next version still decides, so a wrong guess is an
ordinary lost version. Losing one shows other writers, and the writer asks again for
:attr:`OwnNewest.QUIET_SECONDS`. Each commit mechanism keeps its own record (the
external store's rows, the conditional put's manifests).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["OwnNewest"]

T = TypeVar("T")


class OwnNewest(Generic[T]):
    """Per dataset (a URI or URL), what this process knows of the newest version it
    committed there. At most ``max_datasets`` are kept, the least recently committed
    going first (None: no bound). Safe to share between threads."""

    QUIET_SECONDS = 10.0

    def __init__(self, max_datasets: int | None = None) -> None:
        self.max_datasets = max_datasets
        self._latest: OrderedDict[str, tuple[int, T]] = OrderedDict()
        self._quiet_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def won(self, dataset: str, version: int, known: T) -> None:
        """This process committed ``version`` of ``dataset`` (``known``: what a writer
        needs to build on it); kept unless a newer one is."""
        with self._lock:
            kept = self._latest.get(dataset)
            if kept is None or kept[0] < version:
                self._latest[dataset] = (version, known)
                self._latest.move_to_end(dataset)
                while self.max_datasets is not None and len(self._latest) > self.max_datasets:
                    self._latest.popitem(last=False)

    def lost(self, dataset: str) -> None:
        """Another writer committed to ``dataset`` (or what this process committed may
        be gone): forget it, and presume nothing there for a while."""
        with self._lock:
            self._latest.pop(dataset, None)
            self._quiet_until[dataset] = time.monotonic() + self.QUIET_SECONDS

    def presumed(self, dataset: str) -> T | None:
        """What is known of the newest version this process committed to ``dataset``,
        unless it lost a version there lately."""
        with self._lock:
            if time.monotonic() < self._quiet_until.get(dataset, 0.0):
                return None
            kept = self._latest.get(dataset)
        return kept[1] if kept is not None else None
