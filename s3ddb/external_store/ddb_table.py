"""Creating and describing the DynamoDB table of the external manifest store.

:func:`create_table` makes the same table as the Terraform module
``infra/terraform/modules/s3ddb-table`` with its default variables: key schema
(``base_uri`` S HASH, ``version`` N RANGE), on-demand billing, point-in-time
recovery and deletion protection on, and the tag ``s3ddb:role =
external-manifest-store``. ``tests/stores/test_terraform.py`` checks that the two agree.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NoReturn

from s3ddb.errors import ExternalStoreError, ExternalStoreTableError, InvalidInputError
from s3ddb.external_store import ddb_contract as c
from s3ddb.io.aws import AwsConfig
from s3ddb.io.service_errors import Failure, classify, describe_error, error_code

__all__ = ["BILLING_MODES", "DEFAULT_TAGS", "create_table", "describe_table"]

BILLING_MODES = ("PAY_PER_REQUEST", "PROVISIONED")
#: Tags the Terraform module and create_table put on every table (user tags merge in).
DEFAULT_TAGS: dict[str, str] = {"s3ddb:role": "external-manifest-store"}


def create_table(
    table_name: str,
    aws: AwsConfig | None = None,
    *,
    billing_mode: str = "PAY_PER_REQUEST",
    read_capacity: int | None = None,
    write_capacity: int | None = None,
    point_in_time_recovery: bool = True,
    deletion_protection: bool = True,
    kms_key_arn: str | None = None,
    tags: Mapping[str, str] | None = None,
    wait: bool = True,
    timeout: float = 600.0,
) -> bool:
    """Create the external store's table, as the Terraform module does.

    Args:
        table_name: the table to create.
        aws: endpoint, region and credential overrides (default: the boto3 chain).
        billing_mode: ``PAY_PER_REQUEST`` (default) or ``PROVISIONED``.
        read_capacity, write_capacity: required with ``PROVISIONED``, refused otherwise.
        point_in_time_recovery: enable PITR (continuous backups). AWS only enables it
            on an ACTIVE table, so this waits for the table even when ``wait`` is False.
        deletion_protection: refuse DeleteTable until turned off.
        kms_key_arn: encrypt with this customer-managed KMS key instead of the
            AWS-owned key.
        tags: extra tags, merged over :data:`DEFAULT_TAGS`.
        wait: wait until the table is ACTIVE.
        timeout: seconds to wait for ACTIVE.

    Returns:
        True if the table was created; False if it already existed with the expected
        key schema (it is then left unchanged: billing, PITR and tags are not touched).

    Raises:
        InvalidInputError: inconsistent billing arguments.
        ExternalStoreTableError: the table exists with another key schema, or did not
            become ACTIVE within ``timeout``.
        CredentialsError: no credentials, or credentials refused.
        ExternalStoreError: any other DynamoDB failure.
    """
    request = _create_table_request(
        table_name,
        billing_mode,
        read_capacity,
        write_capacity,
        deletion_protection=deletion_protection,
        kms_key_arn=kms_key_arn,
        tags=tags,
    )
    aws = aws or AwsConfig()
    client = _client(aws, table_name)
    try:
        client.create_table(**request)
    except Exception as exc:
        if error_code(exc) != "ResourceInUseException":
            _raise_translated(exc, "CreateTable", table_name, aws)
        # Already there (or being created by someone else): fine if the schema is ours.
        _check_existing(table_name, aws, exc)
        if wait:
            _wait_active(client, table_name, aws, timeout)
        return False
    if wait or point_in_time_recovery:
        _wait_active(client, table_name, aws, timeout)
    if point_in_time_recovery:
        _enable_pitr(client, table_name, aws)
    return True


def _create_table_request(
    table_name: str,
    billing_mode: str,
    read_capacity: int | None,
    write_capacity: int | None,
    *,
    deletion_protection: bool,
    kms_key_arn: str | None,
    tags: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The CreateTable request for :func:`create_table`'s arguments.

    Raises:
        InvalidInputError: inconsistent billing arguments.
    """
    billing_mode = billing_mode.upper()
    if billing_mode not in BILLING_MODES:
        raise InvalidInputError(
            f"billing_mode must be one of {BILLING_MODES}, got {billing_mode!r}"
        )
    provisioned = billing_mode == "PROVISIONED"
    if provisioned and (not read_capacity or not write_capacity):
        raise InvalidInputError("PROVISIONED billing needs read_capacity and write_capacity >= 1")
    if not provisioned and (read_capacity or write_capacity):
        raise InvalidInputError("read_capacity/write_capacity only apply to PROVISIONED billing")
    request: dict[str, Any] = {
        "TableName": table_name,
        "KeySchema": c.KEY_SCHEMA,
        "AttributeDefinitions": c.ATTRIBUTE_DEFINITIONS,
        "BillingMode": billing_mode,
        "DeletionProtectionEnabled": deletion_protection,
        "Tags": [{"Key": k, "Value": v} for k, v in {**DEFAULT_TAGS, **(tags or {})}.items()],
    }
    if provisioned:
        request["ProvisionedThroughput"] = {
            "ReadCapacityUnits": int(read_capacity or 0),
            "WriteCapacityUnits": int(write_capacity or 0),
        }
    if kms_key_arn:
        request["SSESpecification"] = {
            "Enabled": True,
            "SSEType": "KMS",
            "KMSMasterKeyId": kms_key_arn,
        }
    return request


