"""Claims of several versions, of several datasets, decided together.

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

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from s3ddb.errors import ExternalStoreError, StoredMetadataError
from s3ddb.external_store.base import (
    ExternalManifestStore,
    Fence,
    ManifestRow,
)

__all__ = [
    "GROUP_ID_ATTRIBUTE",
    "GROUP_MEMBERS_ATTRIBUTE",
    "MAX_GROUP_ACTIONS",
    "MAX_GROUP_BYTES",
    "MAX_GROUP_READS",
    "GroupClaim",
    "GroupRefusedError",
    "claim_group",
    "encode_members",
    "group_members",
    "parse_members",
    "read_rows",
]

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
