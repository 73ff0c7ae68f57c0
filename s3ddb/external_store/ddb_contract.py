"""The DynamoDB table contract (key schema) and the error messages that name it.

Shared by :mod:`s3ddb.external_store.dynamodb` (the store),
:mod:`s3ddb.external_store.ddb_table` (``create_table``) and ``s3ddb doctor``. How a
failed request is classified is :mod:`s3ddb.io.service_errors`. botocore is imported
lazily: this module is imported by the store module, which local datasets may import
without boto3 installed.
"""

from __future__ import annotations

import shlex
from typing import Any

from s3ddb.errors import (
    CredentialsError,
    ExternalStoreError,
    ExternalStoreTableError,
    ExternalStoreUnreachableError,
)
from s3ddb.io.service_errors import Failure, describe_error

#: Environment variable that turns fenced claims off, for DynamoDB implementations
#: without TransactWriteItems (see :class:`~s3ddb.external_store.dynamodb.DynamoDBManifestStore`).
UNFENCED_ENV = "S3DDB_DYNAMODB_TRANSACTIONS"

__all__ = [
    "ATTRIBUTE_DEFINITIONS",
    "CREDENTIAL_SOURCES",
    "EXPECTED_KEYS",
    "HASH_KEY",
    "KEY_SCHEMA",
    "RANGE_KEY",
    "TERRAFORM_MODULE",
    "UNFENCED_ENV",
    "create_commands",
    "credentials_error",
    "expected_schema_text",
    "key_schema_matches",
    "key_schema_text",
    "table_missing_error",
    "translate",
    "where",
    "wrong_schema_error",
]

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
    if failure is Failure.NOT_SENT:
        return ExternalStoreUnreachableError(
            f"cannot connect to DynamoDB for {operation} on {where(table, endpoint, region)}: "
            f"{describe_error(exc)}"
        )
    if failure is Failure.TABLE_MISSING:
        return table_missing_error(
            table, endpoint, region, f" ({operation}: {describe_error(exc)})"
        )
    return ExternalStoreError(
        f"{operation} on {where(table, endpoint, region)} failed: {describe_error(exc)}"
    )


def _attribute_types(description: dict[str, Any]) -> dict[Any, Any]:
    """A table description's attribute types by attribute name."""
    return {
        d.get("AttributeName"): d.get("AttributeType")
        for d in description.get("AttributeDefinitions", [])
    }


def key_schema_text(description: dict[str, Any]) -> str:
    """A table description's key schema, formatted like :func:`expected_schema_text`."""
    types = _attribute_types(description)
    lines = []
    for key in description.get("KeySchema", []):
        name, kt = key.get("AttributeName"), key.get("KeyType")
        lines.append(f"    {name!s:<9} {types.get(name, '?')!s}  {kt!s}")
    return "\n".join(lines) or "    (none)"


def key_schema_matches(description: dict[str, Any]) -> bool:
    types = _attribute_types(description)
    actual = sorted(
        (k.get("AttributeName"), types.get(k.get("AttributeName")), k.get("KeyType"))
        for k in description.get("KeySchema", [])
    )
    return actual == sorted(EXPECTED_KEYS)
