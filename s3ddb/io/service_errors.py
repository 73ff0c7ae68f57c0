"""The one table of AWS service failures (botocore, and aiohttp under s3fs).

Every place that looks at a failed S3 or DynamoDB request classifies it here: the
ObjectStore (built-in exceptions, :class:`~s3ddb.errors.CredentialsError`,
:class:`~s3ddb.errors.EndpointUnreachableError`), the DynamoDB external store (whether
to retry) and ``s3ddb doctor`` (which setting to change).

Exceptions are recognised by their class name, never imported: botocore is imported by
no one here, so local datasets need no boto3, and aiohttp's connection errors (s3fs)
are named in the same table. None of the botocore classes named has subclasses, so a
name match is an ``isinstance`` match.
"""

from __future__ import annotations

import enum
import errno

from s3ddb.errors import (
    BucketNotFoundError,
    CredentialsError,
    EndpointUnreachableError,
    ObjectStoreError,
)

__all__ = [
    "ACCESS_DENIED_CODES",
    "CONDITION_FAILED_CODES",
    "CONNECTION_LOST_ERRORS",
    "MAYBE_APPLIED_ERRORS",
    "MISSING_CREDENTIAL_ERRORS",
    "NOT_SENT_ERRORS",
    "REFUSED_CREDENTIAL_CODES",
    "S3_CODE_TO_OSERROR",
    "SERVER_CODES",
    "THROTTLE_CODES",
    "UNKNOWN_OPERATION_CODES",
    "UNLOADABLE_CREDENTIAL_ERRORS",
    "Failure",
    "as_storage_error",
    "classify",
    "describe_error",
    "error_code",
    "http_status",
    "is_missing_credentials",
    "is_not_sent",
    "is_unreachable",
    "resent",
]

# --- exceptions raised before or instead of an answer -------------------------------

#: botocore's and aiohttp's names for "no connection was made": nothing was sent, so
#: nothing was applied.
NOT_SENT_ERRORS = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ProxyConnectionError",
        "ClientConnectorError",  # aiohttp (s3fs)
    }
)
#: The connection was dropped before an answer came: the server may have applied the
#: request, but for a diagnosis the endpoint is as unreachable as when nothing was sent.
CONNECTION_LOST_ERRORS = frozenset({"ConnectionClosedError"})
#: botocore base classes of failures after which the server may have applied the
#: request: dropped connections, read timeouts, TLS failures, truncated responses.
MAYBE_APPLIED_ERRORS = frozenset({"HTTPClientError", "ConnectionError", "IncompleteReadError"})
#: boto3 found no credentials, or only part of them.
MISSING_CREDENTIAL_ERRORS = frozenset({"NoCredentialsError", "PartialCredentialsError"})
#: A configured credential source (profile, SSO, credential_process, a role) failed.
UNLOADABLE_CREDENTIAL_ERRORS = frozenset(
    {
        "CredentialRetrievalError",
        "ProfileNotFound",
        "TokenRetrievalError",
        "SSOError",
        "NoAuthTokenError",
    }
)

# --- error codes of answered requests ----------------------------------------------

#: The service does not know the key, the signature or its scope does not match it, or
#: the token expired (S3-compatible stores answer these where AWS might say
#: AccessDenied).
REFUSED_CREDENTIAL_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "InvalidSignatureException",
        "IncompleteSignatureException",
        "AuthorizationHeaderMalformed",
        "MissingAuthenticationTokenException",
        "InvalidToken",
        "ExpiredToken",
        "ExpiredTokenException",
        "AuthFailure",
    }
)
#: The credentials are accepted but the principal may not make this call.
ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "Forbidden"})
#: Rejected before processing: retrying later applies nothing twice.
THROTTLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        # An item is part of an ongoing TransactWriteItems: rejected, retry later.
        "TransactionConflictException",
        # Control plane: too many concurrent table operations.
        "LimitExceededException",
    }
)
#: AWS documents InternalServerError on a write as "may or may not have succeeded".
SERVER_CODES = frozenset(
    {"InternalServerError", "InternalFailure", "ServiceUnavailable", "ServiceUnavailableException"}
)
#: A conditional write (If-None-Match on S3) found the object there.
CONDITION_FAILED_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})
#: The endpoint does not implement the call (e.g. DynamoDB emulators without
#: transactions).
UNKNOWN_OPERATION_CODES = frozenset({"UnknownOperationException", "UnknownOperation"})

