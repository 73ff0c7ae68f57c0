"""Commits through an external manifest store (DynamoDB): the four-step protocol.

1. Write the staged manifest ``_versions/<final>-<uuid>`` (in parallel with the data
   and transaction files the commit loop started).
2. ``put_if_not_exists`` the row (version N, path = staged). Success decides the
   commit. Losing means another writer owns N. Before claiming N, the writer makes
   sure version N-1's final manifest exists (invariant 4: a reader that lists
   ``_versions/`` is at most one version behind).
3. Copy staged -> final and verify it.
4. Repoint the row to the final path (conditional on it still being staged), then
   delete the staged object.

Steps 3-4 of this process's own commits run on its background finalizer
(:mod:`s3ddb.commit.finalizer`), off the caller's path; a handler built without one
runs them inline. Either way they may fail or crash: the commit is decided, so the
writer still reports success and the next reader or writer finishes them
(:mod:`s3ddb.commit.external_versions`, which also finds and checks the versions). An
unknown outcome of step 2 is resolved by reading the row back; if that is impossible
the writer raises :class:`CommitStateUnknownError` and keeps its files. S3
conditional writes are never used. See docs/protocol.md.

One handler claims one version (a conditional put of its row) or, for a group
(``s3ddb.atomic``), one version of each part, of several datasets, in one atomic
request (one ``TransactWriteItems``): the same steps 1 and 3-4 for every part, and
one claim whose unknown outcome is settled by reading the rows back and resending
with the same token.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace

from s3ddb.commit.external_versions import OWN_COMMITS, ExternalStoreVersions, VersionReplacedError
from s3ddb.commit.failpoints import failpoint
from s3ddb.commit.finalizer import BackgroundFinalizer
from s3ddb.commit.handlers import (
    ClaimOutcome,
    ClaimPart,
    CommitHandler,
    ManifestLocation,
    VersionConflict,
    removed_by_cleanup,
)
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.errors import (
    CommitMechanismError,
    CommitStateUnknownError,
    DatasetRecreatedError,
    ExternalStoreError,
)
from s3ddb.external_store.identity import CLAIM_ATTRIBUTE, same_commit
from s3ddb.external_store.manifest_store import (
    DATASET_ID_ATTRIBUTE,
    GROUP_ID_ATTRIBUTE,
    GROUP_MEMBERS_ATTRIBUTE,
    MANIFEST_SHA256_ATTRIBUTE,
    ExternalManifestStore,
    ExternalStoreOutcomeUnknownError,
    Fence,
    FenceFailedError,
    GroupClaim,
    GroupRefusedError,
    ManifestRow,
    VersionTakenError,
    claim_group,
    encode_members,
    read_rows,
)
from s3ddb.format import layout
from s3ddb.format.manifest import DYNAMODB, Manifest, manifest_sha256
from s3ddb.format.version_metrics import METRICS_ATTRIBUTE, dumps_metrics
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites, process_pool, run_beside
from s3ddb.version import __version__

__all__ = ["ExternalStoreCommitHandler", "committer_name"]

log = logging.getLogger(__name__)

_WRITER_ID = uuid.uuid4().hex[:12]


@functools.lru_cache(maxsize=4)
def _committer_for(pid: int) -> str:
    return f"s3ddb/{__version__} {socket.gethostname()}:{pid}:{_WRITER_ID}"


def committer_name() -> str:
    """Who commits: library/version and a writer id (host, pid, random)."""
    return _committer_for(os.getpid())


@dataclass
class _Staged:
    """A part after step 1: its handler, manifest, the row that claims it, the
    fence of that claim and the put of its staged manifest."""

    handler: ExternalStoreCommitHandler
    manifest: Manifest
    row: ManifestRow
    fence: Fence | None
    put: Future[str | None]


class ExternalStoreCommitHandler(ExternalStoreVersions):
    """Commit handler for ``s3+ddb://`` datasets (see the module docstring): it claims
    versions (steps 1-2), one at a time or several of several datasets at once (a
    group), and finds and finishes them as :class:`~s3ddb.commit.external_versions.
    ExternalStoreVersions` does.

    Args:
        store: the dataset's objects.
        external: the manifest store deciding versions.
        base_uri: the dataset's key in ``external``.
        finalizer: where steps 3-4 of this handler's commits run; None runs them in
            the committing call.
    """

    mechanism = "external manifest store"

    def __init__(
        self,
        store: ObjectStore,
        external: ExternalManifestStore,
        base_uri: str,
        *,
        finalizer: BackgroundFinalizer | None = None,
    ) -> None:
        super().__init__(store, external, base_uri, finalizer=finalizer)
        self._mechanism: tuple[str, str] | None = None

    def group_kind(self) -> str | None:
        return "s3+ddb://"

    def shares_transactions_with(self, other: CommitHandler) -> bool:
        """Another dataset whose table is behind the same endpoint, region and
        credentials (one DynamoDB transaction spans one account and region)."""
        return isinstance(other, ExternalStoreCommitHandler) and (
            self.external.shares_transactions_with(other.external)
        )

    def transactions_unavailable(self) -> str | None:
        if self.external.transactions:
            return None
        return (
            "its DynamoDB store is used without transactions (dynamodb_transactions=false), "
            "and a group is decided by one TransactWriteItems (a snapshot checked by one "
            "TransactGetItems)"
        )

    def claim_actions(self, follows: bool) -> int:
        # A fenced claim is two actions: the check of its predecessor and the put.
        return 1 if follows else 2

    def mechanism_record(self) -> tuple[str, str]:
        if self._mechanism is None:
            # The table's name alone: describe() would resolve endpoint and region.
            table = self.external.table_name
            if not table:
                info = self.external.describe()
                table = info.get("table") or f"memory-{info.get('name') or 'default'}"
            self._mechanism = (DYNAMODB, re.sub(r"[^A-Za-z0-9_.:-]", "_", str(table))[:255])
        return self._mechanism

    def writer_uri(self, mechanism: str, table: str) -> str:
        if mechanism == DYNAMODB:
            return f"s3+ddb://{self.base_uri[len('s3://') :]}?ddbTableName={table}"
        return self.base_uri

    # --- committing (steps 1-2) -------------------------------------------------------

    def _fence(
        self, version: int, previous: Manifest | None, row: ManifestRow | None
    ) -> Fence | None:
        """The condition on version ``version - 1`` under which ``version`` may be
        claimed (None: creating the dataset).

        Raises:
            CommitMechanismError: ``previous`` records that this dataset commits through
                DynamoDB, yet the table has no rows for it (its objects were copied
                here, or its rows deleted).
        """
        if previous is None or version < 2:
            return None
        if row is None and self._get_latest() is None:
            if previous.commit_mechanism == DYNAMODB and not self.adopting:
                raise CommitMechanismError(
                    f"refusing to commit to {self.base_uri}: version {previous.version} says "
                    f"the dataset commits through DynamoDB table {previous.commit_table!r}, "
                    f"but {self.describe()} holds no rows for it (its objects were copied "
                    "here, or its rows were deleted). To commit this copy through this "
                    "table, run `s3ddb migrate-commits` with this URI once nothing else "
                    "writes it."
                )
            # Versions committed before the dataset used the store (listing only):
            # adopt them, claiming only if nobody else did.
            return Fence(version - 1, absent=True)
        return Fence(version - 1, previous.dataset_id)

    def commit_manifest(
        self,
        manifest: Manifest,
        data: bytes,
        pending: PendingWrites | None = None,
        previous: Manifest | None = None,
    ) -> ManifestLocation:
        # A claim of one part: steps 1-2 for it, with one conditional write.
        writes = pending if pending is not None else PendingWrites()
        (staged,) = self._stage_parts([(ClaimPart(self, manifest, previous, writes), data)])
        self._claim_staged(staged.row, staged.fence)
        # Decided. From here on nothing may turn this into a reported failure.
        return self._finish_won(manifest, staged.row, staged.put)

    def _stage_parts(
        self, parts: Sequence[tuple[ClaimPart, bytes]], group: dict[str, str] | None = None
    ) -> list[_Staged]:
        """Step 1 for every part (its framed manifest beside it): each staged manifest
        put, its predecessor made final, its fence; the row that claims it, with
        ``group``'s attributes when several parts are claimed together. Every staged
        manifest is sent before any is waited for: the parts' uploads overlap.

        Raises:
            CommitMechanismError (a base records another mechanism), whatever a
            write or the predecessor check raised: after deleting every staged
            manifest written.
        """
        staged: list[_Staged] = []
        puts: list[tuple[ExternalStoreCommitHandler, str, Future[str | None]]] = []
        try:
            for part, data in parts:
                handler = part.handler
                assert isinstance(handler, ExternalStoreCommitHandler)
                handler.check_writable(part.base)
                manifest = part.manifest
                path = layout.staged_manifest_path(manifest.version, manifest.naming_scheme)
                puts.append((handler, path, part.writes.put(handler.store, path, data)))
            for (part, data), (handler, path, put) in zip(parts, puts):
                if part.follows is None:
                    fence = handler._stage(part.manifest.version, part.base, part.writes)
                else:
                    # Its predecessor is claimed in the same request, fenced itself.
                    part.writes.wait()
                    fence = None
                row = handler._claim_row(part.manifest, path, data, group)
                staged.append(_Staged(handler, part.manifest, row, fence, put))
        except BaseException:
            for handler, path, put in puts:
                try:
                    put.result()  # none may land after its deletion
                except Exception:
                    pass
                handler._discard_unclaimed(path)
            raise
        return staged

    def _stage(
        self, version: int, previous: Manifest | None, writes: PendingWrites
    ) -> Fence | None:
        """Step 1 of claiming ``version`` on ``previous``: wait for ``writes`` (the
        staged manifest among them) while making sure version ``version - 1`` is
        final; returns the claim's fence (None: nothing to check).

        Raises:
            Whatever a write, the predecessor check or :meth:`_fence` raised (e.g.
            CommitMechanismError); the caller deletes the staged manifest.
        """
        previous_final: Future[ManifestRow | None] = run_beside(
            self.store, lambda: self._ensure_previous_final(version)
        )
        try:
            writes.wait()
        finally:
            previous_row = previous_final.result()  # never leave it running
        fence = self._fence(version, previous, previous_row)
        failpoint("commit.after_stage_manifest")
        return fence

    def _discard_unclaimed(self, staged: str) -> None:
        """Delete the staged manifest ``staged`` of a claim that definitely did not
        apply (a failure is logged: the staged object is then an orphan that cleanup
        removes)."""
        try:
            self.store.delete(staged)
        except Exception as exc:
            log.warning("could not delete staged manifest %s: %s", staged, exc)

    def _claim_row(
        self, manifest: Manifest, staged: str, data: bytes, group: dict[str, str] | None = None
    ) -> ManifestRow:
        """The row claiming ``manifest``'s version, pointing at its staged manifest
        ``staged`` holding ``data`` (the row records its size and SHA-256 digest), with
        ``group``'s attributes if it is claimed in one; built here, nothing is sent.
        Never raises."""
        extra = {
            "operation": manifest.operation,
            CLAIM_ATTRIBUTE: staged,
            MANIFEST_SHA256_ATTRIBUTE: manifest_sha256(data),
        }
        if manifest.metrics:
            extra[METRICS_ATTRIBUTE] = dumps_metrics(manifest.metrics)
        if manifest.dataset_id:
            extra[DATASET_ID_ATTRIBUTE] = manifest.dataset_id
        if group:
            extra.update(group)
        return ManifestRow(
            self.base_uri,
            manifest.version,
            staged,
            len(data),
            committer_name(),
            # The manifest's commit time, which never decreases from one version to
            # the next (time travel bisects on it), rather than this writer's clock.
            manifest.timestamp_nanos // 1_000_000,
            extra,
        )

    def _claim_staged(self, row: ManifestRow, fence: Fence | None) -> None:
        """Step 2 (:meth:`_claim`), deleting the staged manifest ``row.path`` when the
        version is definitely not this commit's.

        Raises:
            As :meth:`_claim`; after CommitStateUnknownError the staged manifest stays.
        """
        try:
            self._claim(row, fence)
        except VersionConflict:
            OWN_COMMITS.lost(self.base_uri)
            self._discard_staged(row.path)
            raise
        except CommitStateUnknownError:
            raise
        except Exception:
            # Definitely not claimed (throttled out, refused, fenced...): the staged
            # manifest can go.
            self.store.delete(row.path)
            raise

    def _finish_won(
        self, manifest: Manifest, row: ManifestRow, staged_put: Future[str | None]
    ) -> ManifestLocation:
        """After the claim of ``row`` (``manifest``'s version; ``staged_put``: the put
        of its staged manifest) won: remember it, then run steps 3-4 on the finalizer
        (or here, without one). Returns the version's location.

        Never raises: the commit is decided, so a failure of steps 3-4 is logged and
        left to the next reader or writer.
        """
        self._note(row)
        location = self.location_of_row(row)
        key = self._cache_key(location)
        if key is not None:
            MANIFESTS.put(key, manifest)
            OWN_COMMITS.won(row.base_uri, location.version, (location, row))
        try:
            failpoint("commit.after_external_put")
            etag = staged_put.result()
            if self.finalizer is not None:
                self.finalizer.submit(
                    (self.base_uri, row.version),
                    row.path,
                    lambda ticket: self._finish_own(row, etag, ticket.mark_copied),
                )
                return location
            final = self._finish_own(row, etag)
            return self.location_of_row(self._note(replace(row, path=final)))
        except VersionReplacedError as exc:
            log.warning(
                "version %d of %s was committed, then dropped with its dataset: %s",
                row.version,
                self.base_uri,
                exc,
            )
            return location
        except Exception as exc:
            log.warning(
                "version %d of %s is committed but not finalized (%s: %s); the next "
                "reader or writer will finish it",
                row.version,
                self.base_uri,
                type(exc).__name__,
                exc,
            )
            return location

    def _claim(self, row: ManifestRow, fence: Fence | None = None) -> None:
        """Step 2. Returns if the version is ours.

        Raises:
            VersionConflict: another writer owns the version.
            DatasetRecreatedError: the fence failed: the version built on is gone or
                belongs to another dataset identity. Nothing was claimed.
            CommitStateUnknownError: the outcome cannot be determined.
        """
        unknown: Exception | None = self._put_row(row, fence)
        if unknown is None:
            return
        # The put may have applied: read the row back. Whatever stops that read
        # (throttling, credentials expiring meanwhile...) leaves the outcome unknown:
        # a definite failure would delete the files of a version that may be claimed.
        try:
            current = self._get(row.version)
        except Exception as exc:
            unknown, current = exc, None
        else:
            if current is None:
                # Not applied (reads are consistent); try once more, decisively.
                try:
                    return self._claim_again(row, fence)
                except ExternalStoreError as exc:
                    unknown = exc
        if current is not None:
            if same_commit(row, current):
                return
            raise self._conflict(row.version, current)
        raise CommitStateUnknownError(
            f"committing version {row.version} of {self.base_uri}: the external store did "
            f"not confirm whether it recorded {row.path} ({unknown}). The commit's files "
            "are kept; re-open the dataset to see whether this version is the commit."
        ) from unknown

    def _fence_error(
        self, row: ManifestRow, fence: Fence | None, exc: FenceFailedError
    ) -> Exception:
        """The error to raise for the claim of ``row`` that ``fence`` refused (``exc``):
        RetryableCommitConflictError if cleanup removed the versions after this
        commit's base (newer versions of the same identity exist), otherwise
        DatasetRecreatedError (the dataset was dropped or re-created). This process
        stops presuming its own commits are the newest.

        Raises:
            ExternalStoreError and its kinds: reading the newest row failed.
        """
        OWN_COMMITS.lost(self.base_uri)  # what this process committed may be gone
        if exc.predecessor is None and fence is not None and not fence.absent:
            latest = self._get_latest()
            if (
                latest is not None
                and latest.version > row.version
                and latest.extra.get(DATASET_ID_ATTRIBUTE, "") == fence.dataset_id
            ):
                return removed_by_cleanup(self.base_uri, fence.version, row.version, latest.version)
        return DatasetRecreatedError(
            f"refusing to commit version {row.version} of {self.base_uri}: {exc}. Nothing "
            "was committed; re-open the dataset and run the operation again if it still "
            "applies."
        )

    def _conflict(self, version: int, winner: ManifestRow | None) -> VersionConflict:
        if winner is None:
            return VersionConflict(version)
        return VersionConflict(version, self.location_of_row(self._note(self.checked_row(winner))))

    def _put_row(
        self, row: ManifestRow, fence: Fence | None
    ) -> ExternalStoreOutcomeUnknownError | None:
        """Send the claim of ``row`` once.

        Returns:
            None if the version is this commit's (this put's, or an earlier attempt's,
            perhaps already finalized); the store's error if the outcome is unknown.

        Raises:
            VersionConflict: another writer owns the version.
            DatasetRecreatedError, RetryableCommitConflictError: the fence failed (see
                :meth:`_fence_error`).
        """
        try:
            self.external.put_if_not_exists(row, fence)
        except VersionTakenError as exc:
            if exc.winner is not None and same_commit(row, exc.winner):
                return None
            raise self._conflict(row.version, exc.winner) from None
        except FenceFailedError as exc:
            raise self._fence_error(row, fence, exc) from None
        except ExternalStoreOutcomeUnknownError as exc:
            return exc
        return None

    def _claim_again(self, row: ManifestRow, fence: Fence | None) -> None:
        """The second and last claim, after a first one of unknown outcome that did
        not apply.

        Raises:
            As :meth:`_put_row`; CommitStateUnknownError: the outcome is unknown again.
        """
        unknown = self._put_row(row, fence)
        if unknown is not None:
            raise CommitStateUnknownError(
                f"committing version {row.version} of {self.base_uri}: outcome unknown "
                f"after retrying ({unknown}); the commit's files are kept"
            ) from unknown

    # --- claiming several parts at once (groups) ---------------------------------------

    def claim_parts(self, parts: Sequence[ClaimPart], group_id: str) -> ClaimOutcome:
        """Stage every part (step 1, as a single commit stages), then claim all of them
        in one atomic request (:func:`~s3ddb.external_store.manifest_store.
        claim_group`: one ``TransactWriteItems`` on DynamoDB), each row naming the
        group; a won group finishes each version as a single commit does.

        Raises:
            As :meth:`CommitHandler.claim_parts`; ExternalStoreError and others:
            nothing claimed (staged manifests deleted).
        """
        members = encode_members(
            [(p.handler.dataset_key(), p.manifest.version, p.manifest.commit_table) for p in parts]
        )
        group = {GROUP_ID_ATTRIBUTE: group_id, GROUP_MEMBERS_ATTRIBUTE: members}
        staged = self._stage_parts([(p, p.manifest.to_bytes()) for p in parts], group)
        claims = [GroupClaim(s.handler.external, s.row, s.fence) for s in staged]
        try:
            won = _send_group(claims, str(uuid.uuid4()))
        except CommitStateUnknownError:
            raise
        except GroupRefusedError as exc:
            _discard_all(staged)
            return ClaimOutcome(moved=_moved(staged, exc))
        except Exception:
            # Definitely not applied (throttled out, refused...). An interrupt, which may
            # stop the claim in flight, is no Exception: its staged manifests stay.
            _discard_all(staged)
            raise
        if not won:
            _discard_all(staged)
            held = _held_by_others(claims)
            return ClaimOutcome(moved=tuple(i for i, r in enumerate(held) if r))
        # Decided, for every part. From here on nothing may turn this into a failure.
        return ClaimOutcome(
            locations=[s.handler._finish_won(s.manifest, s.row, s.put) for s in staged]
        )

    def latest_together(
        self, handlers: Sequence[CommitHandler]
    ) -> list[ManifestLocation | None] | None:
        """Read the newest row of every dataset (in parallel: one round trip), then
        check in one consistent read (``TransactGetItems``) that none has a next
        version: the versions read were then the newest at that read's instant, which
        is serializable with every group's claim. A staged newest version is finished
        first, as any reader does. Versions from before a dataset used the store are
        found by listing.
        """
        externals: list[ExternalStoreCommitHandler] = []
        for handler in handlers:
            assert isinstance(handler, ExternalStoreCommitHandler)
            externals.append(handler)
        pool = process_pool("snapshot")

        def newest(handler: ExternalStoreCommitHandler) -> ManifestRow | ManifestLocation | None:
            row = handler.external.get_latest(handler.base_uri)
            if row is not None:
                return handler.checked_row(row)
            return handler.latest_location(finalize=False)

        found = list(pool.map(newest, externals))
        if any(f is None for f in found):
            return [_location(h, f) for h, f in zip(externals, found)]  # not found: None
        read = [
            (h.external, h.base_uri, f.version) for h, f in zip(externals, found) if f is not None
        ]
        if _any_next_version(read):
            return None

        def finished(i: int) -> ManifestLocation | None:
            return _location(externals[i], found[i], finish=True)

        return list(pool.map(finished, range(len(externals))))


def _location(
    handler: ExternalStoreCommitHandler,
    found: ManifestRow | ManifestLocation | None,
    finish: bool = False,
) -> ManifestLocation | None:
    """The location of the version ``found`` (a row, made final first if ``finish``;
    or a version found by listing)."""
    if found is None or isinstance(found, ManifestLocation):
        return found
    return handler.location_of_row(handler.finished(found) if finish else found)


def _any_next_version(newest: list[tuple[ExternalManifestStore, str, int]]) -> bool:
    """Whether any dataset of ``newest`` (store, base URI, newest version read) has a
    next version now: one consistent read of every next row."""
    keys = [(store, base_uri, version + 1) for store, base_uri, version in newest]
    return any(row is not None for row in read_rows(keys))


def _send_group(claims: list[GroupClaim], token: str) -> bool:
    """Send the group claim; after an unknown outcome read the rows back and, if
    none is there, send it once more with the same token (DynamoDB applies a token
    once in ten minutes, so the resend settles the first request). True: the group
    is ours; False: another writer holds some of its versions (nothing of ours
    applied, nor can apply: our rows are put only where none is).

    Raises:
        GroupRefusedError: refused (see :func:`~s3ddb.external_store.manifest_store.
            claim_group`).
        ExternalStoreError and others: the first request was refused and nothing
            applied (once one may have applied, every failure is unknown).
        CommitStateUnknownError: the outcome stays unknown. That includes a resend
            refused before DynamoDB processed it: the first request, whose response
            was lost, may still apply.
    """
    unknown: Exception | None = None
    for _send_number in (1, 2):
        try:
            claim_group(claims, token)
            return True
        except ExternalStoreOutcomeUnknownError as exc:
            unknown = exc
        except GroupRefusedError:
            raise  # cancelled on its conditions: nothing of this token applied
        except Exception as exc:
            if unknown is None:
                raise  # the only request sent was refused: nothing applied
            # Whatever its type, it does not tell whether the first request landed.
            unknown = exc
            break
        try:
            current = read_rows([(c.store, c.row.base_uri, c.row.version) for c in claims])
        except Exception as exc:  # unread (or unreadable: a malformed row), still unknown
            unknown = exc
            break
        if any(r is not None and same_commit(c.row, r) for c, r in zip(claims, current)):
            return True  # all or nothing: one of ours is there, so all are
        if any(r is not None for r in current):
            return False
        # No row yet: send again, with the same token, to settle it.
    raise CommitStateUnknownError(
        f"committing a group of {len(claims)} versions ({token}): the external store "
        f"did not confirm whether it recorded them ({unknown}). The group's files are "
        "kept; re-open the datasets to see whether its versions are there."
    ) from unknown


def _held_by_others(claims: list[GroupClaim]) -> list[bool]:
    """Which claims' versions another writer holds (read back after a lost response)."""
    rows = read_rows([(c.store, c.row.base_uri, c.row.version) for c in claims])
    return [r is not None and not same_commit(c.row, r) for c, r in zip(claims, rows)]


def _moved(staged: list[_Staged], refused: GroupRefusedError) -> tuple[int, ...]:
    """The parts whose version another writer holds.

    Raises:
        DatasetRecreatedError, RetryableCommitConflictError: a fence failed.
        ExternalStoreError: refused without a reason for any part.
    """
    moved = []
    for i, refusal in enumerate(refused.refusals):
        s = staged[i]
        if isinstance(refusal, FenceFailedError):
            raise s.handler._fence_error(s.row, s.fence, refusal) from None
        if isinstance(refusal, VersionTakenError):
            OWN_COMMITS.lost(s.handler.base_uri)
            moved.append(i)
    if not moved:
        raise ExternalStoreError(f"group claim refused without a reason: {refused}")
    return tuple(moved)


def _discard_all(staged: list[_Staged]) -> None:
    for s in staged:
        s.handler._discard_unclaimed(s.row.path)
