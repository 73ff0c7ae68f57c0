"""SeaweedFS, the real S3-compatible store of the test matrix (tests/support/seaweedfs.py): the
server the session starts, what it does differently from moto and s3rver and how
s3ddb handles each difference (docs/deployments.md, "SeaweedFS")."""

from __future__ import annotations

import glob
import os
import uuid
from typing import Any

import botocore.exceptions
import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.io import ObjectStore
from s3ddb.io.object_store import S3ObjectStore
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.workers import rows_for


def _store(server: Any) -> ObjectStore:
    return ObjectStore(f"s3://{TEST_BUCKET}/sw-{uuid.uuid4().hex}", server.storage_options())


def test_a_second_server_runs_on_its_own_ports_and_leaves_nothing_behind(
    seaweedfs: Any,
) -> None:
    from tests.support.seaweedfs import SeaweedFS

    with SeaweedFS(buckets=["second"]) as other:
        assert other.endpoint_url != seaweedfs.endpoint_url
        port = int(other.endpoint_url.rsplit(":", 1)[1])
        assert port < 50000 and port + 10000 < 50000, "gRPC listens on each port + 10000"
        store = ObjectStore("s3://second/p", other.storage_options())
        store.put("k", b"v")
        assert store.get("k") == b"v"
        directory = other._dir.name  # type: ignore[union-attr]
        assert os.path.isdir(directory)
        # Authentication is on: only the key pair it was started with is accepted.
        stranger = ObjectStore(
            "s3://second/p", {**other.storage_options(), "aws_access_key_id": "NOBODY"}
        )
        with pytest.raises(s3ddb.CredentialsError, match="InvalidAccessKeyId"):
            stranger.get("k")
    assert not other.is_running()
    assert not os.path.exists(directory)
    assert not glob.glob(f"/tmp/seaweedfs-*-{port}.sock")
    assert seaweedfs.is_running()


def test_a_missing_bucket_is_missing(seaweedfs: Any) -> None:
    """SeaweedFS creates a missing bucket on an admin identity's PUT unless started
    with -s3.autoCreateBucket=false, as the tests' server is (S3 refuses the PUT)."""
    with pytest.raises(FileNotFoundError, match="NoSuchBucket"):
        s3ddb.write_dataset(
            rows_for(0, 0, 1),
            f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/ds",
            storage_options=seaweedfs.storage_options(),
        )


def test_if_none_match_on_a_directory_name_is_refused(seaweedfs: Any) -> None:
    """SeaweedFS keeps keys as a directory tree: a conditional PUT of ``a`` while
    ``a/b`` exists is refused as if ``a`` existed (S3 stores it). s3ddb never names an
    object whose name another object's extends by a ``/``; a plain PUT stores it."""
    store = _store(seaweedfs)
    store.put("a/b", b"1")
    with pytest.raises(FileExistsError):
        store.put_if_not_exists("a", b"2")
    store.put("a", b"3")
    assert store.get("a") == b"3" and store.get("a/b") == b"1"


def test_a_key_ending_in_a_slash_is_an_empty_directory_marker(seaweedfs: Any) -> None:
    """What a PUT of ``x/`` stores on SeaweedFS is a directory: its bytes are dropped
    (S3 keeps them). s3ddb never writes such a key."""
    client = seaweedfs.boto3_client("s3")
    key = f"sw-{uuid.uuid4().hex}/x/"
    client.put_object(Bucket=TEST_BUCKET, Key=key, Body=b"bytes")
    assert client.head_object(Bucket=TEST_BUCKET, Key=key)["ContentLength"] == 0


def test_a_commit_verifies_its_copied_manifest_by_etag_without_a_head(
    seaweedfs_split: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SeaweedFS answers CopyObject with an unquoted ETag, PutObject with a quoted one;
    s3ddb compares them in one form, so step 3's copy needs no HEAD there either."""
    so = seaweedfs_split.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/etag-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(rows_for(0, 0, 1), uri, storage_options=so)
    finalizer.drain()
    heads: list[str] = []
    real_head = S3ObjectStore.head

    def counted(self: S3ObjectStore, path: str) -> Any:
        heads.append(path)
        return real_head(self, path)

    monkeypatch.setattr(S3ObjectStore, "head", counted)
    for i in range(1, 4):
        s3ddb.write_dataset(rows_for(0, i, 1), uri, mode="append", storage_options=so)
    finalizer.drain()
    assert heads == []
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.version == 4 and ds.count_rows() == 4


def test_if_none_match_has_one_winner_among_racing_clients(seaweedfs: Any) -> None:
    """The conditional PUT plain s3:// datasets commit by: of 8 clients racing for
    each of 5 keys, exactly one wins each (a loser may wait a second or two for its
    412: SeaweedFS serializes racing conditional PUTs of one key)."""
    from concurrent.futures import ThreadPoolExecutor

    prefix = f"sw-{uuid.uuid4().hex}"
    clients = [seaweedfs.boto3_client("s3") for _ in range(8)]

    def race(key: str, writer: int) -> bool:
        try:
            clients[writer].put_object(
                Bucket=TEST_BUCKET, Key=f"{prefix}/{key}", Body=str(writer), IfNoneMatch="*"
            )
            return True
        except botocore.exceptions.ClientError as exc:
            assert exc.response["Error"]["Code"] == "PreconditionFailed"
            return False

    with ThreadPoolExecutor(8) as pool:
        for k in range(5):
            won = list(pool.map(lambda w, key=f"k{k}": race(key, w), range(8)))
            assert sum(won) == 1, won
            body = clients[0].get_object(Bucket=TEST_BUCKET, Key=f"{prefix}/k{k}")["Body"]
            assert body.read() == str(won.index(True)).encode()
