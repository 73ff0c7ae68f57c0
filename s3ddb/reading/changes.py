"""The change feed: every row change of a range of versions (``Dataset.changes``).

A version's row changes are found by comparing its manifest with the one before it,
fragment by fragment, and reading only what differs:

* a fragment in both versions with the same data files and deletion file: nothing
  (never opened);
* the same data files, another deletion file: the offsets deleted since are
  ``delete`` rows, their old values read by position (only the row groups holding
  them); offsets no longer deleted (only a restore brings rows back) are ``insert``
  rows;
* other data files at the same positions (an update that rewrote columns in place):
  the rows whose values differ are a ``delete`` of the old row and an ``insert`` of
  the new one;
* a fragment only in the version before: its visible rows are ``delete`` rows;
* a fragment only in the version: its visible rows are ``insert`` rows.

Versions whose operation changes no row (:data:`NO_ROW_KINDS`: compaction, which
moves rows to new fragments unchanged, indices, configuration, schema changes) add
nothing and are not read. An overwrite or a restore deletes every row the version
before showed and inserts every row it shows (:data:`REPLACING_KINDS`).

Rows carry the columns of the range's last version, matched by field id (a renamed
column keeps its values under its new name); a column the version of a change did not
have (added later, or given a new field id by a type change) reads as null, a column
dropped by the last version is absent.

Without stable row ids an update is a ``delete`` of the old row and an ``insert`` of
the new one. With them, :func:`pair_updates`, the one place a version's deletes and
inserts meet, makes the delete and the insert of one ``_rowid`` in an ``Update``
version (``update``, ``merge_insert``) or a ``DataReplacement`` (values changed in
place) its ``update_preimage`` and ``update_postimage``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from s3ddb.arguments import check_int
from s3ddb.commit.committer import load_transaction
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.errors import InvalidInputError, StoredMetadataError, VersionNotFoundError
from s3ddb.format.bases import FileResolver
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_lineage import RowLineage
from s3ddb.format.schema import DatasetSchema
from s3ddb.operations import Changes, DataReplacement, Overwrite, Restore, Update
from s3ddb.operations.kinds import kinds_that_change
from s3ddb.scan.visible_rows import (
    plan_fragment,
    read_rows_at,
    read_visible_rows,
    read_with_positions,
)
from s3ddb.versions.opening import load_version, placeholder_manifest
from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "DELETE",
    "INSERT",
    "NO_ROW_KINDS",
    "REPLACING_KINDS",
    "UPDATE_POSTIMAGE",
    "UPDATE_PREIMAGE",
    "change_schema",
    "change_tables",
    "pair_updates",
    "version_change_tables",
    "version_changes",
]

#: The columns every change row has besides the dataset's (Delta's names).
CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"

INSERT = "insert"
DELETE = "delete"
#: Only with stable row ids: an update's old and new row (of one ``_rowid``).
UPDATE_PREIMAGE = "update_preimage"
UPDATE_POSTIMAGE = "update_postimage"
CHANGE_TYPES = (INSERT, UPDATE_PREIMAGE, UPDATE_POSTIMAGE, DELETE)

#: Operation kinds whose versions add, delete and change no row (derived from each
#: operation class's ``changes``): their versions add nothing to the feed.
NO_ROW_KINDS = kinds_that_change(Changes.NOTHING, Changes.SCHEMA)
#: Kinds whose deletes and inserts of one stable row id are an update of that row.
_PAIRED_KINDS = frozenset({Update.kind, DataReplacement.kind})

#: Operation kinds that replace the whole table: every row before is deleted, every
#: row after inserted.
REPLACING_KINDS = frozenset({Overwrite.kind, Restore.kind})

_TIMESTAMP = pa.timestamp("us", tz="UTC")
#: The row ids of change rows while a version's changes are paired (then dropped).
_ROW_ID = "__s3ddb_change_rowid"


def change_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of change rows of a dataset of ``schema``: its columns, then
    ``_change_type`` (string), ``_commit_version`` (int64), ``_commit_timestamp``
    (timestamp, microseconds, UTC).

    Raises:
        InvalidInputError: the dataset has a column of one of those names (or of the
            feed's own row id column, used while pairing updates).
    """
    reserved = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP, _ROW_ID)
    clash = [n for n in reserved if n in schema.names]
    if clash:
        raise InvalidInputError(
            f"the dataset has column(s) {clash}, which the change feed adds to every row"
        )
    return pa.schema(
        [
            *schema,
            pa.field(CHANGE_TYPE, pa.string(), nullable=False),
            pa.field(COMMIT_VERSION, pa.int64(), nullable=False),
            pa.field(COMMIT_TIMESTAMP, _TIMESTAMP, nullable=False),
        ]
    )


