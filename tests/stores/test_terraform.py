"""The Terraform module (infra/terraform) against a local AWS endpoint.

Checks that the module and its example are formatted and valid, that applying them
against :class:`s3ddb.testing.LocalAWS` makes the same table as
:func:`s3ddb.external_store.create_table` (key schema, attribute definitions, billing,
point-in-time recovery, deletion protection, tags), that the store accepts the table,
and that the IAM policy grants what s3ddb needs.

Works offline: providers come from a local plugin directory (``/opt/tf-plugins``, or
``S3DDB_TF_PLUGIN_DIR``). Everything happens in a temporary copy of infra/terraform;
no state is ever written into the repository.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from s3ddb.external_store import DynamoDBManifestStore, ManifestRow, create_table, describe_table
from s3ddb.io.aws import AwsConfig
from s3ddb.testing import LocalAWS

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra" / "terraform"
PLUGIN_DIR = Path(os.environ.get("S3DDB_TF_PLUGIN_DIR", "/opt/tf-plugins"))
TERRAFORM = shutil.which("terraform")

pytestmark = [
    pytest.mark.terraform,
    pytest.mark.skipif(TERRAFORM is None, reason="terraform is not on PATH"),
    pytest.mark.skipif(
        not PLUGIN_DIR.is_dir(),
        reason=f"no offline provider directory at {PLUGIN_DIR} (set S3DDB_TF_PLUGIN_DIR)",
    ),
]

S3DDB_DYNAMODB_ACTIONS = {
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:UpdateItem",
    "dynamodb:Query",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
}
S3DDB_OBJECT_ACTIONS = {
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
}


#: The AWS Glue database the example creates (its variable glue_database).
GLUE_DATABASE = "lake_sales"


def provider_block(endpoint: str) -> str:
    """An AWS provider aimed at the local endpoint (test roots only, never the module)."""
    return f"""
provider "aws" {{
  region                      = "us-east-1"
  access_key                  = "testing"
  secret_key                  = "testing"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true

  endpoints {{
    dynamodb = "{endpoint}"
    iam      = "{endpoint}"
    sts      = "{endpoint}"
    glue     = "{endpoint}"
  }}
}}
"""


class Terraform:
    """Runs terraform in a directory with an isolated, offline configuration."""

    def __init__(self, workdir: Path, home: Path) -> None:
        self.workdir = workdir
        cli_config = home / "terraformrc"
        cli_config.write_text("")  # no user CLI config, no "missing config" warning
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_"))} | {
            "TF_CLI_CONFIG_FILE": str(cli_config),
            "TF_IN_AUTOMATION": "1",
            "TF_INPUT": "0",
            "CHECKPOINT_DISABLE": "1",
            "NO_COLOR": "1",
            # Each command starts the AWS provider two to five times, and each start
            # builds its schema of every AWS resource (~2.5 s of CPU, much of it the Go
            # garbage collector): collecting less often cuts a third of that, for
            # ~150 MB more memory while a provider runs.
            "GOGC": "400",
        }

    def run(self, *args: str, cwd: Path | None = None, check: bool = True) -> str:
        assert TERRAFORM is not None
        proc = subprocess.run(
            [TERRAFORM, *args],
            cwd=cwd or self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"terraform {' '.join(args)} failed ({proc.returncode}):\n"
                f"{proc.stdout}\n{proc.stderr}"
            )
        return proc.stdout + proc.stderr

    def init(self, cwd: Path | None = None) -> None:
        self.run("init", "-input=false", "-no-color", f"-plugin-dir={PLUGIN_DIR}", cwd=cwd)

    def outputs(self) -> dict[str, Any]:
        raw = json.loads(self.run("output", "-json", "-no-color"))
        return {k: v["value"] for k, v in raw.items()}


@pytest.fixture(scope="module")
def tf_aws() -> Iterator[LocalAWS]:
    with LocalAWS() as server:
        yield server


@pytest.fixture
def infra_copy(tmp_path: Path) -> Path:
    """A copy of infra/terraform without any local state or provider caches."""
    return _copy_infra(tmp_path / "terraform")


def _copy_infra(dest: Path) -> Path:
    """infra/terraform copied to ``dest``, without local state or provider caches."""
    shutil.copytree(
        INFRA,
        dest,
        ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", ".terraform.lock.hcl"),
    )
    return dest


@pytest.fixture
def aws(tf_aws: LocalAWS) -> AwsConfig:
    return AwsConfig.from_storage_options(tf_aws.storage_options())


@dataclass(frozen=True)
class AppliedExample:
    """examples/basic applied once on the module's endpoint (three tests read it): its
    copy of infra/terraform, Terraform's home, the table name, the outputs, and how
    often the injected loss of a CreatePolicy response struck and CreatePolicy was sent."""

    infra: Path
    home: Path
    name: str
    out: dict[str, Any]
    lost: int
    policy_creates: int


@pytest.fixture(scope="module")
def applied_example(tf_aws: LocalAWS, tmp_path_factory: pytest.TempPathFactory) -> AppliedExample:
    """The example applied while the endpoint drops the response of the first
    CreatePolicy after applying it: the apply must converge anyway (by the import that
    apply_creating_table does only when the endpoint saw the resend). One apply serves
    the example's, the lost response's and the enforced policies' tests."""
    tmp = tmp_path_factory.mktemp("example")
    infra = _copy_infra(tmp / "terraform")
    before = tf_aws.count("iam", "CreatePolicy")
    lost = tf_aws.inject_fault("iam", "CreatePolicy", "apply_then_drop")
    try:
        name, out = apply_example(infra, tmp, tf_aws)
    finally:
        tf_aws.clear_faults()
    return AppliedExample(
        infra, tmp, name, out, lost.triggered, tf_aws.count("iam", "CreatePolicy") - before
    )


