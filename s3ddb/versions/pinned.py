"""A dataset pinned to one version, and how its writes commit.

:class:`PinnedVersion` is what every operation module (row changes, merge_insert,
compaction, schema evolution, indices, clones, cleanup) works on: the pinned
manifest, the commit handler, and the loop that plans an operation on the pinned
version, commits it and, after a retryable conflict, plans it again on the newest
version. :class:`s3ddb.Dataset` is its public face. Dependencies point one way:
``opening`` <- ``pinned`` <- operation modules <- ``dataset``.

Other packages change a handle only through its public methods: where it is pinned
and whether that was seen as the newest version (:meth:`PinnedVersion.move_to`,
:meth:`~PinnedVersion.forget_newest_seen`), its group and the commits its group made
for it (:meth:`~PinnedVersion.enter_group`, :meth:`~PinnedVersion.leave_group`,
:meth:`~PinnedVersion.record_commit`, :meth:`~PinnedVersion.refuse_in_group`).
:func:`commit_planned` and :func:`plan_and_commit`, the class's commit loop, share
this module and its private state.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from s3ddb.arguments import check_int
from s3ddb.commit.committer import CommitConfig, CommitResult, OnExisting, commit_transaction
from s3ddb.commit.handlers import CommitHandler
from s3ddb.errors import (
    AtomicGroupError,
    InvalidInputError,
    RetryableCommitConflictError,
    TooMuchWriteContentionError,
)
from s3ddb.format.bases import FileResolver
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import DEFAULT_NAMING, NamingScheme
from s3ddb.io.parallel import PendingWrites
from s3ddb.io.written_files import delete_written_files
from s3ddb.observe.commit_metrics import operation_metrics
from s3ddb.operations import Delete, Operation, Transaction, Update
from s3ddb.versions.opening import VersionInfo, history, load_latest, load_version
from s3ddb.versions.tags import Tags

__all__ = [
    "DEFAULT_CONFLICT_RETRIES",
    "DEFAULT_RETRY_TIMEOUT",
    "FRESH_BASE_SECONDS",
    "DeferredCommits",
    "PinnedVersion",
    "commit_planned",
    "plan_and_commit",
    "rows_landed_since",
]

T = TypeVar("T")
P = TypeVar("P", bound="PinnedVersion")
log = logging.getLogger(__name__)

#: How often delete/update/merge_insert re-execute after a retryable conflict, and
#: for how long at most (seconds). Rebasable conflicts never count: the commit loop
#: resolves those itself.
DEFAULT_CONFLICT_RETRIES = 10
DEFAULT_RETRY_TIMEOUT = 120.0
#: A version seen as the newest this recently is committed on without first asking
#: for newer ones (see :func:`s3ddb.commit.committer.commit_transaction`).
FRESH_BASE_SECONDS = 10.0


class DeferredCommits(Protocol):
    """Where a handle in a group (``s3ddb.atomic``) sends its commits: each is held
    until the group commits, and the handle moves to the version it would make."""

    @property
    def group_id(self) -> str:
        """The group's id."""
        ...

    def checked_out(self, ds: PinnedVersion, other: PinnedVersion) -> DeferredCommits:
        """Where the commits of ``other``, a version of ``ds`` checked out in the
        group, go (a restore is held with ``ds``'s changes; others are refused)."""
        ...

    def defer(
        self,
        ds: PinnedVersion,
        operation: Operation,
        base: Manifest | None,
        pending: PendingWrites | None,
        properties: dict[str, str],
        plain: bool,
    ) -> Manifest:
        """Hold ``operation`` (read at ``base``; ``plain``: with the default commit
        options) and return the manifest it would commit.

        Raises:
            AtomicGroupError: the group cannot hold it; its files are deleted.
        """
        ...