@dataclass(frozen=True)
class _Projection:
    """How rows of one version read as the end version's columns: each end column is
    the version's column of the same field id and type, else nulls."""

    end: DatasetSchema
    source: DatasetSchema
    names: tuple[tuple[str, str | None], ...]  # (end name, source name or None)
    schema: pa.Schema  # of the change rows (change_schema of end's columns)

    @classmethod
    def of(cls, end: DatasetSchema, source: DatasetSchema) -> _Projection:
        by_id = {i: p[0] for p, i in source.ids if len(p) == 1}
        pairs = []
        for name, field_id in zip(end.arrow.names, end.top_level_ids()):
            found = by_id.get(field_id)
            if found is not None and not source.arrow.field(found).type.equals(
                end.arrow.field(name).type
            ):
                found = None  # not the same column: never cast one column into another
            pairs.append((name, found))
        return cls(end, source, tuple(pairs), change_schema(end.arrow))

    @property
    def read_names(self) -> list[str]:
        return [s for _n, s in self.names if s is not None]

    def finish(self, read: pa.Table, change: str, manifest: Manifest) -> pa.Table:
        """``read`` (columns :attr:`read_names`) as change rows of ``manifest``."""
        n = read.num_rows
        arrays = []
        for field, (_name, source) in zip(self.schema, self.names):
            arrays.append(pa.nulls(n, field.type) if source is None else read.column(source))
        micros = manifest.timestamp_nanos // 1000
        arrays.append(pa.array([change] * n, pa.string()))
        arrays.append(pa.array(np.full(n, manifest.version, dtype=np.int64)))
        arrays.append(pa.array(np.full(n, micros, dtype=np.int64)).view(_TIMESTAMP))
        return pa.Table.from_arrays(arrays, schema=self.schema)


def _check_range(
    handler: CommitHandler, uri: str, start: int, end: Manifest
) -> list[ManifestLocation]:
    """The locations of versions ``start..end`` (``start`` 0: from 1), all present.

    Raises:
        InvalidInputError: ``start`` after ``end``, or a version of the range that
            does not exist or was removed by cleanup (named).
    """
    if start > end.version:
        raise InvalidInputError(
            f"changes of {uri}: start_version {start} is after end_version {end.version}"
        )
    first = max(start, 1)
    locations = handler.list_locations(first, end.version)
    listed = {loc.version for loc in locations}
    missing: list[int] = []
    if len(listed) != end.version - first + 1:
        # At most a few named, however far apart the versions (a planted far one):
        # found walking the listed ones, not the whole range.
        expected = first
        for version in sorted(listed):
            missing.extend(range(expected, min(version, expected + 6)))
            expected = version + 1
            if len(missing) > 5:
                break
        missing.extend(range(expected, min(end.version + 1, expected + 6)))
    if missing:
        kept = handler.list_locations(1, end.version)
        oldest = f"the oldest kept is {kept[0].version}" if kept else "none is kept"
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise InvalidInputError(
            f"changes of {uri} from version {start} to {end.version} need version(s) "
            f"{shown}, which do not exist or were removed by cleanup ({oldest})"
        )
    return locations


