"""The external-store handler's rows and steps 3-4 (see :mod:`s3ddb.commit.external`).

Rows of the external manifest store are input: each is checked as it comes in
(:meth:`StagedVersionsHandler.checked_row`) before anything is read, copied or
deleted through it. A version whose row still points at its staged manifest is made
final here: the staged manifest is verified (size, checksum, version, dataset
identity), copied to its final name, the copy checked, the row repointed and the
staged object deleted. This process's own commits do that on its background finalizer;
anyone else's staged version is finished by the next reader or writer that needs it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from s3ddb.commit.failpoints import failpoint
from s3ddb.commit.finalizer import BackgroundFinalizer, FinalizeTicket
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.commit.manifest_cache import MANIFESTS, CacheKey
from s3ddb.errors import (
    ExternalStoreError,
    ManifestCorruptError,
    ManifestFinalizationError,
    PathOutsideDatasetError,
    VersionNotFoundError,
)
from s3ddb.external_store.base import DATASET_ID_ATTRIBUTE, ExternalManifestStore, ManifestRow
from s3ddb.external_store.group import (
    GROUP_ID_ATTRIBUTE,
    GROUP_MEMBERS_ATTRIBUTE,
)
from s3ddb.external_store.identity import final_path_of
from s3ddb.format import layout
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import NamingScheme, parse_manifest_name, parse_staged_name
from s3ddb.io.paths import name_problem

__all__ = ["StagedVersionsHandler"]

log = logging.getLogger(__name__)

#: Pauses between reads of a final manifest that reads missing, torn or of the wrong
#: size (about a second in all): S3-compatible stores that rewrite an object in place
#: show it so while several writers copy one version to its final name.
_SETTLE_DELAYS = (0.05, 0.1, 0.2, 0.4)
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


class StagedVersionsHandler(CommitHandler):
    """The part of :class:`s3ddb.commit.external.ExternalStoreCommitHandler` that reads
    rows and finishes staged versions (steps 3-4). Not a handler on its own: the
    subclass sets the attributes below and claims versions.

    Attributes:
        external: the manifest store deciding versions.
        base_uri: the dataset's key in ``external``.
        finalizer: where steps 3-4 of this process's commits run (None: inline).
    """

    external: ExternalManifestStore
    base_uri: str
    finalizer: BackgroundFinalizer | None
    #: The newest state of each row this handler has seen (Query, lost claims, own
    #: commits): it tells whether version N-1 is known final before claiming N.
    _rows: dict[int, ManifestRow]

    # --- reading --------------------------------------------------------------------

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
        )

    # --- rows, checked as they come in ----------------------------------------------

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
        known = self._rows.get(row.version)
        if known is None or known.is_staged or not row.is_staged:
            self._rows[row.version] = row
            if len(self._rows) > _ROWS_KEPT:  # only the newest versions matter
                del self._rows[min(self._rows)]
        return row

    def _cache_key(self, location: ManifestLocation) -> CacheKey | None:
        if location.size is None or location.committed_at_ms is None:
            return None  # a legacy version found by listing: no commit identity
        return (
            self.base_uri,
            location.version,
            final_path_of(location.path),
            location.size,
            location.committed_at_ms,
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

    # --- finalizing (steps 3-4) ---------------------------------------------------------

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
            return self._note(self.finalize(row))
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
        data = self.store.get(path)
        problem = None
        manifest = None
        if len(data) != row.size:
            problem = f"it has {len(data)} bytes, the row records {row.size}"
        else:
            try:
                manifest = Manifest.from_bytes(data, f"{self.store.url}/{path}")
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

    def _repoint(self, row: ManifestRow, final: str) -> ManifestRow:
        self.external.finalize(self.base_uri, row.version, row.path, final)
        failpoint("commit.after_external_finalize")
        self._discard_staged(row.path)
        return replace(row, path=final)

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
            # A reader finished it (and deleted the staged object) first.
            done = self._finalize_without_staged(row, final)
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
                self._repoint_abandoned(row, final)
            return row
        return self._note(self.finalize(row))

    def _repoint_abandoned(self, row: ManifestRow, final: str) -> None:
        """Step 4 for another writer's row whose final manifest exists (its size was
        checked). Repointing changes no manifest a reader sees, only which name the
        row gives; both are byte-identical."""

        def repoint() -> str:
            try:
                return self._note(self._repoint(row, final)).path
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
