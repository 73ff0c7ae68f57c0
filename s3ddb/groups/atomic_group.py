"""``s3ddb.atomic``: changes to several datasets, committed all or nothing.

Inside ``with s3ddb.atomic() as tx:`` every change made through ``tx.dataset(uri)``
is planned at once (its data and deletion files are written) and held; the handle
moves to the version the change would make, so later changes and reads in the block
see it. On leaving the block every held change commits in one group
(:func:`s3ddb.commit.group_commit.commit_group`), or none does. An exception in the block
commits nothing and deletes the held changes' files.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from s3ddb.arguments import check_int
from s3ddb.commit.build import APP_TRANSACTION_PREFIX, build_manifest
from s3ddb.commit.committer import CommitConfig, CommitResult
from s3ddb.commit.external import committer_name
from s3ddb.commit.group_commit import GROUP_PROPERTY, GroupPart, check_together, commit_group
from s3ddb.commit.handlers import CommitHandler
from s3ddb.dataset import Dataset
from s3ddb.errors import (
    AtomicGroupError,
    DatasetNotFoundError,
    InvalidInputError,
    RetryableCommitConflictError,
    TransactionAlreadyCommittedError,
)
from s3ddb.external_store.manifest_store import MAX_GROUP_ACTIONS, MAX_GROUP_BYTES, encode_members
from s3ddb.format.manifest import Manifest, referenced_paths
from s3ddb.format.naming import MAX_VERSION
from s3ddb.io.parallel import PendingWrites
from s3ddb.io.uri import parse_uri
from s3ddb.io.written_files import delete_written_files
from s3ddb.observe.commit_metrics import recorded_operation_metrics
from s3ddb.operations import Operation, Restore, Transaction
from s3ddb.versions.opening import load_latest, open_validated
from s3ddb.versions.pinned import PinnedVersion, commit_planned

__all__ = ["Atomic", "AtomicGroup", "atomic", "check_transactions", "claim_bytes_bound"]

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

#: Bytes of a group's claim (its row, and the check of its predecessor's key) besides
#: what is counted from each part (its base URI twice, the committer, the members):
#: attribute names (about 125), numbers (4 at most 21 bytes each), the staged
#: manifest's path twice (at most 200 each), the operation's name, the dataset id, the
#: group id (64 each at most), the manifest's digest (64) and the check's condition
#: (about 100). An upper bound.
_ROW_OVERHEAD = 2048


@dataclass(eq=False)
class _Held:
    ds: Dataset
    part: GroupPart
    planned: Manifest


class AtomicGroup:
    """The changes of one ``with s3ddb.atomic() as tx:`` block (``tx``).

    Args:
        storage_options: the default storage options of :meth:`dataset`.
        commit_config: retry policy of the group's commit loop.
    """

    def __init__(
        self,
        storage_options: dict[str, Any] | None = None,
        commit_config: CommitConfig | None = None,
    ) -> None:
        self.group_id = str(uuid.uuid4())
        self._storage_options = storage_options
        self._commit_config = commit_config
        self._datasets: dict[str, Dataset] = {}
        self._held: list[_Held] = []
        # Every handle the group gave out (its datasets' handles and the versions
        # checked out from them), with the manifest it was pinned at then: a handle
        # whose change the group holds sits on a manifest nobody committed, and must
        # end on the committed version or back there (see _release).
        self._handles: list[tuple[PinnedVersion, Manifest]] = []
        # Handle (by id) -> index in _held of the last change made through it.
        self._changed: dict[int, int] = {}
        self._open = True

    def __repr__(self) -> str:
        return (
            f"AtomicGroup({self.group_id}, datasets={list(self._datasets)}, "
            f"changes={len(self._held)})"
        )

    @property
    def datasets(self) -> dict[str, Dataset]:
        """The group's datasets by key (base URI, or ``memory://`` URL)."""
        return dict(self._datasets)

    def dataset(
        self, uri: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
    ) -> Dataset:
        """The group's handle on the dataset at ``uri``, pinned at its newest version
        when first asked for; the same object every time after. Its changes are held
        until the group commits.

        Raises:
            InvalidURIError: ``uri`` is not a dataset URI or path.
            InvalidInputError: ``storage_options`` is not a dict.
            AtomicGroupError: the group is over; or ``uri`` cannot join it (a local
                path or ``s3://``, a scheme other than the other members', a DynamoDB
                table behind another endpoint, region or credentials).
            DatasetNotFoundError: nothing is committed at ``uri`` (a group changes
                existing datasets; create them first).
        """
        self._check_open()
        text, handler, options = self._open_handler(uri, storage_options)
        return self._member(text, handler, options)

    def _open_handler(
        self, uri: str | os.PathLike[str], storage_options: dict[str, Any] | None
    ) -> tuple[str, CommitHandler, dict[str, Any] | None]:
        """``uri`` as text, its commit handler and storage options (as :meth:`dataset`)."""
        parse_uri(uri)  # InvalidURIError for anything but a URI or path, before fspath
        text = os.fspath(uri)
        options = storage_options if storage_options is not None else self._storage_options
        return text, open_validated(text, options), options

    def _member(self, text: str, handler: CommitHandler, options: dict[str, Any] | None) -> Dataset:
        """The group's handle on ``handler``'s dataset (as :meth:`dataset`)."""
        known = self._datasets.get(handler.dataset_key())
        if known is not None:
            return known
        self._check_joins(handler, text)
        return self._add(
            Dataset(
                text,
                handler,
                load_latest(handler, text),
                storage_options=options,
                commit_config=self._commit_config,
            )
        )

    def join(self, ds: Dataset) -> Dataset:
        """The group's handle on an already open dataset: a copy of ``ds`` pinned
        where ``ds`` is (``ds`` itself stays outside the group). Later
        :meth:`dataset` calls for the same dataset return it.

        Raises:
            InvalidInputError: ``ds`` is not a :class:`s3ddb.Dataset`.
            AtomicGroupError: as :meth:`dataset`, or the dataset is in the group
                already, or ``ds`` is a handle of a group (its version may be one
                that group has not committed).
        """
        self._check_open()
        if not isinstance(ds, Dataset):
            raise InvalidInputError(
                f"join takes an open s3ddb.Dataset, got {type(ds).__name__} {ds!r:.200}; "
                "for a URI use tx.dataset(uri)"
            )
        if ds.group_id is not None:
            # Its version may be one another group planned and has not committed (or
            # will commit rebased): building on it could lose what that group's
            # rebase merged in.
            raise AtomicGroupError(
                f"{ds.uri} is a handle of group {ds.group_id}, pinned where "
                "that group planned it; join a dataset opened outside any group"
            )
        if ds.handler.dataset_key() in self._datasets:
            raise AtomicGroupError(f"{ds.uri} is in group {self.group_id} already")
        self._check_joins(ds.handler, ds.uri)
        return self._add(ds.at(ds.manifest))

    def add_operation(
        self,
        uri: str | os.PathLike[str],
        operation: Operation,
        transaction_properties: dict[str, str] | None = None,
    ) -> Dataset:
        """Hold ``operation`` (e.g. an ``Append`` of fragments written by
        :func:`s3ddb.fragment.write_fragments`) for the group's handle on ``uri``,
        read at the version the handle is at; ``transaction_properties`` go into its
        transaction (``s3ddb.app_txn.<application>`` = a sequence number makes a replay
        fail with ``TransactionAlreadyCommittedError``). Returns the handle.

        Raises:
            InvalidInputError: ``operation`` is not an s3ddb operation (nothing is
                held or deleted).
            InvalidURIError, or an error opening ``uri``'s store or DynamoDB table:
                nothing is held, and the files are kept (where they are is unknown).
            AtomicGroupError, DatasetNotFoundError, TransactionAlreadyCommittedError,
                CommitConflictError: the group cannot hold it (it is over, ``uri``
                cannot join it or has no dataset...); its files are deleted, but
                never one the newest version of ``uri`` refers to.
        """
        if not isinstance(operation, Operation):
            raise InvalidInputError(
                f"add_operation takes an s3ddb operation (s3ddb.operations: Append, Overwrite, "
                f"...), got {type(operation).__name__} {operation!r:.200}"
            )
        text, handler, options = self._open_handler(uri, None)
        try:
            self._check_open()
            ds = self._member(text, handler, options)
        except (AtomicGroupError, DatasetNotFoundError):
            # Refused before it was held: nothing will commit these files.
            _delete_refused(handler, text, operation)
            raise
        commit_planned(ds, operation, ds.manifest, properties=transaction_properties)
        return ds

    def checked_out(self, ds: PinnedVersion, other: PinnedVersion) -> _CheckedOut:
        """Where the commits of ``other``, a version of the group's handle ``ds``
        checked out in the block, go (see :class:`_CheckedOut`)."""
        self._handles.append((other, other.manifest))
        return _CheckedOut(self, ds)

    def _add(self, ds: Dataset) -> Dataset:
        ds.enter_group(self)
        self._datasets[ds.handler.dataset_key()] = ds
        self._handles.append((ds, ds.manifest))
        return ds

    def _check_open(self) -> None:
        if not self._open:
            raise AtomicGroupError(f"group {self.group_id} is over: start another")

    def _check_joins(self, handler: CommitHandler, uri: str) -> None:
        """Raises AtomicGroupError if ``handler``'s dataset cannot share a claim with
        the members so far."""
        members = [ds.handler for ds in self._datasets.values()]
        try:
            check_together([*members, handler])
        except AtomicGroupError as exc:
            raise AtomicGroupError(f"{uri} cannot join group {self.group_id}: {exc}") from None
        check_transactions(handler, uri, f"join group {self.group_id}")
        if members and not members[0].shares_transactions_with(handler):
            first = members[0]
            raise AtomicGroupError(
                f"{uri} cannot join group {self.group_id}: its DynamoDB table "
                f"({handler.describe()}) and {first.dataset_key()}'s ({first.describe()}) "
                "are not behind one endpoint, region and set of credentials, and "
                "one DynamoDB transaction spans only one account and region"
            )

    # --- held changes -------------------------------------------------------------

    def defer(
        self,
        ds: PinnedVersion,
        operation: Operation,
        base: Manifest | None,
        pending: PendingWrites | None,
        properties: dict[str, str],
        plain: bool,
    ) -> Manifest:
        """Hold a change of ``ds`` (see :class:`s3ddb.versions.pinned.DeferredCommits`).

        Raises:
            AtomicGroupError: the group is over, the change creates a dataset or
                uses other commit options, or the group would exceed one
                transaction's limits. The change's files are deleted.
        """
        try:
            return self._hold(ds, operation, base, pending, properties, plain)
        except BaseException:
            _delete_files(ds.handler, operation, pending, base)
            raise

    def _hold(
        self,
        ds: PinnedVersion,
        operation: Operation,
        base: Manifest | None,
        pending: PendingWrites | None,
        properties: dict[str, str],
        plain: bool,
    ) -> Manifest:
        self._check_open()
        if base is None or base.version < 1 or not plain:
            raise AtomicGroupError(
                f"{ds.uri}: a group holds changes to existing datasets with the default "
                f"commit options; {type(operation).__name__} here is not one"
            )
        mine = [i for i, h in enumerate(self._held) if h.ds is ds]
        prior = self._held[mine[-1]] if mine else None
        if prior is not None and base is not prior.planned:
            raise AtomicGroupError(
                f"{ds.uri}: a change in a group must build on the group's previous "
                "change to the same dataset"
            )
        if prior is not None:
            properties = _unrecorded(properties, self._root(mine[0]), base, ds.uri)
        txn = Transaction(
            base.version, operation, properties={**properties, GROUP_PROPERTY: self.group_id}
        )
        held = {h.planned.version: h.planned for h in self._held if h.ds is ds}

        def load(version: int) -> Manifest:
            if version in held:
                return held[version]
            return ds.handler.load_manifest(ds.handler.location_of(version))

        planned = ds.handler.stamp(
            build_manifest(base, txn, base.version + 1, base.naming_scheme, load), base
        )
        part = GroupPart(
            ds.handler,
            txn,
            base,
            pending,
            fresh_base=prior is None and ds.base_is_fresh(base),
            follows=mine[-1] if mine else None,
            # The call planning this change names itself now; the group commits later.
            recorded=recorded_operation_metrics(),
        )
        self._check_limits([*[h.part for h in self._held], part], ds.uri)
        self._held.append(_Held(ds, part, planned))  # type: ignore[arg-type]
        self._changed[id(ds)] = len(self._held) - 1
        return planned

    def _check_limits(self, parts: list[GroupPart], uri: str) -> None:
        """Raises AtomicGroupError if ``parts`` exceed one transaction (100 actions,
        4 MB), counted as DynamoDB counts them (a fenced claim is two actions), the
        size from above (:func:`claim_bytes_bound`)."""
        actions = sum(p.handler.claim_actions(p.follows is not None) for p in parts)
        size = claim_bytes_bound(parts)
        if actions > MAX_GROUP_ACTIONS or size > MAX_GROUP_BYTES:
            raise AtomicGroupError(
                f"{uri}: group {self.group_id} would need {actions} actions and about "
                f"{size} bytes in one transaction; DynamoDB takes at most "
                f"{MAX_GROUP_ACTIONS} actions (a change is 2: its claim and the check of "
                f"its predecessor) and {MAX_GROUP_BYTES} bytes. Split the group."
            )

    # --- the end of the block -------------------------------------------------------

    def commit(self) -> None:
        """Commit every held change, or none. Every handle the group gave out that
        sits on a version the group planned (its datasets' handles, versions checked
        out from them) moves to the version committed for it, or, if the group
        fails, back to where it was pinned (see :meth:`_release`).

        Raises:
            As :func:`s3ddb.commit.group_commit.commit_group`.
        """
        self._check_open()
        self._open = False
        try:
            results = commit_group(
                [h.part for h in self._held], group_id=self.group_id, config=self._commit_config
            )
        except BaseException:
            self._release(None)
            raise
        self._release(results)

    def abort(self) -> None:
        """Drop every held change and delete its files; nothing is committed."""
        if not self._open:
            return
        self._open = False
        for h in self._held:
            _delete_files(h.ds.handler, h.part.txn.operation, h.part.pending, h.part.base)
        self._release(None)

    def _release(self, results: list[CommitResult] | None) -> None:
        """End the group for every handle it gave out. With ``results`` (the group
        committed; one per held change) a handle pinned at a manifest the group
        planned moves to the version that change committed as (renumbered if the
        group was rebased); without, it goes back to where it was pinned when the
        group gave it out (for a handle given out at a planned manifest, to the
        committed version that dataset's changes started from). Either way no
        handle stays on a version that was never committed: a later change on one
        would be built on rows that are not there and undo other writers' commits.
        """
        planned = {id(h.planned): i for i, h in enumerate(self._held)}
        last = {id(h.ds): i for i, h in enumerate(self._held)}  # each dataset's newest
        for ds, origin in self._handles:
            ds.leave_group()
            at = planned.get(id(ds.manifest))
            if results is not None:
                if at is not None:
                    newest = last[id(self._held[at].ds)] == at
                    ds.move_to(results[at].manifest, seen_newest=newest)
                changed = self._changed.get(id(ds))
                if changed is not None:
                    ds.record_commit(results[changed])
            elif at is not None or id(ds) in self._changed:
                start = planned.get(id(origin))
                ds.move_to(origin if start is None else self._root(start), seen_newest=False)

    def _root(self, index: int) -> Manifest:
        """The committed version the chain of held changes ending at ``index``
        started from."""
        part = self._held[index].part
        while part.follows is not None:
            part = self._held[part.follows].part
        return part.base


