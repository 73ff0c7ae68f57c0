"""What the DynamoDB manifest store sends to and reads from its table: rows as items
(checked on the way in: rows are input, whoever can write the table can plant one),
item keys, and the payloads of claims and queries.

Attribute names always go through placeholders (#b, #v, #p, #d) so that DynamoDB
reserved words (SIZE, PATH...) never matter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from s3ddb.errors import StoredMetadataError
from s3ddb.external_store.identity import CORE_ATTRIBUTES
from s3ddb.external_store.manifest_store import DATASET_ID_ATTRIBUTE, Fence, GroupClaim, ManifestRow

__all__ = [
    "MAX_COMMITTED_AT",
    "MAX_SIZE",
    "MAX_VERSION",
    "claim_request",
    "condition_item",
    "fenced_claim_request",
    "group_request",
    "item_key",
    "item_to_row",
    "query_request",
    "row_to_item",
]

# Bounds of the numeric row attributes (DynamoDB numbers hold 38 digits; s3ddb's are
# smaller): versions below 2**63 (V2 manifest names count down from 2**64 - 1), sizes
# below 1 TiB, commit times in milliseconds no later than a manifest's can be (its
# timestamp_nanos is below 2**63: April 2262), so that every date computed from one is
# one Python can hold.
MAX_VERSION = 2**63 - 1
MAX_SIZE = 2**40
MAX_COMMITTED_AT = (2**63 - 1) // 1_000_000
_DIGITS = re.compile(r"[0-9]+")

_PUT_CONDITION = "attribute_not_exists(#b) AND attribute_not_exists(#v)"
_PUT_NAMES = {"#b": "base_uri", "#v": "version"}


def item_key(base_uri: str, version: int) -> dict[str, Any]:
    """The key of the row of ``version`` of ``base_uri``."""
    return {"base_uri": {"S": base_uri}, "version": {"N": str(int(version))}}


def condition_item(exc: BaseException) -> dict[str, Any] | None:
    """The item a failed conditional write returned (ALL_OLD), if any."""
    response = getattr(exc, "response", None)
    item = response.get("Item") if isinstance(response, dict) else None
    return item or None


def claim_request(table: str, item: dict[str, Any]) -> dict[str, Any]:
    """The PutItem arguments that claim ``item``'s version if no row holds it (also
    the Put of a fenced claim's transaction)."""
    return {
        "TableName": table,
        "Item": item,
        "ConditionExpression": _PUT_CONDITION,
        "ExpressionAttributeNames": dict(_PUT_NAMES),
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def fenced_claim_request(
    table: str, row: ManifestRow, item: dict[str, Any], fence: Fence
) -> dict[str, Any]:
    """The TransactWriteItems arguments of a fenced claim: a ConditionCheck on the
    predecessor row (``fence``) and the conditional Put of ``item``."""
    if fence.absent:
        check = "attribute_not_exists(#v)"
        values: dict[str, Any] = {}
    elif fence.dataset_id:
        check = "attribute_exists(#v) AND #d = :d"
        values = {":d": {"S": fence.dataset_id}}
    else:
        check = "attribute_exists(#v) AND attribute_not_exists(#d)"
        values = {}
    condition_check: dict[str, Any] = {
        "TableName": table,
        "Key": item_key(row.base_uri, fence.version),
        "ConditionExpression": check,
        "ExpressionAttributeNames": {"#v": "version"}
        | ({} if fence.absent else {"#d": DATASET_ID_ATTRIBUTE}),
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if values:
        condition_check["ExpressionAttributeValues"] = values
    # No ClientRequestToken of s3ddb's own (botocore adds a fresh one to each call and
    # reuses it only on its own resends): a retry whose first attempt landed finds the
    # version held by its own row (same_commit), as a retried PutItem does.
    return {
        "TransactItems": [
            {"ConditionCheck": condition_check},
            {"Put": claim_request(table, item)},
        ],
    }


def group_request(
    claims: Sequence[GroupClaim], token: str
) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """The TransactWriteItems arguments of ``claims`` and, per action, what it is
    (``"check"`` or ``"put"``) and the index of its claim."""
    actions: list[dict[str, Any]] = []
    roles: list[tuple[str, int]] = []
    for i, claim in enumerate(claims):
        table = claim.store.table_name
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


def query_request(
    base_uri: str,
    start: int | None,
    end: int | None,
    descending: bool,
    *,
    keys_only: bool = False,
    page_size: int | None = None,
) -> dict[str, Any]:
    """The Query arguments (but TableName) for the rows of ``base_uri`` with
    ``start <= version <= end`` (either bound may be None), consistent."""
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
    if page_size is not None:
        kwargs["Limit"] = page_size
    return kwargs


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
    """The row of a DynamoDB item, checked: rows are input (whoever can write the
    table can plant one).

    Attributes beyond the core ones become ``extra`` (S and N as their text, BOOL as
    "true"/"false"; other types, which s3ddb never writes, are left out).

    Raises:
        StoredMetadataError: the item lacks base_uri, version or path, or an attribute
            has the wrong type or is out of range (the message names the row).
    """
    if not isinstance(item, dict):
        raise StoredMetadataError(
            f"malformed external store row: not a map ({type(item).__name__})"
        )
    base_uri = _attribute(item, "base_uri", "S", required=True)
    where = f"external store row of {base_uri[:200]!r}"
    version = _number(item, "version", where, 1, MAX_VERSION, required=True)
    where = f"external store row of version {version} of {base_uri[:200]!r}"
    path = _attribute(item, "path", "S", required=True, where=where)
    extra: dict[str, str] = {}
    for key, value in item.items():
        if key in CORE_ATTRIBUTES or not isinstance(value, dict):
            continue
        if "S" in value and isinstance(value["S"], str):
            extra[key] = value["S"]
        elif "N" in value and isinstance(value["N"], str):
            extra[key] = value["N"]
        elif "BOOL" in value:
            extra[key] = "true" if value["BOOL"] else "false"
    return ManifestRow(
        base_uri=base_uri,
        version=version,
        path=path,
        size=_number(item, "size", where, 0, MAX_SIZE),
        committer=_attribute(item, "committer", "S", where=where),
        committed_at=_number(item, "committed_at", where, 0, MAX_COMMITTED_AT),
        extra=extra,
    )


def _attribute(
    item: dict[str, Any], name: str, kind: str, *, required: bool = False, where: str = ""
) -> str:
    value = item.get(name)
    if value is None and not required:
        return ""
    text = value.get(kind) if isinstance(value, dict) else None
    if not isinstance(text, str) or (required and not text):
        shown = repr(value)[:120]
        raise StoredMetadataError(
            f"malformed {where or 'external store row'}: attribute {name!r} must be a "
            f"non-empty {kind}, got {shown}"
        )
    return text


def _number(
    item: dict[str, Any], name: str, where: str, low: int, high: int, *, required: bool = False
) -> int:
    value = item.get(name)
    if value is None and not required:
        return 0
    text = value.get("N") if isinstance(value, dict) else None
    # Integers only, in range, and short: DynamoDB numbers may be "1e30" or "2.5".
    if not isinstance(text, str) or len(text) > 20 or not _DIGITS.fullmatch(text):
        raise StoredMetadataError(
            f"malformed {where}: attribute {name!r} must be a whole number N, "
            f"got {repr(value)[:120]}"
        )
    number = int(text)
    if not low <= number <= high:
        raise StoredMetadataError(
            f"malformed {where}: attribute {name!r} is {number}, outside {low}..{high}"
        )
    return number
