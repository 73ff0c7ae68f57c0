"""Object writes sent side by side and awaited together.

A commit's data files, transaction file and staged manifest do not depend on each
other's responses, so on S3 they are uploaded in parallel: the caller waits for one
round trip instead of three. Local and in-memory stores gain nothing from threads and
write inline, in order.

The thread pool is per process (it is rebuilt after ``fork``), shared by every
dataset, and bounded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from s3ddb.io.object_store import ObjectStore
from s3ddb.io.per_process import PerProcess

__all__ = ["PendingWrites", "process_pool", "run_all_beside", "run_beside", "run_here"]

T = TypeVar("T")

_MAX_WORKERS = 16
_POOLS: PerProcess[str, ThreadPoolExecutor] = PerProcess("thread pools")


def process_pool(name: str, max_workers: int = _MAX_WORKERS) -> ThreadPoolExecutor:
    """The process's thread pool called ``name`` (threads named ``s3ddb-<name>``),
    created on first use and rebuilt after ``fork`` (a child inherits no threads).
    Separate pools keep one kind of work from waiting behind another: a read never
    queues behind uploads, a read-ahead task never behind the reads it started.

    The pools live in :mod:`s3ddb.io.per_process`."""
    return _POOLS.get(
        name,
        lambda: ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"s3ddb-{name}"),
    )


def _executor() -> ThreadPoolExecutor:
    return process_pool("io")


def run_beside(store: ObjectStore, fn: Callable[[], T]) -> Future[T]:
    """Start ``fn`` on the I/O pool when ``store`` is remote (S3); run it inline
    otherwise. The returned future holds its result or exception."""
    if store.is_remote:
        try:
            return _executor().submit(fn)
        except RuntimeError:  # the interpreter is shutting down: no new threads
            pass
    return run_here(fn)


def run_all_beside(store: ObjectStore, calls: Iterable[Callable[[], object]]) -> None:
    """Run every one of ``calls`` as :func:`run_beside` does, wait for all of them,
    then raise the first failure in the order given (none is left running).

    Raises:
        The first call's exception, in order.
    """
    futures = [run_beside(store, call) for call in calls]
    wait(futures)
    for future in futures:
        exc = future.exception()
        if exc is not None:
            raise exc


def run_here(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """Run ``fn(*args, **kwargs)`` in this thread; a future already holding its result
    or exception (for a caller that also hands such work to a pool)."""
    done: Future[T] = Future()
    try:
        done.set_result(fn(*args, **kwargs))
    except BaseException as exc:
        done.set_exception(exc)
    return done


class PendingWrites:
    """Object writes in flight, awaited together before a commit is decided.

    ``put`` starts a write and returns at once; ``wait`` returns once every write
    started so far has landed, or raises the first failure after all of them have
    finished (so that no write lands after a caller's cleanup). ``put`` may be called
    from a plan's worker threads; one committing thread waits.
    """

    def __init__(self) -> None:
        self._futures: list[Future[str | None]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def put(self, store: ObjectStore, path: str, data: bytes) -> Future[str | None]:
        """Start writing ``data`` to ``path``; the future's result is the object's
        ETag where the backend reports one (S3), else None."""
        future = run_beside(store, lambda: store.put_with_etag(path, data))
        with self._lock:
            self._futures.append(future)
            self.paths.append(path)
        return future

    def wait(self) -> None:
        """Block until every started write finished.

        Raises:
            The first write's exception (in start order), after all writes finished.
        """
        with self._lock:
            futures, self._futures = self._futures, []
        wait(futures)
        for future in futures:
            exc = future.exception()
            if exc is not None:
                raise exc

    def settle(self) -> None:
        """Block until every started write finished, whatever its outcome: before
        the files of a plan that failed are deleted, so that none lands after."""
        with self._lock:
            futures = list(self._futures)
        wait(futures)

    def settle_and_take_paths(self) -> list[str]:
        """:meth:`settle`, then the paths of every write started so far, forgotten
        here: whoever takes them deletes them, once (a failed plan's clean-up)."""
        self.settle()
        with self._lock:
            paths, self.paths = self.paths, []
        return paths
