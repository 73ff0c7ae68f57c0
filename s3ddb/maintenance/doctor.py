"""``s3ddb doctor``: is this URI's configuration able to commit, and how?

:func:`diagnose` checks, with each service's own settings (see :mod:`s3ddb.io.aws`):

* S3: the endpoint answers and accepts the credentials (``ListObjectsV2`` under the
  dataset's prefix); the principal may do what commits need (a scratch object under
  ``<prefix>/_s3ddb_doctor/`` is put, read, copied and deleted); and whether the store
  honours ``If-None-Match: *`` (a scratch object written twice with it: the second
  write must be refused).
* DynamoDB (``s3+ddb://`` only): the table exists with the key schema s3ddb needs
  (``DescribeTable``), and the principal may make each call of the protocol on a
  scratch item (``PutItem``, ``GetItem``, ``Query``, ``UpdateItem``) whose partition
  key (``s3ddb-doctor://...``) no dataset can have; ``BatchWriteItem`` (cleanup, drop)
  is tried last and only reported when refused.

Scratch objects and items are deleted afterwards, also when a check fails. Nothing of a
dataset is read or changed. The report names the commit mechanism the URI uses and,
for each failed check, the exact setting to change.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from s3ddb.external_store import ddb_contract as ddb
from s3ddb.io import service_errors as errs
from s3ddb.io.aws import AwsConfig, ServiceSettings
from s3ddb.io.redact import redact_url
from s3ddb.io.uri import DatasetURI, parse_uri

__all__ = ["Check", "DoctorReport", "diagnose", "render"]

OK, FAIL, INFO = "ok", "fail", "info"


@dataclass(frozen=True)
class Check:
    """One check: ``status`` is "ok", "fail" or "info" (a fact, not a problem);
    ``fix`` names the setting to change when it failed; ``access`` marks a failure to
    reach a service, have it accept the credentials at all, or find the bucket or
    table the URI names (the CLI's exit status 2)."""

    name: str
    status: str
    detail: str
    fix: str | None = None
    access: bool = False


@dataclass(frozen=True)
class DoctorReport:
    """What :func:`diagnose` found.

    Attributes:
        uri: the URI as given.
        mechanism: how commits of this URI are decided.
        ok: every check passed: this configuration commits safely.
        verdict: one paragraph for people: the mechanism, and what to change if not ok.
        conditional_writes: whether the object store honours ``If-None-Match`` (None:
            not probed).
        services: per service, the endpoint, region and credentials in use, with where
            each came from (never a secret).
        checks: every check, in order.
    """

    uri: str
    mechanism: str
    ok: bool
    verdict: str
    conditional_writes: bool | None
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()

    @property
    def access_error(self) -> bool:
        """A service could not be reached or refused the credentials."""
        return any(c.access for c in self.checks if c.status == FAIL)

    @property
    def exit_status(self) -> int:
        """0: ok; 2: a service unreachable or credentials refused; 1: anything else."""
        return 0 if self.ok else 2 if self.access_error else 1

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["checks"] = [asdict(c) for c in self.checks]
        out["exit_status"] = self.exit_status
        return out


def diagnose(uri: str | DatasetURI, storage_options: dict[str, Any] | None = None) -> DoctorReport:
    """Check ``uri``'s configuration (see the module docstring).

    Raises:
        InvalidURIError: the URI cannot be parsed.
        InvalidInputError: an unknown or invalid storage option or environment setting.
    """
    parsed = uri if isinstance(uri, DatasetURI) else parse_uri(uri)
    original = parsed.original or str(uri)
    if parsed.storage_protocol != "s3":
        mechanism = (
            "an atomic create (hard link) on the local file system"
            if parsed.scheme == "file"
            else "a lock in this process (memory://)"
        )
        return DoctorReport(
            original, mechanism, True, f"OK: commits use {mechanism}; no service to check.", None
        )
    aws = AwsConfig.from_storage_options(storage_options)
    services = {"s3": _describe(aws.settings("s3"))}
    checks: list[Check] = []
    conditional = _check_s3(parsed, aws, checks)
    if parsed.uses_external_store:
        services["dynamodb"] = _describe(aws.settings("dynamodb"))
        _check_dynamodb(parsed, aws, checks)
    return _verdict(parsed, original, aws, services, checks, conditional)


_TRUTHY = ("1", "true", "yes", "on")


def _endpoint(s: ServiceSettings) -> str | None:
    """The endpoint as shown in the report: without user info or query values, which
    may hold a password (``http://user:secret@host``)."""
    return redact_url(s.endpoint) if s.endpoint else None


def _describe(s: ServiceSettings) -> dict[str, Any]:
    return {
        "endpoint": _endpoint(s) or "AWS (default for the region)",
        "endpoint_source": s.source("endpoint"),
        "region": s.region or "(boto3 default)",
        "region_source": s.source("region"),
        "credentials": s.credentials_text,
    }


# --- S3 ------------------------------------------------------------------------------


def _check_s3(uri: DatasetURI, aws: AwsConfig, checks: list[Check]) -> bool | None:
    """Append the S3 checks; returns the If-None-Match probe's answer (None: not run)."""
    s = aws.settings("s3")
    bucket, _, prefix = uri.path.partition("/")
    try:
        client = aws.client("s3", max_attempts=1)
        client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/", MaxKeys=1)
    except Exception as exc:
        checks.append(_s3_failure("s3.reachable", exc, s, bucket, prefix, "ListObjectsV2"))
        return None
    checks.append(Check("s3.reachable", OK, f"ListObjectsV2 on s3://{bucket}/{prefix}/ answered"))

    scratch = f"{prefix}/_s3ddb_doctor/{uuid.uuid4().hex}"
    keys = [scratch, scratch + ".copy", scratch + ".inm"]
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("PutObject", lambda: client.put_object(Bucket=bucket, Key=keys[0], Body=b"doctor")),
        ("GetObject", lambda: client.get_object(Bucket=bucket, Key=keys[0])["Body"].read()),
        (
            "CopyObject",
            lambda: client.copy_object(
                Bucket=bucket, Key=keys[1], CopySource={"Bucket": bucket, "Key": keys[0]}
            ),
        ),
        ("DeleteObject", lambda: client.delete_object(Bucket=bucket, Key=keys[1])),
    ]
    conditional: bool | None = None
    try:
        for operation, step in steps:
            try:
                step()
            except Exception as exc:
                checks.append(_s3_failure("s3.permissions", exc, s, bucket, prefix, operation))
                return None
        checks.append(
            Check(
                "s3.permissions",
                OK,
                "PutObject, GetObject, CopyObject and DeleteObject "
                f"on a scratch object under s3://{bucket}/{prefix}/_s3ddb_doctor/",
            )
        )
        conditional = _probe_if_none_match(client, bucket, keys[2], checks)
    finally:
        for key in keys:
            # Best effort: a refused delete was reported by the permission check.
            with contextlib.suppress(Exception):
                client.delete_object(Bucket=bucket, Key=key)
    return conditional


