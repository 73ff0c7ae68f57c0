"""The native read's planner without a JVM: URI mapping for the JVM, what it refuses,
and stored files checked as untrusted input before Spark reads them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb
import s3ddb.fragment
from s3ddb.errors import (
    DataFileError,
    DataFileMissingError,
    InvalidInputError,
    ManifestCorruptError,
)
from s3ddb.format import layout
from s3ddb.io.object_store import ObjectStore
from s3ddb.spark_ext._options import SourceOptions
from s3ddb.spark_ext.native_plan import jvm_path, native_type_problem, plan_native_read
from tests.conftest import TEST_BUCKET, TEST_TABLE


def _table(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"s{i}" for i in range(n)]})


def _data_file(uri: str) -> Path:
    fragment = s3ddb.dataset(uri).get_fragments()[0]
    return Path(uri) / layout.data_file_path(fragment.files[0].path)


# --- where the JVM reads files --------------------------------------------------------


def test_s3_objects_map_to_s3a_by_default_and_as_configured() -> None:
    store = ObjectStore("s3+ddb://bucket-1/events/2024?ddbTableName=t")
    path = layout.data_file_path("abc.parquet")
    assert jvm_path(store, path, {"s3": "s3a"}) == "s3a://bucket-1/events/2024/data/abc.parquet"
    assert jvm_path(store, path, {"s3": "s3"}) == "s3://bucket-1/events/2024/data/abc.parquet"
    assert jvm_path(store, path, {}) == "s3a://bucket-1/events/2024/data/abc.parquet"


def test_local_files_map_to_file_urls_with_glob_characters_escaped(tmp_path: Path) -> None:
    root = tmp_path / "a b%41[x]{y}*?"
    store = ObjectStore(str(root))
    url = jvm_path(store, layout.data_file_path("f.parquet"), {})
    escaped = str(root).replace("[", "\\[").replace("]", "\\]").replace("{", "\\{")
    escaped = escaped.replace("}", "\\}").replace("*", "\\*").replace("?", "\\?")
    assert url == f"file://{escaped}/data/f.parquet"


def test_memory_stores_are_not_readable_by_the_jvm(memory_uri: str) -> None:
    s3ddb.write_dataset(_table(3), memory_uri)
    plan = plan_native_read(s3ddb.dataset(memory_uri))
    assert plan.refused == "the JVM cannot read memory:// files"
    assert jvm_path(ObjectStore(memory_uri), "data/x.parquet", {}) is None


# --- what the plan refuses ------------------------------------------------------------


def test_types_spark_reads_differently_are_refused() -> None:
    assert native_type_problem(pa.timestamp("ns")) == "ns timestamps"
    assert native_type_problem(pa.uint32()) == "type uint32"
    assert native_type_problem(pa.list_(pa.int64())) is not None
    for ok in (pa.int8(), pa.int64(), pa.float64(), pa.string(), pa.date32(),
               pa.timestamp("us", tz="UTC"), pa.decimal128(10, 2), pa.bool_()):  # fmt: skip
        assert native_type_problem(ok) is None


def test_names_equal_but_for_case_are_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"a": [1], "A": [2]}), uri)
    plan = plan_native_read(s3ddb.dataset(uri))
    assert plan.refused is not None and "case" in plan.refused
    # Reading one of them is still ambiguous to Spark: the file holds both.
    assert "but for case" in str(plan_native_read(s3ddb.dataset(uri), ["a"]).refused)


def test_plan_groups_fragments_by_shape(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(40), uri, max_rows_per_file=10)
    ds.delete("id IN (1, 2, 15)")
    ds.alter_columns({"path": "s", "name": "label"})
    plan = plan_native_read(s3ddb.dataset(uri))
    assert plan.refused is None and [f.name for f in plan.columns] == ["id", "label"]
    with_deletions = [s for s in plan.shapes if s.deleted]
    assert len(plan.shapes) == 2 and len(with_deletions) == 1
    assert sorted(len(v) for v in with_deletions[0].deleted.values()) == [1, 2]
    assert with_deletions[0].num_deleted == 3
    (slot,) = plan.shapes[0].slots
    assert [(c.name, c.physical) for c in slot] == [("id", "id"), ("label", "s")]
    assert plan_native_read(s3ddb.dataset(uri), ["label"]).shapes[0].slots[0][0].physical == "s"


def test_pinned_version_is_planned(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(10), uri)
    ds.insert(_table(5))
    plan = plan_native_read(s3ddb.dataset(uri, 1))
    assert plan.version == 1
    assert sum(len(s.fragments) for s in plan.shapes) == 1


# --- stored files are untrusted input -------------------------------------------------


def test_a_data_file_with_another_row_count_fails_the_plan(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_table(10), uri)
    path = _data_file(uri)
    pq.write_table(pq.read_table(path).slice(0, 7), path)  # field ids kept, 7 rows
    with pytest.raises(DataFileError, match="holds 7 rows, its fragment records 10") as info:
        plan_native_read(s3ddb.dataset(uri))
    assert path.name in str(info.value)


def test_a_data_file_without_a_declared_column_fails_the_plan(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_table(10), uri)
    path = _data_file(uri)
    pq.write_table(pq.read_table(path).select(["id"]), path)
    with pytest.raises(DataFileError, match="field id 1"):
        plan_native_read(s3ddb.dataset(uri))


def test_garbage_or_missing_data_files_fail_the_plan(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_table(10), uri)
    path = _data_file(uri)
    path.write_bytes(b"not parquet at all")
    with pytest.raises(DataFileError, match="not a readable Parquet file"):
        plan_native_read(s3ddb.dataset(uri))
    path.unlink()
    with pytest.raises(DataFileMissingError):
        plan_native_read(s3ddb.dataset(uri))


def test_a_corrupt_deletion_file_fails_the_plan(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(10), uri)
    ds.delete("id = 3")
    (deletion,) = (Path(uri) / "_deletions").rglob("*.*")
    deletion.write_bytes(b"\x00garbage")
    with pytest.raises(ManifestCorruptError, match="deletion file"):
        plan_native_read(s3ddb.dataset(uri))


# --- the Python source's projection options --------------------------------------------


def test_columns_option_is_parsed() -> None:
    parsed = SourceOptions.parse({"path": "/tmp/x", "columns": "b, a ,c"})
    assert parsed.columns == ("b", "a", "c")
    assert parsed.storage_options == {}
    assert SourceOptions.parse({"path": "/tmp/x"}).columns is None
    with pytest.raises(InvalidInputError, match="comma-separated"):
        SourceOptions.parse({"path": "/tmp/x", "columns": "a,,b"})


def test_dates_and_timestamps_plan_natively(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    table = pa.table(
        {
            "id": pa.array([1], pa.int64()),
            "d": pa.array([dt.date(2024, 1, 2)]),
            "t": pa.array([dt.datetime(2024, 1, 2, 3)], pa.timestamp("us", tz="UTC")),
        }
    )
    s3ddb.write_dataset(table, uri)
    assert plan_native_read(s3ddb.dataset(uri)).refused is None


# --- a dataset on S3 (the local endpoint) ---------------------------------------------


def test_an_s3_dataset_plans_with_footers_and_deletions_fetched_remotely(aws: Any) -> None:
    opts = dict(aws.storage_options())
    uri = f"s3+ddb://{TEST_BUCKET}/plan-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    ds = s3ddb.write_dataset(_table(40), uri, max_rows_per_file=10, storage_options=opts)
    ds.delete("id % 4 = 1")
    ds.alter_columns({"path": "s", "name": "label"})
    plan = plan_native_read(s3ddb.dataset(uri, storage_options=opts), scheme_map={"s3": "s3"})
    assert plan.refused is None
    (shape,) = plan.shapes
    assert len(shape.fragments) == 4 and shape.num_deleted == 10
    assert all(p.path.startswith(f"s3://{TEST_BUCKET}/plan-") for (p,) in shape.fragments)
    assert [(c.name, c.physical) for c in shape.slots[0]] == [("id", "id"), ("label", "s")]

    # A data file replaced by one of another row count is caught from its footer.
    store = ObjectStore(uri, opts)
    data_file = s3ddb.dataset(uri, storage_options=opts).get_fragments()[0].files[0]
    path = layout.data_file_path(data_file.path)
    buffer = io.BytesIO()
    pq.write_table(pq.read_table(io.BytesIO(store.get(path))).slice(0, 3), buffer)
    store.put(path, buffer.getvalue())
    with pytest.raises(DataFileError, match="holds 3 rows, its fragment records 10"):
        plan_native_read(s3ddb.dataset(uri, storage_options=opts))


def test_files_with_columns_equal_but_for_case_are_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(pa.table({"id": [1], "a": [1], "A": [2]}), uri)
    ds.alter_columns({"path": "A", "name": "z"})  # the file keeps "a" and "A"
    plan = plan_native_read(s3ddb.dataset(uri))
    assert plan.refused == "a data file has several columns named 'a' but for case"
    assert plan_native_read(s3ddb.dataset(uri), ["id"]).refused is None


def test_data_file_names_spark_may_encode_are_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(5), uri)
    (fragment,) = s3ddb.fragment.write_fragments(_table(5), uri, schema=ds.manifest.schema)
    data_file = fragment.files[0]
    odd = "odd name%41.parquet"
    os.rename(Path(uri) / layout.data_file_path(data_file.path), Path(uri) / "data" / odd)
    renamed = dataclasses.replace(fragment, files=(dataclasses.replace(data_file, path=odd),))
    s3ddb.Dataset.commit(uri, s3ddb.operations.Append([renamed]), read_version=ds.version)
    assert s3ddb.dataset(uri).count_rows() == 10  # s3ddb itself reads it
    plan = plan_native_read(s3ddb.dataset(uri))
    assert plan.refused == f"data file name {odd!r} has characters Spark may encode"