def version_changes(
    ds: PinnedVersion, start_version: int, end_version: int | None = None
) -> Iterator[pa.Table]:
    """:func:`change_tables` of ``ds``'s dataset, up to ``end_version`` (default: the
    version ``ds`` is pinned to).

    Raises:
        InvalidInputError: as :func:`change_tables`; ``end_version`` not an int >= 1,
            or a version that does not exist or was removed by cleanup.
    """
    check_int("start_version", start_version, minimum=0)
    if end_version is None or end_version == ds.version:
        end = ds.manifest
    else:
        check_int("end_version", end_version, minimum=1)
        if start_version > end_version:
            raise InvalidInputError(
                f"changes of {ds.uri}: start_version {start_version} is after "
                f"end_version {end_version}"
            )
        try:
            end = load_version(ds.handler, end_version, ds.uri)
        except VersionNotFoundError as exc:
            raise InvalidInputError(f"changes: end_version {end_version}: {exc}") from exc
    return change_tables(ds.handler, ds.uri, start_version, end)


def change_tables(
    handler: CommitHandler,
    uri: str,
    start_version: int,
    end: Manifest,
) -> Iterator[pa.Table]:
    """The row changes of the versions after ``start_version`` up to ``end``'s, in
    version order, as tables of :func:`change_schema` (``end``'s columns), at most one
    fragment's rows each: every change of every version, not a net difference (a row
    inserted and deleted within the range appears twice, as in Delta Lake's change
    data feed). ``start_version`` 0 starts before the first version.

    The range is checked before anything is read; the manifests are then read one
    version at a time, and of each version only what it changed (module docstring).

    Raises:
        InvalidInputError: ``start_version`` not an int >= 0 or after ``end``; a version
            in the range missing (never committed, or removed by cleanup); the dataset
            has a column named like a change column.
        ManifestCorruptError, StoredMetadataError: a manifest or a deletion file read
            is missing or corrupt.
    """
    check_int("start_version", start_version, minimum=0)
    change_schema(end.schema.arrow)
    locations = _check_range(handler, uri, start_version, end)
    # Checked above, before the first table is asked for; read below, as it is.
    return _changes_after(handler, start_version, end, locations)


def version_change_tables(
    handler: CommitHandler, uri: str, version: int, end: Manifest
) -> Iterator[pa.Table]:
    """The row changes of ``version`` alone (against the version before it), as
    tables of :func:`change_schema` with ``end``'s columns: what :func:`change_tables`
    gives for that version, for a reader that splits a range by version (Spark's
    ``readChangeFeed``: one task per version). ``end`` only gives the columns: a
    stream keeps those it started with, so ``end`` may be older than ``version``
    (columns are matched by field id either way).

    Raises:
        InvalidInputError: ``version`` not an int >= 1; it or the version before it
            missing (never committed, or removed by cleanup).
        ManifestCorruptError, StoredMetadataError: as :func:`change_tables`.
    """
    check_int("version", version, minimum=1)
    first = max(version - 1, 1)
    located = {loc.version: loc for loc in handler.list_locations(first, version)}
    missing = [v for v in range(first, version + 1) if v not in located]
    if missing:
        raise InvalidInputError(
            f"changes of {uri} in version {version} need version(s) "
            f"{', '.join(map(str, missing))}, which do not exist or were removed by cleanup"
        )
    change_schema(end.schema.arrow)
    previous = placeholder_manifest() if version == 1 else _load(handler, located[first], end)
    current = _load(handler, located[version], end)
    return _version_changes(handler, previous, current, end.schema)


def _changes_after(
    handler: CommitHandler, start: int, end: Manifest, locations: list[ManifestLocation]
) -> Iterator[pa.Table]:
    if start == end.version:
        return
    previous: Manifest
    if start == 0:
        previous = placeholder_manifest()
    else:
        previous = _load(handler, locations[0], end)
        locations = locations[1:]
    for location in locations:
        current = _load(handler, location, end)
        yield from _version_changes(handler, previous, current, end.schema)
        previous = current