class _CheckedOut:
    """The commits of a version checked out from a group's handle
    (``tx.dataset(uri).checkout_version(n)``). Its ``restore()`` is held with the
    group's changes to that dataset, on top of them, and moves the group's handle
    too. Any other change is refused: it was planned on an older version than the
    group's changes, which a group cannot rebase onto its own chain, and committing
    it at once would put it outside the group."""

    def __init__(self, group: AtomicGroup, handle: PinnedVersion) -> None:
        self._group = group
        self._handle = handle

    @property
    def group_id(self) -> str:
        return self._group.group_id

    def checked_out(self, ds: PinnedVersion, other: PinnedVersion) -> _CheckedOut:
        return self._group.checked_out(self._handle, other)

    def defer(
        self,
        ds: PinnedVersion,
        operation: Operation,
        base: Manifest | None,
        pending: PendingWrites | None,
        properties: dict[str, str],
        plain: bool,
    ) -> Manifest:
        """Hold a restore of ``ds``'s version with the group's handle.

        Raises:
            AtomicGroupError: not a restore (its files are deleted), or as
                :meth:`AtomicGroup.defer`.
        """
        if not isinstance(operation, Restore):
            _delete_files(ds.handler, operation, pending, base)
            raise AtomicGroupError(
                f"{ds.uri}: version {ds.version} was checked out in group "
                f"{self._group.group_id}; a group holds its restore(), but no other "
                f"change planned on it ({type(operation).__name__}): the group's changes "
                "to this dataset build on its newest version. Change the group's handle "
                "(tx.dataset(uri)), or restore this version first and change that."
            )
        handle = self._handle
        planned = self._group.defer(handle, operation, handle.manifest, pending, properties, plain)
        handle.move_to(planned)
        # ds moves to ``planned`` too (its _commit sets it): the group must move it to
        # the committed version, or back, when it ends.
        self._group._changed[id(ds)] = self._group._changed[id(handle)]
        return planned