def _probe_if_none_match(client: Any, bucket: str, key: str, checks: list[Check]) -> bool | None:
    name = "s3.conditional_put"
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
        client.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    except Exception as exc:
        code, status = errs.error_code(exc), errs.http_status(exc)
        if status in (409, 412) or code in errs.CONDITION_FAILED_CODES:
            checks.append(
                Check(
                    name,
                    OK,
                    "the store honours If-None-Match: a second write of "
                    f"the scratch object was refused ({code or status})",
                )
            )
            return True
        checks.append(
            Check(
                name, INFO, f"the store rejects If-None-Match on PUT ({errs.describe_error(exc)})"
            )
        )
        return False
    checks.append(
        Check(
            name,
            INFO,
            "the store ignores If-None-Match: a second write of the "
            "scratch object with If-None-Match: * replaced the first",
        )
    )
    return False


def _give_credentials(name: str, text: str, service: str, option: str, env: str) -> Check:
    """The failed check of a service without credentials, naming the settings to give
    (storage options ``<option>_*``, environment ``AWS_*_<env>``)."""
    return Check(
        name,
        FAIL,
        text,
        f"give {service} credentials: storage options {option}_access_key_id + "
        f"{option}_secret_access_key (or {option}_profile), or AWS_ACCESS_KEY_ID_{env} + "
        f"AWS_SECRET_ACCESS_KEY_{env}",
        access=True,
    )


