"""Fragment-list chunks: the fragments of a large manifest, in immutable files.

A manifest of format 2 is a small *root*: the schema, config, identity and counts,
the list of its chunks (:class:`ChunkRef`: name, size, CRC-32, fragment and row
counts, the range of fragment ids and bounds of columns) and an inline *tail* of
recent fragments. Each chunk file (``_fragments/<32 hex digits>.chunk``) holds a run of
fragments; it is written once, before the version that first lists it is claimed, and
every later version that keeps that run lists the same file. So a commit writes only
the chunks of the fragments it changed, and a reader fetches only the chunks it needs.

A chunk is untrusted input like a manifest: it is read no further than the size its
reference gives (a longer file is refused unread), its CRC-32 must be the one its
reference gives, its framing (magic ``S3DDBFC1``, length, CRC) is checked, and its
fragments must match the reference's counts, ids and column bounds. A chunk is
fetched once per process (a bounded cache keyed by its name and checksum: chunks
never change) and decoded only when used (:class:`StoredChunk`).

**Fragment ids are unique across a manifest** however few chunks a read fetches.
Each reference claims its chunk's ids: every id of its range, or the runs of ids it
lists (``id_runs``, written when the range has gaps or a compaction put a newer
fragment among older ones). When a root is read, :class:`ChunkIds` refuses two
chunks claiming one id and inline fragments with an id a chunk claims (no chunk is
fetched); when a chunk is parsed, it must hold exactly the ids it claims. So a
fragment listed twice (a chunk copied under another name, an older version's chunk
listed beside the one that replaced it) is refused on every path, pruned or not.
References written before ``id_runs`` existed claim their whole range, which may
hold ids they do not: where such a claim meets another, only the chunks can tell,
and the root's reader fetches every chunk to check (:attr:`ChunkIds.ambiguous`).
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from s3ddb.errors import ManifestCorruptError, StoredMetadataError
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.fragment_list import EncodedFragments
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.framing import unframe_view
from s3ddb.format.limits import MAX_FRAGMENT_ID, MAX_PHYSICAL_ROWS, check_range
from s3ddb.format.stats import Bound, ColumnStatistics, trusted_columns
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import process_pool
from s3ddb.io.per_process import PerProcess

__all__ = [
    "CHUNKS_DIR",
    "CHUNK_MAGIC",
    "MAX_CHUNKS",
    "MAX_CHUNK_BYTES",
    "MAX_CHUNK_FRAGMENTS",
    "ChunkIds",
    "ChunkRef",
    "ChunkSource",
    "StoredChunk",
    "chunk_path",
    "clear_chunk_cache",
    "id_runs",
    "is_chunk_name",
    "missing_chunk",
]

CHUNKS_DIR = "_fragments"
CHUNK_MAGIC = b"S3DDBFC1"
#: Bounds on what a root may declare, checked before anything is fetched: a chunk
#: larger than this is refused unread.
MAX_CHUNK_BYTES = 256 * 1024 * 1024
#: Bytes of a chunk's SHA-256 digest.
SHA256_BYTES = 32
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
    #: The chunk's ids as sorted runs (first, last), when they are not every id of
    #: ``min_fragment_id..max_fragment_id``; empty: every id of that range.
    runs: tuple[tuple[int, int], ...] = ()
    #: SHA-256 of the chunk file's bytes (32 bytes; empty: not recorded).
    sha256: bytes = b""
    #: The message this reference was read from (written again as it was).
    message: Any = field(default=None, compare=False, repr=False)

    @property
    def path(self) -> str:
        return chunk_path(self.name)

    @property
    def claimed(self) -> tuple[tuple[int, int], ...]:
        """The runs of ids (first, last) the chunk may hold, sorted and disjoint."""
        return self.runs or ((self.min_fragment_id, self.max_fragment_id),)

    @property
    def exact(self) -> bool:
        """Whether the chunk holds every id it claims (runs, or a range without gaps),
        not merely ids among them (a reference written before ``id_runs`` existed)."""
        high, low = self.max_fragment_id, self.min_fragment_id
        return bool(self.runs) or high - low + 1 == self.fragment_count

    def claims(self, fid: int) -> bool:
        """Whether ``fid`` is among the ids the chunk claims."""
        if not self.runs:
            return self.min_fragment_id <= fid <= self.max_fragment_id
        k = bisect.bisect_right(self.runs, (fid, MAX_FRAGMENT_ID + 1)) - 1
        return k >= 0 and fid <= self.runs[k][1]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "message": None}  # protobuf messages do not pickle

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def may_hold(self, ids: Collection[int]) -> bool:
        """Whether a fragment of one of ``ids`` may be in the chunk (by the ids it
        claims)."""
        low, high = self.min_fragment_id, self.max_fragment_id
        if not self.runs:
            return any(low <= i <= high for i in ids)
        return any(low <= i <= high and self.claims(i) for i in ids)

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
            id_runs=_encoded_runs(self.runs),
            sha256=self.sha256,
        )

    @classmethod
    def from_pb(cls, m: pb.FragmentChunk, where: str) -> ChunkRef:
        """A reference read from a root, checked.

        Raises:
            StoredMetadataError: a malformed name, a number out of range, an empty
                chunk, an id range that cannot hold its fragments, or id runs that
                are not its fragments' ids in that range.
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
            and len(m.sha256) in (0, SHA256_BYTES)
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
            runs=_decoded_runs(m, where) if len(m.id_runs) else (),
            sha256=m.sha256,
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
    if len(m.sha256) not in (0, SHA256_BYTES):
        raise StoredMetadataError(
            f"{named}: a SHA-256 digest of {len(m.sha256)} bytes (a digest has {SHA256_BYTES})"
        )
    most = m.fragment_count * MAX_PHYSICAL_ROWS
    check_range(m.physical_rows, 0, most, "physical_rows", named)
    check_range(m.visible_rows, 0, m.physical_rows, "visible_rows", named)
    raise StoredMetadataError(
        f"{named}: {m.fragment_count} fragments cannot have ids in "
        f"{m.min_fragment_id}..{m.max_fragment_id}"
    )


