"""The BTREE scalar index (CreateIndex): results equal to a scan's through every kind of
change, reads that really touch less, conflicts, cleanup and verify; and
DataReplacement. Each on a local path and on the local endpoint (S3 + DynamoDB)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import s3ddb
from s3ddb.errors import (
    ColumnNotFoundError,
    IndexExistsError,
    InvalidInputError,
    RetryableCommitConflictError,
    UnsupportedIndexError,
    UnsupportedOperationError,
)
from s3ddb.expressions import parse_predicate
from s3ddb.expressions.compiled import compile_filter
from s3ddb.format import datafile
from s3ddb.format.datafile import read_fragment, write_data_file
from s3ddb.index.query import plan_indexed_scan
from s3ddb.maintenance.verify import verify
from s3ddb.operations import DataReplacement, Transaction

ROWS_PER_FRAGMENT = 2000
FILTERS = [
    "id = 1234",
    "id = -5",
    "id IN (3, 2500, 4999, 123456)",
    "id > 5990",
    "id >= 100 AND id < 130",
    "id BETWEEN 1990 AND 2010",
    "cat = 'c3' AND id < 700",
    "500 > id AND cat = 'c1'",
    "id = 42 OR id = 43",  # not usable: scanned, still correct
]

Target = tuple[str, "dict[str, Any] | None"]


def _table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "id": pa.array(ids),
            "cat": pa.array([f"c{i % 7}" for i in ids]),
            "v": pa.array(ids * 10.0),
        }
    )


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    # Several row groups per fragment, so that an indexed read can skip some.
    monkeypatch.setattr(datafile, "DEFAULT_ROW_GROUP_SIZE", 250)


@pytest.fixture
def target(location: tuple[str, dict[str, Any] | None]) -> Target:
    uri, so = location
    s3ddb.write_dataset(
        _table(0, 3 * ROWS_PER_FRAGMENT), uri, storage_options=so,
        max_rows_per_file=ROWS_PER_FRAGMENT,
    )  # fmt: skip
    return uri, so


def _scan(ds: s3ddb.Dataset, text: str) -> pa.Table:
    """The filter's result without any index: every row read, the filter applied after
    (a pyarrow Expression filter may use an index too)."""
    return ds.to_table().filter(parse_predicate(text, ds.schema))


def _assert_same_as_scan(ds: s3ddb.Dataset) -> None:
    everything = ds.to_table()  # read once: ds stays at one version
    for text in FILTERS:
        # As _scan: every row read, the filter applied after.
        expected = everything.filter(parse_predicate(text, ds.schema))
        assert ds.to_table(filter=text).equals(expected), text
        assert ds.count_rows(text) == expected.num_rows, text
        batches = list(ds.to_batches(filter=text))
        got = pa.Table.from_batches(batches, schema=ds.schema) if batches else None
        assert (got.num_rows if got is not None else 0) == expected.num_rows, text
        limited = ds.to_table(filter=text, limit=3)
        assert limited.equals(expected.slice(0, 3)), text


def _uses_index(ds: s3ddb.Dataset, text: str) -> bool:
    store = ds.handler.store
    return plan_indexed_scan(store, ds.manifest, compile_filter(text, ds.schema)) is not None


def _covered(ds: s3ddb.Dataset, name: str = "id_idx") -> set[int]:
    return next(i["fragment_ids"] for i in ds.list_indices() if i["name"] == name)


def test_index_answers_like_a_scan_through_appends_deletes_updates_compaction(
    target: Target,
) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    assert ds.version == 2
    [info] = ds.list_indices()
    assert (info["name"], info["type"], info["fields"], info["version"]) == (
        "id_idx", "BTree", ["id"], 1
    )  # fmt: skip
    assert info["fragment_ids"] == {0, 1, 2}
    assert ds.last_commit is not None
    txn = ds.last_commit.transaction
    assert isinstance(txn.operation, s3ddb.operations.CreateIndex)
    assert Transaction.from_bytes(txn.to_bytes(), "t").operation == txn.operation
    assert ds.manifest.indices == s3ddb.dataset(uri, storage_options=so).manifest.indices
    assert s3ddb.dataset(uri, storage_options=so).versions()[-1].operation == "CreateIndex"
    assert _uses_index(ds, "id = 1234") and not _uses_index(ds, "id = 42 OR id = 43")
    _assert_same_as_scan(ds)

    ds.insert(_table(6000, 500))  # a new, uncovered fragment: scanned
    assert _covered(ds) == {0, 1, 2}
    assert ds.to_table(filter="id = 6100").column("id").to_pylist() == [6100]
    _assert_same_as_scan(ds)

    ds.delete("id = 1234 OR id IN (2500, 4999) OR id > 6400")  # applied at read time
    assert ds.count_rows("id = 1234") == 0 and ds.count_rows("id = 2500") == 0
    _assert_same_as_scan(ds)

    # An update moving rows: the old copies are deleted, the new ones uncovered.
    ds.update({"v": "v + 1"}, where="id = 3", rewrite="rows")
    assert ds.to_table(filter="id = 3").column("v").to_pylist() == [31.0]
    _assert_same_as_scan(ds)
    # Rewriting the indexed column of fragment 0 takes it out of the index.
    ds.update({"id": "id + 100000"}, where="id < 1000", rewrite="columns")
    assert 0 not in _covered(ds) and {1, 2} <= _covered(ds)
    assert ds.count_rows("id = 100005") == 1 and ds.count_rows("id = 5") == 0
    _assert_same_as_scan(ds)

    before = ds.version
    ds.optimize.compact_files(target_rows_per_fragment=100_000)
    assert ds.version > before and _covered(ds) == set()  # every covered fragment moved
    _assert_same_as_scan(ds)
    ds.create_scalar_index("id")  # rebuilt: covers the compacted fragments
    assert _covered(ds) == {f.id for f in ds.get_fragments()}
    _assert_same_as_scan(ds)


def test_time_travel_restore_and_overwrite_take_their_versions_indices(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id", name="by_id")
    ds.create_scalar_index("cat")
    ds.delete("id < 10")
    assert [i["name"] for i in ds.list_indices()] == ["by_id", "cat_idx"]
    _assert_same_as_scan(ds)
    v1 = s3ddb.dataset(uri, 1, storage_options=so)
    assert v1.list_indices() == []
    assert v1.count_rows("id < 10") == 10 and ds.count_rows("id < 10") == 0
    assert v1.to_table(filter="id = 5").num_rows == 1
    old = s3ddb.dataset(uri, 2, storage_options=so)
    assert [i["name"] for i in old.list_indices()] == ["by_id"]
    assert old.to_table(filter="id = 5").num_rows == 1  # through the index
    assert _uses_index(old, "id = 5") and _uses_index(ds, "cat = 'c3'")

    v1.restore()
    latest = s3ddb.dataset(uri, storage_options=so)
    assert latest.list_indices() == [] and latest.count_rows("id < 10") == 10
    old.restore()
    latest = s3ddb.dataset(uri, storage_options=so)
    assert [i["name"] for i in latest.list_indices()] == ["by_id"]
    _assert_same_as_scan(latest)

    latest.insert(_table(0, 10), mode="overwrite")
    assert latest.list_indices() == [] and latest.count_rows("id = 5") == 1


def test_merge_insert_through_the_index_equals_without(target: Target, tmp_path: Path) -> None:
    uri, so = target
    twin = str(tmp_path / "twin")
    s3ddb.write_dataset(_table(0, 3 * ROWS_PER_FRAGMENT), twin, max_rows_per_file=ROWS_PER_FRAGMENT)
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    ds.delete("id = 11")
    s3ddb.dataset(twin).delete("id = 11")
    ds.insert(_table(6000, 100))
    s3ddb.dataset(twin).insert(_table(6000, 100))
    source = pa.table(
        {
            "id": pa.array([5, 11, 1999, 2000, 6050, 9000, 9001], pa.int64()),
            "cat": pa.array(["new"] * 7),
            "v": pa.array([-1.0] * 7),
        }
    )
    counts = []
    for target_ds in (ds, s3ddb.dataset(twin)):
        counts.append(
            target_ds.merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(source)
        )
    assert counts[0] == counts[1] == {
        "num_inserted_rows": 3, "num_updated_rows": 4, "num_deleted_rows": 0
    }  # fmt: skip
    got = ds.to_table().sort_by("id")
    assert got.equals(s3ddb.dataset(twin).to_table().sort_by("id"))
    assert got.num_rows == 3 * ROWS_PER_FRAGMENT - 1 + 100 + 3
    assert ds.to_table(filter="cat = 'new'").num_rows == 7
    _assert_same_as_scan(ds)


def test_an_indexed_lookup_reads_only_the_row_groups_it_needs(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    store = ds.handler.store
    fragment = ds.get_fragments()[1]
    with store.open_input(f"data/{fragment.files[0].path}") as f:
        groups = pq.ParquetFile(f).metadata.num_row_groups
    assert groups == ROWS_PER_FRAGMENT // 250

    text = "id = 2345"
    scan = plan_indexed_scan(store, ds.manifest, compile_filter(text, ds.schema))
    assert scan is not None and set(scan.offsets) == {1}  # one fragment holds the key
    tables = [scan.read(f, ["id", "v"]) for f in ds.get_fragments()]
    assert [t.num_rows for t in tables if t is not None] == [0, 1, 0]
    assert scan.row_groups_read == 1  # of 3 fragments x 8 row groups

    text = "id BETWEEN 2100 AND 2600"  # two row groups of one fragment, three of another
    scan = plan_indexed_scan(store, ds.manifest, compile_filter(text, ds.schema))
    assert scan is not None
    rows = sum(t.num_rows for f in ds.get_fragments() if (t := scan.read(f, ["id"])) is not None)
    assert rows == 501 and scan.row_groups_read == 3


def test_bad_index_requests_are_refused_and_commit_nothing(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    version = ds.version
    with pytest.raises(IndexExistsError, match="id_idx"):
        ds.create_scalar_index("id", replace=False)
    with pytest.raises(ColumnNotFoundError, match="nope"):
        ds.create_scalar_index("nope")
    with pytest.raises(UnsupportedIndexError, match="IVF_PQ"):
        ds.create_scalar_index("id", index_type="IVF_PQ")
    assert s3ddb.dataset(uri, storage_options=so).version == version
    ds.insert(pa.table({"id": [1], "cat": ["x"], "v": [1.0]}), mode="overwrite")
    s3ddb.write_dataset(
        pa.table({"flag": [True], "tags": [["a"]]}), uri, mode="overwrite", storage_options=so
    )
    ds = s3ddb.dataset(uri, storage_options=so)
    for column in ("flag", "tags"):
        with pytest.raises(UnsupportedIndexError, match=column):
            ds.create_scalar_index(column)
    # Replacing keeps one index of the name, with a new uuid.
    ds = s3ddb.write_dataset(_table(0, 10), uri, mode="overwrite", storage_options=so)
    ds.create_scalar_index("id")
    first = ds.list_indices()[0]["uuid"]
    ds.create_scalar_index("id")
    assert [i["uuid"] for i in ds.list_indices()] != [first] and len(ds.list_indices()) == 1


def test_create_index_rebases_over_append_and_delete_and_retries_after_restore(
    target: Target,
) -> None:
    uri, so = target
    stale = s3ddb.dataset(uri, storage_options=so)
    other = s3ddb.dataset(uri, storage_options=so)
    other.insert(_table(6000, 10))
    other.delete("id < 2000")  # removes fragment 0 whole
    stale.create_scalar_index("id")  # planned at version 1: rebased (no re-execution)
    assert stale.last_conflict_retries == 0 and stale.version == 4
    assert _covered(stale) == {1, 2}  # fragment 0 is gone, the appended one is scanned
    _assert_same_as_scan(stale)

    # After a restore the index would describe other data: it is built again.
    stale = s3ddb.dataset(uri, storage_options=so)
    s3ddb.dataset(uri, 1, storage_options=so).restore()
    stale.create_scalar_index("id", name="again")
    assert stale.last_conflict_retries == 1
    latest = s3ddb.dataset(uri, storage_options=so)
    assert [i["name"] for i in latest.list_indices()] == ["again"]
    assert _covered(latest, "again") == {0, 1, 2}
    _assert_same_as_scan(latest)


def test_create_index_retries_when_the_indexed_column_is_rewritten(target: Target) -> None:
    uri, so = target
    stale = s3ddb.dataset(uri, storage_options=so)
    s3ddb.dataset(uri, storage_options=so).update(
        {"id": "id + 100000"}, where="id < 100", rewrite="columns"
    )
    stale.create_scalar_index("id")
    assert stale.last_conflict_retries == 1 and _covered(stale) == {0, 1, 2}
    assert stale.count_rows("id = 5") == 0 and stale.count_rows("id = 100005") == 1
    _assert_same_as_scan(stale)


def test_writes_planned_before_the_index_rebase_over_it(target: Target) -> None:
    uri, so = target
    appender = s3ddb.dataset(uri, storage_options=so)
    deleter = s3ddb.dataset(uri, storage_options=so)
    updater = s3ddb.dataset(uri, storage_options=so)
    s3ddb.dataset(uri, storage_options=so).create_scalar_index("id")
    appender.insert(_table(6000, 10))
    deleter.delete("id = 77")
    assert appender.last_conflict_retries == deleter.last_conflict_retries == 0
    latest = s3ddb.dataset(uri, storage_options=so)
    assert _covered(latest) == {0, 1, 2} and latest.count_rows("id = 77") == 0
    _assert_same_as_scan(latest)
    # A column rewrite of the indexed column, planned before the index existed, lands
    # after it: the fragment it rewrote leaves the index.
    updater.update({"id": "id + 100000"}, where="id >= 4000 AND id < 4100", rewrite="columns")
    assert updater.last_conflict_retries == 0
    latest = s3ddb.dataset(uri, storage_options=so)
    assert _covered(latest) == {0, 1} and latest.count_rows("id = 104050") == 1
    assert latest.count_rows("id = 4050") == 0
    _assert_same_as_scan(latest)


@pytest.mark.usefixtures("instant_cleanup")
def test_cleanup_removes_unreferenced_index_files_and_verify_checks_them(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    old_uuid = ds.list_indices()[0]["uuid"]
    ds.create_scalar_index("id")  # replaces it
    new_uuid = ds.list_indices()[0]["uuid"]
    store = ds.handler.store
    # (on S3 + DynamoDB, staged manifests not yet deleted are reported too)
    report = verify(uri, so, grace_seconds=0)
    assert not [p for p in report.problems if p.path.startswith("_indices")]
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0))
    assert stats.files.get("index_files") == 1
    assert not store.exists(f"_indices/{old_uuid}/btree.parquet")
    assert store.exists(f"_indices/{new_uuid}/btree.parquet")
    assert s3ddb.dataset(uri, storage_options=so).count_rows("id = 5") == 1
    store.delete(f"_indices/{new_uuid}/btree.parquet")
    problems = verify(uri, so, grace_seconds=0).problems
    index_problems = [(p.kind, p.path) for p in problems if p.path.startswith("_indices")]
    assert index_problems == [("missing_index_file", f"_indices/{new_uuid}/btree.parquet")]


# --- DataReplacement ------------------------------------------------------------------


def _replacement(ds: s3ddb.Dataset, fragment_id: int, scale: float) -> DataReplacement:
    """A replacement of fragment ``fragment_id``'s one data file: same rows, v scaled."""
    fragment = next(f for f in ds.get_fragments() if f.id == fragment_id)
    rows = read_fragment(ds.handler.store, fragment, ds.manifest.schema, ds.schema.names)
    rows = rows.set_column(2, "v", pc.multiply(rows.column("v"), scale))
    new_file = write_data_file(ds.handler.store, rows, ds.manifest.schema)
    return DataReplacement([(fragment_id, new_file)])


