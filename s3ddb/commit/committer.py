"""The commit loop: write the transaction, claim the next version, rebase, retry.

1. Write the transaction file (``_transactions/<read_version>-<uuid>.txn``).
2. Build the next manifest from the base and try to claim version base+1 through the
   commit handler (optimistically: the common case has no concurrent writer).
3. On losing the version, read every transaction committed since the base, ask the
   conflict resolver whether ours still applies (rebasing it if needed), and try the
   next version after a jittered backoff. Retries are bounded by count and time.

Outcomes are kept apart (as pyiceberg does): on a *definite* failure (a conflict, a
failure before the version could be claimed) the files this transaction wrote are
deleted; on an *unknown* outcome (:class:`CommitStateUnknownError`) they are kept,
because they may belong to a committed version.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from s3ddb.commit import conflicts
from s3ddb.commit.build import build_manifest
from s3ddb.commit.failpoints import active as failpoints_active
from s3ddb.commit.failpoints import failpoint
from s3ddb.commit.handlers import CommitHandler, ManifestLocation, VersionConflict
from s3ddb.errors import (
    BaseTooOldError,
    CommitStateUnknownError,
    DatasetAlreadyExistsError,
    DatasetLocationError,
    DatasetRecreatedError,
    InvalidInputError,
    ManifestCorruptError,
    RetryableCommitConflictError,
    TooMuchWriteContentionError,
    TransactionAlreadyCommittedError,
    VersionNotFoundError,
)
from s3ddb.format import layout
from s3ddb.format.chunk_writer import write_chunks
from s3ddb.format.chunks import ChunkSource
from s3ddb.format.fragment_metadata import data_file_paths
from s3ddb.format.limits import MAX_TRANSACTION_BYTES
from s3ddb.format.manifest import Manifest, referenced_paths
from s3ddb.format.naming import DEFAULT_NAMING, NamingScheme
from s3ddb.io.parallel import PendingWrites, process_pool, run_beside
from s3ddb.io.written_files import delete_written_files
from s3ddb.observe import telemetry
from s3ddb.observe.commit_metrics import (
    change_metrics,
    listed_versions,
    recorded_operation_metrics,
)
from s3ddb.open_formats.publisher import check_publishable
from s3ddb.operations import Append, Operation, Overwrite, Rewrite, Transaction

__all__ = [
    "CommitConfig",
    "CommitResult",
    "OnExisting",
    "check_not_committed",
    "commit_transaction",
    "load_transaction",
]

log = logging.getLogger(__name__)
#: One INFO record per commit, with its metrics as structured fields (``s3ddb_*``
#: attributes of the record); DEBUG per lost claim.
commit_log = logging.getLogger("s3ddb.commit")

OnExisting = Literal["rebase", "error", "append"]


@dataclass(frozen=True)
class CommitConfig:
    """Retry policy of the commit loop.

    Lance allows 20 retries within 30 s. s3ddb allows far more, because its target is
    fan-in: with N writers appending to one dataset each version has one winner, so a
    writer loses about N/2 versions on average and the unlucky ones several times
    that. A lost version costs a rebasable operation little (the newest manifest and
    another conditional write), so giving up would only turn a commit that is bound
    to land into a failure. The time bound still ends every commit.

    Backoff after a lost version is a random number of *slots*, each as long as the
    attempt that just lost (the time it takes to rebase and try again, as Lance
    measures it); the number of slots doubles per lost version up to
    ``2**max_backoff_doublings``, so the writers that collided spread out over about
    as many attempt-lengths as there are of them.

    Attributes:
        max_retries: how many lost versions a commit tolerates before giving up.
        timeout: seconds after which a commit stops retrying.
        backoff_base: the shortest slot, in seconds (attempts on a fast store can
            take well under a millisecond).
        backoff_max: the longest single sleep, in seconds.
        max_backoff_doublings: the slot count stops doubling here.
    """

    max_retries: int = 1000
    timeout: float = 300.0
    backoff_base: float = 0.002
    backoff_max: float = 1.0
    max_backoff_doublings: int = 4

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.timeout <= 0:
            raise InvalidInputError("max_retries must be >= 0 and timeout > 0")
        if self.backoff_base < 0 or self.backoff_max < 0 or self.max_backoff_doublings < 0:
            raise InvalidInputError("backoff settings must be >= 0")

    def backoff(self, attempt: int, attempt_seconds: float = 0.0) -> float:
        """Seconds to sleep after ``attempt`` lost versions, the last attempt having
        taken ``attempt_seconds``."""
        slot = max(self.backoff_base, attempt_seconds)
        slots = 2 ** min(attempt, self.max_backoff_doublings)
        return min(self.backoff_max, random.randrange(slots) * slot + random.uniform(0, slot))


@dataclass(frozen=True)
class CommitResult:
    manifest: Manifest
    location: ManifestLocation
    transaction: Transaction
    attempts: int


def load_transaction(handler: CommitHandler, manifest: Manifest) -> Transaction | None:
    """The transaction that produced ``manifest``, or None if its file is gone. Read
    in bounded memory: a file larger than any transaction is refused unread.

    Raises:
        ManifestCorruptError: the file is larger than
            :data:`~s3ddb.format.limits.MAX_TRANSACTION_BYTES`, or corrupt (see
            :meth:`Transaction.from_bytes` for its subclasses).
    """
    if not manifest.transaction_file:
        return None
    path = layout.transaction_path(manifest.transaction_file)
    where = f"{handler.store.url}/{path}"
    try:
        data, size = handler.store.get_bounded(path, MAX_TRANSACTION_BYTES)
    except FileNotFoundError:
        return None
    if size > MAX_TRANSACTION_BYTES:
        raise ManifestCorruptError(
            f"transaction {where}: {size} bytes, larger than any transaction s3ddb reads "
            f"({MAX_TRANSACTION_BYTES} bytes): refused unread"
        )
    return Transaction.from_bytes(data, where)


def commit_transaction(
    handler: CommitHandler,
    txn: Transaction,
    base: Manifest | None,
    *,
    config: CommitConfig | None = None,
    on_existing: OnExisting = "rebase",
    naming: NamingScheme = DEFAULT_NAMING,
    pending: PendingWrites | None = None,
    fresh_base: bool = False,
    built_elsewhere: bool = False,
) -> CommitResult:
    """Commit ``txn``, read at ``base`` (None: no dataset yet), as a new version.

    Unless ``fresh_base`` says the caller saw ``base`` as the newest version moments
    ago, the versions committed since ``base`` are looked up before the first claim.
    A claim of version N only fails when N exists, and cleanup deletes old versions
    (their DynamoDB rows, their manifests): a writer holding an old base must not
    claim a number that cleanup freed, below the newest.

    ``pending`` holds uploads of the transaction's files still in flight (e.g. data
    files): the transaction file and manifest are written beside them, and the
    version is claimed only once all have landed. If they fail, the commit fails
    definitely and the files are deleted.

    ``on_existing`` matters when ``base`` is None and another writer creates the
    dataset first: "error" raises DatasetAlreadyExistsError (``mode="create"``),
    "append" turns an Overwrite into an Append of the same fragments
    (``mode="append"`` on a missing dataset), "rebase" applies the normal rules.
    ``naming`` is the manifest naming scheme of a new dataset (an existing one keeps
    its own).

    Every claim is fenced on the version it builds on (see
    :meth:`CommitHandler.commit_manifest`), and every version it catches up with must
    carry the base's dataset identity.

    ``built_elsewhere`` says the transaction was built by the caller
    (:meth:`s3ddb.Dataset.commit`), whose data files may already be committed (an
    identical retry racing this one, after :func:`check_not_committed` passed): an
    Append is then not built on a version that lists one of its files.

    Raises:
        DatasetAlreadyExistsError: ``on_existing="error"`` and the dataset exists.
        DatasetRecreatedError: the dataset was dropped or re-created since ``base``
            was read; the transaction's files are deleted.
        CommitMechanismError: ``base`` records another commit mechanism than the
            handler's; nothing was written.
        RetryableCommitConflictError, IncompatibleTransactionError: see
            :mod:`s3ddb.commit.conflicts`; the transaction's files are deleted.
        TooMuchWriteContentionError: retries exhausted; files deleted.
        CommitStateUnknownError: the outcome is unknown; files kept.
        TransactionAlreadyCommittedError: ``built_elsewhere``, and a version committed
            since ``base`` added a file the Append lists; nothing is committed.
    """
    commit = _CommitInProgress(
        handler,
        txn,
        on_existing,
        pending if pending is not None else PendingWrites(),
        built_elsewhere=built_elsewhere,
    )
    if built_elsewhere and base is not None and isinstance(txn.operation, Append):
        commit.first_new_id = base.next_fragment_id()
    attributes = {"s3ddb.dataset": commit.dataset, "s3ddb.operation": txn.kind}
    with telemetry.timing(commit.clock), telemetry.span("s3ddb.commit", attributes) as span:
        try:
            with telemetry.phase("prepare"):
                _write_first_transaction(commit, base)
                budget = _RetryBudget(config or CommitConfig())
                current = base if base is None or fresh_base else commit.catch_up(base)
            naming = base.naming_scheme if base is not None else naming
            result = _claim_next_version(commit, current, naming, budget)
        except CommitStateUnknownError:
            span.set_attribute("s3ddb.outcome", "unknown")
            telemetry.add("s3ddb.unknown_outcomes", 1, {"s3ddb.operation": txn.kind})
            raise
        except Exception as exc:
            span.set_attribute("s3ddb.outcome", "failed")
            # Nothing was claimed: every path above that could have claimed a version
            # returns or raises CommitStateUnknownError, so cleanup is safe.
            commit.abandon(exc, base)
            raise
        commit.report(result, span)
        return result


@dataclass
class _CommitInProgress:
    """One commit under way: the transaction as rebased so far (``txn``) and every
    file written for it (``written``), which a definite failure deletes."""

    handler: CommitHandler
    original: Transaction
    on_existing: OnExisting
    writes: PendingWrites
    # The caller built the operation (Dataset.commit): the files it lists are the
    # caller's, perhaps an older version's (a rollback), and a failure keeps them.
    built_elsewhere: bool = False
    txn: Transaction = field(init=False)
    written: list[str] = field(default_factory=list)
    # Manifests build_manifest asked for, by version (it may ask again after a rebase).
    loaded: dict[int, Manifest] = field(default_factory=dict)
    # Fragment-list chunks written for each attempt's manifest (also in ``written``).
    chunks: list[str] = field(default_factory=list)
    # For an Append built elsewhere: the first fragment id a version committed after
    # its read version can hold (its fragments' files are checked; None: no check).
    first_new_id: int | None = None
    # Where the commit's time goes, phase by phase (see s3ddb.observe.telemetry).
    clock: telemetry.PhaseClock = field(default_factory=telemetry.PhaseClock)

    @functools.cached_property
    def dataset(self) -> str:
        """The dataset, as traces and logs name it (credentials redacted; worked out
        once per commit: logs, spans and counters ask for it several times)."""
        return telemetry.dataset_attribute(self.handler.dataset_key())

    def with_metrics(self, manifest: Manifest, base: Manifest | None, attempts: int) -> Manifest:
        """``manifest`` with the metrics of this commit as of its claim number
        ``attempts`` (see :mod:`s3ddb.observe.commit_metrics`)."""
        read = self.original.read_version
        newest = base.version if base is not None else 0
        rebased = list(range(read + 1, newest + 1)) if read and newest > read else []
        try:
            changes = change_metrics(base, manifest, self.txn.operation)
        except Exception as exc:  # the figures never decide a commit's outcome
            # (a base whose fragments do not decode, say, which a restore leaves behind)
            log.debug("could not count what version %d changed: %s", manifest.version, exc)
            changes = {**recorded_operation_metrics(), "changes_unknown": type(exc).__name__}
        metrics = {
            "attempts": attempts,
            "rebased_over": listed_versions(rebased),
            "rebased_over_count": len(rebased),
            "duration_ms": self.clock.elapsed_ms(),
            "phases_ms": self.clock.milliseconds(),
            **changes,
        }
        return manifest.evolve(metrics=metrics)

    def lost_claim(self, version: int) -> None:
        """Count a claim of ``version`` another writer won."""
        commit_log.debug(
            "lost version %d of %s to another writer (%s)", version, self.dataset, self.txn.kind
        )
        telemetry.add("s3ddb.conflicts", 1, {"s3ddb.operation": self.txn.kind})

    def report(self, result: CommitResult, span: Any) -> None:
        """Tell logs, traces and metric instruments about the committed ``result``."""
        manifest = result.manifest
        metrics = dict(manifest.metrics)
        claim_ms = self.clock.milliseconds().get("claim", 0)
        metrics["total_ms"] = self.clock.elapsed_ms()
        metrics["phases_ms"] = self.clock.milliseconds()  # the winning claim's too
        span.set_attributes(
            {
                "s3ddb.version": manifest.version,
                "s3ddb.attempts": result.attempts,
                "s3ddb.outcome": "committed",
            }
        )
        labels = {"s3ddb.operation": self.txn.kind}
        telemetry.add("s3ddb.commits", 1, labels)
        telemetry.add("s3ddb.retries", result.attempts - 1, labels)
        telemetry.record_claim(claim_ms, labels)
        commit_log.info(
            "committed version %d of %s: %s in %d attempt(s), %d rows added, %d deleted, "
            "%d updated",
            manifest.version,
            self.dataset,
            self.txn.kind,
            result.attempts,
            metrics.get("num_added_rows", 0),
            metrics.get("num_deleted_rows", 0),
            metrics.get("num_updated_rows", 0),
            extra={
                "s3ddb_dataset": self.dataset,
                "s3ddb_version": manifest.version,
                "s3ddb_operation": self.txn.kind,
                "s3ddb_attempts": result.attempts,
                "s3ddb_metrics": metrics,
            },
        )

    def __post_init__(self) -> None:
        self.txn = self.original

    def write_transaction(self, txn: Transaction) -> None:
        """Upload ``txn``'s file beside the other pending writes (and list it in
        ``written``, so that a failure deletes it)."""
        path = layout.transaction_path(txn.file_name)
        self.written.append(path)
        self.writes.put(self.handler.store, path, txn.to_bytes())

    def lay_out_chunks(self, manifest: Manifest) -> Manifest:
        """``manifest`` with its fragments in chunks by the dataset's policy: the
        chunks it needs written beside the other pending writes, and listed in
        ``written`` (a definite failure deletes them)."""
        store = self.handler.store

        def put(path: str, data: bytes) -> None:
            self.written.append(path)
            self.chunks.append(path)
            self.writes.put(store, path, data)

        laid_out, _paths = write_chunks(manifest, ChunkSource(store), put)
        return laid_out

    def discard_lost_chunks(self, committed: Manifest) -> None:
        """After the commit of ``committed``: delete the chunks written for attempts
        that lost their version (no version lists them), and forget them, so the
        files ``committed`` lists are never deleted as superseded."""
        listed = {ref.path for ref in committed.fragments.chunk_refs()}
        lost = [p for p in self.chunks if p not in listed]
        self.written[:] = [p for p in self.written if p not in set(self.chunks)]
        self.chunks.clear()

        def warn(path: str, exc: Exception) -> None:
            log.warning("could not delete the unused chunk %s: %s", path, exc)

        delete_written_files(self.handler.store, lost, on_failure=warn)

    def load_version(self, version: int) -> Manifest:
        """The manifest of ``version``, loaded once per commit."""
        if version not in self.loaded:
            self.loaded[version] = self.handler.load_manifest(self.handler.location_of(version))
        return self.loaded[version]

    def catch_up(self, current: Manifest | None) -> Manifest | None:
        """Resolve ``txn`` against the versions committed after ``current`` and
        return the newest of them (the next base); ``txn`` becomes the rebased
        transaction only if all of them were resolved.

        Raises:
            RetryableCommitConflictError, IncompatibleTransactionError,
            DatasetRecreatedError, DatasetAlreadyExistsError: see
            :func:`_resolve_since`.
        """
        newest, self.txn = _resolve_since(self, current)
        return newest

    def abandon(self, exc: BaseException, base: Manifest | None) -> None:
        """After a definite failure (``exc``): let in-flight uploads finish, so none
        lands after the cleanup, then delete what this commit wrote (best effort)."""
        try:
            self.writes.wait()
        except Exception:
            pass
        _cleanup(
            self.handler, self.original, self.txn, self.written, exc, base, self.built_elsewhere
        )


@dataclass
class _RetryBudget:
    """How many versions a commit has lost, and whether it may try again: the
    bounds and backoff of a :class:`CommitConfig`, timed from its creation."""

    config: CommitConfig
    lost: int = 0
    deadline: float = field(init=False)
    attempt_started: float = field(init=False)
    last_attempt_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.config.timeout
        self.attempt_started = time.monotonic()

    def lose_version(self, what: str) -> None:
        """Count a lost version; decides whether the commit gives up.

        Raises:
            TooMuchWriteContentionError: retries or time are used up (``what`` names
                the transaction and dataset in the message).
        """
        self.lost += 1
        self.last_attempt_seconds = time.monotonic() - self.attempt_started
        if self.lost > self.config.max_retries or time.monotonic() > self.deadline:
            raise TooMuchWriteContentionError(
                f"gave up committing {what} after {self.lost} attempts "
                f"({self.config.max_retries} retries / {self.config.timeout:g} s): "
                "other writers kept winning"
            ) from None

    def back_off(self) -> None:
        """Sleep before the next attempt, then start timing it."""
        time.sleep(self.config.backoff(self.lost, self.last_attempt_seconds))
        self.attempt_started = time.monotonic()


def _write_first_transaction(commit: _CommitInProgress, base: Manifest | None) -> None:
    """Refuse a ``base`` of another commit mechanism, then write the transaction file.

    The refusal comes before anything is written; it still deletes the files the
    operation wrote before committing (e.g. data files).

    Raises:
        CommitMechanismError: see :meth:`CommitHandler.check_writable`.
    """
    commit.handler.check_writable(base)
    commit.write_transaction(commit.txn)
    if failpoints_active():
        commit.writes.wait()
        failpoint("commit.after_transaction_file")


def _claim_next_version(
    commit: _CommitInProgress,
    current: Manifest | None,
    naming: NamingScheme,
    budget: _RetryBudget,
) -> CommitResult:
    """Claim the version after ``current`` until a claim wins: after each lost
    version, back off, catch up with the versions committed meanwhile (rebasing the
    transaction) and build on the newest.

    Raises:
        TooMuchWriteContentionError: ``budget`` is used up.
        CommitStateUnknownError: a claim's outcome is unknown.
        Errors of :meth:`_CommitInProgress.catch_up` and :func:`_build_next`.
    """
    handler = commit.handler
    while True:
        current, manifest = _build_next(commit, current, naming)
        manifest = commit.with_metrics(commit.lay_out_chunks(manifest), current, budget.lost + 1)
        commit_log.debug(
            "claiming version %d of %s (%s, attempt %d)",
            manifest.version, commit.dataset, commit.txn.kind, budget.lost + 1,
        )  # fmt: skip
        check_publishable(manifest, current, handler.store)
        try:
            with telemetry.phase("claim", {"s3ddb.version": manifest.version}):
                location = handler.commit_manifest(
                    manifest, manifest.to_bytes(), commit.writes, previous=current
                )
        except VersionConflict:
            commit.lost_claim(manifest.version)
            budget.lose_version(f"{commit.txn.kind} to {handler.store.url}")
        else:
            if not handler.publishes_on_finish:
                handler.publish_open_formats(manifest)
            commit.discard_lost_chunks(manifest)
            _discard_superseded(handler, commit.original, commit.txn, commit.written)
            return CommitResult(manifest, location, commit.txn, budget.lost + 1)
        # Back off first, then catch up: attempting right after reading the newest
        # version keeps the window in which another writer can win small.
        budget.back_off()
        with telemetry.phase("rebase"):
            current = commit.catch_up(current)


def _build_next(
    commit: _CommitInProgress, current: Manifest | None, naming: NamingScheme
) -> tuple[Manifest | None, Manifest]:
    """The manifest of the version after ``current``, and the base it was built on.

    A base that is too old for the transaction (``BaseTooOldError``) is caught up
    with the versions committed since, and the manifest built on the newest.

    Raises:
        BaseTooOldError: no version newer than ``current`` exists to build on.
    """
    while True:
        next_version = (current.version if current is not None else 0) + 1
        _check_not_added_since(commit, current)
        try:
            built = build_manifest(current, commit.txn, next_version, naming, commit.load_version)
            return current, commit.handler.stamp(built, current)
        except BaseTooOldError:
            newer = commit.catch_up(current)
            if newer is None or current is None or newer.version == current.version:
                raise
            current = newer


def _check_not_added_since(commit: _CommitInProgress, current: Manifest | None) -> None:
    """An Append built elsewhere must not be built on a version that added one of its
    data files since it was read: that version is this very commit, landed through an
    identical retry that passed :func:`check_not_committed` at the same time. Only
    the fragments added since are decoded (chunks holding none are not fetched).

    Raises:
        TransactionAlreadyCommittedError: one lists a file the Append lists.
    """
    first = commit.first_new_id
    if first is None or current is None or not isinstance(commit.txn.operation, Append):
        return
    if current.fragments.max_listed_id() < first:
        return
    added = [
        f
        for f in current.fragments.matching(lambda ref: ref.max_fragment_id >= first)
        if f.id >= first
    ]
    again = sorted(set(data_file_paths(added)) & set(commit.txn.operation.written_paths()))
    if again:
        raise _already_committed(
            commit.txn.kind, commit.handler, again, f"a version up to {current.version}"
        )


def _already_committed(
    kind: str, handler: CommitHandler, files: list[str], added_by: str
) -> TransactionAlreadyCommittedError:
    """The refusal of a ``kind`` listing ``files`` (sorted) that ``added_by`` (a
    version) already committed."""
    more = f" (and {len(files) - 1} more)" if len(files) > 1 else ""
    return TransactionAlreadyCommittedError(
        f"{kind} of {handler.store.url}: {files[0]}{more} is already committed: {added_by} "
        "added it. Committing it again would list it twice; nothing was committed"
    )


def _raise_if_removed(handler: CommitHandler, version: int) -> None:
    """Called when ``version`` could not be read: tells a version cleanup removed
    meanwhile from one that is damaged.

    Raises:
        RetryableCommitConflictError: cleanup removed ``version`` while this commit was
            checking it; re-executing on the newest version works.
    """
    try:
        handler.location_of(version)
    except VersionNotFoundError:
        raise RetryableCommitConflictError(
            f"version {version} of {handler.store.url} was removed by cleanup while "
            "this commit was checking it against its own; re-execute the operation "
            "on the newest version"
        ) from None


def _load_checked(handler: CommitHandler, location: ManifestLocation) -> Manifest:
    """``handler.load_manifest`` of a version this commit checks itself against.

    Raises:
        RetryableCommitConflictError: cleanup removed the version meanwhile.
        FileNotFoundError, VersionNotFoundError: its manifest is missing otherwise.
    """
    try:
        return handler.load_manifest(location)
    except (FileNotFoundError, VersionNotFoundError):
        _raise_if_removed(handler, location.version)
        raise


def _load_version(handler: CommitHandler, version: int) -> Manifest:
    """The manifest of ``version``, as :func:`_load_checked`."""
    try:
        location = handler.location_of(version)
    except VersionNotFoundError:
        _raise_if_removed(handler, version)
        raise
    return _load_checked(handler, location)


def _resolve_since(
    commit: _CommitInProgress, current: Manifest | None
) -> tuple[Manifest | None, Transaction]:
    """Resolve ``commit.txn`` against every version committed after ``current``.

    Returns the newest manifest (the new base) and the possibly rebased transaction.
    Files a rebase writes are added to ``commit.written``.

    Raises:
        RetryableCommitConflictError: versions after ``current`` were removed by
            cleanup, or one of them cannot be told apart from a conflict.
        IncompatibleTransactionError: see :mod:`s3ddb.commit.conflicts`.
        DatasetRecreatedError: see :func:`_check_same_dataset`.
        DatasetAlreadyExistsError: see :func:`_on_dataset_created`.
    """
    handler, txn = commit.handler, commit.txn
    start = (current.version if current is not None else 0) + 1
    # The newest version may still be staged: its manifest reads the same, and the
    # handler makes sure it is final before claiming the next one.
    locations = handler.locations_since(start, finalize=False)
    if not locations:
        # We lost a version nobody can see yet (its winner is still finishing); the
        # next attempt will find it.
        return current, txn
    if locations[0].version != start:
        # Versions after the base are gone: cleanup removed them (it keeps the newest).
        raise RetryableCommitConflictError(
            f"versions {start} to {locations[0].version - 1} of {handler.store.url}, "
            "committed after this transaction's base, were removed by cleanup; "
            "re-execute the operation on the newest version"
        )
    newest: Manifest | None = None
    previous = current  # the manifest just before the one being resolved, if loaded
    for i, location in enumerate(locations):
        is_last = i == len(locations) - 1
        if (
            current is not None
            and not is_last
            and location.operation
            and conflicts.decided_by_kind(txn.kind, location.operation)
        ):
            # Decided from the listing alone; only the newest is loaded, to build on.
            conflicts.resolve_kinds(txn, location.operation, location.version)
            previous = None
            continue
        theirs = _load_checked(handler, location)
        _check_same_dataset(handler, current, theirs)
        if current is None and newest is None:
            txn = _on_dataset_created(handler, txn, theirs, commit.on_existing)
            commit.write_transaction(txn)
        else:
            txn = _resolve_against(commit, txn, location.version, theirs, previous)
        newest = previous = theirs
    return newest, txn


def _resolve_against(
    commit: _CommitInProgress,
    txn: Transaction,
    version: int,
    theirs_manifest: Manifest,
    previous: Manifest | None,
) -> Transaction:
    """``txn`` as it applies after ``version`` (``theirs_manifest``), committed since
    it was read: decided from the two operation kinds where the conflict table can,
    else from their transaction, rebasing ours (and writing its new transaction
    file) if it still applies. ``previous`` is the manifest of ``version - 1`` if
    already loaded.

    Raises:
        RetryableCommitConflictError: their transaction file is missing, so whether
            it conflicts cannot be told; or see :mod:`s3ddb.commit.conflicts`.
        IncompatibleTransactionError: see :mod:`s3ddb.commit.conflicts`.
    """
    handler = commit.handler
    kind = theirs_manifest.operation
    if kind and conflicts.decided_by_kind(txn.kind, kind):
        # Their transaction is not needed (the newest is loaded only to build on).
        conflicts.resolve_kinds(txn, kind, version)
        return txn
    theirs = load_transaction(handler, theirs_manifest)
    if theirs is None:
        raise RetryableCommitConflictError(
            f"the transaction of version {version} of "
            f"{handler.store.url} is missing; cannot tell whether it conflicts"
        )
    if conflicts.decided_by_kind(txn.kind, theirs.kind):
        conflicts.resolve_kinds(txn, theirs.kind, version)
        return txn
    if previous is None:
        previous = _load_version(handler, version - 1)
    ctx = conflicts.ConflictContext(handler.store, previous, theirs_manifest)
    try:
        rebased = conflicts.resolve(txn, theirs, version, ctx)
    finally:
        commit.written.extend(ctx.written)
    if rebased is not txn:
        commit.write_transaction(rebased)
    return rebased


def _check_same_dataset(handler: CommitHandler, base: Manifest | None, theirs: Manifest) -> None:
    """A version committed after ``base`` must belong to the same dataset.

    Raises:
        DatasetRecreatedError: it carries another identity: the dataset was dropped
            and re-created since ``base`` was read.
    """
    if base is None or not base.dataset_id or theirs.dataset_id == base.dataset_id:
        return
    raise DatasetRecreatedError(
        f"refusing to commit to {handler.store.url}: this writer read version "
        f"{base.version} of dataset identity {base.dataset_id}, but version "
        f"{theirs.version} belongs to identity {theirs.dataset_id or 'none'} (the dataset "
        "was dropped and re-created meanwhile). Nothing was committed; re-open the "
        "dataset and run the operation again if it still applies."
    )


def _on_dataset_created(
    handler: CommitHandler, txn: Transaction, created: Manifest, on_existing: OnExisting
) -> Transaction:
    """Another writer created the dataset while we were creating it too."""
    if on_existing == "error":
        raise DatasetAlreadyExistsError(
            f"dataset {handler.store.url} was created by another writer (version "
            f"{created.version}) while this one was creating it"
        )
    if on_existing == "append" and isinstance(txn.operation, Overwrite):
        mine = txn.operation.schema
        if not mine.arrow.equals(created.schema.arrow, check_metadata=False) or dict(
            mine.ids
        ) != dict(created.schema.ids):
            raise RetryableCommitConflictError(
                f"dataset {handler.store.url} was created concurrently with another schema"
            )
        return Transaction(
            created.version, Append(txn.operation.fragments), properties=txn.properties
        )
    return txn


def _discard_superseded(
    handler: CommitHandler, original: Transaction, final: Transaction, written: list[str]
) -> None:
    """After a successful commit, delete files that a rebase replaced (e.g. a deletion
    file merged with a concurrent one), and the data files of compaction groups a
    rebase dropped (every row they copied was deleted meanwhile): no manifest
    references them."""
    if original is final:
        return
    try:
        kept = set(final.operation.written_paths()) | {layout.transaction_path(final.file_name)}
        stale = (set(original.operation.written_paths()) | set(written)) - kept
    except Exception as exc:  # never turn a successful commit into a reported failure
        log.warning("could not list superseded files: %s", exc)
        return

    def warn(path: str, exc: Exception) -> None:
        log.warning("could not delete superseded file %s: %s", path, exc)

    # Other rebases never replace a data file: theirs are kept, to be safe. A rebased
    # Rewrite keeps each remaining group's new files as they were and only drops whole
    # groups, so a data file it wrote that the committed Rewrite no longer lists was
    # this commit's own and is in no version.
    drops_groups = isinstance(original.operation, Rewrite) and isinstance(final.operation, Rewrite)
    superseded = [
        p for p in sorted(stale) if drops_groups or not p.startswith(f"{layout.DATA_DIR}/")
    ]
    delete_written_files(handler.store, superseded, on_failure=warn)


#: Versions committed since a read version whose transactions are read: by a failed
#: commit's cleanup (to keep the files they added; past it, nothing claimed is
#: deleted) and by the check of an append built elsewhere (the first ones only).
_LOOKBACK = 100
#: Threads reading those versions' manifests and transactions on a remote store.
_LOOKBACK_READ_THREADS = 16


def _transactions_of(
    handler: CommitHandler, locations: list[ManifestLocation]
) -> list[tuple[int, Transaction | None]]:
    """(version, its transaction: None if its file is gone) of each of ``locations``,
    in order. On a remote store they are read side by side (two reads each, which
    do not depend on the other versions'), as history is.

    Raises:
        What loading a manifest or a transaction raises (the first, in order).
    """

    def one(location: ManifestLocation) -> tuple[int, Transaction | None]:
        return location.version, load_transaction(handler, handler.load_manifest(location))

    if not handler.store.is_remote or len(locations) < 2:
        return [one(location) for location in locations]
    return list(process_pool("history", _LOOKBACK_READ_THREADS).map(one, locations))


def _added_since(handler: CommitHandler, base: Manifest | None) -> set[str] | None:
    """The files the versions committed after ``base`` added (their transactions'
    written paths), or None when that is not known: too many versions, a version or
    its transaction unreadable. Files a later version references are either the read
    version's or added since.

    Raises:
        Nothing: whatever fails means "not known".
    """
    try:
        since = handler.locations_since((base.version if base is not None else 0) + 1)
        if len(since) > _LOOKBACK:
            return None
        added: set[str] = set()
        for _version, transaction in _transactions_of(handler, since):
            if transaction is None:
                return None
            added.update(transaction.operation.written_paths())
        return added
    except Exception as exc:  # the caller's error matters; files stay
        log.debug("cannot tell what was committed since: %s", exc)
        return None


def check_not_committed(
    handler: CommitHandler, base: Manifest | None, operation: Operation
) -> None:
    """For an operation built elsewhere (:meth:`s3ddb.Dataset.commit`): refuse one that
    lists a file twice, or an append of a file the read version's transaction or a
    version committed since added. Committing an append again (a retry after an
    unknown outcome whose first attempt landed) would list its data files twice: the
    new version would read their rows twice, or not at all. Other operations may list
    files already committed (an overwrite keeping fragments). The read version's
    transaction and those since are read, never the fragments.

    Raises:
        TransactionAlreadyCommittedError: naming the file and the version that added
            it; nothing is committed.
        InvalidInputError: the operation lists a file twice.
    """
    paths = operation.written_paths()
    twice = next((p for p, n in Counter(paths).items() if n > 1), None)
    if twice is not None:
        raise InvalidInputError(f"{operation.kind} lists {twice} twice")
    if not isinstance(operation, Append) or not paths or base is None:
        return
    wanted = set(paths)
    # The read version's transaction is fetched while the versions since are listed.
    read = run_beside(handler.store, lambda: load_transaction(handler, base))
    since = handler.locations_since(base.version + 1)[:_LOOKBACK]
    committed = [(base.version, read.result()), *_transactions_of(handler, since)]
    for version, transaction in committed:
        if transaction is None:
            continue
        again = sorted(wanted & set(transaction.operation.written_paths()))
        if again:
            raise _already_committed(operation.kind, handler, again, f"version {version}")


def _cleanup(
    handler: CommitHandler,
    original: Transaction,
    final: Transaction,
    written: list[str],
    exc: BaseException,
    base: Manifest | None,
    built_elsewhere: bool = False,
) -> None:
    """Delete, after the definite failure ``exc``, the files the commit wrote
    (``written``: its transaction file, chunks, files a rebase wrote) and those its
    operation wrote, unless a version may still read them. The files an operation
    ``built_elsewhere`` lists are the caller's and stay, as pylance leaves them: they
    may be an older version's (an Overwrite rolling back to them), and only the
    caller knows whether it will commit them again; cleanup removes them once
    unreferenced and old."""
    if isinstance(exc, DatasetLocationError):
        # The dataset directory could not be made: nothing was written, and each
        # deletion would only fail again with a warning that hides the real error.
        return
    paths = list(written)
    claimed = (
        []
        if built_elsewhere
        else [p for t in (original, final) for p in t.operation.written_paths()]
    )
    # Never delete what the read version references, whatever an operation built
    # elsewhere (Dataset.commit) claims to have written; nor what a version committed
    # since added (an earlier attempt of the same commit may have landed unseen).
    try:
        referenced = set(referenced_paths(base, transaction=False)) if base is not None else set()
        added = _added_since(handler, base) if claimed else set()
        if added is None:
            log.warning(
                "keeping the %d files %s claims to have written: what the versions "
                "committed since version %d added is not known",
                len(claimed), original.kind, base.version if base is not None else 0,
            )  # fmt: skip
            claimed = []
        else:
            referenced |= added
    except ManifestCorruptError as damage:
        # The read version's fragment list cannot be read (a lost chunk): a file the
        # operation claims may be one it lists, so those stay. The commit's own files
        # (its transaction file, chunks) have new names: they go.
        if claimed:
            log.warning(
                "keeping the %d files %s claims to have written: the version it read "
                "is damaged (%s)", len(claimed), original.kind, damage,
            )  # fmt: skip
        claimed, referenced = [], set()
    paths.extend(claimed)

    def warn(path: str, cleanup_exc: Exception) -> None:
        log.warning("could not delete %s after failed commit: %s", path, cleanup_exc)

    # Best effort: a failed deletion never hides the real error.
    unreferenced = dict.fromkeys(p for p in paths if p not in referenced)
    delete_written_files(handler.store, unreferenced, on_failure=warn)
    log.debug(
        "commit of %s failed (%s); deleted %d files", original.kind, type(exc).__name__, len(paths)
    )
