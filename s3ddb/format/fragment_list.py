"""The fragments of a manifest, decoded only when used and re-encoded only when changed.

A dataset that many writers append to holds thousands of fragments, and every open and
every commit used to decode all of them into Python objects and encode all of them
again. A :class:`FragmentList` is a sequence of :class:`FragmentMetadata` made of
*segments*: runs of fragments still in their stored protobuf encoding
(:class:`EncodedFragments`), and runs of fragments as objects (new or changed ones).

* Opening a version decodes no fragment: the manifest's summary gives the count of
  fragments and of visible rows.
* Appending adds a segment: the next manifest is written by concatenating the stored
  bytes of the untouched fragments with the encoding of the new ones (a protobuf
  repeated field may be split across a message's bytes and still decodes in order).
* Changing a few fragments (a delete) parses the stored bytes into protobuf messages
  in C, replaces those fragments and re-serializes in C, without building a Python
  object for the fragments it does not touch.

Whatever the segments, the list decodes to exactly the fragments a full decode of the
same manifest gives; every check a decoded fragment gets (names inside the dataset,
declared base paths, the summary's counts) runs when its segment is decoded.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from google.protobuf.message import DecodeError

from s3ddb.errors import ManifestCorruptError, PathOutsideDatasetError, StoredMetadataError
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.bases import file_base_ids
from s3ddb.format.fragment_metadata import FragmentMetadata, data_files_apart
from s3ddb.format.row_lineage import check_row_ids, check_versions
from s3ddb.format.stats import ColumnStatistics, summarize_bounds, union_bounds
from s3ddb.io.parallel import process_pool

__all__ = [
    "MAX_SEGMENTS",
    "EncodedFragments",
    "FragmentList",
    "FragmentsById",
    "Segment",
    "fetch_encoded",
    "segment_bytes",
]

#: Above this many segments, adjacent ones are merged (a writer that appends again
#: and again to the manifest it committed last must not build an ever longer chain).
MAX_SEGMENTS = 16


def _add(seen: set[int], item: int) -> bool:
    seen.add(item)
    return False


def _visible_rows(fragments: Iterable[FragmentMetadata]) -> int:
    return sum(f.num_rows for f in fragments)


class EncodedFragments:
    """A run of fragments in their protobuf encoding: the bytes of a ``Manifest``
    message holding only ``fragments`` entries.

    ``count`` and ``visible_rows`` come from the manifest's summary (None: unknown,
    found by decoding). ``bases`` are the base path ids the manifest declares; a
    fragment's file with another base id is refused when decoded. ``where`` names the
    manifest in error messages, ``version`` its version (0: unknown). ``max_id`` is
    the manifest's ``max_fragment_id`` (None: not recorded): no fragment id may
    exceed it, or the next commit would give a new fragment an id in use.

    When the fragments are first parsed, their ids are checked once: each id at most
    once, none above ``max_id`` (a manifest listing a fragment twice would read its
    rows twice).
    """

    __slots__ = (
        "_count", "_data", "_decoded", "_ids", "_message", "_rows", "_rows_checked", "bases",
        "bounds_hint", "max_id", "version", "where",
    )  # fmt: skip

    def __init__(
        self,
        data: bytes | memoryview | None = None,
        *,
        message: pb.Manifest | None = None,
        count: int | None = None,
        visible_rows: int | None = None,
        bases: frozenset[int] = frozenset(),
        where: str = "",
        version: int = 0,
        max_id: int | None = None,
        bounds_hint: tuple[ColumnStatistics, ...] | None = None,
    ) -> None:
        assert data is not None or message is not None
        self._data = data
        # Column bounds known to hold every fragment of the run (from the chunk it was
        # changed from), so writing it as a chunk needs no fragment decoded.
        self.bounds_hint = bounds_hint
        self._message: pb.Manifest | None = None
        self._ids: list[int] | None = None
        self._decoded: tuple[FragmentMetadata, ...] | None = None
        self._count = count if count is not None else (len(message.fragments) if message else None)
        self._rows = visible_rows
        self._rows_checked = False
        self.bases = bases
        self.where = where
        self.version = version
        self.max_id = max_id
        if message is not None:
            self._checked(message)

    def stored_ref(self) -> Any:
        """The reference of the chunk file holding this run unchanged (a
        :class:`~s3ddb.format.chunks.ChunkRef`), None for fragments not in one."""
        return None

    def fetch_remotely(self) -> bool:
        """Whether the run's bytes are still to be fetched from a remote store (a
        chunk); :func:`fetch_encoded` fetches such runs side by side."""
        return False

    def max_listed_id(self) -> int:
        """An upper bound of the run's fragment ids (-1: none)."""
        return max(self.ids(), default=-1)

    def _name(self) -> str:
        """The manifest, for error messages."""
        return f"manifest {self.where}" + (f" (version {self.version})" if self.version else "")

    def _checked(self, message: pb.Manifest) -> pb.Manifest:
        """``message`` once its fragment ids are checked (and remembered).

        Raises:
            StoredMetadataError: an id listed twice, or above ``max_id``.
        """
        ids = [f.id for f in message.fragments]
        if len(set(ids)) != len(ids):
            seen: set[int] = set()
            twice = next(i for i in ids if i in seen or _add(seen, i))
            raise StoredMetadataError(
                f"{self._name()}: fragment {twice} is listed twice (its rows would be read twice)"
            )
        if self.max_id is not None and ids and max(ids) > self.max_id:
            raise StoredMetadataError(
                f"{self._name()}: fragment {max(ids)} is above the manifest's "
                f"max_fragment_id {self.max_id} (a new fragment would reuse its id)"
            )
        self._check_listed(message, ids)
        # Kept only once every check passed: a failed check fails every later use too.
        self._message, self._ids = message, ids
        return message

    def _check_listed(self, message: pb.Manifest, ids: list[int]) -> None:
        """Further checks of the parsed fragments (a chunk's against its reference);
        none here."""

    def _check_decoded(self, fragments: tuple[FragmentMetadata, ...]) -> None:
        """Further checks of the decoded fragments (a chunk's against its
        reference's bounds); none here."""

    def data(self) -> bytes | memoryview:
        """The encoding (serialized from the parsed message if read that way)."""
        if self._data is None:
            assert self._message is not None
            self._data = self._message.SerializeToString(deterministic=True)
        return self._data

    def message(self) -> pb.Manifest:
        """The fragments as protobuf messages (parsed once, in C).

        Raises:
            ManifestCorruptError: the bytes do not decode, hold anything but fragments,
                or disagree with the manifest's fragment count.
            StoredMetadataError: an id listed twice or above ``max_id``, or another
                check of :meth:`_check_listed` (a chunk's ids not those its reference
                claims).
        """
        if self._message is None:
            message = pb.Manifest()
            try:
                message.ParseFromString(self.data())  # type: ignore[arg-type]  # a buffer will do
            except DecodeError as exc:
                raise ManifestCorruptError(f"{self.where}: cannot decode fragments: {exc}") from exc
            other = [f.name for f, _ in message.ListFields() if f.name != "fragments"]
            if other:
                raise ManifestCorruptError(
                    f"{self.where}: field(s) {other} stored among the fragments"
                )
            if self._count is not None and len(message.fragments) != self._count:
                raise ManifestCorruptError(
                    f"{self.where}: holds {len(message.fragments)} fragments, its summary "
                    f"says {self._count}"
                )
            return self._checked(message)
        return self._message

    def __len__(self) -> int:
        if self._count is None:
            self._count = len(self.message().fragments)
        return self._count

    def visible_rows(self) -> int:
        """Rows visible to readers. The summary of fragments in hand (not a stored
        chunk, whose reference's figures are checked when it is fetched) is checked
        against their parsed messages first: a manifest listing a fragment twice, or
        a summary that lies, must not change a count that no scan would return.

        Raises:
            ManifestCorruptError: the summary disagrees with the fragments, or they do
                not parse.
            StoredMetadataError: a fragment id is listed twice, or above ``max_id``.
        """
        if self._rows is None:
            self._rows = _visible_rows(self.decoded())
        elif not self._rows_checked and self.stored_ref() is None:
            counted = sum(
                f.physical_rows
                - (f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0)
                for f in self.message().fragments
            )
            if counted != self._rows:
                raise ManifestCorruptError(
                    f"{self.where}: its fragments hold {counted} visible rows, its summary "
                    f"says {self._rows}"
                )
            self._rows_checked = True
        return self._rows

    def ids(self) -> list[int]:
        """The fragment ids, in order (no fragment object is built)."""
        self.message()
        assert self._ids is not None
        return list(self._ids)

    def decoded(self) -> tuple[FragmentMetadata, ...]:
        """Every fragment as an object, checked.

        Raises:
            ManifestCorruptError: see :meth:`message`; or the summary's row count is wrong.
            StoredMetadataError: a check of :meth:`_check_decoded` (a chunk's
                fragments outside its reference's bounds).
            PathOutsideDatasetError: a file name leaves the dataset, or names a base
                path the manifest does not declare.
        """
        if self._decoded is None:
            decoded = tuple(self._decode(m) for m in self.message().fragments)
            rows = _visible_rows(decoded)
            if self._rows is not None and rows != self._rows:
                raise ManifestCorruptError(
                    f"{self.where}: its fragments hold {rows} visible rows, its summary "
                    f"says {self._rows}"
                )
            self._check_decoded(decoded)
            self._rows, self._rows_checked = rows, True
            self._decoded = decoded
        return self._decoded

    def _decode(self, message: pb.Fragment) -> FragmentMetadata:
        try:
            fragment = FragmentMetadata.from_pb(message)
            for what in ("created_at_version", "last_updated_at_version"):
                if self.version and getattr(message, what) > self.version:
                    raise StoredMetadataError(
                        f"fragment {message.id}: {what} {getattr(message, what)} is after "
                        "the manifest's own version"
                    )
            # Stored lineage is final: every id allocated, every version committed.
            # (Versions are checked against the manifest's own when read: fragments
            # carried over keep the version of the manifest they were parsed from.)
            where = f"fragment {message.id}"
            if message.row_id_sequence:
                check_row_ids(message.row_id_sequence, message.physical_rows, where)
            for what in ("row_created_at_versions", "row_last_updated_at_versions"):
                if getattr(message, what):
                    check_versions(getattr(message, what), message.physical_rows, where, what, None)
        except PathOutsideDatasetError as exc:
            raise PathOutsideDatasetError(f"{exc} [manifest {self.where}]") from None
        except StoredMetadataError as exc:
            raise StoredMetadataError(f"{self._name()}: {exc}") from None
        except (ValueError, KeyError, IndexError) as exc:
            raise ManifestCorruptError(
                f"{self.where}: fragment {message.id}: cannot decode: {exc}"
            ) from exc
        undeclared = file_base_ids([fragment]) - self.bases
        if undeclared:
            raise PathOutsideDatasetError(
                f"refusing files of base path(s) {sorted(undeclared)} in fragment "
                f"{fragment.id}: manifest {self.where} declares no such base"
            )
        return fragment

    def __getstate__(self) -> dict[str, Any]:
        return {"data": bytes(self.data()), "count": self._count, "rows": self._rows,
                "bases": self.bases, "where": self.where, "version": self.version,
                "max_id": self.max_id}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["data"], count=state["count"], visible_rows=state["rows"],
            bases=state["bases"], where=state["where"], version=state.get("version", 0),
            max_id=state.get("max_id"),
        )  # fmt: skip


