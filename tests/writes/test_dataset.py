"""The public dataset API on local and in-memory datasets."""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import s3ddb
import s3ddb.fragment
from s3ddb.errors import (
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    ManifestCorruptError,
    SchemaMismatchError,
    VersionNotFoundError,
)
from s3ddb.maintenance.verify import verify
from tests.conftest import make_table


def _objects(uri: str) -> set[str]:
    from s3ddb.io import ObjectStore

    return {m.path for m in ObjectStore(uri).list("")}


def test_create_append_overwrite_and_history(any_uri: str) -> None:
    ds = s3ddb.write_dataset(make_table(0, 10), any_uri)
    assert (ds.version, ds.count_rows()) == (1, 10)
    ds = s3ddb.write_dataset(make_table(10, 5), any_uri, mode="append")
    assert (ds.version, ds.count_rows()) == (2, 15)
    assert ds.to_table().column("id").to_pylist() == list(range(15))
    ds = s3ddb.write_dataset(make_table(100, 3), any_uri, mode="overwrite")
    assert (ds.version, ds.count_rows()) == (3, 3)
    history = ds.versions()
    assert [v.version for v in history] == [1, 2, 3]
    assert [v.operation for v in history] == ["Overwrite", "Append", "Overwrite"]
    assert all(v.timestamp.year >= 2024 for v in history)
    assert history[0].timestamp <= history[1].timestamp <= history[2].timestamp


def test_reads_are_pinned_to_a_version(any_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 4), any_uri)
    pinned = s3ddb.dataset(any_uri)
    s3ddb.write_dataset(make_table(4, 4), any_uri, mode="append")
    assert pinned.version == 1 and pinned.count_rows() == 4
    assert pinned.to_table().num_rows == 4
    assert pinned.latest_version == 2
    assert s3ddb.dataset(any_uri).count_rows() == 8
    assert s3ddb.dataset(any_uri, version=1).to_table().equals(pinned.to_table())
    assert pinned.checkout_version(2).count_rows() == 8


def test_projection_filter_and_batches(any_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 50), any_uri, max_rows_per_file=7)
    ds = s3ddb.dataset(any_uri)
    assert len(ds.get_fragments()) == 8
    t = ds.to_table(columns=["name"], filter=pc.field("id") >= 45)
    assert t.column_names == ["name"]
    assert t.column("name").to_pylist() == [f"row-{i}" for i in range(45, 50)]
    assert ds.count_rows(pc.field("id") < 10) == 10
    batches = list(ds.to_batches(columns=["id"]))
    assert sum(b.num_rows for b in batches) == 50
    assert [v for b in batches for v in b.column(0).to_pylist()] == list(range(50))
    assert ds.to_table(limit=3, offset=2).column("id").to_pylist() == [2, 3, 4]
    assert ds.to_table(columns=[]).num_rows == 50


def test_sql_filter_strings(local_uri: str) -> None:
    pytest.importorskip("sqlglot")
    s3ddb.write_dataset(make_table(0, 20), local_uri)
    ds = s3ddb.dataset(local_uri)
    assert ds.count_rows("id < 10 AND name = 'row-3'") == 1
    assert ds.to_table(filter="id >= 18").column("id").to_pylist() == [18, 19]


def test_insert_moves_the_dataset_to_its_commit(local_uri: str) -> None:
    ds = s3ddb.write_dataset(make_table(0, 3), local_uri)
    ds.insert(make_table(3, 2))
    assert (ds.version, ds.count_rows()) == (2, 5)
    ds.insert(make_table(9, 1), mode="overwrite")
    assert (ds.version, ds.to_table().column("id").to_pylist()) == (3, [9])
    with pytest.raises(InvalidInputError):
        ds.insert(make_table(0, 1), mode="upsert")  # type: ignore[arg-type]