def claim_bytes_bound(parts: list[GroupPart]) -> int:
    """At least the bytes of the items of the one transaction claiming ``parts``
    (DynamoDB's 4 MB limit): each part's row carries the whole group's members
    (base URI, version and table of every part), its own base URI and the committer;
    versions are counted at their longest, as a rebase may renumber them."""
    members = encode_members([(p.handler.dataset_key(), MAX_VERSION, _table_of(p)) for p in parts])
    each = _ROW_OVERHEAD + len(members.encode()) + len(committer_name().encode())
    return sum(each + 2 * len(p.handler.dataset_key().encode()) for p in parts)


def _table_of(part: GroupPart) -> str:
    """The longest DynamoDB table name ``part``'s row may record for its dataset."""
    _, table = part.handler.mechanism_record()
    return max(table, part.base.commit_table, key=len)


def _unrecorded(
    properties: dict[str, str], committed: Manifest, planned: Manifest, uri: str
) -> dict[str, str]:
    """``properties`` of a further change to a dataset in a group, without the
    application transactions (``s3ddb.app_txn.*``) that an earlier change of the group
    to it records already (``planned``, its newest planned manifest): the group commits
    them all or none, so recording the number once is enough, and checking it against
    the group's own plan would refuse the change as "already committed". Whether a
    number is committed is decided by the versions committed (``committed``, where the
    group's changes to the dataset start), never by the group's plan.

    Raises:
        TransactionAlreadyCommittedError: ``committed`` records an equal or newer
            number for one of the applications.
    """
    kept = dict(properties)
    for key, value in properties.items():
        if not key.startswith(APP_TRANSACTION_PREFIX):
            continue
        mine, done, held = (
            _number(value),
            _number(committed.table_metadata.get(key)),
            _number(planned.table_metadata.get(key)),
        )
        if mine is None or done is None or held is None:
            continue  # build_manifest says what is wrong with a number that is not one
        if mine <= done:
            raise TransactionAlreadyCommittedError(
                f"{uri}: application transaction {key[len(APP_TRANSACTION_PREFIX) :]!r} "
                f"{value} is already committed (version {committed.version} records "
                f"{committed.table_metadata.get(key)})"
            )
        if mine <= held:
            del kept[key]  # the group's earlier change records it (or a newer one)
    return kept