Segment = EncodedFragments | tuple[FragmentMetadata, ...]


def _holder(segment: Segment) -> str:
    """Where ``segment``'s fragments are listed, for error messages."""
    name = _chunk_name(segment)
    return f"in chunk {name}" if name is not None else "among its inline fragments"


def _chunk_name(segment: Segment) -> str | None:
    ref = segment.stored_ref() if isinstance(segment, EncodedFragments) else None
    return ref.name if ref is not None else None


def fetch_encoded(runs: Iterable[EncodedFragments]) -> None:
    """Make the bytes of every run of ``runs`` available: those still to be fetched
    from a remote store are fetched side by side (one round trip for all)."""
    remote = [r for r in runs if r.fetch_remotely()]
    if len(remote) > 1:
        list(process_pool("chunks").map(lambda r: r.data(), remote))


def segment_bytes(segment: Segment) -> bytes | memoryview:
    """A segment as the bytes of a ``Manifest`` message holding only its fragments."""
    if isinstance(segment, EncodedFragments):
        return segment.data()
    # A repeated field encodes as its entries one after another: each fragment's entry
    # is encoded once per object (FragmentMetadata.manifest_entry), not per manifest.
    return b"".join([f.manifest_entry() for f in segment])


class FragmentList(Sequence[FragmentMetadata]):
    """An immutable sequence of fragments that decodes and encodes lazily (see the
    module docstring). Compares equal to any sequence with equal fragments in the
    same order; pickles."""

    __slots__ = ("_apart", "_bases", "_flat", "_segments")
    _segments: tuple[Segment, ...]
    _flat: tuple[FragmentMetadata, ...] | None
    #: Runs of segments (by position) whose fragments were found to share no data file
    #: (see ``data_files_apart``): a list is immutable, and scans ask again and again.
    _apart: set[tuple[int, ...]] | None
    #: Per segment, the base ids its fragments' files use (None: an encoded segment),
    #: computed once: a commit checks one list against its base paths several times.
    _bases: tuple[frozenset[int] | None, ...] | None

    def __init__(self, fragments: Iterable[FragmentMetadata] | Segment = ()) -> None:
        if isinstance(fragments, EncodedFragments):
            segments: tuple[Segment, ...] = (fragments,)
        elif isinstance(fragments, FragmentList):
            segments = fragments._segments
        else:
            items = tuple(fragments)
            for item in items:
                if not isinstance(item, FragmentMetadata):
                    raise TypeError(f"a fragment list holds FragmentMetadata, not {item!r}")
            segments = (items,) if items else ()
        self._segments = segments
        self._flat: tuple[FragmentMetadata, ...] | None = None
        self._bases = None
        self._apart = None

    @classmethod
    def _of(cls, segments: Iterable[Segment]) -> FragmentList:
        out = cls()
        out._segments = _merged(tuple(s for s in segments if len(s)))
        return out

    @classmethod
    def of_segments(cls, segments: Iterable[Segment]) -> FragmentList:
        """The list of ``segments`` in order (adjacent runs joined as usual; chunks are
        never joined with anything)."""
        return cls._of(segments)

    @property
    def segments(self) -> tuple[Segment, ...]:
        return self._segments

    def chunk_refs(self) -> list[Any]:
        """The references of the chunk files holding the stored runs, in order."""
        refs = (s.stored_ref() for s in self._segments if isinstance(s, EncodedFragments))
        return [r for r in refs if r is not None]

    def max_listed_id(self) -> int:
        """The highest fragment id listed (-1: none); a chunk's counts from its
        reference's id range, without fetching it."""
        return max(
            (
                s.max_listed_id() if isinstance(s, EncodedFragments) else max(f.id for f in s)
                for s in self._segments
            ),
            default=-1,
        )

    def _fetch(self, segments: Iterable[Segment]) -> None:
        """Fetch the chunks among ``segments`` side by side before they are decoded."""
        fetch_encoded(s for s in segments if isinstance(s, EncodedFragments))

    def matching(self, chunk_may_match: Callable[[Any], bool] | None) -> list[FragmentMetadata]:
        """The fragments, in order, but those of chunks whose reference
        ``chunk_may_match`` says hold no match (their files are never fetched)."""
        if chunk_may_match is None:
            return list(self)
        kept, positions = [], []
        for i, s in enumerate(self._segments):
            ref = s.stored_ref() if isinstance(s, EncodedFragments) else None
            if ref is None or chunk_may_match(ref):
                kept.append(s)
                positions.append(i)
        self._fetch(kept)
        out: list[FragmentMetadata] = []
        for s in kept:
            out.extend(s.decoded() if isinstance(s, EncodedFragments) else s)
        run = tuple(positions)
        if self._flat is None and run not in (self._apart or ()):
            data_files_apart(out, self._manifest_name())  # (the whole list: in _all)
            self._apart = (self._apart or set()) | {run}
        return out

    def select(self, ids: Collection[int]) -> dict[int, FragmentMetadata]:
        """The fragments whose id is in ``ids`` (absent ones left out), fetching only
        the chunks whose id range may hold one."""
        wanted = set(ids)
        candidates = []
        for s in self._segments:
            ref = s.stored_ref() if isinstance(s, EncodedFragments) else None
            if ref is None or ref.may_hold(wanted):
                candidates.append(s)
        self._fetch(candidates)
        out: dict[int, FragmentMetadata] = {}
        for s in candidates:
            if isinstance(s, EncodedFragments):
                positions = [i for i, fid in enumerate(s.ids()) if fid in wanted]
                decoded = s.decoded() if len(positions) > 64 else None
                for i in positions:
                    f = decoded[i] if decoded is not None else s._decode(s.message().fragments[i])
                    out[f.id] = f
            else:
                out.update((f.id, f) for f in s if f.id in wanted)
        return out

    # --- what needs no decoding ---------------------------------------------------------

    def __len__(self) -> int:
        return sum(len(s) for s in self._segments)

    def __bool__(self) -> bool:
        return any(len(s) for s in self._segments)

    def visible_rows(self) -> int:
        """Rows visible to readers, from the summaries where segments have them."""
        return sum(
            s.visible_rows() if isinstance(s, EncodedFragments) else _visible_rows(s)
            for s in self._segments
        )

    def ids(self) -> list[int]:
        """Every fragment id, in order, without building fragment objects."""
        out: list[int] = []
        for s in self._segments:
            out.extend(s.ids() if isinstance(s, EncodedFragments) else (f.id for f in s))
        return out

    def encoded(self) -> bytes:
        """The fragments as the bytes of a ``Manifest`` message holding only them: the
        stored bytes of encoded segments, and the encoding of the others."""
        return b"".join(self.encoded_parts())

    def encoded_parts(self) -> list[bytes | memoryview]:
        """:meth:`encoded`, segment by segment (nothing concatenated)."""
        return [segment_bytes(s) for s in self._segments]

    def check_bases(self, declared: Collection[int]) -> None:
        """Check that no fragment uses a base path outside ``declared``; encoded
        segments checked against a subset of it when read stay undecoded.

        Raises:
            PathOutsideDatasetError: a file of an undeclared base.
        """
        allowed = frozenset(declared)
        if self._bases is None:
            self._bases = tuple(
                None if isinstance(s, EncodedFragments) else frozenset(file_base_ids(s))
                for s in self._segments
            )
        for s, used in zip(self._segments, self._bases):
            if isinstance(s, EncodedFragments):
                if not s.bases <= allowed:
                    EncodedFragments(
                        s.data(), bases=allowed, where=s.where, version=s.version, max_id=s.max_id
                    ).decoded()
                continue
            undeclared = (used or frozenset()) - allowed
            if undeclared:
                raise PathOutsideDatasetError(
                    f"refusing files of base path(s) {sorted(undeclared)}: the manifest "
                    "declares no such base"
                )

    # --- sequence ------------------------------------------------------------------------

    def _all(self) -> tuple[FragmentMetadata, ...]:
        if self._flat is None:
            self._fetch(self._segments)
            out: list[FragmentMetadata] = []
            for s in self._segments:
                out.extend(s.decoded() if isinstance(s, EncodedFragments) else s)
            if len(self._segments) > 1:
                self._check_unique([f.id for f in out])
            data_files_apart(out, self._manifest_name())
            self._flat = tuple(out)
        return self._flat

    def __iter__(self) -> Iterator[FragmentMetadata]:
        return iter(self._all())

    @overload
    def __getitem__(self, index: int) -> FragmentMetadata: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[FragmentMetadata, ...]: ...
    def __getitem__(self, index: int | slice) -> FragmentMetadata | tuple[FragmentMetadata, ...]:
        if isinstance(index, int) and self._flat is None:
            position = index + len(self) if index < 0 else index
            for s in self._segments:
                if 0 <= position < len(s):
                    return (s.decoded() if isinstance(s, EncodedFragments) else s)[position]
                position -= len(s)
            raise IndexError("fragment index out of range")
        return self._all()[index]

    def __add__(self, other: Iterable[FragmentMetadata]) -> FragmentList:
        added = other if isinstance(other, FragmentList) else FragmentList(other)
        return FragmentList._of(self._segments + added._segments)

    def __radd__(self, other: Iterable[FragmentMetadata]) -> FragmentList:
        return FragmentList(other) + self

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FragmentList):
            return len(self) == len(other) and self._all() == other._all()
        if isinstance(other, (tuple, list)):
            return self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"FragmentList({len(self)} fragments in {len(self._segments)} segment(s))"

    def __getstate__(self) -> tuple[Segment, ...]:
        return self._segments

    def __setstate__(self, state: tuple[Segment, ...]) -> None:
        self._segments = state
        self._flat = None
        self._bases = None
        self._apart = None

    # --- lookups by id --------------------------------------------------------------------

    def _entries(self) -> dict[int, tuple[EncodedFragments | None, Any]]:
        """id -> (its encoded segment and protobuf message, or (None, the object))."""
        self._fetch(self._segments)
        out: dict[int, tuple[EncodedFragments | None, Any]] = {}
        for s in self._segments:
            if isinstance(s, EncodedFragments):
                out.update((m.id, (s, m)) for m in s.message().fragments)
            else:
                out.update((f.id, (None, f)) for f in s)
        if len(out) != len(self):
            self._check_unique(self.ids())
        return out

    def _check_unique(self, ids: list[int]) -> None:
        """Each segment's ids are checked when parsed; this checks them across
        segments (a list joined from several).

        Raises:
            StoredMetadataError: an id is listed twice.
        """
        if len(set(ids)) != len(ids):
            self.check_unique()

    def check_unique(self, named: str | None = None) -> None:
        """Check that no fragment id is listed twice across the whole list: every
        chunk is fetched (side by side) and parsed, no fragment decoded. For a root
        whose chunk references cannot tell alone (see
        :class:`~s3ddb.format.chunks.ChunkIds`); otherwise they are checked when it
        is read, with no chunk fetched. ``named``: the manifest, for the message.

        Raises:
            StoredMetadataError: an id listed twice, naming the manifest, the two
                places it is listed (chunks, inline fragments) and the id.
            ManifestCorruptError: a chunk cannot be read or parsed.
        """
        self._fetch(self._segments)
        seen: dict[int, Segment] = {}
        for s in self._segments:
            for fid in s.ids() if isinstance(s, EncodedFragments) else [f.id for f in s]:
                first = seen.setdefault(fid, s)
                if first is not s:
                    raise StoredMetadataError(
                        f"{named or self._manifest_name()}: fragment {fid} is listed twice: "
                        f"{_holder(first)} and {_holder(s)} (its rows would be read twice)"
                    )

    def _manifest_name(self) -> str:
        """The manifest the list was read from, for error messages."""
        encoded = [s for s in self._segments if isinstance(s, EncodedFragments)]
        inline = [s for s in encoded if s.stored_ref() is None]
        if inline:
            return inline[-1]._name()
        return f"manifest (version {encoded[0].version})" if encoded else "fragment list"

    def by_id(self) -> FragmentsById:
        """The fragments by id, each decoded when first looked up."""
        return FragmentsById(self)

    def diff(self, newer: FragmentList) -> tuple[set[int], list[int], set[int]]:
        """:meth:`FragmentsById.diff` of the two lists' fragments by id. Chunks both
        lists share hold the same fragments on both sides: they are left out unread."""
        mine = {r.name for r in self.chunk_refs()}
        shared = mine & {r.name for r in newer.chunk_refs()}
        if not shared:
            return FragmentsById(self).diff(FragmentsById(newer))

        def unshared(fragments: FragmentList) -> FragmentList:
            kept = [s for s in fragments._segments if _chunk_name(s) not in shared]
            out = FragmentList()
            out._segments = tuple(kept)
            return out

        return FragmentsById(unshared(self)).diff(FragmentsById(unshared(newer)))

    # --- changes -------------------------------------------------------------------------

    def changed(
        self, ids: Collection[int], change: Callable[[FragmentMetadata], FragmentMetadata | None]
    ) -> tuple[FragmentList, set[int]]:
        """The list with ``change`` applied to the fragments whose id is in ``ids`` (a
        None result removes the fragment), and the ids it found. Only those fragments
        are decoded; the others keep their encoding (re-serialized in C where they
        share a segment with a changed one)."""
        wanted = set(ids)
        found: set[int] = set()
        out: list[Segment] = []
        for s in self._segments:
            ref = s.stored_ref() if isinstance(s, EncodedFragments) else None
            if not wanted or (ref is not None and not ref.may_hold(wanted)):
                out.append(s)
            elif isinstance(s, EncodedFragments):
                out.append(self._change_encoded(s, wanted, found, change))
            else:
                kept = []
                for f in s:
                    if f.id in wanted:
                        found.add(f.id)
                        f2 = change(f)
                        if f2 is not None:
                            kept.append(f2)
                    else:
                        kept.append(f)
                out.append(tuple(kept))
        return FragmentList._of(out), found

    @staticmethod
    def _change_encoded(
        s: EncodedFragments,
        wanted: set[int],
        found: set[int],
        change: Callable[[FragmentMetadata], FragmentMetadata | None],
    ) -> Segment:
        positions = [i for i, fid in enumerate(s.ids()) if fid in wanted]
        if not positions:
            return s
        message = pb.Manifest()
        message.CopyFrom(s.message())
        rows = s._rows
        ref = s.stored_ref()
        hint = ref.bounds if ref is not None else s.bounds_hint
        for i in reversed(positions):
            old = s._decode(s.message().fragments[i])
            found.add(old.id)
            new = change(old)
            if hint is not None and new is not None:
                # A changed fragment may hold new values (an update): widen the bounds.
                hint = union_bounds(hint, summarize_bounds([new]))
            if rows is not None:
                rows += (new.num_rows if new is not None else 0) - old.num_rows
            if new is None:
                del message.fragments[i]
            else:
                message.fragments[i].CopyFrom(new.to_pb())
        # The untouched fragments were never decoded: they keep their stored checks
        # (base ids against the same declared set, and the summary, adjusted by the
        # changed fragments' rows) for when they are.
        return EncodedFragments(
            message=message, visible_rows=rows, bases=s.bases, where=s.where,
            version=s.version, max_id=s.max_id, bounds_hint=hint,
        )  # fmt: skip