def _s3_failure(
    name: str, exc: BaseException, s: ServiceSettings, bucket: str, prefix: str, operation: str
) -> Check:
    code = errs.error_code(exc)
    text = f"{operation} on s3://{bucket}/{prefix}/: {errs.describe_error(exc)}"
    where = f"now {_endpoint(s) or 'AWS'} ({s.source('endpoint')})"
    if errs.is_unreachable(exc):
        return Check(
            name,
            FAIL,
            text,
            f"set the S3 endpoint: storage option s3_endpoint or AWS_ENDPOINT_URL_S3 ({where})",
            access=True,
        )
    if errs.is_missing_credentials(exc):
        return _give_credentials(name, text, "S3", "s3", "S3")
    if code in errs.REFUSED_CREDENTIAL_CODES:
        return Check(
            name,
            FAIL,
            text,
            f"the store refused {s.credentials_text}: set "
            "s3_access_key_id + s3_secret_access_key (or AWS_ACCESS_KEY_ID_S3 + "
            "AWS_SECRET_ACCESS_KEY_S3) to a key of this store",
            access=True,
        )
    if code in ("NoSuchBucket",):
        return Check(
            name,
            FAIL,
            text,
            f"create bucket {bucket!r} on {_endpoint(s) or 'AWS'}, or "
            "fix the URI's bucket or s3_endpoint",
            access=True,
        )
    if code in errs.ACCESS_DENIED_CODES or errs.http_status(exc) == 403:
        action = {"ListObjectsV2": "s3:ListBucket", "CopyObject": "s3:GetObject and s3:PutObject"}
        grant = action.get(operation, f"s3:{operation}")
        return Check(
            name,
            FAIL,
            text,
            f"grant {grant} on arn:aws:s3:::{bucket}/{prefix}/* to "
            f"{s.credentials_text} (docs/terraform.md: the module's policy)",
        )
    return Check(name, FAIL, text, None)


# --- DynamoDB ----------------------------------------------------------------------------


def _check_dynamodb(uri: DatasetURI, aws: AwsConfig, checks: list[Check]) -> None:
    """Append the DynamoDB checks: the table, then each call of the protocol on scratch
    items, then ``BatchWriteItem``; the scratch items are removed in any case."""
    s = aws.settings("dynamodb")
    table = str(uri.ddb_table)
    try:
        client = aws.client("dynamodb", max_attempts=1)
        description = client.describe_table(TableName=table)["Table"]
    except Exception as exc:
        checks.append(_ddb_failure("dynamodb.table", exc, s, table, "DescribeTable"))
        return
    checks.append(_table_schema_check(table, description))
    if checks[-1].status == FAIL:
        return

    key = {"base_uri": {"S": f"s3ddb-doctor://{uuid.uuid4().hex}"}, "version": {"N": "1"}}
    second = {**key, "version": {"N": "2"}}
    fenced = aws.dynamodb_transactions is None or aws.dynamodb_transactions.lower() in _TRUTHY
    removed = False
    try:
        permissions = _check_protocol_calls(
            _protocol_calls(client, table, key, second, fenced), s, table
        )
        checks.append(permissions)
        if permissions.status == OK:
            refused = _check_batch_delete(client, table, (key, second))
            if refused is None:
                removed = True
            else:
                checks.append(refused)
    finally:
        if not removed:
            # Best effort: the failure that matters is already reported.
            for scratch in (key, second):
                with contextlib.suppress(Exception):
                    client.delete_item(TableName=table, Key=scratch)


def _table_schema_check(table: str, description: dict[str, Any]) -> Check:
    """The ``dynamodb.table`` check of a table that exists: is its key schema s3ddb's?"""
    if not ddb.key_schema_matches(description):
        return Check(
            "dynamodb.table",
            FAIL,
            f"table {table!r} has the key schema:\n{ddb.key_schema_text(description)}\n"
            f"s3ddb needs:\n{ddb.expected_schema_text()}",
            f"point ddbTableName at a table with that key schema (a key schema cannot be "
            f"changed): s3ddb create-table {table}-s3ddb, then ?ddbTableName={table}-s3ddb",
            access=True,
        )
    return Check(
        "dynamodb.table",
        OK,
        f"table {table!r} exists with the key schema base_uri (S, HASH) + version (N, RANGE)",
    )


