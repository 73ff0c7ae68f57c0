"""ReserveFragments, the compaction's fragment-reuse mapping, and deletes carried across
a compaction in both orders; UpdateMemWalState's refusal."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyroaring import BitMap

import s3ddb
from s3ddb.commit.fragment_reuse import GroupMapping
from s3ddb.errors import (
    CommitConflictError,
    IncompatibleTransactionError,
    InvalidInputError,
    RetryableCommitConflictError,
    UnsupportedOperationError,
)
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.fragment_metadata import DataFile, DeletionFile, FragmentMetadata
from s3ddb.operations import OpaqueOperation, RewriteGroup
from tests.support.storage import objects, orphans


def fragment(fid: int, rows: int) -> FragmentMetadata:
    return FragmentMetadata(fid, (DataFile(f"f{fid}.parquet", (0,)),), rows)


def test_mapping_follows_rows_across_new_fragment_boundaries() -> None:
    # Old fragment 3 (6 rows, offsets 1 and 4 deleted when copied) and 7 (3 rows) went,
    # in order, into new fragments 10 (4 rows) and 11 (3 rows).
    deleted = DeletionFile("roaring", 1, "d", 2)
    group = RewriteGroup(
        (fragment(3, 6).with_deletion_file(deleted), fragment(7, 3)),
        (fragment(10, 4), fragment(11, 3)),
        ((3, BitMap([0, 2, 3, 5])), (7, BitMap([0, 1, 2]))),
    )
    mapping = GroupMapping.of(group)
    assert mapping is not None
    assert mapping.map_rows(3, BitMap([0, 5])) == ({10: BitMap([0, 3])}, BitMap())
    assert mapping.map_rows(7, BitMap([0, 2])) == ({11: BitMap([0, 2])}, BitMap())
    # Offset 1 was not copied (deleted before the compaction read it).
    assert mapping.map_rows(3, BitMap([1, 3])) == ({10: BitMap([2])}, BitMap([1]))
    assert mapping.all_rows(7) == BitMap([0, 1, 2])
    # Without copied rows (older writers) there is no mapping.
    legacy = RewriteGroup(group.old_fragments, tuple(f.with_id(0) for f in group.new_fragments))
    assert GroupMapping.of(legacy) is None


@pytest.mark.parametrize(
    "copied, why",
    [
        (((3, BitMap([0, 1])),), "name each old fragment"),
        (((3, BitMap([0])), (7, BitMap([0, 1, 2]))), "number its new fragments"),
    ],
)
def test_a_bad_mapping_is_refused(copied: Any, why: str) -> None:
    with pytest.raises(InvalidInputError, match=why):
        RewriteGroup((fragment(3, 2), fragment(7, 3)), (fragment(10, 5),), copied)


def test_a_mapping_needs_reserved_ids() -> None:
    with pytest.raises(InvalidInputError, match="reserved"):
        RewriteGroup((fragment(3, 2),), (fragment(0, 2),), ((3, BitMap([0, 1])),))


def test_reserve_fragments_reserves_the_highest_ids(local_uri: str) -> None:
    ds = s3ddb.write_dataset(pa.table({"id": [1, 2, 3]}), local_uri, max_rows_per_file=1)
    assert ds.manifest.max_fragment_id == 2
    with pytest.raises(InvalidInputError):
        s3ddb.operations.ReserveFragments(0)
    reserved = s3ddb.Dataset.commit(local_uri, s3ddb.operations.ReserveFragments(5), 1)
    assert reserved.version == 2 and reserved.manifest.max_fragment_id == 7
    assert reserved.to_table().equals(ds.to_table())
    # The next fragment appended gets an id after the reserved ones.
    reserved.insert(pa.table({"id": [4]}))
    assert reserved.get_fragments()[-1].id == 8
    assert [v.operation for v in reserved.versions()] == [
        "Overwrite", "ReserveFragments", "Append"
    ]  # fmt: skip


def test_a_rewrite_naming_unreserved_ids_is_refused(local_uri: str) -> None:
    ds = s3ddb.write_dataset(pa.table({"id": [1, 2]}), local_uri, max_rows_per_file=1)
    old = ds.get_fragments()
    new = s3ddb.fragment.write_fragments(pa.table({"id": [1, 2]}), local_uri)
    assert len(new) == 1
    before = objects(local_uri)
    group = RewriteGroup(
        tuple(old), (new[0].with_id(9),), ((old[0].id, BitMap([0])), (old[1].id, BitMap([0])))
    )
    with pytest.raises(CommitConflictError, match="not reserved"):
        s3ddb.Dataset.commit(local_uri, s3ddb.operations.Rewrite((group,)), 1)
    assert s3ddb.dataset(local_uri).version == 1
    # The refused commit's files are gone (its data file, written by hand, is the
    # caller's).
    assert objects(local_uri) - before == set()


def test_update_mem_wal_state_is_refused_with_a_reason(local_uri: str) -> None:
    with pytest.raises(UnsupportedOperationError, match="MemWAL") as info:
        s3ddb.operations.UpdateMemWalState()
    assert isinstance(info.value, NotImplementedError)
    # Read from storage (written by another Lance writer), it cannot be committed either.
    s3ddb.write_dataset(pa.table({"id": [1]}), local_uri)
    opaque = OpaqueOperation("UpdateMemWalState", tpb.UpdateMemWalState())
    with pytest.raises(UnsupportedOperationError, match="UpdateMemWalState"):
        s3ddb.Dataset.commit(local_uri, opaque, 1)
    assert s3ddb.dataset(local_uri).version == 1


# --- races on the local endpoint (S3 without conditional writes + DynamoDB) --------------


def _layout(uri: str, so: dict[str, Any] | None) -> None:
    """Fragments of 4, 10 and 4 rows (k = 0..17), then k = 4 deleted (version 2), so
    that compacting with a target of 4 rows rewrites the middle fragment alone (its
    deleted share is 10%) into three: k = 5..8, 9..12 and 13."""
    table = pa.table({"k": pa.array(range(18), pa.int64()), "v": [f"r{k}" for k in range(18)]})
    schema = s3ddb.format.schema.DatasetSchema.assign(table.schema)
    fragments = []
    for start, n in ((0, 4), (4, 10), (14, 4)):
        fragments += s3ddb.fragment.write_fragments(
            table.slice(start, n), uri, schema=schema, storage_options=so
        )
    ds = s3ddb.Dataset.commit(uri, s3ddb.operations.Overwrite(tuple(fragments), schema), None, so)
    ds.delete("k = 4")


def _ks(ds: s3ddb.Dataset) -> list[int]:
    return ds.to_table().column("k").to_pylist()


CHANGES = {
    # k = 5 and 10: rows of the first two new fragments; k = 16 in a fragment left alone.
    "delete": lambda ds, r: ds.delete("k = 5 OR k = 10 OR k = 16", conflict_retries=r),
    "append": lambda ds, r: ds.insert(pa.table({"k": [20], "v": ["r20"]}), conflict_retries=r),
    "restore": lambda ds, r: ds.checkout_version(1).restore(),
}
EXPECTED = {
    "delete": [k for k in range(18) if k not in (4, 5, 10, 16)],
    "append": [k for k in range(18) if k != 4] + [20],
    "restore": list(range(18)),
}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("compaction_first", [False, True], ids=["change-first", "compact-first"])
def test_compaction_races_a_change_on_s3_ddb(
    aws: Any, ddb_uri: str, change: str, compaction_first: bool
) -> None:
    so = aws.storage_options()
    _layout(ddb_uri, so)
    writer = s3ddb.dataset(ddb_uri, storage_options=so)
    compactor = s3ddb.dataset(ddb_uri, storage_options=so)
    compact = compactor.optimize.compact_files
    if compaction_first:
        assert compact(target_rows_per_fragment=4).fragments_added == 3
        # A delete or an append rebases over it (a restore always does: it replaces
        # everything, as asked).
        CHANGES[change](writer, 0)
        assert writer.last_conflict_retries == 0
    elif change == "restore":
        CHANGES[change](writer, None)
        # The compaction copied rows of a version the restore replaced: re-planned, it
        # finds nothing to do (the restored fragment has no deletions).
        with pytest.raises(RetryableCommitConflictError):
            compact(target_rows_per_fragment=4, conflict_retries=0)
        assert compact(target_rows_per_fragment=4).fragments_added == 0
    else:
        CHANGES[change](writer, None)
        assert compact(target_rows_per_fragment=4, conflict_retries=0).fragments_added == 3
        assert compactor.last_conflict_retries == 0
    latest = s3ddb.dataset(ddb_uri, storage_options=so)
    assert _ks(latest) == EXPECTED[change]
    if change == "delete":
        # Each deleted copy is in a deletion file of a new fragment.
        new = [f for f in latest.get_fragments() if f.id > 2]
        assert [(f.physical_rows, f.num_deleted_rows) for f in new] == [(4, 1), (4, 1), (1, 0)]
    # The versions before read as they did.
    assert _ks(latest.checkout_version(1)) == list(range(18))
    assert _ks(latest.checkout_version(2)) == [k for k in range(18) if k != 4]
    assert orphans(ddb_uri, so) == set()


def test_a_delete_racing_a_restore_is_still_refused_after_a_compaction(local_uri: str) -> None:
    _layout(local_uri, None)
    deleter = s3ddb.dataset(local_uri)
    s3ddb.dataset(local_uri).optimize.compact_files(target_rows_per_fragment=4)
    s3ddb.dataset(local_uri, version=1).restore()
    with pytest.raises(IncompatibleTransactionError):
        deleter.delete("k = 5")
    assert _ks(s3ddb.dataset(local_uri)) == list(range(18))


# --- a row change pinned before a compaction and a later commit (serial order) ---------


def _kv(ids: list[int], vs: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(vs, pa.int64())})


def _pairs(ds: s3ddb.Dataset) -> list[tuple[int, int]]:
    table = ds.to_table()
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))


# My change; each gets ``conflict_retries`` (0: refuse instead of re-executing).
MINE: dict[str, Any] = {
    # Skips the existing key 1 (matched, unchanged) and inserts 50.
    "insert-only-merge": lambda ds, r: (
        ds.merge_insert("id")
        .when_not_matched_insert_all()
        .conflict_retries(r)
        .execute(_kv([1, 50], [-1, -50]))
    ),
    # Updates key 4 (fragment 1), matches key 1 (fragment 0) without changing it.
    "conditional-upsert": lambda ds, r: (
        ds.merge_insert("id")
        .when_matched_update_all("source.v > target.v")
        .when_not_matched_insert_all()
        .conflict_retries(r)
        .execute(_kv([1, 4, 50], [-1, 400, -50]))
    ),
    "update-columns": lambda ds, r: ds.update(
        {"v": "v + 1"}, "id >= 1 and id <= 7", rewrite="columns", conflict_retries=r
    ),
    "delete": lambda ds, r: ds.delete("v >= 60", conflict_retries=r),
}
# Commits that land between my read version and my commit.
THEIRS: dict[str, Any] = {
    "compact": lambda ds: ds.optimize.compact_files(target_rows_per_fragment=100),
    "delete-1": lambda ds: ds.delete("id = 1"),
    "upsert-50": lambda ds: (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(_kv([50], [500]))
    ),
    "update-rows": lambda ds: ds.update({"v": "v - 100"}, "id = 8", rewrite="rows"),
}
CHAINS = [(a, b) for a in THEIRS for b in THEIRS if a != b]


@pytest.mark.parametrize("chain", CHAINS, ids=["-then-".join(c) for c in CHAINS])
@pytest.mark.parametrize("mine", list(MINE))
def test_a_change_landing_after_two_commits_equals_the_serial_order(
    tmp_path: Any, mine: str, chain: tuple[str, str]
) -> None:
    """Ids 0..8 (v = 10 * id) in fragments of three rows; my change reads version 1,
    ``chain`` commits, then mine lands, rebased, or is refused (then re-executed). Either
    way the rows equal running the chain and then mine: a merge rebased over a
    compaction keeps the addresses of the rows it matched, so a later delete of one is
    seen (an insert-only merge once lost key 1 over compact-then-delete-1)."""
    uri, reference = str(tmp_path / "race"), str(tmp_path / "serial")
    for u in (uri, reference):
        s3ddb.write_dataset(_kv(list(range(9)), [10 * i for i in range(9)]), u, max_rows_per_file=3)
    pinned = s3ddb.dataset(uri, version=1)
    for name in chain:
        THEIRS[name](s3ddb.dataset(uri))
        THEIRS[name](s3ddb.dataset(reference))
    MINE[mine](s3ddb.dataset(reference), 0)
    want = _pairs(s3ddb.dataset(reference))
    try:
        MINE[mine](pinned, 0)
    except RetryableCommitConflictError:
        # A delete always rebases (deletes merge, the mapping moves them).
        assert mine != "delete"
        assert s3ddb.dataset(uri).version == 1 + len(chain) + ("compact" in chain)
        MINE[mine](s3ddb.dataset(uri, version=1), None)  # re-executed on the newest
    assert _pairs(s3ddb.dataset(uri)) == want
    assert orphans(uri, None) == set()


@pytest.mark.parametrize("mine", ["insert-only-merge", "conditional-upsert"])
def test_a_merge_matching_a_row_compacted_then_deleted_is_retried(tmp_path: Any, mine: str) -> None:
    """Without the compaction the delete of a matched row is a clash; with it in between
    too (the rows the merge matched moved with the compaction)."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_kv(list(range(9)), [10 * i for i in range(9)]), uri, max_rows_per_file=3)
    pinned = s3ddb.dataset(uri, version=1)
    THEIRS["compact"](s3ddb.dataset(uri))
    THEIRS["delete-1"](s3ddb.dataset(uri))
    with pytest.raises(RetryableCommitConflictError, match="deleted or changed concurrently"):
        MINE[mine](pinned, 0)
    assert s3ddb.dataset(uri).version == 4