def test_data_replacement_swaps_a_file_and_narrows_the_index(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    ds.delete("id = 2001")
    op = _replacement(ds, 1, 2.0)
    assert Transaction.from_bytes(Transaction(3, op).to_bytes(), "t").operation == op
    new = s3ddb.Dataset.commit(uri, op, ds.version, storage_options=so)
    assert new.version == 4 and new.versions()[-1].operation == "DataReplacement"
    assert new.to_table(filter="id = 2002").column("v").to_pylist() == [40040.0]
    assert new.count_rows("id = 2001") == 0  # the deletion file is kept
    assert new.to_table(filter="id = 5").column("v").to_pylist() == [50.0]
    assert _covered(new) == {0, 2}  # the replaced file held the indexed column
    _assert_same_as_scan(new)
    old = s3ddb.dataset(uri, 3, storage_options=so)
    assert old.to_table(filter="id = 2002").column("v").to_pylist() == [20020.0]
    # The change feed lists each value the new file changed (it listed nothing): the
    # fragment's 1,999 visible rows, each a delete of the old row and an insert.
    feed = new.changes(3, 4)
    kinds = feed.group_by("_change_type").aggregate([("id", "count")]).to_pylist()
    assert sorted((k["_change_type"], k["id_count"]) for k in kinds) == [
        ("delete", 1999),
        ("insert", 1999),
    ]
    inserted = feed.filter(pc.equal(feed["_change_type"], "insert"))
    assert pc.all(pc.equal(inserted["v"], pc.multiply(inserted["id"], 20.0))).as_py()
    assert 2001 not in feed["id"].to_pylist()  # deleted before: no change


def test_data_replacement_refuses_bad_input(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    with pytest.raises(InvalidInputError):
        DataReplacement([])
    good = _replacement(ds, 0, 1.0).replacements[0].new_file
    with pytest.raises(InvalidInputError):
        DataReplacement([(0, good), (0, good)])
    with pytest.raises(InvalidInputError, match="fragment 9"):
        s3ddb.Dataset.commit(uri, DataReplacement([(9, good)]), 1, storage_options=so)
    short = write_data_file(ds.handler.store, _table(0, 5), ds.manifest.schema)
    with pytest.raises(InvalidInputError, match="5 rows"):
        s3ddb.Dataset.commit(uri, DataReplacement([(0, short)]), 1, storage_options=so)
    partial = write_data_file(ds.handler.store, _table(0, 2000).select(["v"]), ds.manifest.schema)
    with pytest.raises(InvalidInputError, match="exactly fields"):
        s3ddb.Dataset.commit(uri, DataReplacement([(0, partial)]), 1, storage_options=so)
    assert s3ddb.dataset(uri, storage_options=so).version == 1


def test_data_replacement_conflicts(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    op = _replacement(ds, 1, 3.0)
    # A concurrent append and a delete of some rows: rebased.
    s3ddb.dataset(uri, storage_options=so).insert(_table(6000, 10))
    s3ddb.dataset(uri, storage_options=so).delete("id = 2003")
    new = s3ddb.Dataset.commit(uri, op, 1, storage_options=so)
    assert new.to_table(filter="id = 2002").column("v").to_pylist() == [60060.0]
    assert new.count_rows("id = 2003") == 0 and new.count_rows() == 6009
    # A concurrent delete of the whole fragment: retry, nothing committed.
    op = _replacement(new, 2, 5.0)
    s3ddb.dataset(uri, storage_options=so).delete("id >= 4000 AND id < 6000")
    with pytest.raises(RetryableCommitConflictError):
        s3ddb.Dataset.commit(uri, op, new.version, storage_options=so)
    path = f"data/{op.replacements[0].new_file.path}"
    assert new.handler.store.exists(path)  # the caller's file stays, as pylance leaves it
    # A concurrent restore: retry.
    latest = s3ddb.dataset(uri, storage_options=so)
    op = _replacement(latest, 1, 7.0)
    s3ddb.dataset(uri, 1, storage_options=so).restore()
    with pytest.raises(RetryableCommitConflictError):
        s3ddb.Dataset.commit(uri, op, latest.version, storage_options=so)


def test_indices_on_other_types_answer_like_a_scan(tmp_path: Path) -> None:
    n = 3000
    days = np.arange(n) % 400
    table = pa.table(
        {
            "d": pa.array(days.astype("datetime64[D]")),
            "ts": pa.array((np.arange(n) * 60).astype("datetime64[s]")).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "f": pa.array(np.arange(n) / 4.0),
            "s": pa.array([f"k{i % 97:03d}" for i in range(n)], pa.large_string()),
            "i8": pa.array(np.arange(n) % 100, pa.int8()),
        }
    )
    uri = str(tmp_path / "types")
    ds = s3ddb.write_dataset(table, uri, max_rows_per_file=1000)
    for column in table.column_names:
        ds.create_scalar_index(column)
    filters = [
        "d = '1970-02-01'",
        "d BETWEEN DATE '1970-01-05' AND DATE '1970-01-07'",
        "ts >= '1970-01-01 10:00:00' AND ts < '1970-01-01 10:05:00'",
        "f = 12.25",
        "f > 700.5",
        "s IN ('k001', 'k096', 'zzz')",
        "s < 'k003'",
        "i8 = 7 AND f < 100",
        "i8 = 300",  # out of the type's range: refused as a key, scanned
    ]
    for text in filters:
        assert _uses_index(ds, text) or text == "i8 = 300", text
        expected = _scan(ds, text)
        assert expected.num_rows > 0 or text in ("i8 = 300",), text
        assert ds.to_table(filter=text).equals(expected), text


def test_other_writers_indices_decode_and_new_ones_are_checked() -> None:
    from s3ddb.format._proto import manifest_pb2 as mpb

    # Lance's system indices have no fields; a manifest holding one must still read.
    system = s3ddb.format.index.IndexMetadata.from_pb(
        mpb.IndexMetadata(uuid="0a1b2c3d-0000-1111-2222-333344445555", name="__frag_reuse")
    )
    assert system.fields == () and system.file_paths == () and system.fragment_ids == set()
    with pytest.raises(InvalidInputError, match="name and fields"):
        s3ddb.operations.CreateIndex((system,))
    with pytest.raises(InvalidInputError):
        s3ddb.operations.CreateIndex(())


@pytest.mark.parametrize("column", ["fragment_id", "row_offset", "key", "position"])
def test_an_index_on_a_column_named_like_the_index_files_columns_works(
    tmp_path: Path, column: str
) -> None:
    # The index file stores (key, fragment_id, row_offset): an indexed column of one
    # of those names (or of the lookup's own scratch name) must not collide with them.
    uri = str(tmp_path / column)
    table = pa.table({column: pa.array(range(100, 130), pa.int64()), "v": pa.array(range(30))})
    ds = s3ddb.write_dataset(table, uri, max_rows_per_file=10)
    ds.create_scalar_index(column)
    ds = s3ddb.dataset(uri)
    for text in (f"{column} = 105", f"{column} IN (101, 125, 999)", f"{column} >= 127"):
        assert _uses_index(ds, text), text
        expected = _scan(ds, text)
        assert expected.num_rows > 0
        assert ds.to_table(filter=text).equals(expected), text
        assert ds.count_rows(text) == expected.num_rows, text
    source = pa.table({column: pa.array([105, 500], pa.int64()), "v": pa.array([-1, -2])})
    counts = ds.merge_insert(column).when_matched_update_all().when_not_matched_insert_all()
    assert counts.execute(source) == {
        "num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0
    }  # fmt: skip
    ds = s3ddb.dataset(uri)
    assert ds.count_rows() == 31
    assert ds.to_table(filter="v < 0").sort_by(column).to_pylist() == [
        {column: 105, "v": -1}, {column: 500, "v": -2}
    ]  # fmt: skip


def test_an_indexed_column_in_the_longest_accepted_and_chain(tmp_path: Path) -> None:
    # Taking the filter's AND apart for the index recursed once per term, and the
    # indexed terms were re-joined with parentheses, past the parser's node limit.
    from s3ddb.expressions import MAX_EXPRESSION_NODES, parse_sql_tree

    terms = MAX_EXPRESSION_NODES // 5  # "id >= n" and its AND: five nodes
    text = " AND ".join(f"id >= {i % 1990}" for i in range(terms))
    parse_sql_tree(text)  # within the limits
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 2000), uri, max_rows_per_file=500)
    ds.create_scalar_index("id")
    ds = s3ddb.dataset(uri)
    assert _uses_index(ds, text)
    expected = _scan(ds, text)
    assert expected["id"].to_pylist() == list(range(1989, 2000))
    assert ds.to_table(filter=text).equals(expected)
    assert ds.count_rows(text) == 11


# --- optimize_indices -------------------------------------------------------------------


def test_optimize_indices_covers_every_fragment_again_in_one_commit(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    ds.create_scalar_index("cat")
    ds.delete("id % 97 = 0")
    ds.insert(_table(10_000, 500))  # a fragment neither index covers
    ds.optimize.compact_files(target_rows_per_fragment=2 * ROWS_PER_FRAGMENT)
    assert _covered(ds) == set()  # compaction took every covered fragment out
    fragments = {f.id for f in ds.get_fragments()}
    before = ds.version

    assert ds.optimize.optimize_indices() is None  # pylance returns None
    assert ds.version == before + 1  # both indices, one commit
    for index in ds.list_indices():
        assert index["fragment_ids"] == fragments, index
    assert sorted(i["name"] for i in ds.list_indices()) == ["cat_idx", "id_idx"]
    assert _uses_index(ds, "id = 10042") and _uses_index(ds, "cat = 'c3'")
    _assert_same_as_scan(ds)
    assert s3ddb.dataset(uri, storage_options=so).count_rows("id = 10042") == 1

    ds.optimize.optimize_indices()  # every index covers every fragment: nothing to do
    assert ds.version == before + 1


def test_optimize_indices_rebuilds_only_the_named_ones(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    ds.create_scalar_index("cat")
    ds.insert(_table(10_000, 100))
    new = max(f.id for f in ds.get_fragments())
    ds.optimize.optimize_indices(index_names=["cat_idx"], num_indices_to_merge=2, retrain=True)
    by_name = {i["name"]: i["fragment_ids"] for i in ds.list_indices()}
    assert new in by_name["cat_idx"] and new not in by_name["id_idx"]
    _assert_same_as_scan(ds)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"index_names": ["nope"]},
        {"index_names": "id_idx"},  # a string is not a list of names
        {"index_names": [1]},
        {"num_indices_to_merge": -1},
        {"retrain": "yes"},
    ],
)
def test_optimize_indices_refuses_bad_arguments_before_anything_is_written(
    target: Target, kwargs: dict[str, Any]
) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    ds.insert(_table(10_000, 100))
    before = ds.version
    with pytest.raises(InvalidInputError):
        ds.optimize.optimize_indices(**kwargs)
    assert s3ddb.dataset(uri, storage_options=so).version == before