class PinnedVersion:
    """A dataset pinned at one version; writes move it to the version they commit."""

    def __init__(
        self,
        uri: str,
        handler: CommitHandler,
        manifest: Manifest,
        *,
        storage_options: dict[str, Any] | None = None,
        commit_config: CommitConfig | None = None,
    ) -> None:
        self._retries = DEFAULT_CONFLICT_RETRIES
        self._retry_timeout = DEFAULT_RETRY_TIMEOUT
        self._uri = uri
        self._handler = handler
        self._manifest = manifest
        self._storage_options = dict(storage_options or {})
        self._commit_config = commit_config or CommitConfig()
        self._last_commit: CommitResult | None = None
        self._last_conflict_retries = 0
        # When this handle last saw its pinned version as the newest (monotonic
        # seconds; None: it never did, e.g. an older version checked out). A commit on
        # a base seen as newest moments ago claims at once; otherwise it first looks
        # for versions committed since (see commit_transaction's fresh_base).
        self._seen_newest_at: float | None = time.monotonic()
        self._base_seen_at: float | None = None
        # Set while the handle belongs to a group (s3ddb.atomic): commits are held.
        self._deferred: DeferredCommits | None = None

    # --- identity -----------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def version(self) -> int:
        """The version this Dataset is pinned to."""
        return self._manifest.version

    @property
    def latest_version(self) -> int:
        """The newest committed version (asks the store; not cached)."""
        latest = self._handler.latest_location()
        return latest.version if latest is not None else self.version

    @property
    def schema(self) -> pa.Schema:
        return self._manifest.schema.arrow

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def handler(self) -> CommitHandler:
        return self._handler

    @property
    def storage_options(self) -> dict[str, Any]:
        return dict(self._storage_options)

    @property
    def commit_config(self) -> CommitConfig:
        return self._commit_config

    @property
    def last_conflict_retries(self) -> int:
        """How often this Dataset's last delete/update/merge_insert/insert was
        re-executed on a newer version after a retryable conflict."""
        return self._last_conflict_retries

    @property
    def last_commit(self) -> CommitResult | None:
        """How this Dataset's last write committed (transaction, attempts), if any."""
        return self._last_commit

    def get_fragments(self) -> list[FragmentMetadata]:
        return list(self._manifest.fragments)

    @property
    def tags(self) -> Tags:
        return Tags(self, before_write=self.refuse_in_group)

    # --- groups (s3ddb.atomic) --------------------------------------------------------

    @property
    def group_id(self) -> str | None:
        """The id of the group (``s3ddb.atomic``) whose handle this is, or None."""
        return self._deferred.group_id if self._deferred is not None else None

    def enter_group(self, commits: DeferredCommits) -> None:
        """Make this a group's handle: from now on its commits go to ``commits``, which
        holds them until the group commits and moves the handle to the version each
        would make, and what would act at once is refused (:meth:`refuse_in_group`).
        For ``s3ddb.atomic``, on a handle it made.

        Raises:
            AtomicGroupError: the handle belongs to a group already (nothing changes).
        """
        if self._deferred is not None:
            raise AtomicGroupError(
                f"{self._uri} is a handle of group {self._deferred.group_id} already"
            )
        self._deferred = commits

    def leave_group(self) -> None:
        """End this handle's membership of its group: its commits go to the store at
        once again. For the group when it ends (it first moves the handle to a committed
        version, :meth:`move_to`). Does nothing outside a group. Never raises."""
        self._deferred = None

    def refuse_in_group(self, what: str, instead: str = "") -> None:
        """Check that ``what``, which acts at once (outside any group's decision), may
        run on this handle; returns if the handle belongs to no group.

        Raises:
            AtomicGroupError: the handle belongs to a group (``s3ddb.atomic``), which
                holds only the changes it commits in its one decision; the message
                says ``instead``, what to do (by default: do it before or after the
                group, on a handle of its own).
        """
        if self._deferred is not None:
            raise AtomicGroupError(
                f"{self._uri}: {what} cannot be part of group {self._deferred.group_id}: "
                "it would act at once, before the group commits, and a group holds only "
                "changes it commits all or nothing. "
                + (instead or f"Do it before or after the group, on s3ddb.dataset({self._uri!r}).")
            )

    # --- where the handle is pinned ----------------------------------------------------

    def move_to(self, manifest: Manifest, *, seen_newest: bool | None = None) -> None:
        """Pin this handle at ``manifest``, a version of its dataset (committed, or
        planned by its group), committing nothing. ``seen_newest``: True if
        ``manifest`` was seen as the newest version just now (a commit on it soon
        claims at once), False if it may not be the newest (the next commit first
        looks for versions committed since), None to keep what the handle noted (a
        move onto a version planned on top of the pinned one). Never raises."""
        self._manifest = manifest
        if seen_newest is not None:
            self._seen_newest_at = time.monotonic() if seen_newest else None

    def forget_newest_seen(self) -> None:
        """Note that the pinned version may not be the newest (it was chosen, or seen
        as the newest long ago): the next commit first looks for versions committed
        since instead of claiming the next number at once. Never raises."""
        self._seen_newest_at = None

    def base_is_fresh(self, base: Manifest | None) -> bool:
        """Whether ``base`` (the pinned manifest, or the base the write in progress
        planned on) was seen as the newest version moments ago
        (:data:`FRESH_BASE_SECONDS`): then a commit on it claims at once; otherwise it
        first looks for versions committed since. Never raises."""
        seen = self._seen_newest_at if base is self._manifest else self._base_seen_at
        return seen is not None and time.monotonic() - seen < FRESH_BASE_SECONDS

    def record_commit(self, result: CommitResult) -> None:
        """Record ``result`` as this handle's last commit (:attr:`last_commit`, what
        :func:`rows_landed_since` counts), for a commit made on its behalf (by its
        group). It does not move the handle (:meth:`move_to`). Never raises."""
        self._last_commit = result

    def files(self) -> FileResolver:
        """Where the pinned version's files are (its root and its base paths)."""
        return FileResolver.for_manifest(self._handler.store, self._manifest)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self._uri!r}, version={self.version}, "
            f"rows={self._manifest.num_rows})"
        )

    # --- history ------------------------------------------------------------------

    def versions(self) -> list[VersionInfo]:
        """Every version, oldest first, with its commit time and operation.

        Raises:
            StoredMetadataError: a listed version's manifest is missing (e.g. an
                external store's row ahead of the manifests); the message names the
                version and the manifest.
            ManifestCorruptError: a manifest header read is corrupt.
        """
        return history(self._handler)

    def checkout_version(self: P, version: int | str) -> P:
        """A Dataset pinned at ``version`` (a number or a tag name).

        Raises:
            VersionNotFoundError: no such version or tag.
        """
        number = self.tags.resolve(version) if isinstance(version, str) else version
        return self.at(load_version(self._handler, number, self._uri))

    def at(self: P, manifest: Manifest) -> P:
        """Another handle on this dataset, pinned at ``manifest``'s version (of this
        handle's class, whatever that class's own constructor takes). From a handle
        of an atomic group, the new handle's ``restore()`` is held in the group and
        its other changes are refused (``AtomicGroupError``)."""
        other = type(self).__new__(type(self))
        PinnedVersion.__init__(
            other,
            self._uri,
            self._handler,
            manifest,
            storage_options=self._storage_options,
            commit_config=self._commit_config,
        )
        if manifest.version != self.version or self._seen_newest_at is None:
            other.forget_newest_seen()
        if self._deferred is not None:
            # A version checked out from a group's handle reads as usual; its
            # restore() is held with the group's changes and any other change is
            # refused: never committed at once, outside the group.
            other.enter_group(self._deferred.checked_out(self, other))
        return other

    # --- writes -------------------------------------------------------------------

    def _commit(
        self: P,
        operation: Operation,
        base: Manifest | None,
        on_existing: OnExisting = "rebase",
        naming: NamingScheme = DEFAULT_NAMING,
        pending: PendingWrites | None = None,
        properties: dict[str, str] | None = None,
        built_elsewhere: bool = False,
    ) -> P:
        """Commit ``operation`` read at ``base`` (with transaction ``properties``); this
        handle moves to the new version. ``built_elsewhere``: see
        :func:`s3ddb.commit.committer.commit_transaction`.

        Raises:
            CommitConflictError and subclasses, CommitStateUnknownError: see
                :func:`s3ddb.commit.committer.commit_transaction`.
        """
        if self._deferred is not None:
            plain = on_existing == "rebase" and naming == DEFAULT_NAMING
            self._manifest = self._deferred.defer(
                self, operation, base, pending, dict(properties or {}), plain
            )
            return self
        read_version = base.version if base is not None else 0
        result = commit_transaction(
            self._handler,
            Transaction(read_version, operation, properties=dict(properties or {})),
            base,
            config=self._commit_config,
            on_existing=on_existing,
            naming=naming,
            pending=pending,
            fresh_base=self.base_is_fresh(base),
            built_elsewhere=built_elsewhere,
        )
        self._manifest = result.manifest
        self._last_commit = result
        self._seen_newest_at = time.monotonic()
        return self


