"""Schema evolution (add / drop / alter columns, schema and field metadata) on a local
path and on the local endpoint (DynamoDB): results, time travel, conflicts with
concurrent appends, deletes and restores, and bad input that commits nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import s3ddb
from s3ddb.format import layout
from s3ddb.operations import MapUpdate, Merge, Project, Transaction, UpdateConfig

Target = tuple[str, "dict[str, Any] | None"]


def _table(ids: list[int], names: list[str | None] | None = None) -> pa.Table:
    names = names if names is not None else [f"n{i}" for i in ids]
    return pa.table({"id": pa.array(ids, pa.int32()), "name": pa.array(names, pa.string())})


@pytest.fixture
def target(location: tuple[str, dict[str, Any] | None]) -> Target:
    """A dataset of ids 1..6 in three fragments (two rows each), at version 1."""
    uri, so = location
    s3ddb.write_dataset(_table([1, 2, 3, 4, 5, 6]), uri, storage_options=so, max_rows_per_file=2)
    return uri, so


def _open(target: Target, version: int | None = None) -> s3ddb.Dataset:
    uri, so = target
    return s3ddb.dataset(uri, version, storage_options=so)


def _append(target: Target, table: pa.Table) -> None:
    uri, so = target
    s3ddb.write_dataset(table, uri, mode="append", storage_options=so)


def _data_files(ds: s3ddb.Dataset) -> set[str]:
    return {m.path for m in ds.handler.store.list(layout.DATA_DIR)}


# --- add_columns ---------------------------------------------------------------------------


def test_add_columns_from_sql_gives_each_fragment_one_file(target: Target) -> None:
    ds = _open(target)
    ds.delete("id = 3")
    before = {f.id: f.files for f in ds.get_fragments()}
    ds.add_columns({"double": "id * 2", "label": "upper(name) || '!'"})
    assert ds.version == 3 and ds.manifest.operation == "Merge"
    assert ds.to_table().to_pydict() == {
        "id": [1, 2, 4, 5, 6],
        "name": ["n1", "n2", "n4", "n5", "n6"],
        "double": [2, 4, 8, 10, 12],
        "label": ["N1!", "N2!", "N4!", "N5!", "N6!"],
    }
    for fragment in ds.get_fragments():
        assert fragment.files[:-1] == before[fragment.id]
        assert fragment.files[-1].fields == (2, 3)  # new ids, after id=0 and name=1
    # Time travel: the version before keeps its schema and rows.
    old = _open(target, 2)
    assert old.schema.names == ["id", "name"] and old.count_rows() == 5
    assert _open(target).to_table(filter="double > 8").column("id").to_pylist() == [5, 6]


def test_add_columns_from_aligned_table_and_dataframe(target: Target) -> None:
    ds = _open(target)
    ds.delete("id IN (2, 5)")
    ds.add_columns(pa.table({"score": pa.array([10, 30, 40, 60], pa.int64())}))
    ds.add_columns(pd.DataFrame({"flag": [True, False, True, False]}))
    got = ds.to_table(columns=["id", "score", "flag"]).to_pydict()
    assert got == {
        "id": [1, 3, 4, 6],
        "score": [10, 30, 40, 60],
        "flag": [True, False, True, False],
    }
    assert [v.operation for v in ds.versions()][-2:] == ["Merge", "Merge"]
    assert _open(target, 2).schema.names == ["id", "name"]


def test_dropped_then_re_added_column_never_reads_old_values(target: Target) -> None:
    ds = _open(target)
    ds.add_columns({"x": "id + 100"})
    files_before = [f.files for f in ds.get_fragments()]
    ds.drop_columns(["x"])
    assert ds.manifest.operation == "Project"
    assert [f.files for f in ds.get_fragments()] == files_before  # metadata only
    assert ds.schema.names == ["id", "name"]
    ds.add_columns({"x": "CAST(id AS BIGINT) * 0"})
    assert ds.to_table(columns=["x"]).column("x").to_pylist() == [0] * 6
    assert ds.manifest.schema.field_id("x") == 3  # 2 is still in the older files
    # Each version reads with its own schema.
    assert _open(target, 2).to_table(columns=["x"]).column("x").to_pylist()[:2] == [101, 102]
    assert _open(target, 3).schema.names == ["id", "name"]


def test_appends_after_add_columns_carry_the_new_column(target: Target) -> None:
    ds = _open(target)
    ds.add_columns({"x": "id * 10"})
    row = {"id": pa.array([7], pa.int32()), "name": ["n7"], "x": pa.array([70], pa.int32())}
    _append(target, pa.table(row))
    latest = _open(target)
    assert latest.to_table(filter="id >= 6", columns=["x"]).column("x").to_pylist() == [60, 70]
    latest.optimize.compact_files(target_rows_per_fragment=100)
    assert _open(target).to_table(columns=["x"]).column("x").to_pylist() == [
        10, 20, 30, 40, 50, 60, 70
    ]  # fmt: skip


# --- drop_columns / alter_columns --------------------------------------------------------


def test_drop_columns_time_travel(target: Target) -> None:
    ds = _open(target)
    ds.drop_columns(["name"])
    assert ds.to_table().to_pydict() == {"id": [1, 2, 3, 4, 5, 6]}
    assert _open(target, 1).to_table(columns=["name"]).column("name").to_pylist()[0] == "n1"
    ds.insert(pa.table({"id": pa.array([7], pa.int32())}))
    assert _open(target).count_rows() == 7


def test_alter_columns_rename_nullability_and_safe_cast(target: Target) -> None:
    ds = _open(target)
    ds.alter_columns({"path": "name", "name": "label", "nullable": False})
    assert ds.manifest.operation == "Project"
    assert not ds.schema.field("label").nullable
    ds.alter_columns({"path": "id", "data_type": pa.int64()})
    assert ds.manifest.operation == "Merge"
    assert ds.schema.field("id").type == pa.int64()
    assert ds.to_table(filter="id > 4").to_pydict() == {"id": [5, 6], "label": ["n5", "n6"]}
    assert ds.manifest.schema.field_id("id") == 2  # a new id; old files keep id 0
    assert _open(target, 2).schema.field("id").type == pa.int32()
    assert _open(target, 1).schema.names == ["id", "name"]
    ds.alter_columns({"path": "label", "nullable": True}, {"path": "id", "name": "key"})
    assert ds.to_table().column_names == ["key", "label"] and ds.count_rows() == 6
    ds.update({"label": "NULL"}, where="key = 1")  # nullable again
    assert ds.to_table(filter="label IS NULL").column("key").to_pylist() == [1]


def test_alter_columns_refuses_unsafe_changes_and_commits_nothing(target: Target) -> None:
    ds = _open(target)
    ds.insert(_table([7], [None]))
    version = ds.version
    with pytest.raises(s3ddb.SchemaMismatchError, match=r"'name'.*NULL in 1 visible row"):
        ds.alter_columns({"path": "name", "nullable": False})
    with pytest.raises(s3ddb.UnsafeCastError, match=r"'id'.*int32 to int16"):
        ds.alter_columns({"path": "id", "data_type": pa.int16()})
    with pytest.raises(s3ddb.UnsafeCastError, match="string to int64"):
        ds.alter_columns({"path": "name", "data_type": pa.int64()})
    ds.alter_columns({"path": "id", "data_type": pa.int64()})
    with pytest.raises(s3ddb.UnsafeCastError, match="int64 to double"):
        ds.alter_columns({"path": "id", "data_type": pa.float64()})
    with pytest.raises(s3ddb.ColumnExistsError):
        ds.alter_columns({"path": "id", "name": "name"})
    with pytest.raises(s3ddb.ColumnNotFoundError):
        ds.alter_columns({"path": "nope", "name": "x"})
    with pytest.raises(s3ddb.InvalidInputError, match="unknown keys"):
        ds.alter_columns({"path": "id", "type": pa.int64()})
    with pytest.raises(s3ddb.InvalidInputError, match="altered twice"):
        ds.alter_columns({"path": "id", "name": "a"}, {"path": "id", "nullable": True})
    assert _open(target).version == version + 1
    # The deleted row's NULL does not count: only visible rows are checked.
    ds.delete("name IS NULL")
    ds.alter_columns({"path": "name", "nullable": False})
    assert not _open(target).schema.field("name").nullable


def test_safe_cast_table() -> None:
    from s3ddb.writes.schema_evolution import is_safe_cast

    assert is_safe_cast(pa.int8(), pa.int64()) and is_safe_cast(pa.uint8(), pa.int16())
    assert is_safe_cast(pa.int32(), pa.float64()) and is_safe_cast(pa.float32(), pa.float64())
    assert is_safe_cast(pa.string(), pa.large_string())
    assert is_safe_cast(pa.decimal128(5, 2), pa.decimal128(8, 3))
    assert not is_safe_cast(pa.int64(), pa.float64()) and not is_safe_cast(pa.int32(), pa.float32())
    assert not is_safe_cast(pa.int8(), pa.uint64()) and not is_safe_cast(pa.uint32(), pa.int32())
    assert not is_safe_cast(pa.float64(), pa.float32())
    assert not is_safe_cast(pa.decimal128(5, 2), pa.decimal128(5, 3))


# --- metadata ------------------------------------------------------------------------------


def test_schema_and_field_metadata(target: Target) -> None:
    ds = _open(target)
    ds.replace_schema_metadata({"owner": "team-a"})
    ds.replace_field_metadata("name", {"unit": "text", "pii": "yes"})
    ds.update_config({"k": "v"})  # the existing config path keeps the schema metadata
    latest = _open(target)
    assert latest.schema.metadata == {b"owner": b"team-a"}
    assert latest.schema.field("name").metadata == {b"unit": b"text", b"pii": b"yes"}
    assert latest.config == {"k": "v"}
    ds.replace_field_metadata("name", {})
    ds.replace_schema_metadata({"owner": "team-b"})
    latest = _open(target)
    assert latest.schema.field("name").metadata is None
    assert latest.schema.metadata == {b"owner": b"team-b"}
    assert _open(target, 1).schema.metadata is None
    assert _open(target, 3).schema.field("name").metadata == {b"unit": b"text", b"pii": b"yes"}
    # Metadata survives a rename and a cast (same field, or its replacement).
    ds.alter_columns({"path": "name", "name": "label", "data_type": pa.large_string()})
    ds.replace_field_metadata("label", {"unit": "chars"})
    assert _open(target).schema.field("label").metadata == {b"unit": b"chars"}


# --- conflicts (per docs/conflicts.md) -------------------------------------------------


def test_add_columns_from_sql_re_executes_after_a_concurrent_append(target: Target) -> None:
    stale = _open(target)
    _append(target, _table([7]))
    stale.add_columns({"x": "id * 10"})
    assert stale.last_conflict_retries == 1 and stale.version == 3
    assert stale.to_table(columns=["x"]).column("x").to_pylist()[-2:] == [60, 70]


def test_add_columns_from_sql_re_executes_after_a_concurrent_delete(target: Target) -> None:
    stale = _open(target)
    _open(target).delete("id = 2")
    stale.add_columns({"x": "id * 10"})
    assert stale.to_table(columns=["x"]).column("x").to_pylist() == [10, 30, 40, 50, 60]


def test_add_columns_from_a_table_is_never_re_aligned(target: Target) -> None:
    stale = _open(target)
    _open(target).delete("id = 2")
    files = _data_files(stale)
    with pytest.raises(s3ddb.RetryableCommitConflictError):
        stale.add_columns(pa.table({"x": list(range(6))}))
    assert _open(target).version == 2 and _open(target).schema.names == ["id", "name"]
    assert _data_files(stale) == files  # the failed attempt's files are gone


def test_schema_changes_are_refused_after_a_concurrent_restore(target: Target) -> None:
    ds = _open(target)
    ds.insert(_table([7]))
    stale = _open(target)
    _open(target, 1).restore()
    with pytest.raises(s3ddb.IncompatibleTransactionError):
        stale.add_columns({"x": "id * 10"})
    with pytest.raises(s3ddb.IncompatibleTransactionError):
        stale.drop_columns(["name"])
    latest = _open(target)
    assert latest.version == 3 and latest.schema.names == ["id", "name"]


def test_drop_and_rename_rebase_over_a_concurrent_append_and_delete(target: Target) -> None:
    stale = _open(target)
    _append(target, _table([7]))
    _open(target).delete("id = 1")
    stale.alter_columns({"path": "name", "name": "label"})
    assert stale.last_conflict_retries == 0 and stale.last_commit is not None
    assert stale.last_commit.transaction.read_version == 1  # rebased, not re-planned
    assert stale.to_table().to_pydict() == {
        "id": [2, 3, 4, 5, 6, 7], "label": ["n2", "n3", "n4", "n5", "n6", "n7"]
    }  # fmt: skip
    assert _open(target, 3).schema.names == ["id", "name"]


def test_not_null_re_checks_rows_appended_concurrently(target: Target) -> None:
    stale = _open(target)
    _append(target, _table([7], [None]))
    with pytest.raises(s3ddb.SchemaMismatchError, match="NULL"):
        stale.alter_columns({"path": "name", "nullable": False})
    assert _open(target).schema.field("name").nullable


def test_writes_planned_before_a_schema_change_re_execute(target: Target) -> None:
    stale_delete = _open(target)
    stale_insert = _open(target)
    _open(target).drop_columns(["name"])
    stale_delete.delete("id = 1")  # retried on the new schema: still valid
    assert stale_delete.last_conflict_retries == 1
    with pytest.raises(s3ddb.SchemaMismatchError, match="unexpected columns"):
        stale_insert.insert(_table([9]))  # its rows have a column the schema dropped
    assert _open(target).to_table().column("id").to_pylist() == [2, 3, 4, 5, 6]


def test_metadata_and_schema_changes_do_not_undo_each_other(target: Target) -> None:
    stale = _open(target)
    _open(target).replace_schema_metadata({"owner": "a"})
    stale.add_columns({"x": "id + 1"})  # retried: its schema would drop the metadata
    latest = _open(target)
    assert latest.schema.metadata == {b"owner": b"a"} and "x" in latest.schema.names
    stale = _open(target)
    _open(target).alter_columns({"path": "id", "data_type": pa.int64()})
    stale.replace_field_metadata("id", {"unit": "n"})  # the field id changed: re-resolved
    latest = _open(target)
    assert latest.schema.field("id").metadata == {b"unit": b"n"}
    assert latest.schema.field("id").type == pa.int64()


# --- bad input -----------------------------------------------------------------------------


def test_bad_input_commits_nothing(target: Target) -> None:
    ds = _open(target)
    files = _data_files(ds)
    cases: list[tuple[type[Exception], str, Any]] = [
        (s3ddb.ColumnExistsError, "already exist", lambda: ds.add_columns({"id": "1"})),
        (s3ddb.InvalidInputError, "no columns", lambda: ds.add_columns({})),
        (s3ddb.InvalidInputError, "SQL text", lambda: ds.add_columns({"x": 5})),
        (s3ddb.ColumnNotFoundError, "nope", lambda: ds.add_columns({"x": "nope + 1"})),
        (s3ddb.ColumnNotFoundError, "name", lambda: ds.add_columns({"x": "name"}, ["id"])),
        (s3ddb.InvalidInputError, "CAST", lambda: ds.add_columns({"x": "NULL"})),
        (s3ddb.InvalidInputError, "6 visible rows", lambda: ds.add_columns(pa.table({"x": [1]}))),
        (s3ddb.ColumnExistsError, "'name'", lambda: ds.add_columns(pa.table({"name": [1] * 6}))),
        (s3ddb.InvalidInputError, "list of column names", lambda: ds.drop_columns("id")),
        (s3ddb.InvalidInputError, "no columns", lambda: ds.drop_columns([])),
        (s3ddb.ColumnNotFoundError, "nope", lambda: ds.drop_columns(["nope"])),
        (s3ddb.InvalidInputError, "every column", lambda: ds.drop_columns(["id", "name"])),
        (s3ddb.InvalidInputError, "no 'path'", lambda: ds.alter_columns({"name": "x"})),
        (s3ddb.InvalidInputError, "DataType", lambda: ds.alter_columns(
            {"path": "id", "data_type": "int64"})),
        (s3ddb.InvalidInputError, "strings", lambda: ds.replace_schema_metadata({"a": 1})),
        (s3ddb.ColumnNotFoundError, "nope", lambda: ds.replace_field_metadata("nope", {})),
    ]  # fmt: skip
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
    assert _open(target).version == 1 and _data_files(ds) == files


def test_an_expression_failing_midway_leaves_no_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table([1, 2, 0, 4]), uri, max_rows_per_file=2)
    files = _data_files(ds)
    with pytest.raises(s3ddb.InvalidExpressionError):
        ds.add_columns({"x": "10 / id"})  # the second fragment divides by zero
    assert _data_files(ds) == files and s3ddb.dataset(uri).version == 1


def test_nested_fields_are_refused_clearly(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    table = pa.table({"id": [1], "s": pa.array([{"a": 1, "b": 2}])})
    ds = s3ddb.write_dataset(table, uri)
    with pytest.raises(s3ddb.InvalidInputError, match="nested field"):
        ds.drop_columns(["s.a"])
    with pytest.raises(s3ddb.InvalidInputError, match="nested field"):
        ds.alter_columns({"path": "s.b", "name": "c"})
    ds.alter_columns({"path": "s", "name": "t"})  # a whole struct column renames
    assert ds.to_table().to_pydict() == {"id": [1], "t": [{"a": 1, "b": 2}]}
    assert ds.manifest.schema.field_id("t", "b") == 3


# --- stored form ---------------------------------------------------------------------------


def test_operations_round_trip_through_transaction_files(tmp_path: Path) -> None:
    ds = s3ddb.write_dataset(_table([1, 2]), str(tmp_path / "ds"))
    schema = ds.manifest.schema
    operations = [
        Merge(tuple(ds.get_fragments()), schema),
        Project(schema),
        UpdateConfig(
            {"a": "b"},
            schema_metadata=MapUpdate({"x": "y"}, replace=True),
            field_metadata={1: MapUpdate({"u": "v"}, ("w",))},
        ),
    ]
    for operation in operations:
        txn = Transaction(1, operation)
        assert Transaction.from_bytes(txn.to_bytes(), "test").operation == operation


def test_the_examples_in_docs_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "schema-evolution.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```python\n")[1:]]
    assert len(blocks) >= 6
    # The docs' datasets are on s3ddb local-aws (tests/project/test_docs_examples.py runs
    # them there); here the same code runs on local paths, each block alone.
    doc_uri = re.compile(r'"s3\+ddb://my-bucket/[^"?]+\?ddbTableName=s3ddb_manifests"')
    for i, block in enumerate(blocks):
        block, replaced = doc_uri.subn(repr(str(tmp_path / f"doc{i}")), block)
        assert replaced == 1, block
        exec(compile(block, "docs/schema-evolution.md", "exec"), {})
    assert "cannot change from int64 to double" in capsys.readouterr().out


def test_pruned_scan_reads_files_holding_dropped_and_renamed_fields(tmp_path: Path) -> None:
    """The scan the Spark reader uses (row-group statistics by column name) after a drop
    and a rename: the file's dropped field is skipped, the renamed one found by id."""
    from s3ddb.expressions import parse_predicate
    from s3ddb.scan import read_visible_rows

    table = _table([1, 2, 3, 4]).append_column("x", pa.array([1.0] * 4))
    ds = s3ddb.write_dataset(table, str(tmp_path / "ds"))
    ds.drop_columns(["x"])
    ds.alter_columns({"path": "id", "name": "key"})
    seen: set[str] = set()

    def may_match(stats: Any, rows: int) -> bool:
        seen.update(stats)
        return bool(stats["key"].max >= 3)

    predicate = parse_predicate("key >= 3", ds.schema)
    (fragment,) = ds.get_fragments()
    got = read_visible_rows(
        ds.handler.store, fragment, ds.manifest.schema, ["key", "name"], predicate, may_match
    )
    assert got.to_pydict() == {"key": [3, 4], "name": ["n3", "n4"]}
    assert seen == {"key", "name"}
