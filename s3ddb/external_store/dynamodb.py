"""The DynamoDB external manifest store.

One item per (dataset, version) in a table whose key schema is ``base_uri`` (S, hash)
and ``version`` (N, range); see ``docs/terraform.md`` for the full contract. Every
read is strongly consistent. Every request goes through one retry policy (bounded
exponential backoff with full jitter); botocore's own retries are disabled so that
the attempt counts and the unknown-outcome logic below are exact.

Groups (``s3ddb.atomic``, ``s3ddb.snapshot``): a group claim is one
``TransactWriteItems`` of every member's fenced claim (:meth:`DynamoDBManifestStore.
put_group`), a consistent read of several rows one ``TransactGetItems``
(:meth:`DynamoDBManifestStore.get_group`).

boto3 is imported lazily (through :class:`~s3ddb.io.aws.AwsConfig`).
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from s3ddb.errors import (
    ExternalStoreError,
    ExternalStoreThrottledError,
    ExternalStoreUnreachableError,
)
from s3ddb.external_store import ddb_contract as c
from s3ddb.external_store.ddb_items import (
    claim_request,
    condition_item,
    fenced_claim_request,
    group_request,
    item_key,
    item_to_row,
    query_request,
    row_to_item,
)
from s3ddb.external_store.ddb_table import create_table
from s3ddb.external_store.identity import check_fence, check_row, fence_failure_text, same_commit
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
from s3ddb.io.aws import AwsConfig
from s3ddb.io.per_process import PerProcess
from s3ddb.io.redact import redact_url
from s3ddb.io.service_errors import Failure, classify, describe_error, error_code

__all__ = ["DynamoDBManifestStore", "create_table", "item_to_row", "row_to_item"]

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

_BATCH_LIMIT = 25  # BatchWriteItem accepts at most 25 requests
UNFENCED_ENV = c.UNFENCED_ENV

# (endpoint, region, table) of tables whose schema was checked in this process.
_VALIDATED: PerProcess[tuple[str | None, str | None, str], bool] = PerProcess(
    "validated DynamoDB tables"
)


class _ConditionFailed(Exception):
    """Internal: a conditional write's check failed; ``item`` is the ALL_OLD item."""

    def __init__(self, item: dict[str, Any] | None) -> None:
        super().__init__("conditional check failed")
        self.item = item


