"""The ObjectStore contract, checked for every backend (fsspec-style shared tests)."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import s3ddb
from s3ddb.errors import CredentialsError
from s3ddb.io import ObjectStore
from s3ddb.io.object_store import DELETE_BATCH
from tests.conftest import TEST_BUCKET, make_table


@pytest.fixture(scope="module")
def conditional_aws() -> Iterator[Any]:
    """An endpoint whose S3 honours If-None-Match (like AWS S3 today)."""
    from s3ddb.testing import LocalAWS

    with LocalAWS(conditional_writes=True) as server:
        server.create_bucket("objstore")
        yield server


# What s3rver (a second S3 implementation) lacks, by test: skipped there with the reason.
S3RVER_LACKS = {
    "test_put_if_not_exists_never_overwrites": (
        "s3rver ignores If-None-Match on PUT (a store without conditional writes; "
        "such stores need s3+ddb://)"
    ),
}


@pytest.fixture(params=["file", "memory", "s3", "s3rver"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "file":
        return ObjectStore(str(tmp_path / "root"))
    if request.param == "memory":
        return ObjectStore(f"memory://objstore-{uuid.uuid4().hex}")
    if request.param == "s3rver":
        lacks = S3RVER_LACKS.get(request.node.originalname)
        if lacks:
            pytest.skip(lacks)
        server = request.getfixturevalue("s3rver")
        # s3rver on one endpoint; the shared endpoint_url points elsewhere (a closed
        # port), so the per-service s3_endpoint alone must route every request.
        options = {**server.storage_options(), "endpoint_url": "http://127.0.0.1:9"}
        return ObjectStore(
            f"s3://{TEST_BUCKET}/objstore-{uuid.uuid4().hex}",
            {**options, "s3_endpoint": server.endpoint_url},
        )
    aws = request.getfixturevalue("conditional_aws")
    return ObjectStore(f"s3://objstore/{uuid.uuid4().hex}", aws.storage_options())


def test_s3rver_ignores_if_none_match(s3rver: Any) -> None:
    """Why the contract test above is skipped there: the second write wins."""
    store = ObjectStore(
        f"s3://{TEST_BUCKET}/inm-{uuid.uuid4().hex}",
        {**s3rver.storage_options(), "s3_endpoint": s3rver.endpoint_url},
    )
    store.put_if_not_exists("v/1", b"first")
    store.put_if_not_exists("v/1", b"second")
    assert store.get("v/1") == b"second"


def test_get_put_head_delete(store: ObjectStore) -> None:
    with pytest.raises(FileNotFoundError):
        store.get("a/missing")
    with pytest.raises(FileNotFoundError):
        store.head("a/missing")
    store.put("a/b.bin", b"hello")
    assert store.get("a/b.bin") == b"hello"
    assert store.head("a/b.bin").size == 5
    store.put("a/b.bin", b"bye")
    assert store.get("a/b.bin") == b"bye"
    store.delete("a/b.bin")
    store.delete("a/b.bin")  # missing is fine
    assert not store.exists("a/b.bin")


def test_delete_many_deletes_in_batches_and_reports_each(store: ObjectStore) -> None:
    kept = ["d/kept"]
    doomed = [f"d/{i:04d}" for i in range(DELETE_BATCH + 1)]
    for path in [*kept, *doomed[:3], doomed[-1]]:
        store.put(path, b"x")
    batches: list[list[str]] = []
    store.delete_many(doomed, deleted=batches.append)  # most are missing: not an error
    assert batches == [doomed[:DELETE_BATCH], doomed[DELETE_BATCH:]]
    assert [m.path for m in store.list("d/")] == kept


def test_put_if_not_exists_never_overwrites(store: ObjectStore) -> None:
    store.put_if_not_exists("v/1", b"first")
    with pytest.raises(FileExistsError):
        store.put_if_not_exists("v/1", b"second")
    assert store.get("v/1") == b"first"


def test_copy(store: ObjectStore) -> None:
    store.put("x/src", b"payload")
    store.copy("x/src", "x/dst")
    assert store.get("x/dst") == b"payload"
    with pytest.raises(FileNotFoundError):
        store.copy("x/none", "x/dst2")


def test_list_is_complete_and_in_key_order(store: ObjectStore) -> None:
    names = [f"d/{n}" for n in ("b", "a", "c10", "c2", "0")]
    for name in names:
        store.put(name, name.encode())
    store.put("other/z", b"z")
    listed = [m.path for m in store.list("d/")]
    assert listed == sorted(names)
    assert [m.path for m in store.iter_list("d/")] == sorted(names)
    assert {m.path for m in store.list("")} == {*names, "other/z"}
    first = store.first_listed("d/")
    assert first is not None and first.path == "d/0"


def test_pickles_and_reuses_its_client(store: ObjectStore) -> None:
    store.put("p/q", b"1")
    fs = store.fs
    assert store.fs is fs, "the client is created once"
    again = pickle.loads(pickle.dumps(store))
    assert again.get("p/q") == b"1"


@pytest.mark.slow
def test_s3_conditional_put_commits_datasets(conditional_aws: Any) -> None:
    so = conditional_aws.storage_options()
    uri = f"s3://objstore/ds-{uuid.uuid4().hex}"
    s3ddb.write_dataset(make_table(0, 3), uri, storage_options=so)
    a = s3ddb.dataset(uri, storage_options=so)
    b = s3ddb.dataset(uri, storage_options=so)
    a.insert(make_table(3, 1))
    b.insert(make_table(4, 1))  # loses version 2 on If-None-Match, rebases to 3
    assert b.version == 3
    ids = s3ddb.dataset(uri, storage_options=so).to_table().column("id").to_pylist()
    assert sorted(ids) == [0, 1, 2, 3, 4]


def test_s3rver_listens_on_its_own_port_and_logs_who_signed(s3rver: Any) -> None:
    from tests.node_servers import S3rver

    with S3rver(access_keys={"OTHERKEY": "other"}, buckets=["second"]) as other:
        assert other.endpoint_url != s3rver.endpoint_url
        client = other.boto3_client("s3")
        client.put_object(Bucket="second", Key="k", Body=b"v")
        stranger = ObjectStore(
            "s3://second/p",
            {
                "s3_endpoint": other.endpoint_url,
                "aws_access_key_id": "NOBODY",
                "aws_secret_access_key": "x",
            },
        )
        with pytest.raises(CredentialsError, match="InvalidAccessKeyId"):
            stranger.get("k")
        log = other.requests
        assert [(r.operation, r.status, r.access_key_id) for r in log] == [
            ("PutObject", 200, "testing"),
            ("GetObject", 403, "NOBODY"),
        ]
        other.clear_requests()
        assert other.requests == [] and other.count() == 0
    assert not other.is_running()


def test_s3_credential_source_that_fails_is_a_credentials_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A named profile that no config file has: boto3 raises ProfileNotFound before
    # any request, which the store reports as the credentials problem it is.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    store = ObjectStore("s3://bucket/p", {"profile": "s3ddb-no-such-profile"})
    with pytest.raises(CredentialsError, match="s3ddb-no-such-profile"):
        store.get("k")


@pytest.mark.parametrize("operation", ["HeadObject", "GetObject", "PutObject", "CopyObject"])
def test_a_failing_s3_answer_is_an_object_store_error_naming_the_object(
    conditional_aws: Any, operation: str
) -> None:
    """An S3 failure that outlasts the retries (here HTTP 500 on every attempt) is a
    typed ObjectStoreError naming the object and the answer, never botocore's
    ClientError; a missing object stays a FileNotFoundError."""
    from s3ddb.errors import ObjectStoreError

    store = ObjectStore(f"s3://objstore/{uuid.uuid4().hex}", conditional_aws.storage_options())
    store.put("k", b"v")
    with pytest.raises(FileNotFoundError):
        store.head("missing")
    call = {
        "HeadObject": lambda: store.head("k"),
        "GetObject": lambda: store.get("k"),
        "PutObject": lambda: store.put("k2", b"v"),
        "CopyObject": lambda: store.copy("k", "k3"),
    }[operation]
    conditional_aws.inject_fault("s3", operation, "server_error", times=100)
    try:
        with pytest.raises(ObjectStoreError, match=r"objstore/.*/k.* failed: (500|InternalError)"):
            call()
    finally:
        conditional_aws.clear_faults()
