"""Group claims and consistent multi-row reads on DynamoDB.

A group claim is one ``TransactWriteItems``: per claim, a ``ConditionCheck`` on its
fence (the predecessor row) and the conditional ``Put`` of its row, with a token
fresh for each round of claims as ``ClientRequestToken``. DynamoDB applies all of
them or none. Resending the same request with the same token within ten minutes is
idempotent, so a lost response is answered by sending again. A consistent read of
several rows is one ``TransactGetItems``, which DynamoDB serializes with every
``TransactWriteItems`` touching the same items.

The store's retry policy applies (:class:`~s3ddb.external_store.dynamodb.
DynamoDBManifestStore`); this module only shapes the requests and reads the answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from s3ddb.errors import ExternalStoreError
from s3ddb.external_store import ddb_contract as c
from s3ddb.external_store.base import (
    ExternalManifestStore,
    ExternalStoreOutcomeUnknownError,
    FenceFailedError,
    ManifestRow,
    VersionTakenError,
)
from s3ddb.external_store.ddb_items import (
    claim_request,
    fenced_claim_request,
    item_key,
    item_to_row,
    row_to_item,
)
from s3ddb.external_store.group import GroupClaim, GroupRefusedError
from s3ddb.external_store.identity import check_fence, check_row, fence_failure_text, same_commit
from s3ddb.io.service_errors import Failure, describe_error, error_code

if TYPE_CHECKING:
    from s3ddb.external_store.dynamodb import DynamoDBManifestStore

__all__ = ["CANCEL_RETRY_CODES", "get_group", "group_request", "put_group"]

#: Cancellation reason codes of a TransactWriteItems that applied nothing and may be
#: sent again: another transaction held an item, or capacity ran out.
CANCEL_RETRY_CODES = frozenset(
    {
        "TransactionConflict",
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "RequestLimitExceeded",
    }
)


def _table(store: ExternalManifestStore) -> str:
    return str(getattr(store, "table_name", ""))


def group_request(
    claims: Sequence[GroupClaim], token: str
) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """The TransactWriteItems arguments of ``claims`` and, per action, what it is
    (``"check"`` or ``"put"``) and the index of its claim."""
    actions: list[dict[str, Any]] = []
    roles: list[tuple[str, int]] = []
    for i, claim in enumerate(claims):
        table = _table(claim.store)
        item = row_to_item(claim.row)
        if claim.fence is not None:
            fenced = fenced_claim_request(table, claim.row, item, claim.fence)
            check, put = fenced["TransactItems"]
            actions.append(check)
            roles.append(("check", i))
            actions.append(put)
        else:
            actions.append({"Put": claim_request(table, item)})
        roles.append(("put", i))
    return {"TransactItems": actions, "ClientRequestToken": token}, roles


def put_group(store: DynamoDBManifestStore, claims: Sequence[GroupClaim], token: str) -> None:
    """See :func:`s3ddb.external_store.group.claim_group` (``store`` sends it).

    Raises:
        GroupRefusedError, ExternalStoreOutcomeUnknownError, ExternalStoreError,
        ExternalStoreThrottledError: as ``claim_group`` says.
    """
    for claim in claims:
        check_row(claim.row)
        check_fence(claim.row, claim.fence)
    store.validate()
    where = c.where(store.table_name, store.endpoint, store.region)
    if not store.transactions:
        raise ExternalStoreError(
            f"{where} is used without TransactWriteItems (dynamodb_transactions=false), "
            "which a group commit (s3ddb.atomic) needs: it decides every member in one "
            "transaction"
        )
    request, roles = group_request(claims, token)
    client = store.client()

    def interpret(exc: BaseException, failure: Failure) -> Failure | None:
        code = error_code(exc)
        if code == "TransactionCanceledException":
            if _cancelled(store, claims, roles, exc, request["ClientRequestToken"]):
                return None
            # Applied nothing: send again, under a new token. Whether DynamoDB answers
            # a token whose request was cancelled with that cancellation again is not
            # documented; the rows' own conditions, not the token, keep a resend from
            # applying twice (an earlier attempt that landed makes this one fail on
            # rows that _cancelled recognises as ours).
            request["ClientRequestToken"] = str(uuid.uuid4())
            return Failure.THROTTLED
        if code == "TransactionInProgressException":
            return Failure.MAYBE_APPLIED  # the same token is still being applied
        if code in ("UnknownOperationException", "UnknownOperation"):
            raise ExternalStoreError(
                f"{where} does not implement TransactWriteItems, which a group "
                "commit (s3ddb.atomic) needs"
            ) from exc
        return failure

    store.claim_retrying(
        "TransactWriteItems",
        lambda: client.transact_write_items(**request),
        interpret,
        lambda attempts, exc: _unknown(claims, request["ClientRequestToken"], attempts, exc),
    )


def _unknown(
    claims: Sequence[GroupClaim], token: str, attempts: int, last: BaseException
) -> ExternalStoreOutcomeUnknownError:
    return ExternalStoreOutcomeUnknownError(
        f"TransactWriteItems of group {token} ({len(claims)} versions): outcome unknown "
        f"after {attempts} attempts (a response was lost; last: {describe_error(last)})"
    )


def _cancelled(
    store: DynamoDBManifestStore,
    claims: Sequence[GroupClaim],
    roles: list[tuple[str, int]],
    exc: BaseException,
    token: str,
) -> bool:
    """Read a cancelled group claim: True if the group is already this one's (an
    earlier attempt landed); False if nothing applied and it may be sent again.

    Raises:
        GroupRefusedError: some claim was refused (version taken, fence failed).
        ExternalStoreError: cancelled for another reason, or without its reasons.
    """
    response = getattr(exc, "response", None)
    reasons = response.get("CancellationReasons") if isinstance(response, dict) else None
    if not isinstance(reasons, list) or len(reasons) != len(roles):
        raise ExternalStoreError(
            f"TransactWriteItems of group {token} was cancelled without its "
            f"{len(roles)} reasons ({describe_error(exc)})"
        ) from exc
    codes = [str(r.get("Code", "None")) if isinstance(r, dict) else "None" for r in reasons]
    refusals: list[Exception | None] = [None] * len(claims)
    ours = 0
    for (role, i), code, reason in zip(roles, codes, reasons):
        if code != "ConditionalCheckFailed":
            continue
        item = reason.get("Item") if isinstance(reason, dict) else None
        claim = claims[i]
        if role == "put":
            winner = item_to_row(item) if item else store.get(claim.row.base_uri, claim.row.version)
            if winner is not None and same_commit(claim.row, winner):
                ours += 1
                continue
            holder = f"by {winner.path!r}" if winner else "(row since deleted)"
            refusals[i] = VersionTakenError(
                f"version {claim.row.version} of {claim.row.base_uri} is already taken {holder}",
                winner=winner,
            )
        elif refusals[i] is None:
            fence = claim.fence
            assert fence is not None
            predecessor = item_to_row(item) if item else None
            if predecessor is None and not fence.absent:
                predecessor = store.get(claim.row.base_uri, fence.version)
            refusals[i] = FenceFailedError(
                fence_failure_text(claim.row, fence, predecessor), predecessor
            )
    if ours:
        # All or nothing: one of our rows is there, so the whole group landed.
        return True
    if any(r is not None for r in refusals):
        raise GroupRefusedError(f"group {token} refused", refusals)
    if all(code in CANCEL_RETRY_CODES or code == "None" for code in codes):
        return False
    raise ExternalStoreError(
        f"TransactWriteItems of group {token} was cancelled: {', '.join(codes)} "
        f"({describe_error(exc)})"
    ) from exc


def get_group(
    store: DynamoDBManifestStore, keys: Sequence[tuple[ExternalManifestStore, str, int]]
) -> list[ManifestRow | None]:
    """The rows of ``keys`` in one ``TransactGetItems`` (retried while it conflicts
    with a transaction in flight).

    Raises:
        ExternalStoreThrottledError: retries exhausted.
        StoredMetadataError: a row is malformed.
    """
    store.validate()
    # DynamoDB refuses a transaction with two operations on one item (a ValidationException),
    # and one dataset may be asked for twice (two spellings of its URI): each item once.
    unique: dict[tuple[str, str, int], int] = {}
    for s, uri, version in keys:
        unique.setdefault((_table(s), uri, version), len(unique))
    request = {
        "TransactItems": [
            {"Get": {"TableName": table, "Key": item_key(uri, version)}}
            for table, uri, version in unique
        ]
    }
    client = store.client()

    def send() -> Any:
        try:
            return client.transact_get_items(**request)
        except Exception as exc:
            if error_code(exc) == "TransactionCanceledException":
                # Conflicts with a transaction being applied: read again.
                raise _RetryableRead(exc) from exc
            raise

    attempt = 0
    while True:
        attempt += 1
        try:
            response = store.retrying("TransactGetItems", send)
            break
        except _RetryableRead:
            if attempt > store.max_retries:
                raise
            store.back_off(attempt)
    responses = response.get("Responses") or []
    if len(responses) != len(unique):
        raise ExternalStoreError(
            f"TransactGetItems returned {len(responses)} answers for {len(unique)} keys"
        )
    rows: list[ManifestRow | None] = []
    for answer in responses:
        item = answer.get("Item") if isinstance(answer, dict) else None
        rows.append(item_to_row(item) if item else None)
    return [rows[unique[(_table(s), uri, version)]] for s, uri, version in keys]


class _RetryableRead(ExternalStoreError):
    """A TransactGetItems cancelled by a concurrent transaction (nothing read)."""