class DynamoDBManifestStore(ExternalManifestStore):
    """The external manifest store on a DynamoDB table.

    Args:
        table_name: the table; it must already exist (see :func:`create_table`).
        aws: endpoint, region and credential overrides; default: the boto3 chain.
        max_retries: retries after the first attempt of each request, for throttling,
            5xx and connection failures.
        base_delay: the backoff cap of the first retry in seconds; it doubles per retry.
        max_delay: the largest backoff cap in seconds. Each sleep is uniform in
            ``[0, cap]`` ("full jitter"), which spreads out writers that collided.
        page_size: ``Limit`` of each Query page of :meth:`list_versions` and
            :meth:`delete_dataset` (None: DynamoDB's 1 MB pages).
        sleep: the sleep function (tests replace it).
        transactions: whether the endpoint implements ``TransactWriteItems``, which a
            fenced claim needs (None: yes, unless the storage option
            ``dynamodb_transactions`` or the environment variable
            ``S3DDB_DYNAMODB_TRANSACTIONS`` is ``false``). Without it a claim is one
            conditional ``PutItem`` and its fence is not checked: a writer of a
            dropped or re-created dataset is then not refused (docs/protocol.md).

    Every public operation first runs :meth:`validate` (one DescribeTable per process,
    endpoint and table), so a missing table or wrong key schema is always reported as
    :class:`~s3ddb.errors.ExternalStoreTableError`, never as an obscure validation error.
    Instances hold no boto3 client (clients are per process in :class:`AwsConfig`), so
    they pickle and survive ``fork``.
    """

    def __init__(
        self,
        table_name: str,
        aws: AwsConfig | None = None,
        *,
        max_retries: int = 8,
        base_delay: float = 0.05,
        max_delay: float = 2.0,
        page_size: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transactions: bool | None = None,
    ) -> None:
        if not table_name:
            raise ValueError("table_name must not be empty")
        if max_retries < 0 or base_delay < 0 or max_delay < 0:
            raise ValueError("max_retries, base_delay and max_delay must be >= 0")
        if page_size is not None and page_size < 1:
            raise ValueError("page_size must be >= 1")
        self.table_name = table_name
        self.aws = aws or AwsConfig()
        self.max_retries = max_retries
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.page_size = page_size
        self._sleep = sleep
        if transactions is None:
            setting = self.aws.dynamodb_transactions or os.environ.get(UNFENCED_ENV, "")
            transactions = setting.lower() not in ("off", "0", "false", "no")
        self.transactions = transactions

    def __repr__(self) -> str:
        # An endpoint URL may carry credentials (http://user:password@host).
        endpoint = redact_url(self.endpoint) if self.endpoint else None
        return f"DynamoDBManifestStore({self.table_name!r}, endpoint={endpoint!r})"

    # --- plumbing -----------------------------------------------------------------

    def client(self) -> Any:
        """The process's boto3 client, botocore's retries off (the store's policy is
        :meth:`retrying`). Raises CredentialsError, ExternalStoreError: no client."""
        try:
            return self.aws.client("dynamodb", max_attempts=1)
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            raise c.translate(
                exc, failure, "client setup", self.table_name, self.endpoint, self.region
            ) from exc

    @property
    def endpoint(self) -> str | None:
        """The endpoint in effect (explicit or from the environment), or None for the
        region's AWS endpoint."""
        return self.aws.endpoint_in_effect("dynamodb")

    @property
    def region(self) -> str:
        """The region requests go to (AwsConfig falls back to us-east-1)."""
        return self.aws.region_or_default("dynamodb") or "us-east-1"

    def shares_transactions_with(self, other: ExternalManifestStore) -> bool:
        """Another table (or this one) behind the same endpoint, region, credentials."""
        return isinstance(other, DynamoDBManifestStore) and other.aws == self.aws

    def store_for_table(self, table: str) -> ExternalManifestStore:
        """The store of ``table`` behind this one's endpoint, region and credentials."""
        if not table or table == self.table_name:
            return self
        return DynamoDBManifestStore(table, self.aws)

    def describe(self) -> dict[str, Any]:
        return {
            "type": type(self).__name__,
            "table": self.table_name,
            "endpoint": self.endpoint,
            "region": self.region,
        }

    def back_off(self, attempt: int) -> None:
        """Sleep a full-jitter delay before retry number ``attempt`` (1-based): uniform
        in [0, min(max_delay, base_delay * 2**(attempt-1))]. Never raises."""
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        self._sleep(random.uniform(0.0, cap))

    def _fail(self, exc: BaseException, failure: Failure, operation: str) -> Exception:
        if failure is Failure.TABLE_MISSING:
            # The table vanished after validation: check again next time.
            _VALIDATED.forget(self._cache_key())
        return c.translate(exc, failure, operation, self.table_name, self.endpoint, self.region)

    def _exhausted(
        self, operation: str, attempts: int, started: float, last: BaseException
    ) -> ExternalStoreError:
        if classify(last) is Failure.NOT_SENT:
            # Not throttling: nothing reached DynamoDB at all.
            return ExternalStoreUnreachableError(
                f"cannot connect to "
                f"{c.where(self.table_name, self.endpoint, self.region)} for {operation} "
                f"after {attempts} attempts over {time.monotonic() - started:.2f}s "
                f"({describe_error(last)})"
            )
        reason = {Failure.THROTTLED: "throttled"}.get(
            classify(last),  # type: ignore[arg-type]
            "server errors or lost responses",
        )
        return ExternalStoreThrottledError(
            f"{operation} on {c.where(self.table_name, self.endpoint, self.region)} "
            f"still failing after {attempts} attempts over {time.monotonic() - started:.2f}s "
            f"({reason}; last: {describe_error(last)})"
        )

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """Run a request that is safe to repeat, retrying transient failures.

        Used for reads, DescribeTable, finalize (conditional and idempotent) and
        deletes. ``operation`` is the DynamoDB API name (``GetItem``...).

        Raises:
            _ConditionFailed: the request's condition expression failed.
            ExternalStoreThrottledError: still throttled/failing after the retries.
            ExternalStoreTableError, CredentialsError, ExternalStoreError: not retried.
        """
        method = getattr(self.client(), _method_name(operation))
        return self.retrying(operation, lambda: method(TableName=self.table_name, **kwargs))

    def _call_batch(self, request_items: dict[str, Any]) -> dict[str, Any]:
        """BatchWriteItem, which takes ``RequestItems`` instead of ``TableName``,
        retried like :meth:`_call` (its unprocessed items are :meth:`_batch_delete`'s).
        """
        method = self.client().batch_write_item
        return self.retrying("BatchWriteItem", lambda: method(RequestItems=request_items))

    def retrying(self, operation: str, send: Callable[[], Any]) -> dict[str, Any]:
        """``send()`` (request ``operation``, safe to repeat) until it succeeds or a
        failure is not transient (the retry policy of every request but a claim);
        returns its response.

        Raises:
            _ConditionFailed, ExternalStoreThrottledError, ExternalStoreTableError,
            CredentialsError, ExternalStoreError: as :meth:`_call` says.
        """
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return dict(send())
            except Exception as exc:
                failure = classify(exc)
                if failure is None:
                    raise
                if failure is Failure.CONDITION:
                    raise _ConditionFailed(condition_item(exc)) from exc
                if failure in (
                    Failure.THROTTLED,
                    Failure.NOT_SENT,
                    Failure.MAYBE_APPLIED,
                ):
                    if attempt <= self.max_retries:
                        self.back_off(attempt)
                        continue
                    raise self._exhausted(operation, attempt, started, exc) from exc
                raise self._fail(exc, failure, operation) from exc

    # --- validation ------------------------------------------------------------------

    def _cache_key(self) -> tuple[str | None, str | None, str]:
        return (self.endpoint, self.region, self.table_name)

    def validate(self) -> None:
        """Check the table exists with the key schema (base_uri S HASH, version N RANGE).

        Runs DescribeTable once per (process, endpoint, region, table); success is
        cached, failures are not.

        Raises:
            ExternalStoreTableError: the table is missing, not usable yet (CREATING,
                DELETING...) or has another key schema; the message names the table,
                endpoint and region, shows the expected schema and how to create it.
            CredentialsError: no credentials, or credentials refused.
            ExternalStoreThrottledError: DescribeTable kept being throttled.
        """
        key = self._cache_key()
        if _VALIDATED.peek(key):
            return
        try:
            description = self._call("DescribeTable")["Table"]
        except _ConditionFailed as exc:  # pragma: no cover - DescribeTable has no condition
            raise ExternalStoreError("unexpected condition failure on DescribeTable") from exc
        status = description.get("TableStatus", "ACTIVE")
        if not c.key_schema_matches(description):
            raise c.wrong_schema_error(
                self.table_name, self.endpoint, self.region, c.key_schema_text(description)
            )
        if status not in ("ACTIVE", "UPDATING"):
            raise c.table_missing_error(
                self.table_name,
                self.endpoint,
                self.region,
                f" in a usable state (status {status}; wait until it is ACTIVE)",
            )
        _VALIDATED.put(key, True)

    # --- writes ----------------------------------------------------------------------

    def put_if_not_exists(self, row: ManifestRow, fence: Fence | None = None) -> None:
        """Claim ``row.version`` of ``row.base_uri``: one conditional ``PutItem``, or
        with ``fence`` one ``TransactWriteItems`` of a ``ConditionCheck`` on the
        predecessor row and the conditional ``Put`` (one round trip; 4 write units
        instead of 1).

        Idempotent: if the version is already held by this very commit (same staged
        path, or its finalized form with the same committer, time and size), it is
        success. That is what makes retrying a put whose response was lost (5xx,
        dropped connection, read timeout) safe: the retry either lands, or finds our
        own row, or finds another writer's row (a conflict). A fenced claim is retried
        the same way (its cancellation reasons return the holder of the version).

        Raises:
            VersionTakenError: another commit holds the version; ``winner`` is its row.
            FenceFailedError: the version is free but the predecessor row is missing
                or of another identity (the dataset was dropped or re-created).
            ExternalStoreOutcomeUnknownError: some attempt may have applied and the
                retries never learned the outcome. The commit may have landed.
            ExternalStoreThrottledError: retries exhausted while every attempt was
                rejected before being applied (throttled or not sent): the version was
                definitely not claimed by this call.
            ExternalStoreTableError, CredentialsError, ExternalStoreError: not applied.
            InvalidInputError: the row is malformed.
        """
        check_row(row)
        check_fence(row, fence)
        self.validate()
        # Without TransactWriteItems the claim is one PutItem and its fence unchecked.
        checked_fence = fence if self.transactions else None
        self.claim_retrying(
            "PutItem" if checked_fence is None else "TransactWriteItems",
            self._claim_sender(row, checked_fence),
            lambda exc, failure: self._claim_failure(row, checked_fence, exc, failure),
            lambda attempts, exc: self._unknown(row, attempts, exc),
        )

    def claim_retrying(
        self,
        operation: str,
        send: Callable[[], object],
        interpret: Callable[[BaseException, Failure], Failure | None],
        unknown: Callable[[int, BaseException], Exception],
    ) -> None:
        """The retry policy of a claim, one version's or a group's: call ``send``
        until an attempt succeeds or ``interpret`` (given a failed attempt's botocore
        error and its :class:`Failure`) says an earlier attempt landed (None). What
        applied nothing (throttled, not sent) or may have applied (MAYBE_APPLIED) is
        sent again, up to :attr:`max_retries` times; once an attempt may have
        applied, a later failure is ``unknown(attempts, error)``, never a definite
        one, since that error hides whether the earlier attempt landed: whatever its
        type, also one of ``interpret`` (say its read of the row a cancellation did
        not carry failed). Only a refusal, raised from rows read, decides it.

        Raises:
            VersionTakenError, FenceFailedError, GroupRefusedError: refused (from
            ``interpret``); ``unknown(...)``; anything else ``interpret`` or ``send``
            raises, ExternalStoreError and its kinds (:meth:`_fail`,
            :meth:`_exhausted`): only while no attempt may have applied.
        """
        started = time.monotonic()
        maybe_applied = False
        attempt = 0
        while True:
            attempt += 1
            try:
                send()
                return
            except Exception as exc:
                try:
                    failure = classify(exc)
                    if failure is None:
                        raise
                    failure = interpret(exc, failure)
                except _REFUSALS:
                    raise  # decided by the rows read: no attempt of ours landed
                except Exception as err:
                    if maybe_applied:  # silent on the attempt that may have landed
                        raise unknown(attempt, err) from err
                    raise
                if failure is None:
                    return  # an earlier attempt landed: the claim is this caller's
                if failure is Failure.MAYBE_APPLIED:
                    maybe_applied = True
                elif failure not in (Failure.THROTTLED, Failure.NOT_SENT):
                    if maybe_applied:
                        raise unknown(attempt, exc) from exc
                    raise self._fail(exc, failure, operation) from exc
                if attempt <= self.max_retries:
                    self.back_off(attempt)
                    continue
                if maybe_applied:
                    raise unknown(attempt, exc) from exc
                raise self._exhausted(operation, attempt, started, exc) from exc

    # --- groups -----------------------------------------------------------------------

    def put_group(self, claims: Sequence[GroupClaim], token: str) -> None:
        """One TransactWriteItems of every claim (see
        :func:`~s3ddb.external_store.manifest_store.claim_group`): per claim, a
        ``ConditionCheck`` on its fence and the conditional ``Put`` of its row, with
        ``token`` as ``ClientRequestToken`` (a new one after a cancellation that
        applied nothing). Resending the same request with the same token within ten
        minutes is idempotent, so a lost response is answered by sending again.

        Raises:
            GroupRefusedError, ExternalStoreOutcomeUnknownError, ExternalStoreError,
            ExternalStoreThrottledError: as ``claim_group`` says.
        """
        for claim in claims:
            check_row(claim.row)
            check_fence(claim.row, claim.fence)
        self.validate()
        where = c.where(self.table_name, self.endpoint, self.region)
        if not self.transactions:
            raise ExternalStoreError(
                f"{where} is used without TransactWriteItems (dynamodb_transactions=false), "
                "which a group commit (s3ddb.atomic) needs: it decides every member in one "
                "transaction"
            )
        request, roles = group_request(claims, token)
        client = self.client()

        def interpret(exc: BaseException, failure: Failure) -> Failure | None:
            code = error_code(exc)
            if code == "TransactionCanceledException":
                if self._group_cancelled(claims, roles, exc, request["ClientRequestToken"]):
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

        self.claim_retrying(
            "TransactWriteItems",
            lambda: client.transact_write_items(**request),
            interpret,
            lambda attempts, exc: self._group_unknown(
                claims, request["ClientRequestToken"], attempts, exc
            ),
        )

    def _group_unknown(
        self, claims: Sequence[GroupClaim], token: str, attempts: int, last: BaseException
    ) -> ExternalStoreOutcomeUnknownError:
        return ExternalStoreOutcomeUnknownError(
            f"TransactWriteItems of group {token} ({len(claims)} versions): outcome unknown "
            f"after {attempts} attempts (a response was lost; last: {describe_error(last)})"
        )

    def _group_cancelled(
        self,
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
                winner = (
                    item_to_row(item) if item else self.get(claim.row.base_uri, claim.row.version)
                )
                if winner is not None and same_commit(claim.row, winner):
                    ours += 1
                    continue
                holder = f"by {winner.path!r}" if winner else "(row since deleted)"
                refusals[i] = VersionTakenError(
                    f"version {claim.row.version} of {claim.row.base_uri} is already "
                    f"taken {holder}",
                    winner=winner,
                )
            elif refusals[i] is None:
                fence = claim.fence
                assert fence is not None
                predecessor = item_to_row(item) if item else None
                if predecessor is None and not fence.absent:
                    predecessor = self.get(claim.row.base_uri, fence.version)
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
        self, keys: Sequence[tuple[ExternalManifestStore, str, int]]
    ) -> list[ManifestRow | None]:
        """The rows of ``keys`` in one ``TransactGetItems`` (retried while it conflicts
        with a transaction in flight), which DynamoDB serializes with every
        ``TransactWriteItems`` touching the same items.

        Raises:
            ExternalStoreThrottledError: retries exhausted.
            StoredMetadataError: a row is malformed.
        """
        self.validate()
        # DynamoDB refuses a transaction with two operations on one item (a ValidationException),
        # and one dataset may be asked for twice (two spellings of its URI): each item once.
        unique: dict[tuple[str, str, int], int] = {}
        for s, uri, version in keys:
            unique.setdefault((s.table_name, uri, version), len(unique))
        request = {
            "TransactItems": [
                {"Get": {"TableName": table, "Key": item_key(uri, version)}}
                for table, uri, version in unique
            ]
        }
        client = self.client()

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
                response = self.retrying("TransactGetItems", send)
                break
            except _RetryableRead:
                if attempt > self.max_retries:
                    raise
                self.back_off(attempt)
        responses = response.get("Responses") or []
        if len(responses) != len(unique):
            raise ExternalStoreError(
                f"TransactGetItems returned {len(responses)} answers for {len(unique)} keys"
            )
        rows: list[ManifestRow | None] = []
        for answer in responses:
            item = answer.get("Item") if isinstance(answer, dict) else None
            rows.append(item_to_row(item) if item else None)
        return [rows[unique[(s.table_name, uri, version)]] for s, uri, version in keys]

    def _claim_sender(self, row: ManifestRow, fence: Fence | None) -> Callable[[], object]:
        """One attempt to claim ``row``: a conditional PutItem, or with ``fence`` a
        TransactWriteItems that also checks the predecessor row."""
        client = self.client()
        item = row_to_item(row)
        if fence is None:
            return lambda: client.put_item(**claim_request(self.table_name, item))
        return lambda: client.transact_write_items(
            **fenced_claim_request(self.table_name, row, item, fence)
        )

    def _claim_failure(
        self, row: ManifestRow, fence: Fence | None, exc: BaseException, failure: Failure
    ) -> Failure | None:
        """What a failed attempt to claim ``row`` (fenced by ``fence``, if any) means:
        None if the version is this commit's own (an earlier attempt landed), else the
        failure to retry or report (a cancelled transaction that applied nothing counts
        as THROTTLED).

        Raises:
            VersionTakenError: another commit holds the version.
            FenceFailedError: the version is free and the fence failed.
            ExternalStoreError: the endpoint lacks TransactWriteItems, or cancelled the
                transaction for another reason.
        """
        code = error_code(exc)
        if fence is not None and code == "TransactionCanceledException":
            if self._cancelled(row, fence, exc):
                return None
            return Failure.THROTTLED  # applied nothing: send it again
        if code in ("UnknownOperationException", "UnknownOperation"):
            raise ExternalStoreError(
                f"{c.where(self.table_name, self.endpoint, self.region)} does not "
                "implement TransactWriteItems, which s3ddb needs to claim a version "
                "only on top of its predecessor (so that a writer of a dropped or "
                f"re-created dataset is refused). Set the storage option "
                "dynamodb_transactions=false (or the environment variable "
                f"{UNFENCED_ENV}=false) to claim with a single conditional PutItem "
                "without that check (see docs/protocol.md)."
            ) from exc
        if failure is Failure.CONDITION:
            self._resolve_taken(row, condition_item(exc))
            return None
        return failure

    def _cancelled(self, row: ManifestRow, fence: Fence, exc: BaseException) -> bool:
        """Read a cancelled fenced claim: True if the version is this commit's own
        (an earlier attempt landed); False if nothing applied and it may be sent again.

        Raises:
            VersionTakenError: another commit holds the version.
            FenceFailedError: the version is free and the fence failed.
            ExternalStoreError: cancelled for another reason (malformed request...).
        """
        response = getattr(exc, "response", None)
        reasons = response.get("CancellationReasons") if isinstance(response, dict) else None
        if not isinstance(reasons, list) or len(reasons) != 2:
            raise ExternalStoreError(
                f"TransactWriteItems claiming version {row.version} of {row.base_uri} was "
                f"cancelled without its two reasons ({describe_error(exc)})"
            ) from exc
        codes = [str(r.get("Code", "None")) if isinstance(r, dict) else "None" for r in reasons]
        if codes[1] == "ConditionalCheckFailed":
            item = reasons[1].get("Item") or None
            self._resolve_taken(row, item)
            return True
        if codes[0] == "ConditionalCheckFailed":
            item = reasons[0].get("Item") or None
            predecessor = item_to_row(item) if item else None
            if predecessor is None and not fence.absent:
                # Stores that return no item: read it back (consistently).
                predecessor = self.get(row.base_uri, fence.version)
            raise FenceFailedError(fence_failure_text(row, fence, predecessor), predecessor)
        if all(code in CANCEL_RETRY_CODES or code == "None" for code in codes):
            return False
        raise ExternalStoreError(
            f"TransactWriteItems claiming version {row.version} of {row.base_uri} was "
            f"cancelled: {', '.join(codes)} ({describe_error(exc)})"
        ) from exc

    def _resolve_taken(self, row: ManifestRow, old_item: dict[str, Any] | None) -> None:
        """After ConditionalCheckFailed: return if the holder is ``row``, else raise."""
        # DynamoDB-compatible stores without ReturnValuesOnConditionCheckFailure return
        # no item: read the holder back (consistently).
        winner = item_to_row(old_item) if old_item else self.get(row.base_uri, row.version)
        if winner is not None and same_commit(row, winner):
            return
        holder = f"by {winner.path!r} ({winner.committer})" if winner else "(row since deleted)"
        raise VersionTakenError(
            f"version {row.version} of {row.base_uri} is already taken {holder}",
            winner=winner,
        )

    def _unknown(
        self, row: ManifestRow, attempts: int, last: BaseException
    ) -> ExternalStoreOutcomeUnknownError:
        return ExternalStoreOutcomeUnknownError(
            f"PutItem of version {row.version} of {row.base_uri} (path {row.path!r}) on "
            f"{c.where(self.table_name, self.endpoint, self.region)}: outcome unknown after "
            f"{attempts} attempts (a response was lost; last: {describe_error(last)})"
        )

    def finalize(self, base_uri: str, version: int, staged_path: str, final_path: str) -> bool:
        """Repoint the row from ``staged_path`` to ``final_path`` (conditional UpdateItem).

        Returns:
            True if this call repointed the row; False if it was already final. When a
            response was lost and the retry finds the row final, the result is False
            even if the lost attempt did the work.

        Raises:
            ExternalStoreError: the row is missing or points at another path.
            ExternalStoreThrottledError: retries exhausted.
        """
        self.validate()
        try:
            self._call(
                "UpdateItem",
                Key=item_key(base_uri, version),
                UpdateExpression="SET #p = :final",
                ConditionExpression="#p = :staged",
                ExpressionAttributeNames={"#p": "path"},
                ExpressionAttributeValues={
                    ":final": {"S": final_path},
                    ":staged": {"S": staged_path},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return True
        except _ConditionFailed as exc:
            current = item_to_row(exc.item) if exc.item else self.get(base_uri, version)
        if current is not None and current.path == final_path:
            return False
        state = "no such row" if current is None else f"the row points at {current.path!r}"
        raise ExternalStoreError(
            f"cannot finalize version {version} of {base_uri} from {staged_path!r} to "
            f"{final_path!r}: {state}"
        )

    def delete_dataset(self, base_uri: str) -> int:
        """Delete every row of ``base_uri`` (Query + BatchWriteItem); returns the count.

        Rows put concurrently with the deletion may survive it.

        Raises:
            ExternalStoreThrottledError: retries exhausted (some rows may be deleted).
        """
        self.validate()
        deleted = 0
        for page in self._query_pages(base_uri, None, None, False, keys_only=True):
            for start in range(0, len(page), _BATCH_LIMIT):
                batch = page[start : start + _BATCH_LIMIT]
                self._batch_delete(batch)
                deleted += len(batch)
        return deleted

    def delete_versions(self, base_uri: str, versions: Iterable[int]) -> int:
        """Delete the rows of ``versions`` (BatchWriteItem, 25 keys a request).

        Raises:
            ExternalStoreThrottledError: retries exhausted (some rows may be deleted).
        """
        self.validate()
        keys = [
            {"base_uri": {"S": base_uri}, "version": {"N": str(v)}} for v in sorted(set(versions))
        ]
        for start in range(0, len(keys), _BATCH_LIMIT):
            self._batch_delete(keys[start : start + _BATCH_LIMIT])
        return len(keys)

    def list_datasets(self) -> Iterator[str]:
        """Every ``base_uri`` in the table, each once (Scan of the key attribute,
        paginated; a dataset's rows are adjacent in no particular scan order)."""
        self.validate()
        seen: set[str] = set()
        kwargs: dict[str, Any] = {
            "ProjectionExpression": "#b",
            "ExpressionAttributeNames": {"#b": "base_uri"},
        }
        if self.page_size is not None:
            kwargs["Limit"] = self.page_size
        while True:
            response = self._call("Scan", **kwargs)
            for item in response.get("Items") or []:
                base_uri = item.get("base_uri", {}).get("S")
                if base_uri and base_uri not in seen:
                    seen.add(base_uri)
                    yield base_uri
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def _batch_delete(self, keys: list[dict[str, Any]]) -> None:
        requests: list[dict[str, Any]] = [{"DeleteRequest": {"Key": k}} for k in keys]
        started = time.monotonic()
        attempt = 0
        while requests:
            attempt += 1
            # BatchWriteItem takes RequestItems instead of TableName, so no _call.
            response = self._call_batch({self.table_name: requests})
            requests = response.get("UnprocessedItems", {}).get(self.table_name, [])
            if not requests:
                return
            # Unprocessed items are DynamoDB's way of throttling a batch.
            if attempt > self.max_retries:
                raise ExternalStoreThrottledError(
                    "BatchWriteItem on "
                    f"{c.where(self.table_name, self.endpoint, self.region)} left "
                    f"{len(requests)} deletes unprocessed after {attempt} attempts over "
                    f"{time.monotonic() - started:.2f}s"
                )
            self.back_off(attempt)

    # --- reads -----------------------------------------------------------------------

    def get(self, base_uri: str, version: int) -> ManifestRow | None:
        """The row of ``version`` (consistent GetItem), or None.

        Raises:
            ExternalStoreThrottledError: retries exhausted.
        """
        self.validate()
        response = self._call("GetItem", Key=item_key(base_uri, version), ConsistentRead=True)
        item = response.get("Item")
        return item_to_row(item) if item else None

    def get_latest(self, base_uri: str) -> ManifestRow | None:
        """The highest version's row (consistent Query, descending, Limit 1), or None.

        Raises:
            ExternalStoreThrottledError: retries exhausted.
        """
        self.validate()
        response = self._call(
            "Query",
            KeyConditionExpression="#b = :b",
            ExpressionAttributeNames={"#b": "base_uri"},
            ExpressionAttributeValues={":b": {"S": base_uri}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
        items = response.get("Items") or []
        return item_to_row(items[0]) if items else None

    def list_versions(
        self,
        base_uri: str,
        *,
        start_version: int | None = None,
        end_version: int | None = None,
        descending: bool = False,
    ) -> Iterator[ManifestRow]:
        """Rows with ``start_version <= version <= end_version``, ordered by version.

        A consistent, paginated Query; pages are fetched as the iterator advances.

        Raises:
            ExternalStoreThrottledError: retries exhausted (while iterating).
        """
        self.validate()
        if start_version is not None and end_version is not None and start_version > end_version:
            return iter(())  # DynamoDB rejects BETWEEN with lo > hi
        pages = self._query_pages(base_uri, start_version, end_version, descending)
        return (item_to_row(item) for page in pages for item in page)

    def _query_pages(
        self,
        base_uri: str,
        start: int | None,
        end: int | None,
        descending: bool,
        *,
        keys_only: bool = False,
    ) -> Iterator[list[dict[str, Any]]]:
        kwargs = query_request(
            base_uri, start, end, descending, keys_only=keys_only, page_size=self.page_size
        )
        while True:
            response = self._call("Query", **kwargs)
            yield list(response.get("Items") or [])
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last


#: What a claim's ``interpret`` raises from rows it read: no attempt of the claim landed.
_REFUSALS = (VersionTakenError, FenceFailedError, GroupRefusedError)


def _method_name(operation: str) -> str:
    """The boto3 method of a DynamoDB API name (``GetItem`` -> ``get_item``)."""
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in operation).lstrip("_")


class _RetryableRead(ExternalStoreError):
    """A TransactGetItems cancelled by a concurrent transaction (nothing read)."""
