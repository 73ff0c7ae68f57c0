"""Mixed deployments: objects on one endpoint, DynamoDB on another, each with its own
region and credentials. Each server's own request log shows that it saw only its own
service and credentials; concurrent writers, crashes and conflicts work in that layout.

Two layouts: s3rver's S3 (a second S3 implementation) + moto's DynamoDB, and moto's S3
+ moto's DynamoDB on two separate endpoints.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.commit.failpoints import EXIT_CODE
from s3ddb.testing import LocalAWS
from s3ddb.testing._requests import RequestRecord
from tests.support.proc import run_workers
from tests.support.workers import rows_for

BUCKET = "s3ddb-mixed"
TABLE = "s3ddb_mixed_commits"
S3_KEY, S3_SECRET, S3_REGION = "S3KEYMIXEDDEPLOY", "s3-secret", "us-west-2"
DDB_KEY, DDB_SECRET, DDB_REGION = "DDBKEYMIXEDDEPLOY", "ddb-secret", "eu-west-1"
# Shared settings that must lose to the per-service ones and so never reach a server.
DECOY_KEY, DECOY_REGION = "DECOYSHAREDKEY", "ap-south-1"
CLOSED = "http://127.0.0.1:9"


class Layout:
    """S3 on ``s3`` and DynamoDB on ``ddb`` (two servers), each with its own key."""

    def __init__(self, name: str, s3: Any, ddb: LocalAWS) -> None:
        self.name, self.s3, self.ddb = name, s3, ddb

    def storage_options(self) -> dict[str, str]:
        """Per-service options, plus shared ones that they must override."""
        return {
            "endpoint_url": CLOSED,
            "region": DECOY_REGION,
            "aws_access_key_id": DECOY_KEY,
            "aws_secret_access_key": "decoy",
            "s3_endpoint": self.s3.endpoint_url,
            "s3_region": S3_REGION,
            "s3_access_key_id": S3_KEY,
            "s3_secret_access_key": S3_SECRET,
            "dynamodb_endpoint": self.ddb.endpoint_url,
            "dynamodb_region": DDB_REGION,
            "dynamodb_access_key_id": DDB_KEY,
            "dynamodb_secret_access_key": DDB_SECRET,
        }

    def env(self) -> dict[str, str]:
        """The same layout from the environment alone (child processes), with shared
        variables that the per-service ones must override."""
        return {
            "AWS_ENDPOINT_URL": CLOSED,
            "AWS_REGION": DECOY_REGION,
            "AWS_DEFAULT_REGION": DECOY_REGION,
            "AWS_ACCESS_KEY_ID": DECOY_KEY,
            "AWS_SECRET_ACCESS_KEY": "decoy",
            "AWS_ENDPOINT_URL_S3": self.s3.endpoint_url,
            "AWS_REGION_S3": S3_REGION,
            "AWS_ACCESS_KEY_ID_S3": S3_KEY,
            "AWS_SECRET_ACCESS_KEY_S3": S3_SECRET,
            "AWS_ENDPOINT_URL_DYNAMODB": self.ddb.endpoint_url,
            "AWS_REGION_DYNAMODB": DDB_REGION,
            "AWS_ACCESS_KEY_ID_DYNAMODB": DDB_KEY,
            "AWS_SECRET_ACCESS_KEY_DYNAMODB": DDB_SECRET,
        }

    def uri(self) -> str:
        return f"s3+ddb://{BUCKET}/{self.name}-{uuid.uuid4().hex[:10]}?ddbTableName={TABLE}"

    def clear(self) -> None:
        finalizer.drain()
        self.s3.clear_requests()
        self.ddb.clear_requests()

    def logs(self) -> tuple[list[RequestRecord], list[RequestRecord]]:
        finalizer.drain()
        return list(self.s3.requests), list(self.ddb.requests)

    def assert_each_saw_only_its_own(self, extra_ddb_keys: tuple[str, ...] = ()) -> None:
        s3_log, ddb_log = self.logs()
        assert s3_log and ddb_log, "both servers were used"
        assert {(r.service, r.access_key_id, r.region) for r in s3_log} == {
            ("s3", S3_KEY, S3_REGION)
        }
        assert {r.service for r in ddb_log} <= {"dynamodb", "sts"}
        assert {r.access_key_id for r in ddb_log} <= {DDB_KEY, *extra_ddb_keys}
        assert {r.region for r in ddb_log} == {DDB_REGION}
        assert all(r.status < 500 for r in s3_log + ddb_log)


@pytest.fixture(scope="module")
def ddb_server() -> Iterator[LocalAWS]:
    with LocalAWS(region=DDB_REGION) as server:
        server.create_table(TABLE)
        yield server


@pytest.fixture(scope="module", params=["s3rver", "moto"])
def layout(request: pytest.FixtureRequest, ddb_server: LocalAWS) -> Iterator[Layout]:
    if request.param == "s3rver":
        from tests.support.node_servers import S3rver, missing

        reason = missing("s3rver")
        if reason:
            pytest.skip(reason)
        with S3rver(access_keys={S3_KEY: S3_SECRET}, buckets=[BUCKET], region=S3_REGION) as s3:
            yield Layout("s3rver", s3, ddb_server)
    else:
        with LocalAWS(region=S3_REGION, conditional_writes=False) as s3:
            s3.create_bucket(BUCKET)
            yield Layout("moto", s3, ddb_server)


def _ids(ds: Any) -> list[int]:
    return sorted(ds.to_table(columns=["id"]).column("id").to_pylist())


def test_each_service_sees_only_its_own_endpoint_region_and_credentials(
    layout: Layout,
) -> None:
    so = layout.storage_options()
    uri = layout.uri()
    layout.clear()
    s3ddb.write_dataset(rows_for(0, 0, 2), uri, storage_options=so)
    ds = s3ddb.write_dataset(rows_for(0, 1, 2), uri, mode="append", storage_options=so)
    ds.delete("id = 0")
    assert ds.version == 3
    assert _ids(s3ddb.dataset(uri, storage_options=so)) == [1, 1000, 1001]
    # Time travel to the version before each change.
    assert _ids(s3ddb.dataset(uri, version=2, storage_options=so)) == [0, 1, 1000, 1001]
    assert _ids(s3ddb.dataset(uri, version=1, storage_options=so)) == [0, 1]
    layout.assert_each_saw_only_its_own()
    s3_log, ddb_log = layout.logs()
    assert {"PutItem", "Query"} & {r.operation for r in ddb_log}
    assert "PutObject" in {r.operation for r in s3_log}


def test_the_environment_alone_configures_both_services_for_concurrent_writers(
    layout: Layout,
) -> None:
    uri = layout.uri()
    so = layout.storage_options()
    s3ddb.write_dataset(rows_for(999, 0, 1), uri, storage_options=so)
    layout.clear()
    writers, appends = 4, 3
    results = run_workers(
        [("append", uri, str(w), str(appends), "1") for w in range(writers)],
        env=layout.env(),
        timeout=600,
    )
    failures = [r.stderr[-2000:] for r in results if r.returncode != 0]
    assert not failures, failures[0]
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.version == 1 + writers * appends
    assert [v.version for v in ds.versions()] == list(range(1, ds.version + 1))
    ids = Counter(ds.to_table(columns=["id"]).column("id").to_pylist())
    assert len(ids) == 1 + writers * appends and set(ids.values()) == {1}
    layout.assert_each_saw_only_its_own()


@pytest.mark.parametrize(
    "point", ["commit.after_stage_manifest", "commit.after_external_put", "commit.after_copy_final"]
)
def test_a_writer_crashing_at_a_protocol_step_in_the_mixed_layout(
    layout: Layout, point: str
) -> None:
    uri = layout.uri()
    so = layout.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), uri, storage_options=so)
    layout.clear()
    [crashed] = run_workers(
        [("append", uri, "1", "1", "2")], env={**layout.env(), "S3DDB_FAILPOINTS": f"{point}=exit"}
    )
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-2000:]
    decided = point != "commit.after_stage_manifest"
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.version == (2 if decided else 1)
    after = s3ddb.write_dataset(rows_for(2, 0, 1), uri, mode="append", storage_options=so)
    assert after.version == ds.version + 1
    ids = Counter(after.to_table(columns=["id"]).column("id").to_pylist())
    assert set(ids.values()) == {1} and (1_000_000 in ids) == decided
    assert _ids(s3ddb.dataset(uri, version=ds.version, storage_options=so)) == _ids(ds)
    layout.assert_each_saw_only_its_own()


@pytest.mark.parametrize("theirs", ["append", "delete", "restore"])
def test_a_stale_writer_commits_after_a_concurrent_change(layout: Layout, theirs: str) -> None:
    uri = layout.uri()
    so = layout.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 3), uri, storage_options=so)
    s3ddb.write_dataset(rows_for(0, 1, 1), uri, mode="append", storage_options=so)
    stale = s3ddb.dataset(uri, storage_options=so)  # pinned at version 2
    other = s3ddb.dataset(uri, storage_options=so)
    expected = {0, 1, 2, 1000}
    if theirs == "append":
        other.insert(rows_for(1, 0, 1))
        expected |= {1_000_000}
    elif theirs == "delete":
        other.delete("id = 1")
        expected -= {1}
    else:
        s3ddb.dataset(uri, version=1, storage_options=so).restore()
        expected -= {1000}
    layout.clear()
    stale.insert(rows_for(2, 0, 1))
    assert stale.version == 4
    assert set(_ids(s3ddb.dataset(uri, storage_options=so))) == expected | {2_000_000}
    assert set(_ids(s3ddb.dataset(uri, version=3, storage_options=so))) == expected
    layout.assert_each_saw_only_its_own()


def test_dynamodb_assumes_its_own_role(layout: Layout) -> None:
    """``dynamodb_role_arn``: STS is called with DynamoDB's own key, DynamoDB with the
    role's temporary key; S3 keeps its own key and never sees either."""
    so = {
        **layout.storage_options(),
        # A role of its own per layout: assumed credentials are cached per process.
        "dynamodb_role_arn": f"arn:aws:iam::123456789012:role/s3ddb-committer-{layout.name}",
        "sts_endpoint": layout.ddb.endpoint_url,
    }
    uri = layout.uri()
    layout.clear()
    s3ddb.write_dataset(rows_for(0, 0, 1), uri, storage_options=so)
    assert s3ddb.dataset(uri, storage_options=so).count_rows() == 1
    _, ddb_log = layout.logs()
    [assume] = [r for r in ddb_log if r.service == "sts"]
    assert assume.operation == "AssumeRole" and assume.access_key_id == DDB_KEY
    role_keys = {r.access_key_id for r in ddb_log if r.service == "dynamodb"}
    assert len(role_keys) == 1 and DDB_KEY not in role_keys
    assert next(iter(role_keys)).startswith("ASIA"), "temporary credentials of the role"
    layout.assert_each_saw_only_its_own(extra_ddb_keys=tuple(role_keys))


def test_each_service_uses_its_own_profile(
    layout: Layout, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``s3_profile`` / ``dynamodb_profile``: keys and region from the shared files."""
    (tmp_path / "credentials").write_text(
        f"[objects]\naws_access_key_id = {S3_KEY}\naws_secret_access_key = {S3_SECRET}\n"
        f"[commits]\naws_access_key_id = {DDB_KEY}\naws_secret_access_key = {DDB_SECRET}\n"
    )
    (tmp_path / "config").write_text(
        f"[profile objects]\nregion = {S3_REGION}\n[profile commits]\nregion = {DDB_REGION}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    so = {
        "s3_endpoint": layout.s3.endpoint_url,
        "dynamodb_endpoint": layout.ddb.endpoint_url,
        "s3_profile": "objects",
        "dynamodb_profile": "commits",
    }
    uri = layout.uri()
    layout.clear()
    s3ddb.write_dataset(rows_for(0, 0, 2), uri, storage_options=so)
    s3ddb.write_dataset(rows_for(0, 1, 1), uri, mode="append", storage_options=so)
    assert _ids(s3ddb.dataset(uri, version=1, storage_options=so)) == [0, 1]
    layout.assert_each_saw_only_its_own()
