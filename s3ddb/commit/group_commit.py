"""Group commits: several transactions, on several datasets, committed all or nothing.

The loop is the single commit loop (:mod:`s3ddb.commit.committer`) run side by side
for every part, with one claim for all of them, which the parts' commit handlers make
(:meth:`~s3ddb.commit.handlers.CommitHandler.claim_parts`: a single commit is the
claim of one part):

1. Write every part's transaction file (failpoint ``commit.after_transaction_file``)
   and catch up with the versions committed since its base.
2. Build every part's next manifest. Parts on one dataset are consecutive versions:
   the second builds on the first's manifest.
3. Claim every version at once: on DynamoDB one ``TransactWriteItems`` holding each
   part's fenced claim, in memory one locked check-and-put. The group is decided
   here, for every part together (failpoint ``commit.after_external_put`` right after).
4. If the claim was refused because some datasets moved, rebase those parts on the
   versions committed meanwhile (the usual conflict rules) and go to 2. A part whose
   rebase fails fails the whole group, with the usual typed error, and nothing is
   visible. A refused fence (dataset dropped or re-created) fails the group too.
5. After the decision each dataset finishes its own version (steps 3-4 of the
   protocol) exactly as a single commit does, so readers repair a crash after 3.

Files are deleted only when the group definitely failed; after an unknown outcome
(:class:`~s3ddb.errors.CommitStateUnknownError`) they are kept.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from s3ddb.commit.committer import (
    CommitConfig,
    CommitResult,
    _build_next,
    _CommitInProgress,
    _discard_superseded,
    _RetryBudget,
    _write_first_transaction,
)
from s3ddb.commit.handlers import ClaimPart, CommitHandler
from s3ddb.errors import (
    AtomicGroupError,
    CommitStateUnknownError,
    RetryableCommitConflictError,
)
from s3ddb.format.manifest import Manifest
from s3ddb.io.parallel import PendingWrites
from s3ddb.observe import telemetry
from s3ddb.observe.commit_metrics import replayed_operation_metrics
from s3ddb.open_formats.model import GROUP_METADATA_KEY
from s3ddb.open_formats.publisher import check_publishable
from s3ddb.operations import Transaction

__all__ = ["GROUP_PROPERTY", "GroupPart", "check_together", "commit_group"]

log = logging.getLogger(__name__)

#: Transaction property naming the group a transaction was committed in (its
#: version's manifest records it under the same table-metadata key).
GROUP_PROPERTY = GROUP_METADATA_KEY


@dataclass
class GroupPart:
    """One change of a group.

    Attributes:
        handler: the dataset's commit handler.
        txn: the change, read at ``base``.
        base: the version it was planned on. For a part that ``follows`` another,
            the manifest that part was planned to produce.
        pending: uploads of the change's files still in flight.
        fresh_base: ``base`` was seen as the newest version moments ago.
        follows: the index of the previous part on the same dataset, if any.
        recorded: what the call that planned the change recorded for its commit
            (:func:`~s3ddb.observe.commit_metrics.recorded_operation_metrics`: its
            name and figures), recorded when the group commits.
    """

    handler: CommitHandler
    txn: Transaction
    base: Manifest
    pending: PendingWrites | None = None
    fresh_base: bool = False
    follows: int | None = None
    recorded: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Group:
    parts: Sequence[GroupPart]
    group_id: str
    commits: list[_CommitInProgress] = field(default_factory=list)
    currents: list[Manifest | None] = field(default_factory=list)


def check_together(handlers: Sequence[CommitHandler]) -> None:
    """Returns if ``handlers``' datasets can be claimed (and read) together: all of one
    kind of group (:meth:`~s3ddb.commit.handlers.CommitHandler.group_kind`).

    Raises:
        AtomicGroupError: anything else (local paths, ``s3://``, a mix).
    """
    kinds = {h.group_kind() for h in handlers}
    if len(kinds) == 1 and None not in kinds:
        return
    names = sorted({h.group_kind() or _no_group(h) for h in handlers})
    raise AtomicGroupError(
        "an atomic group takes only s3+ddb:// datasets (tables in one account and "
        f"region) or only memory:// datasets; got {', '.join(names)}"
    )


def _no_group(handler: CommitHandler) -> str:
    return f"{handler.store.url.split('://', 1)[0]}:// or a local path"


def commit_group(
    parts: Sequence[GroupPart],
    *,
    group_id: str | None = None,
    config: CommitConfig | None = None,
) -> list[CommitResult]:
    """Commit every part, or none (see the module docstring). Returns each part's
    result, in order.

    Raises:
        AtomicGroupError: the parts cannot commit together; nothing was written.
        RetryableCommitConflictError, IncompatibleTransactionError: a part conflicts
            with a version committed since its base (also: a dataset with several
            parts moved); nothing is visible and the group's files are deleted.
        DatasetRecreatedError: a dataset was dropped or re-created; files deleted.
        TooMuchWriteContentionError: retries exhausted; files deleted.
        CommitStateUnknownError: the group's outcome is unknown; files kept.
    """
    if not parts:
        return []
    check_together([p.handler for p in parts])
    group = _Group(parts, group_id or str(uuid.uuid4()))
    group.commits = [
        _CommitInProgress(p.handler, p.txn, "rebase", p.pending or PendingWrites()) for p in parts
    ]
    try:
        for commit, part in zip(group.commits, parts):
            _write_first_transaction(commit, part.base)
        group.currents = [
            None
            if part.follows is not None
            else (part.base if part.fresh_base else commit.catch_up(part.base))
            for commit, part in zip(group.commits, parts)
        ]
        with telemetry.span("s3ddb.commit", {"s3ddb.group": group.group_id}) as span:
            results = _claim_until_won(group, _RetryBudget(config or CommitConfig()))
            span.set_attribute("s3ddb.outcome", "committed")
    except CommitStateUnknownError:
        raise
    except Exception as exc:
        # Nothing was claimed: every path that could claim returns or raises
        # CommitStateUnknownError. (An interrupt, which may stop a claim in flight,
        # is no Exception: it keeps the files.)
        for commit, part in zip(group.commits, parts):
            commit.abandon(exc, _committed_base(parts, part))
        raise
    for commit, result in zip(group.commits, results):
        if not commit.handler.publishes_on_finish:
            commit.handler.publish_open_formats(result.manifest)
        commit.discard_lost_chunks(result.manifest)
        _discard_superseded(commit.handler, commit.original, commit.txn, commit.written)
        commit.report(result, telemetry.NO_SPAN)  # each part's log record and counts
    return results


def _committed_base(parts: Sequence[GroupPart], part: GroupPart) -> Manifest:
    """The committed version ``part``'s chain of changes on its dataset started from
    (a failed group never deletes what it references)."""
    while part.follows is not None:
        part = parts[part.follows]
    return part.base


def _claim_until_won(group: _Group, budget: _RetryBudget) -> list[CommitResult]:
    """Build and claim every part until one claim wins; after each refusal, rebase
    the parts whose datasets moved.

    Raises:
        As :func:`commit_group`.
    """
    parts, commits = group.parts, group.commits
    while True:
        manifests: list[Manifest] = []
        bases: list[Manifest | None] = []
        for i, (part, commit) in enumerate(zip(parts, commits)):
            if part.follows is None:
                naming = part.base.naming_scheme
                group.currents[i], manifest = _build_next(commit, group.currents[i], naming)
                bases.append(group.currents[i])
            else:
                # The planned chain must still hold: the part it follows claims the
                # version this part was planned on.
                before = manifests[part.follows]
                if before.version != part.base.version:
                    raise RetryableCommitConflictError(
                        f"{part.handler.store.url} moved while the group held several "
                        "changes to it; re-run the group"
                    )
                _, manifest = _build_next(commit, before, before.naming_scheme)
                bases.append(before)
            check_publishable(manifest, bases[-1], commit.handler.store)
            laid_out = commit.lay_out_chunks(manifest)
            with replayed_operation_metrics(part.recorded):
                manifests.append(commit.with_metrics(laid_out, bases[-1], budget.lost + 1))
        claims = [
            ClaimPart(p.handler, m, b, c.writes, p.follows)
            for p, m, b, c in zip(parts, manifests, bases, commits)
        ]
        outcome = parts[0].handler.claim_parts(claims, group.group_id)
        if outcome.locations is not None:
            return [
                CommitResult(m, loc, c.txn, budget.lost + 1)
                for m, loc, c in zip(manifests, outcome.locations, commits)
            ]
        budget.lose_version(f"a group of {len(parts)} changes")
        budget.back_off()
        for i in outcome.moved:
            if parts[i].follows is not None or i in {p.follows for p in parts}:
                raise RetryableCommitConflictError(
                    f"{parts[i].handler.store.url} moved while the group held several "
                    "changes to it; re-run the group"
                )
            log.debug("group %s: %s moved; rebasing", group.group_id, parts[i].handler.store.url)
            group.currents[i] = commits[i].catch_up(group.currents[i])