def _protocol_calls(
    client: Any,
    table: str,
    key: dict[str, Any],
    second: dict[str, Any],
    fenced: bool,
) -> list[tuple[str, Callable[[], Any]]]:
    """Each call a commit makes, as ``(operation, call)`` on the scratch items ``key``
    and ``second`` (version 1 and 2); with ``fenced``, a fenced claim's transaction."""
    calls: list[tuple[str, Callable[[], Any]]] = [
        (
            "PutItem",
            lambda: client.put_item(
                TableName=table,
                Item={**key, "path": {"S": "doctor"}},
                ConditionExpression="attribute_not_exists(base_uri)",
            ),
        ),
        ("GetItem", lambda: client.get_item(TableName=table, Key=key, ConsistentRead=True)),
        (
            "Query",
            lambda: client.query(
                TableName=table,
                KeyConditionExpression="base_uri = :b",
                ExpressionAttributeValues={":b": key["base_uri"]},
                ConsistentRead=True,
            ),
        ),
        (
            "UpdateItem",
            lambda: client.update_item(
                TableName=table,
                Key=key,
                UpdateExpression="SET #p = :p",
                ConditionExpression="attribute_exists(base_uri)",
                ExpressionAttributeNames={"#p": "path"},
                ExpressionAttributeValues={":p": {"S": "doctor-final"}},
            ),
        ),
    ]
    if fenced:
        # A fenced claim: the ConditionCheck of version 1 and the Put of version 2.
        calls.append(
            (
                "TransactWriteItems",
                lambda: client.transact_write_items(
                    TransactItems=[
                        {
                            "ConditionCheck": {
                                "TableName": table,
                                "Key": key,
                                "ConditionExpression": "attribute_exists(base_uri)",
                            }
                        },
                        {
                            "Put": {
                                "TableName": table,
                                "Item": {**second, "path": {"S": "doctor"}},
                                "ConditionExpression": "attribute_not_exists(base_uri)",
                            }
                        },
                    ]
                ),
            )
        )
    return calls


def _check_protocol_calls(
    calls: list[tuple[str, Callable[[], Any]]], s: ServiceSettings, table: str
) -> Check:
    """Make ``calls`` in order; the ``dynamodb.permissions`` check, or the failure of the
    first call refused (``dynamodb.transactions`` when the operation is unknown)."""
    for operation, call in calls:
        try:
            call()
        except Exception as exc:
            if errs.error_code(exc) in errs.UNKNOWN_OPERATION_CODES:
                return _no_transactions(exc, s, table)
            # DescribeTable accepted these credentials: a refusal now is about this one
            # action (moto, for one, answers it with a bare 403; a transaction's
            # ConditionCheck needs dynamodb:ConditionCheckItem).
            return _ddb_failure("dynamodb.permissions", exc, s, table, operation, accepted=True)
    return Check(
        "dynamodb.permissions",
        OK,
        "PutItem, GetItem, Query, UpdateItem and TransactWriteItems with a "
        "ConditionCheck (what commits need) on scratch items",
    )


def _check_batch_delete(client: Any, table: str, keys: tuple[dict[str, Any], ...]) -> Check | None:
    """Remove the scratch items ``keys`` with ``BatchWriteItem``; None when that worked,
    else the ``dynamodb.cleanup_permissions`` finding.

    Removing rows (cleanup of old versions, drop) uses BatchWriteItem; commits do not,
    so a principal without it is reported, not failed.
    """
    try:
        client.batch_write_item(RequestItems={table: [{"DeleteRequest": {"Key": k}} for k in keys]})
    except Exception as exc:
        return Check(
            "dynamodb.cleanup_permissions",
            INFO,
            f"BatchWriteItem was refused ({errs.describe_error(exc)}): commits work, "
            "but `cleanup` and `drop` cannot remove rows with these credentials",
            f"grant dynamodb:BatchWriteItem on table {table!r} to the principal that runs cleanup",
        )
    return None


def _no_transactions(exc: BaseException, s: ServiceSettings, table: str) -> Check:
    return Check(
        "dynamodb.transactions",
        FAIL,
        f"TransactWriteItems on {ddb.where(table, _endpoint(s), s.region)}: "
        f"{errs.describe_error(exc)}: this DynamoDB implementation has no transactions, "
        "which s3ddb's fenced claims use (a version is claimed only on top of its "
        "predecessor, so a writer of a dropped or re-created dataset is refused)",
        "set the storage option dynamodb_transactions=false to claim with one "
        "conditional PutItem, without that fence (docs/protocol.md)",
    )


