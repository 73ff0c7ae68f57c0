"""Checking a dataset: what ``s3ddb verify`` does.

:func:`verify` compares what the commit mechanism records (DynamoDB rows for
``s3+ddb://``, manifests otherwise) with the objects under the dataset root, and
reports every problem with what it means and how to fix it (the kinds are
:data:`~s3ddb.maintenance.problems.PROBLEM_KINDS`). It never changes anything:
:mod:`.repair` repairs what needs no judgement. Safe while writers commit; objects
younger than a grace period (a writer may be between writing them and committing)
are never reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from s3ddb.catalogs import glue_problems
from s3ddb.commit.external_versions import ExternalStoreVersions
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.errors import (
    DataFileError,
    ManifestCorruptError,
    PathOutsideDatasetError,
    S3DDBError,
    StoredMetadataError,
)
from s3ddb.external_store.identity import final_path_of
from s3ddb.external_store.manifest_store import DATASET_ID_ATTRIBUTE, ManifestRow
from s3ddb.format import layout
from s3ddb.format.bases import FileResolver
from s3ddb.format.chunks import CHUNKS_DIR
from s3ddb.format.manifest import Manifest, referenced_files, referenced_paths
from s3ddb.format.naming import NamingScheme, parse_manifest_name, parse_staged_name
from s3ddb.format.parquet_source import check_data_file
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.maintenance.group_check import check_groups
from s3ddb.maintenance.problems import PROBLEM_KINDS, Problem, ReportProblem
from s3ddb.maintenance.staging import check_staging
from s3ddb.open_formats.model import TableVersion
from s3ddb.open_formats.publisher import (
    all_formats,
    enabled_formats,
    expected_tables,
    writer_of,
)
from s3ddb.versions.connect import open_handler
from s3ddb.versions.opening import dataset_not_found
from s3ddb.versions.tags import read_tag_version, tag_name_of

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "Progress",
    "VerifyReport",
    "external_rows",
    "no_progress",
    "old_enough",
    "staged_objects",
    "verify",
]

#: Objects younger than this (seconds) may belong to a commit in progress.
DEFAULT_GRACE_SECONDS = 3600.0

#: Reports progress: (what, done, total or None).
Progress = Callable[[str, int, "int | None"], None]


def no_progress(what: str, done: int, total: int | None) -> None:
    """A :data:`Progress` that reports nothing (the default)."""


@dataclass
class VerifyReport:
    """What :func:`verify` found: the dataset's versions and objects, and every
    problem (none: healthy)."""

    uri: str
    mechanism: str
    versions: int = 0
    latest_version: int | None = None
    objects: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def add_problem(
        self, kind: str, path: str, meaning: str, fix: str, version: int | None = None
    ) -> None:
        """Record one :class:`~s3ddb.maintenance.problems.Problem` (a
        :data:`~s3ddb.maintenance.problems.ReportProblem`)."""
        self.problems.append(Problem(kind, path, meaning, fix, version))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["healthy"] = self.healthy
        return out


def external_rows(
    handler: CommitHandler,
) -> tuple[ExternalStoreVersions, list[ManifestRow]] | None:
    """The handler and every row of the dataset when an external manifest store
    (DynamoDB) decides its versions; None when the object store decides them."""
    versions = handler.external_versions()
    if versions is None:
        return None
    return versions, list(versions.external.list_versions(versions.base_uri))


def old_enough(meta: ObjectMeta, grace: float, now: float) -> bool:
    """Whether ``meta`` is at least ``grace`` seconds old at ``now`` (an object without
    a modification time counts as old): a younger one may be a commit in progress."""
    return meta.modified is None or now - meta.modified >= grace


def staged_objects(objects: Iterable[ObjectMeta]) -> dict[str, ObjectMeta]:
    """The staged manifests (``_versions/<final>-<uuid>``) among ``objects``, by path."""
    out = {}
    for meta in objects:
        directory, _, name = meta.path.partition("/")
        if directory == layout.VERSIONS_DIR and parse_staged_name(name) is not None:
            out[meta.path] = meta
    return out


def verify(
    uri: str,
    storage_options: dict[str, Any] | None = None,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    progress: Progress = no_progress,
) -> VerifyReport:
    """Check the dataset at ``uri``; see the module docstring.

    Raises:
        DatasetNotFoundError: nothing is committed at ``uri``.
        S3DDBError: the store or table cannot be read (access errors).
    """
    handler = open_handler(uri, storage_options)
    handler.validate()
    now = time.time()
    report = VerifyReport(uri, handler.describe())
    objects = {m.path: m for m in handler.store.iter_list("")}
    report.objects = len(objects)

    external = external_rows(handler)
    if external is not None:
        external_handler, rows = external
        locations = _check_rows(
            external_handler, rows, objects, report.add_problem, grace_seconds, now
        )
        check_groups(external_handler, rows, report.add_problem)
    else:
        locations = {loc.version: loc for loc in handler.list_locations()}
    versions = sorted(locations)
    if not versions:
        raise dataset_not_found(uri)
    report.versions = len(versions)
    report.latest_version = versions[-1]
    _check_history_gaps(versions, _tagged_versions(handler.store, objects), report.add_problem)

    seen = _Referenced()
    for done, version in enumerate(versions, 1):
        progress("reading manifests", done, len(versions))
        _check_version(handler, version, locations[version], objects, seen, report)
    _check_identities(seen.identities, report.add_problem)
    _check_unreferenced(objects, seen, report.add_problem, grace_seconds, now)
    check_staging(objects.values(), report.add_problem, grace_seconds, now)
    newest = locations[versions[-1]]
    _check_published(handler, newest, objects, report.add_problem, grace_seconds, now)
    _check_open_formats(handler.store, objects, versions[-1], report.add_problem)
    reported = _check_published_state(handler, newest, objects, report.add_problem)
    _check_kept_published_state(handler, locations, objects, report.add_problem, reported)
    _check_catalogs(handler, newest, objects, report.add_problem, grace_seconds, now)
    return report


def _check_published(
    handler: CommitHandler,
    newest: ManifestLocation,
    objects: dict[str, ObjectMeta],
    problem: ReportProblem,
    grace_seconds: float,
    now: float,
) -> None:
    """Report the newest version when it enables open formats that have not published
    it (a publication failed and nothing caught up since). A version younger than the
    grace period may be being published."""
    try:
        manifest = handler.load_manifest(newest)
    except S3DDBError:
        return  # reported by the checks of the version
    meta = objects.get(newest.path)
    if meta is not None and not old_enough(meta, grace_seconds, now):
        return
    for name in enabled_formats(manifest):
        published = writer_of(name).published_paths(manifest.version)
        missing = [p for p in published if p not in objects]
        if missing:
            problem(
                "unpublished_version",
                missing[0],
                f"version {manifest.version} publishes {name}, but {missing[0]} is missing: "
                f"{name} readers see an older version",
                "`s3ddb open-formats URI --publish`",
                manifest.version,
            )


def _check_catalogs(
    handler: CommitHandler,
    newest: ManifestLocation,
    objects: dict[str, ObjectMeta],
    problem: ReportProblem,
    grace_seconds: float,
    now: float,
) -> None:
    """Report the catalog table the newest version names (AWS Glue) when it stands
    for an older version, holds what s3ddb does not trust, or cannot be asked. A
    version younger than the grace period may be being published, and its catalog
    moved."""
    try:
        manifest = handler.load_manifest(newest)
    except S3DDBError:
        return  # reported by the checks of the version
    found = glue_problems(handler.store, manifest)
    meta = objects.get(newest.path)
    young = meta is not None and not old_enough(meta, grace_seconds, now)
    for state, where, meaning in found:
        if state == "behind" and not young:
            fix = PROBLEM_KINDS["catalog_behind"].fix
            problem("catalog_behind", where, meaning, fix, manifest.version)
        elif state == "untrusted":
            fix = PROBLEM_KINDS["catalog_untrusted"].fix
            problem("catalog_untrusted", where, meaning, fix, manifest.version)
        elif state == "unreachable":
            fix = PROBLEM_KINDS["catalog_unreachable"].fix
            problem("catalog_unreachable", where, meaning, fix, manifest.version)


def _check_open_formats(
    store: ObjectStore, objects: dict[str, ObjectMeta], newest: int, problem: ReportProblem
) -> None:
    """Report commits another engine made to the tables s3ddb publishes in each open
    format (it is their only writer): each format's plug-in looks when the listing
    holds files under its prefixes."""
    found_all = [
        found
        for plugin in all_formats()
        if any(p.startswith(plugin.prefixes) for p in objects)
        for found in plugin.foreign_problems(store, newest)
    ]
    for path, why in found_all:
        problem(
            "foreign_open_format_commit",
            path,
            f"{why}: not written by s3ddb; the tables it publishes have no other writer",
            "delete what another engine wrote, then run `s3ddb open-formats URI --publish`",
        )


def _check_published_state(
    handler: CommitHandler,
    newest: ManifestLocation,
    objects: dict[str, ObjectMeta],
    problem: ReportProblem,
) -> set[str]:
    """Report published Iceberg and Delta files that disagree with the manifests or
    cannot be read (each format's writer checks the newest version's published state
    and the history it lists against what the manifests give). Returns the paths
    reported."""
    reported: set[str] = set()
    try:
        manifest = handler.load_manifest(newest)
    except S3DDBError:
        return reported  # reported by the checks of the version
    tables = expected_tables(handler.store, manifest, handler.manifest_if_kept)
    for name in enabled_formats(manifest):
        if not all(p in objects for p in writer_of(name).published_paths(manifest.version)):
            continue  # unpublished_version says so
        try:
            expected = tables(name)
        except S3DDBError:
            return reported  # an unreadable manifest: reported by the checks of the versions
        for found in writer_of(name).state_problems(handler.store, expected):
            path = found.split(":", 1)[0]
            reported.add(path)
            problem(
                "damaged_open_format_state",
                path,
                found,
                "`s3ddb open-formats URI --rebuild`",
                manifest.version,
            )
    return reported


def _check_kept_published_state(
    handler: CommitHandler,
    locations: dict[int, ManifestLocation],
    objects: dict[str, ObjectMeta],
    problem: ReportProblem,
    reported: set[str],
) -> None:
    """Report published Iceberg and Delta files of the kept versions older than the
    newest that disagree with what s3ddb renders for them: Iceberg and Delta readers
    reach each by time travel (its own ``vN.metadata.json``, Delta version N), so a
    metadata file, deletion vector or delete file only an older version uses would
    otherwise give them wrong rows unseen. Each format's plug-in checks the versions
    that publish it (:meth:`~s3ddb.open_formats.model.FormatWriter.kept_checker`,
    given ``objects`` as the listing), oldest first, reading the files they share
    once. The versions are built one at a time from their manifests: each manifest is
    read once (the version before's is held, for the next one's added and removed
    files), and its table built once for every format it is the same for. A file
    already ``reported`` (for the newest version) is not reported again, nor one
    twice."""
    versions = sorted(locations)[:-1]
    if not versions or not any(p.startswith(f.prefixes) for f in all_formats() for p in objects):
        return
    checkers: dict[str, Callable[[TableVersion], list[str]]] = {}
    before: Manifest | None = None  # the manifest of the version checked last

    def load_version(version: int) -> Manifest | None:
        if before is not None and before.version == version:
            return before
        return handler.manifest_if_kept(version)

    for version in versions:
        try:
            manifest = handler.load_manifest(locations[version])
        except S3DDBError:
            before = None
            continue  # an unreadable manifest: reported by the checks of the versions
        tables = expected_tables(handler.store, manifest, load_version)
        for name in enabled_formats(manifest):
            writer = writer_of(name)
            if not all(p in objects for p in writer.published_paths(version)):
                continue  # not published (a gap, or before cleanup's start)
            try:
                table = tables(name)
            except S3DDBError:
                continue  # an unreadable manifest: reported by the checks of the versions
            if name not in checkers:
                checkers[name] = writer.kept_checker(handler.store, objects.values())
            for found in checkers[name](table):
                path = found.split(":", 1)[0]
                if path in reported:
                    continue
                reported.add(path)
                fix = "`s3ddb open-formats URI --rebuild`"
                problem("damaged_open_format_state", path, found, fix, version)
        before = manifest


@dataclass
class _Referenced:
    """What the versions checked so far refer to."""

    #: Paths (relative to the dataset root) of the files some version refers to.
    paths: set[str] = field(default_factory=set)
    #: Files read from base paths already looked at, and refused (base, version) pairs.
    bases: set[tuple[str, str]] = field(default_factory=set)
    #: Index directories, kept whole: other writers' indices list no files.
    index_dirs: set[str] = field(default_factory=set)
    #: What versions checked so far claim of their data files (path, rows, size,
    #: columns): a file is checked again only when a version claims something else.
    data_claims: set[tuple[str, int, int | None, tuple[int, ...]]] = field(default_factory=set)
    #: The dataset identity each readable version records.
    identities: dict[int, str] = field(default_factory=dict)


def _check_history_gaps(versions: list[int], tagged: set[int], problem: ReportProblem) -> None:
    """Report each version missing from the history ``versions`` (sorted).

    Cleanup keeps tagged versions and removes those around them: history is contiguous
    from the oldest version no tag holds.
    """
    floor = min((v for v in versions if v not in tagged), default=versions[-1])
    for missing in sorted(set(range(floor, versions[-1] + 1)) - set(versions)):
        problem(
            "version_gap",
            str(missing),
            f"version {missing} is missing between {versions[0]} and {versions[-1]}: "
            "history has a hole (a row or manifest was deleted by hand)",
            "restore the row or manifest from a backup; readers of later versions are not affected",
            missing,
        )


def _check_version(
    handler: CommitHandler,
    version: int,
    location: ManifestLocation,
    objects: dict[str, ObjectMeta],
    seen: _Referenced,
    report: VerifyReport,
) -> None:
    """Read ``version``'s manifest and report what of it cannot be read or does not
    exist (data, deletion, index and base files); what it refers to is added to
    ``seen``. A version already reported (by its row) is not reported again as
    unreadable."""
    problem = report.add_problem
    try:
        manifest = handler.load_manifest(location)
    except (ManifestCorruptError, PathOutsideDatasetError, FileNotFoundError) as exc:
        if not any(p.version == version for p in report.problems):
            problem(
                "unreadable_manifest",
                str(version),
                f"version {version} cannot be read: {exc}",
                "restore its manifest from a backup",
                version,
            )
        return
    except S3DDBError as exc:
        if not any(p.version == version for p in report.problems):
            problem(
                "unreadable_manifest",
                str(version),
                f"version {version}: {exc}",
                "s3ddb sync URI, then verify again",
                version,
            )
        return
    seen.identities[version] = manifest.dataset_id
    if manifest.transaction_file:
        seen.paths.add(layout.transaction_path(manifest.transaction_file))
    seen.index_dirs.update(i.directory for i in manifest.indices)
    if _bad_chunks(manifest, objects, seen.paths, problem):
        return
    try:
        _check_data_files(handler.store, manifest, objects, seen, problem)
        paths = referenced_paths(manifest, transaction=False)
    except (ManifestCorruptError, PathOutsideDatasetError) as exc:
        problem(
            "unreadable_manifest",
            str(version),
            f"the fragments of version {version} cannot be read: {exc}",
            "restore its manifest from a backup, or s3ddb restore URI to an earlier version",
            version,
        )
        return
    for path in paths:
        if path not in seen.paths and path not in objects and _is_index(path):
            problem(
                "missing_index_file",
                path,
                f"version {version} has an index file {path} that does not exist: "
                "filters using that index fail",
                "rebuild the index (create_scalar_index(..., replace=True)) or "
                "restore the object from a backup",
                version,
            )
        elif path not in seen.paths and path not in objects:
            problem(
                "missing_data_file",
                path,
                f"version {version} refers to {path}, which does not exist: "
                "reading that version fails",
                "restore the object from a backup; or s3ddb restore URI to a "
                "version that does not use it",
                version,
            )
        seen.paths.add(path)
    _check_base_files(handler.store, manifest, seen.bases, problem)


def _bad_chunks(
    manifest: Manifest, objects: dict[str, ObjectMeta], seen: set[str], problem: ReportProblem
) -> bool:
    """Report each chunk ``manifest`` lists that is missing or not of the size it
    records (from the listing: nothing is read); whether there was one. A chunk
    whose bytes differ at the same size fails its checksum when the fragments are
    read next (reported as ``unreadable_manifest``)."""
    bad = False
    for ref in manifest.fragments.chunk_refs():
        if ref.path in seen:
            continue
        meta = objects.get(ref.path)
        if meta is not None and meta.size == ref.size:
            continue
        bad = True
        what = "does not exist" if meta is None else f"has {meta.size} bytes, not {ref.size}"
        problem(
            "bad_chunk_file",
            ref.path,
            f"version {manifest.version} lists the fragment-list chunk {ref.path}, which "
            f"{what}: reading that version fails",
            "restore the file from a backup; or s3ddb restore URI to a version that does "
            "not use it",
            manifest.version,
        )
    return bad


def _check_unreferenced(
    objects: dict[str, ObjectMeta],
    seen: _Referenced,
    problem: ReportProblem,
    grace_seconds: float,
    now: float,
) -> None:
    """Report each file under the data directories that no version refers to and that
    is older than ``grace_seconds`` (younger ones may be a commit in progress)."""
    data_dirs = (
        layout.DATA_DIR, layout.DELETIONS_DIR, layout.TRANSACTIONS_DIR, layout.INDICES_DIR,
        CHUNKS_DIR,
    )  # fmt: skip
    for path, meta in objects.items():
        if (
            path.split("/", 1)[0] in data_dirs
            and path not in seen.paths
            and not (_is_index(path) and "/".join(path.split("/", 2)[:2]) in seen.index_dirs)
            and old_enough(meta, grace_seconds, now)
        ):
            problem(
                "unreferenced_file",
                path,
                f"no version refers to this file ({meta.size} bytes): left by a writer "
                "that crashed, or whose commit was refused and not cleaned up",
                "harmless to readers; s3ddb cleanup deletes it once 7 days old",
            )


def _check_rows(
    handler: ExternalStoreVersions,
    rows: list[ManifestRow],
    objects: dict[str, ObjectMeta],
    problem: ReportProblem,
    grace_seconds: float,
    now: float,
) -> dict[int, ManifestLocation]:
    """The DynamoDB rows checked against the objects (rows outside the dataset, staged
    or missing manifests, manifests without a row, orphaned staged manifests, each
    reported through ``problem``); returns the locations of the rows that are sound."""
    good: list[ManifestRow] = []
    for row in rows:
        try:
            good.append(handler.checked_row(row))
        except PathOutsideDatasetError as exc:
            problem(
                "row_outside_dataset",
                row.path,
                f"the DynamoDB row of version {row.version} points outside the dataset "
                f"and is refused: {exc}",
                "delete the row (someone wrote it by hand or by mistake), then run verify again",
                row.version,
            )
        except StoredMetadataError as exc:
            problem(
                "malformed_row",
                row.path,
                f"the DynamoDB row of version {row.version} is refused: {exc}",
                "correct or delete the row (someone wrote it by hand or by mistake), then "
                "run verify again",
                row.version,
            )
    referenced_staged = set()
    for row in good:
        if row.is_staged:
            referenced_staged.add(row.path)
            where = objects.get(row.path) or objects.get(final_path_of(row.path))
            problem(
                "staged_row",
                row.path,
                f"version {row.version} is committed but not finalized (steps 3-4 of "
                "its commit did not run: a writer crashed, or is finishing right now); "
                "readers through s3+ddb finish it, readers of s3:// do not see it yet"
                + ("" if where is not None else "; its staged manifest is MISSING"),
                "s3ddb sync URI"
                if where is not None
                else "the version cannot be finalized: restore its manifest from a backup",
                row.version,
            )
            continue
        meta = objects.get(row.path)
        if meta is None:
            problem(
                "missing_final_manifest",
                row.path,
                f"the final manifest of version {row.version} is missing: the version "
                "cannot be read",
                "s3ddb sync URI puts it back if a staged copy is left; otherwise restore "
                "the object from a backup or bucket versioning",
                row.version,
            )
        elif meta.size != row.size:
            problem(
                "manifest_size_mismatch",
                row.path,
                f"the final manifest of version {row.version} has {meta.size} bytes, "
                f"DynamoDB recorded {row.size}: it was overwritten or truncated",
                "restore the object from a backup or bucket versioning",
                row.version,
            )
    # Reading never finalizes here: verify reports, sync repairs.
    locations = {r.version: handler.location_of_row(r) for r in good}
    by_version = set(locations)
    newest = max(good, key=lambda r: r.version, default=None)
    for path in objects:
        directory, _, name = path.partition("/")
        parsed = parse_manifest_name(name) if directory == layout.VERSIONS_DIR else None
        if parsed is not None and parsed[0] not in by_version:
            stray = _dropped_generation(handler, path, parsed, newest)
            if stray is not None:
                problem("foreign_version", path, stray, _STRAY_FIX, parsed[0])
            else:
                _manifest_without_row(path, parsed[0], sorted(by_version), problem)
    for path, meta in staged_objects(objects.values()).items():
        if path not in referenced_staged and old_enough(meta, grace_seconds, now):
            problem(
                "orphaned_staged_manifest",
                path,
                "a staged manifest no DynamoDB row refers to: left by a writer that "
                "lost the race for its version or crashed before claiming it, or not "
                "deleted after its version was finalized",
                "s3ddb sync URI (or cleanup) deletes it",
            )
    return locations


_STRAY_FIX = (
    "delete the manifest (s3+ddb readers never read it; plain s3:// readers list it "
    "until the dataset's own version of that number replaces it)"
)


def _dropped_generation(
    handler: ExternalStoreVersions,
    path: str,
    parsed: tuple[int, NamingScheme],
    newest: ManifestRow | None,
) -> str | None:
    """What is wrong with the row-less final manifest at ``path`` if it lies above the
    ``newest`` row and belongs to another dataset identity than that row records: a
    writer of a dropped dataset whose copy to the final name landed after the drop
    (or a planted file). None if it is below the newest row (the re-created dataset
    wrote that version over it, so it is a cleanup's leftover: not read), of this
    dataset's identity, unreadable, or there is nothing to compare with (the manifest
    is read bounded and checked like any other)."""
    version, naming = parsed
    if newest is None or version < newest.version:
        return None
    current = newest.extra.get(DATASET_ID_ATTRIBUTE)
    if not current:
        return None
    try:
        manifest = CommitHandler.load_manifest(handler, ManifestLocation(version, path, naming))
    except S3DDBError:  # missing (VersionNotFoundError) or corrupt
        return None  # reported as a manifest without a row
    if not manifest.dataset_id or manifest.dataset_id == current:
        return None
    return (
        f"a manifest of version {version} with no DynamoDB row, of dataset identity "
        f"{manifest.dataset_id}; the newest row records {current}: left by a writer of a "
        "dataset dropped and re-created here whose copy landed after the drop, or planted"
    )


def _manifest_without_row(path: str, version: int, rows: list[int], problem: ReportProblem) -> None:
    """Report the final manifest at ``path`` of ``version``, which has no row, by
    where it lies among the versions that have one (``rows``, sorted)."""
    if rows and version < rows[0]:
        meaning = (
            f"a manifest of version {version}, older than every DynamoDB row: a version "
            "from before the dataset used DynamoDB, or one an interrupted cleanup left "
            "whole; s3+ddb readers see it through the listing"
        )
        fix = "nothing, if it is wanted; s3ddb cleanup removes it as any old version"
    elif rows and version < rows[-1]:
        meaning = (
            f"a manifest of version {version}, which has no DynamoDB row though versions "
            "before and after it have one: left whole by an interrupted cleanup (or its "
            "row was deleted by hand); s3+ddb readers find it only by its number"
        )
        fix = (
            "s3ddb cleanup deletes it and the files only it reads, unless a tag names "
            "it: at once while that cleanup's note (_cleanup/) is left, else once 7 days "
            "old (at any age with delete_unverified)"
        )
    else:
        meaning = (
            f"a manifest of version {version} exists but DynamoDB has no row for it: a "
            "writer committed through s3:// instead of s3+ddb://, or the row was "
            "deleted; s3+ddb readers do not see it"
        )
        fix = (
            "find the writer that bypassed DynamoDB; if the version is wanted, recreate "
            "its row, otherwise delete the manifest"
        )
    problem("manifest_without_row", path, meaning, fix, version)


def _check_identities(identities: dict[int, str], problem: ReportProblem) -> None:
    """Report versions of another dataset identity than the newest version's: left
    by a dataset dropped and re-created under the same name, or planted. Versions
    written before identities were recorded (empty) are not reported."""
    if not identities:
        return
    current = identities[max(identities)]
    for version, identity in sorted(identities.items()):
        if identity and current and identity != current:
            problem(
                "foreign_version",
                str(version),
                f"version {version} belongs to dataset identity {identity}, the newest "
                f"version to {current}: it is left from a dataset that was dropped and "
                "re-created here, or was written by a writer of another dataset",
                "if the newest version is the dataset you want, delete the foreign "
                "version's row and manifest (or drop and re-create the dataset)",
                version,
            )


def _check_data_files(
    store: ObjectStore,
    manifest: Manifest,
    objects: dict[str, ObjectMeta],
    seen: _Referenced,
    problem: ReportProblem,
) -> None:
    """Report each data file of ``manifest`` in the dataset's own root that is
    missing, of another size than recorded (its listed size), or whose footer shows it
    is not the file its fragment describes (not Parquet, another row count, a
    declared column missing): one ranged read of its footer per file, never the whole
    file. A file an earlier version claimed the same of (``seen.data_claims``: rows,
    size, columns) is not read again; one this version claims something else of is,
    since each version's claim is its own. Paths looked at are added to
    ``seen.paths``.

    Raises:
        ManifestCorruptError, PathOutsideDatasetError: a fragment cannot be decoded.
    """
    files = FileResolver.for_manifest(store, manifest)
    field_ids = manifest.schema.top_level_ids()
    for fragment in manifest.fragments:
        for data_file in fragment.files:
            if data_file.base_id is not None:
                continue  # another dataset's file: _check_base_files
            path = layout.data_file_path(data_file.path)
            claim = (
                path,
                fragment.physical_rows,
                data_file.file_size_bytes,
                tuple(sorted(set(data_file.fields) & set(field_ids))),
            )
            if claim in seen.data_claims:
                continue
            seen.data_claims.add(claim)
            reported = path in seen.paths
            seen.paths.add(path)
            meta = objects.get(path)
            if meta is None:
                if reported:
                    continue  # its absence is reported once
                problem(
                    "missing_data_file",
                    path,
                    f"version {manifest.version} reads fragment {fragment.id} from {path}, "
                    "which does not exist: reading that version fails",
                    "restore the object from a backup; or s3ddb restore URI to a "
                    "version that does not use it",
                    manifest.version,
                )
                continue
            try:
                check_data_file(files, data_file, fragment, meta.size, field_ids)
            except DataFileError as exc:
                problem(
                    "corrupt_data_file",
                    path,
                    f"{exc}; reading version {manifest.version} fails",
                    "restore the object from a backup; or s3ddb restore URI to a "
                    "version that does not use it",
                    manifest.version,
                )


def _check_base_files(
    store: ObjectStore,
    manifest: Manifest,
    checked: set[tuple[str, str]],
    problem: ReportProblem,
) -> None:
    """Report each file ``manifest`` reads from a base path (another dataset's root)
    that does not exist there; ``checked`` spares files already looked at."""
    files = FileResolver.for_manifest(store, manifest)
    for base_id, path in referenced_files(manifest):
        if base_id is None:
            continue
        try:
            base_store = files.store_for(base_id)
        except (ManifestCorruptError, PathOutsideDatasetError) as exc:
            refused = ("refused base", f"{manifest.version}/{base_id}")
            if refused in checked:
                continue  # one problem per base and version, not one per file
            checked.add(refused)
            problem(
                "refused_base_path",
                path,
                f"version {manifest.version} reads {path} through a base path that is "
                f"refused: {exc}",
                "restore the dataset to a version without it; or, if you trust the "
                "base, read with the storage option it names",
                manifest.version,
            )
            continue
        if (base_store.url, path) in checked:
            continue
        checked.add((base_store.url, path))
        if not base_store.exists(path):
            problem(
                "missing_base_file",
                f"{base_store.url}/{path}",
                f"version {manifest.version} reads {path} from {files.describe(base_id)}, "
                "which does not have it (the source dataset removed it, e.g. by cleanup "
                "of an untagged version): reading that version fails",
                "restore the file in the source dataset; or restore this dataset to a "
                "version that does not use it",
                manifest.version,
            )


def _is_index(path: str) -> bool:
    return path.startswith(layout.INDICES_DIR + "/")


def _tagged_versions(store: Any, objects: dict[str, ObjectMeta]) -> set[int]:
    out = set()
    for path in objects:
        if tag_name_of(path) is not None:
            try:
                out.add(read_tag_version(store, path))
            except (FileNotFoundError, StoredMetadataError):
                continue  # a tag that names no valid version protects none
    return out