def _load(handler: CommitHandler, location: ManifestLocation, end: Manifest) -> Manifest:
    # The end version is the caller's pinned manifest: not read again.
    return end if location.version == end.version else handler.load_manifest(location)


def _kind(handler: CommitHandler, manifest: Manifest) -> str:
    """The operation kind that made ``manifest``: recorded in it, or (manifests
    written by another engine) in its transaction; "" if neither says."""
    if manifest.operation:
        return manifest.operation
    transaction = load_transaction(handler, manifest)
    return transaction.operation.kind if transaction is not None else ""


def _version_changes(
    handler: CommitHandler, previous: Manifest, current: Manifest, end: DatasetSchema
) -> Iterator[pa.Table]:
    """The change tables of ``current`` against ``previous`` (the version before it),
    read lazily, one fragment at a time."""
    kind = _kind(handler, current)
    if kind in NO_ROW_KINDS:
        # Not read: its manifest says it changes no row. Shows it does not, where that
        # is cheap (the summaries): a version whose name was changed from a delete
        # or an append would vanish from the feed.
        if current.num_rows != previous.num_rows:
            raise StoredMetadataError(
                f"version {current.version} of {handler.store.url} is a {kind}, which "
                f"changes no row, yet it shows {current.num_rows} rows and version "
                f"{previous.version} {previous.num_rows}"
            )
        return
    # Only an Update version moves rows under their ids, and a DataReplacement
    # changes values in place; pairing reads their deletes and inserts before giving
    # any (a version's changed rows, not the table's).
    paired = kind in _PAIRED_KINDS and current.stable_row_ids and previous.stable_row_ids
    before = _Side(handler, previous, end, current, DELETE, paired)
    after = _Side(handler, current, end, current, INSERT, paired)
    yield from pair_updates(_fragment_tables(kind, before, after), paired)


def _fragment_tables(kind: str, before: _Side, after: _Side) -> Iterator[pa.Table]:
    """One version's changes, fragment by fragment: each fragment of the version
    before (its deleted rows, then the rows it changed in place), then the fragments
    the version added. A row's delete always comes before the insert replacing it."""
    if kind in REPLACING_KINDS:
        yield from (before.visible(f) for f in before.manifest.fragments)
        yield from (after.visible(f) for f in after.manifest.fragments)
        return
    # Fragments stored alike on both sides changed no row: compared still encoded (in
    # C), so only the fragments the version touched are decoded and checked.
    removed, added, differ = before.manifest.fragments.diff(after.manifest.fragments)
    old = before.manifest.fragments.by_id()
    new = after.manifest.fragments.by_id()
    for fragment_id in before.manifest.fragments.ids():
        if fragment_id not in removed and fragment_id not in differ:
            continue
        was = old[fragment_id]
        now = new[fragment_id] if fragment_id in differ else None
        if now is None or now.physical_rows != was.physical_rows:
            yield before.visible(was)
            if now is not None:
                yield after.visible(now)
        elif _data_files(now) != _data_files(was) or now.deletion_file != was.deletion_file:
            yield from _fragment_changes(before, after, was, now)
    yield from (after.visible(new[fragment_id]) for fragment_id in added)


