"""The change feed of a dataset with stable row ids: an update's delete and insert of
one ``_rowid`` are its ``update_preimage`` and ``update_postimage``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import s3ddb
from s3ddb.errors import StoredMetadataError
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.framing import frame, unframe
from s3ddb.format.manifest import MANIFEST_MAGIC


def _feed(ds: s3ddb.Dataset, start: int) -> list[tuple[int, str, str, int]]:
    rows = ds.changes(start).select(["id", "s", "_change_type", "_commit_version"])
    return [tuple(r.values()) for r in rows.to_pylist()]  # type: ignore[misc]


def _history(uri: str, stable: bool) -> s3ddb.Dataset:
    ds = s3ddb.write_dataset(
        pa.table({"id": [1, 2, 3], "s": ["new"] * 3}), uri, enable_stable_row_ids=stable
    )
    ds.update({"s": "'shipped'"}, where="id = 2", rewrite="columns")  # v2: in place
    ds.update({"s": "'moved'"}, where="id = 3", rewrite="rows")  # v3: to a new fragment
    ds.delete("id = 1")  # v4
    source = pa.table({"id": [2, 4], "s": ["merged", "added"]})
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
    ds.optimize.compact_files()  # no rows
    return ds


def test_updates_and_merges_are_paired_by_row_id(tmp_path: Path) -> None:
    ds = _history(str(tmp_path / "ds"), stable=True)
    assert _feed(ds, 1) == [
        (2, "new", "update_preimage", 2),
        (2, "shipped", "update_postimage", 2),
        (3, "new", "update_preimage", 3),
        (3, "moved", "update_postimage", 3),
        (1, "new", "delete", 4),
        (2, "shipped", "update_preimage", 5),
        (2, "merged", "update_postimage", 5),
        (4, "added", "insert", 5),
    ]


def test_without_stable_row_ids_an_update_stays_a_delete_and_an_insert(tmp_path: Path) -> None:
    ds = _history(str(tmp_path / "ds"), stable=False)
    kinds = {kind for _id, _s, kind, _v in _feed(ds, 1)}
    assert kinds == {"delete", "insert"}


def test_a_paired_feed_applied_to_a_copy_reproduces_the_dataset(tmp_path: Path) -> None:
    ds = _history(str(tmp_path / "ds"), stable=True)
    copy = {1: "new", 2: "new", 3: "new"}
    for version in range(2, ds.version + 1):
        changes = ds.changes(version - 1, version)
        for row in changes.to_pylist():
            if row["_change_type"] in ("delete", "update_preimage"):
                assert copy.pop(row["id"]) == row["s"]  # the old values, as they were
            else:
                copy[row["id"]] = row["s"]
    assert copy == dict(zip(*ds.to_table().sort_by("id").to_pydict().values()))


def test_an_overwrite_is_not_paired(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(pa.table({"id": [1], "s": ["a"]}), uri, enable_stable_row_ids=True)
    ds = s3ddb.write_dataset(pa.table({"id": [1], "s": ["b"]}), uri, mode="overwrite")
    assert _feed(ds, 1) == [(1, "a", "delete", 2), (1, "b", "insert", 2)]


def test_an_update_whose_fragment_lost_its_row_ids_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(
        pa.table({"id": [1, 2], "s": ["a", "b"]}), uri, enable_stable_row_ids=True
    )
    ds.update({"s": "'c'"}, where="id = 1", rewrite="rows")
    path = min((tmp_path / "ds" / "_versions").glob("*.manifest"), key=lambda p: p.name)
    message = pb.Manifest.FromString(unframe(path.read_bytes(), MANIFEST_MAGIC, str(path)))
    message.ClearField("fragments_offset")
    message.ClearField("header_crc")
    message.fragments[1].ClearField("row_id_sequence")
    path.write_bytes(frame(message.SerializeToString(), MANIFEST_MAGIC))
    with pytest.raises(StoredMetadataError, match="no row ids"):
        s3ddb.dataset(uri).changes(1)
    # Reads that need no row ids still read the version.
    assert pc.sum(s3ddb.dataset(uri).to_table()["id"]).as_py() == 3


@pytest.mark.parametrize("stable", [True, False], ids=["stable row ids", "without"])
def test_a_data_replacement_lists_the_values_it_changed(tmp_path: Path, stable: bool) -> None:
    """A column's file replaced in place (a backfill built elsewhere, committed as a
    DataReplacement) changes those rows' values: the feed listed nothing."""
    from s3ddb.format.datafile import read_fragment, write_data_file
    from s3ddb.operations import DataReplacement

    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(
        pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"]}), uri, enable_stable_row_ids=stable
    )
    [fragment] = ds.get_fragments()
    rows = read_fragment(ds.handler.store, fragment, ds.manifest.schema, ["id", "s"])
    rows = rows.set_column(1, "s", pa.array(["a", "B", "c"]))  # one value changed
    new_file = write_data_file(ds.handler.store, rows, ds.manifest.schema)
    ds = s3ddb.Dataset.commit(uri, DataReplacement([(fragment.id, new_file)]), 1)
    if stable:
        assert _feed(ds, 1) == [(2, "b", "update_preimage", 2), (2, "B", "update_postimage", 2)]
    else:
        assert _feed(ds, 1) == [(2, "b", "delete", 2), (2, "B", "insert", 2)]
