"""Stable row ids and row versions of a fragment (format 3, docs/format.md).

A dataset written with ``enable_stable_row_ids=True`` gives every row an id when it
is first written (from the manifest's ``next_row_id``), which the row keeps while it
lives: through deletes of other rows, updates of its values (the updated row may
move to another fragment), compaction and schema changes. Each row also records the
version that created it and the version that last changed its values.

Each fragment stores, for its physical rows in order:

* ``row_id_sequence``: the ids, as a stream of unsigned LEB128 varints: the encoding
  version (1), then segments, each a tag and its values:

  - ``0 start count``: the ids ``start .. start+count-1`` (a range);
  - ``1 count first gap...``: ``count`` ascending ids, the first, then each one's
    distance to the one before minus one (``count - 1`` gaps);
  - ``2 count``: ``count`` ids not allocated yet (only in a commit being built, never
    in a stored manifest).

  A writer cuts the ids where they stop ascending; an ascending piece of consecutive
  ids is a range, any other piece a list: a fragment written at once is one range.
* ``row_created_at_versions`` and ``row_last_updated_at_versions``: runs, as varints:
  the encoding version (1), then ``count version`` pairs. Version 0 means the version
  that commits it (only in a commit being built).

What is read from storage is checked before it is used: the encoding's size is
bounded by the fragment's rows, it must hold exactly one value per physical row,
ids and versions must be in range (:class:`~s3ddb.errors.StoredMetadataError`
otherwise, naming the fragment).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from s3ddb.errors import StoredMetadataError

if TYPE_CHECKING:
    from s3ddb.format.fragment_metadata import FragmentMetadata

__all__ = [
    "PENDING_ID",
    "PENDING_VERSION",
    "ROW_ADDRESS_COLUMNS",
    "ROW_CREATED_AT_VERSION",
    "ROW_ID",
    "ROW_LAST_UPDATED_AT_VERSION",
    "RowLineage",
    "check_row_ids",
    "check_versions",
    "decode_row_ids",
    "decode_versions",
    "encode_row_ids",
    "encode_versions",
    "resolve_lineage",
]

#: The columns a read of a dataset with stable row ids may ask for (Lance's names).
ROW_ID = "_rowid"
ROW_CREATED_AT_VERSION = "_row_created_at_version"
ROW_LAST_UPDATED_AT_VERSION = "_row_last_updated_at_version"
ROW_ADDRESS_COLUMNS = (ROW_ID, ROW_CREATED_AT_VERSION, ROW_LAST_UPDATED_AT_VERSION)

#: An id not allocated yet (in memory: -1) and the version that commits (0).
PENDING_ID = -1
PENDING_VERSION = 0

_ENCODING = 1
_RANGE, _LIST, _PENDING = 0, 1, 2
#: Ids and versions stay below 2**63 (nine 7-bit bytes): they fit an int64.
_MAX_VARINT_BYTES = 9
_LIMIT = 1 << 63


def _varints(data: bytes, where: str) -> np.ndarray:
    """Every varint of ``data``, decoded (vectorised), as uint64.

    Raises:
        StoredMetadataError: a varint is cut short or longer than nine bytes.
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0:
        return np.empty(0, dtype=np.uint64)
    if raw[-1] & 0x80:
        raise StoredMetadataError(f"{where}: a varint is cut short")
    ends = np.flatnonzero(raw < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    longest = int(lengths.max())
    if longest > _MAX_VARINT_BYTES:
        raise StoredMetadataError(f"{where}: a value of {longest} bytes is out of range")
    out = np.zeros(ends.size, dtype=np.uint64)
    for k in range(longest):
        sel = lengths > k
        part = (raw[starts[sel] + k] & 0x7F).astype(np.uint64)
        out[sel] |= part << np.uint64(7 * k)
    return out


def _encode_varints(values: np.ndarray) -> bytes:
    """``values`` (non-negative, below 2**63) as varints (vectorised)."""
    v = np.asarray(values, dtype=np.uint64)
    if v.size == 0:
        return b""
    sizes = np.ones(v.size, dtype=np.int64)
    for k in range(1, _MAX_VARINT_BYTES):
        sizes += (v >> np.uint64(7 * k)) > 0
    offsets = np.cumsum(sizes) - sizes
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    for k in range(int(sizes.max())):
        sel = sizes > k
        byte = (v[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = np.where(sizes[sel] > k + 1, 0x80, 0).astype(np.uint64)
        out[offsets[sel] + k] = (byte | more).astype(np.uint8)
    return out.tobytes()


def encode_row_ids(ids: np.ndarray) -> bytes:
    """The ``row_id_sequence`` of ``ids`` (int64, one per physical row in order;
    :data:`PENDING_ID` for ids to allocate at commit)."""
    ids = np.asarray(ids, dtype=np.int64)
    values: list[np.ndarray] = [np.array([_ENCODING], dtype=np.uint64)]
    # Cut where ids stop ascending, and around pending stretches.
    pending = ids == PENDING_ID
    cuts = np.flatnonzero((np.diff(ids) <= 0) | (pending[1:] != pending[:-1])) + 1
    for piece, is_pending in zip(np.split(ids, cuts), np.split(pending, cuts), strict=True):
        if piece.size == 0:
            continue
        if is_pending[0]:
            values.append(np.array([_PENDING, piece.size], dtype=np.uint64))
        elif int(piece[-1]) - int(piece[0]) + 1 == piece.size:
            values.append(np.array([_RANGE, piece[0], piece.size], dtype=np.uint64))
        else:
            gaps = np.diff(piece) - 1
            head = np.array([_LIST, piece.size, piece[0]], dtype=np.uint64)
            values.append(np.concatenate([head, gaps.astype(np.uint64)]))
    return _encode_varints(np.concatenate(values))


def _bound_size(data: bytes, rows: int, per_row: int, what: str, where: str) -> None:
    if len(data) > per_row * rows + 32:
        raise StoredMetadataError(
            f"{where}: {what} of {len(data)} bytes is too large for {rows} rows"
        )


def _row_id_segments(
    data: bytes, rows: int, where: str, pending_ok: bool
) -> list[tuple[int, int, np.ndarray | None]]:
    """The segments of a ``row_id_sequence``: (tag, count, values of a list), checked.

    Raises:
        StoredMetadataError: see :func:`check_row_ids`.
    """
    what = "row_id_sequence"
    _bound_size(data, rows, 10, what, where)
    v = _varints(data, f"{where}: {what}")
    if v.size == 0 or int(v[0]) != _ENCODING:
        raise StoredMetadataError(f"{where}: {what} has an unknown encoding")
    segments: list[tuple[int, int, np.ndarray | None]] = []
    total, i = 0, 1
    while i < v.size:
        tag = int(v[i])
        if tag == _RANGE and i + 2 < v.size:
            start, count = int(v[i + 1]), int(v[i + 2])
            if start + count > _LIMIT:
                raise StoredMetadataError(f"{where}: {what} has ids out of range")
            segments.append((tag, count, np.array([start], dtype=np.int64)))
            i += 3
        elif tag == _LIST and i + 2 < v.size:
            count = int(v[i + 1])
            if count < 1 or i + 2 + count > v.size:
                raise StoredMetadataError(f"{where}: {what} has a list cut short")
            first, gaps = v[i + 2], v[i + 3 : i + 2 + count]
            # In floats first: a sum of planted gaps must not wrap around.
            if float(first) + float(gaps.astype(np.float64).sum()) + count >= _LIMIT:
                raise StoredMetadataError(f"{where}: {what} has ids out of range")
            steps = np.concatenate(([first], gaps + np.uint64(1)))
            ids = np.cumsum(steps).astype(np.int64)
            segments.append((tag, count, ids))
            i += 2 + count
        elif tag == _PENDING and pending_ok and i + 1 < v.size:
            count = int(v[i + 1])
            segments.append((tag, count, None))
            i += 2
        else:
            raise StoredMetadataError(f"{where}: {what} has a malformed segment (tag {tag})")
        if count < 1:
            raise StoredMetadataError(f"{where}: {what} has an empty segment")
        total += count
        if total > rows:
            break
    if total != rows:
        held = f"more than {rows}" if total > rows else str(total)
        raise StoredMetadataError(f"{where}: {what} holds {held} ids for {rows} physical rows")
    return segments


def check_row_ids(data: bytes, rows: int, where: str, pending_ok: bool = False) -> int:
    """Check a fragment's ``row_id_sequence`` for its ``rows`` physical rows, without
    materialising its ranges, and return one above its highest id (0 if none).

    Raises:
        StoredMetadataError: larger than 10 bytes a row, an unknown encoding or
            segment, ids out of range, a count other than ``rows``, or ids not yet
            allocated (unless ``pending_ok``); the message names ``where``.
    """
    top = 0
    for tag, count, values in _row_id_segments(data, rows, where, pending_ok):
        if tag == _RANGE and values is not None:
            top = max(top, int(values[0]) + count)
        elif tag == _LIST and values is not None:
            top = max(top, int(values[-1]) + 1)
    return top


def decode_row_ids(data: bytes, rows: int, where: str, pending_ok: bool = False) -> np.ndarray:
    """The ids (int64, one per physical row; :data:`PENDING_ID` where not allocated).

    Raises:
        StoredMetadataError: as :func:`check_row_ids`.
    """
    parts = []
    for tag, count, values in _row_id_segments(data, rows, where, pending_ok):
        if tag == _RANGE and values is not None:
            parts.append(np.arange(int(values[0]), int(values[0]) + count, dtype=np.int64))
        elif tag == _LIST and values is not None:
            parts.append(values)
        else:
            parts.append(np.full(count, PENDING_ID, dtype=np.int64))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def encode_versions(versions: np.ndarray) -> bytes:
    """Row versions (one per physical row; :data:`PENDING_VERSION` for the version
    that commits) as runs of ``count version``."""
    v = np.asarray(versions, dtype=np.int64)
    if v.size == 0:
        return _encode_varints(np.array([_ENCODING], dtype=np.uint64))
    starts = np.concatenate(([0], np.flatnonzero(np.diff(v) != 0) + 1))
    counts = np.diff(np.concatenate((starts, [v.size])))
    pairs = np.empty(2 * starts.size, dtype=np.uint64)
    pairs[0::2] = counts
    pairs[1::2] = v[starts]
    return _encode_varints(np.concatenate(([np.uint64(_ENCODING)], pairs)))


def _version_runs(data: bytes, rows: int, where: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    _bound_size(data, rows, 20, what, where)
    v = _varints(data, f"{where}: {what}")
    if v.size == 0 or int(v[0]) != _ENCODING or v.size % 2 == 0:
        raise StoredMetadataError(f"{where}: {what} is malformed")
    counts, versions = v[1::2], v[2::2]
    if counts.size and int(counts.min()) < 1:
        raise StoredMetadataError(f"{where}: {what} has an empty run")
    total = int(counts.astype(np.float64).sum())
    if total != rows:
        raise StoredMetadataError(f"{where}: {what} covers {total} rows, not {rows}")
    return counts.astype(np.int64), versions.astype(np.int64)


def check_versions(
    data: bytes, rows: int, where: str, what: str, latest: int | None, pending_ok: bool = False
) -> None:
    """Check row version runs for ``rows`` physical rows: at most 20 bytes a row,
    exactly ``rows`` rows, every version >= 1 (0 too if ``pending_ok``) and, with
    ``latest``, at most it.

    Raises:
        StoredMetadataError: naming ``where`` and ``what``.
    """
    _counts, versions = _version_runs(data, rows, where, what)
    lowest = 0 if pending_ok else 1
    if versions.size and (
        int(versions.min()) < lowest or (latest is not None and int(versions.max()) > latest)
    ):
        raise StoredMetadataError(
            f"{where}: {what} names version {int(versions.min())}..{int(versions.max())}, "
            f"outside 1..{latest}"
        )


def decode_versions(data: bytes, rows: int, where: str, what: str) -> np.ndarray:
    """Row versions, one per physical row (int64).

    Raises:
        StoredMetadataError: malformed runs, or not ``rows`` rows.
    """
    counts, versions = _version_runs(data, rows, where, what)
    return np.repeat(versions, counts)


@dataclass(frozen=True)
class RowLineage:
    """The ids and versions of some rows, one entry per row (int64 arrays)."""

    ids: np.ndarray
    created: np.ndarray
    updated: np.ndarray

    @classmethod
    def of(cls, fragment: FragmentMetadata) -> RowLineage:
        """``fragment``'s rows' lineage; rows without one are pending (allocated, and
        stamped with the committing version, at commit).

        Raises:
            StoredMetadataError: its stored lineage is malformed.
        """
        rows, where = fragment.physical_rows, f"fragment {fragment.id}"
        pending = np.full(rows, PENDING_ID, dtype=np.int64)
        ids = decode_row_ids(fragment.row_ids, rows, where, True) if fragment.row_ids else pending
        fresh = np.zeros(rows, dtype=np.int64)
        created = (
            decode_versions(fragment.created_at, rows, where, "row_created_at_versions")
            if fragment.created_at
            else fresh
        )
        updated = (
            decode_versions(fragment.updated_at, rows, where, "row_last_updated_at_versions")
            if fragment.updated_at
            else fresh
        )
        return cls(ids, created, updated)

    @classmethod
    def pending(cls, rows: int) -> RowLineage:
        """``rows`` new rows: ids allocated and versions stamped at commit."""
        return cls(
            np.full(rows, PENDING_ID, dtype=np.int64),
            np.zeros(rows, dtype=np.int64),
            np.zeros(rows, dtype=np.int64),
        )

    @classmethod
    def concat(cls, parts: list[RowLineage]) -> RowLineage:
        if not parts:
            return cls.pending(0)
        return cls(
            np.concatenate([p.ids for p in parts]),
            np.concatenate([p.created for p in parts]),
            np.concatenate([p.updated for p in parts]),
        )

    def take(self, positions: np.ndarray) -> RowLineage:
        return RowLineage(self.ids[positions], self.created[positions], self.updated[positions])

    def touched(self) -> RowLineage:
        """These rows with their values changed by the committing version."""
        return RowLineage(self.ids, self.created, np.zeros_like(self.updated))

    def __len__(self) -> int:
        return int(self.ids.size)

    @classmethod
    def of_rows(cls, fragment: FragmentMetadata, offsets: Iterable[int]) -> RowLineage:
        """The lineage of ``fragment``'s physical rows at ``offsets`` (ascending)."""
        at = np.fromiter(offsets, dtype=np.int64)
        return cls.of(fragment).take(at)

    def spread(self, fragments: Sequence[FragmentMetadata]) -> list[FragmentMetadata]:
        """``fragments``, written from these rows in order, each carrying its rows'
        lineage.

        Raises:
            ValueError: the fragments hold another number of rows.
        """
        total = sum(f.physical_rows for f in fragments)
        if total != len(self):
            raise ValueError(f"lineage of {len(self)} rows for fragments of {total}")
        out, start = [], 0
        for fragment in fragments:
            end = start + fragment.physical_rows
            part = RowLineage(self.ids[start:end], self.created[start:end], self.updated[start:end])
            out.append(part.on(fragment))
            start = end
        return out

    def on(self, fragment: FragmentMetadata) -> FragmentMetadata:
        """``fragment`` (of as many physical rows) carrying this lineage."""
        if len(self) != fragment.physical_rows:
            raise ValueError(
                f"lineage of {len(self)} rows for fragment {fragment.id} of "
                f"{fragment.physical_rows}"
            )
        return replace(
            fragment,
            row_ids=encode_row_ids(self.ids),
            created_at=encode_versions(self.created),
            updated_at=encode_versions(self.updated),
        )


def resolve_lineage(
    fragment: FragmentMetadata, next_row_id: int, version: int
) -> tuple[FragmentMetadata, int]:
    """``fragment`` with its pending ids allocated from ``next_row_id`` (in row
    order) and its pending versions stamped ``version``; and the next free id.

    Raises:
        StoredMetadataError: its lineage is malformed.
    """
    lineage = RowLineage.of(fragment)
    ids = lineage.ids.copy()
    pending = ids == PENDING_ID
    count = int(pending.sum())
    ids[pending] = np.arange(next_row_id, next_row_id + count, dtype=np.int64)
    created = np.where(lineage.created == PENDING_VERSION, version, lineage.created)
    updated = np.where(lineage.updated == PENDING_VERSION, version, lineage.updated)
    return RowLineage(ids, created, updated).on(fragment), next_row_id + count
