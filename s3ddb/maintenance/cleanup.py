"""Removing old versions: ``Dataset.cleanup_old_versions``.

Which versions go: every version committed before ``older_than`` ago, except the
newest version, the ``retain_versions`` newest, and every version a tag names. What goes
with them: their manifests (final and staged), their DynamoDB rows, their transaction
files, and the data and deletion files that no kept version references. Files that no
version references at all (left by crashed or failed writers) and staged manifests no
row refers to go too, once older than a grace period (:data:`UNVERIFIED_GRACE`) unless
``delete_unverified``: a writer may be between writing them and committing. So do
native Spark writes' staging folders (:mod:`s3ddb.maintenance.staging`) whose newest
file is older than that period: a folder still getting files is a write in progress.

Safety against a writer committing meanwhile: the newest version is never removed, a
commit only ever builds on the newest version (and its files are new), and files a
commit in progress has written are younger than the grace period. A version also stays
until the version after it is older than the claim window (:data:`CLAIM_WINDOW`, 10
minutes): a writer that saw it as the newest may still be claiming the next number, and
must find that number taken.

The order of the work, and what holds if cleanup stops anywhere (crash, kill, error):

1. It writes a note of the files and final manifests of the removed versions that no
   kept version needs (:mod:`s3ddb.maintenance.cleanup_journal`).
2. It makes the removed versions invisible, a batch at a time: their DynamoDB rows,
   then their final manifests (whose bytes it holds in memory). No other file of
   theirs is touched yet, so a reader finds each removed version whole or not at all;
   a version whose row is gone but whose manifest is left is whole, and the next
   cleanup removes it again.
3. After each batch it reads the tags again. A tag now naming a removed version was
   written before step 2 (a tag writer checks again, after writing, that its version
   is there, and otherwise takes the tag back and raises ``VersionNotFoundError``),
   so that version is put back exactly (manifest, then row) and kept with its files.
4. It deletes the final manifests an interrupted cleanup left without a row between
   two versions that have one (those an earlier note names, or older than the grace
   period; the others stay with every file they read, and so does any a tag names),
   then staged manifests and files, then the notes.

So a tagged version is always kept, whenever the tag was created. An interrupted
cleanup leaves whole versions and files no version references, and the next cleanup
removes both: the files (and leftover manifests) at once when a note older than the
claim window names them, else once older than the grace period. Final manifests of
versions from before the dataset used the external store (older than its oldest row)
are versions like any other, and a commit in flight claims its row before its final
manifest exists: neither is ever taken for a leftover. Run one cleanup of a dataset at
a time: a second one, during the first's step 2, does not see the versions the first
may put back.

The result says what went and, for every version kept, why
(:class:`KeptVersion`) and when a time-bound reason ends.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from s3ddb.arguments import check_int
from s3ddb.errors import InvalidInputError, ManifestCorruptError, VersionNotFoundError
from s3ddb.external_store.manifest_store import ManifestRow, VersionTakenError
from s3ddb.format import layout
from s3ddb.format.chunks import CHUNKS_DIR
from s3ddb.format.manifest import referenced_paths
from s3ddb.format.naming import parse_manifest_name, parse_staged_name
from s3ddb.maintenance.cleanup_journal import Journal, read_journals, write_journal
from s3ddb.maintenance.staging import remove_empty_folders, staging_folders
from s3ddb.open_formats.model import PublishedNames
from s3ddb.open_formats.retention import names_of, retire_published

if TYPE_CHECKING:
    from s3ddb.commit.handlers import CommitHandler
    from s3ddb.io.object_store import ObjectMeta
    from s3ddb.versions.opening import VersionInfo
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "CLAIM_WINDOW",
    "DEFAULT_OLDER_THAN",
    "KEPT_REASONS",
    "STAGING_KIND",
    "UNVERIFIED_GRACE",
    "CleanupStats",
    "KeptVersion",
    "cleanup_old_versions",
]

log = logging.getLogger(__name__)

#: A version is removed only once its successor is this old (see cleanup_old_versions).
#: Writers look for newer versions before claiming on a base older than 10 s
#: (:data:`s3ddb.versions.pinned.FRESH_BASE_SECONDS`), so this leaves a wide margin for the time a
#: commit attempt takes and for clock differences between machines.
CLAIM_WINDOW = dt.timedelta(minutes=10)

#: Files no version references are kept this long, unless ``delete_unverified``.
UNVERIFIED_GRACE = dt.timedelta(days=7)
#: The kind (in :attr:`CleanupStats.files`) of native Spark writes' staging files.
STAGING_KIND = "spark_staging_files"

#: How many versions cleanup makes invisible at a time (their manifests are held in
#: memory until the tags are read again).
_VERSIONS_A_BATCH = 100

#: Versions younger than this are kept by default (as Lance does).
DEFAULT_OLDER_THAN = dt.timedelta(days=14)

#: Why cleanup keeps a version (:attr:`KeptVersion.reason`), in the order checked.
KEPT_REASONS = ("newest", "tagged", "retain_versions", "older_than", "claim_window")


@dataclass(frozen=True)
class KeptVersion:
    """A version cleanup kept, and why.

    ``reason`` is one of :data:`KEPT_REASONS`: ``"newest"``; ``"tagged"`` (a tag
    names it); ``"retain_versions"`` (one of the ``retain_versions`` newest);
    ``"older_than"`` (committed less than ``older_than`` ago); ``"claim_window"``
    (the version after it is younger than the claim window). The first that holds is
    named, except that of the last two the one that ends later is.
    ``removable_after`` is when that reason ends (UTC) for the last two, None for the
    others (they hold until a tag is deleted or newer versions are committed).
    """

    version: int
    reason: str
    removable_after: dt.datetime | None = None


@dataclass
class CleanupStats:
    """What a cleanup removed: versions, rows, and per kind of file a count and bytes;
    and every version it kept, with why (``versions_kept``, oldest first)."""

    versions_removed: list[int] = field(default_factory=list)
    rows_removed: int = 0
    files: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    versions_kept: list[KeptVersion] = field(default_factory=list)

    def add(self, kind: str, size: int) -> None:
        self.files[kind] = self.files.get(kind, 0) + 1
        self.bytes[kind] = self.bytes.get(kind, 0) + size

    @property
    def bytes_removed(self) -> int:
        return sum(self.bytes.values())

    # pylance's names for the same counts.
    @property
    def old_versions(self) -> int:
        return len(self.versions_removed)

    @property
    def data_files_removed(self) -> int:
        return self.files.get("data_files", 0)

    @property
    def deletion_files_removed(self) -> int:
        return self.files.get("deletion_files", 0)

    @property
    def transaction_files_removed(self) -> int:
        return self.files.get("transaction_files", 0)

    @property
    def index_files_removed(self) -> int:
        return self.files.get("index_files", 0)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "bytes_removed": self.bytes_removed}


def _kind(path: str) -> str | None:
    directory = path.split("/", 1)[0]
    return {
        layout.DATA_DIR: "data_files",
        layout.DELETIONS_DIR: "deletion_files",
        layout.TRANSACTIONS_DIR: "transaction_files",
        layout.INDICES_DIR: "index_files",
        CHUNKS_DIR: "chunk_files",
    }.get(directory)


def _index_dir(path: str) -> str:
    """``_indices/<uuid>`` of an index file's path."""
    return "/".join(path.split("/", 2)[:2])


