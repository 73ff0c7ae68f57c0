"""Fragment-list chunks: the fragments of a large manifest, in immutable files.

A manifest of format 2 is a small *root*: the schema, config, identity and counts,
the list of its chunks (:class:`ChunkRef`: name, size, CRC-32, fragment and row
counts, the range of fragment ids and bounds of columns) and an inline *tail* of
recent fragments. Each chunk file (``_fragments/<32 hex digits>.chunk``) holds a run of
fragments; it is written once, before the version that first lists it is claimed, and
every later version that keeps that run lists the same file. So a commit writes only
the chunks of the fragments it changed, and a reader fetches only the chunks it needs.

A chunk is untrusted input like a manifest: before it is parsed its size and CRC-32
must be those its reference gives, its framing (magic ``S3DDBFC1``, length, CRC) is
checked, and its fragments must match the reference's counts and id range. A chunk
is fetched once per process (a bounded cache keyed by its name and checksum: chunks
never change) and decoded only when used (:class:`StoredChunk`).
"""

from __future__ import annotations

import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, NoReturn

from s3ddb.errors import ManifestCorruptError, StoredMetadataError
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.fragment_list import EncodedFragments
from s3ddb.format.framing import unframe_view
from s3ddb.format.limits import MAX_FRAGMENT_ID, MAX_PHYSICAL_ROWS, check_range
from s3ddb.format.stats import ColumnStatistics
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import process_pool
from s3ddb.io.per_process import PerProcess

__all__ = [
    "CHUNKS_DIR",
    "CHUNK_MAGIC",
    "MAX_CHUNKS",
    "MAX_CHUNK_BYTES",
    "MAX_CHUNK_FRAGMENTS",
    "ChunkRef",
    "ChunkSource",
    "StoredChunk",
    "chunk_path",
    "clear_chunk_cache",
    "is_chunk_name",
    "missing_chunk",
]

CHUNKS_DIR = "_fragments"
CHUNK_MAGIC = b"S3DDBFC1"
#: Bounds on what a root may declare, checked before anything is fetched: a chunk
#: larger than this is refused unread.
MAX_CHUNK_BYTES = 256 * 1024 * 1024
MAX_CHUNK_FRAGMENTS = 1 << 20
MAX_CHUNKS = 1 << 16
_NAME_RE = re.compile(r"[0-9a-f]{32}\.chunk")
#: Bytes of chunk payloads a process keeps (least recently used dropped first).
_CACHE_BYTES = 512 * 1024 * 1024


def chunk_path(name: str) -> str:
    """Path of the chunk file ``name`` (relative to the dataset root)."""
    return f"{CHUNKS_DIR}/{name}"


def is_chunk_name(name: str) -> bool:
    """Whether ``name`` has the form of a chunk file's name."""
    return bool(_NAME_RE.fullmatch(name))


@dataclass(frozen=True)
class ChunkRef:
    """What a root says about one chunk (see ``FragmentChunk`` in manifest.proto)."""

    name: str
    size: int
    crc32: int
    fragment_count: int
    visible_rows: int
    physical_rows: int
    min_fragment_id: int
    max_fragment_id: int
    bounds: tuple[ColumnStatistics, ...] = ()
    #: The message this reference was read from (written again as it was).
    message: Any = field(default=None, compare=False, repr=False)

    @property
    def path(self) -> str:
        return chunk_path(self.name)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "message": None}  # protobuf messages do not pickle

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def may_hold(self, ids: Collection[int]) -> bool:
        """Whether a fragment of one of ``ids`` may be in the chunk (by its id range)."""
        low, high = self.min_fragment_id, self.max_fragment_id
        return any(low <= i <= high for i in ids)

    def to_pb(self) -> pb.FragmentChunk:
        if self.message is not None:
            return self.message  # type: ignore[no-any-return]
        return pb.FragmentChunk(
            name=self.name,
            size=self.size,
            crc32=self.crc32,
            fragment_count=self.fragment_count,
            visible_rows=self.visible_rows,
            physical_rows=self.physical_rows,
            min_fragment_id=self.min_fragment_id,
            max_fragment_id=self.max_fragment_id,
            bounds=[b.to_pb() for b in self.bounds],
        )

    @classmethod
    def from_pb(cls, m: pb.FragmentChunk, where: str) -> ChunkRef:
        """A reference read from a root, checked.

        Raises:
            StoredMetadataError: a malformed name, a number out of range, an empty
                chunk or an id range that cannot hold its fragments.
        """
        name, size, count = m.name, m.size, m.fragment_count
        low, high, physical, visible = (
            m.min_fragment_id, m.max_fragment_id, m.physical_rows, m.visible_rows
        )  # fmt: skip
        # One test for the usual case; the checks below name what is wrong.
        if not (
            _NAME_RE.fullmatch(name)
            and 1 <= size <= MAX_CHUNK_BYTES
            and 1 <= count <= MAX_CHUNK_FRAGMENTS
            and 0 <= low <= high <= MAX_FRAGMENT_ID
            and high - low + 1 >= count
            and visible <= physical <= count * MAX_PHYSICAL_ROWS
        ):
            _refuse(m, where)
        return cls(
            name=m.name,
            size=m.size,
            crc32=m.crc32,
            fragment_count=m.fragment_count,
            visible_rows=m.visible_rows,
            physical_rows=m.physical_rows,
            min_fragment_id=m.min_fragment_id,
            max_fragment_id=m.max_fragment_id,
            bounds=tuple(ColumnStatistics.from_pb(b) for b in m.bounds),
            message=m,
        )


