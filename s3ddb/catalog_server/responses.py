"""The Iceberg REST specification's error model, and what each failure answers.

Every error the catalog sends is ``{"error": {"message", "type", "code"}}`` with
``code`` the HTTP status: a client's bad request, a missing token or a refused write
is a 4xx, a damaged registry entry or published file a 5xx whose message names the
file, and anything unexpected a 500 with an id the server's log has the traceback
under. No stack trace, request header or AWS credential is ever part of a response.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping

from starlette.responses import Response

from s3ddb.errors import (
    CredentialsError,
    DatasetNotFoundError,
    EndpointUnreachableError,
    ExternalStoreError,
    InvalidInputError,
    OpenFormatError,
    PathOutsideDatasetError,
    S3DDBError,
    StoredMetadataError,
)

__all__ = [
    "READ_ONLY_MESSAGE",
    "error_for_exception",
    "error_response",
]

log = logging.getLogger("s3ddb.catalog_server")

#: What a write (create, update, drop, commit, rename, register) is told.
READ_ONLY_MESSAGE = (
    "this catalog is read-only: s3ddb is the writer of these tables. Commit through "
    "s3ddb (Python, Spark or the s3ddb command line); every committed version appears "
    "here at once."
)

#: The longest message sent (a message built from stored text stays bounded).
_MAX_MESSAGE = 2000


def error_response(
    status: int,
    error_type: str,
    message: str,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The error model's response: ``{"error": {"message", "type", "code"}}``."""
    body = {"error": {"message": message[:_MAX_MESSAGE], "type": error_type, "code": status}}
    return Response(
        json.dumps(body),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )


def error_for_exception(exc: BaseException, what: str) -> Response:
    """The response to ``exc``, raised while serving ``what`` (``"table ns.t"``).

    s3ddb's typed errors keep their message (s3ddb's messages show no
    credentials): a dataset with nothing committed is a 404, a damaged registry
    entry or published state a 500 naming the file, an unreachable store a 503.
    Anything else is a 500 that says only an id; the traceback goes to the log
    under that id.
    """
    if isinstance(exc, DatasetNotFoundError):
        return error_response(
            404, "NoSuchTableException", f"{what}: its dataset has nothing committed"
        )
    if isinstance(exc, OpenFormatError):
        return error_response(404, "NoSuchTableException", f"{what}: {_text(exc)}")
    if isinstance(exc, (StoredMetadataError, PathOutsideDatasetError)):
        log.warning("%s: %s", what, _text(exc))
        return error_response(500, "ServerErrorException", f"{what}: {_text(exc)}")
    if isinstance(exc, (EndpointUnreachableError, ExternalStoreError, CredentialsError)):
        log.warning("%s: %s", what, _text(exc))
        return error_response(503, "ServiceUnavailableException", f"{what}: {_text(exc)}")
    if isinstance(exc, InvalidInputError):
        log.warning("%s: %s", what, _text(exc))
        return error_response(500, "ServerErrorException", f"{what}: {_text(exc)}")
    if isinstance(exc, S3DDBError):
        log.warning("%s: %s", what, _text(exc))
        return error_response(500, "ServerErrorException", f"{what}: {_text(exc)}")
    incident = uuid.uuid4().hex[:12]
    log.error("%s: unexpected error (incident %s)", what, incident, exc_info=exc)
    return error_response(
        500,
        "ServerErrorException",
        f"{what}: internal error (incident {incident}, in the catalog server's log)",
    )


def _text(exc: BaseException) -> str:
    """``exc``'s message on one line (s3ddb's messages show URLs without credentials)."""
    return " ".join(str(exc).split())
