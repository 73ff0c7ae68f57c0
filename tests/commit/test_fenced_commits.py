"""Fenced commits (invariant 0): a dataset's identity, claims checked against their
predecessor, and the commit mechanism that belongs to the dataset.

Each case runs on a local path, on ``memory://``, on ``s3://`` with conditional writes
and on ``s3+ddb://`` (moto's DynamoDB, which implements TransactWriteItems); the
external store's own fence is also checked on the in-memory store and on moto.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.cli.main import main as cli_main
from s3ddb.commit import external_versions, finalizer
from s3ddb.commit.failpoints import EXIT_CODE
from s3ddb.errors import (
    CommitMechanismError,
    DataFileError,
    DatasetRecreatedError,
    ManifestFinalizationError,
    StoredMetadataError,
    VersionNotFoundError,
)
from s3ddb.external_store.dynamodb import item_to_row, row_to_item
from s3ddb.external_store.manifest_store import (
    DATASET_ID_ATTRIBUTE,
    ManifestRow,
)
from s3ddb.format import layout
from s3ddb.format.naming import NamingScheme
from s3ddb.io import ObjectStore, parse_uri
from s3ddb.io.object_store import S3ObjectStore
from s3ddb.maintenance.drop import drop
from s3ddb.maintenance.verify import verify
from s3ddb.versions.connect import external_store_for
from tests.conftest import TEST_BUCKET, TEST_TABLE, make_table
from tests.support.proc import run_workers
from tests.support.workers import rows_for

CONDITIONAL_BUCKET = "s3ddb-test-conditional"


@pytest.fixture(scope="module")
def conditional_aws() -> Iterator[Any]:
    """A local endpoint whose S3 honours conditional writes (for ``s3://`` datasets)."""
    from s3ddb.testing import LocalAWS

    with LocalAWS() as server:
        server.create_bucket(CONDITIONAL_BUCKET)
        yield server


@pytest.fixture(params=["local", "memory", "s3", "ddb", "seaweedfs", "seaweedfs+ddb"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any] | None]:
    """A fresh dataset URI of each kind, with its storage options; the last two on
    SeaweedFS (a real S3-compatible store with conditional puts), the second of them
    with DynamoDB on moto."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    if request.param == "local":
        return str(tmp_path / name), None
    if request.param == "memory":
        return f"memory://{name}", None
    if request.param == "s3":
        aws = request.getfixturevalue("conditional_aws")
        return f"s3://{CONDITIONAL_BUCKET}/{name}", aws.storage_options()
    if request.param == "seaweedfs":
        server = request.getfixturevalue("seaweedfs")
        return f"s3://{TEST_BUCKET}/{name}", server.storage_options()
    aws = request.getfixturevalue("aws" if request.param == "ddb" else "seaweedfs_split")
    return f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}", aws.storage_options()


def _drop(uri: str, so: dict[str, Any] | None) -> None:
    finalizer.drain()
    drop(uri, so)


def _ids(ds: s3ddb.Dataset) -> list[int]:
    return sorted(ds.to_table(columns=["id"]).column("id").to_pylist())


# --- drop and re-create while a writer runs -------------------------------------------


def test_every_version_records_the_identity_of_the_first(where: tuple[str, Any]) -> None:
    uri, so = where
    ds = s3ddb.write_dataset(make_table(0, 3), uri, storage_options=so)
    identity = ds.manifest.dataset_id
    assert len(identity) == 32
    ds.insert(make_table(3, 1))
    ds.delete("id = 0")
    s3ddb.write_dataset(make_table(10, 2), uri, mode="overwrite", storage_options=so)
    latest = s3ddb.dataset(uri, storage_options=so)
    assert latest.version == 4
    assert {latest.checkout_version(v).manifest.dataset_id for v in range(1, 5)} == {identity}


@pytest.mark.parametrize("recreated_versions", [2, 7])
def test_a_writer_of_a_dropped_and_recreated_dataset_is_refused(
    where: tuple[str, Any], recreated_versions: int
) -> None:
    """The long job opened version 5; the dataset is dropped and re-created with fewer
    (2) or more (7) versions; its commit must fail and leave the new dataset intact."""
    uri, so = where
    for i in range(5):
        s3ddb.write_dataset(make_table(i * 10, 2), uri, mode="append", storage_options=so)
    stale = s3ddb.dataset(uri, storage_options=so)
    assert stale.version == 5
    _drop(uri, so)
    for i in range(recreated_versions):
        s3ddb.write_dataset(make_table(1000 + i, 1), uri, mode="append", storage_options=so)
    with pytest.raises(DatasetRecreatedError, match="re-created"):
        stale.insert(make_table(500, 3))
    # A delete plans on the old version's data files, which the drop removed.
    with pytest.raises((DatasetRecreatedError, DataFileError)):
        stale.delete("id >= 0")
    finalizer.drain()
    fresh = s3ddb.dataset(uri, storage_options=so)
    assert fresh.version == recreated_versions
    assert [v.version for v in fresh.versions()] == list(range(1, recreated_versions + 1))
    assert _ids(fresh) == [1000 + i for i in range(recreated_versions)]
    assert verify(uri, so, grace_seconds=0).healthy


def test_restore_through_a_handle_of_a_dropped_and_recreated_dataset_is_refused(
    where: tuple[str, Any],
) -> None:
    """The handle pins version 2 of the first dataset; after a drop and re-creation the
    location's version 2 is the new dataset's, which restore() must not bring back."""
    uri, so = where
    s3ddb.write_dataset(make_table(0, 1), uri, storage_options=so)
    s3ddb.write_dataset(make_table(1, 1), uri, mode="append", storage_options=so)
    old = s3ddb.dataset(uri, version=2, storage_options=so)
    _drop(uri, so)
    for start in (100, 200, 300):
        s3ddb.write_dataset(make_table(start, 1), uri, mode="append", storage_options=so)
    with pytest.raises(DatasetRecreatedError, match="re-created"):
        old.restore()
    finalizer.drain()
    fresh = s3ddb.dataset(uri, storage_options=so)
    assert fresh.version == 3
    assert _ids(fresh) == [100, 200, 300]
    assert verify(uri, so, grace_seconds=0).healthy


def _dropped_with_a_late_copy(aws: Any) -> tuple[str, str, ObjectStore, str, bytes]:
    """A dataset of three versions on S3 and DynamoDB, its final manifest of version 3
    (what a writer whose claim of version 3 won was copying when the drop came), and
    the dataset dropped. Returns (uri, plain uri, store, manifest path, its bytes)."""
    so = aws.storage_options()
    name = f"t-{uuid.uuid4().hex[:12]}"
    uri = f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}"
    for i in range(3):
        s3ddb.write_dataset(make_table(i, 1), uri, mode="append", storage_options=so)
    finalizer.drain()
    store = ObjectStore(parse_uri(uri), so)
    path = layout.manifest_path(3, NamingScheme.V2)
    return uri, f"s3://{TEST_BUCKET}/{name}", store, path, store.get(path)


def test_a_copy_that_lands_while_drop_finishes_is_dropped_too(aws: Any) -> None:
    """A writer's copy of its staged manifest to the final name may be read by the
    store before the drop deletes the staged object and written after the drop's
    listing found nothing (seen on SeaweedFS under load). The drop confirms an empty
    pass with one more after a pause, so such a copy is deleted too; before, it stayed
    as the newest version plain ``s3://`` readers list, of the dropped dataset."""
    so = aws.storage_options()
    uri, plain, store, path, late_copy = _dropped_with_a_late_copy(aws)
    phases: list[str] = []

    def progress(what: str, done: int, total: int | None) -> None:
        if what == "waiting for writes in flight" and what not in phases:
            store.put(path, late_copy)  # the copy the store was still writing
        phases.append(what)

    report = drop(uri, so, progress=progress)
    assert phases.count("waiting for writes in flight") == 2  # the copy, then none
    assert store.list("") == []
    assert report.objects >= 1 + 3 * 3  # the late copy and the three versions' files
    s3ddb.write_dataset(make_table(100, 1), uri, storage_options=so)
    finalizer.drain()
    assert s3ddb.dataset(plain, storage_options=so).version == 1
    assert _ids(s3ddb.dataset(plain, storage_options=so)) == [100]
    assert verify(uri, so, grace_seconds=0).healthy


def test_verify_names_a_copy_of_a_dropped_dataset_that_landed_after_the_drop(aws: Any) -> None:
    """A copy that lands later than the drop's pause: verify reports the manifest as
    the dropped dataset's (its identity is not the rows'), not as a writer that
    bypassed DynamoDB."""
    so = aws.storage_options()
    uri, _, store, path, late_copy = _dropped_with_a_late_copy(aws)
    drop(uri, so)
    s3ddb.write_dataset(make_table(100, 1), uri, storage_options=so)
    finalizer.drain()
    store.put(path, late_copy)
    problems = verify(uri, so, grace_seconds=0).problems
    assert [(p.kind, p.path, p.version) for p in problems] == [("foreign_version", path, 3)]
    assert "dropped and re-created" in problems[0].meaning
    assert s3ddb.dataset(uri, storage_options=so).version == 1  # s3+ddb readers: the rows


def test_drop_through_the_cli_fences_a_local_writer(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    for i in range(3):
        s3ddb.write_dataset(make_table(i, 1), uri, mode="append")
    stale = s3ddb.dataset(uri)
    assert cli_main(["drop", uri, "--yes"]) == 0
    s3ddb.write_dataset(make_table(100, 1), uri)
    with pytest.raises(DatasetRecreatedError):
        stale.insert(make_table(7, 1))
    assert _ids(s3ddb.dataset(uri)) == [100]
    # Nothing the refused writer wrote is left behind.
    data = sorted(p.name for p in (tmp_path / "ds" / "data").iterdir())
    assert data == [f.path for f in s3ddb.dataset(uri).manifest.fragments[0].files]


# --- the commit mechanism belongs to the dataset --------------------------------------


def test_a_plain_s3_writer_cannot_commit_to_a_dynamodb_dataset(aws: Any) -> None:
    so = aws.storage_options()
    name = f"t-{uuid.uuid4().hex[:12]}"
    ddb_uri = f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}"
    plain = f"s3://{TEST_BUCKET}/{name}"
    s3ddb.write_dataset(make_table(0, 2), ddb_uri, storage_options=so)
    s3ddb.write_dataset(make_table(2, 2), ddb_uri, mode="append", storage_options=so)
    finalizer.drain()
    with pytest.raises(CommitMechanismError, match=f"ddbTableName={TEST_TABLE}") as info:
        s3ddb.write_dataset(make_table(9, 1), plain, mode="append", storage_options=so)
    assert f"s3+ddb://{TEST_BUCKET}/{name}" in str(info.value)
    with pytest.raises(CommitMechanismError):
        s3ddb.dataset(plain, storage_options=so).delete("id = 0")
    # Reads stay allowed; the DynamoDB writer goes on; nothing was lost.
    assert _ids(s3ddb.dataset(plain, storage_options=so)) == [0, 1, 2, 3]
    ds = s3ddb.write_dataset(make_table(4, 1), ddb_uri, mode="append", storage_options=so)
    assert ds.version == 3 and _ids(ds) == [0, 1, 2, 3, 4]
    finalizer.drain()
    report = verify(ddb_uri, so, grace_seconds=0)
    assert report.healthy, report.to_json()["problems"]


def test_another_table_is_another_mechanism(aws: Any) -> None:
    so = aws.storage_options()
    other_table = f"other_{uuid.uuid4().hex[:8]}"
    aws.create_table(other_table)
    name = f"t-{uuid.uuid4().hex[:12]}"
    uri = f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(make_table(0, 2), uri, storage_options=so)
    s3ddb.write_dataset(make_table(2, 1), uri, mode="append", storage_options=so)
    finalizer.drain()
    wrong = f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={other_table}"
    with pytest.raises(CommitMechanismError, match=TEST_TABLE):
        s3ddb.write_dataset(make_table(5, 1), wrong, mode="append", storage_options=so)
    # Moving it in place to the other table is refused while the first holds its rows.
    with pytest.raises(CommitMechanismError, match="still holds"):
        s3ddb.migrate_commits(wrong, storage_options=so)
    assert s3ddb.dataset(uri, storage_options=so).version == 2


def test_a_local_copy_of_a_dynamodb_dataset_is_read_only_until_migrated(
    aws: Any, tmp_path: Path
) -> None:
    so = aws.storage_options()
    name = f"t-{uuid.uuid4().hex[:12]}"
    uri = f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(make_table(0, 2), uri, storage_options=so)
    s3ddb.write_dataset(make_table(2, 2), uri, mode="append", storage_options=so)
    finalizer.drain()
    copy = tmp_path / "copy"
    s3 = aws.boto3_client("s3")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=TEST_BUCKET, Prefix=name + "/")
    for key in (o["Key"] for page in pages for o in page.get("Contents", [])):
        if ".manifest-" in key:
            continue  # staged manifests are not part of a copy
        target = copy / key[len(name) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(s3.get_object(Bucket=TEST_BUCKET, Key=key)["Body"].read())
    assert _ids(s3ddb.dataset(str(copy))) == [0, 1, 2, 3]
    with pytest.raises(CommitMechanismError, match="copy"):
        s3ddb.write_dataset(make_table(9, 1), str(copy), mode="append")
    moved = s3ddb.migrate_commits(str(copy))
    assert moved.version == 3
    assert moved.manifest.table_metadata["s3ddb.commit_mechanism"] == "conditional-put"
    s3ddb.write_dataset(make_table(9, 1), str(copy), mode="append")
    assert _ids(s3ddb.dataset(str(copy))) == [0, 1, 2, 3, 9]
    # Migrating again is a no-op; the original never noticed.
    assert s3ddb.migrate_commits(str(copy)).version == 4
    assert s3ddb.dataset(uri, storage_options=so).version == 2


def test_migrate_commits_through_the_cli(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    so = aws.storage_options()
    name = f"t-{uuid.uuid4().hex[:12]}"
    plain = f"s3://{TEST_BUCKET}/{name}"
    uri = f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}"
    # (This endpoint's S3 ignores If-None-Match: one writer, so trusted.)
    trusted = {**so, "s3_conditional_writes": "trusted"}
    s3ddb.write_dataset(make_table(0, 2), plain, storage_options=trusted)
    flags = [f"--storage-option={k}={v}" for k, v in so.items()]
    assert cli_main(["migrate-commits", uri, *flags]) == 0
    assert "commits now go through dynamodb" in capsys.readouterr().out
    assert cli_main(["migrate-commits", uri, *flags]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert (
        s3ddb.write_dataset(make_table(5, 1), uri, mode="append", storage_options=so).version == 3
    )


def test_a_plain_writer_cannot_create_a_dataset_a_dynamodb_writer_is_creating(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ds"
    staged = root / layout.staged_manifest_path(1, NamingScheme.V2)
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"planted")
    with pytest.raises(CommitMechanismError, match="staged manifest"):
        s3ddb.write_dataset(make_table(0, 1), str(root))


# --- rows and staged manifests are checked before use ---------------------------------


def _row(version: int, identity: str | None = "a" * 32) -> ManifestRow:
    extra = {DATASET_ID_ATTRIBUTE: identity} if identity is not None else {}
    path = layout.staged_manifest_path(version, NamingScheme.V2)
    return ManifestRow("s3://b/fence", version, path, 10, "t", 1, extra)


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("size", {"N": "abc"}),
        ("size", {"N": "1e30"}),
        ("size", {"N": "2.5"}),
        ("size", {"S": "12"}),
        ("size", {"N": str(2**80)}),
        ("committed_at", {"N": "-5"}),
        ("committed_at", {"N": "9" * 40}),
        ("version", {"N": str(2**64 - 1)}),
        ("version", {"N": "0"}),
        ("path", {"N": "1"}),
        ("base_uri", {"S": ""}),
    ],
)
def test_malformed_row_attributes_are_typed_errors(attribute: str, value: Any) -> None:
    item = row_to_item(_row(3))
    item[attribute] = value
    with pytest.raises(StoredMetadataError, match=attribute):
        item_to_row(item)


