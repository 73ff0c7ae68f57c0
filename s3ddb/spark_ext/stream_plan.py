"""What a streaming read of a dataset emits, version by version, and where it stands.

A stream is a sequence of *segments*, one per version: the rows that version appended
(the fragments it added), or, for the first batch of a query started without
``startingVersion`` / ``startingTimestamp``, every visible row of the version it
started at (the *snapshot*). A :class:`StreamOffset` is a position in that sequence:
a version, whether it is the snapshot segment, and how many of the segment's fragments
come before it. Versions are immutable, so the fragments between two offsets are the
same whenever they are asked for: Spark replays a micro-batch after a restart from
the offsets it checkpointed and gets exactly the rows it got the first time.

A version's segment comes from comparing its manifest with the previous version's:

- ``Append`` (and an ``Update`` that only adds fragments: an upsert that only
  inserted) emits the fragments whose ids are new;
- versions that add no rows (compaction ``Rewrite``, ``DataReplacement``, indices,
  configuration, schema changes ``Merge``/``Project``, reserved fragment ids, bases)
  emit nothing;
- versions that delete or change rows (``Delete``, ``Update`` that changes or removes
  rows, ``Overwrite`` of rows, ``Restore``, anything unknown) are *change commits*:
  the stream stops there with :class:`~s3ddb.errors.StreamChangeCommitError`, after
  emitting everything before them, unless ``skipChangeCommits`` is set, in which case
  they emit nothing (not even the rows they added, as Delta Lake does).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import s3ddb
from s3ddb.errors import InvalidInputError, StreamChangeCommitError, VersionNotFoundError
from s3ddb.format.fragment import FragmentMetadata
from s3ddb.format.manifest import Manifest

__all__ = [
    "NO_ROW_KINDS",
    "OFFSET_FORMAT",
    "Segment",
    "StreamOffset",
    "StreamPlanner",
    "fragment_bytes",
    "starting_version_at",
]

#: The ``format`` field of offsets this code writes and reads.
OFFSET_FORMAT = 1

#: Operation kinds that never add, delete or change rows: their versions emit nothing.
NO_ROW_KINDS = frozenset(
    {
        "Rewrite",
        "DataReplacement",
        "CreateIndex",
        "UpdateConfig",
        "ReserveFragments",
        "UpdateBases",
        "UpdateMemWalState",
        "Merge",
        "Project",
    }
)

#: Manifests kept by one planner (a long-running query walks forward, so a small
#: window suffices; each version is compared with its predecessor once).
MANIFEST_CACHE_SIZE = 64


def _non_negative_int(data: Mapping[str, Any], key: str, where: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{where}: {key} must be an integer >= 0, got {value!r}")
    return value


@dataclass(frozen=True, order=True)
class StreamOffset:
    """A position in a stream: the first ``index`` fragments of ``version``'s segment
    (its snapshot if ``snapshot``) and every earlier segment have been emitted."""

    version: int
    snapshot: bool = False
    index: int = 0
    #: The identity of the dataset (``Manifest.dataset_id``) the offset belongs to.
    dataset: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        """The offset as Spark checkpoints it (always the same keys, in one order)."""
        return {
            "format": OFFSET_FORMAT,
            "version": self.version,
            "snapshot": self.snapshot,
            "index": self.index,
            "dataset": self.dataset,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> StreamOffset:
        """An offset read back from a checkpoint (untrusted: it is a file).

        Raises:
            InvalidInputError: not an offset this code wrote, naming ``where``.
        """
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"{where}: a stream offset must be an object, got {data!r}")
        if data.get("format") != OFFSET_FORMAT:
            raise InvalidInputError(
                f"{where}: stream offset format {data.get('format')!r} is not "
                f"{OFFSET_FORMAT}: the checkpoint was written by another s3ddb version "
                "or another source"
            )
        snapshot = data.get("snapshot")
        if not isinstance(snapshot, bool):
            raise InvalidInputError(f"{where}: snapshot must be true or false, got {snapshot!r}")
        version = _non_negative_int(data, "version", where)
        if version < 1:
            raise InvalidInputError(f"{where}: version must be >= 1, got {version}")
        dataset = data.get("dataset", "")
        if not isinstance(dataset, str):
            raise InvalidInputError(f"{where}: dataset must be a string, got {dataset!r}")
        return cls(version, snapshot, _non_negative_int(data, "index", where), dataset)

    def next_segment(self) -> StreamOffset:
        """The start of the segment after this one."""
        return StreamOffset(self.version + 1)


@dataclass(frozen=True)
class Segment:
    """What one version contributes to the stream.

    Attributes:
        version: the version.
        snapshot: this is the version's snapshot (every visible row), not its changes.
        fragments: the fragments to emit, in a fixed order (as of ``version``).
        manifest: the version's manifest (its schema and base paths read them).
        change: why this version is a change commit, or "" if it is not.
    """

    version: int
    snapshot: bool
    fragments: tuple[FragmentMetadata, ...]
    manifest: Manifest
    change: str = ""


def fragment_bytes(fragment: FragmentMetadata) -> int:
    """The bytes of ``fragment``'s data files, as admission control counts them."""
    return sum(f.file_size_bytes for f in fragment.files)


