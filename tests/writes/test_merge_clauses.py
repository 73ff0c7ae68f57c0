"""merge_insert's clauses (pylance 14's builder and s3ddb's conditions), on local paths.

Each merge is compared with a reference computed in Python from the clause rules:
a matched row fails, else is deleted when the delete clause holds, else updated when
the update clause holds; an unmatched source row is inserted when the insert clause
holds; an unmatched target row is deleted when the by-source clause holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import (
    DuplicateKeyError,
    MatchedRowError,
    SchemaMismatchError,
    UnsupportedOperationError,
)


def _target(tmp_path: Path) -> tuple[str, s3ddb.Dataset]:
    uri = str(tmp_path / "t")
    ds = s3ddb.write_dataset(
        pa.table({"id": list(range(10)), "v": [f"t{i}" for i in range(10)], "n": list(range(10))}),
        uri,
    )
    ds.insert(pa.table({"id": [10, 11], "v": ["t10", "t11"], "n": [10, 11]}))  # 2 fragments
    return uri, s3ddb.dataset(uri)


def _rows(ds: s3ddb.Dataset) -> dict[int, tuple[str, int]]:
    table = ds.to_table()
    rows = {r["id"]: (r["v"], r["n"]) for r in table.to_pylist()}
    assert len(rows) == table.num_rows, "a key appears twice"
    return rows


def _feed() -> pa.Table:
    """A change feed: 'U' updates, 'D' deletes, 'I' inserts (ids 1-3 and 20-21)."""
    return pa.table(
        {
            "id": [1, 2, 3, 20, 21, 4],
            "v": ["u1", "x2", "u3", "i20", "i21", "u4"],
            "n": [100, 200, 300, 2000, 2100, 1],
            "op": ["U", "D", "U", "I", "D", "U"],
        }
    )


def test_a_change_feed_with_a_source_only_op_column(tmp_path: Path) -> None:
    _uri, ds = _target(tmp_path)
    before = _rows(ds)
    feed = _feed()
    result = (
        ds.merge_insert("id")
        .when_matched_delete("source.op = 'D'")
        .when_matched_update_all("source.n > target.n")
        .when_not_matched_insert_all("source.op <> 'D'")
        .execute(feed)
    )
    expected = dict(before)
    inserted = updated = deleted = 0
    for row in feed.to_pylist():
        key = row["id"]
        if key in before:
            if row["op"] == "D":
                del expected[key]
                deleted += 1
            elif row["n"] > before[key][1]:
                expected[key] = (row["v"], row["n"])
                updated += 1
        elif row["op"] != "D":
            expected[key] = (row["v"], row["n"])
            inserted += 1
    assert _rows(ds) == expected
    assert result == {
        "num_inserted_rows": inserted,
        "num_updated_rows": updated,
        "num_deleted_rows": deleted,
    }
    assert (inserted, updated, deleted) == (1, 2, 1)
    assert "op" not in ds.schema.names  # never written


def test_delete_wins_over_update_for_a_matched_row(tmp_path: Path) -> None:
    _uri, ds = _target(tmp_path)
    result = (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_matched_delete("target.n < 2")
        .execute(pa.table({"id": [0, 1, 2], "v": ["a", "b", "c"], "n": [7, 7, 7]}))
    )
    assert result == {"num_inserted_rows": 0, "num_updated_rows": 1, "num_deleted_rows": 2}
    rows = _rows(ds)
    assert 0 not in rows and 1 not in rows and rows[2] == ("c", 7)


def test_when_matched_fail_names_a_key_and_commits_nothing(tmp_path: Path) -> None:
    uri, ds = _target(tmp_path)
    version = ds.version
    files = sorted(p.name for p in (tmp_path / "t" / "data").iterdir())
    with pytest.raises(MatchedRowError, match=r"id=5"):
        (
            ds.merge_insert("id")
            .when_matched_fail()
            .when_not_matched_insert_all()
            .execute(pa.table({"id": [50, 5], "v": ["a", "b"], "n": [1, 2]}))
        )
    assert s3ddb.dataset(uri).version == version
    assert sorted(p.name for p in (tmp_path / "t" / "data").iterdir()) == files
    # No match: the insert-only load goes through.
    result = (
        ds.merge_insert("id")
        .when_matched_fail()
        .when_not_matched_insert_all()
        .execute(pa.table({"id": [50], "v": ["a"], "n": [1]}))
    )
    assert result["num_inserted_rows"] == 1


def test_duplicate_source_keys_are_refused(tmp_path: Path) -> None:
    uri, ds = _target(tmp_path)
    with pytest.raises(DuplicateKeyError, match=r"id=3"):
        ds.merge_insert("id").when_matched_update_all().execute(
            pa.table({"id": [3, 3], "v": ["a", "b"], "n": [1, 2]})
        )
    assert s3ddb.dataset(uri).version == ds.version


def test_by_source_delete_takes_bare_or_target_columns(tmp_path: Path) -> None:
    _uri, ds = _target(tmp_path)
    source = pa.table({"id": [0, 1], "v": ["a", "b"], "n": [0, 1]})
    result = (
        ds.merge_insert("id").when_not_matched_by_source_delete("target.n >= 10").execute(source)
    )
    assert result["num_deleted_rows"] == 2
    result = (
        ds.merge_insert("id").when_not_matched_by_source_delete(condition="n > 7").execute(source)
    )
    assert result["num_deleted_rows"] == 2
    assert sorted(_rows(ds)) == list(range(8))


def test_a_source_column_no_condition_reads_is_refused(tmp_path: Path) -> None:
    uri, ds = _target(tmp_path)
    with pytest.raises(SchemaMismatchError, match="op"):
        ds.merge_insert("id").when_matched_update_all().execute(_feed())
    assert s3ddb.dataset(uri).version == ds.version


def test_execute_uncommitted_then_commit(tmp_path: Path) -> None:
    uri, ds = _target(tmp_path)
    transaction, counts = (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute_uncommitted(pa.table({"id": [1, 99], "v": ["u", "new"], "n": [1, 99]}))
    )
    assert counts == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert transaction is not None
    assert s3ddb.dataset(uri).version == ds.version  # nothing committed yet
    committed = s3ddb.Dataset.commit(uri, transaction)
    rows = _rows(committed)
    assert rows[1] == ("u", 1) and rows[99] == ("new", 99) and len(rows) == 13


def test_use_index_false_gives_the_same_result(tmp_path: Path) -> None:
    _uri, ds = _target(tmp_path)
    ds.create_scalar_index("id", "BTREE")
    source = pa.table({"id": [3, 30], "v": ["u", "i"], "n": [3, 30]})
    builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    assert "index" in builder.explain_plan()
    result = builder.use_index(False).execute(source)
    assert result == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert _rows(ds)[3] == ("u", 3)


@pytest.mark.parametrize(
    ("member", "args"),
    [
        ("analyze_plan", (pa.table({"id": [1]}),)),
        ("data_storage_version", ("2.1",)),
        ("target_bases", (["x"],)),
        ("mark_sstables_as_compacted", ([],)),
    ],
)
def test_members_without_a_counterpart_say_why(tmp_path: Path, member: str, args: Any) -> None:
    _uri, ds = _target(tmp_path)
    with pytest.raises(UnsupportedOperationError, match=member):
        getattr(ds.merge_insert("id"), member)(*args)
    with pytest.raises(UnsupportedOperationError, match="rewrite_columns"):
        ds.merge_insert("id").write_mode("rewrite_columns")
