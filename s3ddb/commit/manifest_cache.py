"""A per-process cache of committed manifests.

A writer that appends again to a dataset it committed last already holds the newest
manifest: reading it back would cost a GET on every commit. Entries are keyed by the
identity of the committed version — dataset, version, final manifest path, size,
commit time and digest as the external store recorded them — so a dataset that was dropped and
recreated under the same URI never hits an older entry. Only decided versions are
cached (ones this process won, or read through a committed row), and manifests are
immutable, so an entry is never stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from s3ddb.format.manifest import Manifest

__all__ = ["MANIFESTS", "CacheKey", "ManifestCache"]

# base_uri, version, final path, size, committed_at, SHA-256 digest ("": not recorded)
CacheKey = tuple[str, int, str, int, int, str]


class ManifestCache:
    """An LRU of manifests bounded by count and by their serialized size (a parsed
    manifest takes several times that in memory), safe to share between threads."""

    def __init__(self, max_entries: int = 32, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[CacheKey, Manifest] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: CacheKey) -> Manifest | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: CacheKey, manifest: Manifest) -> None:
        size = key[3]
        if size > self.max_bytes:
            return
        with self._lock:
            if key not in self._entries:
                self._bytes += size
            self._entries[key] = manifest
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                old, _ = self._entries.popitem(last=False)
                self._bytes -= old[3]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


#: The process's cache (children of ``fork`` inherit valid entries).
MANIFESTS = ManifestCache()