def cleanup_old_versions(
    ds: PinnedVersion,
    older_than: dt.timedelta | None = None,
    retain_versions: int | None = None,
    delete_unverified: bool = False,
    claim_window: dt.timedelta | None = None,
) -> CleanupStats:
    """See :meth:`s3ddb.Dataset.cleanup_old_versions`.

    Raises:
        InvalidInputError: ``older_than`` or ``claim_window`` is not a timedelta >= 0,
            or ``retain_versions`` is not an int >= 1.
        CommitMechanismError: the dataset commits another way than ``ds``'s URI says
            (another DynamoDB table, or none); nothing is deleted.
    """
    older_than = DEFAULT_OLDER_THAN if older_than is None else older_than
    _check_age("older_than", older_than)
    # Read at call time: tests shorten the module's window.
    claim_window = CLAIM_WINDOW if claim_window is None else claim_window
    _check_age("claim_window", claim_window)
    if retain_versions is not None:
        check_int("retain_versions", retain_versions, minimum=1)
    handler = ds.handler
    # Through a URI of another commit mechanism (another DynamoDB table: no rows) the
    # versions and the files they need would not all be seen: refused, as writers are.
    handler.check_writable(ds.manifest if ds.manifest.version else None)
    now = dt.datetime.now(dt.timezone.utc)
    history = ds.versions()
    if not history:
        return CleanupStats()
    kept = _kept_versions(ds, history, now, (older_than, claim_window), retain_versions)
    removed = [v.version for v in history if v.version not in kept]
    grace = 0.0 if delete_unverified else UNVERIFIED_GRACE.total_seconds()
    listed = list(handler.store.iter_list(""))
    finals = _final_manifests(listed)
    rows = _rows_of(handler)
    # Notes of interrupted cleanups (see cleanup_journal): what their removed versions
    # referenced, and their final manifests.
    earlier = read_journals(handler.store, listed, claim_window.total_seconds(), time.time())
    orphans = _orphaned_manifests(finals, [v.version for v in history], grace)
    for version in orphans:
        orphans[version] |= finals[version].path in earlier.manifests
    # A tag may name one (a put-back interrupted between manifest and row): kept.
    for version in set(orphans) & set(ds.tags.list().values()):
        orphans[version] = False
    keep = _referenced_by(ds, sorted(kept))
    # An orphaned final manifest that stays is still openable by number (the listing
    # fallback): whatever it reads stays.
    keep.update(_referenced_by(ds, sorted(v for v, old in orphans.items() if not old)))
    refs = {v: _references_of_removed(ds, v) for v in removed}
    gone = _Referenced(earlier.files, earlier.index_dirs)
    for version in removed:
        gone.update(refs[version])
    # This cleanup's own note, before it deletes anything.
    note = None
    if removed or earlier.notes:
        mine = Journal(gone.files - keep.files, gone.index_dirs - keep.index_dirs)
        mine.manifests = {finals[v].path for v in removed if v in finals} | {
            finals[v].path for v, old in orphans.items() if old
        }
        note = write_journal(handler.store, mine)

    # Steps 2 and 3, a batch of versions at a time (their manifests are held in memory).
    late: list[int] = []
    for start in range(0, len(removed), _VERSIONS_A_BATCH):
        batch = removed[start : start + _VERSIONS_A_BATCH]
        late += _remove_or_put_back(ds, batch, finals, rows)
    for version in late:
        keep.update(refs[version])
        kept[version] = KeptVersion(version, "tagged")
    removed = [v for v in removed if v not in late]
    # A version committed since the history was read may list what only removed
    # versions did (a restore of one, read before it became unreadable): what it
    # references stays. One committed after this read must have read its source
    # before the removal too, within these few requests: docs/operations.md.
    since = [loc.version for loc in handler.locations_since(history[-1].version + 1)]
    if since:
        keep.update(_referenced_by(ds, since))
    stats = CleanupStats(
        versions_removed=removed,
        rows_removed=len([v for v in removed if v in rows]),
        versions_kept=[kept[v] for v in sorted(kept)],
    )
    for version in removed:
        if version in finals:
            stats.add("manifests", finals[version].size)

    # 4. Orphaned final manifests (old enough) before any file they may read, then
    #    every file no visible version references.
    live_staged = {row.path for v, row in rows.items() if row.is_staged and v not in removed}
    stale = {finals[v].path: ("manifests", finals[v].size) for v, old in orphans.items() if old}
    doomed = _doomed_objects(listed, set(removed), keep, gone, live_staged, grace)
    # What only removed versions published; each format's history then starts at a
    # kept version (a Delta checkpoint, Iceberg metadata that stops listing removed
    # snapshots), written before anything goes (see retire_published).
    doomed.update(
        retire_published(
            handler.store,
            listed,
            keep.published,
            gone.published,
            kept,
            lambda v: ds.checkout_version(v).manifest,
        )
    )

    def count(paths: list[str]) -> None:
        for path in paths:
            stats.add(*doomed[path])

    doomed = {**stale, **doomed}  # the manifests first
    handler.store.delete_many(list(stale), deleted=count)
    handler.store.delete_many([p for p in doomed if p not in stale], deleted=count)
    remove_empty_folders(handler.store, [p for p, (k, _) in doomed.items() if k == STAGING_KIND])
    handler.store.delete_many([*earlier.notes, *([note] if note else [])])
    return stats


