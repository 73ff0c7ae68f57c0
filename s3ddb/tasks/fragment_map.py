"""Where per-fragment work runs: a local thread pool, or a mapper set for a block.

Planners (deletes, updates, upserts, compaction, index builds) hand their
per-fragment work to :func:`parallel_map`. By default it runs on a local thread
pool; inside ``with mapped_by(mapper):`` it runs through ``mapper`` instead (the
Spark extension sends it to executors). The mapper lives in a context variable, so
it reaches every plan made in the block, on this thread and its context copies only.

Work that writes files goes through :func:`map_writing`, which brings every written
path back to the planner's :class:`~s3ddb.io.written_files.FileTracker`, also from
the tasks that succeeded beside one that failed.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from s3ddb.io.written_files import FileTracker

__all__ = ["FragmentMapper", "distributed", "map_writing", "mapped_by", "parallel_map"]

T = TypeVar("T")

#: Local threads at most: object stores reward parallel reads, the CPU does not.
_MAX_LOCAL_WORKERS = 8


class FragmentMapper(Protocol):
    """Runs planning work item by item (fragments, or groups of them), elsewhere.

    ``fn`` and the items must pickle (they capture the object store, schema,
    predicates, bitmaps: all do). Results come back in the items' order.
    """

    def __call__(self, fn: Callable[[Any], T], items: list[Any]) -> list[T]: ...


_MAPPER: ContextVar[FragmentMapper | None] = ContextVar("s3ddb_fragment_mapper", default=None)


@contextmanager
def mapped_by(mapper: FragmentMapper) -> Iterator[None]:
    """Within this block, plans in this context run their per-fragment work through
    ``mapper`` (e.g. on Spark executors) instead of a local thread pool."""
    token = _MAPPER.set(mapper)
    try:
        yield
    finally:
        _MAPPER.reset(token)


def distributed() -> bool:
    """Whether per-fragment work runs through a :class:`FragmentMapper` (so results
    should be written where they are computed rather than sent back)."""
    return _MAPPER.get() is not None


def parallel_map(fn: Callable[[Any], T], items: list[Any]) -> list[T]:
    """``fn`` over items (fragments, groups), in parallel (object stores reward it),
    results in order; through the context's :class:`FragmentMapper` if one is set.

    Raises:
        Whatever ``fn`` (or the mapper) raises, for the first item that fails.
    """
    mapper = _MAPPER.get()
    if mapper is not None and items:
        return mapper(fn, items)
    if len(items) <= 1:
        return [fn(f) for f in items]
    with ThreadPoolExecutor(max_workers=min(_MAX_LOCAL_WORKERS, len(items))) as pool:
        return list(pool.map(fn, items))


@dataclass(frozen=True)
class _Done(Generic[T]):
    """A task's result, and the paths of the files it wrote."""

    value: T
    written: tuple[str, ...]


@dataclass(frozen=True)
class _Failed:
    """A task's error, and the paths of the files it wrote before it."""

    error: Exception
    written: tuple[str, ...]
    #: The task's traceback, where it ran in another process (its frames do not pickle).
    remote_traceback: str = ""


class _RemoteTraceback(Exception):
    """The traceback of a task that failed in another process, as text."""


def _portable(exc: Exception) -> Exception:
    """``exc``, or a RuntimeError naming it where it would not survive the trip back
    (a result that does not pickle fails the whole Spark job, losing the paths the
    other tasks report)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    return exc


def map_writing(fn: Callable[[Any, list[str]], T], items: list[Any], files: FileTracker) -> list[T]:
    """:func:`parallel_map` of ``fn(item, written)``, where ``fn`` appends to ``written``
    the path of each file it writes, as soon as it is written.

    When this returns or raises, every path any task appended is in ``files``: those
    of a task that failed, and those of the tasks that succeeded beside it (whose
    results a failing Spark job or thread pool would otherwise drop), so the caller's
    ``files.cleanup_on_error()`` deletes them all. A task's error therefore does not
    stop the others; every task runs.

    Raises:
        The exception of the first item that failed (in the items' order), once every
        task has run. From a task that ran in another process, it arrives pickled, with
        the task's traceback (text) as its cause; one that does not pickle arrives as a
        RuntimeError naming it. Whatever the mapper itself raises (a lost executor):
        then the paths the finished tasks wrote are lost with their results, and
        ``cleanup_old_versions`` removes those files.
    """
    remote = distributed()

    def task(item: Any) -> _Done[T] | _Failed:
        written: list[str] = []
        try:
            return _Done(fn(item, written), tuple(written))
        except Exception as exc:  # reported with ``written`` below, never lost
            if not remote:
                return _Failed(exc, tuple(written))
            return _Failed(_portable(exc), tuple(written), traceback.format_exc())

    outcomes = parallel_map(task, items)
    for outcome in outcomes:
        files.add(*outcome.written)
    results = []
    for outcome in outcomes:
        if isinstance(outcome, _Failed):
            if outcome.remote_traceback:
                raise outcome.error from _RemoteTraceback(outcome.remote_traceback)
            raise outcome.error
        results.append(outcome.value)
    return results
