"""DynamoDB table contract, error classification and error messages.

Shared by :mod:`s3ddb.external_store.dynamodb` (the store) and
:mod:`s3ddb.external_store.ddb_table` (``create_table``). botocore is imported lazily:
this module is imported by the store module, which local datasets may import without
boto3 installed.
"""

from __future__ import annotations

import enum
import shlex
from typing import Any

from s3ddb.errors import CredentialsError, ExternalStoreError, ExternalStoreTableError

# --- the table contract (docs/terraform.md, infra/terraform/modules/s3ddb-table) --------

HASH_KEY = "base_uri"
RANGE_KEY = "version"
KEY_SCHEMA: list[dict[str, str]] = [
    {"AttributeName": HASH_KEY, "KeyType": "HASH"},
    {"AttributeName": RANGE_KEY, "KeyType": "RANGE"},
]
ATTRIBUTE_DEFINITIONS: list[dict[str, str]] = [
    {"AttributeName": HASH_KEY, "AttributeType": "S"},
    {"AttributeName": RANGE_KEY, "AttributeType": "N"},
]
#: (attribute, type, key type) of the expected key schema, for comparisons and messages.
EXPECTED_KEYS: tuple[tuple[str, str, str], ...] = (
    (HASH_KEY, "S", "HASH"),
    (RANGE_KEY, "N", "RANGE"),
)
TERRAFORM_MODULE = "infra/terraform/modules/s3ddb-table"


# --- classification of botocore failures ---------------------------------------------


class Failure(enum.Enum):
    """What a failed DynamoDB request means for retrying it."""

    CONDITION = "condition"  # ConditionalCheckFailedException: a decided "no"
    THROTTLED = "throttled"  # rejected before processing: retry, nothing applied
    NOT_SENT = "not_sent"  # no connection was made: retry, nothing applied
    MAYBE_APPLIED = "maybe_applied"  # 5xx, dropped connection, read timeout
    CREDENTIALS = "credentials"  # missing or refused credentials
    TABLE_MISSING = "table_missing"  # ResourceNotFoundException
    OTHER = "other"  # a client error that retrying will not fix


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
# AWS documents InternalServerError on a write as "may or may not have succeeded".
SERVER_CODES = frozenset(
    {"InternalServerError", "InternalFailure", "ServiceUnavailable", "ServiceUnavailableException"}
)
CREDENTIAL_CODES = frozenset(
    {
        "AccessDeniedException",
        "AccessDenied",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "IncompleteSignatureException",
        "MissingAuthenticationTokenException",
        "InvalidClientTokenId",
        "ExpiredTokenException",
        "ExpiredToken",
        "AuthFailure",
    }
)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError, or "" for anything else."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def http_status(exc: BaseException) -> int:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