def _refuse(m: pb.FragmentChunk, where: str) -> NoReturn:
    """Raise the error naming what is wrong with the reference ``m``.

    Raises:
        StoredMetadataError: always (a malformed name, a number out of range, an
            empty chunk or an id range that cannot hold its fragments).
    """
    named = f"{where}: chunk {m.name[:80]!r}"
    if not is_chunk_name(m.name):
        raise StoredMetadataError(f"{named}: not a chunk file name (32 hex digits, .chunk)")
    check_range(m.size, 1, MAX_CHUNK_BYTES, "size", named)
    check_range(m.fragment_count, 1, MAX_CHUNK_FRAGMENTS, "fragment_count", named)
    check_range(m.min_fragment_id, 0, MAX_FRAGMENT_ID, "min_fragment_id", named)
    check_range(m.max_fragment_id, m.min_fragment_id, MAX_FRAGMENT_ID, "max_fragment_id", named)
    most = m.fragment_count * MAX_PHYSICAL_ROWS
    check_range(m.physical_rows, 0, most, "physical_rows", named)
    check_range(m.visible_rows, 0, m.physical_rows, "visible_rows", named)
    raise StoredMetadataError(
        f"{named}: {m.fragment_count} fragments cannot have ids in "
        f"{m.min_fragment_id}..{m.max_fragment_id}"
    )


class _PayloadCache:
    """Chunk payloads by (store, name, CRC), least recently used dropped first."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._size = 0
        self._items: OrderedDict[tuple[str, str, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, int]) -> bytes | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0

    def put(self, key: tuple[str, str, int], data: bytes) -> None:
        with self._lock:
            if key in self._items or len(data) > self._capacity:
                return
            self._items[key] = data
            self._size += len(data)
            while self._size > self._capacity:
                _, dropped = self._items.popitem(last=False)
                self._size -= len(dropped)


# Per process: a child made by fork starts with an empty cache (and a fresh lock).
_CACHES: PerProcess[None, _PayloadCache] = PerProcess("chunk payloads")


def _cache() -> _PayloadCache:
    return _CACHES.get(None, lambda: _PayloadCache(_CACHE_BYTES))


def clear_chunk_cache() -> None:
    """Forget the chunk payloads this process fetched (they are checked again when
    next fetched: after a chunk file was restored from a backup, say)."""
    _cache().clear()


class ChunkSource:
    """Where a manifest's chunks are read from: the dataset's object store. Counts
    the chunks it fetched (``fetched``), for tests and benchmarks of what a reader
    needed."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.fetched = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"])  # type: ignore[misc]

    def describe(self, ref: ChunkRef) -> str:
        return f"{self.store.url.rstrip('/')}/{ref.path}"

    def read(self, ref: ChunkRef) -> bytes:
        """The payload of ``ref``'s chunk (a ``Manifest`` message of fragments only).

        Raises:
            ManifestCorruptError: the chunk is missing, or its size, checksum or
                framing is not what ``ref`` and the format say.
        """
        key = (self.store.url, ref.name, ref.crc32)
        cached = _cache().get(key)
        if cached is not None:
            return cached
        where = f"chunk {self.describe(ref)}"
        try:
            data = self.store.get(ref.path)
        except FileNotFoundError:
            raise ManifestCorruptError(
                f"{where} is missing (the manifest lists it: was it deleted by hand?)"
            ) from None
        self.fetched += 1
        if len(data) != ref.size:
            raise ManifestCorruptError(f"{where}: {len(data)} bytes, its manifest says {ref.size}")
        if zlib.crc32(data) != ref.crc32:
            raise ManifestCorruptError(f"{where}: checksum differs from its manifest's")
        payload = bytes(unframe_view(data, CHUNK_MAGIC, where))
        _cache().put(key, payload)
        return payload


