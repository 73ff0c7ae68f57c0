"""An in-process external manifest store, for unit tests and simulation.

:class:`InMemoryManifestStore` keeps rows in a dict guarded by one lock, so every
operation is atomic and every read is strongly consistent, like DynamoDB with
``ConsistentRead=True``. Stores created with the same ``name`` share their rows, the
way several writers share one DynamoDB table; unnamed stores are private.

Faults can be injected to drive the commit protocol through its failure paths (lost
responses, throttling, crashes between steps) without a network::

    store.inject_fault("put_if_not_exists", "apply_then_unknown")
    store.put_if_not_exists(row)   # row is stored, then ExternalStoreOutcomeUnknownError
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from s3ddb.errors import ExternalStoreError, ExternalStoreThrottledError
from s3ddb.external_store.identity import (
    check_fence,
    check_row,
    fence_failure_text,
    fence_holds,
    same_commit,
)
from s3ddb.external_store.manifest_store import (
    ExternalManifestStore,
    ExternalStoreOutcomeUnknownError,
    Fence,
    FenceFailedError,
    GroupClaim,
    GroupRefusedError,
    ManifestRow,
    VersionTakenError,
)

__all__ = ["FaultKind", "InMemoryManifestStore"]

#: Operations a fault can target ("*" targets every operation).
OPERATIONS = (
    "validate",
    "put_if_not_exists",
    "put_group",
    "get_group",
    "get",
    "get_latest",
    "list_versions",
    "finalize",
    "delete_dataset",
)

#: What an injected fault does:
#:   ``unknown``            raise ExternalStoreOutcomeUnknownError, write NOT applied
#:   ``apply_then_unknown`` apply the write, then raise ExternalStoreOutcomeUnknownError
#:   ``throttle``           raise ExternalStoreThrottledError (retries exhausted), nothing applied
#:   ``error``              raise ExternalStoreError, nothing applied
FaultKind = Literal["unknown", "apply_then_unknown", "throttle", "error"]
_KINDS: tuple[str, ...] = ("unknown", "apply_then_unknown", "throttle", "error")


@dataclass
class _Fault:
    operation: str
    kind: str | None
    exc_factory: Callable[[str], BaseException] | None
    remaining: int


class _Table:
    """The shared state of one named (or private) store."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # base_uri -> version -> row. Versions are few per dataset in tests, so sorting
        # on read is simpler than keeping a sorted structure.
        self.rows: dict[str, dict[int, ManifestRow]] = {}


_tables_lock = threading.Lock()
_tables: dict[str, _Table] = {}