def pair_updates(tables: Iterator[pa.Table], by_row_id: bool = False) -> Iterator[pa.Table]:
    """One version's change tables, empty ones left out.

    This is where a version's deletes and inserts meet (a row's delete before the
    insert replacing it). Without stable row ids (``by_row_id`` False) rows have no
    identity across fragments, so an update stays a delete and an insert, and tables
    pass through as they come. With them, the tables carry each row's id (column
    ``_ROW_ID``, dropped here): the delete and the insert of one id become its
    ``update_preimage`` and ``update_postimage``. Then the version's tables are read
    first and come out as: the unpaired deletes, the pre-images, the post-images, the
    unpaired inserts (a delete still before an insert of the same key).
    """
    if not by_row_id:
        yield from (table for table in tables if table.num_rows)
        return
    held = [t for t in tables if t.num_rows]
    # Each table holds one kind of change (one fragment's deletes, or inserts).
    is_delete = [t.column(CHANGE_TYPE)[0].as_py() == DELETE for t in held]
    ids = [t.column(_ROW_ID).to_numpy() for t in held]
    none = [np.empty(0, dtype=np.int64)]
    old = np.concatenate([i for i, d in zip(ids, is_delete) if d] or none)
    new = np.concatenate([i for i, d in zip(ids, is_delete) if not d] or none)
    both = np.intersect1d(old, new)
    deleted = [t for t, d in zip(held, is_delete) if d]
    inserted = [t for t, d in zip(held, is_delete) if not d]

    def split(table: pa.Table) -> tuple[pa.Table, pa.Table]:
        """(rows of ``table`` paired, rows not), without the id column."""
        mask = np.isin(table.column(_ROW_ID).to_numpy(), both)
        table = table.drop_columns([_ROW_ID])
        return table.filter(pa.array(mask)), table.filter(pa.array(~mask))

    deletes = [split(t) for t in deleted]
    inserts = [split(t) for t in inserted]
    yield from (lone for _pair, lone in deletes if lone.num_rows)
    yield from (_relabel(pair, UPDATE_PREIMAGE) for pair, _lone in deletes if pair.num_rows)
    yield from (_relabel(pair, UPDATE_POSTIMAGE) for pair, _lone in inserts if pair.num_rows)
    yield from (lone for _pair, lone in inserts if lone.num_rows)


def _relabel(table: pa.Table, change: str) -> pa.Table:
    """``table`` with every ``_change_type`` set to ``change``."""
    index = table.schema.get_field_index(CHANGE_TYPE)
    labels = pa.array([change] * table.num_rows, pa.string())
    return table.set_column(index, table.schema.field(index), labels)


class _Side:
    """One side of a version's changes: the version before it (its rows are
    ``delete`` rows) or the version itself (``insert`` rows), read as change rows
    stamped with the version (``stamp``)."""

    def __init__(
        self,
        handler: CommitHandler,
        manifest: Manifest,
        end: DatasetSchema,
        stamp: Manifest,
        change: str,
        with_ids: bool = False,
    ) -> None:
        self.manifest = manifest
        self.stamp = stamp
        self.change = change
        self.with_ids = with_ids
        self.files = FileResolver.for_manifest(handler.store, manifest)
        self.projection = _Projection.of(end, manifest.schema)

    def visible(self, fragment: FragmentMetadata) -> pa.Table:
        """Every visible row of ``fragment``, as :attr:`change` rows."""
        if self.with_ids:
            return self.visible_at(fragment)[0]
        names = self.projection.read_names
        read = read_visible_rows(self.files, fragment, self.manifest.schema, names)
        return self.projection.finish(read, self.change, self.stamp)

    def _finish(
        self, read: pa.Table, fragment: FragmentMetadata, positions: np.ndarray
    ) -> pa.Table:
        """``read`` (rows of ``fragment`` at ``positions``) as :attr:`change` rows,
        with their ids while they are paired (:attr:`with_ids`).

        Raises:
            StoredMetadataError: the fragment's row ids are missing or malformed.
        """
        table = self.projection.finish(read, self.change, self.stamp)
        if not self.with_ids:
            return table
        if fragment.physical_rows and not fragment.row_ids:
            raise StoredMetadataError(
                f"version {self.manifest.version}, fragment {fragment.id}: no row ids in a "
                "dataset with stable row ids"
            )
        ids = RowLineage.of(fragment).ids[np.asarray(positions, dtype=np.int64)]
        return table.append_column(_ROW_ID, pa.array(ids, pa.int64()))

    def visible_at(self, fragment: FragmentMetadata) -> tuple[pa.Table, np.ndarray]:
        """Every visible row of ``fragment``, as :attr:`change` rows, and their
        physical positions (ascending)."""
        names = self.projection.read_names
        schema = self.manifest.schema
        plan = plan_fragment(self.files, fragment, schema, None, keep_open=True)
        if plan is None:
            empty = read_rows_at(self.files, fragment, schema, names, [])[0]
            none = np.empty(0, np.int64)
            return self._finish(empty, fragment, none), none
        try:
            read, positions = read_with_positions(plan, schema, names)
        finally:
            if plan.source is not None:
                plan.source.close()
        return self._finish(read, fragment, positions), positions

    def at(self, fragment: FragmentMetadata, offsets: np.ndarray) -> pa.Table:
        """The physical rows of ``fragment`` at ``offsets`` (ascending), as
        :attr:`change` rows: only the row groups holding them are read."""
        names = self.projection.read_names
        read, _groups = read_rows_at(self.files, fragment, self.manifest.schema, names, offsets)
        return self._finish(read, fragment, offsets)