def _number(value: str | None) -> int | None:
    """An application transaction's number (-1: none recorded; None: not a number)."""
    if value is None:
        return -1
    try:
        return int(value)
    except ValueError:
        return None


def check_transactions(handler: CommitHandler, uri: str, what: str) -> None:
    """Raises AtomicGroupError if ``handler`` cannot take part in a group's one atomic
    request although its kind can (a DynamoDB store used without transactions,
    ``dynamodb_transactions=false``, e.g. for dynalite)."""
    why = handler.transactions_unavailable()
    if why is not None:
        raise AtomicGroupError(f"{uri} cannot {what}: {why}")


def _delete_refused(handler: CommitHandler, uri: str, operation: Operation) -> None:
    """Delete the files of ``operation``, refused before the group held it, except
    those the newest version of ``uri`` refers to (an operation may name committed
    files by mistake). If that version cannot be read, keep every file."""
    try:
        base: Manifest | None = load_latest(handler, uri)
    except DatasetNotFoundError:
        base = None
    except Exception as exc:
        log.warning("keeping the files of a change refused for %s: %s", uri, exc)
        return
    _delete_files(handler, operation, None, base)


def _delete_files(
    handler: CommitHandler,
    operation: Operation,
    pending: PendingWrites | None,
    base: Manifest | None,
) -> None:
    """Delete the files a held change wrote (never what ``base`` references)."""
    if pending is not None:
        try:
            pending.wait()
        except Exception:
            pass  # a failed upload left nothing to keep
    keep = set(referenced_paths(base, transaction=False)) if base is not None else set()
    paths = [p for p in operation.written_paths() if p not in keep]

    def warn(path: str, exc: Exception) -> None:
        log.warning("could not delete %s of a dropped group change: %s", path, exc)

    delete_written_files(handler.store, paths, on_failure=warn)


