"""The stored form of a version's commit metrics (see
:mod:`s3ddb.observe.commit_metrics` for what they hold): compact JSON in the
manifest's header (field ``commit_metrics``) and, on the DynamoDB path, in the
version's row. Untrusted input like the rest: checked before use, bounded."""

from __future__ import annotations

import json
import math
from typing import Any

from s3ddb.errors import StoredMetadataError

__all__ = ["MAX_METRICS_BYTES", "METRICS_ATTRIBUTE", "dumps_metrics", "parse_metrics"]

MAX_METRICS_BYTES = 16 * 1024
#: The attribute of a DynamoDB row holding its version's metrics.
METRICS_ATTRIBUTE = "metrics"


def dumps_metrics(metrics: dict[str, Any]) -> str:
    """The stored form: compact JSON, keys sorted."""
    return json.dumps(metrics, sort_keys=True, separators=(",", ":"))


def _value_ok(value: Any, depth: int) -> bool:
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return not isinstance(value, str) or len(value) <= 256
    if isinstance(value, float):
        return math.isfinite(value)
    if depth > 0 and isinstance(value, list):
        return len(value) <= 1024 and all(_value_ok(v, depth - 1) for v in value)
    if depth > 0 and isinstance(value, dict):
        return all(isinstance(k, str) and _value_ok(v, depth - 1) for k, v in value.items())
    return False


def parse_metrics(text: str, where: str) -> dict[str, Any]:
    """Stored metrics, checked: a JSON object of at most :data:`MAX_METRICS_BYTES`
    whose values are numbers, strings, booleans, or lists and objects of them (one
    level deep). Empty text: no metrics (a version written before they were).

    Raises:
        StoredMetadataError: anything else, naming ``where``.
    """
    if not text:
        return {}
    if len(text) > MAX_METRICS_BYTES:
        raise StoredMetadataError(f"{where}: commit metrics of {len(text)} bytes (at most 16 KiB)")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise StoredMetadataError(f"{where}: commit metrics are not JSON: {exc}") from None
    if not isinstance(value, dict) or not _value_ok(value, 2):
        raise StoredMetadataError(f"{where}: commit metrics are not an object of plain values")
    return value