def test_insert_from_a_stale_snapshot_rebases_appends(local_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 3), local_uri)
    a = s3ddb.dataset(local_uri)
    b = s3ddb.dataset(local_uri)
    a.insert(make_table(3, 1))
    b.insert(make_table(4, 1))  # read version 1, lands as version 3
    assert b.version == 3
    assert sorted(s3ddb.dataset(local_uri).to_table().column("id").to_pylist()) == [0, 1, 2, 3, 4]


def test_restore_makes_an_old_version_latest(local_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 3), local_uri)
    s3ddb.write_dataset(make_table(3, 3), local_uri, mode="append")
    old = s3ddb.dataset(local_uri, version=1)
    old.restore()
    latest = s3ddb.dataset(local_uri)
    assert latest.version == 3 and latest.count_rows() == 3
    assert latest.versions()[-1].operation == "Restore"


def test_input_types(tmp_path: Path) -> None:
    base = make_table(0, 4)
    inputs = {
        "table": base,
        "batch": base.to_batches()[0],
        "reader": pa.RecordBatchReader.from_batches(base.schema, base.to_batches()),
        "pandas": base.to_pandas(),
        "pydict": base.to_pydict(),
        "pylist": base.to_pylist(),
    }
    for name, data in inputs.items():
        ds = s3ddb.write_dataset(data, str(tmp_path / name))
        got = ds.to_table()
        assert got.column("id").to_pylist() == [0, 1, 2, 3], name
        assert got.column("name").to_pylist() == base.column("name").to_pylist(), name
    assert isinstance(s3ddb.dataset(str(tmp_path / "pandas")).to_pandas(), pd.DataFrame)
    with pytest.raises(InvalidInputError, match="unsupported data type"):
        s3ddb.write_dataset(42, str(tmp_path / "bad"))


@pytest.mark.parametrize(
    "data", [[], {}, pa.table({})], ids=["empty list", "empty dict", "table without column"]
)
def test_data_without_a_column_makes_an_empty_dataset(tmp_path: Path, data: Any) -> None:
    """As pylance does: no fragment, no row, and every read and check agrees. (pyarrow
    gives a table without column as many rows as a slice asks for: the dataset used to
    record a million rows no file held.)"""
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(data, uri)
    assert (ds.version, ds.count_rows(), ds.to_table().num_rows) == (1, 0, 0)
    assert s3ddb.dataset(uri).manifest.fragments == []
    assert verify(uri, grace_seconds=0).problems == []


def test_rows_without_a_column_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="5 rows and no column"):
        s3ddb.write_dataset(pa.table({}).slice(0, 5), str(tmp_path / "ds"))
    with pytest.raises(InvalidInputError, match="3 rows and no column"):  # it gave []
        s3ddb.fragment.write_fragments(pa.table({}).slice(0, 3), str(tmp_path / "ds"))
    with pytest.raises(s3ddb.DatasetNotFoundError):
        s3ddb.dataset(str(tmp_path / "ds"))


def test_to_pandas_without_pandas_says_how_to_install_it(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = s3ddb.write_dataset(make_table(0, 4), local_uri)
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed
    fragment = ds.get_fragment(0)
    assert fragment is not None
    for call in (ds.to_pandas, ds.scanner().to_pandas, fragment.to_pandas):
        with pytest.raises(ModuleNotFoundError, match=re.escape('pip install "s3ddb[pandas]"')):
            call()


def test_append_to_missing_dataset_creates_it(local_uri: str) -> None:
    ds = s3ddb.write_dataset(make_table(0, 2), local_uri, mode="append")
    assert ds.version == 1 and ds.count_rows() == 2


def test_file_uri_and_v1_naming(tmp_path: Path) -> None:
    uri = "file://" + str(tmp_path / "v1")
    s3ddb.write_dataset(make_table(0, 2), uri, enable_v2_manifest_paths=False)
    for i in range(11):
        s3ddb.write_dataset(make_table(10 + i, 1), uri, mode="append")
    names = sorted(os.listdir(tmp_path / "v1" / "_versions"))
    assert "1.manifest" in names and "12.manifest" in names
    ds = s3ddb.dataset(uri)
    assert ds.version == 12 and ds.count_rows() == 13  # 12 > 9: lexical order is not version order
    assert ds.manifest.naming_scheme is s3ddb.format.naming.NamingScheme.V1  # type: ignore[attr-defined]
    assert s3ddb.dataset(uri, version=2).count_rows() == 3


def test_v2_naming_is_the_default(local_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 1), local_uri)
    assert os.listdir(Path(local_uri) / "_versions") == ["18446744073709551614.manifest"]


