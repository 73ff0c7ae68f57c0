"""The DynamoDB external manifest store.

One item per (dataset, version) in a table whose key schema is ``base_uri`` (S, hash)
and ``version`` (N, range); see ``docs/terraform.md`` for the full contract. Every
read is strongly consistent. Every request goes through one retry policy (bounded
exponential backoff with full jitter); botocore's own retries are disabled so that
the attempt counts and the unknown-outcome logic below are exact.

boto3 is imported lazily (through :class:`~s3ddb.io.aws.AwsConfig`).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from s3ddb.errors import (
    ExternalStoreError,
    ExternalStoreThrottledError,
    ExternalStoreUnreachableError,
)
from s3ddb.external_store import _ddb_common as c
from s3ddb.external_store.base import (
    ExternalManifestStore,
    ExternalStoreOutcomeUnknownError,
    ManifestRow,
    VersionTakenError,
)
from s3ddb.external_store.ddb_table import create_table
from s3ddb.external_store.identity import CORE_ATTRIBUTES, check_row, same_commit
from s3ddb.io.aws import AwsConfig

__all__ = ["DynamoDBManifestStore", "create_table", "item_to_row", "row_to_item"]

# Attribute names always go through placeholders (#b, #v, #p) so that DynamoDB
# reserved words (SIZE, PATH...) never matter.
_PUT_CONDITION = "attribute_not_exists(#b) AND attribute_not_exists(#v)"
_BATCH_LIMIT = 25  # BatchWriteItem accepts at most 25 requests

# (pid, endpoint, region, table) of tables whose schema was checked in this process.
_validated: set[tuple[int, str | None, str | None, str]] = set()
_validated_lock = threading.Lock()


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

    def __repr__(self) -> str:
        return f"DynamoDBManifestStore({self.table_name!r}, endpoint={self.endpoint!r})"

    # --- plumbing -----------------------------------------------------------------

    def _client(self) -> Any:
        """The process's boto3 client, with botocore retries off (ours are the policy)."""
        try:
            return self.aws.client("dynamodb", max_attempts=1)
        except Exception as exc:
            failure = c.classify(exc)
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

    def describe(self) -> dict[str, Any]:
        return {
            "type": type(self).__name__,
            "table": self.table_name,
            "endpoint": self.endpoint,
            "region": self.region,
        }

    def _backoff(self, attempt: int) -> float:
        """Full-jitter delay before retry number ``attempt`` (1-based)."""
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(0.0, cap)

    def _fail(self, exc: BaseException, failure: c.Failure, operation: str) -> Exception:
        if failure is c.Failure.TABLE_MISSING:
            # The table vanished after validation: check again next time.
            with _validated_lock:
                _validated.discard(self._cache_key())
        return c.translate(exc, failure, operation, self.table_name, self.endpoint, self.region)

    def _exhausted(
        self, operation: str, attempts: int, started: float, last: BaseException
    ) -> ExternalStoreError:
        if c.classify(last) is c.Failure.NOT_SENT:
            # Not throttling: nothing reached DynamoDB at all.
            return ExternalStoreUnreachableError(
                f"cannot connect to "
                f"{c.where(self.table_name, self.endpoint, self.region)} for {operation} "
                f"after {attempts} attempts over {time.monotonic() - started:.2f}s "
                f"({c.describe_error(last)})"
            )
        reason = {c.Failure.THROTTLED: "throttled"}.get(
            c.classify(last),  # type: ignore[arg-type]
            "server errors or lost responses",
        )
        return ExternalStoreThrottledError(
            f"{operation} on {c.where(self.table_name, self.endpoint, self.region)} "
            f"still failing after {attempts} attempts over {time.monotonic() - started:.2f}s "
            f"({reason}; last: {c.describe_error(last)})"
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
        method = getattr(self._client(), _snake(operation))
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return dict(method(TableName=self.table_name, **kwargs))
            except Exception as exc:
                failure = c.classify(exc)
                if failure is None:
                    raise
                if failure is c.Failure.CONDITION:
                    raise _ConditionFailed(_old_item(exc)) from exc
                if failure in (c.Failure.THROTTLED, c.Failure.NOT_SENT, c.Failure.MAYBE_APPLIED):
                    if attempt <= self.max_retries:
                        self._sleep(self._backoff(attempt))
                        continue
                    raise self._exhausted(operation, attempt, started, exc) from exc
                raise self._fail(exc, failure, operation) from exc

    # --- validation ------------------------------------------------------------------

    def _cache_key(self) -> tuple[int, str | None, str | None, str]:
        return (os.getpid(), self.endpoint, self.region, self.table_name)

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
        with _validated_lock:
            if key in _validated:
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
        with _validated_lock:
            _validated.add(key)

    # --- writes ----------------------------------------------------------------------

    def put_if_not_exists(self, row: ManifestRow) -> None:
        """Claim ``row.version`` of ``row.base_uri`` with one conditional PutItem.

        Idempotent: if the version is already held by this very commit (same staged
        path, or its finalized form with the same committer, time and size), it is
        success. That is what makes retrying a put whose response was lost (5xx,
        dropped connection, read timeout) safe: the retry either lands, or finds our
        own row, or finds another writer's row (a conflict).

        Raises:
            VersionTakenError: another commit holds the version; ``winner`` is its row.
            ExternalStoreOutcomeUnknownError: some attempt may have applied and the
                retries never learned the outcome. The commit may have landed.
            ExternalStoreThrottledError: retries exhausted while every attempt was
                rejected before being applied (throttled or not sent): the version was
                definitely not claimed by this call.
            ExternalStoreTableError, CredentialsError, ExternalStoreError: not applied.
            InvalidInputError: the row is malformed.
        """
        check_row(row)
        self.validate()
        client = self._client()
        item = row_to_item(row)
        started = time.monotonic()
        maybe_applied = False
        attempt = 0
        while True:
            attempt += 1
            try:
                client.put_item(
                    TableName=self.table_name,
                    Item=item,
                    ConditionExpression=_PUT_CONDITION,
                    ExpressionAttributeNames={"#b": "base_uri", "#v": "version"},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return
            except Exception as exc:
                failure = c.classify(exc)
                if failure is None:
                    raise
                if failure is c.Failure.CONDITION:
                    self._resolve_taken(row, _old_item(exc))
                    return
                if failure is c.Failure.MAYBE_APPLIED:
                    maybe_applied = True
                elif failure not in (c.Failure.THROTTLED, c.Failure.NOT_SENT):
                    if maybe_applied:
                        # An earlier attempt may have landed; this error hides whether.
                        raise self._unknown(row, attempt, exc) from exc
                    raise self._fail(exc, failure, "PutItem") from exc
                if attempt <= self.max_retries:
                    self._sleep(self._backoff(attempt))
                    continue
                if maybe_applied:
                    raise self._unknown(row, attempt, exc) from exc
                raise self._exhausted("PutItem", attempt, started, exc) from exc

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
            f"{attempts} attempts (a response was lost; last: {c.describe_error(last)})"
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
                Key=_key(base_uri, version),
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
            self._sleep(self._backoff(attempt))

    def _call_batch(self, request_items: dict[str, Any]) -> dict[str, Any]:
        method = self._client().batch_write_item
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return dict(method(RequestItems=request_items))
            except Exception as exc:
                failure = c.classify(exc)
                if failure is None:
                    raise
                if failure in (c.Failure.THROTTLED, c.Failure.NOT_SENT, c.Failure.MAYBE_APPLIED):
                    if attempt <= self.max_retries:
                        self._sleep(self._backoff(attempt))
                        continue
                    raise self._exhausted("BatchWriteItem", attempt, started, exc) from exc
                raise self._fail(exc, failure, "BatchWriteItem") from exc

    # --- reads -----------------------------------------------------------------------

    def get(self, base_uri: str, version: int) -> ManifestRow | None:
        """The row of ``version`` (consistent GetItem), or None.

        Raises:
            ExternalStoreThrottledError: retries exhausted.
        """
        self.validate()
        response = self._call("GetItem", Key=_key(base_uri, version), ConsistentRead=True)
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
        condition = "#b = :b"
        values: dict[str, Any] = {":b": {"S": base_uri}}
        if start is not None and end is not None:
            condition += " AND #v BETWEEN :lo AND :hi"
            values.update({":lo": {"N": str(start)}, ":hi": {"N": str(end)}})
        elif start is not None:
            condition += " AND #v >= :lo"
            values[":lo"] = {"N": str(start)}
        elif end is not None:
            condition += " AND #v <= :hi"
            values[":hi"] = {"N": str(end)}
        names = {"#b": "base_uri"}
        if start is not None or end is not None or keys_only:
            names["#v"] = "version"  # DynamoDB rejects unused placeholders
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": not descending,
            "ConsistentRead": True,
        }
        if keys_only:
            kwargs["ProjectionExpression"] = "#b, #v"
        if self.page_size is not None:
            kwargs["Limit"] = self.page_size
        while True:
            response = self._call("Query", **kwargs)
            yield list(response.get("Items") or [])
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last


# --- items ---------------------------------------------------------------------------


def _snake(operation: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in operation).lstrip("_")


def _key(base_uri: str, version: int) -> dict[str, Any]:
    return {"base_uri": {"S": base_uri}, "version": {"N": str(int(version))}}


def _old_item(exc: BaseException) -> dict[str, Any] | None:
    response = getattr(exc, "response", None)
    item = response.get("Item") if isinstance(response, dict) else None
    return item or None


def row_to_item(row: ManifestRow) -> dict[str, Any]:
    """The DynamoDB item (low-level AttributeValue form) of ``row``."""
    item: dict[str, Any] = {
        "base_uri": {"S": row.base_uri},
        "version": {"N": str(row.version)},
        "path": {"S": row.path},
        "size": {"N": str(row.size)},
        "committer": {"S": row.committer},
        "committed_at": {"N": str(row.committed_at)},
    }
    for key, value in row.extra.items():
        item[key] = {"S": value}
    return item


def item_to_row(item: dict[str, Any]) -> ManifestRow:
    """The row of a DynamoDB item.

    Attributes beyond the core ones become ``extra`` (S and N as their text, BOOL as
    "true"/"false"; other types, which s3ddb never writes, are left out).

    Raises:
        ExternalStoreError: the item lacks base_uri, version or path.
    """
    try:
        base_uri = item["base_uri"]["S"]
        version = int(item["version"]["N"])
        path = item["path"]["S"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ExternalStoreError(f"malformed external store row {item!r}: {exc!r}") from exc
    extra: dict[str, str] = {}
    for key, value in item.items():
        if key in CORE_ATTRIBUTES or not isinstance(value, dict):
            continue
        if "S" in value:
            extra[key] = value["S"]
        elif "N" in value:
            extra[key] = value["N"]
        elif "BOOL" in value:
            extra[key] = "true" if value["BOOL"] else "false"
    return ManifestRow(
        base_uri=base_uri,
        version=version,
        path=path,
        size=int(item.get("size", {}).get("N", 0)),
        committer=item.get("committer", {}).get("S", ""),
        committed_at=int(item.get("committed_at", {}).get("N", 0)),
        extra=extra,
    )