class FragmentsById(Mapping[int, FragmentMetadata]):
    """A fragment list's fragments by id; a fragment is decoded when looked up."""

    def __init__(self, fragments: FragmentList) -> None:
        self._entries = fragments._entries()
        self._decoded: dict[int, FragmentMetadata] = {}

    def __getitem__(self, fid: int) -> FragmentMetadata:
        found = self._decoded.get(fid)
        if found is None:
            segment, value = self._entries[fid]
            found = value if segment is None else segment._decode(value)
            self._decoded[fid] = found
        return found

    def __contains__(self, fid: object) -> bool:
        return fid in self._entries

    def __iter__(self) -> Iterator[int]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def diff(self, newer: FragmentsById) -> tuple[set[int], list[int], set[int]]:
        """(ids only in self, ids only in ``newer`` in its order, ids in both whose
        fragment differs). Fragments still encoded on both sides are compared as
        protobuf messages (in C), so only those that differ are decoded."""
        mine, theirs = self._entries, newer._entries
        removed = set(mine) - set(theirs)
        added = [fid for fid in theirs if fid not in mine]
        changed = set()
        for fid, (segment, value) in theirs.items():
            old = mine.get(fid)
            if old is None:
                continue
            if (segment is None) == (old[0] is None):
                if value != old[1]:  # two messages, or two objects
                    changed.add(fid)
            elif newer[fid] != self[fid]:
                changed.add(fid)
        return removed, added, changed