def _fragment_changes(
    before: _Side, after: _Side, was: FragmentMetadata, now: FragmentMetadata
) -> Iterator[pa.Table]:
    """The changed rows of one fragment in both versions (same id, same physical
    rows): the rows deleted since, those no longer deleted, and, if its data files
    changed, the rows visible in both whose values differ (old values deleted, new
    ones inserted)."""
    old_deleted = read_deleted_rows(before.files, was)
    new_deleted = read_deleted_rows(after.files, now)
    # Only restores bring rows back: the second difference is nearly always empty,
    # and an empty one is not read (no footer, no table).
    for side, fragment, rows in (
        (before, was, new_deleted - old_deleted),
        (after, now, old_deleted - new_deleted),
    ):
        if rows:
            yield side.at(fragment, _offsets(rows))
    if _data_files(now) != _data_files(was):
        # Positions are kept (an update that rewrote columns in place): the rows
        # visible in both versions, compared. Each fragment's footer is checked
        # against its claimed rows before anything is allocated for them.
        old_rows, old_at = before.visible_at(was)
        new_rows, new_at = after.visible_at(now)
        _both, old_index, new_index = np.intersect1d(
            old_at, new_at, assume_unique=True, return_indices=True
        )
        old_rows, new_rows = old_rows.take(old_index), new_rows.take(new_index)
        differ = pa.array(_rows_differ(old_rows, new_rows))
        yield old_rows.filter(differ)
        yield new_rows.filter(differ)


def _data_files(fragment: FragmentMetadata) -> list[tuple[str, tuple[int, ...], int | None]]:
    """What says which values a fragment holds: its data files' paths and fields (a
    recorded size may be filled in later, for the same file)."""
    return [(d.path, tuple(d.fields), d.base_id) for d in fragment.files]


def _offsets(bitmap: BitMap) -> np.ndarray:
    return np.fromiter(bitmap, dtype=np.int64, count=len(bitmap))


def _rows_differ(old: pa.Table, new: pa.Table) -> np.ndarray:
    """Where the rows of ``old`` and ``new`` (aligned) differ in a dataset column
    (null equals null; the change columns are not compared)."""
    differ = np.zeros(old.num_rows, dtype=bool)
    skip = {CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP, _ROW_ID}
    for name in old.column_names:
        if name in skip:
            continue
        a, b = old.column(name), new.column(name)
        try:
            equal = pc.equal(a, b)
            both_null = pc.and_(pc.is_null(a), pc.is_null(b))
            same = pc.or_kleene(pc.fill_null(equal, False), both_null)
            if pa.types.is_floating(a.type):
                # NaN equals nothing, itself included: a NaN left as it was is no change.
                same = pc.or_kleene(same, pc.and_(pc.is_nan(a), pc.is_nan(b)))
            differ |= ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            # Nested and other types pc.equal does not compare: value by value.
            differ |= np.array(
                [not _same_value(x, y) for x, y in zip(a.to_pylist(), b.to_pylist())], bool
            )
    return differ


def _same_value(x: object, y: object) -> bool:
    """``x == y`` for Python values of a column, NaN equal to NaN at any depth."""
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (math.isnan(x) and math.isnan(y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same_value(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(_same_value(p, q) for p, q in zip(x, y, strict=True))
    return x == y
