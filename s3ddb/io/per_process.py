"""The registry of objects that belong to one process: thread pools, boto3 sessions and
clients, DynamoDB stores, the background finalizer.

A child made by ``fork`` inherits its parent's memory but none of its threads, and
neither thread pools nor HTTP clients survive that: a pool's workers are gone and a
client's connections are shared with the parent. So every such object lives here, and
the child starts with an empty registry (and fresh locks, in case a parent thread held
one at the fork). The parent's objects are dropped unused in the child, never shut
down from there.

Each cache is a :class:`PerProcess` view with its own name; all of them share the one
table below, which ``fork`` empties.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, cast

__all__ = ["PerProcess"]

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")

# (cache name, key) -> object. Locks: _lock guards the table (held briefly);
# _creating[name] serialises the creations of one cache (which may take a while, and
# may use other caches).
_table: dict[tuple[str, Hashable], object] = {}
_lock = threading.Lock()
_creating: dict[str, threading.RLock] = {}


def _after_fork_in_child() -> None:
    global _lock, _table, _creating
    _lock = threading.Lock()
    _table = {}
    _creating = {}


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


class PerProcess(Generic[_K, _V]):
    """One cache of per-process objects, keyed by ``_K``, in the shared registry.

    ``name`` must be unique among caches (it names the cache in the table).
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def get(self, key: _K, create: Callable[[], _V]) -> _V:
        """The object for ``key`` in this process, made by ``create`` on first use.

        One creation at a time per cache (a boto3 Session, for one, is not
        thread-safe); ``create`` may use other caches. If ``create`` raises, nothing
        is stored and the exception propagates.
        """
        entry = (self.name, key)
        with _lock:
            if entry in _table:
                return cast(_V, _table[entry])
            creating = _creating.setdefault(self.name, threading.RLock())
        with creating:
            with _lock:
                if entry in _table:
                    return cast(_V, _table[entry])
            created = create()
            with _lock:
                return cast(_V, _table.setdefault(entry, created))

    def peek(self, key: _K) -> _V | None:
        """The object for ``key`` if this process has made it, else None."""
        with _lock:
            return cast("_V | None", _table.get((self.name, key)))

    def put(self, key: _K, value: _V) -> None:
        """Record ``value`` for ``key`` (replacing any)."""
        with _lock:
            _table[(self.name, key)] = value

    def forget(self, key: _K) -> None:
        """Forget the object for ``key`` in this process, if any (it is not closed)."""
        with _lock:
            _table.pop((self.name, key), None)

    def clear(self) -> None:
        """Forget every object of this cache in this process (they are not closed)."""
        with _lock:
            for entry in [e for e in _table if e[0] == self.name]:
                del _table[entry]
