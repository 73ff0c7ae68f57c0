"""Naming of the requests a local AWS endpoint receives: which service, which operation.

Pure functions over a WSGI environ (and the already-read request body), so they need
neither moto nor a running server. Names follow the AWS API reference (``PutItem``,
``GetObject``, ``ListObjectsV2``...), so tests can assert round trips in the words the
boto3 documentation uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

# SigV4 "Credential=<key>/<date>/<region>/<service>/aws4_request" in the Authorization
# header, or the X-Amz-Credential query parameter of a presigned URL.
_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/,\s]+/\d{8}/[^/]+/([^/]+)/aws4_request")
_QUERY_SCOPE = re.compile(r"^[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request$")

# Bucket sub-resources (query keys) and their names in operation names, where the plain
# CamelCase of the key would not be the AWS name.
_BUCKET_SUBRESOURCES: dict[str, str] = {
    "acl": "Acl",
    "accelerate": "AccelerateConfiguration",
    "analytics": "AnalyticsConfiguration",
    "cors": "Cors",
    "encryption": "Encryption",
    "intelligent-tiering": "IntelligentTieringConfiguration",
    "inventory": "InventoryConfiguration",
    "lifecycle": "LifecycleConfiguration",
    "location": "Location",
    "logging": "Logging",
    "metrics": "MetricsConfiguration",
    "notification": "NotificationConfiguration",
    "object-lock": "ObjectLockConfiguration",
    "ownershipControls": "OwnershipControls",
    "policy": "Policy",
    "policyStatus": "PolicyStatus",
    "publicAccessBlock": "PublicAccessBlock",
    "replication": "Replication",
    "requestPayment": "RequestPayment",
    "tagging": "Tagging",
    "versioning": "Versioning",
    "website": "Website",
}

# Object sub-resources: query key -> suffix after Get/Put/Delete + "Object".
_OBJECT_SUBRESOURCES: dict[str, str] = {
    "acl": "Acl",
    "attributes": "Attributes",
    "legal-hold": "LegalHold",
    "retention": "Retention",
    "tagging": "Tagging",
    "torrent": "Torrent",
}


@dataclass(frozen=True)
class RequestRecord:
    """One HTTP request served by :class:`~s3ddb.testing.LocalAWS`.

    Attributes:
        service: signing name of the service, lower case: ``"s3"``, ``"dynamodb"``,
            ``"sts"``...; ``"moto-api"`` for moto's own control endpoints.
        operation: the AWS operation name (``"PutItem"``, ``"GetObject"``,
            ``"CopyObject"``...), or ``"<METHOD> <path>"`` when it cannot be told.
        method: the HTTP method.
        path: the request path, percent-decoded (for S3 ``/<bucket>/<key>``).
        status: the HTTP status sent to the client; ``0`` when the connection was
            closed without a response (the ``*drop`` faults).
        fault: the injected fault kind that shaped this request, or ``None``.
        applied: whether moto saw (and so possibly applied) the request. ``False`` only
            for faults that answer without applying.
        access_key_id: the access key id the request was signed with (from the SigV4
            credential scope), or ``None`` when unsigned. Never the secret.
        region: the region of the signature's credential scope, or ``None``.
        response_bytes: bytes of the response body sent (what a client read: a
            GetObject's object or range); ``0`` when none was sent.
    """

    service: str
    operation: str
    method: str
    path: str
    status: int
    fault: str | None = None
    applied: bool = True
    access_key_id: str | None = None
    region: str | None = None
    response_bytes: int = 0


def _header(environ: Mapping[str, Any], name: str) -> str:
    value = environ.get("HTTP_" + name.upper().replace("-", "_"), "")
    return value if isinstance(value, str) else ""


def request_path(environ: Mapping[str, Any]) -> str:
    """The request path as text (werkzeug hands over latin-1 "WSGI strings")."""
    path = environ.get("PATH_INFO", "") or ""
    if isinstance(path, bytes):
        return path.decode("utf-8", "replace")
    try:
        # PEP 3333: PATH_INFO carries the raw bytes as latin-1; S3 keys are UTF-8.
        return str(path).encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return str(path)


# The whole scope: access key id, date, region, service.
_FULL_SCOPE = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/[^/]+/aws4_request")


def signing_identity(environ: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(access key id, region) of a SigV4-signed request (header or presigned query),
    or ``(None, None)`` when it is not signed that way."""
    match = _FULL_SCOPE.search(_header(environ, "Authorization"))
    if match:
        return match.group(1), match.group(2)
    query = parse_qs(environ.get("QUERY_STRING", "") or "", keep_blank_values=True)
    for credential in query.get("X-Amz-Credential", []):
        parts = credential.split("/")
        if len(parts) == 5:
            return parts[0], parts[2]
    return None, None


def detect_service(environ: Mapping[str, Any]) -> str:
    """The service a request is addressed to, as moto's dispatcher would route it.

    Order: moto's control API path; the SigV4 credential scope (header, then presigned
    query); the ``X-Amz-Target`` prefix; otherwise ``"s3"`` (unsigned requests are S3,
    moto's default too).
    """
    path = request_path(environ)
    if path.startswith("/moto-api"):
        return "moto-api"
    match = _CREDENTIAL_SCOPE.search(_header(environ, "Authorization"))
    if match:
        return match.group(1).lower()
    query = parse_qs(environ.get("QUERY_STRING", "") or "", keep_blank_values=True)
    for credential in query.get("X-Amz-Credential", []):
        match = _QUERY_SCOPE.match(credential)
        if match:
            return match.group(1).lower()
    target = _header(environ, "X-Amz-Target")
    if target:
        prefix = target.split(".", 1)[0]
        return prefix.split("_", 1)[0].lower()
    return "s3"


def s3_operation(method: str, path: str, query: Mapping[str, list[str]], copy: bool) -> str:
    """The AWS name of a path-style S3 request (``copy``: it has ``x-amz-copy-source``)."""
    bucket, _, key = path.lstrip("/").partition("/")
    if not bucket:
        return "ListBuckets" if method == "GET" else f"{method} /"
    if not key:
        if method == "HEAD":
            return "HeadBucket"
        if method == "POST":
            return "DeleteObjects" if "delete" in query else "PostObject"
        sub = next((k for k in query if k in _BUCKET_SUBRESOURCES), None)
        if method == "GET":
            if query.get("list-type") == ["2"]:
                return "ListObjectsV2"
            if "versions" in query:
                return "ListObjectVersions"
            if "uploads" in query:
                return "ListMultipartUploads"
            return f"GetBucket{_BUCKET_SUBRESOURCES[sub]}" if sub else "ListObjects"
        if method == "PUT":
            return f"PutBucket{_BUCKET_SUBRESOURCES[sub]}" if sub else "CreateBucket"
        if method == "DELETE":
            return f"DeleteBucket{_BUCKET_SUBRESOURCES[sub]}" if sub else "DeleteBucket"
        return f"{method} {path}"
    sub = next((k for k in query if k in _OBJECT_SUBRESOURCES), None)
    if method == "HEAD":
        return "HeadObject"
    if method == "GET":
        if "uploadId" in query:
            return "ListParts"
        return f"GetObject{_OBJECT_SUBRESOURCES[sub]}" if sub else "GetObject"
    if method == "PUT":
        if "uploadId" in query and "partNumber" in query:
            return "UploadPartCopy" if copy else "UploadPart"
        if sub:
            return f"PutObject{_OBJECT_SUBRESOURCES[sub]}"
        return "CopyObject" if copy else "PutObject"
    if method == "DELETE":
        if "uploadId" in query:
            return "AbortMultipartUpload"
        return f"DeleteObject{_OBJECT_SUBRESOURCES[sub]}" if sub else "DeleteObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        if "restore" in query:
            return "RestoreObject"
        if "select" in query:
            return "SelectObjectContent"
        return "PostObject"
    return f"{method} {path}"


def detect_operation(environ: Mapping[str, Any], service: str, body: bytes = b"") -> str:
    """The AWS operation name of a request to ``service``.

    JSON-protocol services (DynamoDB...) name it in ``X-Amz-Target``; S3 is told by
    method, path, query and the copy-source header; query-protocol services (STS...)
    by the ``Action`` parameter. Anything else is ``"<METHOD> <path>"``.
    """
    method = str(environ.get("REQUEST_METHOD", "GET")).upper()
    path = request_path(environ)
    query = parse_qs(environ.get("QUERY_STRING", "") or "", keep_blank_values=True)
    if service == "moto-api":
        return path[len("/moto-api") :].strip("/") or "index"
    target = _header(environ, "X-Amz-Target")
    if target:
        return target.rsplit(".", 1)[-1]
    if service == "s3":
        copy = bool(_header(environ, "X-Amz-Copy-Source"))
        return s3_operation(method, path, query, copy)
    actions = query.get("Action")
    if not actions and body and "form-urlencoded" in str(environ.get("CONTENT_TYPE", "")):
        actions = parse_qs(body.decode("utf-8", "replace")).get("Action")
    if actions:
        return actions[0]
    return f"{method} {path}"


__all__ = [
    "RequestRecord",
    "detect_operation",
    "detect_service",
    "request_path",
    "s3_operation",
    "signing_identity",
]
