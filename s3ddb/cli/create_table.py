"""``s3ddb create-table``: create the DynamoDB table of the external manifest store.

Makes the same table as the Terraform module ``infra/terraform/modules/s3ddb-table``
(see :func:`s3ddb.external_store.create_table`). Safe to re-run: an existing table
with the right key schema is reported and left alone.
"""

from __future__ import annotations

import argparse
from typing import Any

from s3ddb.cli.commands import _aws_options, storage_options
from s3ddb.errors import InvalidInputError

__all__ = [
    "register",
    "run",
]


def register(subparsers: Any) -> None:
    """Add the ``create-table`` verb to the ``s3ddb`` command."""
    parser = subparsers.add_parser(
        "create-table",
        help="create the DynamoDB table that coordinates s3+ddb:// commits",
        description="Create the DynamoDB table of the external manifest store (key schema: "
        "base_uri S HASH, version N RANGE), exactly as the Terraform module "
        "infra/terraform/modules/s3ddb-table does with its defaults. If the table "
        "already exists with that key schema it is left unchanged. AWS settings come "
        "from the standard chain (AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL...) unless "
        "given here.",
    )
    parser.add_argument("table", metavar="TABLE", help="the table name (ddbTableName=TABLE)")
    parser.add_argument(
        "--billing-mode",
        type=str.upper,
        choices=("PAY_PER_REQUEST", "PROVISIONED"),
        default="PAY_PER_REQUEST",
        help="on-demand (default) or provisioned capacity",
    )
    parser.add_argument("--read-capacity", type=int, help="RCUs (PROVISIONED only)")
    parser.add_argument("--write-capacity", type=int, help="WCUs (PROVISIONED only)")
    parser.add_argument(
        "--point-in-time-recovery",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="enable point-in-time recovery (default: on)",
    )
    parser.add_argument(
        "--deletion-protection",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="refuse DeleteTable until turned off (default: on)",
    )
    parser.add_argument("--kms-key-arn", help="encrypt with this customer-managed KMS key")
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="add a tag (repeatable)",
    )
    parser.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="do not wait for the table to become ACTIVE",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    # The same AWS options as the dataset verbs; this verb talks to DynamoDB only.
    _aws_options(parser, services=("dynamodb",))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Create the table described by ``args``; print what happened.

    Returns:
        0 when the table was created or already existed with the right key schema.

    Raises:
        InvalidInputError: a malformed ``--tag`` or ``--storage-option``, an unknown
            storage option, or inconsistent capacity options.
        ExternalStoreTableError: the table exists with another key schema.
        CredentialsError: no credentials, or credentials refused.
    """
    from s3ddb.external_store.ddb_table import create_table, describe_table
    from s3ddb.io.aws import AwsConfig

    tags: dict[str, str] = {}
    for item in args.tag:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"--tag expects KEY=VALUE, got {item!r}")
        tags[key] = value
    aws = AwsConfig.from_storage_options(storage_options(args))
    endpoint = aws.endpoint_in_effect("dynamodb") or "default AWS"
    where = f"(endpoint {endpoint}, region {_region(aws)})"
    created = create_table(
        args.table,
        aws,
        billing_mode=args.billing_mode,
        read_capacity=args.read_capacity,
        write_capacity=args.write_capacity,
        point_in_time_recovery=args.point_in_time_recovery,
        deletion_protection=args.deletion_protection,
        kms_key_arn=args.kms_key_arn,
        tags=tags,
        wait=args.wait,
    )
    if args.json:
        from s3ddb.cli.output import emit_json

        table = describe_table(args.table, aws)
        emit_json(
            {
                "table": args.table,
                "created": created,
                "status": table.get("TableStatus"),
                "arn": table.get("TableArn"),
                "key_schema": table.get("KeySchema"),
                "billing_mode": (table.get("BillingModeSummary") or {}).get(
                    "BillingMode", args.billing_mode
                ),
                "deletion_protection": table.get("DeletionProtectionEnabled"),
            }
        )
        return 0
    if not created:
        print(
            f"DynamoDB table {args.table!r} {where} already exists with the expected key "
            "schema (base_uri S HASH, version N RANGE); left unchanged."
        )
        return 0
    print(f"created DynamoDB table {args.table!r} {where}")
    if args.wait or args.point_in_time_recovery:
        table = describe_table(args.table, aws)
        billing = (table.get("BillingModeSummary") or {}).get("BillingMode", args.billing_mode)
        print(f"  status:                 {table.get('TableStatus')}")
        print(f"  arn:                    {table.get('TableArn')}")
        print("  key schema:             base_uri S HASH, version N RANGE")
        print(f"  billing mode:           {billing}")
        print(f"  point-in-time recovery: {table.get('PointInTimeRecovery') or 'unknown'}")
        print(f"  deletion protection:    {table.get('DeletionProtectionEnabled')}")
    print(f"use it with: s3+ddb://BUCKET/PREFIX?ddbTableName={args.table}")
    return 0


def _region(aws: Any) -> str:
    # AwsConfig.client falls back to us-east-1 when no region is configured anywhere.
    return str(aws.region_or_default("dynamodb") or "us-east-1")
