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
    committed there. Safe to share between threads.

    Bounded, so that a long-lived process writing to ever new datasets does not grow:
    at most ``max_datasets`` commits are kept (the least recently committed going
    first), and as many datasets quiet after a lost version (the soonest to end going
    first). Forgetting one only costs its next commit the store's answer.
    """

    QUIET_SECONDS = 10.0

    def __init__(self, max_datasets: int = 1024) -> None:
        if max_datasets < 1:
            raise ValueError("max_datasets must be at least 1")
        self.max_datasets = max_datasets
        self._latest: OrderedDict[str, tuple[int, T]] = OrderedDict()
        # In the order the quiet periods end (each lasts QUIET_SECONDS).
        self._quiet_until: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many datasets are remembered (committed or quiet)."""
        with self._lock:
            return len(self._latest.keys() | self._quiet_until.keys())

    def won(self, dataset: str, version: int, known: T) -> None:
        """This process committed ``version`` of ``dataset`` (``known``: what a writer
        needs to build on it); kept unless a newer one is."""
        with self._lock:
            kept = self._latest.get(dataset)
            if kept is None or kept[0] < version:
                self._latest[dataset] = (version, known)
                self._latest.move_to_end(dataset)
                while len(self._latest) > self.max_datasets:
                    self._latest.popitem(last=False)

    def lost(self, dataset: str) -> None:
        """Another writer committed to ``dataset`` (or what this process committed may
        be gone): forget it, and presume nothing there for a while."""
        now = time.monotonic()
        with self._lock:
            self._latest.pop(dataset, None)
            self._quiet_until.pop(dataset, None)
            self._quiet_until[dataset] = now + self.QUIET_SECONDS
            while self._quiet_until:
                first, until = next(iter(self._quiet_until.items()))
                if until > now and len(self._quiet_until) <= self.max_datasets:
                    break
                del self._quiet_until[first]

    def presumed(self, dataset: str) -> T | None:
        """What is known of the newest version this process committed to ``dataset``,
        unless it lost a version there lately."""
        with self._lock:
            if time.monotonic() < self._quiet_until.get(dataset, 0.0):
                return None
            kept = self._latest.get(dataset)
        return kept[1] if kept is not None else None
