"""A version's DynamoDB row records the SHA-256 digest of the manifest it committed, so
whoever can write the bucket but not the table cannot change what a version holds: a
manifest replaced after its commit (a valid one, of the same size, pointing at a
planted data file) is refused by every read through the row and by whoever finishes
the version, instead of being read or copied to the final name."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
import s3ddb.fragment
from s3ddb.commit import external_versions, finalizer
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.errors import ManifestCorruptError, S3DDBError, StoredMetadataError
from s3ddb.external_store.identity import final_path_of
from s3ddb.external_store.manifest_store import MANIFEST_SHA256_ATTRIBUTE
from s3ddb.format import layout
from s3ddb.format.chunks import ChunkSource
from s3ddb.format.framing import frame
from s3ddb.format.manifest import MANIFEST_MAGIC, Manifest
from s3ddb.io import ObjectStore, parse_uri
from s3ddb.maintenance.repair import sync
from s3ddb.maintenance.verify import verify
from tests.conftest import TEST_TABLE
from tests.support.storage import plant_manifest, staged_second_version


def _ids(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _read(uri: str, so: dict[str, Any], version: int | None = None) -> list[int]:
    MANIFESTS.clear()  # as a fresh process reads
    table = s3ddb.dataset(uri, version, storage_options=so).to_table()
    return sorted(table["id"].to_pylist())


def _planted_file(uri: str, so: dict[str, Any]) -> str:
    """A data file of 5 rows (666-670) written into the dataset's data/ folder and
    committed by no version, named as s3ddb names data files (so of the same length)."""
    [fragment] = s3ddb.fragment.write_fragments(_ids(666, 5), uri, storage_options=so)
    return fragment.files[0].path


def _point_second_fragment_at(uri: str, so: dict[str, Any], path: str) -> Any:
    """An edit of a manifest: its second fragment reads the data file ``path``, with
    the size that file has (a plant as valid as can be)."""
    size = ObjectStore(uri, so).head(f"data/{path}").size

    def edit(message: Any) -> None:
        message.fragments[1].files[0].path = path
        message.fragments[1].files[0].file_size_bytes = size

    return edit


@pytest.mark.parametrize("size", ["same size", "other size"])
def test_a_manifest_replaced_in_the_bucket_is_refused(aws: Any, ddb_uri: str, size: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(_ids(0, 5), ddb_uri, storage_options=so)
    s3ddb.write_dataset(_ids(5, 5), ddb_uri, mode="append", storage_options=so)
    finalizer.drain()
    planted = _planted_file(ddb_uri, so)
    if size == "other size":
        planted = f"{planted[:-8]}x.parquet"
        ObjectStore(ddb_uri, so).copy(f"data/{_planted_file(ddb_uri, so)}", f"data/{planted}")
    store = ObjectStore(ddb_uri, so)
    location = s3ddb.dataset(ddb_uri, storage_options=so).handler.latest_location()
    assert location is not None and location.sha256 is not None
    before = store.head(location.path).size
    plant_manifest(ddb_uri, _point_second_fragment_at(ddb_uri, so, planted), so, row=False)
    assert (store.head(location.path).size == before) == (size == "same size")
    for version in (None, 2):
        with pytest.raises(ManifestCorruptError, match="not the one its version committed"):
            _read(ddb_uri, so, version)
    assert _read(ddb_uri, so, 1) == list(range(5))
    problems = verify(ddb_uri, so, grace_seconds=0).problems
    kinds = {p.kind for p in problems if p.version == 2}
    if size == "same size":  # the size checks do not see it: the digest does
        assert kinds == {"unreadable_manifest"}, problems
        assert "not the one its version committed" in problems[0].meaning
    else:
        assert kinds & {"unreadable_manifest", "manifest_size_mismatch"}, problems


def test_the_digest_is_checked_where_the_planted_rows_would_show(aws: Any, ddb_uri: str) -> None:
    """The same manifest with the row rewritten to match it (someone who can write the
    table as well) is read: the digest is what stood in the way above."""
    so = aws.storage_options()
    s3ddb.write_dataset(_ids(0, 5), ddb_uri, storage_options=so)
    s3ddb.write_dataset(_ids(5, 5), ddb_uri, mode="append", storage_options=so)
    finalizer.drain()
    planted = _planted_file(ddb_uri, so)
    plant_manifest(ddb_uri, _point_second_fragment_at(ddb_uri, so, planted), so)
    assert _read(ddb_uri, so) == [*range(5), *range(666, 671)]


def test_every_row_records_the_digest_of_its_final_manifest(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    other = ddb_uri.replace("/t-", "/u-")
    s3ddb.write_dataset(_ids(0, 5), ddb_uri, storage_options=so)
    s3ddb.write_dataset(_ids(0, 1), other, storage_options=so)
    with s3ddb.atomic(storage_options=so) as group:  # a group's rows too
        group.dataset(ddb_uri).insert(_ids(5, 5))
        group.dataset(other).insert(_ids(1, 1))
    finalizer.drain()
    for uri in (ddb_uri, other):
        ds = s3ddb.dataset(uri, storage_options=so)
        store = ObjectStore(uri, so)
        for info in ds.versions():
            row = ds.handler.external.get(parse_uri(uri).base_uri, info.version)
            assert row is not None and not row.is_staged
            digest = hashlib.sha256(store.get(row.path)).hexdigest()
            assert row.extra[MANIFEST_SHA256_ATTRIBUTE] == digest, (uri, info.version)


def test_a_staged_manifest_replaced_before_it_is_finished_is_refused(
    aws: Any, ddb_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 2's writer died after its claim. Its staged manifest is then replaced
    by a valid one of the same size, version and identity that lists a planted file:
    finishing the version refuses it, nothing reaches the final name, and no read
    shows the planted rows."""
    so = aws.storage_options()
    row = staged_second_version(aws, ddb_uri, _ids(0, 5))
    store = ObjectStore(ddb_uri, so)
    staged = Manifest.from_bytes(store.get(row.path), row.path, ChunkSource(store))
    message = staged.to_pb()
    _point_second_fragment_at(ddb_uri, so, _planted_file(ddb_uri, so))(message)
    forged = frame(message.SerializeToString(), MANIFEST_MAGIC)
    assert len(forged) == row.size
    store.put(row.path, forged)
    MANIFESTS.clear()
    monkeypatch.setattr(external_versions, "_ABANDONED_AFTER_MS", 0)
    for read in (lambda: _read(ddb_uri, so), lambda: _read(ddb_uri, so, 2)):
        with pytest.raises(S3DDBError, match="digest"):
            read()
    assert not store.exists(final_path_of(row.path))


