"""Commits through an external manifest store (DynamoDB): the four-step protocol.

1. Write the staged manifest ``_versions/<final>-<uuid>`` (the transaction file is
   already written by the commit loop).
2. ``put_if_not_exists`` the row (version N, path = staged). Success decides the
   commit. Losing means another writer owns N.
3. Copy staged -> final and verify it.
4. Repoint the row to the final path (conditional on it still being staged), then
   delete the staged object.

Steps 3-4 may fail or crash: the commit is decided, so the writer still reports
success and the next reader or writer finishes them (:meth:`finalize`). An unknown
outcome of step 2 is resolved by reading the row back; if that is impossible the
writer raises :class:`CommitStateUnknownError` and keeps its files. S3 conditional
writes are never used. See docs/protocol.md.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from s3ddb._version import __version__
from s3ddb.commit.failpoints import failpoint
from s3ddb.commit.handlers import (
    CommitHandler,
    ListingCommitHandler,
    ManifestLocation,
    VersionConflict,
)
from s3ddb.errors import (
    CommitStateUnknownError,
    ExternalStoreError,
    ManifestFinalizationError,
    VersionNotFoundError,
)
from s3ddb.external_store.base import (
    ExternalManifestStore,
    ExternalStoreOutcomeUnknownError,
    ManifestRow,
    VersionTakenError,
)
from s3ddb.external_store.identity import final_path_of, same_commit
from s3ddb.format import layout
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import NamingScheme, parse_manifest_name, parse_staged_name
from s3ddb.io.object_store import ObjectStore

log = logging.getLogger(__name__)

_WRITER_ID = uuid.uuid4().hex[:12]


def committer_name() -> str:
    """Who commits: library/version and a writer id (host, pid, random)."""
    return f"s3ddb/{__version__} {socket.gethostname()}:{os.getpid()}:{_WRITER_ID}"


def _naming_of(path: str) -> NamingScheme:
    name = path.rsplit("/", 1)[-1]
    parsed = parse_manifest_name(name) or parse_staged_name(name)
    return parsed[1] if parsed else NamingScheme.V2


class _LegacyVersions(ListingCommitHandler):
    """Read-only view of versions in ``_versions/`` that have no external-store row."""

    mechanism = "listing (read-only)"

    def commit_manifest(self, manifest: Manifest, data: bytes) -> ManifestLocation:
        raise TypeError("versions of an external-store dataset are committed through the store")


class ExternalStoreCommitHandler(CommitHandler):
    """Commit handler for ``s3+ddb://`` datasets (see the module docstring)."""

    mechanism = "external manifest store"

    def __init__(self, store: ObjectStore, external: ExternalManifestStore, base_uri: str) -> None:
        super().__init__(store)
        self.external = external
        self.base_uri = base_uri
        # Datasets created before they used the external store keep their older
        # versions only in _versions/.
        self._listing = _LegacyVersions(store)

    def validate(self) -> None:
        self.external.validate()

    def describe(self) -> str:
        return f"{self.mechanism} {self.external.describe()} for {self.base_uri}"

    # --- reading --------------------------------------------------------------------

    def _location(self, row: ManifestRow) -> ManifestLocation:
        return ManifestLocation(
            row.version,
            row.path,
            _naming_of(row.path),
            row.size,
            row.committed_at,
            row.extra.get("operation"),
        )

    def latest_location(self) -> ManifestLocation | None:
        row = self.external.get_latest(self.base_uri)
        if row is None:
            return self._listing.latest_location()
        return self._location(self.finalize(row))

    def location_of(self, version: int) -> ManifestLocation:
        row = self.external.get(self.base_uri, version)
        if row is not None:
            return self._location(self.finalize(row))
        try:
            return self._listing.location_of(version)
        except VersionNotFoundError:
            raise VersionNotFoundError(
                f"version {version} of {self.base_uri} does not exist"
            ) from None

    def list_locations(self, start: int = 1, end: int | None = None) -> list[ManifestLocation]:
        rows = list(
            self.external.list_versions(self.base_uri, start_version=start, end_version=end)
        )
        out = []
        first_row = rows[0].version if rows else None
        if first_row is None or first_row > start:
            # Versions from before the dataset used the external store.
            upper = (first_row - 1) if first_row is not None else end
            out.extend(self._listing.list_locations(start, upper))
        # Staged rows are listed as they are (their staged manifest is byte-identical
        # to the final one); the newest one is finalized by latest_location.
        out.extend(self._location(row) for row in rows)
        return out

    def locations_since(self, start: int) -> list[ManifestLocation]:
        # One Query for the whole range instead of latest + range.
        rows = list(self.external.list_versions(self.base_uri, start_version=start))
        if not rows:
            return self._listing.locations_since(start) if start == 1 else []
        out = (
            self.list_locations(start, rows[-1].version)
            if rows[0].version > start
            else [self._location(row) for row in rows]
        )
        out[-1] = self._location(self.finalize(rows[-1]))
        return out

    def load_manifest(self, location: ManifestLocation) -> Manifest:
        try:
            return super().load_manifest(location)
        except VersionNotFoundError:
            # A staged manifest vanishes once someone finalized it: use the row's
            # current path.
            if location.path == layout.manifest_path(location.version, location.naming):
                raise
            row = self.external.get(self.base_uri, location.version)
            if row is None:
                raise
            return super().load_manifest(self._location(self.finalize(row)))

    # --- finalizing (steps 3-4) ---------------------------------------------------------

    def finalize(self, row: ManifestRow) -> ManifestRow:
        """Finish steps 3-4 for ``row`` if it is still staged; return the final row.

        Raises:
            ManifestFinalizationError: the staged manifest is missing (and no final
                copy of the right size exists) or has the wrong size. Nothing is
                marked complete.
        """
        if not row.is_staged:
            return row
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
            self.store.copy(row.path, final)
        except FileNotFoundError:
            return self._finalize_without_staged(row, final)
        self._verify_final(row, final)
        return self._repoint(row, final)

    def _verify_final(self, row: ManifestRow, final: str, etag_ok: bool = False) -> None:
        if etag_ok:
            return
        size = self.store.head(final).size
        if size != row.size:
            raise ManifestFinalizationError(
                f"cannot finalize version {row.version} of {self.base_uri}: final manifest "
                f"{final} has {size} bytes after copying {row.path}, expected {row.size}"
            )

    def _repoint(self, row: ManifestRow, final: str) -> ManifestRow:
        self.external.finalize(self.base_uri, row.version, row.path, final)
        failpoint("commit.after_external_finalize")
        self.store.delete(row.path)
        return ManifestRow(
            row.base_uri, row.version, final, row.size, row.committer, row.committed_at, row.extra
        )

    def _finalize_without_staged(self, row: ManifestRow, final: str) -> ManifestRow:
        fresh = self.external.get(self.base_uri, row.version)
        if fresh is not None and not fresh.is_staged:
            return fresh  # another reader or writer finished it meanwhile
        try:
            size = self.store.head(final).size
        except FileNotFoundError:
            size = None
        if size == row.size:
            # Copied but not repointed by someone who then lost the staged object.
            return self._repoint(row, final)
        raise ManifestFinalizationError(
            f"cannot finalize version {row.version} of {self.base_uri}: the external store "
            f"points at staged manifest {row.path}, which is missing, and the final "
            f"manifest {final} is "
            + ("missing" if size is None else f"{size} bytes, expected {row.size}")
        )

    # --- committing (steps 1-2) ---------------------------------------------------------

    def commit_manifest(self, manifest: Manifest, data: bytes) -> ManifestLocation:
        version = manifest.version
        final = layout.manifest_path(version, manifest.naming_scheme)
        staged = layout.staged_manifest_path(version, manifest.naming_scheme)
        staged_etag = self.store.put_with_etag(staged, data)
        failpoint("commit.after_stage_manifest")
        row = ManifestRow(
            self.base_uri,
            version,
            staged,
            len(data),
            committer_name(),
            int(time.time() * 1000),
            {"operation": manifest.operation},
        )
        try:
            self._claim(row)
        except VersionConflict:
            self.store.delete(staged)
            raise
        except CommitStateUnknownError:
            raise
        except Exception:
            # Definitely not claimed (throttled out, refused...): the staged manifest
            # can go.
            self.store.delete(staged)
            raise
        # Decided. From here on nothing may turn this into a reported failure.
        location = ManifestLocation(
            version, staged, manifest.naming_scheme, len(data), row.committed_at, manifest.operation
        )
        try:
            failpoint("commit.after_external_put")
            copy_etag = self.store.copy(staged, final)
            failpoint("commit.after_copy_final")
            self._verify_final(row, final, etag_ok=bool(staged_etag) and staged_etag == copy_etag)
            self._repoint(row, final)
        except Exception as exc:
            log.warning(
                "version %d of %s is committed but not finalized (%s: %s); the next "
                "reader or writer will finish it",
                version,
                self.base_uri,
                type(exc).__name__,
                exc,
            )
            return location
        return ManifestLocation(
            version, final, manifest.naming_scheme, len(data), row.committed_at, manifest.operation
        )

    def _claim(self, row: ManifestRow) -> None:
        """Step 2. Returns if the version is ours.

        Raises:
            VersionConflict: another writer owns the version.
            CommitStateUnknownError: the outcome cannot be determined.
        """
        try:
            self.external.put_if_not_exists(row)
            return
        except VersionTakenError as exc:
            winner = exc.winner
            if winner is not None and same_commit(row, winner):
                return  # our own earlier attempt landed (perhaps already finalized)
            raise VersionConflict(
                row.version, self._location(winner) if winner is not None else None
            ) from None
        except ExternalStoreOutcomeUnknownError as exc:
            unknown: Exception = exc
        # The put may have applied: read the row back.
        try:
            current = self.external.get(self.base_uri, row.version)
            if current is None:
                # Not applied (reads are consistent); try once more, decisively.
                return self._claim_again(row)
        except (ExternalStoreError, CommitStateUnknownError) as exc:
            unknown = exc
            current = None
        if current is not None:
            if same_commit(row, current):
                return
            raise VersionConflict(row.version, self._location(current))
        raise CommitStateUnknownError(
            f"committing version {row.version} of {self.base_uri}: the external store did "
            f"not confirm whether it recorded {row.path} ({unknown}). The commit's files "
            "are kept; re-open the dataset to see whether this version is the commit."
        ) from unknown

    def _claim_again(self, row: ManifestRow) -> None:
        try:
            self.external.put_if_not_exists(row)
        except VersionTakenError as exc:
            if exc.winner is not None and same_commit(row, exc.winner):
                return
            raise VersionConflict(row.version) from None
        except ExternalStoreOutcomeUnknownError as exc:
            raise CommitStateUnknownError(
                f"committing version {row.version} of {self.base_uri}: outcome unknown "
                f"after retrying ({exc}); the commit's files are kept"
            ) from exc