def _changed_rows(previous: Manifest, current: Manifest) -> str:
    """How ``current`` removed or changed fragments ``previous`` had ("" if it did not)."""
    now = {f.id: f for f in current.fragments}
    removed = changed = 0
    for fragment in previous.fragments:
        other = now.get(fragment.id)
        if other is None:
            removed += fragment.physical_rows > 0
        elif other != fragment:
            changed += 1
    parts = []
    if removed:
        parts.append(f"removed {removed} fragment(s)")
    if changed:
        parts.append(f"changed {changed} fragment(s)")
    return " and ".join(parts)


class StreamPlanner:
    """The segments of one dataset, computed from its manifests and cached.

    Raises (from every method that reads versions):
        VersionNotFoundError: a version the stream needs was removed by cleanup.
        DatasetNotFoundError, ExternalStoreError...: the dataset cannot be read.
    """

    def __init__(
        self, uri: str, storage_options: Mapping[str, str], *, skip_change_commits: bool
    ) -> None:
        self._uri = uri
        self._storage_options = dict(storage_options)
        self._skip_change_commits = skip_change_commits
        self._dataset: s3ddb.Dataset | None = None
        self._manifests: dict[int, Manifest] = {}
        self._segments: dict[tuple[int, bool], Segment] = {}

    @property
    def uri(self) -> str:
        return self._uri

    def _open(self) -> s3ddb.Dataset:
        if self._dataset is None:
            self._dataset = s3ddb.dataset(self._uri, storage_options=self._storage_options)
        return self._dataset

    def latest_version(self) -> int:
        """The newest committed version (asks the store).

        Raises:
            DatasetNotFoundError: nothing is committed at the URI (any more).
        """
        return self._open().latest_version

    def manifest(self, version: int) -> Manifest:
        """The manifest of ``version``.

        Raises:
            VersionNotFoundError: it is gone (cleanup) or not committed yet.
            InvalidInputError: it is of another dataset than the one the query opened
                (dropped and re-created at the URI while the query ran).
        """
        found = self._manifests.get(version)
        if found is None:
            try:
                found = self._open().checkout_version(version).manifest
            except VersionNotFoundError as exc:
                raise VersionNotFoundError(
                    f"the stream needs version {version} of {self._uri}, which does not "
                    f"exist (removed by cleanup_old_versions?): {exc.args[0] if exc.args else ''}"
                    " Start a new query (a new checkpoint) with a startingVersion that"
                    " still exists."
                ) from None
            # Version numbers restart in a re-created dataset: compared with the old
            # dataset's versions (cached, or in the checkpoint), its versions would
            # emit rows at positions that mean nothing. Versions from before dataset
            # identities were recorded have none.
            opened = self.dataset_id()
            if found.dataset_id and opened and found.dataset_id != opened:
                raise InvalidInputError(
                    f"version {version} of {self._uri} belongs to dataset {found.dataset_id}, "
                    f"not to dataset {opened} that the stream reads (dropped and re-created "
                    "while the query ran?): start the query with a new checkpoint"
                )
            if len(self._manifests) >= MANIFEST_CACHE_SIZE:
                self._manifests.pop(min(self._manifests))
            self._manifests[version] = found
        return found

    def forget_before(self, version: int) -> None:
        """Drop cached versions older than ``version`` (Spark is done with them)."""
        for v in [v for v in self._manifests if v < version - 1]:
            del self._manifests[v]
        for key in [k for k in self._segments if k[0] < version]:
            del self._segments[key]

    def segment(self, version: int, snapshot: bool) -> Segment:
        """What ``version`` contributes (its snapshot if ``snapshot``).

        Raises:
            VersionNotFoundError, InvalidInputError: as :meth:`manifest`, for
                ``version`` or the one before it.
        """
        key = (version, snapshot)
        found = self._segments.get(key)
        if found is None:
            found = self._plan_segment(version, snapshot)
            if len(self._segments) >= MANIFEST_CACHE_SIZE:
                self._segments.pop(min(self._segments))
            self._segments[key] = found
        return found

    def _plan_segment(self, version: int, snapshot: bool) -> Segment:
        current = self.manifest(version)
        if snapshot or version == 1:
            rows = tuple(f for f in current.fragments if f.physical_rows > 0)
            return Segment(version, snapshot, rows, current)
        kind = current.operation
        if kind in NO_ROW_KINDS:
            return Segment(version, False, (), current)
        previous = self.manifest(version - 1)
        first_new = previous.next_fragment_id()
        added = tuple(f for f in current.fragments if f.id >= first_new and f.physical_rows > 0)
        changed = _changed_rows(previous, current)
        if kind == "Overwrite" and previous.num_rows == 0:
            changed = ""  # replacing an empty version deletes no row
            added = tuple(f for f in current.fragments if f.physical_rows > 0)
        elif kind not in ("Append", "Update", "Overwrite"):
            changed = changed or f"{kind} is not an append"
        if not changed:
            return Segment(version, False, added, current)
        # Emitted by neither choice: refused, or skipped whole (as Delta Lake does).
        reason = f"version {version} of {self._uri} ({kind}) {changed}"
        return Segment(version, False, (), current, change=reason)

    def check_not_change(self, segment: Segment) -> None:
        """Raise if ``segment`` is a change commit the stream must stop at.

        Raises:
            StreamChangeCommitError: it is, and ``skipChangeCommits`` is not set.
        """
        if segment.change and not self._skip_change_commits:
            raise StreamChangeCommitError(
                f"{segment.change}: a stream of appended rows cannot follow deletes or "
                "updates. Set option skipChangeCommits=true to skip such versions (their "
                "rows are then not emitted), or start a new query (a new checkpoint) with "
                f"startingVersion {segment.version + 1} or later."
            )

    def dataset_id(self) -> str:
        """The dataset's identity, as offsets record it."""
        return self._open().manifest.dataset_id

    def _check_index(self, position: StreamOffset, segment: Segment) -> None:
        if position.index > len(segment.fragments):
            raise InvalidInputError(
                f"stream offset {position} is past the {len(segment.fragments)} fragment(s) "
                f"version {position.version} of {self._uri} emits: the checkpoint belongs "
                "to another dataset"
            )

    def advance(
        self,
        start: StreamOffset,
        last_version: int,
        max_files: int | None = None,
        max_bytes: int | None = None,
    ) -> StreamOffset:
        """The end offset of the next micro-batch from ``start``: as far as
        ``last_version`` goes, within ``max_files`` fragments and (softly: at least one
        fragment) ``max_bytes`` bytes. It stops before a change commit; when ``start``
        is at one, it raises.

        Raises:
            StreamChangeCommitError: ``start`` is at a change commit.
        """
        position = start
        files = size = 0
        while position.version <= last_version:
            segment = self.segment(position.version, position.snapshot)
            if segment.change and not self._skip_change_commits:
                if position == start:
                    self.check_not_change(segment)
                return position
            self._check_index(position, segment)
            for i in range(position.index, len(segment.fragments)):
                cost = fragment_bytes(segment.fragments[i])
                full = max_files is not None and files >= max_files
                if not full and max_bytes is not None and files:
                    full = size + cost > max_bytes
                if full:
                    return StreamOffset(position.version, position.snapshot, i)
                files += 1
                size += cost
            position = position.next_segment()
        return position

    def between(
        self, start: StreamOffset, end: StreamOffset
    ) -> Iterator[tuple[Segment, FragmentMetadata]]:
        """The fragments from ``start`` up to ``end``, in stream order, each with its
        segment. The same for the same offsets, whenever it is asked.

        Raises:
            InvalidInputError: ``end`` is before ``start``.
            StreamChangeCommitError: a change commit lies between them (only if the
                option changed since they were planned).
        """
        if end < start:
            raise InvalidInputError(f"stream offset {end} is before {start} of {self._uri}")
        position = start
        while position < end:
            segment = self.segment(position.version, position.snapshot)
            self.check_not_change(segment)
            self._check_index(position, segment)
            stop = len(segment.fragments)
            if (end.version, end.snapshot) == (position.version, position.snapshot):
                stop = min(stop, end.index)
            for fragment in segment.fragments[position.index : stop]:
                yield segment, fragment
            if stop < len(segment.fragments):
                return
            position = position.next_segment()


def starting_version_at(uri: str, storage_options: Mapping[str, str], when: str) -> int:
    """The first version of ``uri`` committed at or after ``when`` (ISO 8601; UTC
    without a time zone); the version after the newest if none was.

    Raises:
        InvalidInputError: ``when`` is unreadable.
    """
    try:
        moment = dt.datetime.fromisoformat(when.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(
            f"option startingTimestamp must be ISO 8601 text, got {when!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    history = s3ddb.dataset(uri, storage_options=dict(storage_options)).versions()
    later = [v.version for v in history if v.timestamp >= moment]
    if later:
        return min(later)
    return max((v.version for v in history), default=0) + 1