def test_tags(local_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 1), local_uri)
    ds = s3ddb.write_dataset(make_table(1, 1), local_uri, mode="append")
    ds.tags.create("first", 1)
    assert ds.tags.list() == {"first": 1}
    assert s3ddb.dataset(local_uri, version="first").count_rows() == 1
    with pytest.raises(InvalidInputError, match="already exists"):
        ds.tags.create("first", 2)
    missing = r"version 7 of .* does not exist \(latest is 2\)"
    with pytest.raises(VersionNotFoundError, match=missing):
        ds.tags.create("nope", 7)
    for bad in ("1", 1.0, True, 0):  # a string was a bare TypeError
        for verb in (ds.tags.create, ds.tags.update):
            with pytest.raises(InvalidInputError, match="version must be an int >= 1"):
                verb("first" if verb == ds.tags.update else "other", bad)  # type: ignore[arg-type]
    assert ds.tags.list() == {"first": 1}
    ds.tags.delete("first")
    with pytest.raises(VersionNotFoundError, match="no tag"):
        s3ddb.dataset(local_uri, version="first")


# --- bad input: typed errors, nothing committed, nothing orphaned ----------------------


def test_create_over_existing_dataset(any_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 2), any_uri)
    before = _objects(any_uri)
    with pytest.raises(DatasetAlreadyExistsError, match="already exists") as info:
        s3ddb.write_dataset(make_table(5, 2), any_uri, mode="create")
    assert isinstance(info.value, FileExistsError)
    assert _objects(any_uri) == before
    assert s3ddb.dataset(any_uri).version == 1


def test_append_with_mismatched_schema(any_uri: str) -> None:
    s3ddb.write_dataset(make_table(0, 2), any_uri)
    before = _objects(any_uri)
    bad = pa.table({"id": ["not", "ints"], "name": ["a", "b"]})
    with pytest.raises(SchemaMismatchError, match="column 'id' is string") as info:
        s3ddb.write_dataset(bad, any_uri, mode="append")
    assert isinstance(info.value, ValueError)
    with pytest.raises(SchemaMismatchError, match="unexpected columns"):
        s3ddb.dataset(any_uri).insert(make_table(0, 1).append_column("x", pa.array([1])))
    assert _objects(any_uri) == before
    assert s3ddb.dataset(any_uri).version == 1


def test_missing_dataset_and_version(any_uri: str) -> None:
    with pytest.raises(DatasetNotFoundError, match="no dataset") as info:
        s3ddb.dataset(any_uri)
    assert isinstance(info.value, FileNotFoundError)
    # Asking for a version of a missing dataset says the dataset is missing, in the
    # same words as opening its newest version.
    for version in (1, 0):
        with pytest.raises(
            DatasetNotFoundError, match=r"^no dataset at .* \(no committed version\)$"
        ):
            s3ddb.dataset(any_uri, version=version)
    s3ddb.write_dataset(make_table(0, 1), any_uri)
    with pytest.raises(VersionNotFoundError, match=r"version 5 .* does not exist .*latest is 1"):
        s3ddb.dataset(any_uri, version=5)
    with pytest.raises(VersionNotFoundError):
        s3ddb.dataset(any_uri).checkout_version(0)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_corrupt_latest_manifest(local_uri: str, damage: str) -> None:
    s3ddb.write_dataset(make_table(0, 1), local_uri)
    path = Path(local_uri) / "_versions" / "18446744073709551614.manifest"
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:30] + bytes([data[30] ^ 0xFF]) + data[31:])
    else:
        path.write_bytes(b"")
    with pytest.raises(ManifestCorruptError, match=r"18446744073709551614\.manifest"):
        s3ddb.dataset(local_uri)
    before = _objects(local_uri)
    with pytest.raises(ManifestCorruptError):
        s3ddb.write_dataset(make_table(1, 1), local_uri, mode="append")
    assert _objects(local_uri) == before


