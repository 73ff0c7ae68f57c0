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

A query reads its columns by field id (:class:`QueryColumns`), as the batch reader
does: a renamed column is the same column; a version from before a column was added
reads it as nulls. A version the query's columns cannot be read from (a column whose
type changed, one dropped while the query ran) stops the stream before it, with
:class:`~s3ddb.errors.SchemaMismatchError` saying what to do.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.errors import (
    DatasetNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    StreamChangeCommitError,
    VersionNotFoundError,
)
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.operations import Changes, Overwrite
from s3ddb.operations.kinds import kinds_that_change
from s3ddb.writes.schema_evolution import is_safe_cast

__all__ = [
    "APPENDING_KINDS",
    "NO_ROW_KINDS",
    "OFFSET_FORMAT",
    "QueryColumns",
    "Segment",
    "StreamOffset",
    "StreamPlanner",
    "fragment_bytes",
    "starting_version_at",
]

#: The ``format`` field of offsets this code writes and reads.
OFFSET_FORMAT = 1

#: Operation kinds that never add, delete or change rows: their versions emit nothing
#: (derived from each operation class's ``changes``).
NO_ROW_KINDS = kinds_that_change(Changes.NOTHING, Changes.SCHEMA)

#: Operation kinds that add rows: their versions emit the fragments they added when
#: they deleted and changed no row; any other kind's version is a change commit.
APPENDING_KINDS = kinds_that_change(Changes.APPENDS)

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


