"""Transactions over the in-process memory object store (``memory://``).

Every conditional put of a memory store takes one process-wide lock, so holding it
makes several puts, or several reads, one instant: what a group commit of
``memory://`` datasets (``s3ddb.atomic``) and a snapshot of them need. There is no
such thing for local paths or S3, which is why groups take only ``memory://`` or
``s3+ddb://`` datasets.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from s3ddb.io.object_store import MemoryObjectStore, ObjectStore, _memory_lock

__all__ = ["memory_instant", "put_all_if_absent"]


def put_all_if_absent(items: Sequence[tuple[ObjectStore, str, bytes]]) -> list[bool]:
    """Put every ``(store, path, data)`` unless some path exists: all or none.

    Returns:
        Per item, whether its path exists; every entry False means all were put.

    Raises:
        TypeError: a store is not a memory store.
    """
    for store, _, _ in items:
        if not isinstance(store, MemoryObjectStore):
            raise TypeError(f"{store.url} is not a memory store")
    with _memory_lock:
        taken = [store.fs.exists(store.full_path(path)) for store, path, _ in items]
        if any(taken):
            return taken
        for store, path, data in items:
            store.fs.pipe_file(store.full_path(path), data)
    return taken


@contextmanager
def memory_instant() -> Iterator[None]:
    """Hold back every conditional put of memory stores (reads inside see one instant).
    Not reentrant: never put conditionally inside."""
    with _memory_lock:
        yield