def table_summary(name: str, aws: AwsConfig, tf_aws: LocalAWS) -> dict[str, Any]:
    """What must agree between the module and create_table."""
    table = describe_table(name, aws)
    tags = tf_aws.boto3_client("dynamodb").list_tags_of_resource(ResourceArn=table["TableArn"])
    return {
        "KeySchema": table["KeySchema"],
        "AttributeDefinitions": sorted(
            table["AttributeDefinitions"], key=lambda d: d["AttributeName"]
        ),
        "BillingMode": (table.get("BillingModeSummary") or {}).get("BillingMode", "PROVISIONED"),
        "Capacity": (
            table["ProvisionedThroughput"]["ReadCapacityUnits"],
            table["ProvisionedThroughput"]["WriteCapacityUnits"],
        ),
        "PointInTimeRecovery": table["PointInTimeRecovery"],
        "DeletionProtectionEnabled": table.get("DeletionProtectionEnabled", False),
        "s3ddb:role": {t["Key"]: t["Value"] for t in tags["Tags"]}.get("s3ddb:role"),
    }


def statements(policy_json: str) -> list[dict[str, Any]]:
    def as_set(value: Any) -> set[str]:
        return {value} if isinstance(value, str) else set(value)

    out = []
    for st in json.loads(policy_json)["Statement"]:
        out.append({**st, "Action": as_set(st["Action"]), "Resource": as_set(st["Resource"])})
    return out


#: Creates the provider's AWS SDK may send twice when a response is lost: the service
#: and operation, the error the resend meets (naming what exists), and its import id.
RESENT_CREATES = (
    ("dynamodb", "CreateTable", r"Table already exists: ([\w.-]+)", "{name}"),
    (
        "iam",
        "CreatePolicy",
        r"A policy called ([\w+=,.@-]+) already exists",
        "arn:aws:iam::{account}:policy/{name}",
    ),
)