def _check_existing(table_name: str, aws: AwsConfig, in_use: BaseException) -> None:
    """A table CreateTable found in use must have the store's key schema.

    Raises:
        ExternalStoreTableError: it has another (chained to ``in_use``).
        CredentialsError, ExternalStoreError: as for :func:`describe_table`.
    """
    description = describe_table(table_name, aws)
    if not c.key_schema_matches(description):
        raise c.wrong_schema_error(
            table_name,
            aws.endpoint_in_effect("dynamodb"),
            _region(aws),
            c.key_schema_text(description),
        ) from in_use


def describe_table(table_name: str, aws: AwsConfig | None = None) -> dict[str, Any]:
    """DescribeTable's ``Table``, plus ``PointInTimeRecovery`` ("ENABLED"/"DISABLED"/None).

    Raises:
        ExternalStoreTableError: the table does not exist.
        CredentialsError, ExternalStoreError: as for :func:`create_table`.
    """
    aws = aws or AwsConfig()
    client = _client(aws, table_name)
    try:
        table = dict(client.describe_table(TableName=table_name)["Table"])
    except Exception as exc:
        _raise_translated(exc, "DescribeTable", table_name, aws)
    try:
        backups = client.describe_continuous_backups(TableName=table_name)
        pitr = backups["ContinuousBackupsDescription"]["PointInTimeRecoveryDescription"]
        table["PointInTimeRecovery"] = pitr.get("PointInTimeRecoveryStatus")
    except Exception as exc:
        # Some DynamoDB emulators lack continuous backups; the key schema still matters.
        if classify(exc) is None:
            raise
        table["PointInTimeRecovery"] = None
    return table


def _client(aws: AwsConfig, table_name: str) -> Any:
    try:
        return aws.client("dynamodb")
    except Exception as exc:
        _raise_translated(exc, "client setup", table_name, aws)


def _region(aws: AwsConfig) -> str:
    # AwsConfig.client falls back to us-east-1 when no region is configured anywhere.
    return aws.region_or_default("dynamodb") or "us-east-1"


def _raise_translated(exc: BaseException, operation: str, table: str, aws: AwsConfig) -> NoReturn:
    """Raise the s3ddb error for botocore's ``exc``; re-raise anything else unchanged."""
    failure = classify(exc)
    if failure is None:
        raise exc
    endpoint = aws.endpoint_in_effect("dynamodb")
    raise c.translate(exc, failure, operation, table, endpoint, _region(aws)) from exc


def _wait_active(client: Any, table_name: str, aws: AwsConfig, timeout: float) -> None:
    """Poll DescribeTable until ACTIVE (backoff 0.1 s doubling to 2 s)."""
    deadline = time.monotonic() + timeout
    delay = 0.1
    status = "?"
    while True:
        try:
            status = client.describe_table(TableName=table_name)["Table"].get(
                "TableStatus", "ACTIVE"
            )
        except Exception as exc:
            # Right after CreateTable, DescribeTable may briefly not find the table.
            if error_code(exc) != "ResourceNotFoundException":
                _raise_translated(exc, "DescribeTable", table_name, aws)
        if status == "ACTIVE":
            return
        if time.monotonic() >= deadline:
            raise ExternalStoreTableError(
                f"{c.where(table_name, aws.endpoint_in_effect('dynamodb'), _region(aws))} is still "
                f"{status} after {timeout:.0f}s"
            )
        time.sleep(delay)
        delay = min(2.0, delay * 2)


def _enable_pitr(client: Any, table_name: str, aws: AwsConfig) -> None:
    """Enable point-in-time recovery, retrying while AWS still sets up backups."""
    for attempt in range(10):
        try:
            client.update_continuous_backups(
                TableName=table_name,
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
            )
            return
        except Exception as exc:
            # A table that just became ACTIVE may not accept it for a few seconds.
            if error_code(exc) == "ContinuousBackupsUnavailableException" and attempt < 9:
                time.sleep(min(2.0, 0.2 * 2**attempt))
                continue
            failure = classify(exc)
            if failure in (None, Failure.CREDENTIALS):
                _raise_translated(exc, "UpdateContinuousBackups", table_name, aws)
            raise ExternalStoreError(
                f"table {table_name!r} was created, but enabling point-in-time recovery "
                f"failed: {describe_error(exc)}. Enable it with: aws dynamodb "
                f"update-continuous-backups --table-name {table_name} "
                "--point-in-time-recovery-specification PointInTimeRecoveryEnabled=true"
            ) from exc