def commit_planned(
    ds: P,
    operation: Operation,
    base: Manifest | None,
    on_existing: OnExisting = "rebase",
    naming: NamingScheme = DEFAULT_NAMING,
    pending: PendingWrites | None = None,
    properties: dict[str, str] | None = None,
    built_elsewhere: bool = False,
) -> P:
    """Commit ``operation``, already planned on ``base`` (``None``: on no version), as
    the next version of ``ds``'s dataset, with transaction ``properties``; ``ds``
    moves to the new version and is returned. Inside an atomic group the commit is
    deferred to the group's end. For operations planned once; writes that must plan
    again after a conflict use :func:`plan_and_commit`. ``built_elsewhere``: the
    caller built it (:meth:`s3ddb.Dataset.commit`; see
    :func:`s3ddb.commit.committer.commit_transaction`).

    Raises:
        CommitConflictError and subclasses, CommitStateUnknownError: see
            :func:`s3ddb.commit.committer.commit_transaction`.
    """
    return ds._commit(
        operation, base, on_existing, naming, pending, properties, built_elsewhere=built_elsewhere
    )


def rows_landed_since(
    ds: PinnedVersion, prior: CommitResult | None, kind: type[Delete] | type[Update]
) -> int:
    """Rows that ``ds``'s last commit, if it is a ``kind`` operation made after
    ``prior``, deleted or changed (0 otherwise). Counted from the transaction that
    landed, not the plan: a rebase may have merged rows deleted concurrently, or
    applied an update to rows appended concurrently. Never raises."""
    landed = ds.last_commit
    if landed is None or landed is prior:
        return 0
    operation = landed.transaction.operation
    if not isinstance(operation, kind):
        return 0
    return sum(len(rows) for rows in operation.affected_rows.values())


