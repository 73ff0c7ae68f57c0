"""Paths from stored metadata never leave the dataset: hostile manifests, transaction
files, deletion files, DynamoDB rows and fragment metadata are refused with a typed
error that names the path and where it was found, before anything is read, written or
deleted — and files outside the root survive every verb."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.errors import PathOutsideDatasetError
from s3ddb.external_store.manifest_store import ManifestRow
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.framing import frame
from s3ddb.io import ObjectStore, parse_uri
from s3ddb.io.paths import check_name, check_relative_path
from tests.conftest import TEST_BUCKET, TEST_TABLE, make_table
from tests.support import storage

HOSTILE_NAMES = [
    "../../private/data/secret.parquet",
    "..",
    ".",
    "",
    "a/b.parquet",
    "/etc/passwd",
    "s3://other-bucket/key.parquet",
    "a\\..\\b",
    "x\x00.parquet",
    "line\nbreak",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_stored_name_must_be_one_plain_name(name: str) -> None:
    with pytest.raises(PathOutsideDatasetError) as info:
        check_name(name, "data file", "manifest m, fragment 3")
    assert "manifest m, fragment 3" in str(info.value)


@pytest.mark.parametrize("name", ["0f3a.parquet", "12-abc.txn", "x y.parquet", "é.bin"])
def test_plain_names_pass(name: str) -> None:
    assert check_name(name, "data file") == name


@pytest.mark.parametrize(
    "path", ["../x", "a/../../x", "/abs", "a//b", "a/./b", "a\\b", "a/\x01", "data/.."]
)
def test_the_object_store_refuses_paths_leaving_its_root(path: str, tmp_path: Path) -> None:
    outside = tmp_path / "x"
    outside.write_bytes(b"keep")
    store = ObjectStore(str(tmp_path / "root"))
    with pytest.raises(PathOutsideDatasetError):
        check_relative_path(path, "root")
    for operation in (store.get, store.delete, lambda p: store.put(p, b"overwritten")):
        with pytest.raises(PathOutsideDatasetError):
            operation(path)
    assert outside.read_bytes() == b"keep"


def test_prefixes_and_the_root_are_fine(tmp_path: Path) -> None:
    assert check_relative_path("", "r") == ""
    assert check_relative_path("_versions/", "r") == "_versions/"
    assert check_relative_path("data/abc.parquet", "r") == "data/abc.parquet"


# --- hostile manifests on a real dataset ----------------------------------------------


def _data_file(message: pb.Manifest, path: str) -> None:
    message.fragments[0].files[0].path = path


def _deletion_id(message: pb.Manifest, file_id: str) -> None:
    fragment = message.fragments[0]
    fragment.deletion_file.kind = pb.DeletionFile.ROARING_BITMAP
    fragment.deletion_file.read_version = 1
    fragment.deletion_file.id = file_id
    fragment.deletion_file.num_deleted_rows = 1
    # A consistent summary, as an attacker would write: the path is what is refused.
    if message.HasField("visible_rows"):
        message.visible_rows -= 1


def _transaction_file(message: pb.Manifest, name: str) -> None:
    message.transaction_file = name


PLANTS = {
    "data-relative": lambda m, secret: _data_file(m, f"../../private/data/{secret}"),
    "data-absolute": lambda m, secret: _data_file(m, f"/{secret}"),
    "deletion-file": lambda m, secret: _deletion_id(m, "../../../private/x"),
    "transaction-file": lambda m, secret: _transaction_file(m, "../../private/x.txn"),
}


@pytest.fixture(params=["local", "s3", "s3+ddb"])
def hostile_setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """(uri of the attacked dataset, storage options, its private neighbour's uri)."""
    if request.param == "local":
        yield str(tmp_path / "ds"), None, str(tmp_path / "private")
        return
    aws = request.getfixturevalue("aws")
    prefix = f"{TEST_BUCKET}/p-{uuid.uuid4().hex[:10]}"
    query = f"?ddbTableName={TEST_TABLE}" if request.param == "s3+ddb" else ""
    # s3:// commits need a store that honours If-None-Match (this endpoint, for a while).
    # A process asks a store once, and this one changes between tests: trusted. (The
    # private neighbour has one writer.)
    honoured = aws.conditional_writes
    aws.conditional_writes = request.param == "s3"
    try:
        yield (
            f"{request.param}://{prefix}/ds{query}",
            {**aws.storage_options(), "s3_conditional_writes": "trusted"},
            f"s3://{prefix}/private",
        )
    finally:
        aws.conditional_writes = honoured


@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_hostile_manifest_is_refused_by_every_verb(
    hostile_setup: Any, plant: str, request: pytest.FixtureRequest
) -> None:
    uri, so, private = hostile_setup
    endpoint = request.getfixturevalue("aws") if so is not None else None
    s3ddb.write_dataset(pa.table({"secret": ["s3cr3t"]}), private, storage_options=so)
    [secret] = [p for p in ObjectStore(private, so).list("data/") if p.path.endswith(".parquet")]
    secret_name = secret.path.split("/", 1)[1]
    # Four small fragments, so that compaction has work to do.
    s3ddb.write_dataset(make_table(0, 4), uri, storage_options=so, max_rows_per_file=1)
    s3ddb.write_dataset(make_table(4, 4), uri, mode="append", storage_options=so)
    finalizer.drain()
    storage.plant_manifest(uri, lambda m: PLANTS[plant](m, secret_name), so)
    MANIFESTS.clear()  # a writer in this process would otherwise not read it again
    if endpoint is not None:
        endpoint.clear_requests()

    # Opening decodes no fragment, and a commit carries the fragments it did not touch
    # forward as stored bytes: a verb either refuses the hostile fragment itself, or
    # reading what it committed does.
    def pinned() -> Any:  # each verb plans on the good version 1 and rebases
        return s3ddb.dataset(uri, 1, storage_options=so)

    def then_read(_: Any = None) -> None:
        s3ddb.dataset(uri, storage_options=so).to_table()

    verbs: dict[str, Any] = {
        "open": then_read,
        "append": lambda: then_read(
            s3ddb.write_dataset(make_table(10, 1), uri, mode="append", storage_options=so)
        ),
        "delete": lambda: then_read(pinned().delete("id = 1")),
        "update": lambda: then_read(pinned().update({"name": "'x'"}, where="id = 2")),
        "insert": lambda: then_read(pinned().insert(make_table(20, 1))),
        "compact": lambda: then_read(pinned().optimize.compact_files()),
    }
    for verb, call in verbs.items():
        try:
            call()
        except PathOutsideDatasetError as exc:
            message = str(exc)
        else:
            pytest.fail(f"{verb} was not refused")
        # The hostile manifest, or a newer one that carried its fragment forward.
        assert "/ds/_versions/" in message, (verb, message)
        assert "fragment" in message or "transaction" in message, (verb, message)
    if plant != "transaction-file":
        # Restoring the good version is the way back: it never decodes a fragment of
        # the hostile one (whose other fields are sound).
        pinned().restore()
        assert s3ddb.dataset(uri, storage_options=so).to_table() == make_table(0, 4)
    if endpoint is not None:
        neighbour = "/" + private.split("://", 1)[1] + "/"
        touched = [r.path for r in endpoint.requests if neighbour in r.path + "/"]
        assert touched == [], "no request ever reached the neighbouring dataset"
    assert ObjectStore(private, so).exists(secret.path)
    assert s3ddb.dataset(private, storage_options=so).to_table().to_pylist() == [
        {"secret": "s3cr3t"}
    ]


def test_fragment_metadata_from_elsewhere_is_checked(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(make_table(0, 2), uri)
    fragment = json.loads(ds.get_fragments()[0].to_json())
    fragment["files"][0]["path"] = "../../private/data/x.parquet"
    with pytest.raises(PathOutsideDatasetError, match=r"x\.parquet"):
        FragmentMetadata.from_json(json.dumps(fragment))


def test_a_hostile_transaction_file_is_refused() -> None:
    from s3ddb.format._proto import transaction_pb2 as tpb
    from s3ddb.format.fragment_metadata import DataFile
    from s3ddb.format.framing import unframe
    from s3ddb.operations import TRANSACTION_MAGIC, Append, Transaction

    txn = Transaction(1, Append((FragmentMetadata(4, (DataFile("a.parquet", (0,)),), 1),)))
    message = tpb.Transaction()
    message.ParseFromString(unframe(txn.to_bytes(), TRANSACTION_MAGIC, "t"))
    message.append.fragments[0].files[0].path = "../../../elsewhere/b.parquet"
    hostile = frame(message.SerializeToString(), TRANSACTION_MAGIC)
    with pytest.raises(PathOutsideDatasetError) as info:
        Transaction.from_bytes(hostile, "s3://b/ds/_transactions/1-x.txn")
    assert "fragment 4" in str(info.value) and "_transactions/1-x.txn" in str(info.value)


# --- hostile DynamoDB rows ----------------------------------------------------------------


def _put_row(aws: Any, uri: str, version: int, path: str) -> None:
    from s3ddb.versions.connect import external_store_for

    parsed = parse_uri(uri)
    store = external_store_for(parsed, ObjectStore(parsed, aws.storage_options()))
    store.put_if_not_exists(ManifestRow(parsed.base_uri, version, path, 100, "attacker", 1))


@pytest.mark.parametrize(
    "path",
    [
        "../../other/secret.manifest",
        "_versions/../../other/18446744073709551613.manifest",
        "_versions/18446744073709551614.manifest",  # version 1's manifest, as version 2
        "data/x.parquet",
    ],
)
def test_a_hostile_row_is_refused(aws: Any, ddb_uri: str, path: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(make_table(0, 2), ddb_uri, storage_options=so)
    _put_row(aws, ddb_uri, 2, path)
    for call in (
        lambda: s3ddb.dataset(ddb_uri, storage_options=so),
        lambda: s3ddb.write_dataset(
            make_table(5, 1), ddb_uri, mode="overwrite", storage_options=so
        ),
        lambda: s3ddb.dataset(ddb_uri, version=1, storage_options=so).versions(),
    ):
        with pytest.raises(PathOutsideDatasetError) as info:
            call()
        assert path in str(info.value) and "row for version 2" in str(info.value)
    assert s3ddb.dataset(ddb_uri, version=1, storage_options=so).count_rows() == 2
