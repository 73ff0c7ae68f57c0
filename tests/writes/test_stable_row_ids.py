"""Stable row ids and row versions (issue 48, item 1): allocation by every write that
adds rows, kept by the ones that move rows, re-allocated by a rebased commit, read on
request, and checked like any stored input."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import StoredMetadataError, UnsupportedFormatError, UnsupportedOperationError
from s3ddb.format import manifest as manifest_module
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.framing import frame, unframe
from s3ddb.format.manifest import MANIFEST_MAGIC
from s3ddb.format.row_lineage import (
    PENDING_ID,
    decode_row_ids,
    decode_versions,
    encode_row_ids,
    encode_versions,
)

LINEAGE = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"]


def _rows(ids: list[int], value: str = "a") -> pa.Table:
    return pa.table({"id": ids, "v": [value] * len(ids)})


def _lineage(ds: s3ddb.Dataset) -> dict[int, tuple[int, int, int]]:
    """key -> (_rowid, created, last updated)."""
    table = ds.to_table(columns=["id", *LINEAGE])
    return {r["id"]: tuple(r[c] for c in LINEAGE) for r in table.to_pylist()}


# --- the encoding -------------------------------------------------------------------


def test_row_ids_encode_ranges_compactly_and_round_trip_any_order() -> None:
    one_range = np.arange(10**6, 2 * 10**6, dtype=np.int64)
    assert len(encode_row_ids(one_range)) < 16  # a fragment written at once: one range
    mixed = np.array([5, 6, 7, 100, 3, 9, 2**62, PENDING_ID, PENDING_ID, 1], dtype=np.int64)
    data = encode_row_ids(mixed)
    assert decode_row_ids(data, 10, "f", pending_ok=True).tolist() == mixed.tolist()
    with pytest.raises(StoredMetadataError, match="malformed segment"):
        decode_row_ids(data, 10, "f")  # ids not allocated are never stored
    versions = np.array([1, 1, 1, 4, 4, 2, 9], dtype=np.int64)
    assert decode_versions(encode_versions(versions), 7, "f", "v").tolist() == versions.tolist()


@pytest.mark.parametrize(
    ("data", "rows", "match"),
    [
        (encode_row_ids(np.arange(5)), 6, "holds 5 ids for 6"),
        (encode_row_ids(np.arange(5)), 4, "more than"),
        (b"\x01" + b"\x80" * 3, 1, "cut short"),
        (b"\x01\x00" + b"\xff" * 9 + b"\x01\x01", 1, "out of range"),
        (b"\x02\x00\x00\x01", 1, "unknown encoding"),
        (b"\x01\x07\x00\x01", 1, "malformed segment"),
        (b"\x01\x01\x05\x00" + b"\x00" * 3, 5, "cut short"),
        (b"\x01" + b"\x01\x01\x00" * 400, 2, "too large"),
    ],
)
def test_a_malformed_row_id_sequence_is_refused(data: bytes, rows: int, match: str) -> None:
    with pytest.raises(StoredMetadataError, match=match):
        decode_row_ids(data, rows, "fragment 3")


# --- allocation ----------------------------------------------------------------------


def test_every_write_that_adds_rows_allocates_ids_and_moved_rows_keep_theirs(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows([1, 2, 3]), uri, enable_stable_row_ids=True)
    assert ds.has_stable_row_ids and ds.manifest.format_version == 3
    ds = s3ddb.write_dataset(_rows([4, 5]), uri, mode="append")  # v2
    ds.insert(_rows([6]))  # v3
    assert _lineage(ds) == {
        1: (0, 1, 1), 2: (1, 1, 1), 3: (2, 1, 1), 4: (3, 2, 2), 5: (4, 2, 2), 6: (5, 3, 3)
    }  # fmt: skip
    ds.delete("id = 2")  # v4: its id is gone, never given again
    ds.update({"v": "'b'"}, where="id = 3", rewrite="columns")  # v5: in place
    ds.update({"v": "'c'"}, where="id = 4", rewrite="rows")  # v6: moved to a new fragment
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _rows([5, 7], "m")
    )  # v7: 5 updated (moved), 7 inserted
    assert _lineage(ds) == {
        1: (0, 1, 1), 3: (2, 1, 5), 4: (3, 2, 6), 5: (4, 2, 7), 6: (5, 3, 3), 7: (6, 7, 7)
    }  # fmt: skip
    assert ds.manifest.next_row_id == 7
    # An overwrite keeps the feature and allocates above every id ever given.
    ds = s3ddb.write_dataset(_rows([8]), uri, mode="overwrite")
    assert ds.has_stable_row_ids and _lineage(ds) == {8: (7, ds.version, ds.version)}
    # A restore brings rows back with their ids; new rows still get new ones.
    ds.checkout_version(7).restore()
    ds = s3ddb.dataset(uri)
    ds.insert(_rows([9]))
    assert _lineage(ds)[1] == (0, 1, 1) and _lineage(ds)[9] == (8, ds.version, ds.version)


def test_compaction_and_schema_changes_keep_ids_and_versions(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows([1, 2]), uri, enable_stable_row_ids=True)
    for key in range(3, 9):
        ds.insert(_rows([key]))
    ds.delete("id IN (2, 5)")
    ds.update({"v": "'u'"}, where="id = 7", rewrite="rows")
    before = _lineage(ds)
    fragments = len(ds.get_fragments())
    ds.optimize.compact_files()
    assert len(ds.get_fragments()) < fragments
    assert _lineage(ds) == before
    ds.add_columns({"w": "id * 2"})
    ds.alter_columns({"path": "v", "name": "value"})
    ds.alter_columns({"path": "value", "data_type": pa.large_string()})  # files rewritten
    ds.drop_columns(["w"])
    assert _lineage(ds) == before  # no change of any row's values: no new stamp
    filtered = ds.to_table(columns=["_rowid"], filter="id > 6")["_rowid"].to_pylist()
    assert sorted(filtered) == sorted([before[7][0], before[8][0]])


def test_scanner_with_row_id_adds_the_stable_id(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows([1, 2, 3]), uri, enable_stable_row_ids=True)
    ds.delete("id = 1")
    table = ds.scanner(columns=["id"], with_row_id=True).to_table()
    assert table.column_names == ["id", "_rowid"]
    assert table.schema.field("_rowid").type == pa.uint64()
    assert table.to_pydict() == {"id": [2, 3], "_rowid": [1, 2]}
    assert ds.take([1], columns=["_rowid"]).to_pylist() == [{"_rowid": 2}]


def test_without_stable_row_ids_the_columns_and_flag_are_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows([1]), uri)
    assert not ds.has_stable_row_ids and ds.manifest.format_version == 1
    with pytest.raises(s3ddb.errors.ColumnNotFoundError, match="_rowid"):
        ds.to_table(columns=["_rowid"])
    with pytest.raises(
        UnsupportedOperationError,
        match=r"with_row_id needs stable row ids.*enable_stable_row_ids=True",
    ):
        ds.scanner(with_row_id=True)
    with pytest.raises(UnsupportedOperationError, match="enable_stable_row_ids"):
        s3ddb.write_dataset(_rows([2]), uri, mode="append", enable_stable_row_ids=True)


# --- concurrent writers --------------------------------------------------------------


def test_a_commit_rebased_over_another_allocates_its_ids_again(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows([0]), uri, enable_stable_row_ids=True)
    first, second = s3ddb.dataset(uri), s3ddb.dataset(uri)  # both at version 1
    first.insert(_rows([1, 2]))
    second.insert(_rows([3, 4]))  # planned on version 1, rebased over version 2
    assert second.manifest.metrics["rebased_over"] == [2]
    ds = s3ddb.dataset(uri)
    assert sorted(v[0] for v in _lineage(ds).values()) == [0, 1, 2, 3, 4]
    assert _lineage(ds)[3] == (3, 3, 3)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_racing_writers_never_share_an_id(tmp_path: Path, where: str) -> None:
    uri = str(tmp_path / "ds") if where == "local" else f"memory://rowids-{uuid.uuid4().hex}"
    s3ddb.write_dataset(_rows([-1]), uri, enable_stable_row_ids=True)
    errors: list[BaseException] = []
    writers, commits = 3, 4

    def write(worker: int) -> None:
        try:
            ds = s3ddb.dataset(uri)
            for i in range(commits):
                keys = [worker * 1000 + i * 10 + k for k in range(3)]
                ds.insert(_rows(keys))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    ds = s3ddb.dataset(uri)
    ids = ds.to_table(columns=["_rowid"])["_rowid"].to_pylist()
    total = 1 + writers * commits * 3
    assert len(ids) == total and sorted(ids) == list(range(total))
    assert ds.manifest.next_row_id == total


# --- stored lineage is untrusted -----------------------------------------------------


def _newest_manifest(root: Path) -> Path:
    return min((root / "_versions").glob("*.manifest"), key=lambda p: p.name)


def _plant(path: Path, change: Any) -> None:
    message = pb.Manifest.FromString(unframe(path.read_bytes(), MANIFEST_MAGIC, str(path)))
    # Written again in field order, as a manifest of the layout before header-first.
    message.ClearField("fragments_offset")
    message.ClearField("header_crc")
    change(message)
    path.write_bytes(frame(message.SerializeToString(), MANIFEST_MAGIC))


def _two_fragments(tmp_path: Path) -> tuple[str, Path]:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows([1, 2]), uri, enable_stable_row_ids=True)
    ds.insert(_rows([3, 4]))
    return uri, _newest_manifest(tmp_path / "ds")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda m: setattr(m.fragments[1], "row_id_sequence", encode_row_ids(np.arange(3))),
         "holds more than 2 ids for 2"),
        (lambda m: setattr(m.fragments[1], "row_id_sequence", b"\x01" + b"\x00\x00\x01" * 99),
         "too large"),
        (lambda m: setattr(m.fragments[1], "row_id_sequence", b"\x01\x02\x02"),
         "malformed segment"),
        (lambda m: setattr(m.fragments[1], "row_last_updated_at_versions",
                           encode_versions(np.array([0, 0]))), "outside"),
        (lambda m: setattr(m.fragments[1], "row_created_at_versions",
                           encode_versions(np.array([2]))), "covers 1 rows"),
    ],
)  # fmt: skip
def test_a_malformed_stored_lineage_is_refused_naming_the_manifest(
    tmp_path: Path, change: Any, match: str
) -> None:
    uri, path = _two_fragments(tmp_path)
    _plant(path, change)
    with pytest.raises(StoredMetadataError, match=match) as info:
        s3ddb.dataset(uri).to_table(columns=["id", "_rowid"])
    assert path.name in str(info.value)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        # Fragment 1 claims fragment 0's ids: two rows of one id.
        (lambda m: setattr(m.fragments[1], "row_id_sequence", m.fragments[0].row_id_sequence),
         "two rows"),
        (lambda m: setattr(m, "next_row_id", 3), "never allocated"),
        (lambda m: setattr(m.fragments[1], "row_last_updated_at_versions",
                           encode_versions(np.array([9, 9]))), "after the manifest"),
        (lambda m: m.fragments[1].ClearField("row_id_sequence"), "no row ids"),
    ],
)  # fmt: skip
def test_lineage_that_contradicts_the_version_is_refused_when_read(
    tmp_path: Path, change: Any, match: str
) -> None:
    uri, path = _two_fragments(tmp_path)
    _plant(path, change)
    ds = s3ddb.dataset(uri)
    assert ds.to_table(columns=["id"]).num_rows == 4  # rows without lineage read as before
    with pytest.raises(StoredMetadataError, match=match):
        ds.to_table(columns=["id", *LINEAGE])


def test_a_release_that_knows_no_row_ids_refuses_the_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows([1]), uri, enable_stable_row_ids=True)
    # An s3ddb reading formats 1 to 2 neither reads it nor writes a version without
    # the row ids: the stored format says the dataset needs more.
    monkeypatch.setattr(manifest_module, "FORMAT_VERSION", 2)
    with pytest.raises(UnsupportedFormatError, match="format 3"):
        s3ddb.dataset(uri)


@pytest.mark.parametrize("kind", ["shallow", "deep"])
def test_a_clone_keeps_row_ids_as_rows_of_its_first_version(tmp_path: Path, kind: str) -> None:
    ds = s3ddb.write_dataset(_rows([1, 2]), str(tmp_path / "src"), enable_stable_row_ids=True)
    ds.insert(_rows([3]))
    ds.delete("id = 1")
    clone = getattr(ds, f"{kind}_clone")(str(tmp_path / "clone"))
    assert clone.has_stable_row_ids
    assert _lineage(clone) == {2: (1, 1, 1), 3: (2, 1, 1)}
    clone.insert(_rows([4]))
    assert _lineage(clone)[4] == (3, 2, 2)  # above every id the source gave


def test_lance_commit_of_an_overwrite_can_ask_for_stable_row_ids(tmp_path: Path) -> None:
    from s3ddb.fragment import write_fragments
    from s3ddb.lance_dataset import LanceDataset
    from s3ddb.operations import Append, Overwrite

    uri = str(tmp_path / "ds")
    table = _rows([1, 2])
    fragments = write_fragments(table, uri)
    ds = LanceDataset.commit(uri, Overwrite(fragments, table.schema), enable_stable_row_ids=True)
    assert ds.has_stable_row_ids and _lineage(ds) == {1: (0, 1, 1), 2: (1, 1, 1)}
    more = write_fragments(_rows([3]), uri)
    with pytest.raises(UnsupportedOperationError, match="Overwrite"):
        LanceDataset.commit(uri, Append(more), read_version=1, enable_stable_row_ids=True)
    ds = LanceDataset.commit(uri, Append(more), read_version=1)
    assert _lineage(ds)[3] == (2, 2, 2)  # fragments written apart get ids at commit


def test_row_ids_live_in_fragment_list_chunks_too() -> None:
    uri = f"memory://rowids-chunks-{uuid.uuid4().hex}"
    ds = s3ddb.write_dataset(_rows([0]), uri, enable_stable_row_ids=True)
    for key in range(1, 140):  # past 128 fragments: the list goes to chunks
        ds.insert(_rows([key]))
    ds = s3ddb.dataset(uri)
    assert ds.manifest.fragments.chunk_refs() and ds.manifest.format_version == 3
    ds.update({"v": "'u'"}, where="id = 7")
    lineage = _lineage(s3ddb.dataset(uri))
    assert lineage[7] == (7, 8, ds.version) and lineage[139] == (139, 140, 140)
    assert sorted(v[0] for v in lineage.values()) == list(range(140))


def test_a_rewrite_whose_fragments_lack_row_ids_is_refused(tmp_path: Path) -> None:
    from s3ddb.errors import InvalidInputError
    from s3ddb.fragment import write_fragments
    from s3ddb.operations import Rewrite, RewriteGroup

    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows([1, 2]), uri, enable_stable_row_ids=True)
    ds.insert(_rows([3]))
    old = tuple(ds.manifest.fragments)
    new = tuple(write_fragments(ds.to_table(), uri))  # the same rows, without their ids
    with pytest.raises(InvalidInputError, match="carry no row ids"):
        s3ddb.Dataset.commit(uri, Rewrite((RewriteGroup(old, new),)), read_version=2)
    ds = s3ddb.dataset(uri)
    assert ds.version == 2 and _lineage(ds) == {1: (0, 1, 1), 2: (1, 1, 1), 3: (2, 2, 2)}


def test_writer_processes_racing_never_share_an_id(tmp_path: Path) -> None:
    from tests.support.proc import run_workers
    from tests.support.workers import rows_for

    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(rows_for(9, 0, 1), uri, enable_stable_row_ids=True)
    results = run_workers([("append", uri, str(w), "4", "2") for w in range(2)])
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    ds = s3ddb.dataset(uri)
    ids = ds.to_table(columns=["_rowid"])["_rowid"].to_pylist()
    assert ds.version == 9 and sorted(ids) == list(range(1 + 2 * 4 * 2))


def test_a_row_an_update_absorbs_in_a_rebase_keeps_its_id(tmp_path: Path) -> None:
    """An update planned at version 1 rebases over a concurrent insert of a row its
    where clause matches, and changes that row too (as run after the insert). The
    row keeps its id and records the update's version, as an update run second would
    leave it; it used to be written as a new row with a new id."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1, 2], "v": [0, 0]}), uri, enable_stable_row_ids=True)
    mine = s3ddb.dataset(uri)
    s3ddb.dataset(uri).insert(pa.table({"id": [3], "v": [100]}))  # version 2

    def ids(ds: s3ddb.Dataset) -> dict[int, int]:
        t = ds.to_table(with_row_id=True)
        return dict(zip(t["id"].to_pylist(), t["_rowid"].to_pylist(), strict=True))

    before = ids(s3ddb.dataset(uri))
    mine.update({"v": "v + 1"}, where="v >= 100 OR id = 1", rewrite="rows", conflict_retries=0)
    after = s3ddb.dataset(uri)
    assert after.version == 3
    assert sorted(after.to_table()["v"].to_pylist()) == [0, 1, 101]
    assert ids(after) == before
    changed = after.changes(2)
    kinds = dict(zip(changed["id"].to_pylist(), changed["_change_type"].to_pylist(), strict=False))
    assert kinds.get(3) in ("update_preimage", "update_postimage")