@dataclass(frozen=True)
class QueryColumns:
    """The columns a query reads, by field id, resolved once per query (its first
    planning) on the newest version then, ``version``.

    Attributes:
        names: the query's column names, in order.
        ids: their field ids (the same column whatever it is named in a version).
        types: their Arrow types as of ``version``.
        nullable: whether the query's schema lets each hold nulls.
        version: the version they were resolved on.
    """

    names: tuple[str, ...]
    ids: tuple[int, ...]
    types: tuple[pa.DataType, ...]
    nullable: tuple[bool, ...]
    version: int

    @classmethod
    def resolve(
        cls, names: Sequence[str], nullable: Sequence[bool], manifest: Manifest, uri: str
    ) -> QueryColumns:
        """The query's columns ``names`` found by name in ``manifest``'s schema.

        Raises:
            SchemaMismatchError: a name is not a column of that version.
        """
        arrow = manifest.schema.arrow
        missing = [n for n in names if n not in arrow.names]
        if missing:
            raise SchemaMismatchError(
                f"the stream reads column(s) {missing} that version {manifest.version} of "
                f"{uri} does not have (its columns are {arrow.names}): restart the query "
                "to read with the dataset's schema, or give a schema naming its columns"
            )
        return cls(
            tuple(names),
            tuple(manifest.schema.top_level_ids(list(names))),
            tuple(arrow.field(n).type for n in names),
            tuple(nullable),
            manifest.version,
        )


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
        # columns_in's answers, by (query's resolved version, its field ids, version).
        self._names: dict[tuple[int, tuple[int, ...], int], tuple[str | None, ...]] = {}

    @property
    def uri(self) -> str:
        return self._uri

    def _open(self) -> s3ddb.Dataset:
        if self._dataset is None:
            self._dataset = s3ddb.dataset(self._uri, storage_options=self._storage_options)
        return self._dataset

    def latest_version(self) -> int:
        """The newest committed version (asks the store), checked to be of the dataset
        the planner opened: every call reads the newest version's identity (from the
        external store's row, or else its manifest), so a dataset dropped and
        re-created at the URI is noticed whatever its versions' numbers.

        Raises:
            DatasetNotFoundError: nothing is committed at the URI (any more).
            InvalidInputError: the newest version is of another dataset (dropped and
                re-created while the query ran).
        """
        opened = self._open()
        location = opened.handler.latest_location()
        if location is None:
            raise DatasetNotFoundError(
                f"nothing is committed at {self._uri} any more (was the dataset dropped?)"
            )
        identity = location.dataset_id
        if not identity:
            # Not recorded in a row (a store without one, or a listed version): the
            # manifest says, read afresh (the cache is by version number, which a
            # re-created dataset reuses).
            identity = opened.checkout_version(location.version).manifest.dataset_id
        self._check_identity(identity, location.version)
        return location.version

    def checked_offset(self, data: Any, what: str) -> StreamOffset:
        """An offset Spark hands back (``what``: "start", "end"...), parsed and checked
        to be of the dataset this planner reads.

        Raises:
            InvalidInputError: malformed, or of another dataset (one re-created at the
                same URI: the checkpoint's positions mean nothing in it).
        """
        offset = StreamOffset.from_json(data, f"the {what} offset of {self._uri}")
        current = self.dataset_id()
        if offset.dataset and current and offset.dataset != current:
            raise InvalidInputError(
                f"the stream's checkpoint was written for dataset {offset.dataset} but "
                f"{self._uri} is now dataset {current} (dropped and re-created?): start "
                "the query with a new checkpoint"
            )
        return offset

    def oldest_version(self) -> int:
        """The oldest version still kept (cleanup removes older ones)."""
        return min(v.version for v in self._open().versions())

    def _check_identity(self, identity: str, version: int) -> None:
        # Version numbers restart in a re-created dataset: compared with the old
        # dataset's versions (cached, or in the checkpoint), its versions would emit
        # rows at positions that mean nothing. Versions from before dataset
        # identities were recorded have none.
        opened = self.dataset_id()
        if identity and opened and identity != opened:
            raise InvalidInputError(
                f"version {version} of {self._uri} belongs to dataset {identity}, not to "
                f"dataset {opened} that the stream reads (dropped and re-created while the "
                "query ran?): start the query with a new checkpoint"
            )

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
            self._check_identity(found.dataset_id, version)
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
        for names in [k for k in self._names if k[2] < version]:
            del self._names[names]

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
        if kind == Overwrite.kind and previous.num_rows == 0:
            changed = ""  # replacing an empty version deletes no row
            added = tuple(f for f in current.fragments if f.physical_rows > 0)
        elif kind not in APPENDING_KINDS:
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

    def columns_in(self, query: QueryColumns, version: int) -> tuple[str | None, ...]:
        """The names ``query``'s columns have in ``version`` (matched by field id, so a
        renamed column is found under its name then), None for a column added after
        ``version`` (read as nulls).

        Raises:
            SchemaMismatchError: ``version`` cannot be read with the query's columns: a
                column's type differs (changed by ``alter_columns``), a column the
                query reads was dropped after the query resolved its columns, or a
                column added after ``version`` cannot hold nulls. The message says
                from which version on the stream can read, and how to go on.
            VersionNotFoundError, InvalidInputError: as :meth:`manifest`.
        """
        key = (query.version, query.ids, version)
        known = self._names.get(key)
        if known is None:
            known = self._columns_in(query, version)
            if len(self._names) >= MANIFEST_CACHE_SIZE:
                self._names.pop(min(self._names, key=lambda k: k[2]))
            self._names[key] = known
        return known

    def _columns_in(self, query: QueryColumns, version: int) -> tuple[str | None, ...]:
        schema = self.manifest(version).schema
        names = {i: p[0] for p, i in schema.ids if len(p) == 1}
        found: list[str | None] = []
        for name, fid, kind, nullable in zip(
            query.names, query.ids, query.types, query.nullable, strict=True
        ):
            here = names.get(fid)
            if here is not None:
                have = schema.arrow.field(here).type
                if not have.equals(kind):
                    raise SchemaMismatchError(
                        f"column {name!r} of {self._uri} is {have} in version {version} but "
                        f"{kind} in version {query.version}, whose schema the stream reads: "
                        f"{self._retyped_advice(version, query.version)}"
                    )
                found.append(here)
            elif version < query.version:
                found.append(
                    self._added_since(name, fid, kind, nullable, version, query.version, names)
                )
            else:
                self._raise_gone(name, fid, query.version, version)
        return tuple(found)

    def _flip(self, field_id: int, low: int, high: int) -> int:
        """The first version after ``low``, up to ``high``, that has field ``field_id``
        as ``high`` has it (present or not); ``low`` has it the other way. A field id,
        once added, stays until dropped, and is not given to another column while data
        files hold it, so its presence flips once between them."""

        def has(v: int) -> bool:
            return any(i == field_id for p, i in self.manifest(v).schema.ids if len(p) == 1)

        want = has(high)
        while high - low > 1:
            middle = (low + high) // 2
            if has(middle) == want:
                high = middle
            else:
                low = middle
        return high

    def _top_ids(self, version: int) -> set[int]:
        return {i for p, i in self.manifest(version).schema.ids if len(p) == 1}

    def _retyped_advice(self, version: int, resolved: int) -> str:
        if version < resolved:
            return (
                f"versions up to {version} hold the column with its old type. Read them "
                "with a batch read (option version), and stream the rest from a new query "
                "(a new checkpoint) with startingVersion after the type change"
            )
        return (
            "the stream stopped before that version, with every row before it emitted. "
            "Restart the query (from the same checkpoint): it then reads with the new type"
        )

    def _added_since(
        self,
        name: str,
        field_id: int,
        kind: pa.DataType,
        nullable: bool,
        version: int,
        resolved: int,
        names: dict[int, str],
    ) -> str | None:
        """What ``version`` holds of column ``name``, which it lacks and ``resolved``
        has: None (read as nulls) when the column was added since and may hold nulls;
        the name of the column it replaced, when ``alter_columns`` gave that one a
        type every old value converts to exactly (int32 to int64, float32 to float64,
        string to large_string...), its values then cast to the new type.

        ``names`` maps ``version``'s top-level field ids to their names.

        Raises:
            SchemaMismatchError: it replaced a column whose values do not all convert,
                or is NOT NULL.
        """
        added_at = self._flip(field_id, version, resolved)
        replaced = self._top_ids(added_at - 1) - self._top_ids(added_at)
        if not replaced and nullable:
            return None
        old_id = self._replaced_by(field_id, replaced, added_at)
        if old_id is not None and old_id in names:
            old = self.manifest(version).schema.arrow.field(names[old_id])
            # NOT NULL now: only from a column that could not hold nulls then either
            # (rows with nulls may have been deleted before the change).
            if is_safe_cast(old.type, kind) and (nullable or not old.nullable):
                return old.name
        why = (
            f"replaced another column at version {added_at} (a type change by "
            "alter_columns, or an overwrite), and the stream cannot tell that every value "
            "of the column it replaced converts to its type exactly"
            if replaced
            else f"was added NOT NULL at version {added_at}"
        )
        raise SchemaMismatchError(
            f"column {name!r} of {self._uri}, which the stream reads, {why}: version {version} "
            f"has no values of it the stream can emit. Read the versions before {added_at} "
            "with a batch read (option version), and stream the rest from a new query (a "
            f"new checkpoint) with startingVersion {added_at}"
        )

    def _replaced_by(self, field_id: int, replaced: set[int], added_at: int) -> int | None:
        """Which of the ``replaced`` field ids (gone at ``added_at``) column
        ``field_id`` (new at ``added_at``) is the same column as, retyped in place
        by ``alter_columns``: the same fragments before and after (a type change
        rewrites each fragment's column, an overwrite replaces the fragments), and the
        id at the same position of the schema before. None if not proven so."""
        before, after = self.manifest(added_at - 1), self.manifest(added_at)
        if [f.id for f in before.fragments] != [f.id for f in after.fragments]:
            return None
        position = _top_level_ids(after).index(field_id)
        old_ids = _top_level_ids(before)
        if position >= len(old_ids) or old_ids[position] not in replaced:
            return None
        return old_ids[position]

    def _raise_gone(self, name: str, field_id: int, resolved: int, version: int) -> None:
        """Raise for column ``name``, which ``resolved`` had and ``version`` lacks.

        Raises:
            SchemaMismatchError: always, saying when it went and what to do.
        """
        gone_at = self._flip(field_id, resolved, version)
        retyped = self._top_ids(gone_at) - self._top_ids(gone_at - 1)
        how = "got a new type (alter_columns)" if retyped else "was dropped"
        raise SchemaMismatchError(
            f"column {name!r} of {self._uri}, which the stream reads, {how} at version "
            f"{gone_at}: the stream stopped before the first version after it that adds "
            f"rows ({version}), with every row before it emitted. Restart the query (from "
            "the same checkpoint): it then reads with the dataset's schema as of the restart"
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
        readable: Callable[[Segment], object] | None = None,
    ) -> StreamOffset:
        """The end offset of the next micro-batch from ``start``: as far as
        ``last_version`` goes, within ``max_files`` fragments and (softly: at least one
        fragment) ``max_bytes`` bytes. It stops before a change commit, and before a
        segment with rows for which ``readable`` raises SchemaMismatchError; when
        ``start`` is at one, it raises.

        Raises:
            StreamChangeCommitError: ``start`` is at a change commit.
            SchemaMismatchError: ``readable`` refuses ``start``'s segment.
        """
        position = start
        files = size = 0
        while position.version <= last_version:
            segment = self.segment(position.version, position.snapshot)
            if segment.change and not self._skip_change_commits:
                if position == start:
                    self.check_not_change(segment)
                return position
            if readable is not None and segment.fragments:
                try:
                    readable(segment)
                except SchemaMismatchError:
                    if position == start:
                        raise
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


def _top_level_ids(manifest: Manifest) -> list[int]:
    """The field ids of ``manifest``'s top-level columns, in the schema's order."""
    by_name = {p[0]: i for p, i in manifest.schema.ids if len(p) == 1}
    return [by_name[name] for name in manifest.schema.arrow.names]
