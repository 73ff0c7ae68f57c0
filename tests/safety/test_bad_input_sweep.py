"""A sweep of bad input: stored metadata that is corrupt or hostile, URIs, options,
names and predicates that make no sense. Each must give a typed error under
S3DDBError that says what and where, and leave nothing committed."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.errors import (
    InvalidExpressionError,
    InvalidInputError,
    InvalidURIError,
    ManifestCorruptError,
    PathOutsideDatasetError,
    S3DDBError,
    SchemaMismatchError,
    StoredMetadataError,
)
from s3ddb.format import layout
from tests.conftest import TEST_BUCKET, TEST_TABLE


def _make(uri: str, so: dict[str, Any] | None = None) -> s3ddb.Dataset:
    table = pa.table({"id": pa.array(range(6), pa.int64()), "s": [f"r{i}" for i in range(6)]})
    ds = s3ddb.write_dataset(table, uri, storage_options=so, max_rows_per_file=3)
    ds.delete("id = 1")
    return ds


def _versions(uri: str) -> list[Path]:
    return sorted((Path(uri) / layout.VERSIONS_DIR).iterdir())


# --- corrupt stored files ----------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_corrupt_manifest_is_a_typed_error_naming_it(tmp_path: Path, damage: str) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    newest = min(_versions(uri))  # V2 names sort newest first
    data = newest.read_bytes()
    newest.write_bytes(
        {"truncated": data[: len(data) // 2], "garbage": b"\x00" * 64, "empty": b""}[damage]
    )
    with pytest.raises(ManifestCorruptError) as info:
        s3ddb.dataset(uri).to_table()
    assert newest.name in str(info.value)
    # The older version is intact and still reads.
    assert s3ddb.dataset(uri, version=1).count_rows() == 6


def test_a_corrupt_transaction_file_stops_a_rebase_with_a_typed_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    stale = s3ddb.dataset(uri, version=1)
    latest = s3ddb.dataset(uri)
    txn = Path(uri) / layout.transaction_path(latest.manifest.transaction_file)
    txn.write_bytes(txn.read_bytes()[:10])
    with pytest.raises(S3DDBError) as info:
        stale.delete("id = 4", conflict_retries=0)
    assert latest.manifest.transaction_file in str(info.value)
    assert s3ddb.dataset(uri).version == 2  # nothing committed


def test_a_corrupt_deletion_file_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = _make(uri)
    (fragment,) = [f for f in ds.get_fragments() if f.deletion_file is not None]
    from s3ddb.format.deletion import deletion_path

    path = Path(uri) / deletion_path(fragment)
    path.write_bytes(b"not a bitmap")
    with pytest.raises(S3DDBError) as info:
        s3ddb.dataset(uri).to_table()
    assert path.name in str(info.value)


# --- hostile or broken DynamoDB rows -----------------------------------------------------


@pytest.mark.parametrize(
    ("item", "error", "what"),
    [
        ({"size": {"N": "-5"}}, StoredMetadataError, "attribute 'size'"),
        ({"size": {"S": "big"}}, StoredMetadataError, "attribute 'size'"),
        ({"committed_at": {"S": "yesterday"}}, StoredMetadataError, "attribute 'committed_at'"),
        ({"path": {"N": "7"}}, StoredMetadataError, "attribute 'path'"),
        ({"path": {"S": "s3://other-bucket/ds/_versions/x.manifest"}}, PathOutsideDatasetError,
         "'s3://other-bucket/ds/_versions/x.manifest'"),
        ({"path": {"S": "_versions/../../other/secret.manifest"}}, PathOutsideDatasetError,
         "'_versions/../../other/secret.manifest'"),
    ],
    ids=["negative-size", "size-text", "time-text", "path-number", "other-bucket", "dot-dot"],
)  # fmt: skip
def test_a_broken_row_is_refused_before_anything_is_read(
    aws: Any, ddb_uri: str, item: dict[str, Any], error: type[S3DDBError], what: str
) -> None:
    so = aws.storage_options()
    _make(ddb_uri, so)
    finalizer.drain()
    parsed = s3ddb.io.parse_uri(ddb_uri)
    row = {
        "base_uri": {"S": parsed.base_uri}, "version": {"N": "3"}, "path": {"S": "x"},
        "size": {"N": "10"}, "committer": {"S": "someone"}, "committed_at": {"N": "1"},
    }  # fmt: skip
    row.update(item)
    aws.boto3_client("dynamodb").put_item(TableName=TEST_TABLE, Item=row)
    with pytest.raises(error) as info:
        s3ddb.dataset(ddb_uri, storage_options=so).to_table()
    message = str(info.value)
    # What is wrong, and where: the row of version 3 of this dataset.
    assert what in message
    assert "row" in message and "version 3 of" in message and parsed.base_uri in message


# --- URIs, options, names, predicates ------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "s3+ddb://bucket/prefix",  # no table
        "s3+ddb://bucket/prefix?ddbTableName=",
        "s3://",
        "ftp://host/path",
        "s3://bucket/a/../b",
        "s3+ddb://bucket/a/../../b?ddbTableName=t",
        "",
    ],
)
def test_a_malformed_uri_is_refused(uri: str) -> None:
    with pytest.raises(InvalidURIError):
        s3ddb.write_dataset(pa.table({"id": [1]}), uri)


@pytest.mark.parametrize(
    "call",
    [
        lambda uri: s3ddb.write_dataset(pa.table({"id": [1]}), uri, max_rows_per_file=0),
        lambda uri: s3ddb.write_dataset(pa.table({"id": [1]}), uri, mode="upsert"),  # type: ignore[arg-type]
        lambda uri: s3ddb.write_dataset(pa.table({"id": [1]}), uri, storage_options={"region": 5}),
        lambda uri: s3ddb.write_dataset(
            pa.table({"id": [1]}), uri, storage_options={"no_such_option": "x"}
        ),
        lambda uri: _make(uri).delete("id = 1", conflict_retries=-1),
        lambda uri: _make(uri).update({"s": "'x'"}, "id = 2", retry_timeout=0),
        lambda uri: _make(uri).to_table(limit=-1),
        lambda uri: _make(uri).to_table(columns="id"),  # type: ignore[arg-type]
        lambda uri: _make(uri).optimize.compact_files(target_rows_per_fragment=0),
        lambda uri: _make(uri).cleanup_old_versions(retain_versions=0),
        lambda uri: _make(uri).tags.create("bad\x00name", 1),
        lambda uri: _make(uri).tags.create("x" * 500, 1),
        lambda uri: s3ddb.write_dataset(pa.table({"a\x00b": [1]}), uri),
    ],
    ids=[
        "max-rows-0", "mode", "region-int", "unknown-option", "retries-negative",
        "timeout-zero", "limit-negative", "columns-string", "target-0", "retain-0",
        "tag-control-char", "tag-too-long", "column-control-char",
    ],
)  # fmt: skip
def test_an_absurd_value_is_refused_and_commits_nothing(tmp_path: Path, call: Any) -> None:
    uri = str(tmp_path / f"ds-{uuid.uuid4().hex[:6]}")
    before = s3ddb.dataset(uri).version if (Path(uri) / layout.VERSIONS_DIR).exists() else None
    with pytest.raises((InvalidInputError, SchemaMismatchError)) as info:
        call(uri)
    assert str(info.value)
    if before is None and (Path(uri) / layout.VERSIONS_DIR).exists():
        assert s3ddb.dataset(uri).version in (1, 2)  # only _make's own versions


@pytest.mark.parametrize("value", [True, 2.0, "3"], ids=["bool", "float", "text"])
@pytest.mark.parametrize(
    ("name", "minimum", "call"),
    [
        ("max_rows_per_file", 1,
         lambda uri, v: s3ddb.write_dataset(pa.table({"id": [1]}), uri, max_rows_per_file=v)),
        ("batch_size", 1, lambda uri, v: _make(uri).scanner(batch_size=v)),
        ("limit", 0, lambda uri, v: _make(uri).to_table(limit=v)),
        ("readahead_bytes", 1, lambda uri, v: _make(uri).scanner(readahead_bytes=v)),
        ("retain_versions", 1, lambda uri, v: _make(uri).cleanup_old_versions(retain_versions=v)),
        ("conflict_retries", 0, lambda uri, v: _make(uri).delete("id = 2", conflict_retries=v)),
        ("target_rows_per_fragment", 1,
         lambda uri, v: _make(uri).optimize.compact_files(target_rows_per_fragment=v)),
    ],
    ids=lambda p: p if isinstance(p, str) else "",
)  # fmt: skip
def test_an_integer_argument_is_an_int_and_never_a_bool(
    tmp_path: Path, name: str, minimum: int, call: Any, value: Any
) -> None:
    # Python counts True as the int 1: every integer argument refuses it all the same.
    uri = str(tmp_path / f"ds-{uuid.uuid4().hex[:6]}")
    with pytest.raises(InvalidInputError) as info:
        call(uri, value)
    assert str(info.value) == f"{name} must be an int >= {minimum}, got {value!r}"
    if (Path(uri) / layout.VERSIONS_DIR).exists():
        assert s3ddb.dataset(uri).version == 2  # only _make's own versions


@pytest.mark.parametrize(
    "predicate",
    [
        "(" * 3000 + "id = 1" + ")" * 3000,
        " OR ".join(["id = 1"] * 9000),  # under the length limit, too deep
        " OR ".join(["id = 1"] * 20000),
        "id = '" + "x" * 10**6,
    ],
    ids=["parentheses", "or-chain", "too-long", "unterminated"],
)
def test_a_predicate_too_deep_or_too_long_is_a_typed_error(tmp_path: Path, predicate: str) -> None:
    uri = str(tmp_path / "ds")
    ds = _make(uri)
    with pytest.raises(InvalidExpressionError):
        ds.delete(predicate)
    assert s3ddb.dataset(uri).version == 2


@pytest.mark.parametrize(
    ("uri", "meant"),
    [
        ("s3:/bucket/prefix", "s3://bucket/prefix"),
        ("s3:bucket/prefix", "s3://bucket/prefix"),
        ("S3+DDB:/bucket/p?ddbTableName=t", "s3+ddb://bucket/p?ddbTableName=t"),
        ("memory:/name", "memory://name"),
    ],
)
def test_a_scheme_without_its_two_slashes_is_no_local_folder(
    uri: str, meant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was one: the write succeeded into ./s3:/bucket/prefix."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidURIError, match=re.escape(f"did you mean '{meant}'")):
        s3ddb.write_dataset(pa.table({"id": [1]}), uri)
    assert list(tmp_path.iterdir()) == []


def test_file_colon_one_slash_is_the_absolute_path(tmp_path: Path) -> None:
    ds = s3ddb.write_dataset(pa.table({"id": [1]}), f"file:{tmp_path}/ds")
    assert (tmp_path / "ds" / "_versions").is_dir() and ds.count_rows() == 1


def test_a_ddb_uri_with_dot_dot_never_reaches_another_prefix(aws: Any) -> None:
    uri = f"s3+ddb://{TEST_BUCKET}/a/../escape?ddbTableName={TEST_TABLE}"
    with pytest.raises(InvalidURIError):
        s3ddb.write_dataset(pa.table({"id": [1]}), uri, storage_options=aws.storage_options())
