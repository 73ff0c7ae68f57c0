"""Where per-fragment work runs: a local thread pool, or a mapper set for a block.

Planners (deletes, updates, upserts, compaction, index builds) hand their
per-fragment work to :func:`parallel_map`. By default it runs on a local thread
pool; inside ``with mapped_by(mapper):`` it runs through ``mapper`` instead (the
Spark extension sends it to executors). The mapper lives in a context variable, so
it reaches every plan made in the block, on this thread and its context copies only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

__all__ = ["FragmentMapper", "distributed", "mapped_by", "parallel_map"]

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
