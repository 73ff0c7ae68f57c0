"""A fragment's manifest entry is encoded once per object and kept on it
(``FragmentMetadata.manifest_entry``): what a manifest holds must stay exactly what
encoding its fragments afresh gives, and the kept bytes must never travel or outlive
the fields they were made from."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import PathOutsideDatasetError
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.fragment_list import FragmentList
from s3ddb.format.fragment_metadata import DataFile, DeletionFile, FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.stats import ColumnStatistics, FileStatistics


def _fragment(fid: int, deleted: int = 0) -> FragmentMetadata:
    stats = FileStatistics(
        file_key=7, columns=(ColumnStatistics(field_id=0, null_count=0, min=1, max=fid + 1),)
    )
    deletion = DeletionFile("arrow", 3, f"del-{fid}", deleted) if deleted else None
    return FragmentMetadata(
        fid, (DataFile(f"f{fid}.parquet", (0,), file_size_bytes=100),), 10, deletion,
        stats=(stats,),
    )  # fmt: skip


def _fresh(fragments: list[FragmentMetadata]) -> bytes:
    return pb.Manifest(fragments=[f.to_pb() for f in fragments]).SerializeToString(
        deterministic=True
    )


def test_kept_entries_encode_exactly_as_afresh() -> None:
    fragments = [_fragment(i, deleted=i % 2) for i in range(5)]
    first = FragmentList(fragments).encoded()
    assert first == _fresh(fragments)
    # Encoded again from the kept entries, and with fragments that differ from kept
    # ones by one field: each object's own bytes, never another's.
    changed = [f.with_deletion_file(None) if f.id == 3 else f for f in fragments]
    assert FragmentList(fragments).encoded() == first
    assert FragmentList(changed).encoded() == _fresh(changed) != first


def test_kept_entry_is_not_pickled_nor_copied_to_a_changed_fragment() -> None:
    fragment = _fragment(4)
    entry = fragment.manifest_entry()
    data = pickle.dumps(fragment)
    assert entry not in data
    back = pickle.loads(data)
    assert back == fragment and back.manifest_entry() == entry
    moved = fragment.with_id(9)
    assert moved.manifest_entry() == _fresh([moved]) != entry


def test_manifests_of_repeated_appends_hold_a_fresh_encoding(tmp_path: Path) -> None:
    # One handle appending again and again builds each manifest on the one before
    # (its fragments' entries kept): every stored manifest's fragments must be the
    # bytes a fresh encoding of what it holds gives.
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    ds = s3ddb.write_dataset(table, str(tmp_path), mode="create")
    for _ in range(4):
        ds.insert(table)
    paths = sorted((tmp_path / "_versions").glob("*.manifest"))
    assert len(paths) == 5
    for path in paths:
        manifest = Manifest.from_bytes(path.read_bytes(), str(path))
        fragments = list(manifest.fragments)
        assert fragments and manifest.fragments.encoded() == _fresh(fragments)


def test_base_ids_checked_once_per_list_still_refuse_an_undeclared_base() -> None:
    # A fragment list remembers which base ids its fragments use; what is allowed is
    # asked anew on every check, so a list accepted with its base declared is refused
    # once the manifest no longer declares it.
    fragment = FragmentMetadata(
        1, (DataFile("f.parquet", (0,), file_size_bytes=10, base_id=2),), 10
    )
    fragments = FragmentList([fragment])
    fragments.check_bases([2])
    fragments.check_bases([1, 2])
    with pytest.raises(PathOutsideDatasetError, match=r"base path\(s\) \[2\]"):
        fragments.check_bases([1])
    with pytest.raises(PathOutsideDatasetError):
        Manifest(
            version=1,
            schema=DatasetSchema.assign(pa.schema([("id", pa.int64())])),
            fragments=fragments,
        )