def plan_and_commit(
    ds: PinnedVersion,
    what: str,
    plan: Callable[..., tuple[Operation | None, T]],
    conflict_retries: int | None,
    retry_timeout: float | dt.timedelta | None,
    *,
    uploads: bool = False,
    properties: dict[str, str] | None = None,
) -> T:
    """Plan an operation on ``ds``'s pinned version and commit it; on a retryable
    conflict plan again on the newest version (never re-commit the stale plan). How
    every planned write (delete, update, merge_insert, schema changes, compaction,
    indices) commits.

    With ``uploads``, ``plan(manifest, pending)`` also gets a
    :class:`PendingWrites` for the files it writes: they upload beside the
    commit's own (otherwise ``plan(manifest)``). ``properties`` are the
    transaction's (e.g. an application transaction number, committed at most once).

    The Dataset moves to the version committed, or, if the last plan changed
    nothing, to the version it planned on. If this raises, the Dataset stays where
    it was and the failed attempts' files are deleted.

    Raises:
        RetryableCommitConflictError: ``conflict_retries`` is 0 and a concurrent
            commit invalidated the plan.
        TooMuchWriteContentionError: retries exhausted (by count or time).
        IncompatibleTransactionError: the operation can no longer be done.
        TransactionAlreadyCommittedError: an application transaction number in
            ``properties`` is already committed.
    """
    retries = ds._retries if conflict_retries is None else conflict_retries
    timeout = ds._retry_timeout if retry_timeout is None else retry_timeout
    if isinstance(timeout, dt.timedelta):  # pylance passes a timedelta
        timeout = timeout.total_seconds()
    check_int("conflict_retries", retries, minimum=0)
    if timeout <= 0:
        raise InvalidInputError(f"retry_timeout must be > 0, got {timeout!r}")
    # What the plans record, and the call's name, go to the commit that follows.
    with operation_metrics(api_operation=what):
        return _plan_and_commit(ds, what, plan, retries, timeout, uploads, properties)


def _plan_and_commit(
    ds: PinnedVersion,
    what: str,
    plan: Callable[..., tuple[Operation | None, T]],
    retries: int,
    timeout: float,
    uploads: bool,
    properties: dict[str, str] | None,
) -> T:
    """:func:`plan_and_commit` once its arguments are checked."""
    deadline = time.monotonic() + timeout
    base = ds.manifest
    ds._base_seen_at = ds._seen_newest_at
    attempt = ds._last_conflict_retries = 0
    while True:
        pending = PendingWrites() if uploads else None
        try:
            operation, result = plan(base, pending) if uploads else plan(base)
        except BaseException:
            if pending is not None:
                # What the plan started uploading lands first, then goes: no file of
                # a plan that failed is left (or lands after its deletion).
                delete_written_files(ds.handler.store, pending.settle_and_take_paths())
            raise
        if operation is None:
            if base is not ds.manifest:
                ds._seen_newest_at = ds._base_seen_at
            ds._manifest = base
            return result
        try:
            ds._commit(operation, base, pending=pending, properties=properties)
            return result
        except RetryableCommitConflictError as exc:
            if retries == 0:
                raise
            if attempt >= retries or time.monotonic() > deadline:
                attempt += 1
                raise TooMuchWriteContentionError(
                    f"{what} on {ds.uri} gave up after {attempt} conflicting "
                    f"attempts ({retries} retries / {timeout:g} s); last conflict: {exc}"
                ) from exc
            attempt = ds._last_conflict_retries = attempt + 1
            log.info("%s: %s; re-executing on the newest version", what, exc)
            base = load_latest(ds.handler, ds.uri, finalize=False)
            ds._base_seen_at = time.monotonic()
