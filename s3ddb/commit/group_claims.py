"""The claim of a group commit: every part's version decided in one atomic request.

On ``s3+ddb://`` each part is staged as a single commit stages (its staged manifest,
its predecessor made final, its fence), then every row goes into one
``TransactWriteItems`` (:func:`s3ddb.external_store.group.claim_group`). On
``memory://`` every manifest is put under the memory store's lock unless one of their
names is taken. See :mod:`s3ddb.commit.group` for the loop around it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace

from s3ddb.commit.committer import _CommitInProgress
from s3ddb.commit.external import OWN_COMMITS, ExternalStoreCommitHandler
from s3ddb.commit.failpoints import failpoint
from s3ddb.commit.handlers import (
    CommitHandler,
    ConditionalPutCommitHandler,
    ManifestLocation,
    VersionConflict,
)
from s3ddb.errors import CommitStateUnknownError, ExternalStoreError
from s3ddb.external_store.base import (
    ExternalStoreOutcomeUnknownError,
    Fence,
    FenceFailedError,
    ManifestRow,
    VersionTakenError,
)
from s3ddb.external_store.group import (
    GROUP_ID_ATTRIBUTE,
    GROUP_MEMBERS_ATTRIBUTE,
    GroupClaim,
    GroupRefusedError,
    claim_group,
    encode_members,
    read_rows,
)
from s3ddb.external_store.identity import same_commit
from s3ddb.format import layout
from s3ddb.format.manifest import Manifest
from s3ddb.io.memory_transactions import put_all_if_absent

__all__ = ["ClaimOutcome", "ClaimRound", "claim_external", "claim_memory"]

log = logging.getLogger(__name__)


@dataclass
class ClaimRound:
    """One attempt to claim every part's version: part ``i`` claims ``manifests[i]``
    built on ``bases[i]`` through ``handlers[i]``."""

    handlers: Sequence[CommitHandler]
    commits: Sequence[_CommitInProgress]
    bases: Sequence[Manifest | None]
    manifests: Sequence[Manifest]
    follows: Sequence[int | None]
    group_id: str

    def members(self) -> list[tuple[str, int, str]]:
        """Every part's dataset (its base URI), version and DynamoDB table."""
        return [
            (getattr(h, "base_uri", h.store.url), m.version, m.commit_table)
            for h, m in zip(self.handlers, self.manifests)
        ]


@dataclass
class ClaimOutcome:
    """``locations``: the group won, one location per part. Otherwise ``moved``: the
    parts whose datasets moved (their version is taken); nothing was claimed."""

    locations: list[ManifestLocation] | None = None
    moved: tuple[int, ...] = ()


# --- s3+ddb:// ------------------------------------------------------------------------


@dataclass
class _Staged:
    handler: ExternalStoreCommitHandler
    manifest: Manifest
    row: ManifestRow
    fence: Fence | None
    put: Future[str | None]


def claim_external(claim: ClaimRound) -> ClaimOutcome:
    """Stage every part, then claim all of them in one atomic request.

    Raises:
        DatasetRecreatedError, RetryableCommitConflictError: a fence failed (a dataset
            was dropped or re-created, or cleanup removed a base); nothing claimed.
        CommitStateUnknownError: the outcome is unknown; staged manifests kept.
        ExternalStoreError and others: nothing claimed (staged manifests deleted).
    """
    staged = _stage_all(claim)
    claims = [GroupClaim(s.handler.external, s.row, s.fence) for s in staged]
    token = str(uuid.uuid4())
    try:
        won = _send(claims, token)
    except CommitStateUnknownError:
        raise
    except GroupRefusedError as exc:
        _delete_staged(staged)
        return ClaimOutcome(moved=_moved(staged, exc))
    except Exception:
        # Definitely not applied (throttled out, refused...). An interrupt, which may
        # stop the claim in flight, is no Exception: its staged manifests stay.
        _delete_staged(staged)
        raise
    if not won:
        _delete_staged(staged)
        return ClaimOutcome(moved=tuple(i for i, r in enumerate(_current(claims)) if r))
    # Decided, for every part. From here on nothing may turn this into a failure.
    return ClaimOutcome(locations=[s.handler.finish_won(s.manifest, s.row, s.put) for s in staged])