def _remove_or_put_back(
    ds: PinnedVersion,
    versions: list[int],
    finals: dict[int, ObjectMeta],
    rows: dict[int, ManifestRow],
) -> list[int]:
    """Steps 2 and 3 of :func:`cleanup_old_versions` for ``versions``; returns those
    put back because a tag names them.

    2. Make them invisible: their rows, then their final manifests (each read first).
       Nothing else of theirs is touched yet: a reader finds each whole or not at all.
    3. Read the tags again. A tag now naming one of them was written before step 1 (a
       tag writer checks again, after writing, that its version is there; if not, it
       takes the tag back): put that version back exactly as it was, manifest then row.
       Ensures: a reader finds each of ``versions`` whole or not at all, throughout.
    """
    handler = ds.handler
    saved = {
        v: (finals[v].path, handler.store.get(finals[v].path)) for v in versions if v in finals
    }
    manifest_store = handler.manifest_store()
    if manifest_store is not None:
        external, base_uri = manifest_store
        external.delete_versions(base_uri, versions)
    handler.store.delete_many([path for path, _ in saved.values()])
    late = sorted(set(versions) & set(ds.tags.list().values()))
    for version in late:
        _put_back(handler, saved.get(version), rows.get(version))
    return late


def _check_age(name: str, value: object) -> None:
    if not isinstance(value, dt.timedelta) or value < dt.timedelta(0):
        raise InvalidInputError(f"{name} must be a timedelta >= 0, got {value!r}")