def test_a_row_digest_that_is_no_digest_is_refused(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(_ids(0, 5), ddb_uri, storage_options=so)
    s3ddb.write_dataset(_ids(5, 5), ddb_uri, mode="append", storage_options=so)
    finalizer.drain()
    aws.boto3_client("dynamodb").update_item(
        TableName=TEST_TABLE,
        Key={"base_uri": {"S": parse_uri(ddb_uri).base_uri}, "version": {"N": "2"}},
        UpdateExpression="SET manifest_sha256 = :d",
        ExpressionAttributeValues={":d": {"S": "not-a-digest"}},
    )
    MANIFESTS.clear()
    with pytest.raises(StoredMetadataError, match="no SHA-256 digest"):
        s3ddb.dataset(ddb_uri, storage_options=so).to_table()
    # verify and sync report the row, not stop at it
    problems = verify(ddb_uri, so, grace_seconds=0).problems
    assert ("malformed_row", 2) in [(p.kind, p.version) for p in problems], problems
    report = sync(ddb_uri, so, grace_seconds=0)
    assert len(report.failed) == 1 and "no SHA-256 digest" in report.failed[0], report


def test_a_manifest_planted_above_the_newest_row_is_no_version(aws: Any, ddb_uri: str) -> None:
    """No commit through the table puts a final manifest before its row: one above the
    newest row (which a tag, also a bucket object, could name) is not read through the
    listing, where no digest guards it."""
    so = aws.storage_options()
    s3ddb.write_dataset(_ids(0, 5), ddb_uri, storage_options=so)
    ds = s3ddb.write_dataset(_ids(5, 5), ddb_uri, mode="append", storage_options=so)
    finalizer.drain()
    message = ds.manifest.to_pb()
    message.version = 3
    _point_second_fragment_at(ddb_uri, so, _planted_file(ddb_uri, so))(message)
    store = ObjectStore(ddb_uri, so)
    store.put(
        layout.manifest_path(3, ds.manifest.naming_scheme),
        frame(message.SerializeToString(), MANIFEST_MAGIC),
    )
    store.put(layout.tag_path("release"), b'{"version": 3}')
    MANIFESTS.clear()
    assert _read(ddb_uri, so) == list(range(10))
    for version in (3, "release"):
        with pytest.raises(s3ddb.VersionNotFoundError, match="version 3"):
            s3ddb.dataset(ddb_uri, version, storage_options=so)
