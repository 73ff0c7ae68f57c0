"""Laying a manifest's fragments out in chunks before it is written (format 2).

The policy, per dataset (``s3ddb.chunk_fragments`` = C, default 4096;
``s3ddb.inline_fragments`` = T, default 128, both in the dataset's config):

* A list of at most T fragments is stored inline, every fragment in the manifest
  (format 1, as before chunks): a small dataset pays nothing for them.
* Otherwise the newest fragments, up to T, stay inline (the *tail*), and the others
  are in chunks of at most C fragments. Chunks the version keeps unchanged are listed
  again, never rewritten: an append adds to the tail, and writes one chunk when the
  tail overflows; a change rewrites only the chunks holding fragments it changed.
* Chunks stay few: at the end of the list, a chunk smaller than C/2 is merged with the
  one after it while that one is more than half its size (a binary counter: each
  fragment is rewritten about log2(C/T) times as the dataset grows, and the end holds
  at most that many small chunks); elsewhere a chunk smaller than C/4 (a change
  removed most of its fragments) is merged with the next one.

Every chunk is written under a new name before the manifest that first lists it is
claimed, exactly like a data file: a definite failure deletes it, an unknown outcome
keeps it.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.chunks import (
    CHUNK_MAGIC,
    MAX_CHUNK_FRAGMENTS,
    ChunkRef,
    ChunkSource,
    StoredChunk,
    id_runs,
)
from s3ddb.format.fragment_list import (
    EncodedFragments,
    FragmentList,
    Segment,
    fetch_encoded,
    segment_bytes,
)
from s3ddb.format.framing import frame
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import unique_hex
from s3ddb.format.stats import ColumnStatistics, summarize_bounds, union_bounds

__all__ = [
    "CHUNK_FRAGMENTS_KEY",
    "DEFAULT_CHUNK_FRAGMENTS",
    "DEFAULT_INLINE_FRAGMENTS",
    "INLINE_FRAGMENTS_KEY",
    "ChunkPolicy",
    "write_chunks",
]

CHUNK_FRAGMENTS_KEY = "s3ddb.chunk_fragments"
INLINE_FRAGMENTS_KEY = "s3ddb.inline_fragments"
DEFAULT_CHUNK_FRAGMENTS = 4096
DEFAULT_INLINE_FRAGMENTS = 128


def _setting(config: dict[str, str], key: str, default: int, low: int, high: int) -> int:
    """An integer setting of the dataset's config; the default when absent or not a
    number in ``low..high`` (a bad value never blocks commits, which could not fix it)."""
    try:
        value = int(config.get(key, default))
    except ValueError:
        return default
    return value if low <= value <= high else default


@dataclass(frozen=True)
class ChunkPolicy:
    """How many fragments a chunk holds at most, and how many stay inline."""

    chunk_fragments: int = DEFAULT_CHUNK_FRAGMENTS
    inline_fragments: int = DEFAULT_INLINE_FRAGMENTS

    @classmethod
    def of(cls, config: dict[str, str]) -> ChunkPolicy:
        """The policy a dataset's config sets."""
        return cls(
            _setting(config, CHUNK_FRAGMENTS_KEY, DEFAULT_CHUNK_FRAGMENTS, 2, MAX_CHUNK_FRAGMENTS),
            _setting(config, INLINE_FRAGMENTS_KEY, DEFAULT_INLINE_FRAGMENTS, 0, 1 << 16),
        )


@dataclass
class _Unit:
    """A run of fragments that becomes one chunk: an unchanged chunk (``kept``), or
    segments to write together."""

    segments: list[Segment]
    count: int
    kept: StoredChunk | None = None
    bounds: tuple[ColumnStatistics, ...] | None = field(default=None)


def _stored(s: Segment) -> StoredChunk | None:
    return s if isinstance(s, StoredChunk) else None