def _merged(segments: tuple[Segment, ...]) -> tuple[Segment, ...]:
    """Adjacent object segments joined; past :data:`MAX_SEGMENTS`, everything joined
    into one encoded segment (the bytes concatenate)."""
    out: list[Segment] = []
    for s in segments:
        if out and isinstance(s, tuple) and isinstance(out[-1], tuple):
            out[-1] = out[-1] + s
        else:
            out.append(s)
    if len(out) <= MAX_SEGMENTS:
        return tuple(out)
    runs: list[list[Segment]] = [[]]
    for s in out:
        if isinstance(s, EncodedFragments) and s.stored_ref() is not None:
            runs.extend([[s], []])  # a chunk stays a segment of its own
        else:
            runs[-1].append(s)
    if len(runs) > 1:
        joined: list[Segment] = []
        for run in runs:
            joined.extend(_joined(tuple(run)) if len(run) > 1 else run)
        return tuple(joined)
    return _joined(tuple(out))


def _joined(out: tuple[Segment, ...]) -> tuple[Segment, ...]:
    """``out`` as one encoded segment (the bytes concatenate)."""
    bases = frozenset().union(*(s.bases for s in out if isinstance(s, EncodedFragments)))
    data = b"".join(segment_bytes(s) for s in out)
    count = sum(len(s) for s in out)
    known = [s._rows if isinstance(s, EncodedFragments) else _visible_rows(s) for s in out]
    rows = None if None in known else sum(r for r in known if r is not None)
    first = next((s for s in out if isinstance(s, EncodedFragments)), None)
    # The joined fragments come from several versions: only uniqueness of ids is
    # checked when they are parsed (no one max_fragment_id bounds them).
    return (
        EncodedFragments(
            data, count=count, visible_rows=rows, bases=bases,
            where=first.where if first else "", version=first.version if first else 0,
        ),
    )  # fmt: skip
