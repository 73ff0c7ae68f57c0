"""The versions of an ``s3+ddb://`` dataset as the external manifest store's rows give
them: found, checked as they come in, and made final (steps 3-4 of the protocol of
:mod:`s3ddb.commit.external`, which claims them).

Rows of the external manifest store are input: each is checked as it comes in
(:meth:`ExternalStoreVersions.checked_row`) before anything is read, copied or
deleted through it. A version whose row still points at its staged manifest is made
final by whoever needs it: the staged manifest is verified (size, checksum, version,
dataset identity), copied to its final name, the copy checked, the row repointed and
the staged object deleted. This process's own commits do that on its background
finalizer; anyone else's staged version is finished by the next reader or writer that
needs it (:meth:`ExternalStoreVersions.finalize`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from s3ddb.catalogs import update_catalogs
from s3ddb.commit.failpoints import failpoint
from s3ddb.commit.finalizer import BackgroundFinalizer, FinalizeTicket, NothingToFinish
from s3ddb.commit.handlers import (
    CommitHandler,
    ListingCommitHandler,
    ManifestLocation,
)
from s3ddb.commit.manifest_cache import MANIFESTS, CacheKey
from s3ddb.commit.own_newest import OwnNewest
from s3ddb.errors import (
    ExternalStoreError,
    ManifestCorruptError,
    ManifestFinalizationError,
    PathOutsideDatasetError,
    StoredMetadataError,
    VersionNotFoundError,
)
from s3ddb.external_store.identity import CLAIM_ATTRIBUTE, final_path_of, same_commit
from s3ddb.external_store.manifest_store import (
    DATASET_ID_ATTRIBUTE,
    GROUP_ID_ATTRIBUTE,
    GROUP_MEMBERS_ATTRIBUTE,
    MANIFEST_SHA256_ATTRIBUTE,
    MAX_GROUP_ACTIONS,
    ExternalManifestStore,
    ManifestRow,
)
from s3ddb.format import layout
from s3ddb.format.chunks import ChunkSource, missing_chunk
from s3ddb.format.limits import MAX_MANIFEST_BYTES
from s3ddb.format.manifest import MANIFEST_SHA256_RE, Manifest, has_manifest_digest
from s3ddb.format.naming import NamingScheme, parse_manifest_name, parse_staged_name
from s3ddb.format.version_metrics import METRICS_ATTRIBUTE
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites
from s3ddb.io.paths import name_problem
from s3ddb.observe import telemetry

__all__ = ["OWN_COMMITS", "ExternalStoreVersions"]

log = logging.getLogger(__name__)


#: The newest version this process committed to each dataset (by base URI), and its
#: row: a writer that is alone builds on it without a ``Query`` (one round trip less).
OWN_COMMITS: OwnNewest[tuple[ManifestLocation, ManifestRow]] = OwnNewest(max_datasets=1024)


class _LegacyVersions(ListingCommitHandler):
    """Read-only view of versions in ``_versions/`` that have no external-store row."""

    mechanism = "listing (read-only)"

    def commit_manifest(
        self,
        manifest: Manifest,
        data: bytes,
        pending: PendingWrites | None = None,
        previous: Manifest | None = None,
    ) -> ManifestLocation:
        raise TypeError("versions of an external-store dataset are committed through the store")


#: Pauses between reads of a final manifest that reads missing, torn or of the wrong
#: size (about a second in all): S3-compatible stores that rewrite an object in place
#: show it so while several writers copy one version to its final name.
_SETTLE_DELAYS = (0.05, 0.1, 0.2, 0.4)
#: Rows a handler remembers (the newest versions': only they matter).
_ROWS_KEPT = 64
#: A staged row this much older than its commit time is taken for abandoned (its
#: writer died between copying and repointing): writers repoint it.
_ABANDONED_AFTER_MS = 2_000


def _naming_of(path: str) -> NamingScheme:
    name = path.rsplit("/", 1)[-1]
    parsed = parse_manifest_name(name) or parse_staged_name(name)
    return parsed[1] if parsed else NamingScheme.V2


class _EarlierVersionStaged(ManifestFinalizationError):
    """A version of a group stays staged because one before it could not be finished."""


class VersionReplacedError(ManifestFinalizationError, NothingToFinish):
    """A writer finishing its own commit found its version held by another commit: the
    dataset was dropped and re-created after the claim (the drop deleted the staged
    manifest). Nothing is left to finish; the commit is gone with the dropped dataset."""


class ExternalStoreVersions(CommitHandler):
    """The reading side of an ``s3+ddb://`` dataset's commit handler (see the module
    docstring): it finds versions through their rows and finishes staged ones (steps
    3-4); :class:`s3ddb.commit.external.ExternalStoreCommitHandler` adds the claims.

    Args:
        store: the dataset's objects.
        external: the manifest store deciding versions.
        base_uri: the dataset's key in ``external``.
        finalizer: where steps 3-4 of this handler's commits run; None runs them in
            the committing call.
    """

    def __init__(
        self,
        store: ObjectStore,
        external: ExternalManifestStore,
        base_uri: str,
        *,
        finalizer: BackgroundFinalizer | None = None,
    ) -> None:
        super().__init__(store)
        self.external = external
        self.base_uri = base_uri
        self.finalizer = finalizer
        # Datasets created before they used the external store keep their older
        # versions only in _versions/.
        self._listing = _LegacyVersions(store)
        # The newest state of each row this handler has seen (Query, lost claims, own
        # commits): it tells whether version N-1 is known final before claiming N.
        self._rows: dict[int, ManifestRow] = {}
        # Versions since a read version are loaded on several threads at once.
        self._rows_lock = threading.Lock()

    def validate(self) -> None:
        self.external.validate()

    def manifest_store(self) -> tuple[ExternalManifestStore, str]:
        return self.external, self.base_uri

    def external_versions(self) -> ExternalStoreVersions:
        return self

    def dataset_key(self) -> str:
        return self.base_uri

    def describe(self) -> str:
        info = self.external.describe()
        if "table" in info:
            where = (
                f"DynamoDB table {info['table']!r} (endpoint "
                f"{info.get('endpoint') or 'default AWS'}, region {info.get('region')})"
            )
        else:
            where = ", ".join(f"{k}={v}" for k, v in info.items())
        return f"{self.mechanism}: {where}, for {self.base_uri}"

    # --- reading ----------------------------------------------------------------------

    def presumed_latest(self) -> ManifestLocation | None:
        own = OWN_COMMITS.presumed(self.base_uri)
        if own is None:
            return None
        location, row = own
        key = self._cache_key(location)
        if key is None or MANIFESTS.get(key) is None:
            return None  # its manifest is no longer cached: asking costs the same
        self._note(row)
        return location

    def latest_location(self, *, finalize: bool = True) -> ManifestLocation | None:
        row = self._get_latest()
        if row is None:
            return self._listing.latest_location()
        return self.location_of_row(self.finished(row) if finalize else row)

    def location_of(self, version: int) -> ManifestLocation:
        """Where ``version``'s manifest is: by its row; without one, by listing (a
        version from before the dataset used the external store, or one an
        interrupted cleanup left), but never above the newest row: no commit through
        the store puts a final manifest before its row, so one there was written by
        another writer (or planted), and its digest is recorded nowhere.

        Raises:
            VersionNotFoundError: no such version, or only one above the newest row.
        """
        row = self._get(version)
        if row is not None:
            return self.location_of_row(self.finished(row))
        newest = self._get_latest()
        if newest is not None and version > newest.version:
            raise VersionNotFoundError(
                f"version {version} of {self.base_uri} does not exist: the newest version "
                f"committed through the external store is {newest.version} (a manifest of "
                f"version {version} in the bucket, if any, was not committed through it: "
                "s3ddb verify reports it)"
            )
        try:
            return self._listing.location_of(version)
        except VersionNotFoundError:
            raise VersionNotFoundError(
                f"version {version} of {self.base_uri} does not exist"
            ) from None

    def list_locations(self, start: int = 1, end: int | None = None) -> list[ManifestLocation]:
        rows = self._list(start, end)
        out = []
        first_row = rows[0].version if rows else None
        if first_row is None or first_row > start:
            # Versions from before the dataset used the external store.
            upper = (first_row - 1) if first_row is not None else end
            out.extend(self._listing.list_locations(start, upper))
        # Staged rows are listed as they are (their staged manifest is byte-identical
        # to the final one); the newest one is finalized by latest_location.
        out.extend(self.location_of_row(row) for row in rows)
        return out

    def locations_since(self, start: int, *, finalize: bool = True) -> list[ManifestLocation]:
        # One Query for the whole range instead of latest + range.
        rows = self._list(start)
        if not rows:
            return self._listing.locations_since(start) if start == 1 else []
        out = (
            self.list_locations(start, rows[-1].version)
            if rows[0].version > start
            else [self.location_of_row(row) for row in rows]
        )
        if finalize:
            out[-1] = self.location_of_row(self.finished(rows[-1]))
        return out

    def location_of_row(self, row: ManifestRow) -> ManifestLocation:
        """Where the version ``row`` records is (``row`` as given: see :meth:`checked_row`)."""
        return ManifestLocation(
            row.version,
            row.path,
            _naming_of(row.path),
            row.size,
            row.committed_at,
            row.extra.get("operation"),
            row.extra.get(DATASET_ID_ATTRIBUTE),
            row.extra.get(GROUP_ID_ATTRIBUTE),
            row.extra.get(GROUP_MEMBERS_ATTRIBUTE),
            row.extra.get(METRICS_ATTRIBUTE),
            row.extra.get(MANIFEST_SHA256_ATTRIBUTE),
        )

    def load_manifest(self, location: ManifestLocation) -> Manifest:
        """The manifest at ``location`` (staged or final; cached per process).

        Raises:
            VersionNotFoundError: the manifest is missing.
            ManifestCorruptError: it is truncated, corrupt, of the wrong size or
                version.
        """
        key = self._cache_key(location)
        cached = MANIFESTS.get(key) if key is not None else None
        if cached is not None:
            return cached
        try:
            manifest = self._load_settled(location)
        except VersionNotFoundError:
            # A staged manifest vanishes once someone finalized it: use the row's
            # current path.
            if location.path == layout.manifest_path(location.version, location.naming):
                raise
            row = self._get(location.version)
            if row is None:
                raise
            manifest = self._load_settled(self.location_of_row(self.finished(row)))
        self._check_identity(manifest, location)
        if key is not None:
            MANIFESTS.put(key, manifest)
        return manifest

    def _check_identity(self, manifest: Manifest, location: ManifestLocation) -> None:
        """The manifest must carry the identity its row records.

        Raises:
            ManifestCorruptError: it does not (a manifest of another dataset, or of a
                re-created one, under this version's name).
        """
        if location.dataset_id is not None and manifest.dataset_id != location.dataset_id:
            raise ManifestCorruptError(
                f"manifest {location.path} of version {location.version} of {self.base_uri} "
                f"belongs to dataset identity {manifest.dataset_id or 'none'}, but the "
                f"external store's row records {location.dataset_id}"
            )

    def _cache_key(self, location: ManifestLocation) -> CacheKey | None:
        if location.size is None or location.committed_at_ms is None:
            return None  # a legacy version found by listing: no commit identity
        return (
            self.base_uri,
            location.version,
            final_path_of(location.path),
            location.size,
            location.committed_at_ms,
            location.sha256 or "",
        )

    def _load_settled(self, location: ManifestLocation) -> Manifest:
        """Load ``location``; a *final* manifest that reads missing or torn is read
        again for about a second. Several writers may copy one version's staged
        manifest to its final name at once (the same bytes), and S3-compatible stores
        that rewrite an object in place (s3rver, some appliances) show it missing or
        part-written meanwhile. On AWS S3 the first answer is final.

        Raises:
            VersionNotFoundError, ManifestCorruptError: as :meth:`load_manifest`.
        """
        final = location.path == layout.manifest_path(location.version, location.naming)
        for delay in _SETTLE_DELAYS:
            try:
                return super().load_manifest(location)
            except (VersionNotFoundError, ManifestCorruptError):
                if not final:
                    raise
                time.sleep(delay)
        return super().load_manifest(location)

    # --- rows, checked as they come in ------------------------------------------------

    def checked_row(self, row: ManifestRow) -> ManifestRow:
        """``row`` if its path is a manifest of its own version under ``_versions/``.

        Rows are input: whoever can write the table can plant one. Nothing is read,
        copied or deleted through a row before this check.

        Raises:
            PathOutsideDatasetError: the path is anything else.
        """
        directory, _, name = row.path.partition("/")
        problem = (
            f"it is not under {layout.VERSIONS_DIR}/"
            if directory != layout.VERSIONS_DIR
            else name_problem(name)
        )
        if problem is None:
            parsed = parse_manifest_name(name) or parse_staged_name(name)
            if parsed is None or parsed[0] != row.version:
                problem = f"it does not name a manifest of version {row.version}"
        if problem is not None:
            raise PathOutsideDatasetError(
                f"refusing manifest path {row.path!r} (found in the external store's row "
                f"for version {row.version} of {self.base_uri}): {problem}"
            )
        digest = row.extra.get(MANIFEST_SHA256_ATTRIBUTE)
        if digest is not None and MANIFEST_SHA256_RE.fullmatch(digest) is None:
            raise StoredMetadataError(
                f"the external store's row for version {row.version} of {self.base_uri} "
                f"records {MANIFEST_SHA256_ATTRIBUTE}={digest[:80]!r}, which is no SHA-256 "
                "digest (64 lowercase hex digits)"
            )
        return row

    def _get(self, version: int) -> ManifestRow | None:
        row = self.external.get(self.base_uri, version)
        return self._note(self.checked_row(row)) if row is not None else None

    def _get_latest(self) -> ManifestRow | None:
        row = self.external.get_latest(self.base_uri)
        return self._note(self.checked_row(row)) if row is not None else None

    def _list(self, start: int, end: int | None = None) -> list[ManifestRow]:
        rows = self.external.list_versions(self.base_uri, start_version=start, end_version=end)
        return [self._note(self.checked_row(row)) for row in rows]

    def _note(self, row: ManifestRow) -> ManifestRow:
        """Remember ``row`` as the newest state of its version (a final row is never
        replaced by a staged one)."""
        with self._rows_lock:
            known = self._rows.get(row.version)
            if known is None or known.is_staged or not row.is_staged:
                self._rows[row.version] = row
                if len(self._rows) > _ROWS_KEPT:  # only the newest versions matter
                    del self._rows[min(self._rows)]
        return row

    # --- finalizing (steps 3-4) -------------------------------------------------------

    def _ticket(self, row: ManifestRow) -> FinalizeTicket | None:
        if self.finalizer is None or not row.is_staged:
            return None
        return self.finalizer.ticket((self.base_uri, row.version), row.path)

    def finished(self, row: ManifestRow) -> ManifestRow:
        """``row`` as a reader uses it: made final (this process's finalizer is waited
        for if it holds the row, no race with it; anything else is finalized here),
        or still staged, whose manifest reads the same, when it cannot be finished
        now (this principal may not, or an earlier version of its group cannot be).

        Raises:
            ManifestFinalizationError, and what reading or copying raised: as
            :meth:`finalize`.
        """
        if not row.is_staged:
            return row
        ticket = self._ticket(row)
        if ticket is not None and ticket.wait_done() and ticket.result is not None:
            return self._note(replace(row, path=ticket.result))
        try:
            return self._note(self._repair(row))
        except _EarlierVersionStaged as exc:
            # Its staged manifest reads the same; it is finished once the versions
            # before it are (by the next reader, writer or sync).
            log.warning("%s", exc)
            return row
        except PermissionError as exc:
            # A read-only principal cannot finish the commit; the staged manifest is
            # byte-identical to the final one, so it reads that.
            log.warning(
                "version %d of %s is staged and this principal may not finalize it (%s); "
                "reading its staged manifest",
                row.version,
                self.base_uri,
                exc,
            )
            return row

    def _repair(self, row: ManifestRow) -> ManifestRow:
        """:meth:`finalize` of another writer's staged ``row``, traced as
        ``s3ddb.repair`` and counted."""
        attributes = {
            "s3ddb.dataset": telemetry.dataset_attribute(self.base_uri),
            "s3ddb.version": row.version,
        }
        with telemetry.span("s3ddb.repair", attributes) as span:
            finished = self.finalize(row)
            span.set_attribute("s3ddb.outcome", "finished")
        telemetry.add("s3ddb.repairs", 1)
        return finished

    def _finalize_group_predecessors(self, row: ManifestRow) -> None:
        """Before finishing ``row``: a group (``s3ddb.atomic``) that made several
        versions of this dataset claimed them in one request, so the versions before
        ``row`` may be staged too, and their writer gone. Finish them first, oldest
        first: a version becomes final only after the one before it, so a reader
        listing ``_versions/`` sees a prefix of history. They are found from the
        rows themselves (each staged row before ``row`` of the same group, walking
        back), not from the group's member list, which is only as good as its
        spelling of the dataset.

        Raises:
            ManifestFinalizationError: an earlier version could not be finished (or
                its row read); ``row`` must then stay staged for the next reader,
                writer or ``sync``.
        """
        group = row.extra.get(GROUP_ID_ATTRIBUTE)
        version = row.version - 1
        try:
            staged: list[ManifestRow] = []
            while version >= 1:
                if len(staged) >= MAX_GROUP_ACTIONS:
                    # One request claims a group: it cannot hold more versions than
                    # that. More staged rows of one group id were not all its own.
                    raise StoredMetadataError(
                        f"more than {MAX_GROUP_ACTIONS} staged versions before version "
                        f"{row.version} of {self.base_uri} name its group {group!r}: one "
                        "group claims fewer (rows not written by s3ddb)"
                    )
                known = self._rows.get(version)
                earlier = known if known is not None and not known.is_staged else self._get(version)
                if (
                    earlier is None
                    or not earlier.is_staged
                    or earlier.extra.get(GROUP_ID_ATTRIBUTE) != group
                ):
                    break
                staged.append(earlier)
                version -= 1
            for earlier in reversed(staged):
                version = earlier.version
                self._note(self._finalize_one(earlier))
        except Exception as exc:
            raise _EarlierVersionStaged(
                f"version {row.version} of {self.base_uri} stays staged: version {version} "
                f"of the same group (s3ddb.atomic) could not be finalized first ({exc})"
            ) from exc

    def put_back_final(self, row: ManifestRow) -> str | None:
        """For a final ``row`` whose final manifest is missing: copy the staged
        manifest it was claimed with (the one its claim recorded, verified as
        :meth:`finalize` does) to the final name again; returns that staged path, or
        None when the row records none or it is gone. Any other staged manifest of the
        version (a writer's that lost the claim, or one planted) is never taken.

        Raises:
            ManifestFinalizationError: the staged manifest is not the one ``row``
                committed (size, checksum, version or identity); nothing was copied.
        """
        staged = row.extra.get(CLAIM_ATTRIBUTE)
        if not isinstance(staged, str) or final_path_of(staged) != row.path or staged == row.path:
            return None
        try:
            self._verify_manifest(row, staged)
            self.store.copy(staged, row.path)
        except FileNotFoundError:
            return None
        self._verify_final(row, row.path)
        return staged

    def finalize(self, row: ManifestRow) -> ManifestRow:
        """Finish steps 3-4 for ``row`` if it is still staged; return the final row.
        The versions of this dataset that ``row``'s group claimed with it are
        finished first, oldest first.

        Raises:
            ManifestFinalizationError: the staged manifest is missing (and no final
                copy of the right size exists) or has the wrong size; or an earlier
                version of its group could not be finished. Nothing of ``row`` is
                marked complete.
        """
        if not row.is_staged:
            return row
        if GROUP_ID_ATTRIBUTE in row.extra:
            self._finalize_group_predecessors(row)
        return self._finalize_one(row)

    def _finalize_one(self, row: ManifestRow) -> ManifestRow:
        """:meth:`finalize` of ``row`` alone."""
        final = final_path_of(row.path)
        try:
            staged = self.store.head(row.path)
        except FileNotFoundError:
            return self._finalize_without_staged(row, final)
        if staged.size != row.size:
            raise ManifestFinalizationError(
                f"cannot finalize version {row.version} of {self.base_uri}: staged manifest "
                f"{row.path} has {staged.size} bytes, the external store recorded {row.size}"
            )
        try:
            self._verify_manifest(row, row.path)
        except FileNotFoundError:
            return self._finalize_without_staged(row, final)
        try:
            self.store.copy(row.path, final)
        except FileNotFoundError:
            return self._finalize_without_staged(row, final)
        self._verify_final(row, final)
        return self._repoint(row, final)

    def _verify_manifest(self, row: ManifestRow, path: str) -> None:
        """Read the manifest at ``path`` and check it is the one ``row`` committed: its
        size, checksum, version and dataset identity. Done before a manifest someone
        else staged is copied to its final name or its row repointed, so a planted
        row or object never reaches the name that plain ``s3://`` readers use. The
        checked manifest is cached for the reads that follow.

        Raises:
            FileNotFoundError: it is missing.
            ManifestFinalizationError: it is not the manifest ``row`` committed;
                nothing was copied or repointed.
        """
        # Read no further than the row's size (a file grown to gigabytes is not read).
        data, size = self.store.get_bounded(path, max(0, min(row.size, MAX_MANIFEST_BYTES)))
        problem = None
        manifest = None
        digest = row.extra.get(MANIFEST_SHA256_ATTRIBUTE)
        if size != row.size:
            problem = f"it has {size} bytes, the row records {row.size}"
        elif digest is not None and not has_manifest_digest(data, digest):
            problem = "its SHA-256 digest is not the one the row records"
        else:
            try:
                manifest = Manifest.from_bytes(
                    data, f"{self.store.url}/{path}", ChunkSource(self.store)
                )
                problem = missing_chunk(self.store, manifest)
            except (ManifestCorruptError, PathOutsideDatasetError) as exc:
                problem = f"it does not decode ({exc})"
        if manifest is not None:
            recorded = row.extra.get(DATASET_ID_ATTRIBUTE)
            if manifest.version != row.version:
                problem = f"it holds version {manifest.version}"
            elif recorded is not None and manifest.dataset_id != recorded:
                problem = (
                    f"it belongs to dataset identity {manifest.dataset_id or 'none'}, the row "
                    f"records {recorded}"
                )
        if problem is not None:
            raise ManifestFinalizationError(
                f"cannot finalize version {row.version} of {self.base_uri}: manifest {path} "
                f"is not the one its row committed: {problem}. Nothing was copied or "
                "repointed."
            )
        assert manifest is not None
        key = self._cache_key(self.location_of_row(row))
        if key is not None:
            MANIFESTS.put(key, manifest)

    def _verify_final(self, row: ManifestRow, final: str, etag_ok: bool = False) -> None:
        if etag_ok:
            return
        size = self._settled_size(final, row.size)
        if size != row.size:
            raise ManifestFinalizationError(
                f"cannot finalize version {row.version} of {self.base_uri}: final manifest "
                f"{final} has {size} bytes after copying {row.path}, expected {row.size}"
            )

    def _settled_size(self, path: str, expected: int) -> int | None:
        """The size of ``path`` (None if missing), asked again for about a second while
        it is missing or not ``expected``: several writers may finalize one version at
        once, and S3-compatible stores that replace an object by rewriting it in place
        (s3rver, some appliances) briefly show it missing or part-written. On AWS S3 the
        first answer is final."""
        for delay in _SETTLE_DELAYS:
            size = self._size_of(path)
            if size == expected:
                return size
            time.sleep(delay)
        return self._size_of(path)

    def _size_of(self, path: str) -> int | None:
        try:
            return self.store.head(path).size
        except FileNotFoundError:
            return None

    publishes_on_finish = True

    def _repoint(self, row: ManifestRow, final: str) -> ManifestRow:
        # Publication comes before the repoint: a crash in between leaves the row
        # staged, and whoever finishes it next publishes the version (see
        # s3ddb.open_formats.publisher). It never fails the repoint. The catalog
        # table (AWS Glue) moves after the repoint, so Glue's latency does not delay
        # it; a crash in between is caught up like a failed catalog update.
        manifest = self._manifest_to_publish(row, final)
        published = manifest is not None and self.publish_open_formats(
            manifest, update_catalog=False
        )
        self.external.finalize(self.base_uri, row.version, row.path, final)
        failpoint("commit.after_external_finalize")
        if published and manifest is not None:
            update_catalogs(self.store, manifest, newest=self.newest_version)
        self._discard_staged(row.path)
        return replace(row, path=final)

    def manifest_if_kept(self, version: int) -> Manifest | None:
        """As :meth:`CommitHandler.manifest_if_kept`; a version whose row this handler
        knows (the one before its own commit, usually) costs no request: its manifest
        is cached, and a staged one reads the same as its final copy."""
        known = self._rows.get(version)
        if known is not None:
            try:
                return self.load_manifest(self.location_of_row(known))
            except (VersionNotFoundError, ManifestCorruptError):
                pass  # removed by cleanup meanwhile, say: ask the table
        return super().manifest_if_kept(version)

    def _manifest_to_publish(self, row: ManifestRow, final: str) -> Manifest | None:
        """``row``'s manifest, whose final copy at ``final`` was verified: from the
        cache (it almost always is: the writer or the finisher just checked it), else
        read from ``final``. None if that fails: publication is then caught up later,
        the repoint goes on."""
        location = self.location_of_row(row)
        key = self._cache_key(location)
        cached = MANIFESTS.get(key) if key is not None else None
        if cached is not None:
            return cached
        try:
            manifest = CommitHandler.load_manifest(self, replace(location, path=final))
            self._check_identity(manifest, location)
        except Exception as exc:  # never fails the repoint
            log.debug("version %d of %s: not published now (%s)", row.version, self.base_uri, exc)
            return None
        return manifest

    def _finalize_without_staged(self, row: ManifestRow, final: str) -> ManifestRow:
        fresh = self._get(row.version)
        if fresh is not None and not fresh.is_staged:
            return fresh  # another reader or writer finished it meanwhile
        size = self._settled_size(final, row.size)
        if size == row.size:
            # Copied but not repointed by someone who then lost the staged object.
            try:
                self._verify_manifest(row, final)
            except FileNotFoundError:
                pass
            else:
                return self._repoint(row, final)
        raise ManifestFinalizationError(
            f"cannot finalize version {row.version} of {self.base_uri}: the external store "
            f"points at staged manifest {row.path}, which is missing, and the final "
            f"manifest {final} is "
            + ("missing" if size is None else f"{size} bytes, expected {row.size}")
        )

    def _finish_own(
        self,
        row: ManifestRow,
        staged_etag: str | None,
        copied: Callable[[], None] = lambda: None,
    ) -> str:
        """Steps 3-4 of this handler's own commit (on the background finalizer, or
        inline without one); ``copied`` is called once the final manifest exists.
        Returns the final path.

        Raises:
            Whatever finishing fails with; for a version of a group, also a failure
            to finish the version before it (this one then stays staged).
        """
        attributes = {
            "s3ddb.dataset": telemetry.dataset_attribute(self.base_uri),
            "s3ddb.version": row.version,
        }
        with telemetry.span("s3ddb.commit.finish", attributes):
            return self._finish_own_steps(row, staged_etag, copied)

    def _finish_own_steps(
        self, row: ManifestRow, staged_etag: str | None, copied: Callable[[], None]
    ) -> str:
        if GROUP_ID_ATTRIBUTE in row.extra:
            # A group claims consecutive versions of one dataset in one request, so
            # version N-1 may still be staged here (its own finishing failed). Finish
            # it first: a reader listing _versions/ must see a prefix of history,
            # never N without N-1. Free when N-1 is known final.
            self._ensure_previous_final(row.version)
        final = final_path_of(row.path)
        try:
            copy_etag = self.store.copy(row.path, final)
        except FileNotFoundError:
            # A reader finished it (and deleted the staged object) first, or a drop
            # deleted it: then the version may hold another commit now, whose final
            # path must not be noted as this commit's.
            done = self._finalize_without_staged(row, final)
            if not same_commit(row, done):
                # Not presumed the newest any more: the dataset is another one now.
                OWN_COMMITS.lost(self.base_uri)
                raise VersionReplacedError(
                    f"version {row.version} of {self.base_uri} now holds another commit "
                    f"({done.path}, committed by {done.committer or 'an unnamed writer'}): "
                    "the dataset was dropped and re-created after this commit claimed it"
                ) from None
            copied()
            return done.path
        failpoint("commit.after_copy_final")
        self._verify_final(row, final, etag_ok=bool(staged_etag) and staged_etag == copy_etag)
        copied()
        return self._repoint(row, final).path

    def _ensure_previous_final(self, version: int) -> ManifestRow | None:
        """Make sure version ``version - 1`` is completely final (manifest copied and
        row repointed) before claiming ``version``, so that a reader listing
        ``_versions/`` is at most one behind and ``verify`` finds nothing left over
        after a crash. Returns its row (None: no row, or ``version`` is 1).

        Usually free: this process's own previous commit is left to its finalizer
        once copied, and a row seen final needs nothing. A staged row of another
        writer (who is most likely finishing it right now) costs one HEAD of its final
        manifest; if that exists the row is repointed here, else the writer may be
        gone and the version is finalized here. Both are idempotent and race safely
        with that writer.
        """
        previous = version - 1
        if previous < 1:
            return None
        row = self._rows.get(previous)
        if row is None:
            row = self._get(previous)
            if row is None:
                return None  # a legacy version found by listing, or a dropped dataset
        if not row.is_staged:
            return row
        ticket = self._ticket(row)
        if ticket is not None and ticket.wait_copied():
            return row  # this process's finalizer repoints it next
        final = final_path_of(row.path)
        try:
            size: int | None = self.store.head(final).size
        except FileNotFoundError:
            size = None
        if size == row.size:
            # Copied: its writer repoints it next, unless it died after the copy. A row
            # still staged well after its commit is repointed here (off the caller's
            # path when there is a finalizer), so verify is healthy again once a writer
            # passes; a young one is left to its writer, which is almost always alive.
            if time.time() * 1000 - row.committed_at >= _ABANDONED_AFTER_MS:
                self._repoint_abandoned(row)
            return row
        return self._note(self.finalize(row))

    def _repoint_abandoned(self, row: ManifestRow) -> None:
        """Steps 3-4 for another writer's row whose final manifest exists (its size was
        checked, nothing more): finished as any staged row is, from the staged
        manifest the row committed, verified, copied over the final name again. An
        object of the right size at the final name is not taken on its word:
        repointing to it would make it the version, and delete the staged manifest
        that was."""

        def repoint() -> str:
            try:
                return self._note(self.finalize(row)).path
            except ExternalStoreError:
                # Repointed by its own writer meanwhile (or the row moved on).
                fresh = self._get(row.version)
                if fresh is None or fresh.is_staged:
                    raise
                return fresh.path

        if self.finalizer is None:
            try:
                repoint()
            except Exception as exc:  # the claim must not fail for a repair
                log.warning(
                    "could not repoint version %d of %s: %s", row.version, self.base_uri, exc
                )
            return
        if self.finalizer.ticket((self.base_uri, row.version), row.path) is None:
            self.finalizer.submit((self.base_uri, row.version), row.path, lambda _ticket: repoint())

    def _discard_staged(self, staged: str) -> None:
        if self.finalizer is not None:
            self.finalizer.defer_delete(self.store, staged)
        else:
            self.store.delete(staged)


# --- groups: the outcome of one claim of several parts ------------------------------