def _units(segments: Iterable[Segment]) -> list[_Unit]:
    units: list[_Unit] = []
    for s in segments:
        chunk = _stored(s)
        if chunk is not None:
            units.append(_Unit([s], len(s), kept=chunk))
        elif units and units[-1].kept is None:
            units[-1].segments.append(s)
            units[-1].count += len(s)
        else:
            units.append(_Unit([s], len(s)))
    return units


def _join(a: _Unit, b: _Unit) -> _Unit:
    return _Unit(a.segments + b.segments, a.count + b.count)


def _slice(s: Segment, start: int, stop: int) -> Segment:
    if isinstance(s, tuple):
        return s[start:stop]
    part = pb.Manifest(fragments=s.message().fragments[start:stop])
    return EncodedFragments(
        message=part, bases=s.bases, where=s.where, version=s.version, max_id=s.max_id
    )


def _split(unit: _Unit, size: int) -> list[_Unit]:
    """``unit`` cut into runs of ``size`` fragments (the last one shorter)."""
    fetch_encoded(s for s in unit.segments if isinstance(s, EncodedFragments))
    out: list[_Unit] = [_Unit([], 0)]
    for s in unit.segments:
        start = 0
        while start < len(s):
            room = size - out[-1].count
            if room == 0:
                out.append(_Unit([], 0))
                room = size
            stop = min(len(s), start + room)
            out[-1].segments.append(_slice(s, start, stop))
            out[-1].count += stop - start
            start = stop
    return out


def _trailing_start(units: list[_Unit], policy: ChunkPolicy) -> int:
    """Where the run of small chunks at the end of the list starts."""
    i = len(units)
    while i > 0 and units[i - 1].count < policy.chunk_fragments // 2:
        i -= 1
    return i