def test_a_planted_row_with_a_malformed_size_is_a_typed_error_for_readers(aws: Any) -> None:
    so = aws.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(make_table(0, 2), uri, storage_options=so)
    finalizer.drain()
    parsed = parse_uri(uri)
    item = row_to_item(_row(2))
    item["base_uri"] = {"S": parsed.base_uri}
    item["size"] = {"N": "1e30"}
    aws.boto3_client("dynamodb").put_item(TableName=TEST_TABLE, Item=item)
    with pytest.raises(StoredMetadataError, match="size"):
        s3ddb.dataset(uri, storage_options=so)


def test_a_staged_object_holding_another_versions_manifest_is_never_finalized(aws: Any) -> None:
    """Someone with write access plants row 3 whose staged object is a copy of version
    2's manifest (of the right size): readers refuse, and no final manifest of version
    3 appears for plain s3:// readers."""
    so = aws.storage_options()
    name = f"t-{uuid.uuid4().hex[:12]}"
    uri = f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(make_table(0, 2), uri, storage_options=so)
    ds = s3ddb.write_dataset(make_table(2, 2), uri, mode="append", storage_options=so)
    finalizer.drain()
    s3 = aws.boto3_client("s3")
    v2 = s3.get_object(Bucket=TEST_BUCKET, Key=f"{name}/{layout.manifest_path(2, NamingScheme.V2)}")
    body = v2["Body"].read()
    staged = layout.staged_manifest_path(3, NamingScheme.V2)
    s3.put_object(Bucket=TEST_BUCKET, Key=f"{name}/{staged}", Body=body)
    planted = ManifestRow(
        parse_uri(uri).base_uri,
        3,
        staged,
        len(body),
        "mallory",
        1,
        {DATASET_ID_ATTRIBUTE: ds.manifest.dataset_id},
    )
    aws.boto3_client("dynamodb").put_item(TableName=TEST_TABLE, Item=row_to_item(planted))
    with pytest.raises(ManifestFinalizationError, match="holds version 2"):
        s3ddb.dataset(uri, storage_options=so)
    final = f"{name}/{layout.manifest_path(3, NamingScheme.V2)}"
    listed = s3.list_objects_v2(Bucket=TEST_BUCKET, Prefix=final).get("Contents", [])
    assert final not in [o["Key"] for o in listed]
    assert s3ddb.dataset(f"s3://{TEST_BUCKET}/{name}", storage_options=so).version == 2