def _stage_all(claim: ClaimRound) -> list[_Staged]:
    """Step 1 for every part: staged manifests, predecessors final, fences; the rows
    that claim them, each naming the group.

    Raises:
        Whatever staging raised, after deleting every staged manifest written.
    """
    members = encode_members(claim.members())
    staged: list[_Staged] = []
    paths: list[tuple[ExternalStoreCommitHandler, str]] = []
    puts = []
    try:
        # Every part's staged manifest is sent before any is waited for: the parts'
        # uploads overlap.
        for i, manifest in enumerate(claim.manifests):
            handler = claim.handlers[i]
            assert isinstance(handler, ExternalStoreCommitHandler)
            handler.check_writable(claim.bases[i])
            data = manifest.to_bytes()
            path = layout.staged_manifest_path(manifest.version, manifest.naming_scheme)
            puts.append((data, claim.commits[i].writes.put(handler.store, path, data)))
            paths.append((handler, path))
        for i, manifest in enumerate(claim.manifests):
            handler, path = paths[i]
            data, put = puts[i]
            writes = claim.commits[i].writes
            if claim.follows[i] is None:
                fence = handler.stage(manifest.version, claim.bases[i], writes, path)
            else:
                # Its predecessor is claimed in the same request, fenced itself.
                writes.wait()
                fence = None
            row = handler.claim_row(manifest, path, len(data))
            extra = dict(row.extra)
            extra[GROUP_ID_ATTRIBUTE] = claim.group_id
            extra[GROUP_MEMBERS_ATTRIBUTE] = members
            staged.append(_Staged(handler, manifest, replace(row, extra=extra), fence, put))
    except BaseException:
        for _, put in puts:  # none may land after its deletion
            try:
                put.result()
            except Exception:
                pass
        for handler, path in paths:
            try:
                handler.store.delete(path)
            except Exception as exc:
                log.warning("could not delete staged manifest %s: %s", path, exc)
        raise
    return staged


def _send(claims: list[GroupClaim], token: str) -> bool:
    """Send the group claim; after an unknown outcome read the rows back and, if
    none is there, send it once more with the same token (DynamoDB applies a token
    once in ten minutes, so the resend settles the first request). True: the group
    is ours; False: another writer holds some of its versions (nothing of ours
    applied, nor can apply: our rows are put only where none is).

    Raises:
        GroupRefusedError: refused (see :func:`claim_group`).
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


def _current(claims: list[GroupClaim]) -> list[bool]:
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
            raise s.handler.fence_error(s.row, s.fence, refusal) from None
        if isinstance(refusal, VersionTakenError):
            OWN_COMMITS.lost(s.handler.base_uri)
            moved.append(i)
    if not moved:
        raise ExternalStoreError(f"group claim refused without a reason: {refused}")
    return tuple(moved)


def _delete_staged(staged: list[_Staged]) -> None:
    for s in staged:
        try:
            s.handler.store.delete(s.row.path)
        except Exception as exc:
            log.warning("could not delete staged manifest %s: %s", s.row.path, exc)


# --- memory:// ------------------------------------------------------------------------


def claim_memory(claim: ClaimRound) -> ClaimOutcome:
    """Put every part's manifest under the memory store's lock, or none.

    Raises:
        DatasetRecreatedError: a base is gone or of another identity.
    """
    items = []
    moved = []
    for i, manifest in enumerate(claim.manifests):
        handler = claim.handlers[i]
        assert isinstance(handler, ConditionalPutCommitHandler)
        base = claim.bases[i]
        handler.check_writable(base)
        claim.commits[i].writes.wait()
        path = layout.manifest_path(manifest.version, manifest.naming_scheme)
        if base is not None and claim.follows[i] is None:
            try:
                handler.check_predecessor(manifest, base, path)
            except VersionConflict:
                moved.append(i)
        items.append((handler.store, path, manifest.to_bytes()))
    if moved:
        return ClaimOutcome(moved=tuple(moved))
    taken = put_all_if_absent(items)
    if any(taken):
        return ClaimOutcome(moved=tuple(i for i, t in enumerate(taken) if t))
    try:
        failpoint("commit.after_external_put")
    except Exception as exc:  # decided: never a reported failure
        log.warning("group %s committed; %s", claim.group_id, exc)
    return ClaimOutcome(
        locations=[
            h.location_written(m, path, data)
            for h, m, (_, path, data) in zip(claim.handlers, claim.manifests, items)
            if isinstance(h, ConditionalPutCommitHandler)
        ]
    )