def apply_creating_table(
    tf: Terraform, server: LocalAWS, name: str, address: str, *var_args: str
) -> str:
    """``terraform apply`` of a root that creates the DynamoDB table ``name`` at
    ``address`` (and maybe its IAM policies).

    One outcome is resolved rather than failed: the provider's AWS SDK resends a
    create whose response it lost (a connection cut on a busy machine), and the resend
    finds what the first attempt made ("Table already exists", "A policy called ...
    already exists"). Every Terraform user can meet that at-least-once create; the
    answer is to import it, and the test does exactly that, only when the endpoint's
    own log shows the resend, into the address Terraform's error names: with an
    ``import`` block in the root, which the next apply carries out (one command, so one
    round of provider starts, fewer than ``terraform import`` and then ``apply``).
    Any other failure fails the test, with the endpoint's requests in the message.
    Returns the output of the apply that succeeded.
    """
    apply = ("apply", "-auto-approve", "-input=false", "-no-color", *var_args)
    for _ in range(len(RESENT_CREATES) + 2):
        sent_before = {op: server.count(svc, op) for svc, op, _, _ in RESENT_CREATES}
        try:
            return tf.run(*apply)
        except AssertionError as exc:
            imports = _resent_creates(server, sent_before, str(exc))
            if not imports:
                requests = [r for r in server.requests if r.service in ("dynamodb", "iam")]
                raise AssertionError(f"{exc}\nRequests seen: {requests}") from None
        for found_address, import_id in imports:
            if found_address is None and import_id == name:
                found_address = address  # the table, whose address the caller knows
            assert found_address is not None, (import_id, imports)
            with (tf.workdir / "resent_imports.tf").open("a") as blocks:
                quoted = json.dumps(import_id)  # a JSON string is an HCL string
                blocks.write(f"import {{\n  to = {found_address}\n  id = {quoted}\n}}\n")
    raise AssertionError(f"apply of {name} still meets resent creates after imports")


def _resent_creates(
    server: LocalAWS, sent_before: dict[str, int], error: str
) -> list[tuple[str | None, str]]:
    """(Terraform address or None, import id) of each create the error says already
    existed and the endpoint saw sent at least twice; empty if any error is another."""
    out: list[tuple[str | None, str]] = []
    # Terraform prints each error as a block: "Error: ..." then "with <address>,".
    blocks = re.split(r"(?m)^\s*(?:\u2502\s*)?Error: ", error)[1:]
    for block in blocks:
        for service, operation, pattern, import_id in RESENT_CREATES:
            match = re.search(pattern, block)
            if match and server.count(service, operation) - sent_before[operation] >= 2:
                where = re.search(r"with ([\w.\[\]\"-]+),", block)
                out.append((
                    where.group(1) if where else None,
                    import_id.format(name=match.group(1), account=server.account_id),
                ))  # fmt: skip
                break
        else:
            return []
    return out


def apply_example(infra_copy: Path, tmp_path: Path, tf_aws: LocalAWS) -> tuple[str, dict[str, Any]]:
    """Apply examples/basic (bucket lake, prefix warehouse/sales) on ``tf_aws``: (table
    name, outputs)."""
    example = infra_copy / "examples" / "basic"
    # Terraform merges *_override.tf into the example's provider block: the example
    # itself stays exactly what users copy.
    (example / "local_override.tf").write_text(provider_block(tf_aws.endpoint_url))
    name = f"tf-{uuid.uuid4().hex[:10]}"
    tf = Terraform(example, tmp_path)
    tf.init()
    apply_creating_table(
        tf, tf_aws, name, "module.s3ddb_table.aws_dynamodb_table.this",
        f"-var=table_name={name}", "-var=bucket=lake", "-var=prefix=warehouse/sales",
        f"-var=glue_database={GLUE_DATABASE}",
    )  # fmt: skip
    return name, tf.outputs()


def test_module_and_example_are_formatted_and_valid(infra_copy: Path, tmp_path: Path) -> None:
    tf = Terraform(infra_copy, tmp_path)
    tf.run("fmt", "-check", "-recursive", "-diff", "-no-color")
    for root in (infra_copy / "modules" / "s3ddb-table", infra_copy / "examples" / "basic"):
        tf.init(cwd=root)
        assert "configuration is valid" in tf.run("validate", "-no-color", cwd=root)


