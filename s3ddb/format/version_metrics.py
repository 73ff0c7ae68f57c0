"""The stored form of a version's commit metrics (see
:mod:`s3ddb.observe.commit_metrics` for what they hold): compact JSON in the
manifest's header (field ``commit_metrics``) and, on the DynamoDB path, in the
version's row. Untrusted input like the rest: checked before use, bounded in size
and in nesting (checked before the JSON parser sees the text: it recurses once per
level).

Metrics tell about a commit; they are not data. A version whose stored metrics are
malformed still opens and reads: :func:`read_metrics` gives it no metrics and says
what is wrong, and history shows that (``VersionInfo.metrics_problem``)."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from s3ddb.errors import StoredMetadataError

__all__ = [
    "MAX_METRICS_BYTES",
    "MAX_METRICS_DEPTH",
    "METRICS_ATTRIBUTE",
    "dumps_metrics",
    "parse_metrics",
    "read_metrics",
]

log = logging.getLogger(__name__)

MAX_METRICS_BYTES = 16 * 1024
#: How deep stored metrics nest: the object, and lists or objects as its values.
MAX_METRICS_DEPTH = 2
#: The attribute of a DynamoDB row holding its version's metrics.
METRICS_ATTRIBUTE = "metrics"


def dumps_metrics(metrics: dict[str, Any]) -> str:
    """The stored form: compact JSON, keys sorted."""
    return json.dumps(metrics, sort_keys=True, separators=(",", ":"))


def _nesting(text: str) -> int:
    """How deep the brackets of JSON ``text`` nest, those inside strings left out:
    one pass over its characters (at most :data:`MAX_METRICS_BYTES`), no recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


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
        StoredMetadataError: anything else, naming ``where`` (deeper nesting is
            refused before the text is parsed).
    """
    if not text:
        return {}
    if len(text) > MAX_METRICS_BYTES:
        raise StoredMetadataError(f"{where}: commit metrics of {len(text)} bytes (at most 16 KiB)")
    depth = _nesting(text)
    if depth > MAX_METRICS_DEPTH:
        raise StoredMetadataError(
            f"{where}: commit metrics nest {depth} levels deep (at most {MAX_METRICS_DEPTH})"
        )
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise StoredMetadataError(f"{where}: commit metrics are not JSON: {exc}") from None
    if not isinstance(value, dict) or not _value_ok(value, MAX_METRICS_DEPTH):
        raise StoredMetadataError(f"{where}: commit metrics are not an object of plain values")
    return value


def read_metrics(text: str, where: str) -> tuple[dict[str, Any], str | None]:
    """Stored metrics as a version's reader takes them: ``(metrics, None)`` when
    :func:`parse_metrics` accepts ``text``, else ``({}, problem)``, the problem being
    its error's message (naming ``where``; logged as a warning). Never raises: a
    version's metrics never keep it, or its history, from being read."""
    try:
        return parse_metrics(text, where), None
    except StoredMetadataError as exc:
        log.warning("%s", exc)
        return {}, str(exc)
