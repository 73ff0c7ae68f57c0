"""The external manifest store interface.

An external manifest store decides, with one conditional write per version, which
manifest is version N of a dataset. It records rows keyed by (``base_uri``,
``version``) whose ``path`` points at the manifest object, relative to the dataset
root: first a *staged* manifest (``_versions/<final>-<uuid>``), later the *final*
manifest (``_versions/<final>``). It knows nothing of transactions or commits.

Implementations: :mod:`s3ddb.external_store.dynamodb` (production) and
:mod:`s3ddb.external_store.memory` (unit tests and simulation). Every read must be
strongly consistent.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from s3ddb.errors import ExternalStoreError

if TYPE_CHECKING:
    from s3ddb.external_store.group import GroupClaim

__all__ = [
    "DATASET_ID_ATTRIBUTE",
    "ExternalManifestStore",
    "ExternalStoreOutcomeUnknownError",
    "Fence",
    "FenceFailedError",
    "ManifestRow",
    "VersionTakenError",
    "is_staged_path",
]

# A staged manifest path ends in ".manifest-<uuid hex or dashed uuid>".
_STAGED_RE = re.compile(r"\.manifest-[0-9A-Za-z-]+$")


def is_staged_path(path: str) -> bool:
    """Whether ``path`` names a staged manifest rather than a final one."""
    return bool(_STAGED_RE.search(path))


@dataclass(frozen=True)
class ManifestRow:
    """One row of the external store: who owns version ``version`` of ``base_uri``.

    Attributes:
        base_uri: normalized dataset URI, ``s3://bucket/prefix`` (no trailing slash).
        version: the version number, >= 1.
        path: manifest path relative to the dataset root, staged or final.
        size: manifest size in bytes.
        committer: library name/version and writer id.
        committed_at: epoch milliseconds.
        extra: further attributes (e.g. ``operation``), strings only.
    """

    base_uri: str
    version: int
    path: str
    size: int
    committer: str = ""
    committed_at: int = 0
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def is_staged(self) -> bool:
        return is_staged_path(self.path)


#: Row attribute holding the dataset's identity (the manifest's ``dataset_id``).
DATASET_ID_ATTRIBUTE = "dataset_id"


@dataclass(frozen=True)
class Fence:
    """What must hold of version ``version`` (the predecessor) for a claim to apply,
    decided in the same atomic request as the claim.

    Attributes:
        version: the predecessor's version (the claimed version minus one).
        dataset_id: the identity its row must carry; "" for a row written before
            s3ddb recorded identities (it must then carry none).
        absent: the predecessor must have *no* row instead: adopting a dataset whose
            earlier versions were committed without the store (``migrate-commits``).
    """

    version: int
    dataset_id: str = ""
    absent: bool = False


class FenceFailedError(ExternalStoreError):
    """A fenced claim was refused because its predecessor row is missing or belongs to
    another dataset identity, while the claimed version itself was free: the dataset
    was dropped or re-created. Nothing was written.

    Attributes:
        predecessor: the predecessor's row as the store returned it (None: missing).
    """

    def __init__(self, message: str, predecessor: ManifestRow | None = None) -> None:
        super().__init__(message)
        self.predecessor = predecessor


class VersionTakenError(ExternalStoreError):
    """``put_if_not_exists`` lost: another row already holds the version.

    Attributes:
        winner: the row that holds the version, when the store returned it
            (DynamoDB does, via ReturnValuesOnConditionCheckFailure).
    """

    def __init__(self, message: str, winner: ManifestRow | None = None) -> None:
        super().__init__(message)
        self.winner = winner


class ExternalStoreOutcomeUnknownError(ExternalStoreError):
    """A write may or may not have been applied (lost response, timeout, 5xx)."""


class ExternalManifestStore(abc.ABC):
    """Rows that decide which manifest is each version of a dataset.

    Contract for every implementation:
      * reads are strongly consistent;
      * ``put_if_not_exists`` is atomic: of concurrent puts of one
        (base_uri, version), exactly one succeeds;
      * throttling and transient server errors are retried with bounded exponential
        backoff inside the store, then raised as ``ExternalStoreThrottledError``.
    """

    @abc.abstractmethod
    def validate(self) -> None:
        """Check the backing table exists with the expected key schema (cached).

        Raises:
            ExternalStoreTableError: the table is missing or has another key schema;
                the message shows the expected schema and how to create it.
            CredentialsError: no credentials, or credentials refused.
        """

    @abc.abstractmethod
    def put_if_not_exists(self, row: ManifestRow, fence: Fence | None = None) -> None:
        """Claim ``row.version`` of ``row.base_uri`` for ``row``; with ``fence``, only
        if the predecessor row satisfies it, decided atomically with the claim.

        Idempotent: if the version is already held by this same commit (the same
        staged ``path``, which embeds a fresh UUID, or its finalized form with the same
        committer, committed_at and size; see :func:`~s3ddb.external_store.identity.
        same_commit`), the call succeeds. Implementations retry a put whose response
        was lost and rely on this to recognise their own row.

        Raises:
            VersionTakenError: the version is held by another row (``winner`` set
                when the store can return it without another request). Takes
                precedence over a failed fence.
            FenceFailedError: the version is free but the fence does not hold.
            ExternalStoreOutcomeUnknownError: the write may or may not have applied.
            ExternalStoreThrottledError: retries exhausted, and no attempt can have
                applied (every one was throttled or never sent): the version was not
                claimed by this call.
        """

    @abc.abstractmethod
    def get(self, base_uri: str, version: int) -> ManifestRow | None:
        """The row of ``version``, or None."""

    @abc.abstractmethod
    def get_latest(self, base_uri: str) -> ManifestRow | None:
        """The row with the highest version, or None if the dataset has no rows."""

    @abc.abstractmethod
    def list_versions(
        self,
        base_uri: str,
        *,
        start_version: int | None = None,
        end_version: int | None = None,
        descending: bool = False,
    ) -> Iterator[ManifestRow]:
        """Rows with ``start_version <= version <= end_version`` (bounds optional),
        ordered by version, paginating as needed."""

    @abc.abstractmethod
    def finalize(self, base_uri: str, version: int, staged_path: str, final_path: str) -> bool:
        """Repoint the row of ``version`` from ``staged_path`` to ``final_path``.

        Conditional on the row's path still being ``staged_path``. Idempotent.

        Returns:
            True if this call repointed the row; False if it was already final
            (path == ``final_path``).

        Raises:
            ExternalStoreError: the row is missing or points somewhere else.
        """

    @abc.abstractmethod
    def delete_dataset(self, base_uri: str) -> int:
        """Delete every row of ``base_uri``; returns how many were deleted."""

    def delete_versions(self, base_uri: str, versions: Iterable[int]) -> int:
        """Delete the rows of ``versions`` of ``base_uri`` (batched); returns how many
        were asked for. Cleanup only: never the newest version."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete single versions")

    def list_datasets(self) -> Iterator[str]:
        """The ``base_uri`` of every dataset with rows in the store, each once
        (a full scan, paginated: for operators, never on a commit path)."""
        raise NotImplementedError(f"{type(self).__name__} cannot list its datasets")

    def describe(self) -> dict[str, Any]:
        """A short description for logs and the CLI (e.g. table name, endpoint)."""
        return {"type": type(self).__name__}

    # --- groups (s3ddb.atomic, s3ddb.snapshot; see external_store.group) ---------------

    def shares_transactions_with(self, other: ExternalManifestStore) -> bool:
        """Whether one atomic request of this store can also hold rows of ``other``
        (same backend: one DynamoDB account, region and endpoint; one memory table)."""
        return other is self

    def put_group(self, claims: Sequence[GroupClaim], token: str) -> None:
        """Claim every row of ``claims`` (whose stores share transactions with this
        one) atomically; see :func:`s3ddb.external_store.group.claim_group`.

        Raises:
            ExternalStoreError: this store cannot claim several rows atomically.
        """
        raise ExternalStoreError(f"{type(self).__name__} cannot claim several versions atomically")

    def get_group(
        self, keys: Sequence[tuple[ExternalManifestStore, str, int]]
    ) -> list[ManifestRow | None]:
        """The rows of ``keys`` read at one instant; see
        :func:`s3ddb.external_store.group.read_rows`.

        Raises:
            ExternalStoreError: this store cannot read several rows atomically.
        """
        raise ExternalStoreError(f"{type(self).__name__} cannot read several rows atomically")