@pytest.mark.parametrize("staged", [True, False], ids=["staged-path", "final-path"])
def test_a_row_far_ahead_of_the_manifests_is_a_typed_error_for_history(
    aws: Any, staged: bool
) -> None:
    """Someone plants row latest+50 (no operation recorded, so history reads its
    manifest's header) pointing at a manifest that does not exist: ``versions()``
    names the version and the missing manifest instead of raising a bare
    FileNotFoundError; opening the newest version refuses as finishing decides (a
    staged row cannot be finalized, a final one has no manifest), nothing is marked
    complete, and the real versions still read."""
    so = aws.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(make_table(0, 2), uri, storage_options=so)
    ds = s3ddb.write_dataset(make_table(2, 2), uri, mode="append", storage_options=so)
    finalizer.drain()
    far = ds.version + 50
    path = (layout.staged_manifest_path if staged else layout.manifest_path)(far, NamingScheme.V2)
    planted = ManifestRow(
        parse_uri(uri).base_uri,
        far,
        path,
        1234,
        "mallory",
        1,
        {DATASET_ID_ATTRIBUTE: ds.manifest.dataset_id},
    )
    aws.boto3_client("dynamodb").put_item(TableName=TEST_TABLE, Item=row_to_item(planted))

    with pytest.raises(StoredMetadataError, match=f"version {far} ") as info:
        ds.versions()
    assert path in str(info.value) and "missing" in str(info.value)
    assert not isinstance(info.value, FileNotFoundError)

    refused = ManifestFinalizationError if staged else VersionNotFoundError
    with pytest.raises(refused, match=f"version {far} ") as opened:
        s3ddb.dataset(uri, storage_options=so)
    assert path in str(opened.value)
    parsed = parse_uri(uri)
    store = external_store_for(parsed, ObjectStore(parsed, so))
    assert store.get(parsed.base_uri, far) == planted, "nothing is marked complete"
    assert s3ddb.dataset(uri, version=ds.version, storage_options=so).count_rows() == 4
    assert ds.checkout_version(ds.version).count_rows() == 4


