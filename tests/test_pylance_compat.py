"""pylance-shaped calls (docs/pylance.md): storage option names, operations built as
pylance builds them, scanners, head/take, versions as dicts, tags, cleanup names; on a
local path and on the local AWS endpoint (S3 without conditional writes + DynamoDB).
The docs' pylance S3 + DynamoDB example runs with only its import changed."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import (
    InvalidInputError,
    RetryableCommitConflictError,
    UnsupportedOperationError,
)
from tests.conftest import TEST_BUCKET, TEST_TABLE

DOC = Path(__file__).resolve().parent.parent / "docs" / "pylance.md"


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "kind": pa.array([f"k{i % 3}" for i in ids])})


@pytest.fixture
def target(location: tuple[str, dict[str, Any] | None]) -> tuple[str, dict[str, Any] | None]:
    """A dataset of ids 0..29 in three fragments, with id 5 deleted (version 4)."""
    uri, so = location
    for start in (0, 10, 20):
        s3ddb.write_dataset(
            _rows(list(range(start, start + 10))), uri, mode="append", storage_options=so
        )
    s3ddb.dataset(uri, storage_options=so).delete("id = 5")
    return uri, so


def test_scanner_head_take_count(target: tuple[str, Any]) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    visible = [i for i in range(30) if i != 5]
    scanner = ds.scanner(columns=["id"], filter="id >= 8", limit=4, offset=1)
    assert scanner.to_table().column("id").to_pylist() == [9, 10, 11, 12]
    assert scanner.count_rows() == 4
    assert scanner.projected_schema.names == ["id"]
    assert [b.num_rows for b in ds.scanner(batch_size=3).to_batches()][:4] == [3, 3, 3, 3]
    assert pa.Table.from_batches(ds.scanner().to_reader()).column("id").to_pylist() == visible
    assert ds.head(7).column("id").to_pylist() == visible[:7]
    assert ds.scanner(filter="kind = 'k1'").head(2).column("id").to_pylist() == [1, 4]
    # take: positions over the visible rows, in the order asked, across fragments.
    assert ds.take([28, 0, 5, 9]).column("id").to_pylist() == [29, 0, 6, 10]
    assert ds.take(pa.array([4]), columns=["kind"]).to_pylist() == [{"kind": "k1"}]
    assert ds.count_rows() == 29
    assert ds.count_rows("id < 10") == 9
    assert ds.to_table(filter="id > 25", limit=2, use_stats=True).num_rows == 2
    assert [b.num_rows for b in ds.to_batches(limit=3)] == [3]
    # Time travel: the version before the delete still holds id 5.
    assert ds.checkout_version(3).take([5]).column("id").to_pylist() == [5]


def test_bad_scans_are_refused(tmp_path: Path) -> None:
    ds = s3ddb.write_dataset(_rows([1, 2]), str(tmp_path / "ds"))
    with pytest.raises(UnsupportedOperationError, match="nearest"):
        ds.scanner(nearest={"column": "v", "q": [1.0]})
    with pytest.raises(UnsupportedOperationError, match="projections"):
        ds.to_table(columns={"double": "id * 2"})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="out of range"):
        ds.take([2])
    with pytest.raises(InvalidInputError, match="out of range"):
        ds.take([-1])
    with pytest.raises(InvalidInputError, match="limit"):
        ds.scanner(limit=-1)
    with pytest.raises(InvalidInputError, match="batch_size"):
        ds.scanner(batch_size=0)
    with pytest.raises(UnsupportedOperationError, match="error_if_tagged"):
        ds.cleanup_old_versions(error_if_tagged_old_versions=True)
    assert ds.version == 1 and ds.latest_version == 1


def test_versions_read_as_dicts_and_tags(target: tuple[str, Any]) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    versions = ds.versions()
    assert [v["version"] for v in versions] == [1, 2, 3, 4]
    first = dict(versions[0])
    assert set(first) == {"version", "timestamp", "operation", "metadata"}
    assert isinstance(first["timestamp"], dt.datetime) and first["operation"] == "Overwrite"
    with pytest.raises(KeyError):
        versions[0]["nope"]
    ds.tags.create("two", 2)
    assert ds.tags.get_version("two") == 2
    assert ds.checkout_version("two").count_rows() == 20


def test_storage_options_in_pylance_spelling(aws: Any) -> None:
    uri = f"s3+ddb://{TEST_BUCKET}/so-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    base = aws.storage_options()
    options = {
        "aws_endpoint": base["endpoint_url"],
        "dynamodb_endpoint": base["endpoint_url"],
        "aws_region": base["region"],
        "allow_http": "true",
        "virtual_hosted_style_request": "false",
        "access_key_id": base["aws_access_key_id"],
        "secret_access_key": base["aws_secret_access_key"],
    }
    s3ddb.write_dataset(_rows([1, 2]), uri, storage_options=options)
    assert s3ddb.dataset(uri, storage_options=options).count_rows() == 2
    with pytest.raises(InvalidInputError, match="allow_http"):
        s3ddb.dataset(uri, storage_options={**options, "allow_http": "maybe"})
    with pytest.raises(InvalidInputError, match="unknown storage option 'aws_bucket_typo'"):
        s3ddb.dataset(uri, storage_options={**options, "aws_bucket_typo": "x"})


def test_overwrite_and_append_built_as_pylance_builds_them(target: tuple[str, Any]) -> None:
    uri, so = target
    schema = pa.schema([("id", pa.int64()), ("kind", pa.string())])
    fragments = s3ddb.fragment.write_fragments(_rows([100, 101]), uri, storage_options=so)
    # Both argument orders, keywords, and a pyarrow schema give the same operation.
    op = s3ddb.LanceOperation.Overwrite(schema, fragments)
    assert op == s3ddb.Overwrite(fragments, schema)
    assert op == s3ddb.Overwrite(new_schema=schema, fragments=fragments)
    assert isinstance(op.schema, s3ddb.DatasetSchema)
    with pytest.raises(InvalidInputError, match="needs a schema"):
        s3ddb.Overwrite(fragments)
    ds = s3ddb.LanceDataset.commit(uri, op, read_version=4, storage_options=so)
    assert (ds.version, ds.to_table().column("id").to_pylist()) == (5, [100, 101])
    more = s3ddb.fragment.write_fragments(_rows([102]), uri, storage_options=so)
    ds = s3ddb.Dataset.commit(ds, s3ddb.LanceOperation.Append(more), read_version=ds.version)
    assert ds.to_table().column("id").to_pylist() == [100, 101, 102]
    # Time travel to the version before the overwrite.
    assert ds.checkout_version(4).count_rows() == 29


def test_stale_append_rebases_over_a_delete_and_is_retried_after_a_restore(
    target: tuple[str, Any],
) -> None:
    """Per the conflict matrix: an Append rebases over a Delete; after a Restore it must
    be retried on the newest version (nothing is committed)."""
    uri, so = target
    stale = s3ddb.dataset(uri, storage_options=so)
    s3ddb.dataset(uri, storage_options=so).delete("id < 3")  # v5
    fragments = s3ddb.fragment.write_fragments(_rows([50]), uri, storage_options=so)
    ds = s3ddb.LanceDataset.commit(
        uri, s3ddb.LanceOperation.Append(fragments), read_version=stale.version,
        storage_options=so,
    )  # fmt: skip
    assert ds.version == 6
    assert ds.count_rows() == 29 - 3 + 1 and ds.count_rows("id = 50") == 1
    ds.checkout_version(2).restore()  # v7: ids 0..19 without the delete
    fragments = s3ddb.fragment.write_fragments(_rows([60]), uri, storage_options=so)
    append = s3ddb.LanceOperation.Append(fragments)
    with pytest.raises(RetryableCommitConflictError, match="restored"):
        s3ddb.LanceDataset.commit(uri, append, read_version=6, storage_options=so)
    assert s3ddb.dataset(uri, storage_options=so).version == 7
    # The failed commit deleted the files it would have added: write them again.
    fragments = s3ddb.fragment.write_fragments(_rows([60]), uri, storage_options=so)
    append = s3ddb.LanceOperation.Append(fragments)
    ds = s3ddb.LanceDataset.commit(uri, append, read_version=7, storage_options=so)
    assert ds.to_table().column("id").to_pylist() == [*range(20), 60]


@pytest.mark.usefixtures("instant_cleanup")
def test_merge_insert_and_delete_with_pylance_arguments(target: tuple[str, Any]) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    result = (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .retry_timeout(dt.timedelta(seconds=30))
        .execute(_rows([1, 99]), schema=pa.schema([("id", pa.int64()), ("kind", pa.string())]))
    )
    assert result == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert ds.delete("id = 99", retry_timeout=dt.timedelta(seconds=30)) == {"num_deleted_rows": 1}
    stats = ds.cleanup_old_versions(
        older_than=dt.timedelta(0), error_if_tagged_old_versions=False, delete_rate_limit=10
    )
    assert stats.old_versions == len(stats.versions_removed) == 5
    assert stats.transaction_files_removed >= 1 and stats.bytes_removed > 0
    assert s3ddb.dataset(uri, storage_options=so).count_rows() == 29


def _doc_blocks() -> list[str]:
    text = DOC.read_text()
    return [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]


@pytest.mark.usefixtures("instant_cleanup")
def test_docs_pylance_s3_dynamodb_example_runs_with_only_the_import_changed(
    aws: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    [example] = [b for b in _doc_blocks() if b.startswith("import lance\n")]
    base = aws.storage_options()
    prefix = f"doc-{uuid.uuid4().hex[:12]}"
    # The API is untouched; only the environment (endpoint, names, keys) is this test's.
    code = (
        example.replace("import lance\n", "import s3ddb as lance\n", 1)
        .replace("http://localhost:4566", base["endpoint_url"])
        .replace("my-bucket/events", f"{TEST_BUCKET}/{prefix}")
        .replace("my-table", TEST_TABLE)
        .replace('"ACCESS_KEY"', repr(base["aws_access_key_id"]))
        .replace('"SECRET_KEY"', repr(base["aws_secret_access_key"]))
    )
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/pylance.md", "exec"), namespace)
    ds = namespace["ds"]
    assert ds.to_table().to_pydict() == {"id": [10, 11], "kind": ["x", "y"]}
    # 1 create, 2 append, 3 commit(Append), 4 delete, 5 merge, 6 restore, 7 overwrite;
    # cleanup keeps the tagged version 4 and the newest.
    assert ds.version == 7 and namespace["stats"].old_versions == 5
    assert [v["version"] for v in ds.versions()] == [4, 7]
    assert ds.checkout_version("before-merge").to_table().column("id").to_pylist() == [
        2, 3, 4, 5, 6
    ]  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "6 {'id': [4, 5, 6]}"
    assert out[1] == "[{'id': 2, 'kind': 'b'}]"
    assert out[2] == "2 [{'id': 1, 'kind': 'a'}, {'id': 6, 'kind': 'f'}]"
    assert out[3] == "[1, 2, 3, 4, 5]"


def test_overwrite_in_pylance_order_is_refused_with_the_order_to_use() -> None:
    """``s3ddb.Overwrite`` takes ``(fragments, schema)``; pylance's order belongs to
    ``LanceOperation.Overwrite``, and the error says so instead of a generic one."""
    schema = pa.schema([pa.field("id", pa.int64())])
    with pytest.raises(s3ddb.InvalidInputError, match=r"LanceOperation\.Overwrite\(new_schema"):
        s3ddb.Overwrite(schema, [])
    op = s3ddb.LanceOperation.Overwrite(schema, [])
    assert op.schema.arrow == schema