#: S3 error codes as built-in exceptions (fsspec style).
S3_CODE_TO_OSERROR: dict[str, type[OSError]] = {
    "NoSuchKey": FileNotFoundError,
    "404": FileNotFoundError,
    "NotFound": FileNotFoundError,
    "NoSuchBucket": FileNotFoundError,
    **dict.fromkeys(CONDITION_FAILED_CODES, FileExistsError),
    "AccessDenied": PermissionError,
    "403": PermissionError,
}


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError, or "" for anything else."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def http_status(exc: BaseException) -> int:
    """The HTTP status of a botocore ClientError's response, or 0."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


def resent(exc: BaseException) -> bool | None:
    """Whether the call that failed with ``exc`` (or an error it was raised from) had
    sent its request more than once, as botocore records in the response of its last
    attempt; None when no response says (not botocore's error, or none answered)."""
    for err in _raised_from(exc):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            attempts = response.get("ResponseMetadata", {}).get("RetryAttempts")
            if isinstance(attempts, int):
                return attempts > 0
    return None


def _raised_from(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, newest first
    (at most 5: s3fs wraps botocore's errors once or twice)."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 5:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def describe_error(exc: BaseException) -> str:
    """``Code: message`` for a ClientError, ``Type: text`` otherwise."""
    code = error_code(exc)
    if code:
        message = getattr(exc, "response", {}).get("Error", {}).get("Message", "")
        return f"{code}: {message}" if message else code
    return f"{type(exc).__name__}: {exc}"


def _names(exc: BaseException) -> set[str]:
    """The class names of ``exc``'s type and its bases."""
    return {cls.__name__ for cls in type(exc).__mro__}


def is_not_sent(exc: BaseException) -> bool:
    """No connection was made for the request, so it was not applied."""
    return type(exc).__name__ in NOT_SENT_ERRORS


def is_unreachable(exc: BaseException) -> bool:
    """The endpoint could not be reached: nothing was sent, or the connection was
    dropped before an answer."""
    return is_not_sent(exc) or type(exc).__name__ in CONNECTION_LOST_ERRORS


def is_missing_credentials(exc: BaseException) -> bool:
    """boto3 found no credentials, or only part of them, for the call."""
    return type(exc).__name__ in MISSING_CREDENTIAL_ERRORS


class Failure(enum.Enum):
    """What a failed request means for retrying it."""

    CONDITION = "condition"  # ConditionalCheckFailedException: a decided "no"
    THROTTLED = "throttled"  # rejected before processing: retry, nothing applied
    NOT_SENT = "not_sent"  # no connection was made: retry, nothing applied
    MAYBE_APPLIED = "maybe_applied"  # 5xx, dropped connection, read timeout
    CREDENTIALS = "credentials"  # missing or refused credentials
    TABLE_MISSING = "table_missing"  # ResourceNotFoundException
    OTHER = "other"  # a client error that retrying will not fix


def classify(exc: BaseException) -> Failure | None:
    """How to treat ``exc`` raised by a botocore call; None if it is not botocore's."""
    names = _names(exc)
    if "ClientError" in names:
        code = error_code(exc)
        if code == "ConditionalCheckFailedException":
            return Failure.CONDITION
        if code in THROTTLE_CODES:
            return Failure.THROTTLED
        # A 403 whose body the client could not parse (a DynamoDB-compatible endpoint
        # answering in XML) is still a refusal of these credentials.
        if (
            code in REFUSED_CREDENTIAL_CODES
            or code in ACCESS_DENIED_CODES
            or http_status(exc) == 403
        ):
            return Failure.CREDENTIALS
        if code == "ResourceNotFoundException":
            return Failure.TABLE_MISSING
        if code in SERVER_CODES or http_status(exc) >= 500:
            return Failure.MAYBE_APPLIED
        return Failure.OTHER
    if "BotoCoreError" not in names:
        return None
    if names & (MISSING_CREDENTIAL_ERRORS | UNLOADABLE_CREDENTIAL_ERRORS):
        return Failure.CREDENTIALS
    # These fail while connecting, before a byte of the request is sent.
    if is_not_sent(exc):
        return Failure.NOT_SENT
    if names & MAYBE_APPLIED_ERRORS:
        return Failure.MAYBE_APPLIED
    return Failure.OTHER


def as_storage_error(exc: BaseException, where: str) -> BaseException:
    """The exception an object store raises for ``exc``, a failure of an S3 or
    fsspec call about ``where``: a built-in one (FileNotFoundError, FileExistsError,
    PermissionError), :class:`~s3ddb.errors.BucketNotFoundError` (a
    FileNotFoundError), :class:`~s3ddb.errors.CredentialsError`,
    :class:`~s3ddb.errors.EndpointUnreachableError`, :class:`~s3ddb.errors.
    ObjectStoreError` for any other answer or failure of the service, or ``exc``
    itself (not a service's failure). Looks at ``exc`` and the exceptions it was
    raised from or while handling (s3fs wraps botocore's), up to the first answer of
    the store."""
    chain = _raised_from(exc)
    for err in chain:
        if is_not_sent(err):
            return EndpointUnreachableError(f"cannot connect to S3 for {where}: {err}")
        if is_missing_credentials(err):
            return CredentialsError(
                f"no AWS credentials found for {where}: set AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or storage_options "
                "aws_access_key_id/aws_secret_access_key (for S3 only: s3_access_key_id/"
                "s3_secret_access_key, AWS_ACCESS_KEY_ID_S3/AWS_SECRET_ACCESS_KEY_S3)"
            )
        if type(err).__name__ in UNLOADABLE_CREDENTIAL_ERRORS:
            return CredentialsError(
                f"AWS credentials could not be loaded for {where}: {describe_error(err)}"
            )
        code = error_code(err)
        if code:
            if code in REFUSED_CREDENTIAL_CODES:
                return CredentialsError(
                    f"the object store refused the credentials for {where} ({code}): check "
                    "s3_access_key_id/s3_secret_access_key (or aws_access_key_id/"
                    "aws_secret_access_key, AWS_ACCESS_KEY_ID_S3...); docs/deployments.md"
                )
            if code == "NoSuchBucket":
                bucket = where.split("/", 1)[0]
                return BucketNotFoundError(
                    f"S3 bucket {bucket!r} does not exist (NoSuchBucket for {where}): "
                    "check the bucket name and the endpoint, or create the bucket"
                )
            mapped = S3_CODE_TO_OSERROR.get(code)
            if mapped is FileExistsError:
                return FileExistsError(errno.EEXIST, "object exists", where)
            if mapped is not None:
                return mapped(f"{code}: {where}")
            # This answer of the store decides: an error further down the chain is an
            # older one this request was made while handling (a 412 whose read-back
            # was throttled is a failed read, not a taken name).
            break
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(errno.ENOENT, "no such object", where)
    if isinstance(exc, OSError) and "PreconditionFailed" in str(exc):
        return FileExistsError(errno.EEXIST, "object exists", where)
    for err in chain:
        if classify(err) is not None:  # an answer of the store (or botocore's failure)
            return ObjectStoreError(
                f"object store request for {where} failed: {describe_error(err)}"
            )
    return exc
