"""delete, update and merge_insert on one writer: results, history, files, bad input,
and the retry contract (a stale plan is never committed; it is re-executed or refused)."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import s3ddb
from s3ddb.errors import (
    ColumnNotFoundError,
    InvalidExpressionError,
    InvalidInputError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    TooMuchWriteContentionError,
)
from s3ddb.format import layout
from s3ddb.format.deletion import deletion_path, read_deleted_rows
from s3ddb.io import ObjectStore
from tests.conftest import make_table
from tests.support.storage import objects, orphans

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("name", pa.string())])


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": ids, "v": [i * 10 for i in ids], "name": [f"row-{i}" for i in ids]}, schema=SCHEMA
    )


def make(uri: str, n: int = 10, per_file: int = 4, **kwargs: Any) -> s3ddb.Dataset:
    """``n`` rows (id i, v 10*i, name row-i) in fragments of ``per_file`` rows."""
    return s3ddb.write_dataset(rows(0, n), uri, max_rows_per_file=per_file, **kwargs)


def by_id(ds: s3ddb.Dataset, **kwargs: Any) -> list[dict[str, Any]]:
    """The rows of ``ds``, sorted by id (NULL ids last)."""
    out = ds.to_table(**kwargs).to_pylist()
    return sorted(out, key=lambda r: (r["id"] is None, r["id"] or 0))


def state(ds: s3ddb.Dataset) -> tuple[int, int, set[str]]:
    """What a failed write must leave as it was: pinned version, latest, objects."""
    return ds.version, ds.latest_version, objects(ds.uri, ds.storage_options)


# --- delete ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "predicate",
    ["id % 3 = 0", pc.field("id").isin([0, 3, 6, 9]) & (pc.field("name") != "x")],
    ids=["sql", "expression"],
)
def test_delete_across_fragments(any_uri: str, predicate: Any) -> None:
    ds = make(any_uri, 10, per_file=4)
    assert [f.num_rows for f in ds.get_fragments()] == [4, 4, 2]
    assert ds.delete(predicate) == {"num_deleted_rows": 4}  # 0, 3, 6, 9
    assert ds.version == 2 and ds.latest_version == 2
    kept = [i for i in range(10) if i % 3]
    assert ds.count_rows() == 6
    assert ds.to_table().column("id").to_pylist() == kept
    assert ds.to_table(filter="id > 4").column("id").to_pylist() == [5, 7, 8]
    assert ds.count_rows("v >= 50") == 3
    assert [f.num_rows for f in ds.get_fragments()] == [2, 3, 1]
    # A fresh reader sees the same; the old version still has every row (MVCC).
    assert s3ddb.dataset(any_uri).to_table().column("id").to_pylist() == kept
    old = ds.checkout_version(1)
    assert old.count_rows() == 10
    assert old.to_table().equals(rows(0, 10))
    assert old.count_rows("id % 3 = 0") == 4
    assert [v.operation for v in ds.versions()] == ["Overwrite", "Delete"]


def test_delete_of_a_whole_fragment_removes_it(any_uri: str) -> None:
    ds = make(any_uri, 10, per_file=4)
    first, second, third = ds.get_fragments()
    before = objects(any_uri)
    assert ds.delete("id < 4 OR id = 9") == {"num_deleted_rows": 5}
    fragments = ds.get_fragments()
    assert [f.id for f in fragments] == [second.id, third.id]
    assert fragments[0].deletion_file is None  # untouched
    assert fragments[1].deletion_file is not None  # row 9 of [8, 9]
    assert ds.to_table().column("id").to_pylist() == [4, 5, 6, 7, 8]
    # Only one deletion file (the removed fragment needs none), named after its fragment.
    new = objects(any_uri) - before
    deletions = {p for p in new if p.startswith(f"{layout.DELETIONS_DIR}/")}
    assert deletions == {deletion_path(fragments[1])}
    assert deletions.pop().startswith(f"{layout.DELETIONS_DIR}/{third.id}-")
    assert ds.checkout_version(1).get_fragments()[0] == first
    assert orphans(any_uri) == set()


def test_delete_everything(any_uri: str) -> None:
    ds = make(any_uri, 6, per_file=4)
    assert ds.delete("true") == {"num_deleted_rows": 6}
    assert ds.get_fragments() == []
    assert ds.count_rows() == 0
    table = ds.to_table()
    assert table.num_rows == 0 and table.schema.equals(SCHEMA)
    assert ds.checkout_version(1).count_rows() == 6


def test_delete_matching_nothing_commits_nothing(any_uri: str) -> None:
    ds = make(any_uri, 5)
    before = state(ds)
    assert ds.delete("id > 100") == {"num_deleted_rows": 0}
    assert ds.delete(pc.field("name") == "nope") == {"num_deleted_rows": 0}
    assert ds.delete("NULL") == {"num_deleted_rows": 0}  # NULL is not TRUE
    assert state(ds) == before
    assert len(ds.versions()) == 1


def test_repeated_deletes_in_one_fragment_accumulate(any_uri: str) -> None:
    ds = make(any_uri, 8, per_file=8)
    store = ObjectStore(any_uri)
    assert ds.delete("id = 1") == {"num_deleted_rows": 1}
    (fragment,) = ds.get_fragments()
    assert fragment.deletion_file is not None
    assert list(read_deleted_rows(store, fragment)) == [1]
    assert ds.delete("id IN (2, 5)") == {"num_deleted_rows": 2}
    (fragment,) = ds.get_fragments()
    assert fragment.deletion_file is not None
    assert fragment.deletion_file.num_deleted_rows == 3
    assert list(read_deleted_rows(store, fragment)) == [1, 2, 5]
    assert ds.count_rows() == 5
    # Deleting rows that are already deleted (and nothing else) commits nothing.
    version = ds.version
    assert ds.delete("id <= 2 AND id > 0") == {"num_deleted_rows": 0}
    assert ds.version == version
    # ... and together with a live row only the live row counts.
    assert ds.delete("id IN (1, 2, 3)") == {"num_deleted_rows": 1}
    assert ds.to_table().column("id").to_pylist() == [0, 4, 6, 7]
    # Each version keeps its own deletion file.
    assert [ds.checkout_version(v).count_rows() for v in (1, 2, 3, 4)] == [8, 7, 5, 4]
    deletion_files = {p for p in objects(any_uri) if p.startswith(f"{layout.DELETIONS_DIR}/")}
    assert len(deletion_files) == 3
    assert orphans(any_uri) == set()


def test_delete_then_reinsert_same_ids(any_uri: str) -> None:
    ds = make(any_uri, 4)
    ds.delete("id < 2")
    ds.insert(rows(0, 2))
    assert by_id(ds) == rows(0, 4).to_pylist()
    assert ds.count_rows() == 4


# --- update ------------------------------------------------------------------------------


@pytest.mark.parametrize("rewrite", ["rows", "columns", "auto"])
def test_update_modes_give_the_same_table(any_uri: str, rewrite: Any) -> None:
    ds = make(any_uri, 10, per_file=4)
    ds.delete("id = 5")  # updated fragments may already carry deletions
    result = ds.update({"v": "v * 2 + id", "name": "upper(name)"}, "id >= 3", rewrite=rewrite)
    assert result == {"num_rows_updated": 6}  # 3, 4, 6, 7, 8, 9
    expected = [
        {"id": i, "v": i * 21 if i >= 3 else i * 10, "name": f"ROW-{i}" if i >= 3 else f"row-{i}"}
        for i in range(10)
        if i != 5
    ]
    assert by_id(ds) == expected
    assert ds.count_rows() == 9
    assert ds.schema.equals(SCHEMA)
    assert ds.to_table().schema.equals(SCHEMA)
    assert ds.count_rows("name LIKE 'ROW-%'") == 6
    # History: the version before still has the old values, the one before that row 5.
    assert by_id(ds.checkout_version(2)) == [r for r in rows(0, 10).to_pylist() if r["id"] != 5]
    assert ds.checkout_version(1).to_table().equals(rows(0, 10))
    assert ds.versions()[-1].operation == "Update"
    # A second update over the first (stacked column files, or moved rows).
    assert ds.update({"v": "v - id"}, "id > 7", rewrite=rewrite) == {"num_rows_updated": 2}
    assert [r["v"] for r in by_id(ds, filter="id > 7")] == [160, 180]
    assert orphans(any_uri) == set()


def test_update_modes_are_what_was_asked_for(local_uri: str) -> None:
    from s3ddb.operations import Update, UpdateMode

    ds = make(local_uri, 8, per_file=4)
    ds.update({"v": "0"}, "id = 1", rewrite="columns")
    assert ds.last_commit is not None
    op = ds.last_commit.transaction.operation
    assert isinstance(op, Update) and op.mode is UpdateMode.REWRITE_COLUMNS
    assert len(ds.get_fragments()) == 2  # rows stay where they are
    ds.update({"v": "1"}, "id = 2", rewrite="rows")
    assert ds.last_commit is not None
    op = ds.last_commit.transaction.operation
    assert isinstance(op, Update) and op.mode is UpdateMode.REWRITE_ROWS
    assert len(ds.get_fragments()) == 3  # the row moved to a new fragment
    assert [r["v"] for r in by_id(ds)] == [0, 0, 1, 30, 40, 50, 60, 70]


@pytest.mark.parametrize("rewrite", ["rows", "columns"])
def test_update_without_where_changes_every_row(any_uri: str, rewrite: Any) -> None:
    ds = make(any_uri, 7, per_file=3)
    result = ds.update({"v": "-v", "name": "concat(name, '!')"}, rewrite=rewrite)
    assert result == {"num_rows_updated": 7}
    assert by_id(ds) == [{"id": i, "v": -10 * i, "name": f"row-{i}!"} for i in range(7)]
    assert ds.checkout_version(1).to_table().equals(rows(0, 7))


@pytest.mark.parametrize(
    ("values", "where", "matched", "expected"),
    [
        ({"v": "v * 2 + id"}, "id < 3", {0, 1, 2}, lambda r: {**r, "v": r["v"] * 2 + r["id"]}),
        (
            {"name": "substring(upper(name), 1, 3)"},
            "id % 2 = 1",
            {1, 3, 5},
            lambda r: {**r, "name": "ROW"},
        ),
        (
            {"name": "replace(name, 'row', 'r')", "v": "length(name)"},
            None,
            set(range(6)),
            lambda r: {**r, "name": r["name"].replace("row", "r"), "v": len(r["name"])},
        ),
        (
            {"v": "CASE WHEN id < 2 THEN 0 WHEN id < 4 THEN v + 1 ELSE NULL END"},
            "id < 5",
            {0, 1, 2, 3, 4},
            lambda r: {**r, "v": 0 if r["id"] < 2 else r["v"] + 1 if r["id"] < 4 else None},
        ),
        (
            {"v": pc.field("v") + pc.field("id"), "id": "id + 100"},
            pc.field("id") > 3,
            {4, 5},
            lambda r: {**r, "v": r["v"] + r["id"], "id": r["id"] + 100},
        ),
        ({"v": "CAST(id AS INT) * 3"}, "name = 'row-2'", {2}, lambda r: {**r, "v": r["id"] * 3}),
        (
            {"v": "coalesce(NULL, 7)", "name": "NULL"},
            "v > 40",
            {5},
            lambda r: {**r, "v": 7, "name": None},
        ),
    ],
    ids=["arith", "string-fns", "two-columns", "case", "pyarrow-exprs", "cast", "nulls"],
)
def test_update_expressions(
    any_uri: str,
    values: dict[str, Any],
    where: Any,
    matched: set[int],
    expected: Callable[[dict[str, Any]], Any],
) -> None:
    ds = make(any_uri, 6, per_file=4)
    assert ds.update(values, where) == {"num_rows_updated": len(matched)}
    want = [expected(r) if r["id"] in matched else r for r in rows(0, 6).to_pylist()]
    assert by_id(ds) == sorted(want, key=lambda r: r["id"])
    assert ds.to_table().schema.equals(SCHEMA)
    assert ds.checkout_version(1).to_table().equals(rows(0, 6))


def test_columns_rewritten_in_place_are_read_filtered_and_deleted_by(any_uri: str) -> None:
    ds = make(any_uri, 8, per_file=4)
    assert ds.update({"v": "v + 1000"}, "id < 4", rewrite="columns") == {"num_rows_updated": 4}
    assert ds.to_table(columns=["v"]).column("v").to_pylist() == [
        1000,
        1010,
        1020,
        1030,
        40,
        50,
        60,
        70,
    ]
    assert ds.to_table(columns=["name"], filter="v > 1000").column("name").to_pylist() == [
        "row-1",
        "row-2",
        "row-3",
    ]
    assert ds.count_rows("v > 1000") == 3
    assert ds.delete("v = 1010") == {"num_deleted_rows": 1}
    # A second in-place rewrite of the same fragment reads the first one's values.
    result = ds.update(
        {"name": "concat(name, ':', CAST(v AS VARCHAR))"}, "v >= 1020", rewrite="columns"
    )
    assert result == {"num_rows_updated": 2}
    assert [r["name"] for r in by_id(ds, filter="id < 4")] == ["row-0", "row-2:1020", "row-3:1030"]
    # A conditional merge compares against the rewritten values.
    result = (
        ds.merge_insert("id")
        .when_matched_update_all("source.v < target.v")
        .execute(source([2, 3], [5, 5000]))
    )
    assert result == counts(0, 1, 0)
    assert [(r["id"], r["v"]) for r in by_id(ds, filter="id < 4")] == [(0, 1000), (2, 5), (3, 1030)]
    assert ds.checkout_version(2).to_table(filter="id = 1").column("v").to_pylist() == [1010]
    assert orphans(any_uri) == set()


def test_update_matching_nothing_commits_nothing(any_uri: str) -> None:
    ds = make(any_uri, 5)
    before = state(ds)
    assert ds.update({"v": "0"}, "id > 100") == {"num_rows_updated": 0}
    assert ds.update({"v": "0"}, "NULL") == {"num_rows_updated": 0}
    assert state(ds) == before


def test_update_keeps_column_types(any_uri: str) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("x", pa.float32()),
            ("d", pa.date32()),
            ("s", pa.large_string()),
        ]
    )
    days = [dt.date(2024, 1, d) for d in (1, 2, 3)]
    table = pa.table(
        {"id": [1, 2, 3], "x": [0.5, 1.5, 2.5], "d": days, "s": ["a", "b", "c"]}, schema=schema
    )
    ds = s3ddb.write_dataset(table, any_uri, schema=schema)
    assert ds.schema.equals(schema)
    assert ds.update({"id": "id * 10", "x": "x * 2", "s": "upper(s)"}, "id >= 2") == {
        "num_rows_updated": 2
    }
    assert ds.update({"x": "1", "d": "d"}, "id = 1", rewrite="columns") == {"num_rows_updated": 1}
    assert ds.schema.equals(schema)
    out = ds.to_table()
    assert out.schema.equals(schema)
    assert sorted(out.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "x": 1.0, "d": days[0], "s": "a"},
        {"id": 20, "x": 3.0, "d": days[1], "s": "B"},
        {"id": 30, "x": 5.0, "d": days[2], "s": "C"},
    ]
    assert ds.checkout_version(1).to_table().equals(table)


@pytest.mark.parametrize("rewrite", ["rows", "columns"])
def test_update_to_null_in_a_not_null_column_is_refused(any_uri: str, rewrite: Any) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    ds = s3ddb.write_dataset(
        pa.table({"id": [1, 2, 3], "v": [1, 2, 3]}), any_uri, schema=schema, max_rows_per_file=2
    )
    before = state(ds)
    with pytest.raises(SchemaMismatchError, match="id"):
        ds.update({"id": "NULL"}, rewrite=rewrite)
    with pytest.raises(SchemaMismatchError, match="id"):
        ds.update({"id": "CASE WHEN id = 3 THEN NULL ELSE id + 1 END"}, rewrite=rewrite)
    assert state(ds) == before
    # Values are computed for the matched rows only: the NULL branch is never taken.
    result = ds.update(
        {"id": "CASE WHEN id = 3 THEN NULL ELSE id + 10 END"},
        "id < 3",
        rewrite=rewrite,
    )
    assert result == {"num_rows_updated": 2}
    assert sorted(ds.to_table().column("id").to_pylist()) == [3, 11, 12]
    assert ds.schema.equals(schema)
    # A nullable column may be set to NULL.
    ds.update({"v": "NULL"}, "id = 3", rewrite=rewrite)
    assert ds.to_table(filter="id = 3").column("v").to_pylist() == [None]


# --- merge_insert --------------------------------------------------------------------------


def counts(inserted: int, updated: int, deleted: int) -> dict[str, int]:
    return {
        "num_inserted_rows": inserted,
        "num_updated_rows": updated,
        "num_deleted_rows": deleted,
    }


def source(ids: list[int | None], v: list[int], name: str = "new") -> pa.Table:
    return pa.table({"id": ids, "v": v, "name": [f"{name}-{i}" for i in ids]}, schema=SCHEMA)


def test_merge_insert_upsert(any_uri: str) -> None:
    ds = make(any_uri, 6, per_file=4)
    src = source([1, 5, 6, 7], [-1, -5, -6, -7])
    result = (
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    )
    assert result == counts(2, 2, 0)
    assert ds.version == 2
    want = {r["id"]: r for r in rows(0, 6).to_pylist()} | {r["id"]: r for r in src.to_pylist()}
    assert by_id(ds) == [want[i] for i in sorted(want)]
    assert ds.count_rows() == 8
    assert ds.schema.equals(SCHEMA)
    assert ds.checkout_version(1).to_table().equals(rows(0, 6))
    # Upserting the same source again updates all four and inserts nothing.
    result = (
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    )
    assert result == counts(0, 4, 0)
    assert ds.count_rows() == 8
    assert by_id(ds) == [want[i] for i in sorted(want)]
    assert orphans(any_uri) == set()


def test_merge_insert_insert_only_leaves_existing_keys_alone(any_uri: str) -> None:
    ds = make(any_uri, 4)
    src = source([2, 3, 4], [0, 0, 0])
    assert ds.merge_insert("id").when_not_matched_insert_all().execute(src) == counts(1, 0, 0)
    assert by_id(ds) == [*rows(0, 4).to_pylist(), {"id": 4, "v": 0, "name": "new-4"}]
    # Nothing new to insert: nothing is committed.
    before = state(ds)
    assert ds.merge_insert("id").when_not_matched_insert_all().execute(src) == counts(0, 0, 0)
    assert state(ds) == before


def test_merge_insert_update_only(any_uri: str) -> None:
    ds = make(any_uri, 4)
    src = source([0, 3, 9], [7, 7, 7])
    assert ds.merge_insert("id").when_matched_update_all().execute(src) == counts(0, 2, 0)
    assert by_id(ds) == [
        {"id": 0, "v": 7, "name": "new-0"},
        {"id": 1, "v": 10, "name": "row-1"},
        {"id": 2, "v": 20, "name": "row-2"},
        {"id": 3, "v": 7, "name": "new-3"},
    ]


def test_merge_insert_conditional_update(any_uri: str) -> None:
    ds = make(any_uri, 4)  # v = 0, 10, 20, 30
    src = source([0, 1, 2, 4], [5, 5, 25, 5])
    result = (
        ds.merge_insert("id")
        .when_matched_update_all(condition="source.v > target.v")
        .when_not_matched_insert_all()
        .execute(src)
    )
    assert result == counts(1, 2, 0)  # 0 and 2 updated, 1 kept, 4 inserted
    assert [(r["id"], r["v"]) for r in by_id(ds)] == [(0, 5), (1, 10), (2, 25), (3, 30), (4, 5)]


@pytest.mark.parametrize("insert", [False, True], ids=["update-only", "with-insert"])
def test_merge_insert_whose_condition_passes_no_pair_commits_nothing(
    any_uri: str, insert: bool
) -> None:
    ds = make(any_uri, 4)  # v = 0, 10, 20, 30
    before = state(ds)
    builder = ds.merge_insert("id").when_matched_update_all("source.v > target.v")
    if insert:
        builder = builder.when_not_matched_insert_all()
    # Every source key matches, and no pair passes the condition: nothing changes.
    assert builder.execute(source([1, 3], [5, 25])) == counts(0, 0, 0)
    assert state(ds) == before
    assert by_id(ds) == rows(0, 4).to_pylist()


def test_merge_insert_delete_by_source(any_uri: str) -> None:
    ds = make(any_uri, 6, per_file=4)
    src = source([1, 4, 8], [-1, -4, -8])
    result = (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .when_not_matched_by_source_delete()
        .execute(src)
    )
    assert result == counts(1, 2, 4)  # 0, 2, 3, 5 deleted
    assert by_id(ds) == src.to_pylist()
    assert ds.checkout_version(1).count_rows() == 6


def test_merge_insert_delete_by_source_with_condition(any_uri: str) -> None:
    ds = make(any_uri, 6, per_file=4)
    src = source([1], [-1])
    result = ds.merge_insert("id").when_not_matched_by_source_delete("id >= 3").execute(src)
    assert result == counts(0, 0, 3)  # 3, 4, 5; the matched 1 is kept as it was
    assert by_id(ds) == rows(0, 3).to_pylist()
    result = (
        ds.merge_insert("id")
        .when_not_matched_by_source_delete(pc.field("name") == "row-0")
        .execute(src)
    )
    assert result == counts(0, 0, 1)
    assert [r["id"] for r in by_id(ds)] == [1, 2]


def test_merge_insert_composite_keys(any_uri: str) -> None:
    table = pa.table({"a": [1, 1, 2, 2], "b": ["x", "y", "x", "y"], "v": [1, 2, 3, 4]})
    ds = s3ddb.write_dataset(table, any_uri)
    src = pa.table({"a": [1, 2, 3], "b": ["y", "z", "x"], "v": [20, 50, 60]})
    result = (
        ds.merge_insert(["a", "b"])
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(src)
    )
    assert result == counts(2, 1, 0)
    got = sorted((r["a"], r["b"], r["v"]) for r in ds.to_table().to_pylist())
    assert got == [(1, "x", 1), (1, "y", 20), (2, "x", 3), (2, "y", 4), (2, "z", 50), (3, "x", 60)]


def test_merge_insert_null_keys_never_match(any_uri: str) -> None:
    ds = s3ddb.write_dataset(source([None, 1], [1, 2], "old"), any_uri)
    src = source([None, 1, 2], [10, 20, 30])
    result = (
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    )
    assert result == counts(2, 1, 0)  # the NULL key is inserted, not matched
    got = sorted(((r["id"], r["v"]) for r in ds.to_table().to_pylist()), key=str)
    assert got == [(1, 20), (2, 30), (None, 1), (None, 10)]
    # Nor do they count as duplicates of each other in the source.
    two_nulls = source([None, None], [7, 8])
    assert ds.merge_insert("id").when_not_matched_insert_all().execute(two_nulls) == counts(2, 0, 0)
    assert ds.count_rows("id IS NULL") == 4


def test_merge_insert_from_pandas(any_uri: str) -> None:
    ds = make(any_uri, 3)
    frame = pd.DataFrame({"id": [2, 3], "v": [99, 33], "name": ["two", "three"]})
    result = (
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(frame)
    )
    assert result == counts(1, 1, 0)
    assert [(r["id"], r["v"], r["name"]) for r in by_id(ds)] == [
        (0, 0, "row-0"),
        (1, 10, "row-1"),
        (2, 99, "two"),
        (3, 33, "three"),
    ]
    assert ds.schema.equals(SCHEMA)


def test_merge_insert_with_empty_target_or_source(any_uri: str) -> None:
    ds = make(any_uri, 4)
    ds.delete("true")
    upsert = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    assert upsert.execute(source([1], [1])) == counts(1, 0, 0)
    assert by_id(ds) == [{"id": 1, "v": 1, "name": "new-1"}]
    before = state(ds)
    assert upsert.execute(rows(0, 0)) == counts(0, 0, 0)
    assert state(ds) == before
    # An empty source matches nothing: deleting by source empties the dataset.
    assert ds.merge_insert("id").when_not_matched_by_source_delete().execute(rows(0, 0)) == counts(
        0, 0, 1
    )
    assert ds.count_rows() == 0


def test_merge_insert_duplicate_source_keys(any_uri: str) -> None:
    ds = make(any_uri, 3)
    before = state(ds)
    with pytest.raises(InvalidInputError, match="more than one row for key") as info:
        ds.merge_insert("id").when_matched_update_all().execute(source([5, 1, 5], [1, 2, 3]))
    assert "5" in str(info.value)
    table = pa.table({"a": [1, 1, 1], "b": ["p", "q", "q"], "v": [1, 2, 3]})
    other = s3ddb.write_dataset(table.slice(0, 1), any_uri + "-composite")
    with pytest.raises(InvalidInputError, match="more than one row for key") as info:
        other.merge_insert(["a", "b"]).when_not_matched_insert_all().execute(table)
    assert "'q'" in str(info.value)
    assert state(ds) == before


def test_merge_insert_bad_source_and_keys(any_uri: str) -> None:
    ds = make(any_uri, 3)
    before = state(ds)
    upsert = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    with pytest.raises(SchemaMismatchError, match="name"):
        upsert.execute(pa.table({"id": [1], "v": [1]}))
    with pytest.raises(SchemaMismatchError, match="v"):
        upsert.execute(pa.table({"id": [1], "v": ["x"], "name": ["x"]}))
    with pytest.raises(SchemaMismatchError, match="extra"):
        upsert.execute(rows(0, 1).append_column("extra", pa.array([1])))
    with pytest.raises(ColumnNotFoundError, match="nope"):
        ds.merge_insert("nope")
    with pytest.raises(ColumnNotFoundError, match="nope"):
        ds.merge_insert(["id", "nope"])
    with pytest.raises(ColumnNotFoundError):
        ds.merge_insert("id").when_matched_update_all("source.nope > target.v").execute(rows(0, 1))
    with pytest.raises(InvalidExpressionError):
        ds.merge_insert("id").when_matched_update_all("source.v +").execute(rows(0, 1))
    with pytest.raises(ColumnNotFoundError):
        ds.merge_insert("id").when_not_matched_by_source_delete("nope = 1").execute(rows(0, 1))
    with pytest.raises(InvalidInputError):
        ds.merge_insert([])
    with pytest.raises(InvalidInputError):
        upsert.conflict_retries(-1).execute(rows(5, 1))
    assert state(ds) == before


# --- bad input: a typed error, and nothing committed or left behind -----------------------

BAD_INPUT: list[tuple[str, Callable[[s3ddb.Dataset], object], type[Exception]]] = [
    ("delete-unknown-column", lambda ds: ds.delete("nope = 1"), ColumnNotFoundError),
    ("delete-unknown-field", lambda ds: ds.delete(pc.field("nope") == 1), ColumnNotFoundError),
    ("delete-incomplete", lambda ds: ds.delete("id <"), InvalidExpressionError),
    ("delete-double-eq", lambda ds: ds.delete("id = = 3"), InvalidExpressionError),
    ("delete-select", lambda ds: ds.delete("SELECT 1"), InvalidExpressionError),
    ("delete-two-statements", lambda ds: ds.delete("id = 1; id = 2"), InvalidExpressionError),
    ("delete-empty", lambda ds: ds.delete("  "), InvalidExpressionError),
    ("delete-not-boolean", lambda ds: ds.delete("id + 1"), InvalidExpressionError),
    ("delete-not-boolean-expr", lambda ds: ds.delete(pc.field("id") + 1), InvalidExpressionError),
    ("delete-string-vs-int", lambda ds: ds.delete("id = name + 1"), InvalidExpressionError),
    ("delete-retries", lambda ds: ds.delete("id = 1", conflict_retries=-1), InvalidInputError),
    (
        "delete-retries-bool",
        lambda ds: ds.delete("id = 1", conflict_retries=True),
        InvalidInputError,
    ),
    ("delete-timeout", lambda ds: ds.delete("id = 1", retry_timeout=0), InvalidInputError),
    ("update-unknown-column", lambda ds: ds.update({"nope": "1"}), ColumnNotFoundError),
    ("update-unknown-ref", lambda ds: ds.update({"v": "nope + 1"}), ColumnNotFoundError),
    ("update-where-unknown", lambda ds: ds.update({"v": "1"}, "nope = 1"), ColumnNotFoundError),
    ("update-where-malformed", lambda ds: ds.update({"v": "1"}, "id <"), InvalidExpressionError),
    ("update-where-select", lambda ds: ds.update({"v": "1"}, "SELECT 1"), InvalidExpressionError),
    ("update-where-not-bool", lambda ds: ds.update({"v": "1"}, "v"), InvalidExpressionError),
    ("update-value-malformed", lambda ds: ds.update({"v": "v * * 2"}), InvalidExpressionError),
    ("update-value-aggregate", lambda ds: ds.update({"v": "sum(v)"}), InvalidExpressionError),
    ("update-int-to-text", lambda ds: ds.update({"id": "'abc'"}), SchemaMismatchError),
    ("update-int-to-column", lambda ds: ds.update({"id": "name"}), SchemaMismatchError),
    ("update-text-to-int", lambda ds: ds.update({"name": "id"}), SchemaMismatchError),
    ("update-empty-values", lambda ds: ds.update({}), InvalidInputError),
    ("update-values-not-mapping", lambda ds: ds.update("v = 1"), InvalidInputError),
    ("update-retries", lambda ds: ds.update({"v": "1"}, conflict_retries=-1), InvalidInputError),
    ("update-timeout", lambda ds: ds.update({"v": "1"}, retry_timeout=-1), InvalidInputError),
    ("update-rewrite", lambda ds: ds.update({"v": "1"}, rewrite="cells"), InvalidInputError),
    ("update-fraction-literal", lambda ds: ds.update({"v": "1.5"}), InvalidExpressionError),
]

# Values that parse but fail when evaluated; some fail only on rows of a later fragment,
# after the files for earlier fragments may have been written.
FAILING_VALUES: list[tuple[str, dict[str, str], str | None]] = [
    ("div-by-zero", {"v": "v / 0"}, None),
    ("div-by-zero-one-row", {"v": "100 / (id - 9)"}, None),
    ("cast-overflow", {"v": "CAST(v * 100000000000 AS INT)"}, "id > 0"),
    ("int-overflow", {"v": "v * 4000000000000000000"}, "id = 9 OR id = 0"),
    ("fraction", {"v": "v * 1.5 + 0.5 * id"}, None),
    ("bad-sqrt", {"v": "CAST(sqrt(CAST(5 - id AS DOUBLE)) AS BIGINT)"}, None),
]


@pytest.mark.parametrize(
    ("call", "error"), [b[1:] for b in BAD_INPUT], ids=[b[0] for b in BAD_INPUT]
)
def test_bad_input_commits_nothing(
    any_uri: str, call: Callable[[s3ddb.Dataset], object], error: type[Exception]
) -> None:
    ds = make(any_uri, 10, per_file=4)
    before = state(ds)
    with pytest.raises(error):
        call(ds)
    assert state(ds) == before
    assert s3ddb.dataset(any_uri).to_table().equals(rows(0, 10))


@pytest.mark.parametrize("rewrite", ["rows", "columns"])
@pytest.mark.parametrize(
    ("values", "where"), [f[1:] for f in FAILING_VALUES], ids=[f[0] for f in FAILING_VALUES]
)
def test_update_failing_at_evaluation_leaves_nothing(
    any_uri: str, values: dict[str, str], where: str | None, rewrite: Any
) -> None:
    ds = make(any_uri, 10, per_file=3)
    ds.delete("id = 4")  # so that one touched fragment has a deletion file too
    before = state(ds)
    with pytest.raises(InvalidExpressionError, match="evaluating the update values failed"):
        ds.update(values, where, rewrite=rewrite)
    assert state(ds) == before
    assert by_id(ds) == [r for r in rows(0, 10).to_pylist() if r["id"] != 4]


def test_bad_input_on_s3_ddb(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    ds = make(ddb_uri, 6, per_file=4, storage_options=so)
    before = state(ds)
    assert before[2]  # the listing does see the dataset
    with pytest.raises(ColumnNotFoundError):
        ds.delete("nope = 1")
    with pytest.raises(SchemaMismatchError):
        ds.update({"id": "name"})
    with pytest.raises(InvalidExpressionError):
        ds.update({"v": "100 / (id - 5)"}, rewrite="columns")
    with pytest.raises(InvalidInputError):
        ds.merge_insert("id").when_not_matched_insert_all().execute(source([9, 9], [1, 2]))
    assert state(ds) == before


# --- s3+ddb --------------------------------------------------------------------------------


def test_row_changes_on_s3_ddb(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    ds = make(ddb_uri, 10, per_file=4, storage_options=so)
    assert ds.delete("id < 4 OR id = 8") == {"num_deleted_rows": 5}
    assert ds.update({"v": "v + id"}, "id > 5", rewrite="rows") == {"num_rows_updated": 3}
    assert ds.update({"name": "upper(name)"}, "id = 5", rewrite="columns") == {
        "num_rows_updated": 1
    }
    result = (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(source([4, 20], [0, 0]))
    )
    assert result == counts(1, 1, 0)
    assert ds.version == 5
    fresh = s3ddb.dataset(ddb_uri, storage_options=so)
    assert by_id(fresh) == [
        {"id": 4, "v": 0, "name": "new-4"},
        {"id": 5, "v": 50, "name": "ROW-5"},
        {"id": 6, "v": 66, "name": "row-6"},
        {"id": 7, "v": 77, "name": "row-7"},
        {"id": 9, "v": 99, "name": "row-9"},
        {"id": 20, "v": 0, "name": "new-20"},
    ]
    assert [v.operation for v in fresh.versions()] == [
        "Overwrite",
        "Delete",
        "Update",
        "Update",
        "Update",
    ]
    assert fresh.checkout_version(1).to_table().equals(rows(0, 10))
    assert fresh.checkout_version(2).count_rows() == 5
    before = state(fresh)
    assert fresh.delete("id > 1000") == {"num_deleted_rows": 0}
    assert state(fresh) == before
    assert orphans(ddb_uri, so) == set()


# --- the retry contract --------------------------------------------------------------------


class Interfered(s3ddb.Dataset):
    """A Dataset that lets another writer commit ``interfere()`` just before each of its
    own commits: between planning on a version and committing, a newer version lands.

    It overrides only when its commits start; planning and committing are s3ddb's own.
    """

    def __init__(self, pinned: s3ddb.Dataset, interfere: Callable[[], object]) -> None:
        super().__init__(
            pinned.uri, pinned.handler, pinned.manifest, storage_options=pinned.storage_options
        )
        self.interfere = interfere
        self.interferences = 0

    def _commit(self, *args: Any, **kwargs: Any) -> s3ddb.Dataset:
        self.interfere()
        self.interferences += 1
        return super()._commit(*args, **kwargs)


def _pinned_pair(uri: str, so: dict[str, Any] | None = None) -> tuple[s3ddb.Dataset, ...]:
    make(uri, 6, per_file=3, storage_options=so)
    return s3ddb.dataset(uri, storage_options=so), s3ddb.dataset(uri, storage_options=so)


@pytest.mark.parametrize("rewrite", ["rows", "columns"])
def test_stale_update_without_retries_raises_and_leaves_nothing(any_uri: str, rewrite: Any) -> None:
    first, second = _pinned_pair(any_uri)
    assert first.update({"v": "v + 1"}, "id = 1", rewrite=rewrite) == {"num_rows_updated": 1}
    before = objects(any_uri)
    with pytest.raises(RetryableCommitConflictError):
        second.update({"v": "v * 100"}, "id = 1", rewrite=rewrite, conflict_retries=0)
    assert objects(any_uri) == before
    assert second.version == 1  # still pinned where it read
    assert second.latest_version == 2
    assert by_id(s3ddb.dataset(any_uri), filter="id = 1")[0]["v"] == 11
    assert orphans(any_uri) == set()
    # With retries it re-executes on the newest version: the serial result.
    assert second.update({"v": "v * 100"}, "id = 1", rewrite=rewrite) == {"num_rows_updated": 1}
    assert second.version == 3
    latest = s3ddb.dataset(any_uri)
    assert [r["v"] for r in by_id(latest)] == [0, 1100, 20, 30, 40, 50]
    assert latest.checkout_version(2).count_rows("v = 11") == 1
    assert orphans(any_uri) == set()


def test_stale_merge_insert_without_retries_raises_and_leaves_nothing(any_uri: str) -> None:
    first, second = _pinned_pair(any_uri)
    upsert = first.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    assert upsert.execute(source([7], [70])) == counts(1, 0, 0)
    before = objects(any_uri)
    stale = second.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    with pytest.raises(RetryableCommitConflictError):
        stale.conflict_retries(0).execute(source([7], [77], "second"))
    assert objects(any_uri) == before
    assert second.version == 1
    # Retried, it updates the row the first merge inserted instead of duplicating it.
    stale.conflict_retries(10).execute(source([7], [77], "second"))
    latest = s3ddb.dataset(any_uri)
    assert latest.to_table(filter="id = 7").to_pylist() == [{"id": 7, "v": 77, "name": "second-7"}]
    assert latest.count_rows() == 7
    assert orphans(any_uri) == set()


def test_stale_update_on_s3_ddb(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    first, second = _pinned_pair(ddb_uri, so)
    first.delete("id = 2")
    before = objects(ddb_uri, so)
    with pytest.raises(RetryableCommitConflictError):
        second.update({"v": "-1"}, "id >= 2", conflict_retries=0)
    assert objects(ddb_uri, so) == before
    assert second.update({"v": "-1"}, "id >= 2") == {"num_rows_updated": 3}
    assert [(r["id"], r["v"]) for r in by_id(s3ddb.dataset(ddb_uri, storage_options=so))] == [
        (0, 0),
        (1, 10),
        (3, -1),
        (4, -1),
        (5, -1),
    ]
    assert orphans(ddb_uri, so) == set()


def test_exhausted_retries_raise_too_much_contention(any_uri: str) -> None:
    make(any_uri, 6, per_file=3)
    other = s3ddb.dataset(any_uri)
    # Every time `writer` is about to commit, `other` bumps the very row it updates.
    writer = Interfered(s3ddb.dataset(any_uri), lambda: other.update({"v": "v + 1"}, "id = 4"))
    with pytest.raises(TooMuchWriteContentionError) as info:
        writer.update({"v": "v * 100"}, "id = 4", conflict_retries=2)
    assert isinstance(info.value.__cause__, RetryableCommitConflictError)
    assert writer.interferences == 3  # the first attempt and two retries, each re-planned
    assert writer.version == 1  # a failed write does not move the Dataset
    latest = s3ddb.dataset(any_uri)
    assert latest.version == 4  # the interfering commits only
    assert latest.to_table(filter="id = 4").column("v").to_pylist() == [43]
    assert orphans(any_uri) == set()


def test_retries_that_finally_succeed(any_uri: str) -> None:
    make(any_uri, 6, per_file=3)
    other = s3ddb.dataset(any_uri)
    remaining = [2]

    def interfere() -> None:
        if remaining[0]:
            remaining[0] -= 1
            other.update({"v": "v + 1"}, "id = 4")

    writer = Interfered(s3ddb.dataset(any_uri), interfere)
    assert writer.update({"v": "v * 100"}, "id = 4", conflict_retries=2) == {"num_rows_updated": 1}
    assert writer.interferences == 3
    assert writer.version == 4
    assert s3ddb.dataset(any_uri).to_table(filter="id = 4").column("v").to_pylist() == [4200]
    assert orphans(any_uri) == set()


def test_retry_timeout_raises_too_much_contention(any_uri: str) -> None:
    first, second = _pinned_pair(any_uri)
    first.update({"v": "0"}, "id = 3")
    before = objects(any_uri)
    with pytest.raises(TooMuchWriteContentionError):
        second.update({"v": "1"}, "id = 3", retry_timeout=1e-6)
    with pytest.raises(TooMuchWriteContentionError):
        second.merge_insert("id").when_matched_update_all().retry_timeout(1e-6).execute(
            source([3], [1])
        )
    assert objects(any_uri) == before
    assert first.latest_version == 2


# --- the files of a row change upload beside the commit's own --------------------------

#: How long a held upload waits for the transaction's to start. Reached only when the
#: uploads go one after the other (the failure this catches), never otherwise.
_HOLD_SECONDS = 10.0


def _merge(ds: s3ddb.Dataset) -> Any:
    source = pa.table({"id": pa.array([5, 100], pa.int64()), "name": ["five", "hundred"]})
    return (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(source)
    )


ROW_CHANGES: dict[str, tuple[Callable[[s3ddb.Dataset], Any], int, set[str]]] = {
    # name: (the change, rows after it, what it writes besides the commit's own files)
    "delete": (lambda ds: ds.delete("id < 5"), 25, {"_deletions"}),
    "update (rows)": (
        lambda ds: ds.update({"name": "'x'"}, where="id < 5", rewrite="rows"),
        30,
        {"_deletions", "data"},
    ),
    "update (columns)": (
        lambda ds: ds.update({"name": "'x'"}, where="id < 25", rewrite="columns"),
        30,
        {"data"},
    ),
    "merge_insert": (_merge, 31, {"_deletions", "data"}),
    # Not a row change, but it writes files before its commit in the same way.
    "add_columns": (lambda ds: ds.add_columns({"twice": "id * 2"}), 30, {"data"}),
}


@pytest.mark.parametrize("change", list(ROW_CHANGES))
def test_a_row_change_uploads_its_files_beside_its_transaction(
    aws: Any, ddb_uri: str, change: str
) -> None:
    """On S3 a delete, an update, a merge (and add_columns) start uploading their
    deletion and data files while they plan, and the commit sends its transaction
    and manifest beside them: the caller waits for one round trip of uploads, not
    two. Each such upload is held here until the transaction's upload has started,
    which only happens if nothing waits for the held one first."""
    run, rows_after, kinds = ROW_CHANGES[change]
    so = aws.storage_options()
    s3ddb.write_dataset(make_table(0, 30), ddb_uri, storage_options=so)
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    transaction_started = threading.Event()
    held: dict[str, bool] = {}

    def hold(request: Any, **_: Any) -> None:
        if request.method != "PUT":
            return
        key = request.url.split("?", 1)[0]
        if "/_transactions/" in key:
            transaction_started.set()
        elif "/_deletions/" in key or "/data/" in key:
            kind = "_deletions" if "/_deletions/" in key else "data"
            held[kind] = transaction_started.wait(_HOLD_SECONDS)

    client = ds.handler.store.aws.client("s3")
    client.meta.events.register("before-send.s3.PutObject", hold, unique_id="hold-files")
    try:
        run(ds)
    finally:
        client.meta.events.unregister("before-send.s3.PutObject", unique_id="hold-files")
    assert set(held) == kinds, f"{change} wrote {sorted(held)}"
    assert all(held.values()), f"{change}: uploads waited for before the commit's: {held}"
    assert s3ddb.dataset(ddb_uri, storage_options=so).count_rows() == rows_after


@pytest.mark.parametrize("change", ["delete", "update (rows)", "merge_insert"])
def test_a_row_change_whose_upload_fails_commits_nothing_and_leaves_no_file(
    aws: Any, ddb_uri: str, change: str
) -> None:
    """The deletion file's upload fails (every attempt): the change raises a typed
    error, no version is committed, and every file it wrote (its data file, its
    transaction, its staged manifest) is deleted once all its uploads finished."""
    run, _rows_after, _kinds = ROW_CHANGES[change]
    so = aws.storage_options()
    s3ddb.write_dataset(make_table(0, 30), ddb_uri, storage_options=so)
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    fault = aws.inject_fault("s3", "PutObject", "server_error", times=50, path="/_deletions/")
    try:
        with pytest.raises(s3ddb.ObjectStoreError, match="_deletions"):
            run(ds)
    finally:
        aws.clear_faults()
    assert fault.triggered >= 1
    after = s3ddb.dataset(ddb_uri, storage_options=so)
    assert (after.version, after.count_rows()) == (1, 30)
    assert orphans(ddb_uri, so) == set()


@pytest.mark.parametrize("rewrite", ["rows", "columns"])
def test_an_update_on_s3_reads_each_small_data_file_once(
    aws: Any, ddb_uri: str, rewrite: str
) -> None:
    """An update finds its rows, then reads them again to rewrite them; a data file
    read whole (a small one) is fetched once for both."""
    so = aws.storage_options()
    s3ddb.write_dataset(make_table(0, 30), ddb_uri, storage_options=so, max_rows_per_file=10)
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    aws.clear_requests()
    ds.update({"name": "'x'"}, where="id < 5 OR id >= 25", rewrite=rewrite)
    gets = Counter(
        r.path for r in aws.requests if r.operation == "GetObject" and "/data/" in r.path
    )
    assert sorted(gets.values()) == [1, 1], gets  # the first and the last of 3 files
    names = s3ddb.dataset(ddb_uri, storage_options=so).to_table()["name"].to_pylist()
    assert names.count("x") == 10


def test_an_insert_whose_plan_fails_after_an_upload_started_leaves_no_file(
    aws: Any, ddb_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An insert starts uploading its data file while it plans; the plan then fails
    (here: its statistics). The upload is waited for and its file deleted: nothing
    is committed and no file is left."""
    from s3ddb.format import datafile

    so = aws.storage_options()
    s3ddb.write_dataset(make_table(0, 3), ddb_uri, storage_options=so)
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    aws.clear_requests()

    def failing(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("statistics failed")

    monkeypatch.setattr(datafile, "compute_file_statistics", failing)
    with pytest.raises(RuntimeError, match="statistics failed"):
        ds.insert(make_table(10, 3))
    monkeypatch.undo()
    uploads = [r.path for r in aws.requests if r.operation == "PutObject" and "/data/" in r.path]
    assert len(uploads) == 1, uploads  # the upload had started
    after = s3ddb.dataset(ddb_uri, storage_options=so)
    assert (after.version, after.count_rows()) == (1, 3)
    assert orphans(ddb_uri, so) == set()


def test_a_row_change_whose_plan_fails_deletes_each_of_its_files_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete whose plan fails after writing its deletion files (here: building the
    operation) deletes each file it wrote once, and leaves none."""
    from s3ddb.writes import row_changes

    uri = str(tmp_path / "ds")
    ds = make(uri, n=12, per_file=4)
    store_type = type(ds.handler.store)
    deleted: Counter[str] = Counter()
    real_delete = store_type.delete

    def counting(self: Any, path: str) -> None:
        deleted[path] += 1
        real_delete(self, path)

    def failing(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("planning failed")

    monkeypatch.setattr(store_type, "delete", counting)
    monkeypatch.setattr(row_changes, "Delete", failing)
    with pytest.raises(RuntimeError, match="planning failed"):
        ds.delete("id < 2 OR id > 9")
    monkeypatch.undo()
    assert sum(1 for p in deleted if p.startswith(f"{layout.DELETIONS_DIR}/")) == 2, deleted
    assert set(deleted.values()) == {1}, deleted
    assert orphans(uri) == set()