# --- writers finalize N-1 completely ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("point", ["commit.after_external_put", "commit.after_copy_final"])
def test_after_a_crash_the_next_writer_leaves_verify_healthy(
    aws: Any, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.proc import run_workers
    from tests.support.workers import rows_for

    so = aws.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(rows_for(0, 0, 2), uri, storage_options=so)
    finalizer.drain()
    env = {**aws.env(), "S3DDB_FAILPOINTS": f"{point}=exit"}
    [crashed] = run_workers([("append", uri, "1", "1", "1")], env=env)
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-2000:]
    report = verify(uri, so, grace_seconds=0)
    assert not report.healthy  # version 2 is decided but still staged
    # A writer that builds on the crashed version (without reading through it first)
    # finishes it completely: copy and repoint. (Writers leave a row younger than two
    # seconds to its own writer: here it is taken for abandoned at once.)
    monkeypatch.setattr(external_versions, "_ABANDONED_AFTER_MS", 0)
    stale = s3ddb.dataset(uri, version=1, storage_options=so)
    stale.insert(rows_for(0, 1, 1))
    finalizer.drain()
    report = verify(uri, so, grace_seconds=0)
    assert report.healthy, report.to_json()["problems"]
    assert s3ddb.dataset(uri, storage_options=so).version == 3


