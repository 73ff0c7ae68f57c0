"""Per-service AWS settings: the one precedence order (storage option for the service,
shared storage option, environment for the service, boto3 chain), credentials resolved
as a unit, S3-only settings, bad values, and the boto3/s3fs clients built from them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3ddb.errors import InvalidInputError
from s3ddb.io import AwsConfig, ObjectStore
from s3ddb.testing import LocalAWS

_ENV = [
    f"AWS_{name}{suffix}"
    for name in (
        "REGION",
        "ACCESS_KEY_ID",
        "SECRET_ACCESS_KEY",
        "SESSION_TOKEN",
        "PROFILE",
        "ROLE_ARN",
        "ENDPOINT_URL",
    )
    for suffix in ("", "_S3", "_DYNAMODB")
] + ["AWS_DEFAULT_REGION", "AWS_S3_ADDRESSING_STYLE", "AWS_CA_BUNDLE_S3"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


# (storage options, environment, service) -> expected region and its source. Each row
# removes the winner of the row above, walking down the order.
REGION_CASES = [
    (
        {"dynamodb_region": "so-svc", "region": "so-shared"},
        {"AWS_REGION_DYNAMODB": "env-svc", "AWS_REGION": "env-shared"},
        "so-svc",
        "storage option dynamodb_region",
    ),
    (
        {"region": "so-shared"},
        {"AWS_REGION_DYNAMODB": "env-svc", "AWS_REGION": "env-shared"},
        "so-shared",
        "storage option region",
    ),
    (
        {},
        {"AWS_REGION_DYNAMODB": "env-svc", "AWS_REGION": "env-shared"},
        "env-svc",
        "environment AWS_REGION_DYNAMODB",
    ),
    (
        {},
        {"AWS_REGION": "env-shared", "AWS_REGION_S3": "other-service"},
        "env-shared",
        "environment AWS_REGION",
    ),
    ({}, {"AWS_DEFAULT_REGION": "env-default"}, "env-default", "environment AWS_DEFAULT_REGION"),
]


@pytest.mark.parametrize(("options", "env", "region", "source"), REGION_CASES)
def test_region_precedence(
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, str],
    env: dict[str, str],
    region: str,
    source: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = AwsConfig.from_storage_options(options).settings("dynamodb")
    assert (settings.region, settings.source("region")) == (region, source)
    # The other service never takes DynamoDB's own setting.
    s3 = AwsConfig.from_storage_options(options).settings("s3")
    assert s3.region != "so-svc" and s3.region != "env-svc"


def test_endpoint_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env-shared")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://env-s3")
    assert AwsConfig().settings("s3").endpoint == "http://env-s3"
    assert AwsConfig().settings("dynamodb").endpoint == "http://env-shared"
    shared = AwsConfig.from_storage_options({"endpoint_url": "http://so-shared"})
    assert shared.settings("s3").endpoint == "http://so-shared"
    both = AwsConfig.from_storage_options(
        {"endpoint_url": "http://so-shared", "dynamodb_endpoint": "http://so-ddb"}
    )
    assert both.settings("dynamodb").endpoint == "http://so-ddb"
    assert both.settings("s3").endpoint == "http://so-shared"
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert AwsConfig().settings("s3").endpoint is None


def test_credentials_come_as_a_unit_from_one_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID_S3", "ENVS3")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY_S3", "env-s3-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN_S3", "env-s3-token")
    shared = {"aws_access_key_id": "SHARED", "aws_secret_access_key": "shared-secret"}
    # A shared key in the storage options beats the S3 environment, token included.
    s3 = AwsConfig.from_storage_options(shared).settings("s3")
    assert (s3.access_key_id, s3.secret_access_key, s3.session_token) == (
        "SHARED",
        "shared-secret",
        None,
    )
    # Without it, the S3 environment's key, secret and token.
    s3 = AwsConfig().settings("s3")
    assert (s3.access_key_id, s3.session_token) == ("ENVS3", "env-s3-token")
    assert s3.source("credentials") == "environment AWS_ACCESS_KEY_ID_S3"
    # DynamoDB ignores S3's environment and falls to the chain.
    assert AwsConfig().settings("dynamodb").access_key_id is None
    # A profile for the service beats shared keys.
    ddb = AwsConfig.from_storage_options({**shared, "dynamodb_profile": "ddb"}).settings("dynamodb")
    assert (ddb.profile, ddb.access_key_id) == ("ddb", None)
    assert "ENVS3" not in repr(AwsConfig()) and "secret" not in repr(s3)


@pytest.mark.parametrize(
    ("options", "env", "match"),
    [
        ({"s3_addressing_style": "sideways"}, {}, "s3_addressing_style"),
        ({"s3_verify": "maybe"}, {}, "s3_verify"),
        ({"dynamodb_secret_access_key": "x"}, {}, "dynamodb_access_key_id"),
        ({}, {"AWS_ACCESS_KEY_ID_DYNAMODB": "K"}, "secret access key"),
        ({}, {"AWS_S3_ADDRESSING_STYLE": "diagonal"}, "AWS_S3_ADDRESSING_STYLE"),
        ({"dynamodb_regoin": "eu-west-1"}, {}, "unknown storage option 'dynamodb_regoin'"),
    ],
)
def test_bad_settings_are_typed_errors_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, str], env: dict[str, str], match: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(InvalidInputError, match=match):
        config = AwsConfig.from_storage_options(options)
        config.settings("dynamodb")
        config.settings("s3")


def test_delta_rs_spellings_are_storage_options_too() -> None:
    config = AwsConfig.from_storage_options(
        {
            "AWS_REGION_DYNAMODB": "eu-west-1",
            "aws_access_key_id_s3": "K",
            "aws_secret_access_key_s3": "S",
        }
    )
    assert config.settings("dynamodb").region == "eu-west-1"
    assert config.settings("s3").access_key_id == "K"


def test_s3_only_settings_reach_the_s3_clients(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not a real bundle; only its path is checked here\n")
    config = AwsConfig.from_storage_options(
        {
            "s3_endpoint": "https://minio.example:9000",
            "s3_addressing_style": "path",
            "s3_ca_bundle": str(bundle),
            "dynamodb_endpoint": "https://ddb.example",
        }
    )
    assert config.settings("dynamodb").addressing_style is None
    assert config.settings("dynamodb").verify is None
    client = config.client("s3")
    assert client.meta.config.s3 == {"addressing_style": "path"}
    assert client._endpoint.http_session._verify == str(bundle)
    fs_options = config.s3fs_options()
    assert fs_options["config_kwargs"] == {"s3": {"addressing_style": "path"}}
    assert fs_options["client_kwargs"]["verify"] == str(bundle)
    insecure = AwsConfig.from_storage_options({"s3_verify": "false"})
    assert insecure.settings("s3").verify is False
    assert insecure.client("s3")._endpoint.http_session._verify is False


@pytest.fixture(scope="module")
def moto() -> Iterator[LocalAWS]:
    with LocalAWS(conditional_writes=False) as server:
        server.create_bucket("role-bucket")
        yield server


def test_s3_assumes_its_own_role_for_boto3_and_s3fs_requests(moto: LocalAWS) -> None:
    options = {
        "s3_endpoint": moto.endpoint_url,
        "sts_endpoint": moto.endpoint_url,
        "s3_access_key_id": "BASES3KEY",
        "s3_secret_access_key": "base-secret",
        "s3_role_arn": f"arn:aws:iam::123456789012:role/reader-{uuid.uuid4().hex[:6]}",
    }
    store = ObjectStore(f"s3://role-bucket/{uuid.uuid4().hex}", options)
    moto.clear_requests()
    store.put("a/x", b"1")  # boto3
    assert [m.path for m in store.list("a/")] == ["a/x"]  # s3fs
    by_service: dict[str, set[str | None]] = {}
    for r in moto.requests:
        by_service.setdefault(r.service, set()).add(r.access_key_id)
    assert by_service["sts"] == {"BASES3KEY"}
    # boto3 and s3fs each hold the role's temporary credentials (one AssumeRole each).
    assert moto.count("sts", "AssumeRole") <= 2
    assert all(str(k).startswith("ASIA") for k in by_service["s3"])
    assert moto.count("s3", "ListObjectsV2") == 1 and moto.count("s3", "PutObject") == 1