def classify(exc: BaseException) -> Failure | None:
    """How to treat ``exc`` raised by a botocore call; None if it is not botocore's."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        code = error_code(exc)
        if code == "ConditionalCheckFailedException":
            return Failure.CONDITION
        if code in THROTTLE_CODES:
            return Failure.THROTTLED
        # A 403 whose body the client could not parse (a DynamoDB-compatible endpoint
        # answering in XML) is still a refusal of these credentials.
        if code in CREDENTIAL_CODES or http_status(exc) == 403:
            return Failure.CREDENTIALS
        if code == "ResourceNotFoundException":
            return Failure.TABLE_MISSING
        if code in SERVER_CODES or http_status(exc) >= 500:
            return Failure.MAYBE_APPLIED
        return Failure.OTHER
    if isinstance(
        exc,
        (
            bx.NoCredentialsError,
            bx.PartialCredentialsError,
            bx.CredentialRetrievalError,
            bx.ProfileNotFound,
            bx.TokenRetrievalError,
            bx.SSOError,
            bx.NoAuthTokenError,
        ),
    ):
        return Failure.CREDENTIALS
    # These fail while connecting, before a byte of the request is sent.
    if isinstance(
        exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ProxyConnectionError)
    ):
        return Failure.NOT_SENT
    # Dropped connections, read timeouts, TLS failures, truncated responses: the server
    # may have applied the request.
    if isinstance(exc, (bx.HTTPClientError, bx.ConnectionError, bx.IncompleteReadError)):
        return Failure.MAYBE_APPLIED
    if isinstance(exc, bx.BotoCoreError):
        return Failure.OTHER
    return None


def describe_error(exc: BaseException) -> str:
    """``Code: message`` for a ClientError, ``Type: text`` otherwise."""
    code = error_code(exc)
    if code:
        message = getattr(exc, "response", {}).get("Error", {}).get("Message", "")
        return f"{code}: {message}" if message else code
    return f"{type(exc).__name__}: {exc}"


# --- messages ----------------------------------------------------------------------


def where(table: str, endpoint: str | None, region: str | None) -> str:
    """``table 'T' (endpoint E, region R)`` for error messages."""
    return (
        f"DynamoDB table {table!r} (endpoint {endpoint or 'default AWS'}, region {region or '?'})"
    )


def expected_schema_text() -> str:
    lines = [
        f"    {name:<9} {typ}  {kt:<5}  ({'partition' if kt == 'HASH' else 'sort'} key)"
        for name, typ, kt in EXPECTED_KEYS
    ]
    return "\n".join(lines)


def create_commands(table: str, endpoint: str | None, region: str | None) -> str:
    """The three ways to create the table, as text for error messages and docs."""
    q = shlex.quote
    target = ""
    if region:
        target += f" --region {q(region)}"
    if endpoint and "amazonaws.com" not in endpoint:
        target += f" --endpoint-url {q(endpoint)}"
    aws_cli = (
        f"aws dynamodb create-table --table-name {q(table)}"
        " --attribute-definitions AttributeName=base_uri,AttributeType=S"
        " AttributeName=version,AttributeType=N"
        " --key-schema AttributeName=base_uri,KeyType=HASH"
        " AttributeName=version,KeyType=RANGE"
        f" --billing-mode PAY_PER_REQUEST{target}"
    )
    return (
        "Create it with one of:\n"
        f"    s3ddb create-table {q(table)}{target}\n"
        f'    the Terraform module {TERRAFORM_MODULE} (table_name = "{table}"; '
        "see docs/terraform.md)\n"
        f"    {aws_cli}"
    )


def table_missing_error(
    table: str, endpoint: str | None, region: str | None, detail: str = ""
) -> ExternalStoreTableError:
    return ExternalStoreTableError(
        f"{where(table, endpoint, region)} does not exist{detail}. "
        "s3ddb never creates it implicitly. It needs the key schema:\n"
        f"{expected_schema_text()}\n{create_commands(table, endpoint, region)}"
    )


def wrong_schema_error(
    table: str, endpoint: str | None, region: str | None, actual: str
) -> ExternalStoreTableError:
    return ExternalStoreTableError(
        f"{where(table, endpoint, region)} has the key schema:\n{actual}\n"
        f"but s3ddb needs:\n{expected_schema_text()}\n"
        f"A table's key schema cannot be changed: use another table (e.g. "
        f"'{table}-s3ddb') and point ddbTableName at it. "
        f"{create_commands(table + '-s3ddb', endpoint, region)}"
    )


CREDENTIAL_SOURCES = (
    "storage_options for DynamoDB only (dynamodb_access_key_id / "
    "dynamodb_secret_access_key / dynamodb_session_token, dynamodb_profile), "
    "storage_options (aws_access_key_id / aws_secret_access_key / aws_session_token), "
    "the environment for DynamoDB only (AWS_ACCESS_KEY_ID_DYNAMODB / "
    "AWS_SECRET_ACCESS_KEY_DYNAMODB / AWS_SESSION_TOKEN_DYNAMODB, AWS_PROFILE_DYNAMODB), "
    "the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN), "
    "the profile AWS_PROFILE (or 'default') in the shared credentials file "
    "(AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials) and the config file "
    "(AWS_CONFIG_FILE, default ~/.aws/config: SSO, credential_process, assume-role), "
    "web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN), container credentials "
    "(ECS/EKS), and EC2 instance metadata (unless AWS_EC2_METADATA_DISABLED=true)"
)


def credentials_error(
    exc: BaseException, operation: str, table: str, endpoint: str | None, region: str | None
) -> CredentialsError:
    from botocore import exceptions as bx

    loc = where(table, endpoint, region)
    if isinstance(exc, bx.NoCredentialsError):
        return CredentialsError(
            f"no AWS credentials were found for {operation} on {loc}. "
            f"Consulted, in order: {CREDENTIAL_SOURCES}."
        )
    if isinstance(exc, bx.ClientError):
        return CredentialsError(
            f"AWS refused the credentials for {operation} on {loc}: {describe_error(exc)}. "
            f"Check which credentials are in use ({CREDENTIAL_SOURCES}) and that their IAM "
            f"policy grants dynamodb:{operation} on the table (the policy the Terraform "
            f"module {TERRAFORM_MODULE} outputs grants exactly what s3ddb needs)."
        )
    return CredentialsError(
        f"AWS credentials could not be loaded for {operation} on {loc}: "
        f"{describe_error(exc)}. Sources consulted: {CREDENTIAL_SOURCES}."
    )


def translate(
    exc: BaseException,
    failure: Failure,
    operation: str,
    table: str,
    endpoint: str | None,
    region: str | None,
) -> Exception:
    """The s3ddb error for a failure that is not retried."""
    if failure is Failure.CREDENTIALS:
        return credentials_error(exc, operation, table, endpoint, region)
    if failure is Failure.TABLE_MISSING:
        return table_missing_error(
            table, endpoint, region, f" ({operation}: {describe_error(exc)})"
        )
    return ExternalStoreError(
        f"{operation} on {where(table, endpoint, region)} failed: {describe_error(exc)}"
    )


def key_schema_text(description: dict[str, Any]) -> str:
    """A table description's key schema, formatted like :func:`expected_schema_text`."""
    types = {
        d.get("AttributeName"): d.get("AttributeType")
        for d in description.get("AttributeDefinitions", [])
    }
    lines = []
    for key in description.get("KeySchema", []):
        name, kt = key.get("AttributeName"), key.get("KeyType")
        lines.append(f"    {name!s:<9} {types.get(name, '?')!s}  {kt!s}")
    return "\n".join(lines) or "    (none)"


def key_schema_matches(description: dict[str, Any]) -> bool:
    types = {
        d.get("AttributeName"): d.get("AttributeType")
        for d in description.get("AttributeDefinitions", [])
    }
    actual = sorted(
        (k.get("AttributeName"), types.get(k.get("AttributeName")), k.get("KeyType"))
        for k in description.get("KeySchema", [])
    )
    return actual == sorted(EXPECTED_KEYS)