class StoredChunk(EncodedFragments):
    """The fragments of one chunk file, fetched when first used. Counts, visible rows
    and the id range come from the reference and are checked against the fragments
    when they are parsed."""

    __slots__ = ("ref", "source")

    def __init__(
        self,
        ref: ChunkRef,
        source: ChunkSource,
        *,
        bases: frozenset[int],
        version: int,
        max_id: int | None,
    ) -> None:
        super().__init__(
            b"", count=ref.fragment_count, visible_rows=ref.visible_rows, bases=bases,
            where=f"chunk {ref.name}", version=version, max_id=max_id,
        )  # fmt: skip
        self._data = None
        self.ref = ref
        self.source = source

    def stored_ref(self) -> ChunkRef:
        return self.ref

    def max_listed_id(self) -> int:
        return self.ref.max_fragment_id

    def prime(self, payload: bytes) -> None:
        """Use ``payload``, the chunk's payload as its writer wrote it, instead of
        fetching it (and let other readers of this process use it too)."""
        self._data = payload
        _cache().put((self.source.store.url, self.ref.name, self.ref.crc32), payload)

    @property
    def loaded(self) -> bool:
        return self._data is not None or self._message is not None

    def fetch_remotely(self) -> bool:
        return not self.loaded and not self.source.store.is_local

    def data(self) -> bytes | memoryview:
        if self._data is None and self._message is None:
            self._data = self.source.read(self.ref)
        return super().data()

    def _checked(self, message: pb.Manifest) -> pb.Manifest:
        checked = super()._checked(message)
        ids = self._ids or []
        low, high = self.ref.min_fragment_id, self.ref.max_fragment_id
        if ids and (min(ids) < low or max(ids) > high):
            raise StoredMetadataError(
                f"{self._name()}: fragment ids {min(ids)}..{max(ids)} are outside the "
                f"range {low}..{high} its manifest gives"
            )
        physical = sum(f.physical_rows for f in checked.fragments)
        if physical != self.ref.physical_rows:
            raise ManifestCorruptError(
                f"{self._name()}: holds {physical} physical rows, its manifest says "
                f"{self.ref.physical_rows}"
            )
        return checked

    def __getstate__(self) -> dict[str, Any]:
        return {"ref": self.ref, "source": self.source, "bases": self.bases,
                "version": self.version, "max_id": self.max_id}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["ref"], state["source"], bases=state["bases"], version=state["version"],
            max_id=state["max_id"],
        )  # fmt: skip


def missing_chunk(store: ObjectStore, manifest: Any) -> str | None:
    """What is wrong with the chunk files ``manifest`` lists (missing, or not the
    size it records), None if each is there: checked side by side, one HEAD each,
    before a manifest someone else staged is finished.
    """

    def problem(ref: ChunkRef) -> str | None:
        try:
            size = store.head(ref.path).size
        except FileNotFoundError:
            return f"its chunk {ref.path} is missing"
        if size != ref.size:
            return f"its chunk {ref.path} has {size} bytes, it records {ref.size}"
        return None

    refs = manifest.fragments.chunk_refs()
    if len(refs) > 1 and not store.is_local:
        found = list(process_pool("chunks").map(problem, refs))
    else:
        found = [problem(r) for r in refs]
    return next((p for p in found if p is not None), None)