class Atomic:
    """What :func:`atomic` returns: a context manager, or a decorator that runs a
    function ``fn(tx, ...)`` in a group and runs it again on a retryable conflict."""

    def __init__(
        self,
        retries: int,
        storage_options: dict[str, Any] | None,
        commit_config: CommitConfig | None,
    ) -> None:
        self.retries = retries
        self.storage_options = storage_options
        self.commit_config = commit_config
        self._group: AtomicGroup | None = None

    def _new_group(self) -> AtomicGroup:
        return AtomicGroup(self.storage_options, self.commit_config)

    def __enter__(self) -> AtomicGroup:
        if self.retries:
            raise AtomicGroupError(
                "s3ddb.atomic(retries=N) re-runs a function: decorate one "
                "(@s3ddb.atomic(retries=N) def change(tx): ...); a with block runs once"
            )
        if self._group is not None:
            raise AtomicGroupError("this s3ddb.atomic() block is already open")
        self._group = self._new_group()
        return self._group

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        group, self._group = self._group, None
        assert group is not None
        if exc_type is not None:
            group.abort()
            return
        if group._open:  # unless the block committed or aborted it itself
            group.commit()

    def __call__(self, fn: Callable[P, T]) -> Callable[..., T]:
        """``fn(tx, *args, **kwargs)`` in a group, committed when it returns; re-run
        from the start in a new group after a retryable conflict, ``retries`` times.
        A function that ends its group itself (``tx.commit()``, ``tx.abort()``) keeps
        that outcome.

        Raises:
            Whatever ``fn`` raises (the group is aborted); as :meth:`AtomicGroup.commit`,
            with ``RetryableCommitConflictError`` once the retries are spent.
        """

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> T:
            attempt = 0
            while True:
                group = self._new_group()
                try:
                    out = fn(group, *args, **kwargs)  # type: ignore[arg-type]
                except BaseException:
                    group.abort()
                    raise
                if not group._open:
                    # fn ended the group itself (tx.commit() or tx.abort()): what it
                    # decided stands; committing again would report a committed group
                    # as failed.
                    return out
                try:
                    group.commit()
                    return out
                except RetryableCommitConflictError as exc:
                    attempt += 1
                    if attempt > self.retries:
                        raise
                    log.info("group %s: %s; running it again", group.group_id, exc)
                    time.sleep(random.uniform(0, min(1.0, 0.01 * 2**attempt)))

        return run


def atomic(
    retries: int = 0,
    *,
    storage_options: dict[str, Any] | None = None,
    commit_config: CommitConfig | None = None,
) -> Atomic:
    """Change several datasets together, all or nothing::

        with s3ddb.atomic() as tx:
            tx.dataset(orders).delete("status = 'void'")
            tx.dataset(ledger).insert(rows)

    Members are all ``s3+ddb://`` datasets whose tables share one DynamoDB endpoint,
    region and credentials, or all ``memory://`` datasets. ``retries`` applies to the
    decorator form: ``@s3ddb.atomic(retries=3) def move(tx): ...``, then ``move()``
    runs the function in a group and runs it again (in a new group, from the newest
    versions) after a retryable conflict. See docs/atomic.md.

    Raises:
        InvalidInputError: ``retries`` is not an int >= 0.
    """
    check_int("retries", retries, minimum=0)
    if storage_options is not None and not isinstance(storage_options, dict):
        raise InvalidInputError("storage_options must be a dict")
    return Atomic(retries, storage_options, commit_config)
