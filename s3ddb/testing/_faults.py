"""Faults a local AWS endpoint can inject into real HTTP exchanges.

A fault either answers in moto's place (the request is never applied) or lets moto
apply the request and then loses the response. The answers are the ones AWS sends, so
botocore's error parsing and retry logic run exactly as against AWS.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Literal, get_args

FaultKind = Literal[
    "throttle",
    "provisioned_throughput",
    "server_error",
    "expired_token",
    "drop",
    "apply_then_server_error",
    "apply_then_drop",
]
"""What a fault does.

- ``throttle``: not applied; DynamoDB ``ThrottlingException`` (HTTP 400), S3 ``503 SlowDown``.
- ``provisioned_throughput``: not applied; DynamoDB ``ProvisionedThroughputExceededException``.
- ``server_error``: not applied; HTTP 500 (``InternalServerError`` / S3 ``InternalError``).
- ``expired_token``: not applied; the request's credentials are refused as expired
  (HTTP 400, DynamoDB ``ExpiredTokenException``, S3 ``ExpiredToken``), as when a
  session token runs out mid-commit.
- ``drop``: not applied; the connection is closed without a response.
- ``apply_then_server_error``: applied, then moto's response is replaced by HTTP 500
  (the request took effect but the client is told it failed).
- ``apply_then_drop``: applied, then the connection is closed without a response
  (the request took effect and the client never learns the outcome).
"""

FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)

# Kinds whose request reaches moto.
APPLYING_KINDS = frozenset({"apply_then_server_error", "apply_then_drop"})
# Kinds that close the connection instead of answering.
DROPPING_KINDS = frozenset({"drop", "apply_then_drop"})

_DYNAMODB_ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"

Headers = list[tuple[str, str]]


@dataclass
class Fault:
    """An armed fault: affects the next ``times`` requests matching service/operation.

    Returned by :meth:`LocalAWS.inject_fault`; ``triggered`` counts the requests it has
    affected so far, so a test can check that the fault fired.

    Attributes:
        service: service name to match (``"s3"``, ``"dynamodb"``) or ``"*"``.
        operation: operation name to match (``"PutItem"``, ``"PutObject"``) or ``"*"``.
        kind: what happens to a matching request (see :data:`FaultKind`).
        times: how many matching requests to affect in total.
        triggered: how many it has affected so far.
        after: another fault; this one matches only once that one has fired.
        path: text the request path must contain (an S3 key...); "" matches any.
    """

    service: str
    operation: str
    kind: FaultKind
    times: int = 1
    triggered: int = 0
    after: Fault | None = None
    path: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def remaining(self) -> int:
        """Matching requests still to be affected."""
        return self.times - self.triggered

    def matches(self, service: str, operation: str, path: str = "") -> bool:
        """Whether a request to ``service``/``operation`` on ``path`` is one this
        fault targets (and the fault it waits for, if any, has fired)."""
        if self.after is not None and self.after.triggered == 0:
            return False
        return (
            self.service in ("*", service)
            and self.operation in ("*", operation)
            and self.path in path
        )

    def take(self) -> bool:
        """Consume one use; ``False`` if the fault is used up (thread-safe)."""
        with self._lock:
            if self.triggered >= self.times:
                return False
            self.triggered += 1
            return True


def validate_fault(service: str, kind: str, times: int) -> None:
    """Check the arguments of :meth:`LocalAWS.inject_fault`.

    Raises:
        ValueError: unknown kind, ``times < 1``, or ``provisioned_throughput`` for a
            service other than DynamoDB.
    """
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
    if times < 1:
        raise ValueError(f"times must be >= 1, got {times}")
    if kind == "provisioned_throughput" and service not in ("dynamodb", "*"):
        raise ValueError("provisioned_throughput is a DynamoDB error; use 'throttle' for S3")


def _json_error(status: int, code: str, message: str, prefixed: bool) -> tuple[int, Headers, bytes]:
    request_id = uuid.uuid4().hex.upper()
    body = json.dumps(
        {"__type": (_DYNAMODB_ERROR_PREFIX + code) if prefixed else code, "message": message}
    ).encode()
    headers = [
        ("Content-Type", "application/x-amz-json-1.0"),
        ("Content-Length", str(len(body))),
        ("x-amzn-RequestId", request_id),
    ]
    return status, headers, body


def _s3_error(status: int, code: str, message: str, method: str) -> tuple[int, Headers, bytes]:
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId></Error>"
    ).encode()
    if method == "HEAD":
        # A HEAD response has no body; botocore then names the error by status code.
        body = b""
    headers = [
        ("Content-Type", "application/xml"),
        ("Content-Length", str(len(body))),
        ("x-amz-request-id", request_id),
    ]
    return status, headers, body


def fault_response(kind: str, service: str, method: str) -> tuple[int, Headers, bytes]:
    """The status, headers and body AWS would send for ``kind`` on ``service``.

    Only for kinds that answer (not the ``*drop`` kinds). S3 answers in XML; every
    other service in the JSON protocol DynamoDB uses.

    Raises:
        ValueError: ``kind`` does not answer.
    """
    if kind in ("throttle", "provisioned_throughput"):
        if service == "s3":
            return _s3_error(503, "SlowDown", "Please reduce your request rate.", method)
        if kind == "provisioned_throughput":
            return _json_error(
                400,
                "ProvisionedThroughputExceededException",
                "The level of configured provisioned throughput for the table was exceeded.",
                prefixed=True,
            )
        return _json_error(
            400,
            "ThrottlingException",
            "Rate of requests exceeds the allowed throughput.",
            prefixed=service == "dynamodb",
        )
    if kind in ("server_error", "apply_then_server_error"):
        if service == "s3":
            return _s3_error(
                500, "InternalError", "We encountered an internal error. Please try again.", method
            )
        return _json_error(
            500, "InternalServerError", "Internal server error", prefixed=service == "dynamodb"
        )
    if kind == "expired_token":
        message = "The security token included in the request is expired"
        if service == "s3":
            return _s3_error(400, "ExpiredToken", message, method)
        return _json_error(400, "ExpiredTokenException", message, prefixed=service == "dynamodb")
    raise ValueError(f"fault kind {kind!r} sends no response")


__all__ = [
    "APPLYING_KINDS",
    "DROPPING_KINDS",
    "FAULT_KINDS",
    "Fault",
    "FaultKind",
    "fault_response",
    "validate_fault",
]