def _laid_out(units: list[_Unit], policy: ChunkPolicy) -> list[_Unit]:
    """The chunks of ``units`` after the policy's splits and merges."""
    size = policy.chunk_fragments
    out: list[_Unit] = []
    for u in units:
        out.extend(_split(u, size) if u.kept is None and u.count > size else [u])
    i = 0
    while i < min(_trailing_start(out, policy), len(out) - 1):
        if out[i].count < size // 4:
            joined = _join(out[i], out[i + 1])
            out[i : i + 2] = (
                [joined] if joined.count <= size else _split(joined, -(-joined.count // 2))
            )
        else:
            i += 1
    while len(out) - _trailing_start(out, policy) >= 2 and out[-2].count < 2 * out[-1].count:
        out[-2:] = [_join(out[-2], out[-1])]
    return out


def _segment_bounds(s: Segment) -> tuple[ColumnStatistics, ...]:
    if isinstance(s, tuple):
        return summarize_bounds(s)
    ref = s.stored_ref()
    if ref is not None:
        return ref.bounds  # type: ignore[no-any-return]
    if s.bounds_hint is not None:
        return s.bounds_hint
    return summarize_bounds(s.decoded())


def _physical_rows(s: Segment) -> int:
    if isinstance(s, tuple):
        return sum(f.physical_rows for f in s)
    ref = s.stored_ref()
    if ref is not None:
        return ref.physical_rows  # type: ignore[no-any-return]
    return sum(m.physical_rows for m in s.message().fragments)


def _visible_rows(s: Segment) -> int:
    return s.visible_rows() if isinstance(s, EncodedFragments) else sum(f.num_rows for f in s)


def _ids(s: Segment) -> list[int]:
    return s.ids() if isinstance(s, EncodedFragments) else [f.id for f in s]


def _write(
    unit: _Unit,
    manifest: Manifest,
    source: ChunkSource,
    put: Callable[[str, bytes], None],
) -> StoredChunk:
    """Write ``unit`` as a new chunk file; the chunk, its payload already in memory."""
    fetch_encoded(s for s in unit.segments if isinstance(s, EncodedFragments))
    payload = b"".join(segment_bytes(s) for s in unit.segments)
    data = frame(payload, CHUNK_MAGIC)
    ids = [i for s in unit.segments for i in _ids(s)]
    bounds = _segment_bounds(unit.segments[0])
    for s in unit.segments[1:]:
        bounds = union_bounds(bounds, _segment_bounds(s)) if bounds else ()
    ref = ChunkRef(
        name=f"{unique_hex()}.chunk",
        size=len(data),
        crc32=zlib.crc32(data),
        sha256=hashlib.sha256(data).digest(),
        fragment_count=len(ids),
        visible_rows=sum(_visible_rows(s) for s in unit.segments),
        physical_rows=sum(_physical_rows(s) for s in unit.segments),
        min_fragment_id=min(ids),
        max_fragment_id=max(ids),
        bounds=bounds,
        # The ids exactly, when not every id of the range: readers then check that no
        # two chunks (nor the inline tail) list one id without fetching any chunk.
        runs=id_runs(ids),
    )
    put(ref.path, data)
    bases = frozenset(b.id for b in manifest.base_paths)
    chunk = StoredChunk(
        ref, source, bases=bases, version=manifest.version, max_id=manifest.max_fragment_id
    )
    chunk.prime(payload)
    return chunk


def write_chunks(
    manifest: Manifest,
    source: ChunkSource,
    put: Callable[[str, bytes], None],
    policy: ChunkPolicy | None = None,
) -> tuple[Manifest, list[str]]:
    """``manifest`` with its fragments laid out by the policy (of its config unless
    ``policy`` is given), and the paths of the chunk files written for it with
    ``put(path, data)``; ``source`` reads them back.

    The fragments and their order are unchanged; only how they are stored differs.
    A manifest small enough to be inline is returned as it is (format 1).

    Raises:
        Errors of ``put``, and of fetching the chunks it merges
        (``ManifestCorruptError``).
    """
    policy = policy or ChunkPolicy.of(manifest.config)
    fragments = manifest.fragments
    if len(fragments) <= policy.inline_fragments:
        if not fragments.chunk_refs():
            return manifest, []
        fetch_encoded(s for s in fragments.segments if isinstance(s, EncodedFragments))
        inline = [_unchunked(s) for s in fragments.segments]
        return manifest.evolve(fragments=FragmentList.of_segments(inline)), []
    units = _units(fragments.segments)
    tail: list[Segment] = []
    if units and units[-1].kept is None and units[-1].count <= policy.inline_fragments:
        tail = units.pop().segments
    written: list[str] = []
    segments: list[Segment] = []
    for unit in _laid_out(units, policy):
        if unit.kept is not None:
            segments.append(_with_exact_ids(unit.kept))
            continue
        chunk = _write(unit, manifest, source, put)
        written.append(chunk.ref.path)
        segments.append(chunk)
    listed = FragmentList.of_segments([*segments, *tail])
    return manifest.evolve(fragments=listed), written


def _with_exact_ids(chunk: StoredChunk) -> StoredChunk:
    """``chunk``, listed again; its reference given the chunk's ids exactly if it
    lacked them (written before references recorded ``id_runs``) and this process
    parsed the chunk anyway (the reader of such a root checks every chunk): the file
    is unchanged, and readers of the new root need fetch no chunk to check its ids."""
    ref = chunk.ref
    dense = ref.max_fragment_id - ref.min_fragment_id + 1 == ref.fragment_count
    if ref.runs or dense or not chunk.loaded:
        return chunk  # exact already (most chunks), or not parsed here
    ref = replace(ref, runs=id_runs(chunk.ids()), message=None)
    exact = StoredChunk(
        ref, chunk.source, bases=chunk.bases, version=chunk.version, max_id=chunk.max_id
    )
    exact.prime(bytes(chunk.data()))
    return exact


def _unchunked(s: Segment) -> Segment:
    """A chunk's fragments as a run stored inline."""
    if isinstance(s, StoredChunk):
        return EncodedFragments(
            s.data(), count=len(s), visible_rows=s.visible_rows(), bases=s.bases,
            where=s.where, version=s.version, max_id=s.max_id,
        )  # fmt: skip
    return s