def _kept_versions(
    ds: PinnedVersion,
    history: list[VersionInfo],
    now: dt.datetime,
    windows: tuple[dt.timedelta, dt.timedelta],
    retain_versions: int | None,
) -> dict[int, KeptVersion]:
    """The versions of ``history`` (oldest first, not empty) that cleanup keeps, oldest
    first, each with why: the newest, the tagged, the ``retain_versions`` newest, the
    younger than ``older_than`` and each whose successor is younger than the claim
    window (``windows`` is ``(older_than, claim_window)``)."""
    older_than, claim_window = windows
    newest = history[-1].version
    tagged = set(ds.tags.list().values())
    retained = {v.version for v in history[-retain_versions:]} if retain_versions else set()
    # A writer that saw version N-1 as the newest may still be claiming N; were N
    # removed (its row deleted), that claim would succeed below the newest version.
    # So a version goes only once the version after it is claim_window old: every
    # writer that could claim its number has seen a newer version since.
    kept: dict[int, KeptVersion] = {}
    for info, successor in itertools.pairwise(history):
        version = info.version
        if version in tagged:
            kept[version] = KeptVersion(version, "tagged")
        elif version in retained:
            kept[version] = KeptVersion(version, "retain_versions")
        else:
            ends = [
                (_later(info.timestamp, older_than), "older_than"),
                (_later(successor.timestamp, claim_window), "claim_window"),
            ]
            until, reason = max(ends)
            if until > now:
                kept[version] = KeptVersion(version, reason, until)
    kept[newest] = KeptVersion(newest, "newest")
    return kept