def _ddb_failure(
    name: str,
    exc: BaseException,
    s: ServiceSettings,
    table: str,
    operation: str,
    *,
    accepted: bool = False,
) -> Check:
    failure = errs.classify(exc)
    text = f"{operation} on {ddb.where(table, _endpoint(s), s.region)}: {errs.describe_error(exc)}"
    code = errs.error_code(exc)
    if errs.is_unreachable(exc):
        return Check(
            name,
            FAIL,
            text,
            "set the DynamoDB endpoint: storage option "
            "dynamodb_endpoint or AWS_ENDPOINT_URL_DYNAMODB (now "
            f"{_endpoint(s) or 'AWS'}, {s.source('endpoint')}), and its region: "
            f"dynamodb_region or AWS_REGION_DYNAMODB (now {s.region}, "
            f"{s.source('region')})",
            access=True,
        )
    if errs.is_missing_credentials(exc):
        return _give_credentials(name, text, "DynamoDB", "dynamodb", "DYNAMODB")
    if failure is errs.Failure.TABLE_MISSING:
        return Check(
            name,
            FAIL,
            text,
            f"create the table: s3ddb create-table {table} (with "
            "the same --endpoint-url/--region), or fix ?ddbTableName= or "
            "dynamodb_region",
            access=True,
        )
    if code in errs.ACCESS_DENIED_CODES or (accepted and failure is errs.Failure.CREDENTIALS):
        return Check(
            name,
            FAIL,
            text,
            f"grant dynamodb:{operation} on table {table!r} to "
            f"{s.credentials_text} (the Terraform module's policy grants every call "
            "s3ddb makes; docs/terraform.md)",
        )
    if failure is errs.Failure.CREDENTIALS:
        return Check(
            name,
            FAIL,
            text,
            f"DynamoDB refused {s.credentials_text}: set "
            "dynamodb_access_key_id + dynamodb_secret_access_key (or "
            "AWS_ACCESS_KEY_ID_DYNAMODB + AWS_SECRET_ACCESS_KEY_DYNAMODB, or "
            f"dynamodb_profile / dynamodb_role_arn); if the key is right, grant it "
            f"dynamodb:{operation}",
            access=True,
        )
    return Check(name, FAIL, text, None)


# --- verdict ---------------------------------------------------------------------------


def _verdict(
    uri: DatasetURI,
    original: str,
    aws: AwsConfig,
    services: dict[str, dict[str, Any]],
    checks: list[Check],
    conditional: bool | None,
) -> DoctorReport:
    plain = uri.object_url
    external = f"s3+ddb://{uri.path}?ddbTableName=TABLE"
    probe = next((n for n, c in enumerate(checks) if c.name == "s3.conditional_put"), None)
    if uri.uses_external_store:
        mechanism = f"the DynamoDB table {uri.ddb_table!r} (s3+ddb://)"
        if probe is not None and conditional is False:
            old = checks[probe]
            checks[probe] = Check(
                old.name,
                INFO,
                old.detail + "; this is why the store "
                "needs s3+ddb:// (plain s3:// would let two writers "
                "overwrite a version)",
            )
    else:
        mechanism = "conditional PUT (If-None-Match: *) on the object store (s3://)"
        if probe is not None and conditional is False:
            old = checks[probe]
            checks[probe] = Check(
                old.name,
                FAIL,
                old.detail
                + (
                    ": every commit through s3:// would fail"
                    if "rejects" in old.detail
                    else ": through s3:// two writers could both commit the same version and "
                    "one commit would be silently lost"
                ),
                f"use the URI {external} (create the table with `s3ddb create-table "
                "TABLE`; set dynamodb_endpoint, dynamodb_region and dynamodb_* credentials "
                "if DynamoDB is elsewhere)",
            )
    failed = [c for c in checks if c.status == FAIL]
    ok = not failed
    if ok:
        verdict = f"OK: commits of {original} are decided by {mechanism}."
        if uri.uses_external_store and conditional:
            verdict += (
                f" This store also honours If-None-Match, so {plain} would commit "
                "safely without DynamoDB (docs/deployments.md: when plain s3:// is the better "
                "choice)."
            )
    else:
        first = failed[0]
        verdict = (
            f"NOT OK: {original} cannot commit safely: {first.name}: "
            f"{first.detail.splitlines()[0]}. Change: {first.fix or 'see the check'}."
        )
    return DoctorReport(original, mechanism, ok, verdict, conditional, services, tuple(checks))


def render(report: DoctorReport) -> str:
    """The report as text for a terminal."""
    lines = [f"s3ddb doctor {report.uri}"]
    for service, info in report.services.items():
        name = "S3" if service == "s3" else "DynamoDB"
        lines.append(
            f"  {name:<9} endpoint {info['endpoint']} ({info['endpoint_source']}); "
            f"region {info['region']} ({info['region_source']}); {info['credentials']}"
        )
    for check in report.checks:
        mark = {OK: "ok", FAIL: "FAIL", INFO: "info"}[check.status]
        detail = check.detail.replace("\n", "\n" + " " * 10)
        lines.append(f"  [{mark:<4}] {check.name}: {detail}")
        if check.fix:
            lines.append(f"          fix: {check.fix}")
    lines.append(f"mechanism: {report.mechanism}")
    lines.append(f"verdict: {report.verdict}")
    return "\n".join(lines)