def test_example_apply_matches_create_table(
    applied_example: AppliedExample, tf_aws: LocalAWS, aws: AwsConfig
) -> None:
    name, out = applied_example.name, applied_example.out
    assert out["table_name"] == name
    assert out["table_arn"].endswith(f":table/{name}")
    assert out["dataset_uri_example"] == (
        f"s3+ddb://lake/warehouse/sales/my-dataset?ddbTableName={name}"
    )

    reference = f"ref-{uuid.uuid4().hex[:10]}"
    assert create_table(reference, aws) is True
    assert table_summary(name, aws, tf_aws) == table_summary(reference, aws, tf_aws)
    assert table_summary(name, aws, tf_aws)["DeletionProtectionEnabled"] is True
    assert table_summary(name, aws, tf_aws)["PointInTimeRecovery"] == "ENABLED"
    # create_table on the Terraform-made table recognises it as ours.
    assert create_table(name, aws) is False

    store = DynamoDBManifestStore(name, aws)
    store.validate()
    row = ManifestRow("s3://lake/warehouse/sales/ds", 1, "_versions/1.manifest-abc", 10)
    store.put_if_not_exists(row)
    assert store.get_latest(row.base_uri) == row

    # The IAM policy: exactly s3ddb's DynamoDB actions on this table, objects under the
    # prefix, listing limited to the prefix.
    policy = statements(out["iam_policy_json"])
    by_sid = {st["Sid"]: st for st in policy}
    assert by_sid["S3ddbManifestStore"]["Action"] == S3DDB_DYNAMODB_ACTIONS
    assert by_sid["S3ddbManifestStore"]["Resource"] == {out["table_arn"]}
    assert by_sid["S3ddbObjects"]["Action"] == S3DDB_OBJECT_ACTIONS
    assert by_sid["S3ddbObjects"]["Resource"] == {"arn:aws:s3:::lake/warehouse/sales/*"}
    listing = by_sid["S3ddbList0"]
    assert listing["Action"] == {"s3:ListBucket"}
    assert listing["Resource"] == {"arn:aws:s3:::lake"}
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": ["warehouse/sales", "warehouse/sales/*"]}
    }
    assert all(st["Effect"] == "Allow" for st in policy)
    # Glue: the database is created, and the tables in it only (with the catalog and
    # the database, which Glue authorizes a table action on) may be read, moved and
    # created; readers may read them.
    assert out["glue_database"] == GLUE_DATABASE
    tf_aws.boto3_client("glue").get_database(Name=GLUE_DATABASE)
    glue_arn = f"arn:aws:glue:us-east-1:{tf_aws.account_id}"
    glue_resources = {
        f"{glue_arn}:catalog",
        f"{glue_arn}:database/{GLUE_DATABASE}",
        f"{glue_arn}:table/{GLUE_DATABASE}/*",
    }
    assert by_sid["S3ddbGlueTables"]["Action"] == {
        "glue:GetTable", "glue:UpdateTable", "glue:CreateTable",
    }  # fmt: skip
    assert by_sid["S3ddbGlueTables"]["Resource"] == glue_resources
    reading = {st["Sid"]: st for st in statements(out["read_only_iam_policy_json"])}
    assert reading["S3ddbGlueTablesRead"]["Action"] == {"glue:GetTable"}
    assert reading["S3ddbGlueTablesRead"]["Resource"] == glue_resources
    iam = tf_aws.boto3_client("iam")
    created = iam.get_policy(PolicyArn=out["iam_policy_arn"])["Policy"]
    assert created["PolicyName"] == f"{name}-s3ddb"
    document = iam.get_policy_version(
        PolicyArn=out["iam_policy_arn"], VersionId=created["DefaultVersionId"]
    )["PolicyVersion"]["Document"]
    if isinstance(document, str):  # URL-encoded JSON on some endpoints
        from urllib.parse import unquote

        document = json.loads(unquote(document))
    assert document == json.loads(out["iam_policy_json"])


PROVISIONED_ROOT = """
variable "table_name" {{ type = string }}
variable "read_capacity" {{
  type    = number
  default = 5
}}

module "table" {{
  source = "{module}"

  table_name             = var.table_name
  billing_mode           = "PROVISIONED"
  read_capacity          = var.read_capacity
  write_capacity         = 3
  point_in_time_recovery = false
  deletion_protection    = false
  create_iam_policy      = false
  s3_locations = [
    {{ bucket = "lake", prefix = "a/" }},
    {{ bucket = "lake", prefix = "b" }},
    {{ bucket = "scratch" }},
  ]
  tags = {{ team = "data" }}
}}

output "table_name" {{ value = module.table.table_name }}
output "iam_policy_arn" {{ value = module.table.iam_policy_arn }}
output "iam_policy_json" {{ value = module.table.iam_policy_json }}
"""


def provisioned_root(infra_copy: Path, tmp_path: Path, tf_aws: LocalAWS) -> tuple[Terraform, Path]:
    """A root module of ``PROVISIONED_ROOT`` aimed at ``tf_aws``, initialized: its
    Terraform runner and folder."""
    root = tmp_path / "root"
    root.mkdir()
    module = infra_copy / "modules" / "s3ddb-table"
    (root / "main.tf").write_text(
        PROVISIONED_ROOT.format(module=module.as_posix()) + provider_block(tf_aws.endpoint_url)
    )
    tf = Terraform(root, tmp_path)
    tf.init()
    return tf, root


def test_a_lost_policy_create_response_ends_in_an_imported_policy(
    applied_example: AppliedExample, tf_aws: LocalAWS
) -> None:
    """The provider's SDK resends a CreatePolicy whose response was lost and meets
    "already exists"; importing the policy into the address Terraform's error names
    converges: the next plan has nothing to do, and the policy is the module's."""
    assert applied_example.lost == 1
    assert applied_example.policy_creates >= 3  # resent once, and the other policy
    name, out = applied_example.name, applied_example.out
    tf = Terraform(applied_example.infra / "examples" / "basic", applied_example.home)
    plan = tf.run(
        "plan", "-detailed-exitcode", "-no-color", f"-var=table_name={name}",
        "-var=bucket=lake", "-var=prefix=warehouse/sales", f"-var=glue_database={GLUE_DATABASE}",
    )  # fmt: skip
    assert "No changes." in plan
    iam = tf_aws.boto3_client("iam")
    created = iam.get_policy(PolicyArn=out["iam_policy_arn"])["Policy"]
    assert created["PolicyName"] == f"{name}-s3ddb", created


def test_provisioned_variant_matches_create_table_after_a_lost_create_response(
    infra_copy: Path, tmp_path: Path, tf_aws: LocalAWS, aws: AwsConfig
) -> None:
    tf, root = provisioned_root(infra_copy, tmp_path, tf_aws)
    name = f"tfp-{uuid.uuid4().hex[:10]}"

    # Provisioned billing without capacity is refused at plan time, before any change.
    (root / "bad.tfvars").write_text("read_capacity = null\n")
    failed = tf.run("plan", "-no-color", f"-var=table_name={name}", "-var-file=bad.tfvars",
                    check=False)  # fmt: skip
    assert "needs read_capacity and write_capacity" in failed

    # The provider's SDK resends a CreateTable whose response was lost; the resend finds
    # the table. Importing it into the module's address converges: the apply that
    # imports it (reading the table from the endpoint) has nothing else to do, and the
    # table is the one the module describes.
    lost = tf_aws.inject_fault("dynamodb", "CreateTable", "apply_then_drop")
    try:
        applied = apply_creating_table(
            tf, tf_aws, name, "module.table.aws_dynamodb_table.this", f"-var=table_name={name}"
        )
    finally:
        tf_aws.clear_faults()
    assert lost.triggered == 1
    assert "Resources: 1 imported, 0 added, 0 changed, 0 destroyed." in applied, applied
    out = tf.outputs()
    assert out.get("iam_policy_arn") is None  # create_iam_policy = false (null: not output)

    reference = f"refp-{uuid.uuid4().hex[:10]}"
    create_table(
        reference,
        aws,
        billing_mode="PROVISIONED",
        read_capacity=5,
        write_capacity=3,
        point_in_time_recovery=False,
        deletion_protection=False,
    )
    summary = table_summary(name, aws, tf_aws)
    assert summary == table_summary(reference, aws, tf_aws)
    assert summary["BillingMode"] == "PROVISIONED" and summary["Capacity"] == (5, 3)
    DynamoDBManifestStore(name, aws).validate()

    by_sid = {st["Sid"]: st for st in statements(out["iam_policy_json"])}
    assert by_sid["S3ddbObjects"]["Resource"] == {
        "arn:aws:s3:::lake/a/*",
        "arn:aws:s3:::lake/b/*",
        "arn:aws:s3:::scratch/*",
    }
    lake, scratch = by_sid["S3ddbList0"], by_sid["S3ddbList1"]
    assert lake["Resource"] == {"arn:aws:s3:::lake"}
    assert lake["Condition"] == {"StringLike": {"s3:prefix": ["a", "a/*", "b", "b/*"]}}
    assert scratch["Resource"] == {"arn:aws:s3:::scratch"} and "Condition" not in scratch


# --- least privilege, enforced ----------------------------------------------------------

# moto enforces IAM after INITIAL_NO_AUTH_ACTION_COUNT unauthenticated requests; the set-up
# below makes exactly this many: bucket, table, 2 users, 2 inline policies, 2 access keys.
_SETUP_REQUESTS = 9


def _enforced(policy_json: str, table_arn: str) -> str:
    """The module's policy as moto can enforce it: moto checks DynamoDB actions but
    not DynamoDB resource ARNs (it authorizes them against "*"), so the table ARN
    becomes "*" there; S3 statements stay exactly as the module wrote them. And moto
    authorizes a TransactWriteItems as the action "dynamodb:TransactWriteItems", which
    AWS does not have: AWS authorizes each item's own action (PutItem, and
    ConditionCheckItem for a ConditionCheck, both in the module's policy). A statement
    granting PutItem and ConditionCheckItem gets moto's name for them too. moto checks
    Glue actions, not their resources either: the Glue statements name "*" there."""
    policy = json.loads(policy_json)
    for st in policy["Statement"]:
        resources = [st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]
        if table_arn in resources or ":glue:" in str(resources):
            st["Resource"] = "*"
        actions = [st["Action"]] if isinstance(st["Action"], str) else list(st["Action"])
        if {"dynamodb:PutItem", "dynamodb:ConditionCheckItem"} <= set(actions):
            st["Action"] = [*actions, "dynamodb:TransactWriteItems"]
    return json.dumps(policy)


def test_module_policies_hold_on_an_endpoint_that_enforces_iam(
    applied_example: AppliedExample, monkeypatch: pytest.MonkeyPatch
) -> None:
    import botocore.config
    import pyarrow as pa

    import s3ddb
    from s3ddb.testing.process import serve_in_subprocess

    name, out = applied_example.name, applied_example.out
    no_retries = botocore.config.Config(retries={"max_attempts": 1})
    enforcing = serve_in_subprocess(
        conditional_writes=False, env={"INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_REQUESTS)}
    )
    with enforcing as server:
        admin = {
            "endpoint_url": server.endpoint_url, "region_name": "us-east-1",
            "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
            "config": no_retries,
        }  # fmt: skip
        import boto3

        boto3.client("s3", **admin).create_bucket(Bucket="lake")
        boto3.client("glue", **admin).create_database(DatabaseInput={"Name": GLUE_DATABASE})
        table_arn = boto3.client("dynamodb", **admin).create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "base_uri", "KeyType": "HASH"},
                       {"AttributeName": "version", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "base_uri", "AttributeType": "S"},
                                  {"AttributeName": "version", "AttributeType": "N"}],
            BillingMode="PAY_PER_REQUEST",
        )["TableDescription"]["TableArn"]  # fmt: skip
        iam = boto3.client("iam", **admin)
        keys = {}
        policies = (("writer", "iam_policy_json"), ("reader", "read_only_iam_policy_json"))
        for user, output in policies:
            iam.create_user(UserName=user)
            policy = out[output].replace(out["table_arn"], table_arn)
            iam.put_user_policy(
                UserName=user, PolicyName="s3ddb", PolicyDocument=_enforced(policy, table_arn)
            )
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = {
                "endpoint_url": server.endpoint_url, "region": "us-east-1",
                "aws_access_key_id": key["AccessKeyId"],
                "aws_secret_access_key": key["SecretAccessKey"],
            }  # fmt: skip

        inside = f"s3+ddb://lake/warehouse/sales/ds?ddbTableName={name}"
        outside = f"s3+ddb://lake/elsewhere/ds?ddbTableName={name}"
        rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
        writer, reader = keys["writer"], keys["reader"]

        # The enforcement itself: a principal without keys of this endpoint is refused.
        with pytest.raises(PermissionError):
            unknown = dict(writer, aws_access_key_id="AKIAUNKNOWN")
            s3ddb.write_dataset(rows, inside, storage_options=unknown)

        # The writer, with only the module's writer policy, commits and reads.
        s3ddb.write_dataset(rows, inside, mode="append", storage_options=writer)
        s3ddb.write_dataset(rows, inside, mode="append", storage_options=writer)
        assert s3ddb.dataset(inside, storage_options=writer).count_rows() == 6

        # The read-only principal reads and cannot commit.
        ds = s3ddb.dataset(inside, storage_options=reader)
        assert (ds.version, ds.count_rows()) == (2, 6)
        with pytest.raises(PermissionError):
            s3ddb.write_dataset(rows, inside, mode="append", storage_options=reader)
        assert s3ddb.dataset(inside, storage_options=writer).version == 2

        # Neither touches another prefix.
        with pytest.raises(PermissionError):
            s3ddb.write_dataset(rows, outside, mode="append", storage_options=writer)
        with pytest.raises((PermissionError, s3ddb.DatasetNotFoundError)):
            s3ddb.dataset(outside, storage_options=reader).to_table()

        # A version left staged: the reader may not finish it, and reads it as staged.
        monkeypatch.setenv("S3DDB_FAILPOINTS", "commit.after_external_put=raise")
        s3ddb.write_dataset(rows, inside, mode="append", storage_options=writer)
        monkeypatch.delenv("S3DDB_FAILPOINTS")
        staged = s3ddb.dataset(inside, storage_options=reader)
        assert (staged.version, staged.count_rows()) == (3, 9)
        assert s3ddb.dataset(inside, storage_options=writer).version == 3  # finalizes it
        from s3ddb.commit import finalizer

        finalizer.drain()

        # Glue: with the writer policy's Glue actions the writer registers the dataset's
        # table and its commits move it. A commit whose Glue calls are refused (signed
        # here with the reader's keys, which may only GetTable) still commits, and
        # `catalog sync` with the writer's keys catches up.
        from s3ddb.cli.main import main

        flags = [f"--storage-option={k}={v}" for k, v in writer.items()]
        s3ddb.dataset(inside, storage_options=writer).enable_open_formats(["iceberg"])
        register = ["catalog", "register", inside, "--glue", f"{GLUE_DATABASE}.sales"]
        assert main([*register, *flags]) == 0
        refused = dict(
            writer,
            glue_access_key_id=reader["aws_access_key_id"],
            glue_secret_access_key=reader["aws_secret_access_key"],
        )
        s3ddb.write_dataset(rows, inside, mode="append", storage_options=refused)
        finalizer.drain()
        newest = s3ddb.dataset(inside, storage_options=writer).version
        glue_reader = boto3.client(
            "glue", endpoint_url=server.endpoint_url, region_name="us-east-1", config=no_retries,
            aws_access_key_id=reader["aws_access_key_id"],
            aws_secret_access_key=reader["aws_secret_access_key"],
        )  # fmt: skip

        def glue_version() -> int:
            found = glue_reader.get_table(DatabaseName=GLUE_DATABASE, Name="sales")["Table"]
            return int(found["Parameters"]["s3ddb.version"])

        assert glue_version() == newest - 1
        assert main(["catalog", "sync", inside, *flags]) == 0
        assert glue_version() == newest
        finalizer.drain()  # nothing of this process may outlive the endpoint
