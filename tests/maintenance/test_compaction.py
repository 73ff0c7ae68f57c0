"""Compaction (``ds.optimize.compact_files``): which fragments it rewrites, that no row
and no row order changes, its metrics and history, bad options, and how it races with
other writers (both ways round) on one process.

Datasets are laid out fragment by fragment (``make``): column ``k`` is a row's writing
position (so a predicate on ``k`` picks fragments), ``id`` a scrambled unique key (so
that the dataset's row order is not the order of any column a compaction could sort
by), ``name`` a payload. Every check of "nothing changed" compares ``to_table()``
exactly, row order included.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import (
    InvalidInputError,
    RetryableCommitConflictError,
    TooMuchWriteContentionError,
)
from s3ddb.format import layout
from s3ddb.format.schema import DatasetSchema
from s3ddb.maintenance.compaction import CompactionMetrics
from tests.support.storage import objects, orphans

SCHEMA = pa.schema([("k", pa.int64()), ("id", pa.int64()), ("name", pa.string())])
IDS = random.Random(7).sample(range(1000), 200)  # id of the row written at position k


def rows(ks: range | list[int]) -> pa.Table:
    ks = list(ks)
    return pa.table(
        {"k": ks, "id": [IDS[k] for k in ks], "name": [f"row-{k}" for k in ks]}, schema=SCHEMA
    )


def make(uri: str, sizes: list[int], so: dict[str, Any] | None = None) -> s3ddb.Dataset:
    """Version 1: one fragment per entry of ``sizes``, holding that many rows (k in
    writing order: the first fragment has k = 0 .. sizes[0] - 1, and so on)."""
    schema = DatasetSchema.assign(SCHEMA)
    fragments = []
    start = 0
    for n in sizes:
        table = rows(range(start, start + n))
        written = s3ddb.fragment.write_fragments(
            table, uri, schema=schema, storage_options=so, max_rows_per_file=n
        )
        assert len(written) == 1
        fragments.extend(written)
        start += n
    ds = s3ddb.Dataset.commit(uri, s3ddb.operations.Overwrite(tuple(fragments), schema), None, so)
    assert ds.version == 1
    assert [f.physical_rows for f in ds.get_fragments()] == sizes
    return ds


def in_fragment(ds: s3ddb.Dataset, position: int) -> str:
    """A predicate matching the rows of the ``position``-th fragment of version 1."""
    sizes = [f.physical_rows for f in ds.checkout_version(1).get_fragments()]
    start = sum(sizes[:position])
    return f"k >= {start} AND k < {start + sizes[position]}"


def shape(ds: s3ddb.Dataset) -> list[tuple[int, int, int]]:
    """Per fragment: (physical rows, deleted rows, data files)."""
    return [(f.physical_rows, f.num_deleted_rows, len(f.files)) for f in ds.get_fragments()]


def compact(ds: s3ddb.Dataset, **kwargs: Any) -> CompactionMetrics:
    """Compact, and check what every compaction must keep: the exact table (rows and
    their order), and new fragments without deletion files or extra data files."""
    before = ds.to_table()
    old_ids = {f.id for f in ds.get_fragments()}
    version = ds.version
    metrics = ds.optimize.compact_files(**kwargs)
    assert ds.to_table().equals(before)
    assert s3ddb.dataset(ds.uri, storage_options=ds.storage_options).to_table().equals(before)
    new = [f for f in ds.get_fragments() if f.id not in old_ids]
    assert len(new) == metrics.fragments_added
    assert all(f.deletion_file is None and len(f.files) == 1 for f in new)
    assert all(f.id > max(old_ids) for f in new)
    # A compaction reserves its fragment ids (one version), then rewrites (another).
    assert ds.version == (version + 2 if metrics.fragments_removed else version)
    return metrics


def assert_no_op(ds: s3ddb.Dataset, **kwargs: Any) -> None:
    """Compacting ``ds`` with ``kwargs`` finds nothing: no version, no object."""
    before = (ds.version, ds.latest_version, objects(ds.uri, ds.storage_options))
    assert compact(ds, **kwargs) == CompactionMetrics()
    assert (ds.version, ds.latest_version, objects(ds.uri, ds.storage_options)) == before


# --- which fragments are chosen ------------------------------------------------------------


def test_small_adjacent_fragments_are_merged(any_uri: str) -> None:
    ds = make(any_uri, [2, 2, 2, 2, 2])
    v1 = ds.get_fragments()
    table = ds.to_table()
    # Runs of adjacent small fragments, each up to the target; the last one is left
    # over on its own and so left alone.
    assert compact(ds, target_rows_per_fragment=4) == CompactionMetrics(4, 2, 4, 2)
    assert shape(ds) == [(4, 0, 1), (4, 0, 1), (2, 0, 1)]
    assert ds.get_fragments()[2] == v1[4]
    assert ds.version == 3 and ds.latest_version == 3
    assert [v.operation for v in ds.versions()] == ["Overwrite", "ReserveFragments", "Rewrite"]
    txn = ds.last_commit.transaction  # type: ignore[union-attr]
    assert txn.kind == "Rewrite" and txn.read_version == 1
    # The new fragments carry the ids version 2 reserved, and the rows they copied.
    assert [f.id for g in txn.operation.groups for f in g.new_fragments] == [5, 6]
    assert ds.checkout_version(2).manifest.max_fragment_id == 6
    assert [(fid, list(r)) for fid, r in txn.operation.groups[0].copied_rows] == [
        (0, [0, 1]), (1, [0, 1])
    ]  # fmt: skip
    # Right after, with the same options: nothing to do.
    assert_no_op(ds, target_rows_per_fragment=4)
    # The default target merges everything into one fragment.
    assert compact(ds) == CompactionMetrics(3, 1, 3, 1)
    assert shape(ds) == [(10, 0, 1)]
    assert_no_op(ds)
    # Old versions keep their fragments and files, and read the same.
    assert [v.operation for v in ds.versions()] == ["Overwrite"] + [
        "ReserveFragments", "Rewrite"
    ] * 2  # fmt: skip
    for version in (1, 2, 3):
        old = ds.checkout_version(version)
        assert old.to_table().equals(table)
        assert old.count_rows("k >= 3") == 7
    assert ds.checkout_version(1).get_fragments() == v1
    assert orphans(any_uri) == set()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (7, [(6, 0, 1), (6, 0, 1)]),  # 3 + 3; a third would exceed 7
        (6, [(6, 0, 1), (6, 0, 1)]),
        (9, [(9, 0, 1), (3, 0, 1)]),  # the fourth is left over on its own
        (12, [(12, 0, 1)]),
    ],
)
def test_runs_are_cut_at_the_target(
    memory_uri: str, target: int, expected: list[tuple[int, int, int]]
) -> None:
    ds = make(memory_uri, [3, 3, 3, 3])
    compact(ds, target_rows_per_fragment=target)
    assert shape(ds) == expected


def test_lone_small_fragment_is_left_alone(any_uri: str) -> None:
    ds = make(any_uri, [5, 2, 5])
    assert_no_op(ds, target_rows_per_fragment=5)  # 2 is small, but has no small neighbour
    assert_no_op(ds, target_rows_per_fragment=6)  # 5 is small too, but 5 + 2 > 6
    assert compact(ds, target_rows_per_fragment=7) == CompactionMetrics(2, 1, 2, 1)
    assert shape(ds) == [(7, 0, 1), (5, 0, 1)]


def test_a_single_small_fragment_is_left_alone(any_uri: str) -> None:
    ds = make(any_uri, [3])
    assert_no_op(ds)
    ds.delete("k = 2")
    assert_no_op(ds, materialize_deletions=False)
    assert_no_op(ds, materialize_deletions_threshold=0.5)  # 1 of 3 deleted


@pytest.mark.parametrize("target", [4, 5])
def test_fragments_at_or_over_the_target_are_left_alone(any_uri: str, target: int) -> None:
    ds = make(any_uri, [5, 5, 8])
    assert_no_op(ds, target_rows_per_fragment=target)  # never split without a reason


def test_nothing_to_compact_in_an_empty_dataset(any_uri: str) -> None:
    ds = make(any_uri, [2, 2])
    ds.delete("true")
    assert ds.get_fragments() == []
    assert_no_op(ds)


# --- deletion-heavy fragments ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "rewritten"),
    [
        ({}, [0, 2]),  # 10% (= the threshold) and 30% deleted
        ({"materialize_deletions_threshold": 0.2}, [2]),
        ({"materialize_deletions_threshold": 0.3}, [2]),
        ({"materialize_deletions_threshold": 0.31}, []),
        ({"materialize_deletions_threshold": 1.0}, []),
        ({"materialize_deletions": False}, []),
    ],
    ids=["default", "0.2", "0.3", "0.31", "1.0", "off"],
)
def test_deletion_heavy_fragments_are_materialized(
    any_uri: str, options: dict[str, Any], rewritten: list[int]
) -> None:
    ds = make(any_uri, [10, 10, 10])
    ds.delete("k = 3 OR (k >= 20 AND k < 23)")
    assert shape(ds) == [(10, 1, 1), (10, 0, 1), (10, 3, 1)]
    before = ds.get_fragments()
    if not rewritten:
        assert_no_op(ds, target_rows_per_fragment=10, **options)
        return
    metrics = compact(ds, target_rows_per_fragment=10, **options)
    n = len(rewritten)
    assert metrics == CompactionMetrics(n, n, n, n)
    expected = [(10, 1, 1), (10, 0, 1), (10, 3, 1)]
    for i in rewritten:  # the deleted rows are dropped: no deletion file any more
        expected[i] = (before[i].num_rows, 0, 1)
    assert shape(ds) == expected
    for i in {0, 1, 2} - set(rewritten):
        assert ds.get_fragments()[i] == before[i]
    # The version before the compaction still reads through its deletion files.
    old = ds.checkout_version(2)
    assert old.get_fragments() == before
    assert old.to_table().equals(ds.to_table())
    assert old.count_rows() == 26
    assert ds.checkout_version(1).count_rows() == 30
    assert orphans(any_uri) == set()


def test_deletion_heavy_fragment_over_the_target_is_split(any_uri: str) -> None:
    ds = make(any_uri, [12, 2])
    ds.delete("k < 5")
    # 7 rows left of 12: rewritten alone (the 2-row fragment is not its neighbour in a
    # run: 7 + 2 > 5), into fragments of at most the target.
    assert compact(ds, target_rows_per_fragment=5) == CompactionMetrics(1, 2, 1, 2)
    assert shape(ds) == [(5, 0, 1), (2, 0, 1), (2, 0, 1)]


def test_small_fragments_with_few_deletions_are_merged_without_them(any_uri: str) -> None:
    ds = make(any_uri, [4, 4, 10])
    ds.delete("k = 1")  # 25% of the first fragment, under the threshold asked for
    assert compact(ds, target_rows_per_fragment=8, materialize_deletions_threshold=0.5) == (
        CompactionMetrics(2, 1, 2, 1)
    )
    assert shape(ds) == [(7, 0, 1), (10, 0, 1)]


# --- fragments with several data files -------------------------------------------------------


@pytest.mark.parametrize("materialize", [True, False])
def test_fragments_with_several_data_files_are_rewritten(any_uri: str, materialize: bool) -> None:
    ds = make(any_uri, [5, 5, 5])
    ds.update({"name": "upper(name)"}, in_fragment(ds, 1), rewrite="columns")
    ds.update({"name": "'x'"}, "k = 12", rewrite="columns")
    ds.delete("k = 14")
    assert shape(ds) == [(5, 0, 1), (5, 0, 2), (5, 1, 2)]
    assert ds.to_table(filter="k = 6").column("name").to_pylist() == ["ROW-6"]
    table = ds.to_table()
    # Each is worth rewriting on its own (at the target, one with a deletion under the
    # threshold), so each is rewritten alone.
    metrics = compact(
        ds,
        target_rows_per_fragment=5,
        materialize_deletions=materialize,
        materialize_deletions_threshold=0.5,
    )
    assert metrics == CompactionMetrics(2, 2, 4, 2)
    assert shape(ds) == [(5, 0, 1), (5, 0, 1), (4, 0, 1)]
    assert ds.to_table().equals(table)
    assert ds.to_table(filter="name = 'x'").column("k").to_pylist() == [12]
    assert ds.checkout_version(4).to_table().equals(table)
    assert orphans(any_uri) == set()


def test_mixed_layout_rewrites_exactly_the_candidates(any_uri: str) -> None:
    ds = make(any_uri, [5, 2, 2, 5, 5, 5])
    ds.delete("k = 9 OR k = 10")  # 40% of the fourth fragment
    ds.update({"name": "upper(name)"}, "k = 15", rewrite="columns")  # the fifth: 2 files
    v3 = ds.get_fragments()
    assert shape(ds) == [(5, 0, 1), (2, 0, 1), (2, 0, 1), (5, 2, 1), (5, 0, 2), (5, 0, 1)]
    # Runs: [2, 2] (small neighbours), [3 of 5] (deletion-heavy; 4 + 3 > 5), [the
    # two-file fragment]; the first and last are at the target and clean.
    assert compact(ds, target_rows_per_fragment=5) == CompactionMetrics(4, 3, 5, 3)
    assert shape(ds) == [(5, 0, 1), (4, 0, 1), (3, 0, 1), (5, 0, 1), (5, 0, 1)]
    after = ds.get_fragments()
    assert after[0] == v3[0] and after[-1] == v3[-1]
    assert [f.id for f in after[1:4]] == [v3[-1].id + 1, v3[-1].id + 2, v3[-1].id + 3]
    assert_no_op(ds, target_rows_per_fragment=5)
    assert [v.operation for v in ds.versions()][-1] == "Rewrite"


# --- bad options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"target_rows_per_fragment": 0},
        {"target_rows_per_fragment": -3},
        {"target_rows_per_fragment": 2.5},
        {"target_rows_per_fragment": "4"},
        {"materialize_deletions_threshold": 0},
        {"materialize_deletions_threshold": -0.1},
        {"materialize_deletions_threshold": 1.5},
        {"materialize_deletions_threshold": float("nan")},
        {"conflict_retries": -1},
        {"conflict_retries": True},
        {"retry_timeout": 0},
        {"retry_timeout": -1.0},
    ],
    ids=lambda o: "-".join(f"{k}={v!r}" for k, v in o.items()),
)
def test_bad_options_commit_nothing(any_uri: str, options: dict[str, Any]) -> None:
    # Fragments of one row: any target of at least 2 would have something to do.
    ds = make(any_uri, [1, 1, 1, 1])
    before = (ds.version, ds.latest_version, objects(ds.uri))
    with pytest.raises(InvalidInputError):
        ds.optimize.compact_files(**options)
    assert (ds.version, ds.latest_version, objects(ds.uri)) == before
    assert [v.operation for v in ds.versions()] == ["Overwrite"]


# --- concurrency, one process: compaction committed second ------------------------------------

# Fragments [5, 2, 2, 5]: compacting with target 5 rewrites exactly the middle two
# (k 5..8) into one; the first (k 0..4) and last (k 9..13) are left alone.
SIZES = [5, 2, 2, 5]
TARGET = 5


def pinned_pair(uri: str, so: dict[str, Any] | None = None) -> tuple[s3ddb.Dataset, s3ddb.Dataset]:
    make(uri, SIZES, so)
    return s3ddb.dataset(uri, storage_options=so), s3ddb.dataset(uri, storage_options=so)


def upsert(ds: s3ddb.Dataset, ks: list[int], retries: int | None = None) -> None:
    """Upsert by id: the rows at positions ``ks`` (existing ids for k < 14, new ones
    beyond) get the name "up-k"."""
    source = rows(ks).set_column(2, "name", pa.array([f"up-{k}" for k in ks]))
    builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    if retries is not None:
        builder = builder.conflict_retries(retries)
    builder.execute(source)


Change = Callable[[s3ddb.Dataset, int | None], object]

#: Changes a concurrent writer makes, by the fragment they touch: "middle" touches a
#: fragment the compaction rewrites, "edge" only fragments it leaves alone.
CHANGES: dict[str, Change] = {
    "delete-middle": lambda ds, r: ds.delete("k = 6", conflict_retries=r),
    "update-rows-middle": lambda ds, r: ds.update(
        {"name": "'changed'"}, "k = 7", rewrite="rows", conflict_retries=r
    ),
    "update-columns-middle": lambda ds, r: ds.update(
        {"name": "'changed'"}, "k = 8", rewrite="columns", conflict_retries=r
    ),
    "merge_insert-middle": lambda ds, r: upsert(ds, [5, 20], r),
    "delete-edge": lambda ds, r: ds.delete("k = 0 OR k = 13", conflict_retries=r),
    "update-rows-edge": lambda ds, r: ds.update(
        {"name": "'changed'"}, "k = 2", rewrite="rows", conflict_retries=r
    ),
    "update-columns-edge": lambda ds, r: ds.update(
        {"name": "'changed'"}, "k = 10", rewrite="columns", conflict_retries=r
    ),
    "merge_insert-edge": lambda ds, r: upsert(ds, [11, 21], r),
}
MIDDLE = [name for name in CHANGES if name.endswith("-middle")]
EDGE = [name for name in CHANGES if name.endswith("-edge")]


def serial_result(change: str) -> list[dict[str, Any]]:
    """What ``change`` alone gives on the layout of ``pinned_pair`` (compaction changes
    no row), sorted by k."""
    import fsspec

    name = f"test-serial-{uuid.uuid4().hex}"
    ds = make(f"memory://{name}", SIZES)
    CHANGES[change](ds, None)
    out = sorted_rows(ds)
    fsspec.filesystem("memory").rm(f"/{name}", recursive=True)
    return out


def sorted_rows(ds: s3ddb.Dataset) -> list[dict[str, Any]]:
    return sorted(ds.to_table().to_pylist(), key=lambda r: r["k"])


def test_compaction_rebases_over_an_append(any_uri: str) -> None:
    writer, compactor = pinned_pair(any_uri)
    writer.insert(rows(range(14, 16)))
    expected = writer.to_table()
    appended = writer.get_fragments()[-1]
    metrics = compactor.optimize.compact_files(target_rows_per_fragment=TARGET, conflict_retries=0)
    assert metrics == CompactionMetrics(2, 1, 2, 1)
    assert compactor.version == 4 and compactor.last_conflict_retries == 0
    latest = s3ddb.dataset(any_uri)
    assert latest.to_table().equals(expected)  # the appended rows, once, in place
    assert shape(latest) == [(5, 0, 1), (4, 0, 1), (5, 0, 1), (2, 0, 1)]
    assert latest.get_fragments()[-1] == appended
    assert operations(latest) == ["Overwrite", "Append", "ReserveFragments", "Rewrite"]
    assert orphans(any_uri) == set()


def operations(ds: s3ddb.Dataset) -> list[str]:
    return [v.operation for v in ds.versions()]


def data_files(uri: str, so: dict[str, Any] | None = None) -> set[str]:
    return {p for p in objects(uri, so) if p.startswith("data/")}


#: Changes that only delete rows of the fragments a compaction copies (moving updated
#: rows elsewhere): the compaction's fragment-reuse mapping carries them over.
CARRIED = ["delete-middle", "update-rows-middle", "merge_insert-middle"]
#: A change that rewrote columns of a copied fragment in place: the copy is stale.
STALE = ["update-columns-middle"]


@pytest.mark.parametrize("change", CARRIED)
def test_compaction_carries_over_a_concurrent_delete_of_its_rows(any_uri: str, change: str) -> None:
    writer, compactor = pinned_pair(any_uri)
    CHANGES[change](writer, None)
    expected = writer.to_table()
    metrics = compactor.optimize.compact_files(target_rows_per_fragment=TARGET, conflict_retries=0)
    assert metrics == CompactionMetrics(2, 1, 2, 1)
    assert compactor.last_conflict_retries == 0
    latest = s3ddb.dataset(any_uri)
    assert operations(latest) == ["Overwrite", change.split("-")[0].replace("delete", "Delete")
                                  .replace("update", "Update").replace("merge_insert", "Update"),
                                  "ReserveFragments", "Rewrite"]  # fmt: skip
    # The row the other writer removed stays removed: the compacted fragment has a
    # deletion file for its copy.
    assert latest.to_table().equals(expected)
    assert sorted_rows(latest) == serial_result(change)
    compacted = latest.get_fragments()[1]
    assert (compacted.physical_rows, compacted.num_deleted_rows) == (4, 1)
    # Time travel: the version before the compaction reads the same rows.
    assert latest.checkout_version(2).to_table().equals(expected)
    assert orphans(any_uri) == set()


@pytest.mark.parametrize("change", STALE)
def test_compaction_after_columns_of_its_fragments_changed_is_retried(
    any_uri: str, change: str
) -> None:
    writer, compactor = pinned_pair(any_uri)
    CHANGES[change](writer, None)
    expected = writer.to_table()
    before = data_files(any_uri)
    with pytest.raises(RetryableCommitConflictError):
        compactor.optimize.compact_files(target_rows_per_fragment=TARGET, conflict_retries=0)
    # Nothing of the failed compaction is left but its reservation (a version that
    # changes no data): no new data file.
    assert data_files(any_uri) == before
    assert compactor.version == 1
    assert operations(s3ddb.dataset(any_uri)) == ["Overwrite", "Update", "ReserveFragments"]
    assert orphans(any_uri) == set()
    # With retries, it is planned again on the newest version and lands (the same two
    # fragments, one of them now with a second data file).
    metrics = compactor.optimize.compact_files(target_rows_per_fragment=TARGET)
    assert metrics == CompactionMetrics(2, 1, 3, 1)
    assert compactor.last_conflict_retries == 1
    latest = s3ddb.dataset(any_uri)
    assert latest.to_table().equals(expected)
    assert sorted_rows(latest) == serial_result(change)
    assert latest.checkout_version(2).to_table().equals(expected)
    rewrite = compactor.last_commit
    assert rewrite is not None and rewrite.transaction.read_version > 2
    assert orphans(any_uri) == set()


@pytest.mark.parametrize("change", EDGE)
def test_compaction_after_a_change_elsewhere_rebases(any_uri: str, change: str) -> None:
    writer, compactor = pinned_pair(any_uri)
    CHANGES[change](writer, None)
    expected = writer.to_table()
    middle = compactor.get_fragments()[1:3]
    metrics = compactor.optimize.compact_files(target_rows_per_fragment=TARGET, conflict_retries=0)
    assert metrics == CompactionMetrics(2, 1, 2, 1)
    assert compactor.version == 4 and compactor.last_conflict_retries == 0
    rewrite = compactor.last_commit.transaction.operation  # type: ignore[union-attr]
    assert list(rewrite.old_fragments()) == middle
    latest = s3ddb.dataset(any_uri)
    assert latest.to_table().equals(expected)
    assert sorted_rows(latest) == serial_result(change)
    assert orphans(any_uri) == set()


class Interfered(s3ddb.Dataset):
    """A Dataset that lets another writer commit ``interfere()`` just before each of its
    own commits (planning and committing are s3ddb's own)."""

    def __init__(self, pinned: s3ddb.Dataset, interfere: Callable[[], object]) -> None:
        super().__init__(pinned.uri, pinned.handler, pinned.manifest)
        self.interfere = interfere
        self.interferences = 0

    def _commit(self, *args: Any, **kwargs: Any) -> s3ddb.Dataset:
        self.interfere()
        self.interferences += 1
        return super()._commit(*args, **kwargs)


def test_compaction_giving_up_leaves_no_files(any_uri: str) -> None:
    make(any_uri, [5, 3, 3, 5])
    other = s3ddb.dataset(any_uri)
    victims = iter([5, 8, 6, 9])
    # Before each of its commits, another writer rewrites a column of a row of a
    # fragment it compacts (a change the compaction cannot carry over).
    compactor = Interfered(
        s3ddb.dataset(any_uri),
        lambda: other.update({"name": "'x'"}, f"k = {next(victims)}", rewrite="columns"),
    )
    before = data_files(any_uri)
    with pytest.raises(TooMuchWriteContentionError) as info:
        compactor.optimize.compact_files(target_rows_per_fragment=6, conflict_retries=2)
    assert isinstance(info.value.__cause__, RetryableCommitConflictError)
    assert compactor.interferences == 3 and compactor.version == 1
    latest = s3ddb.dataset(any_uri)
    assert operations(latest) == ["Overwrite"] + ["ReserveFragments", "Update"] * 3
    assert latest.count_rows() == 16
    assert (
        data_files(any_uri) - before
        == {layout.data_file_path(d.path) for f in latest.get_fragments() for d in f.files} - before
    )  # fmt: skip  (only the updates' column files are new)
    assert orphans(any_uri) == set()


# --- concurrency, one process: compaction committed first -------------------------------------


@pytest.mark.parametrize("change", CARRIED)
def test_change_after_a_compaction_of_its_fragment_follows_its_rows(
    any_uri: str, change: str
) -> None:
    compactor, writer = pinned_pair(any_uri)
    compact(compactor, target_rows_per_fragment=TARGET)
    CHANGES[change](writer, 0)
    assert writer.version == 4 and writer.last_conflict_retries == 0
    latest = s3ddb.dataset(any_uri)
    assert sorted_rows(latest) == serial_result(change)
    assert operations(latest)[1:3] == ["ReserveFragments", "Rewrite"]
    # The change landed on the compacted fragment: its deletion file covers the copy.
    compacted = latest.get_fragments()[1]
    assert compacted.id == compactor.get_fragments()[1].id
    assert (compacted.physical_rows, compacted.num_deleted_rows) == (4, 1)
    # Time travel: before the change, the compacted version reads as before.
    assert latest.checkout_version(3).to_table().equals(compactor.to_table())
    assert orphans(any_uri) == set()


@pytest.mark.parametrize("change", STALE)
def test_column_change_after_a_compaction_of_its_fragment_is_retried(
    any_uri: str, change: str
) -> None:
    compactor, writer = pinned_pair(any_uri)
    compact(compactor, target_rows_per_fragment=TARGET)
    before = objects(any_uri)
    with pytest.raises(RetryableCommitConflictError):
        CHANGES[change](writer, 0)
    assert objects(any_uri) == before
    assert writer.version == 1 and writer.latest_version == 3
    CHANGES[change](writer, None)
    assert writer.version == 4 and writer.last_conflict_retries == 1
    latest = s3ddb.dataset(any_uri)
    assert sorted_rows(latest) == serial_result(change)
    assert orphans(any_uri) == set()


@pytest.mark.parametrize("change", EDGE)
def test_change_after_a_compaction_elsewhere_rebases(any_uri: str, change: str) -> None:
    compactor, writer = pinned_pair(any_uri)
    compact(compactor, target_rows_per_fragment=TARGET)
    CHANGES[change](writer, 0)
    assert writer.version == 4 and writer.last_conflict_retries == 0
    latest = s3ddb.dataset(any_uri)
    assert sorted_rows(latest) == serial_result(change)
    # The compacted fragment is still there, as the compaction left it.
    assert compactor.get_fragments()[1] in latest.get_fragments()
    assert orphans(any_uri) == set()


def test_two_compactions_of_the_same_fragments(any_uri: str) -> None:
    first, second = pinned_pair(any_uri)
    compact(first, target_rows_per_fragment=TARGET)
    table = first.to_table()
    before = data_files(any_uri)
    with pytest.raises(RetryableCommitConflictError):
        second.optimize.compact_files(target_rows_per_fragment=TARGET, conflict_retries=0)
    assert data_files(any_uri) == before
    # Re-planned on the newest version there is nothing left to do: nothing but the
    # stale plan's reservation commits.
    assert second.optimize.compact_files(target_rows_per_fragment=TARGET) == CompactionMetrics()
    assert second.version == second.latest_version
    assert operations(second)[3:] == ["ReserveFragments", "ReserveFragments"]
    assert data_files(any_uri) == before
    assert s3ddb.dataset(any_uri).to_table().equals(table)


# --- s3+ddb -----------------------------------------------------------------------------------


def test_compaction_on_s3_ddb(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    ds = make(ddb_uri, [2, 2, 6, 2], so)
    ds.delete("k = 4 OR k = 5 OR k = 6")  # half of the third fragment
    table = ds.to_table()
    assert compact(ds, target_rows_per_fragment=4) == CompactionMetrics(3, 2, 3, 2)
    assert shape(ds) == [(4, 0, 1), (3, 0, 1), (2, 0, 1)]
    assert_no_op(ds, target_rows_per_fragment=4)
    fresh = s3ddb.dataset(ddb_uri, storage_options=so)
    assert fresh.version == 4
    assert fresh.to_table().equals(table)
    assert operations(fresh) == ["Overwrite", "Delete", "ReserveFragments", "Rewrite"]
    assert fresh.checkout_version(2).to_table().equals(table)
    assert fresh.checkout_version(1).count_rows() == 12
    assert orphans(ddb_uri, so) == set()


@pytest.mark.parametrize("compaction_first", [False, True])
def test_compaction_and_a_delete_race_on_s3_ddb(
    aws: Any, ddb_uri: str, compaction_first: bool
) -> None:
    so = aws.storage_options()
    writer, compactor = pinned_pair(ddb_uri, so)
    if compaction_first:
        compactor.optimize.compact_files(target_rows_per_fragment=TARGET)
        writer.delete("k = 6", conflict_retries=0)
    else:
        writer.delete("k = 6")
        compactor.optimize.compact_files(target_rows_per_fragment=TARGET, conflict_retries=0)
    assert (writer.last_conflict_retries, compactor.last_conflict_retries) == (0, 0)
    latest = s3ddb.dataset(ddb_uri, storage_options=so)
    assert latest.version == 4
    assert sorted_rows(latest) == serial_result("delete-middle")
    assert shape(latest) == [(5, 0, 1), (4, 1, 1), (5, 0, 1)]
    assert orphans(ddb_uri, so) == set()


# --- a compaction rebased over a delete of a whole group ------------------------------------


def test_a_group_dropped_by_a_rebase_leaves_no_data_file(any_uri: str) -> None:
    """The compaction read version 1; a delete then removed every row of its first
    group. The rebased Rewrite drops that group: the file the group was copied to is in
    no version and must not stay behind; the other group's file is committed."""
    rows = pa.table({"id": pa.array(range(12), pa.int64())})
    s3ddb.write_dataset(rows, any_uri, max_rows_per_file=3)  # fragments 0..3
    pinned = s3ddb.dataset(any_uri, version=1)
    s3ddb.dataset(any_uri).delete("id < 6")  # fragments 0 and 1 gone
    pinned.optimize.compact_files(target_rows_per_fragment=6, conflict_retries=0)
    ds = s3ddb.dataset(any_uri)
    assert ds.manifest.operation == "Rewrite"
    assert [f.physical_rows for f in ds.manifest.fragments] == [6]
    assert sorted(ds.to_table().column("id").to_pylist()) == list(range(6, 12))
    assert orphans(any_uri) == set()