def id_runs(ids: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """The runs (first, last) of consecutive ids in ``ids``, sorted; empty when they
    are every id from the lowest to the highest (what a reference then records)."""
    ordered = sorted(ids)
    if not ordered or ordered[-1] - ordered[0] + 1 == len(ordered):
        return ()
    runs = []
    first = previous = ordered[0]
    for fid in ordered[1:]:
        if fid != previous + 1:
            runs.append((first, previous))
            first = fid
        previous = fid
    runs.append((first, previous))
    return tuple(runs)


def _encoded_runs(runs: tuple[tuple[int, int], ...]) -> list[int]:
    """``runs`` as stored: per run, the ids skipped since the previous run (0 for the
    first) and its length."""
    out: list[int] = []
    end = runs[0][0] - 1 if runs else 0
    for first, last in runs:
        out += (first - end - 1, last - first + 1)
        end = last
    return out


def _decoded_runs(m: pb.FragmentChunk, where: str) -> tuple[tuple[int, int], ...]:
    """The runs of ``m.id_runs``, checked against the reference's range and count
    (at most two numbers per fragment are read).

    Raises:
        StoredMetadataError: an odd count of numbers, an empty run, runs that touch
            (a gap of 0 but for the first), or runs that do not span the range or
            hold other than ``fragment_count`` ids.
    """
    named = f"{where}: chunk {m.name[:80]!r}"
    values = m.id_runs
    if len(values) % 2 or len(values) > 2 * m.fragment_count:
        raise StoredMetadataError(f"{named}: {len(values)} numbers of id runs for "
                                  f"{m.fragment_count} fragments")  # fmt: skip
    runs = []
    end, total = m.min_fragment_id - 1, 0
    for k in range(0, len(values), 2):
        gap, length = values[k], values[k + 1]
        if length < 1 or (gap < 1 if k else gap != 0) or end + gap + length > m.max_fragment_id:
            raise StoredMetadataError(
                f"{named}: id run {k // 2} (skipping {gap}, of {length}) is not a run of "
                f"its ids in {m.min_fragment_id}..{m.max_fragment_id}"
            )
        first = end + gap + 1
        end = first + length - 1
        total += length
        runs.append((first, end))
    if end != m.max_fragment_id or total != m.fragment_count:
        raise StoredMetadataError(
            f"{named}: its id runs hold {total} ids up to {end}, it records "
            f"{m.fragment_count} fragments up to {m.max_fragment_id}"
        )
    return tuple(runs)


class ChunkIds:
    """The fragment ids the chunks of one manifest claim, checked when its root is
    read (see the module docstring): no chunk fetched, one pass over the claims (a
    sort only when the chunks are not in id order).

    ``ambiguous`` is set when a claim that may hold fewer ids than it spans (a
    reference without ``id_runs``) meets another claim or an inline id: then only
    the chunks' contents tell whether an id is listed twice, and the reader must
    fetch them all (:meth:`~s3ddb.format.fragment_list.FragmentList.check_unique`).

    Raises:
        StoredMetadataError: two chunks claim one id exactly (the message names the
            manifest, both chunks and the id).
    """

    def __init__(self, refs: Sequence[ChunkRef], named: str) -> None:
        self._refs = refs
        self.ambiguous = False
        claims: list[tuple[int, int, int]] = []
        in_order, end = True, -1
        for i, ref in enumerate(refs):  # one loop, no call per chunk: every open runs it
            first = len(claims)
            if ref.runs:  # sorted and disjoint (checked when read)
                claims.extend((low, high, i) for low, high in ref.runs)
            else:
                claims.append((ref.min_fragment_id, ref.max_fragment_id, i))
            in_order = in_order and claims[first][0] > end
            end = claims[-1][1]
        if not in_order:
            claims.sort()
            self._refuse_overlaps(claims, named)
        self._claims = claims
        self._highest = max((c[1] for c in claims), default=-1)

    def _refuse_overlaps(self, claims: list[tuple[int, int, int]], named: str) -> None:
        end, owner = -1, -1
        for low, high, i in claims:
            if low <= end:
                first, second = self._refs[owner], self._refs[i]
                if not (first.exact and second.exact):
                    self.ambiguous = True
                elif first is not second:
                    raise StoredMetadataError(
                        f"{named}: fragment {low} is listed twice: chunks {first.name} and "
                        f"{second.name} both hold it (its rows would be read twice)"
                    )
            if high > end:
                end, owner = high, i

    def check_inline(self, ids: Sequence[int], named: str) -> None:
        """Check the ids of the manifest's inline fragments against the chunks'.

        Raises:
            StoredMetadataError: an inline id that a chunk claims exactly.
        """
        if not ids or self.ambiguous or min(ids) > self._highest:
            return  # the usual case: the newest fragments, after every chunk's
        starts = [c[0] for c in self._claims]
        for fid in ids:
            k = bisect.bisect_right(starts, fid) - 1
            if k < 0 or fid > self._claims[k][1]:
                continue
            ref = self._refs[self._claims[k][2]]
            if not ref.exact:
                self.ambiguous = True
                return
            raise StoredMetadataError(
                f"{named}: fragment {fid} is listed twice: among its inline fragments and "
                f"in chunk {ref.name} (its rows would be read twice)"
            )


class _PayloadCache:
    """Chunk payloads by (store, name, CRC), least recently used dropped first."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._size = 0
        self._items: OrderedDict[tuple[str, str, int, bytes], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, int, bytes]) -> bytes | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0

    def put(self, key: tuple[str, str, int, bytes], data: bytes) -> None:
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
                framing is not what ``ref`` and the format say (a larger file is read
                no further than ``ref.size + 1`` bytes).
        """
        key = (self.store.url, ref.name, ref.crc32, ref.sha256)
        cached = _cache().get(key)
        if cached is not None:
            return cached
        where = f"chunk {self.describe(ref)}"
        try:
            # Read no further than the recorded size: a file grown to gigabytes is
            # refused unread (one request, no HEAD first).
            data, size = self.store.get_bounded(ref.path, ref.size)
        except FileNotFoundError:
            raise ManifestCorruptError(
                f"{where} is missing (the manifest lists it: was it deleted by hand?)"
            ) from None
        self.fetched += 1
        if size > ref.size:
            raise ManifestCorruptError(
                f"{where}: larger than the {ref.size} bytes its manifest says ({size} bytes "
                "or more): refused unread"
            )
        if size != ref.size:
            raise ManifestCorruptError(f"{where}: {size} bytes, its manifest says {ref.size}")
        if zlib.crc32(data) != ref.crc32:
            raise ManifestCorruptError(f"{where}: checksum differs from its manifest's")
        if ref.sha256 and not hmac.compare_digest(hashlib.sha256(data).digest(), ref.sha256):
            raise ManifestCorruptError(
                f"{where}: its SHA-256 digest differs from its manifest's (it was replaced "
                "after the commit)"
            )
        payload = bytes(unframe_view(data, CHUNK_MAGIC, where))
        _cache().put(key, payload)
        return payload


class StoredChunk(EncodedFragments):
    """The fragments of one chunk file, fetched when first used. Counts, visible rows
    and the ids come from the reference and are checked against the fragments when
    they are parsed (the chunk holds exactly the ids its reference claims, see
    :class:`ChunkIds`); the reference's column bounds when they are decoded (each
    fragment's trusted statistics within them)."""

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

    def _name(self) -> str:
        return f"chunk {self.source.describe(self.ref)} (listed by version {self.version})"

    def max_listed_id(self) -> int:
        return self.ref.max_fragment_id

    def prime(self, payload: bytes) -> None:
        """Use ``payload``, the chunk's payload as its writer wrote it, instead of
        fetching it (and let other readers of this process use it too)."""
        self._data = payload
        _cache().put(
            (self.source.store.url, self.ref.name, self.ref.crc32, self.ref.sha256), payload
        )

    @property
    def loaded(self) -> bool:
        return self._data is not None or self._message is not None

    def fetch_remotely(self) -> bool:
        return not self.loaded and not self.source.store.is_local

    def data(self) -> bytes | memoryview:
        if self._data is None and self._message is None:
            self._data = self.source.read(self.ref)
        return super().data()

    def _check_listed(self, message: pb.Manifest, ids: list[int]) -> None:
        """The ids (unique, as many as the reference counts: checked before) are the
        ones the reference claims, the physical rows its count.

        Raises:
            StoredMetadataError: an id outside the claimed range or runs.
            ManifestCorruptError: another count of physical rows.
        """
        low, high = self.ref.min_fragment_id, self.ref.max_fragment_id
        if ids and (min(ids) < low or max(ids) > high):
            raise StoredMetadataError(
                f"{self._name()}: fragment ids {min(ids)}..{max(ids)} are outside the "
                f"range {low}..{high} its manifest gives"
            )
        if self.ref.runs:
            stray = next((fid for fid in ids if not self.ref.claims(fid)), None)
            if stray is not None:
                raise StoredMetadataError(
                    f"{self._name()}: fragment {stray} is not among the ids its manifest "
                    "lists for the chunk"
                )
        physical = sum(f.physical_rows for f in message.fragments)
        if physical != self.ref.physical_rows:
            raise ManifestCorruptError(
                f"{self._name()}: holds {physical} physical rows, its manifest says "
                f"{self.ref.physical_rows}"
            )

    def _check_decoded(self, fragments: tuple[FragmentMetadata, ...]) -> None:
        """Each fragment's trusted statistics lie within the reference's bounds (a
        filter skips the chunk by them: a bound planted there would hide its rows).

        Raises:
            StoredMetadataError: naming the chunk, the fragment and the field.
        """
        bounds = self.ref.bounds
        if not bounds:
            return
        nulls = dict.fromkeys((b.field_id for b in bounds), 0)
        for fragment in fragments:
            trusted = trusted_columns(fragment)
            for bound in bounds:
                stats = trusted.get(bound.field_id)
                if stats is None or not _within(stats, bound):
                    raise StoredMetadataError(
                        f"{self._name()}: fragment {fragment.id}'s statistics of field "
                        f"{bound.field_id} are not within the bounds its manifest gives "
                        "the chunk"
                    )
                nulls[bound.field_id] += stats.null_count
        for bound in bounds:
            if nulls[bound.field_id] > bound.null_count:
                raise StoredMetadataError(
                    f"{self._name()}: its fragments hold {nulls[bound.field_id]} nulls of "
                    f"field {bound.field_id}, its manifest says at most {bound.null_count}"
                )

    def __getstate__(self) -> dict[str, Any]:
        return {"ref": self.ref, "source": self.source, "bases": self.bases,
                "version": self.version, "max_id": self.max_id}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["ref"], state["source"], bases=state["bases"], version=state["version"],
            max_id=state["max_id"],
        )  # fmt: skip


def _at_most(low: Bound, high: Bound) -> bool:
    """Whether bound ``low`` is at most ``high`` (both known and comparable)."""
    if low is None or high is None or isinstance(low, str) != isinstance(high, str):
        return False
    return bool(low <= high)  # type: ignore[operator]


def _within(stats: ColumnStatistics, bound: ColumnStatistics) -> bool:
    """Whether one fragment's statistics of a column lie within a chunk's bound of it
    (an unknown end of the bound holds anything)."""
    return (bound.min is None or _at_most(bound.min, stats.min)) and (
        bound.max is None or _at_most(stats.max, bound.max)
    )


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