def test_copies_keep_their_own_identity(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    ds = s3ddb.write_dataset(pa.table({"id": [1, 2]}), src)
    clone = ds.shallow_clone(str(tmp_path / "clone"))
    deep = ds.deep_clone(str(tmp_path / "deep"))
    ids = {ds.manifest.dataset_id, clone.manifest.dataset_id, deep.manifest.dataset_id}
    assert len(ids) == 3
    # A plain file copy is the same dataset (same identity, same mechanism): writable.
    shutil.copytree(src, tmp_path / "copy")
    assert (
        s3ddb.write_dataset(pa.table({"id": [3]}), str(tmp_path / "copy"), mode="append").version
        == 2
    )


def test_verify_reports_versions_of_another_identity(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for i in range(2):
        s3ddb.write_dataset(make_table(i, 1), str(a), mode="append")
    for i in range(3):
        s3ddb.write_dataset(make_table(10 + i, 1), str(b), mode="append")
    assert verify(str(a), None, grace_seconds=0).healthy
    name = layout.manifest_path(3, NamingScheme.V2)
    shutil.copy(b / name, a / name)  # planted, or left by a dataset re-created here
    report = verify(str(a), None, grace_seconds=0)
    foreign = [p for p in report.problems if p.kind == "foreign_version"]
    assert sorted(p.version for p in foreign) == [1, 2], report.problems


_DROP_AND_RECREATE = """
import json, sys
import s3ddb
from s3ddb.maintenance.drop import drop
from tests.conftest import make_table
uri, so = sys.argv[1], json.loads(sys.argv[2])
s3ddb.dataset(uri, storage_options=so)  # a reader finishes the writer's version 3
drop(uri, so)
for i in range(3):
    mode = "create" if i == 0 else "append"
    s3ddb.write_dataset(make_table(100 + i, 1), uri, mode=mode, storage_options=so)
"""


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
def test_a_writer_finishing_a_version_that_a_drop_gave_to_another_commit_says_so(
    aws: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, background: bool
) -> None:
    """Between a writer's claim of version 3 and its copy of the staged manifest,
    another process finishes the version, drops the dataset and re-creates it with
    three versions. The copy finds no staged object and the row of version 3 final:
    it is another commit's, so the writer must not note that commit's manifest as its
    own; it warns that its commit went with the dropped dataset (in the caller, or from
    the background finalizer, without promising that someone will finish it), stops
    presuming its commits are the newest, and its handle is refused as a stale one."""
    so = aws.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    for i in range(2):
        s3ddb.write_dataset(make_table(i, 1), uri, mode="append", storage_options=so)
    finalizer.drain()
    if not background:
        monkeypatch.setenv("S3DDB_BACKGROUND_FINALIZE", "0")  # the writer finishes inline
    writer = s3ddb.dataset(uri, storage_options=so)
    real_copy = S3ObjectStore.copy
    raced: list[str] = []

    def copy(self: S3ObjectStore, src: str, dst: str) -> str | None:
        if ".manifest-" in src and not raced:
            raced.append(src)
            script = [sys.executable, "-c", _DROP_AND_RECREATE, uri, json.dumps(so)]
            subprocess.run(script, check=True, cwd=Path(__file__).parents[2])
        return real_copy(self, src, dst)

    monkeypatch.setattr(S3ObjectStore, "copy", copy)
    with caplog.at_level(logging.WARNING, logger="s3ddb.commit"):
        writer.insert(make_table(500, 3))
        finalizer.drain()
    assert len(raced) == 1
    replaced = [m for r in caplog.records if "now holds another" in (m := r.getMessage())]
    assert len(replaced) == 1 and "dropped" in replaced[0], caplog.text
    assert "will finish it" not in caplog.text
    s3ddb.write_dataset(make_table(900, 1), uri, mode="append", storage_options=so)
    finalizer.drain()
    fresh = s3ddb.dataset(uri, storage_options=so)
    assert fresh.version == 4 and _ids(fresh) == [100, 101, 102, 900]
    with pytest.raises(DatasetRecreatedError):
        writer.insert(make_table(950, 1))
    assert _ids(s3ddb.dataset(uri, storage_options=so)) == [100, 101, 102, 900]


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_writer_appends_on_its_own_newest_commit_and_rebases_when_another_wrote(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A process that committed the newest version appends on it without listing
    ``_versions/`` or reading its manifest back: on S3 the uploads, the predecessor's
    fence (beside a check that the next version is free) and the conditional put.
    After another process committed, that check fails, the append rebases on the real
    newest version, and no row is lost or doubled."""
    aws: Any = None
    so: dict[str, Any] | None = None
    if kind == "s3":
        aws = request.getfixturevalue("conditional_aws")
        so = aws.storage_options()
        uri = f"s3://{CONDITIONAL_BUCKET}/own-{uuid.uuid4().hex[:8]}"
    else:
        uri = str(tmp_path / "ds")
    s3ddb.write_dataset(rows_for(0, 0, 3), uri, storage_options=so)
    s3ddb.write_dataset(rows_for(0, 1, 3), uri, mode="append", storage_options=so)
    if aws is not None:
        aws.clear_requests()
    ds = s3ddb.write_dataset(rows_for(0, 2, 3), uri, mode="append", storage_options=so)
    assert ds.version == 3 and ds.last_commit is not None and ds.last_commit.attempts == 1
    if aws is not None:
        ops = Counter(r.operation for r in aws.requests)
        # Data file, transaction and manifest; side by side, the predecessor's header
        # (the fence) and whether the version is still free (no listing said so).
        assert ops == Counter({"PutObject": 3, "GetObject": 1, "HeadObject": 1}), ops
    [other] = run_workers([("append", uri, "1", "1", "3")], env=aws.env() if aws else None)
    assert other.returncode == 0, other.stderr[-2000:]
    ds = s3ddb.write_dataset(rows_for(0, 3, 3), uri, mode="append", storage_options=so)
    # Built on version 3, lost version 4 to the other process, committed version 5.
    assert ds.version == 5 and ds.last_commit is not None and ds.last_commit.attempts == 2
    ids = s3ddb.dataset(uri, storage_options=so).to_table()["id"].to_pylist()
    assert len(ids) == 15 == len(set(ids))
