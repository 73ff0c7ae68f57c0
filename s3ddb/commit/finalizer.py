"""Finishing this process's own commits off the caller's path (steps 3-4).

Once the conditional write of step 2 succeeded, a commit is decided: copying the
staged manifest to its final name, repointing the row and deleting the staged object
change nothing a reader of the external store can observe. A writer therefore hands
them to one background thread per process and returns.

What keeps this safe (see docs/protocol.md):

* Before any writer claims version N it makes sure version N-1's final manifest
  exists (for its own N-1 it waits for :meth:`FinalizeTicket.wait_copied`), so a
  reader that lists ``_versions/`` is still at most one version behind.
* A reader of the external store that finds a staged row this process is finishing
  waits for the ticket instead of racing it; any other reader finishes the row itself,
  as it would after a crash. Every step is idempotent.
* The queue is bounded; it is drained at interpreter exit (and in multiprocessing
  children). A process killed first leaves staged rows, which the next reader or
  writer finishes: the same state as a crash after step 2.

Staged objects of finalized versions, and those of versions a writer lost, are deleted
in batches (one DeleteObjects for up to 1,000 keys) once the thread has been idle for
:attr:`BackgroundFinalizer.idle_flush` seconds, when many are pending, and at exit.
Nothing reads them once their row is final or lost.

Set ``S3DDB_BACKGROUND_FINALIZE=0`` to finish every commit in the caller's path.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from s3ddb.io.object_store import ObjectStore
from s3ddb.io.per_process import PerProcess

__all__ = [
    "ENV_VAR",
    "BackgroundFinalizer",
    "FinalizeTicket",
    "NothingToFinish",
    "TicketKey",
    "drain",
    "enabled",
    "process_finalizer",
]

log = logging.getLogger(__name__)

ENV_VAR = "S3DDB_BACKGROUND_FINALIZE"

TicketKey = tuple[str, int]  # (base_uri, version)


class NothingToFinish(Exception):
    """Raised by a ticket's work that finds its version has nothing left for anyone to
    finish (say, the version went with a dropped dataset): logged with its message
    alone, where any other failure is logged as left to the next reader or writer."""


class FinalizeTicket:
    """One committed version being finished in the background.

    Attributes:
        key: (base_uri, version).
        staged_path: the staged manifest path the row was committed with.
        result: the final row's path once done (None until then, or on failure).
        error: what made the background work fail, if it did.
    """

    def __init__(self, key: TicketKey, staged_path: str, work: Callable[[FinalizeTicket], str]):
        self.key = key
        self.staged_path = staged_path
        self.result: str | None = None
        self.error: BaseException | None = None
        self._work = work
        self._copied = threading.Event()
        self._settled = threading.Event()  # copied, or given up
        self._done = threading.Event()

    def mark_copied(self) -> None:
        """Called by the work once the final manifest exists."""
        self._copied.set()
        self._settled.set()

    def run(self) -> None:
        try:
            self.result = self._work(self)
            self.mark_copied()
        except NothingToFinish as exc:
            self.error = exc
            log.warning(
                "version %d of %s is not finished in the background: %s",
                self.key[1],
                self.key[0],
                exc,
            )
        except BaseException as exc:
            self.error = exc
            log.warning(
                "finishing version %d of %s in the background failed (%s: %s); the next "
                "reader or writer will finish it",
                self.key[1],
                self.key[0],
                type(exc).__name__,
                exc,
            )
        finally:
            self._done.set()
            self._settled.set()

    def wait_copied(self, timeout: float | None = None) -> bool:
        """Wait until the final manifest exists. False if the work failed first (or
        the timeout passed): the caller must then make sure of it itself."""
        self._settled.wait(timeout)
        return self._copied.is_set()

    def wait_done(self, timeout: float | None = None) -> bool:
        """Wait until the work finished. True if the row is final."""
        return self._done.wait(timeout) and self.error is None


class BackgroundFinalizer:
    """One thread that finishes this process's commits, in submission order.

    Args:
        max_pending: submissions beyond this many unfinished ones block the
            submitter until the thread catches up (back pressure).
        idle_flush: seconds without new work after which deferred deletes are sent.
        flush_at: deferred deletes that trigger a batch at once.
    """

    def __init__(self, max_pending: int = 64, idle_flush: float = 1.0, flush_at: int = 256):
        self.idle_flush = idle_flush
        self.flush_at = flush_at
        self._queue: queue.Queue[FinalizeTicket] = queue.Queue(maxsize=max_pending)
        self._lock = threading.Lock()
        self._tickets: OrderedDict[TicketKey, FinalizeTicket] = OrderedDict()
        self._deletes: dict[Any, tuple[ObjectStore, list[str]]] = {}
        self._busy = 0
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    # --- submitting -------------------------------------------------------------------

    def submit(
        self, key: TicketKey, staged_path: str, work: Callable[[FinalizeTicket], str]
    ) -> FinalizeTicket:
        """Queue ``work`` (which returns the final path) for version ``key``."""
        ticket = FinalizeTicket(key, staged_path, work)
        with self._lock:
            self._tickets[key] = ticket
            self._tickets.move_to_end(key)
            while len(self._tickets) > 1024:
                self._tickets.popitem(last=False)
            self._busy += 1
            self._start()
        self._queue.put(ticket)
        return ticket

    def ticket(self, key: TicketKey, staged_path: str) -> FinalizeTicket | None:
        """This process's ticket for the version committed with ``staged_path``."""
        with self._lock:
            found = self._tickets.get(key)
        return found if found is not None and found.staged_path == staged_path else None

    def defer_delete(self, store: ObjectStore, path: str) -> None:
        """Delete ``path`` with the next batch."""
        with self._lock:
            group = self._deletes.setdefault(_store_key(store), (store, []))
            group[1].append(path)
            self._start()
            urgent = len(group[1]) >= self.flush_at
        if not urgent:
            return
        if threading.current_thread() is self._thread:
            self._flush()  # never block on our own queue
            return
        try:
            self._queue.put_nowait(_FLUSH)
        except queue.Full:
            pass  # the thread is busy; it flushes when it next idles

    # --- waiting ------------------------------------------------------------------------

    def drain(self, timeout: float | None = 60.0, *, flush: bool = True) -> bool:
        """Finish every queued version and (``flush``) send pending deletes. True if
        all done."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        if flush:
            self._flush()
        return True

    # --- the thread ---------------------------------------------------------------------

    def _start(self) -> None:
        # Called with the lock held.
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="s3ddb-finalizer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                ticket = self._queue.get(timeout=self.idle_flush)
            except queue.Empty:
                self._flush()
                continue
            if ticket is _FLUSH:
                self._flush()
                continue
            ticket.run()
            with self._lock:
                self._busy -= 1
                if not self._busy:
                    self._idle.notify_all()

    def _flush(self) -> None:
        with self._lock:
            groups, self._deletes = list(self._deletes.values()), {}
        for store, paths in groups:
            try:
                store.delete_many(paths)
            except Exception as exc:  # leftovers are never read; cleanup removes them
                log.warning("could not delete %d staged manifests: %s", len(paths), exc)


def _store_key(store: ObjectStore) -> Any:
    return (store.url, store.aws)


_FLUSH: Any = FinalizeTicket(("", 0), "", lambda _t: "")  # a marker, never run

# This process's finalizer, under the one key None.
_FINALIZERS: PerProcess[None, BackgroundFinalizer] = PerProcess("background finalizer")


def enabled() -> bool:
    """Whether commits are finished in the background (``S3DDB_BACKGROUND_FINALIZE``)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def process_finalizer() -> BackgroundFinalizer:
    """This process's finalizer (a new one after ``fork``), drained at exit."""
    return _FINALIZERS.get(None, _start_finalizer)


def _start_finalizer() -> BackgroundFinalizer:
    started = BackgroundFinalizer()
    _register_exit_drain()
    return started


def drain(timeout: float | None = 60.0, *, flush: bool = True) -> bool:
    """Finish this process's background work now (tests, benchmarks, and before handing
    a dataset to a tool that lists ``_versions/``); ``flush=False`` leaves deletes of
    staged manifests batched. True if everything finished."""
    current = _FINALIZERS.peek(None)
    return current.drain(timeout, flush=flush) if current is not None else True


def _register_exit_drain() -> None:
    # Before threads are joined at exit: by atexit time every thread pool (which
    # botocore and s3fs need) refuses new work.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(drain)
    else:  # pragma: no cover - CPython has had it since 3.9
        atexit.register(drain)
    try:
        # multiprocessing children leave through os._exit, which skips atexit.
        from multiprocessing import util

        util.Finalize(None, drain, exitpriority=10)
    except Exception:  # pragma: no cover - multiprocessing is always there in CPython
        pass