def _later(when: dt.datetime, delta: dt.timedelta) -> dt.datetime:
    """``when + delta``, or the latest time there is when that is past it (a commit
    time far ahead, or a window of millennia: the version is kept)."""
    try:
        return when + delta
    except OverflowError:
        return dt.datetime.max.replace(tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class _Referenced:
    """What some versions refer to: files, and index directories. Index directories
    are kept or removed whole: an index written by another Lance writer does not list
    its files."""

    files: set[str]
    index_dirs: set[str]
    # What the versions' Iceberg and Delta files are named after.
    published: PublishedNames = field(default_factory=PublishedNames)

    def update(self, other: _Referenced) -> None:
        self.files.update(other.files)
        self.index_dirs.update(other.index_dirs)
        self.published.update(other.published)


def _referenced_by(ds: PinnedVersion, versions: Iterable[int]) -> _Referenced:
    """What the manifests of ``versions`` refer to (each read in the order given).

    Raises:
        VersionNotFoundError: a version is gone (another cleanup removed it).
    """
    referenced = _Referenced(set(), set())
    chunks: set[str] = set()  # the files of a chunk kept by many versions, listed once
    for version in versions:
        manifest = ds.checkout_version(version).manifest
        referenced.files.update(referenced_paths(manifest, skip_chunks=chunks))
        referenced.published.update(names_of(manifest, skip_chunks=chunks))
        chunks.update(ref.name for ref in manifest.fragments.chunk_refs())
        referenced.index_dirs.update(i.directory for i in manifest.indices)
    return referenced


def _references_of_removed(ds: PinnedVersion, version: int) -> _Referenced:
    """What removed ``version`` refers to; nothing if its manifest is gone (its row
    outlived it: deleted by hand, or by a cleanup of an older s3ddb) or cannot be
    read (a lost or damaged fragment-list chunk, a corrupt manifest). The version
    still goes; the files only it read are not known to be unreferenced, and are
    left to the grace period like any file no version lists. Never a file a kept
    version lists: those are read from the kept versions alone."""
    try:
        return _referenced_by(ds, [version])
    except VersionNotFoundError:
        return _Referenced(set(), set())
    except ManifestCorruptError as exc:  # StoredMetadataError too
        log.warning("cleanup removes version %d, which cannot be read: %s", version, exc)
        return _Referenced(set(), set())


def _final_manifests(listed: Iterable[ObjectMeta]) -> dict[int, ObjectMeta]:
    """The final manifest of each version among the objects ``listed``."""
    out = {}
    for meta in listed:
        directory, _, name = meta.path.partition("/")
        parsed = parse_manifest_name(name) if directory == layout.VERSIONS_DIR else None
        if parsed is not None:
            out[parsed[0]] = meta
    return out


def _rows_of(handler: CommitHandler) -> dict[int, ManifestRow]:
    """The external store's row of each version; empty when the object store decides
    versions."""
    manifest_store = handler.manifest_store()
    if manifest_store is None:
        return {}
    external, base_uri = manifest_store
    return {row.version: row for row in external.list_versions(base_uri)}


def _orphaned_manifests(
    finals: dict[int, ObjectMeta], history: list[int], grace: float
) -> dict[int, bool]:
    """The final manifests no version of ``history`` (oldest first) owns though their
    number lies between two that it has, each with whether it is older than ``grace``
    seconds.

    Only an external store's dataset has them: an interrupted cleanup deleted their
    rows (and readers look up a version without a row in the listing, so they can be
    opened by number). Manifests below the oldest row are in ``history`` (the listing
    fallback shows versions from before the store), and a commit in flight claims its
    row, above the newest, before its final manifest exists: neither is one of these.
    """
    wall = time.time()
    have = set(history)
    return {
        version: meta.modified is None or wall - meta.modified >= grace
        for version, meta in finals.items()
        if history[0] < version < history[-1] and version not in have
    }


def _put_back(
    handler: CommitHandler, manifest: tuple[str, bytes] | None, row: ManifestRow | None
) -> None:
    """Restore a version step 1 of cleanup removed: its final manifest, byte for byte,
    then its row as it was (a row only ever points at a manifest that exists)."""
    if manifest is not None:
        handler.store.put(*manifest)
    manifest_store = handler.manifest_store()
    if row is not None and manifest_store is not None:
        try:
            manifest_store[0].put_if_not_exists(row)
        except VersionTakenError:
            pass  # its row is back already (a reader cannot write one; kept as it is)


def _doomed_objects(
    listed: Iterable[ObjectMeta],
    removed: set[int],
    keep: _Referenced,
    gone: _Referenced,
    live_rows: set[str],
    grace: float,
) -> dict[str, tuple[str, int]]:
    """The objects among ``listed`` that cleanup deletes once the removed versions'
    final manifests are gone, each with its kind and size, in listing order.

    Staged manifests no row in ``live_rows`` points at, of a ``removed`` version or
    older than ``grace`` seconds; files (data, deletion, transaction, index) nothing in
    ``keep`` refers to that a removed version referred to (``gone``) or that are older
    than ``grace``; and the files of native Spark writes' staging folders whose newest
    file is older than ``grace``. Final manifests are never among them (see
    :func:`cleanup_old_versions`).
    """
    wall = time.time()
    doomed: dict[str, tuple[str, int]] = {}
    staging: list[ObjectMeta] = []
    for meta in listed:
        if meta.path.startswith(layout.SPARK_STAGING_DIR + "/"):
            staging.append(meta)  # judged per folder, below
            continue
        path, old = meta.path, meta.modified is None or wall - meta.modified >= grace
        directory, _, name = path.partition("/")
        if directory == layout.VERSIONS_DIR:
            staged = parse_staged_name(name)
            if staged is not None and path not in live_rows and (staged[0] in removed or old):
                doomed[path] = ("staged_manifests", meta.size)
            continue
        kind = _kind(path)
        if kind is None or path in keep.files:
            continue
        if kind == "index_files" and _index_dir(path) in keep.index_dirs:
            continue
        if (
            path in gone.files
            or old
            or (kind == "index_files" and _index_dir(path) in gone.index_dirs)
        ):
            doomed[path] = (kind, meta.size)
    for folder in staging_folders(staging).values():
        if folder.idle_for(grace, wall):
            doomed.update((m.path, (STAGING_KIND, m.size)) for m in folder.files)
    return doomed
