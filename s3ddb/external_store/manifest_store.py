"""The external manifest store interface: the rows that decide each version, and
groups of them decided together.

An external manifest store decides, with one conditional write per version, which
manifest is version N of a dataset. It records rows keyed by (``base_uri``,
``version``) whose ``path`` points at the manifest object, relative to the dataset
root: first a *staged* manifest (``_versions/<final>-<uuid>``), later the *final*
manifest (``_versions/<final>``). It knows nothing of transactions or commits.

Implementations: :mod:`s3ddb.external_store.dynamodb` (production) and
:mod:`s3ddb.external_store.memory` (unit tests and simulation). Every read must be
strongly consistent.

Groups. Claims of several versions, of several datasets, decided together.

A group commit (``s3ddb.atomic``) claims one version per change, each with the fence of
a single claim, all in one atomic request: on DynamoDB one ``TransactWriteItems``
(a ``Put`` per claim and a ``ConditionCheck`` per fence), in memory one locked
check-and-put. Either every row is written or none is. A consistent read of the rows
of several keys (``TransactGetItems``) serves snapshots: it is serializable with the
group writes, so it never sees part of one.

Rows of a group carry :data:`GROUP_ID_ATTRIBUTE` (the group's id) and
:data:`GROUP_MEMBERS_ATTRIBUTE` (every member's base URI and
version and table, as JSON), so history and ``verify`` can tell which versions belong
together. The idempotency token of a claim is fresh for each attempt to claim (a new
round after a refusal claims other versions, so it must not reuse a token DynamoDB
may still hold for ten minutes); only a resend of the very same request reuses it.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from s3ddb.errors import ExternalStoreError, StoredMetadataError

__all__ = [
    "DATASET_ID_ATTRIBUTE",
    "GROUP_ID_ATTRIBUTE",
    "GROUP_MEMBERS_ATTRIBUTE",
    "MANIFEST_SHA256_ATTRIBUTE",
    "MAX_GROUP_ACTIONS",
    "MAX_GROUP_BYTES",
    "MAX_GROUP_READS",
    "ExternalManifestStore",
    "ExternalStoreOutcomeUnknownError",
    "Fence",
    "FenceFailedError",
    "GroupClaim",
    "GroupRefusedError",
    "ManifestRow",
    "VersionTakenError",
    "claim_group",
    "encode_members",
    "group_members",
    "is_staged_path",
    "parse_members",
    "read_rows",
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

#: Row attribute holding the SHA-256 digest (64 lowercase hex digits) of the manifest
#: the row committed: its staged manifest's bytes, which the final manifest copies.
#: Every read of the manifest through the row checks it, so whoever can write the
#: bucket but not the table cannot change what a version holds.
MANIFEST_SHA256_ATTRIBUTE = "manifest_sha256"


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

    #: The DynamoDB table holding the rows ("": the store is no DynamoDB table).
    table_name: str = ""
    #: Whether the store decides several rows in one atomic request (groups); a
    #: DynamoDB store used without TransactWriteItems does not.
    transactions: bool = True

    def describe(self) -> dict[str, Any]:
        """A short description for logs and the CLI (e.g. table name, endpoint)."""
        return {"type": type(self).__name__}

    def store_for_table(self, table: str) -> ExternalManifestStore:
        """The store of ``table`` reached like this one (the same endpoint, region and
        credentials: a group never spans others); this store itself when ``table`` is
        empty, its own, or this store has no table name."""
        return self

    # --- groups (s3ddb.atomic, s3ddb.snapshot; see the end of this module) ------------

    def shares_transactions_with(self, other: ExternalManifestStore) -> bool:
        """Whether one atomic request of this store can also hold rows of ``other``
        (same backend: one DynamoDB account, region and endpoint; one memory table)."""
        return other is self

    def put_group(self, claims: Sequence[GroupClaim], token: str) -> None:
        """Claim every row of ``claims`` (whose stores share transactions with this
        one) atomically; see :func:`claim_group`.

        Raises:
            ExternalStoreError: this store cannot claim several rows atomically.
        """
        raise ExternalStoreError(f"{type(self).__name__} cannot claim several versions atomically")

    def get_group(
        self, keys: Sequence[tuple[ExternalManifestStore, str, int]]
    ) -> list[ManifestRow | None]:
        """The rows of ``keys`` read at one instant; see
        :func:`read_rows`.

        Raises:
            ExternalStoreError: this store cannot read several rows atomically.
        """
        raise ExternalStoreError(f"{type(self).__name__} cannot read several rows atomically")


# --- groups --------------------------------------------------------------------

#: Row attribute: the id of the group a version was committed in.
GROUP_ID_ATTRIBUTE = "group_id"
#: Row attribute: the group's members as JSON ``[[base_uri, version], ...]``.
GROUP_MEMBERS_ATTRIBUTE = "group_members"
#: DynamoDB's limits on one TransactWriteItems: 100 actions, 4 MB in all.
MAX_GROUP_ACTIONS = 100
MAX_GROUP_BYTES = 4 * 1024 * 1024
#: DynamoDB's limit on one TransactGetItems.
MAX_GROUP_READS = 100

#: What a member read from a row may be: a base URI (``scheme://...``, printable,
#: bounded), a version DynamoDB can hold as a number, a DynamoDB table name (or
#: empty: the dataset's own store).
_MEMBER_URI_RE = re.compile(r"[a-z][a-z0-9+.-]*://[^\x00-\x1f\x7f]{1,2040}")
_MEMBER_TABLE_RE = re.compile(r"[A-Za-z0-9_.:-]{0,255}")
_GROUP_ID_RE = re.compile(r"[\x21-\x7e]{1,64}")
_MAX_VERSION = 2**63 - 1


@dataclass(frozen=True)
class GroupClaim:
    """One claim of a group: ``row`` in ``store``, fenced by ``fence`` (None: no
    predecessor check, e.g. the predecessor is claimed in the same group)."""

    store: ExternalManifestStore
    row: ManifestRow
    fence: Fence | None


class GroupRefusedError(ExternalStoreError):
    """A group claim applied nothing because some of its claims were refused.

    Attributes:
        refusals: one entry per claim, in order: None if that claim alone would have
            applied, else why not (a ``VersionTakenError`` with its ``winner``, or a
            ``FenceFailedError``).
    """

    def __init__(self, message: str, refusals: Sequence[Exception | None]) -> None:
        super().__init__(message)
        self.refusals = list(refusals)


def _backend(stores: Sequence[ExternalManifestStore]) -> ExternalManifestStore:
    """The store whose backend decides a request spanning ``stores``.

    Raises:
        ExternalStoreError: the stores cannot share one atomic request (different
            kinds, endpoints, regions or credentials).
    """
    first = stores[0]
    for other in stores[1:]:
        if not first.shares_transactions_with(other):
            raise ExternalStoreError(
                f"{first.describe()} and {other.describe()} cannot take part in one "
                "atomic request (one DynamoDB account, region and endpoint, or one "
                "in-memory store)"
            )
    return first


def claim_group(claims: Sequence[GroupClaim], token: str) -> None:
    """Claim every row of ``claims`` atomically (all or none), with ``token`` as the
    idempotency token: resending the same claims with the same token after a lost
    response applies them at most once.

    Idempotent like ``put_if_not_exists``: if every row is already held by this very
    commit (an earlier attempt landed), it is success.

    Raises:
        GroupRefusedError: nothing applied; ``refusals`` tells which claims failed.
        ExternalStoreOutcomeUnknownError: the request may or may not have applied.
        ExternalStoreThrottledError: retries exhausted and nothing can have applied.
        ExternalStoreError: the stores cannot share a request, or the backend has no
            transactions.
    """
    if not claims:
        return
    backend = _backend([c.store for c in claims])
    backend.put_group(claims, token)


def read_rows(
    keys: Sequence[tuple[ExternalManifestStore, str, int]],
) -> list[ManifestRow | None]:
    """The rows of ``keys`` (store, base URI, version) read at one instant, in order
    (None: no row): serializable with :func:`claim_group`.

    Raises:
        ExternalStoreError: the stores cannot share a request, or more than
            :data:`MAX_GROUP_READS` keys.
        ExternalStoreThrottledError: retries exhausted.
    """
    if not keys:
        return []
    if len(keys) > MAX_GROUP_READS:
        raise ExternalStoreError(
            f"one consistent read takes at most {MAX_GROUP_READS} rows, got {len(keys)}"
        )
    backend = _backend([k[0] for k in keys])
    return backend.get_group(keys)


def group_members(row: ManifestRow) -> list[tuple[str, int, str]] | None:
    """The members ``(base_uri, version, table)`` of the group ``row`` was committed
    in, or None if it was committed alone.

    Raises:
        StoredMetadataError: the row's group attributes are malformed (rows are
            input: whoever can write the table can plant one).
    """
    where = f"external store row of version {row.version} of {row.base_uri[:200]!r}"
    return parse_members(
        row.extra.get(GROUP_ID_ATTRIBUTE), row.extra.get(GROUP_MEMBERS_ATTRIBUTE), where
    )


def parse_members(
    group: str | None, text: str | None, where: str
) -> list[tuple[str, int, str]] | None:
    """The members recorded as ``group`` / ``text`` (see :func:`group_members`).

    Raises:
        StoredMetadataError: they are malformed; the message names ``where``.
    """
    if group is None and text is None:
        return None
    try:
        members = json.loads(text or "")
    except ValueError:
        members = None
    if (
        not isinstance(group, str)
        or not _GROUP_ID_RE.fullmatch(group)
        or not isinstance(members, list)
        or not 1 <= len(members) <= MAX_GROUP_ACTIONS
        or not all(
            isinstance(m, list)
            and len(m) == 3
            and isinstance(m[0], str)
            and _MEMBER_URI_RE.fullmatch(m[0])
            and isinstance(m[1], int)
            and not isinstance(m[1], bool)
            and 1 <= m[1] <= _MAX_VERSION
            and isinstance(m[2], str)
            and _MEMBER_TABLE_RE.fullmatch(m[2])
            for m in members
        )
    ):
        raise StoredMetadataError(
            f"malformed {where}: attributes {GROUP_ID_ATTRIBUTE!r}/"
            f"{GROUP_MEMBERS_ATTRIBUTE!r} must name the group (at most 64 printable "
            "characters) and list its members as [[base_uri, version, table], ...] (at "
            f"most {MAX_GROUP_ACTIONS}; a scheme:// URI, a version from 1, a DynamoDB "
            f"table name), got "
            f"{str(text)[:120]!r}"
        )
    return [(m[0], m[1], m[2]) for m in members]


def encode_members(members: Sequence[tuple[str, int, str]]) -> str:
    """The :data:`GROUP_MEMBERS_ATTRIBUTE` value of ``members`` (base URI, version,
    table)."""
    return json.dumps([list(m) for m in members], separators=(",", ":"))
