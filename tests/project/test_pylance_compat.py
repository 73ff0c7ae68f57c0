"""pylance-shaped calls (docs/pylance.md): storage option names, operations built as
pylance builds them, scanners, head/take, versions as dicts, tags, cleanup names; on a
local path and on the local AWS endpoint (S3 without conditional writes + DynamoDB).
The docs' pylance S3 + DynamoDB example runs with only its import changed."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb
from s3ddb.errors import (
    InvalidInputError,
    RetryableCommitConflictError,
    UnsupportedOperationError,
)
from tests.conftest import TEST_BUCKET, TEST_TABLE

DOC = Path(__file__).resolve().parents[2] / "docs" / "pylance.md"


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


@pytest.mark.parametrize(
    "indices, shown",
    [
        ([1.7], "float 1.7"),
        (["3"], "str '3'"),
        ([True], "bool True"),
        ([np.int64(1), np.bool_(True)], "bool"),
        ([None], "NoneType None"),
        (np.array([2.0**63]), "numpy array of float64"),
        (np.array([True]), "numpy array of bool"),
        (np.array([[0, 1]]), "2-dimensional"),
        (pa.array([1, None]), "1 null"),
        (pa.array([1.0]), "pyarrow array of double"),
        (pa.array(["1"]), "pyarrow array of string"),
        ("01", "got str '01'"),
        (3, "got int 3"),
        ([2**70], "position 1180591620717411303424 is out of range"),
        (np.array([2**64 - 1], np.uint64), "position 18446744073709551615 is out of range"),
        (pa.array([-1], pa.int8()), "position -1 is out of range"),
    ],
)
def test_take_accepts_only_integer_positions(tmp_path: Path, indices: Any, shown: str) -> None:
    # numpy / Python would turn 1.7, "3" or True into a row position without a word.
    ds = s3ddb.write_dataset(_rows(list(range(10))), str(tmp_path / "ds"))
    with pytest.raises(InvalidInputError, match=re.escape(shown)):
        ds.take(indices)
    with pytest.raises(InvalidInputError, match=re.escape(shown)):
        ds.scanner().take(indices)


def test_take_accepts_what_pylance_take_accepts(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(list(range(5))), uri)
    s3ddb.write_dataset(_rows(list(range(5, 10))), uri, mode="append")
    ds = s3ddb.dataset(uri)
    for indices in (
        [7, 2, 2],
        (7, 2, 2),
        [np.int32(7), np.uint8(2), 2],
        np.array([7, 2, 2], np.uint16),
        pa.array([7, 2, 2], pa.uint64()),
        pa.chunked_array([[7], [2, 2]], pa.int8()),
    ):
        assert ds.take(indices)["id"].to_pylist() == [7, 2, 2], indices
        assert ds.scanner(filter="id > 0").take(indices)["id"].to_pylist() == [8, 3, 3]
    for empty in ([], np.array([]), pa.array([])):
        assert ds.take(empty).num_rows == 0 and ds.take(empty).schema == ds.schema


def test_take_without_columns_keeps_the_row_count(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(list(range(10))), uri, max_rows_per_group=3)
    s3ddb.write_dataset(_rows(list(range(10, 15))), uri, mode="append")
    ds = s3ddb.dataset(uri)
    ds.delete("id = 2")
    assert ds.to_table(columns=[]).num_rows == 14
    got = ds.take([0, 1, 13, 1], columns=[])
    assert (got.num_rows, got.num_columns) == (4, 0)
    got = ds.scanner(columns=[], filter="id > 4").take([0, 9])
    assert (got.num_rows, got.num_columns) == (2, 0)
    with pytest.raises(InvalidInputError, match="out of range"):
        ds.take([14], columns=[])
    assert ds.get_fragment(1).take([4], columns=[]).num_rows == 1


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
    assert op == s3ddb.operations.Overwrite(fragments, schema)
    assert op == s3ddb.operations.Overwrite(new_schema=schema, fragments=fragments)
    assert isinstance(op.schema, s3ddb.format.schema.DatasetSchema)
    with pytest.raises(InvalidInputError, match="needs a schema"):
        s3ddb.operations.Overwrite(fragments)
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
    # A fence may carry words after "python" (a no-run marker): the code starts below.
    return [b.split("\n", 1)[1].split("```", 1)[0] for b in text.split("```python")[1:]]


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
    """``s3ddb.operations.Overwrite`` takes ``(fragments, schema)``; pylance's order belongs to
    ``LanceOperation.Overwrite``, and the error says so instead of a generic one."""
    schema = pa.schema([pa.field("id", pa.int64())])
    with pytest.raises(s3ddb.InvalidInputError, match=r"LanceOperation\.Overwrite\(new_schema"):
        s3ddb.operations.Overwrite(schema, [])
    op = s3ddb.LanceOperation.Overwrite(schema, [])
    assert op.schema.arrow == schema


def test_lance_dataset_opens_as_pylance_and_changes_return_what_pylance_returns(
    target: tuple[str, Any],
) -> None:
    uri, so = target
    ds = s3ddb.LanceDataset(uri, storage_options=so, index_cache_size_bytes=1 << 20)
    assert (ds.version, ds.count_rows()) == (4, 29)
    assert s3ddb.LanceDataset(uri, version=2, storage_options=so).count_rows() == 20
    with pytest.raises(UnsupportedOperationError, match="commit_lock"):
        s3ddb.LanceDataset(uri, commit_lock=object(), storage_options=so)
    assert ds.update_config({"owner": "a", "gone": "x"}) == {"owner": "a", "gone": "x"}
    assert ds.update_config({"gone": None}) == {"owner": "a"}
    assert ds.config() == ds.config == {"owner": "a"}
    assert ds.delete_config_keys(["owner"]) is None and ds.config() == {}
    old = ds.checkout_version(2)
    assert isinstance(old, s3ddb.LanceDataset) and old.restore() is None
    assert old.version == 8 and old.count_rows() == 20
    assert ds.insert(_rows([100]), mode="append") is None and ds.count_rows() == 21
    fragments = s3ddb.fragment.write_fragments(_rows([200]), uri, storage_options=so)
    committed = s3ddb.LanceDataset.commit(
        uri, s3ddb.LanceOperation.Append(fragments), read_version=ds.version, storage_options=so
    )
    assert isinstance(committed, s3ddb.LanceDataset) and committed.count_rows() == 22
    with pytest.raises(UnsupportedOperationError, match="detached"):
        s3ddb.LanceDataset.commit(uri, s3ddb.LanceOperation.Append(fragments), detached=True)


class _Progress:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def begin(self, fragment: s3ddb.FragmentMetadata) -> None:
        self.events.append(("begin", fragment.physical_rows, len(fragment.files)))

    def complete(self, fragment: s3ddb.FragmentMetadata) -> None:
        self.events.append(("complete", fragment.physical_rows, len(fragment.files)))


def test_write_arguments_of_pylance_apply_or_are_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    progress = _Progress()
    ds = s3ddb.write_dataset(
        _rows(list(range(10))), uri, None, "create", max_rows_per_file=6,
        max_rows_per_group=4, progress=progress, data_storage_version="stable",
        data_cache_bytes=1 << 20,
    )  # fmt: skip
    assert progress.events == [
        ("begin", 6, 1), ("complete", 6, 1), ("begin", 4, 1), ("complete", 4, 1)
    ]  # fmt: skip
    first = ds.get_fragment(0)
    assert first is not None and first.physical_rows == 6
    path = first.data_files()[0].path
    assert pq.ParquetFile(str(tmp_path / "ds" / "data" / path)).metadata.num_row_groups == 2
    assert ds.data_storage_version == "parquet"
    for refused in (
        {"data_storage_version": "2.1"},
        {"commit_lock": object()},
        {"enable_stable_row_ids": True},
        {"max_bytes_per_file": 1024},
    ):
        [name] = refused
        with pytest.raises(UnsupportedOperationError, match=name):
            s3ddb.write_dataset(_rows([1]), uri, mode="append", **refused)
    with pytest.raises(TypeError, match="no_such_argument"):
        s3ddb.write_dataset(_rows([1]), uri, mode="append", no_such_argument=1)
    with pytest.raises(InvalidInputError, match="mode= by name"):
        s3ddb.write_dataset(_rows([1]), uri, "append")  # type: ignore[arg-type]
    assert s3ddb.dataset(uri).version == 1


def test_write_fragments_returns_a_transaction_to_commit(target: tuple[str, Any]) -> None:
    uri, so = target
    txn = s3ddb.fragment.write_fragments(
        _rows([70, 71]), uri, return_transaction=True, storage_options=so
    )
    assert isinstance(txn, s3ddb.Transaction) and txn.read_version == 4
    assert isinstance(txn.operation, s3ddb.operations.Append)
    ds = s3ddb.LanceDataset.commit(uri, txn, storage_options=so)
    assert ds.version == 5 and ds.count_rows("id >= 70") == 2
    txn = s3ddb.fragment.write_fragments(
        _rows([80]), uri, mode="overwrite", return_transaction=True, storage_options=so,
        max_rows_per_group=1,
    )  # fmt: skip
    assert isinstance(txn, s3ddb.Transaction)
    assert isinstance(txn.operation, s3ddb.operations.Overwrite)
    ds = s3ddb.Dataset.commit(uri, txn, storage_options=so)
    assert ds.to_table().column("id").to_pylist() == [80]
    with pytest.raises(UnsupportedOperationError, match="target_bases"):
        s3ddb.fragment.write_fragments(_rows([1]), uri, target_bases=["b"], storage_options=so)


def test_dataset_members_pylance_code_calls(target: tuple[str, Any]) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    behind = s3ddb.dataset(uri, version=2, storage_options=so)
    assert behind.checkout_latest() is None and behind.version == 4
    assert not ds.has_index and ds.describe_indices() == []
    ds.create_scalar_index("id")
    [index] = ds.describe_indices()
    assert (index.name, index.index_type, index.field_names) == ("id_idx", "BTree", ["id"])
    assert index.num_rows_indexed == 29 and ds.has_index
    assert ds.list_indices()[0]["type"] == "BTree"
    ds.insert(_rows([500]))
    stats = ds.index_statistics("id_idx")
    assert (stats["num_indexed_rows"], stats["num_unindexed_rows"]) == (29, 1)
    assert ds.stats.index_stats("id_idx") == stats
    with pytest.raises(InvalidInputError, match="no index named 'nope'"):
        ds.index_statistics("nope")
    assert ds.stats.dataset_stats() == {
        "num_deleted_rows": 1, "num_fragments": 4, "num_small_files": 4
    }  # fmt: skip
    assert ds.update_schema_metadata({"a": "1", "b": "2"}) == {"a": "1", "b": "2"}
    assert ds.update_schema_metadata({"a": None}) == {"b": "2"} == ds.schema_metadata
    assert ds.update_metadata({"team": "x"}) == {"team": "x"} == ds.metadata
    assert ds.fragment_ids() == [0, 1, 2, 3] and ds.get_fragment(99) is None
    fragment = ds.get_fragment(0)
    assert fragment is not None and fragment.count_rows() == 9 and fragment.num_deletions == 1
    assert fragment.take([5]).column("id").to_pylist() == [6]
    assert ds.get_version()["metadata"]["total_rows"] == "30"
    assert ds.slice(2, 4).column("id").to_pylist() == [2, 3]
    ds.validate()
    with pytest.raises(UnsupportedOperationError, match="branches"):
        ds.create_branch("b")
    with pytest.raises(UnsupportedOperationError, match="lance_schema"):
        ds.lance_schema  # noqa: B018
    with pytest.raises(AttributeError):
        ds.no_such_member  # type: ignore[attr-defined]  # noqa: B018


def test_validate_names_a_missing_data_file(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows([1, 2]), uri)
    ds.validate()
    [data_file] = ds.get_fragments()[0].files
    (tmp_path / "ds" / "data" / data_file.path).unlink()
    with pytest.raises(s3ddb.DataFileMissingError, match=data_file.path):
        ds.validate()


def test_dataset_takes_pylance_open_arguments(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows([1, 2]), uri)
    ds = s3ddb.dataset(uri, block_size=4096, index_cache_size_bytes=1 << 20)
    assert ds.count_rows() == 2
    with pytest.raises(UnsupportedOperationError, match="session"):
        s3ddb.dataset(uri, session=object())
    with pytest.raises(TypeError, match="no_such_argument"):
        s3ddb.dataset(uri, no_such_argument=1)


def test_a_column_named_twice_is_refused_by_scans_and_read_once_by_take(
    tmp_path: Path,
) -> None:
    # As pylance: its scans refuse a duplicate name ("Duplicate column name"), its
    # take returns the column once.
    ds = s3ddb.write_dataset(_rows(list(range(5))), str(tmp_path / "ds"))
    for columns in (["id", "id"], ["kind", "id", "kind"]):
        twice = re.escape(repr(sorted({c for c in columns if columns.count(c) > 1})))
        with pytest.raises(InvalidInputError, match=f"{twice} given more than once"):
            ds.to_table(columns=columns)
        with pytest.raises(InvalidInputError, match=twice):
            ds.scanner(columns=columns)
        with pytest.raises(InvalidInputError, match=twice):
            list(ds.to_batches(columns=columns))
        with pytest.raises(InvalidInputError, match=twice):
            ds.get_fragment(0).to_table(columns=columns)
    got = ds.take([3, 1], columns=["kind", "id", "kind"])
    assert got.to_pylist() == [{"kind": "k0", "id": 3}, {"kind": "k1", "id": 1}]


def test_the_docs_scanner_row_says_what_the_scanner_has_and_refuses(tmp_path: Path) -> None:
    # The overview table once listed `take` on a scanner as No while the scanner had it.
    [row] = [line for line in DOC.read_text().splitlines() if line.startswith("| `ds.scanner(")]
    has, refused = row.split("the scanner has", 1)[1].split(";", 1)
    has_names = re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", has))  # notes left out
    refused_names = re.findall(r"`(\w+)`", refused.split(": No", 1)[0])
    assert "take" in has_names and "take" not in refused_names
    assert refused_names == ["explain_plan", "analyze_plan"]
    scanner = s3ddb.write_dataset(_rows([1, 2]), str(tmp_path / "ds")).scanner()
    for name in has_names:
        assert hasattr(scanner, name), name
    assert scanner.take([1])["id"].to_pylist() == [2]
    for name in refused_names:
        with pytest.raises(UnsupportedOperationError):
            getattr(scanner, name)()