def test_bad_arguments(local_uri: str) -> None:
    with pytest.raises(InvalidInputError, match="mode must be"):
        s3ddb.write_dataset(make_table(0, 1), local_uri, mode="upsert")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="unsupported URI scheme"):
        s3ddb.dataset("gs://bucket/x")
    with pytest.raises(InvalidInputError, match="ddbTableName"):
        s3ddb.dataset("s3+ddb://bucket/x")
    with pytest.raises(InvalidInputError, match="unknown storage option"):
        s3ddb.dataset("s3://bucket/x", storage_options={"colour": "blue"})
    s3ddb.write_dataset(make_table(0, 1), local_uri)
    ds = s3ddb.dataset(local_uri)
    with pytest.raises(s3ddb.ColumnNotFoundError, match="nope"):
        ds.to_table(columns=["nope"])


def test_an_existing_tag_is_not_moved_on_a_store_that_ignores_if_none_match(
    aws: Any, ddb_uri: str
) -> None:
    """s3+ddb:// datasets live on such stores (this endpoint drops the header): a
    second create of a tag moved it (the put replaced it)."""
    so = aws.storage_options()
    s3ddb.write_dataset(make_table(0, 3), ddb_uri, storage_options=so)
    ds = s3ddb.write_dataset(make_table(3, 3), ddb_uri, mode="append", storage_options=so)
    ds.tags.create("release", 1)
    with pytest.raises(InvalidInputError, match="already exists"):
        ds.tags.create("release", 2)
    assert ds.tags.list() == {"release": 1}
    # A missing version is named as the reader named the dataset (not its s3:// root).
    with pytest.raises(VersionNotFoundError, match=re.escape(f"version 9 of {ddb_uri} does")):
        ds.tags.create("later", 9)


def test_a_tag_looks_its_version_up_again_in_one_round_trip(aws: Any, ddb_uri: str) -> None:
    """After writing a tag, its version is looked up again (so that cleanup cannot
    remove a version a new tag names): the row and the manifest at its final name are
    asked for side by side. The row's request is held here until the manifest's has
    started, which never happens if the manifest is asked for only after the row."""
    so = aws.storage_options()
    s3ddb.write_dataset(make_table(0, 3), ddb_uri, storage_options=so)
    s3ddb.write_dataset(make_table(3, 3), ddb_uri, mode="append", storage_options=so)
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    tag_written = threading.Event()
    manifest_asked = threading.Event()
    held: list[bool] = []

    def on_s3(request: Any, **_: Any) -> None:
        if request.method == "PUT" and "/_refs/tags/" in request.url:
            tag_written.set()
        elif request.method == "HEAD" and "/_versions/" in request.url:
            manifest_asked.set()

    def on_dynamodb(request: Any, **_: Any) -> None:
        if tag_written.is_set() and not held:
            held.append(manifest_asked.wait(10.0))

    aws_config = ds.handler.store.aws
    s3, dynamodb = aws_config.client("s3"), aws_config.client("dynamodb", max_attempts=1)
    s3.meta.events.register("before-send.s3", on_s3, unique_id="tag-probe")
    dynamodb.meta.events.register("before-send.dynamodb", on_dynamodb, unique_id="tag-probe")
    try:
        ds.tags.create("first", 1)
    finally:
        s3.meta.events.unregister("before-send.s3", unique_id="tag-probe")
        dynamodb.meta.events.unregister("before-send.dynamodb", unique_id="tag-probe")
    assert held == [True], "the manifest was asked for only after the row"
    assert s3ddb.dataset(ddb_uri, storage_options=so).tags.get("first") == 1