class InMemoryManifestStore(ExternalManifestStore):
    """A thread-safe, strongly consistent external store held in memory.

    Args:
        name: stores created with the same name in one process share their rows;
            ``None`` (the default) makes a private store.

    Behaves exactly like :class:`~s3ddb.external_store.dynamodb.DynamoDBManifestStore`
    as seen through :class:`ExternalManifestStore`, including idempotent
    ``put_if_not_exists`` (re-putting the row that already holds a version succeeds).
    It is not shared between processes.
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        if name is None:
            self._table = _Table()
        else:
            with _tables_lock:
                self._table = _tables.setdefault(name, _Table())
        self._faults: list[_Fault] = []
        self._faults_lock = threading.Lock()
        #: How many times each operation was called (including faulted calls).
        self.calls: Counter[str] = Counter()
        #: Called as ``hook(operation, args)`` before each operation, outside the
        #: store's lock: simulations use it to add latency or pause at a barrier.
        self.hook: Callable[[str, tuple[Any, ...]], None] | None = None

    @classmethod
    def reset_shared(cls, name: str | None = None) -> None:
        """Forget the rows of the named shared store (all shared stores if None)."""
        with _tables_lock:
            if name is None:
                _tables.clear()
            else:
                _tables.pop(name, None)

    # --- fault injection ------------------------------------------------------------

    def inject_fault(
        self,
        operation: str,
        kind: FaultKind | None = None,
        *,
        times: int = 1,
        exception: Callable[[str], BaseException] | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``operation`` fail.

        Args:
            operation: one of :data:`OPERATIONS`, or ``"*"`` for any operation.
            kind: see :data:`FaultKind`. ``apply_then_unknown`` only makes sense for
                the writes (``put_if_not_exists``, ``finalize``, ``delete_dataset``);
                for reads it behaves like ``unknown``.
            times: how many calls fail.
            exception: instead of ``kind``, a factory called with the operation name
                whose result is raised (nothing applied).

        Raises:
            ValueError: unknown operation or kind, or neither/both of kind and exception.
        """
        if operation != "*" and operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; expected one of {OPERATIONS}")
        if (kind is None) == (exception is None):
            raise ValueError("give exactly one of kind and exception")
        if kind is not None and kind not in _KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {_KINDS}")
        with self._faults_lock:
            self._faults.append(_Fault(operation, kind, exception, times))

    def clear_faults(self) -> None:
        """Remove every pending injected fault."""
        with self._faults_lock:
            self._faults.clear()

    def _take_fault(self, operation: str) -> _Fault | None:
        with self._faults_lock:
            for fault in self._faults:
                if fault.operation in (operation, "*") and fault.remaining > 0:
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _enter(self, operation: str, *args: Any) -> _Fault | None:
        """Count the call, run the hook, and raise or return its pending fault.

        Returns the fault only when it must fire *after* the write is applied.
        """
        self.calls[operation] += 1
        if self.hook is not None:
            self.hook(operation, args)
        fault = self._take_fault(operation)
        if fault is None:
            return None
        if fault.kind == "apply_then_unknown" and operation in (
            "put_if_not_exists",
            "put_group",
            "finalize",
            "delete_dataset",
        ):
            return fault
        raise _fault_exception(fault, operation)

    # --- ExternalManifestStore ------------------------------------------------------

    def validate(self) -> None:
        """Always valid (an in-memory store has no table to check)."""
        self._enter("validate")

    def put_if_not_exists(self, row: ManifestRow, fence: Fence | None = None) -> None:
        """Claim ``row.version`` of ``row.base_uri``, atomically with ``fence`` (see the
        base class).

        Raises:
            VersionTakenError: another row holds the version (``winner`` is set).
            FenceFailedError: the version is free and the fence does not hold.
            ExternalStoreOutcomeUnknownError, ExternalStoreThrottledError: injected.
        """
        # The same checks as the DynamoDB store, so tests on memory catch what would
        # fail there.
        check_row(row)
        check_fence(row, fence)
        after = self._enter("put_if_not_exists", row)
        with self._table.lock:
            versions = self._table.rows.setdefault(row.base_uri, {})
            existing = versions.get(row.version)
            if existing is not None:
                if not same_commit(row, existing):
                    raise VersionTakenError(
                        f"version {row.version} of {row.base_uri} is already taken "
                        f"(by {existing.path!r})",
                        winner=_copy(existing),
                    )
            else:
                predecessor = versions.get(fence.version) if fence is not None else None
                if fence is not None and not fence_holds(fence, predecessor):
                    raise FenceFailedError(
                        fence_failure_text(row, fence, predecessor), _copy(predecessor)
                    )
                versions[row.version] = replace(row, extra=dict(row.extra))
        if after is not None:
            raise _fault_exception(after, "put_if_not_exists")

    def get(self, base_uri: str, version: int) -> ManifestRow | None:
        """The row of ``version``, or None."""
        self._enter("get", base_uri, version)
        with self._table.lock:
            return _copy(self._table.rows.get(base_uri, {}).get(version))

    def get_latest(self, base_uri: str) -> ManifestRow | None:
        """The row with the highest version, or None."""
        self._enter("get_latest", base_uri)
        with self._table.lock:
            versions = self._table.rows.get(base_uri)
            if not versions:
                return None
            return _copy(versions[max(versions)])

    def list_versions(
        self,
        base_uri: str,
        *,
        start_version: int | None = None,
        end_version: int | None = None,
        descending: bool = False,
    ) -> Iterator[ManifestRow]:
        """Rows with ``start_version <= version <= end_version``, ordered by version.

        The rows are a snapshot taken at the first ``next()``, like one consistent
        page of a DynamoDB query.
        """
        self._enter("list_versions", base_uri, start_version, end_version)
        with self._table.lock:
            rows = [
                replace(r, extra=dict(r.extra))
                for v, r in self._table.rows.get(base_uri, {}).items()
                if (start_version is None or v >= start_version)
                and (end_version is None or v <= end_version)
            ]
        rows.sort(key=lambda r: r.version, reverse=descending)
        return iter(rows)

    def finalize(self, base_uri: str, version: int, staged_path: str, final_path: str) -> bool:
        """Repoint the row from ``staged_path`` to ``final_path`` (see the base class).

        Raises:
            ExternalStoreError: the row is missing or points somewhere else.
        """
        after = self._enter("finalize", base_uri, version, staged_path, final_path)
        with self._table.lock:
            row = self._table.rows.get(base_uri, {}).get(version)
            if row is None:
                raise ExternalStoreError(
                    f"cannot finalize version {version} of {base_uri}: no such row"
                )
            if row.path == staged_path:
                self._table.rows[base_uri][version] = replace(row, path=final_path)
                changed = True
            elif row.path == final_path:
                changed = False
            else:
                raise ExternalStoreError(
                    f"cannot finalize version {version} of {base_uri} from {staged_path!r} "
                    f"to {final_path!r}: the row points at {row.path!r}"
                )
        if after is not None:
            raise _fault_exception(after, "finalize")
        return changed

    def delete_dataset(self, base_uri: str) -> int:
        """Delete every row of ``base_uri``; returns how many were deleted."""
        after = self._enter("delete_dataset", base_uri)
        with self._table.lock:
            count = len(self._table.rows.pop(base_uri, {}))
        if after is not None:
            raise _fault_exception(after, "delete_dataset")
        return count

    def delete_versions(self, base_uri: str, versions: Iterable[int]) -> int:
        wanted = list(versions)
        with self._table.lock:
            rows = self._table.rows.get(base_uri, {})
            for version in wanted:
                rows.pop(version, None)
        return len(wanted)

    def list_datasets(self) -> Iterator[str]:
        with self._table.lock:
            names = sorted(uri for uri, rows in self._table.rows.items() if rows)
        yield from names

    def describe(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "name": self.name}

    # --- groups ---------------------------------------------------------------------

    def shares_transactions_with(self, other: ExternalManifestStore) -> bool:
        """Stores sharing one table (the same ``name``, or the same store)."""
        return isinstance(other, InMemoryManifestStore) and other._table is self._table

    def put_group(self, claims: Sequence[GroupClaim], token: str) -> None:
        """Claim every row of ``claims`` under the table's lock: all or none (see
        :func:`~s3ddb.external_store.manifest_store.claim_group`).

        Raises:
            GroupRefusedError: some claim was refused; nothing applied.
            ExternalStoreOutcomeUnknownError, ExternalStoreThrottledError: injected.
        """
        for claim in claims:
            check_row(claim.row)
            check_fence(claim.row, claim.fence)
        after = self._enter("put_group", token)
        with self._table.lock:
            refusals: list[Exception | None] = []
            ours = 0
            for claim in claims:
                row, fence = claim.row, claim.fence
                versions = self._table.rows.get(row.base_uri, {})
                existing = versions.get(row.version)
                if existing is not None:
                    if same_commit(row, existing):
                        ours += 1
                        refusals.append(None)
                        continue
                    refusals.append(
                        VersionTakenError(
                            f"version {row.version} of {row.base_uri} is already taken "
                            f"(by {existing.path!r})",
                            winner=_copy(existing),
                        )
                    )
                    continue
                predecessor = versions.get(fence.version) if fence is not None else None
                if fence is not None and not fence_holds(fence, predecessor):
                    refusals.append(
                        FenceFailedError(
                            fence_failure_text(row, fence, predecessor), _copy(predecessor)
                        )
                    )
                    continue
                refusals.append(None)
            if ours == len(claims):
                pass  # an earlier attempt of this group applied
            elif any(r is not None for r in refusals) or ours:
                raise GroupRefusedError(f"group {token} refused", refusals)
            else:
                for claim in claims:
                    row = claim.row
                    self._table.rows.setdefault(row.base_uri, {})[row.version] = replace(
                        row, extra=dict(row.extra)
                    )
        if after is not None:
            raise _fault_exception(after, "put_group")

    def get_group(
        self, keys: Sequence[tuple[ExternalManifestStore, str, int]]
    ) -> list[ManifestRow | None]:
        """The rows of ``keys``, read under the table's lock (one instant)."""
        self._enter("get_group", len(keys))
        with self._table.lock:
            return [_copy(self._table.rows.get(uri, {}).get(v)) for _, uri, v in keys]


def _copy(row: ManifestRow | None) -> ManifestRow | None:
    # Rows are frozen but their ``extra`` dict is not: hand out copies so callers can
    # never edit the store's state.
    return None if row is None else replace(row, extra=dict(row.extra))


def _fault_exception(fault: _Fault, operation: str) -> BaseException:
    if fault.exc_factory is not None:
        return fault.exc_factory(operation)
    if fault.kind in ("unknown", "apply_then_unknown"):
        return ExternalStoreOutcomeUnknownError(
            f"injected fault: outcome of {operation} unknown ({fault.kind})"
        )
    if fault.kind == "throttle":
        return ExternalStoreThrottledError(f"injected fault: {operation} throttled")
    return ExternalStoreError(f"injected fault: {operation} failed")