def test_optimize_indices_over_a_concurrent_append_keeps_it_correct(target: Target) -> None:
    """Planned on the pinned version, committed over a writer's append: the rebuilt
    index covers the fragments it read, and the appended one is scanned."""
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.create_scalar_index("id")
    ds.insert(_table(10_000, 100))
    stale = s3ddb.dataset(uri, storage_options=so)
    planned = {f.id for f in stale.get_fragments()}
    s3ddb.write_dataset(_table(20_000, 100), uri, mode="append", storage_options=so)
    stale.optimize.optimize_indices()
    latest = s3ddb.dataset(uri, storage_options=so)
    [index] = latest.list_indices()
    assert index["fragment_ids"] == planned
    assert latest.count_rows("id = 20005") == 1 and latest.count_rows("id = 10005") == 1
    _assert_same_as_scan(latest)


def test_auto_cleanup_is_refused_typed(target: Target) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    with pytest.raises(UnsupportedOperationError, match="cleanup_old_versions"):
        ds.optimize.enable_auto_cleanup(None)
    with pytest.raises(UnsupportedOperationError, match="cleanup_old_versions"):
        ds.optimize.disable_auto_cleanup()


@pytest.mark.parametrize(
    "data_type",
    [pa.date64(), pa.timestamp("s"), pa.timestamp("ms", tz="Europe/Paris"), pa.large_string()],
    ids=str,
)
def test_an_index_of_a_type_parquet_stores_otherwise_is_used(tmp_path: Any, data_type: Any) -> None:
    """Parquet gives ``date64`` back as ``date32`` and ``timestamp[s]`` as
    ``timestamp[ms]``: the index file's keys are then of that type, and still read."""

    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        values = pa.array([f"k{i:02d}" for i in range(20)], data_type)
        wanted = "k07"
    else:
        start = dt.datetime(2026, 1, 1)
        values = pa.array([start + dt.timedelta(days=i) for i in range(20)]).cast(data_type)
        wanted = values[7].as_py()
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(pa.table({"k": values, "i": range(20)}), uri, max_rows_per_file=10)
    ds.create_scalar_index("k")
    got = s3ddb.dataset(uri).to_table(filter=pc.field("k") == pa.scalar(wanted, data_type))
    assert got["i"].to_pylist() == [7]
