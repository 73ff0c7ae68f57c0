"""Lazily decoded, spliced manifests decode to exactly what a full re-encode gives.

A manifest read from storage keeps its fragments encoded; a commit writes the untouched
ones as their stored bytes. These tests check, over random operation sequences and
random histories of real commits (appends, deletes, updates, compaction, rebases over
a concurrent writer, restores), that the bytes a commit writes parse to the same
protobuf message, and decode to the same manifest, as encoding every fragment again
would; and that the format's summary and offset are checked like any stored input.
"""

from __future__ import annotations

import pickle
import random
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3ddb
from s3ddb.errors import ManifestCorruptError, PathOutsideDatasetError
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.fragment_list import MAX_SEGMENTS, FragmentList
from s3ddb.format.fragment_metadata import DataFile, DeletionFile, FragmentMetadata
from s3ddb.format.framing import frame, unframe
from s3ddb.format.manifest import MANIFEST_MAGIC, Manifest
from s3ddb.format.schema import DatasetSchema

SCHEMA = DatasetSchema.assign(pa.schema([("id", pa.int64())]))


def _fragment(fid: int, rows: int, deleted: int = 0) -> FragmentMetadata:
    deletion = DeletionFile("arrow", 1, f"d{fid}-{deleted}", deleted) if deleted else None
    return FragmentMetadata(
        fid, (DataFile(f"f{fid}.parquet", (0,), file_size_bytes=rows * 8),), rows, deletion
    )


def _manifest(fragments: object, version: int = 1) -> Manifest:
    return Manifest(version=version, schema=SCHEMA, fragments=fragments)  # type: ignore[arg-type]


def _full_reencode(manifest: Manifest) -> bytes:
    """The payload with every fragment decoded to an object and encoded again."""
    return manifest.evolve(fragments=FragmentList(tuple(manifest.fragments))).payload()


def _assert_same(manifest: Manifest) -> None:
    spliced = manifest.payload()
    full = _full_reencode(manifest)
    assert pb.Manifest.FromString(spliced) == pb.Manifest.FromString(full)
    again = Manifest.from_bytes(frame(spliced, MANIFEST_MAGIC), "spliced")
    assert again == Manifest.from_bytes(frame(full, MANIFEST_MAGIC), "full") == manifest
    assert again.num_rows == sum(f.num_rows for f in again.fragments)
    assert len(again.fragments) == len(tuple(again.fragments))


# --- random operation sequences on a fragment list ---------------------------------------

_ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "change", "store", "pickle"]),
        st.integers(0, 2**16),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops)
def test_random_changes_match_a_plain_list(ops: list[tuple[str, int]]) -> None:
    model: list[FragmentMetadata] = []
    manifest = _manifest(())
    next_id = 0
    for kind, seed in ops:
        rng = random.Random(seed)
        before = manifest
        if kind == "append":
            new = [_fragment(next_id + i, rng.randint(1, 50)) for i in range(rng.randint(1, 4))]
            next_id += len(new)
            model.extend(new)
            manifest = manifest.evolve(
                fragments=manifest.fragments + tuple(new), max_fragment_id=next_id - 1
            )
        elif kind == "change" and model:
            picked = {f.id for f in rng.sample(model, rng.randint(1, min(3, len(model))))}
            removed = {fid for fid in picked if rng.random() < 0.3}

            def change(
                f: FragmentMetadata, removed: set[int] = removed, rng: random.Random = rng
            ) -> FragmentMetadata | None:
                if f.id in removed:
                    return None
                return _fragment(f.id, f.physical_rows, rng.randint(0, f.physical_rows))

            fragments, found = manifest.fragments.changed(picked | {next_id + 99}, change)
            assert found == picked
            manifest = manifest.evolve(fragments=fragments)
            model = [f for f in (manifest.fragments[i] for i in range(len(manifest.fragments)))]
        elif kind == "store":
            manifest = Manifest.from_bytes(manifest.to_bytes(), "stored")
        elif kind == "pickle":
            manifest = pickle.loads(pickle.dumps(manifest))
        assert len(manifest.fragments.segments) <= MAX_SEGMENTS + 1
        assert tuple(manifest.fragments) == tuple(model)
        assert manifest.fragments.ids() == [f.id for f in model]
        assert manifest.num_rows == sum(f.num_rows for f in model)
        _assert_same(manifest)
        _assert_diff(before, manifest)


def _assert_diff(before: Manifest, after: Manifest) -> None:
    """``diff`` and ``by_id`` agree with a plain comparison of decoded fragments."""
    old = {f.id: f for f in before.fragments}
    new = {f.id: f for f in after.fragments}
    fresh = Manifest.from_bytes(before.to_bytes(), "before")  # stored on one side only
    for base in (before, fresh):
        removed, added, changed = base.fragments.diff(after.fragments)
        assert removed == set(old) - set(new)
        assert added == [i for i in new if i not in old]
        assert changed == {i for i in set(old) & set(new) if old[i] != new[i]}
    by_id = after.fragments.by_id()
    assert set(by_id) == set(new) and len(by_id) == len(new)
    assert all(by_id[i] == f for i, f in new.items())


def test_many_appends_keep_few_segments() -> None:
    manifest = Manifest.from_bytes(_manifest([_fragment(0, 3)]).to_bytes(), "first")
    for i in range(1, 100):
        # `+` keeps the stored fragments encoded; unpacking would decode them.
        manifest = manifest.evolve(
            fragments=manifest.fragments + (_fragment(i, 3),),  # noqa: RUF005
            max_fragment_id=i,
        )
    assert len(manifest.fragments.segments) <= MAX_SEGMENTS
    assert [f.id for f in manifest.fragments] == list(range(100))
    _assert_same(manifest)


# --- random histories of real commits ----------------------------------------------------


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "v": pa.array([float(i) for i in range(n)])})  # fmt: skip


def _newest_manifest(uri: str) -> tuple[Manifest, bytes]:
    ds = s3ddb.dataset(uri)
    [path] = [
        p for p in (Path(uri) / "_versions").iterdir()
        if p.name.endswith(".manifest") and Manifest.from_bytes(p.read_bytes(), "").version
        == ds.version
    ]  # fmt: skip
    data = path.read_bytes()
    return Manifest.from_bytes(data, str(path)), unframe(data, MANIFEST_MAGIC, str(path))


@pytest.mark.parametrize("seed", range(6))
def test_random_histories_write_what_a_full_reencode_would(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 20), uri, max_rows_per_file=4)
    next_key = 20
    stale = s3ddb.dataset(uri)
    for _step in range(14):
        ds = s3ddb.dataset(uri)
        kind = rng.choice(["append", "append", "delete", "update", "compact", "stale", "restore"])
        if kind == "append":
            n = rng.randint(1, 6)
            s3ddb.write_dataset(_rows(next_key, n), uri, mode="append", max_rows_per_file=2)
            next_key += n
        elif kind == "delete":
            ds.delete(f"id % {rng.randint(3, 9)} = {rng.randint(0, 2)}")
        elif kind == "update":
            ds.update({"v": "v + 1"}, where=f"id < {rng.randint(0, next_key)}")
        elif kind == "compact":
            ds.optimize.compact_files(target_rows_per_fragment=rng.randint(3, 12))
        elif kind == "stale":
            # A writer pinned at an older version rebases over everything since.
            stale.delete(f"id = {rng.randint(0, next_key)}")
        elif kind == "restore" and ds.version > 2:
            s3ddb.dataset(uri, rng.randint(1, ds.version - 1)).restore()
        if rng.random() < 0.3:
            stale = s3ddb.dataset(uri)
        manifest, payload = _newest_manifest(uri)
        assert pb.Manifest.FromString(payload) == pb.Manifest.FromString(_full_reencode(manifest))
        full = Manifest.from_bytes(frame(_full_reencode(manifest), MANIFEST_MAGIC), "full")
        assert manifest == full
        assert manifest.num_rows == sum(f.num_rows for f in full.fragments)
        assert s3ddb.dataset(uri).count_rows() == s3ddb.dataset(uri).to_table().num_rows


# --- the stored layout ---------------------------------------------------------------------


def test_a_manifest_in_the_earlier_layout_still_reads_and_takes_appends(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 6), uri, max_rows_per_file=2)
    [path] = list((tmp_path / "ds" / "_versions").glob("*.manifest"))
    manifest = Manifest.from_bytes(path.read_bytes(), str(path))
    # Every field in field-number order, no offset, no summary: as s3ddb wrote it before.
    legacy = manifest.to_pb()
    legacy.ClearField("fragments_offset")
    legacy.ClearField("fragment_count")
    legacy.ClearField("visible_rows")
    path.write_bytes(frame(legacy.SerializeToString(deterministic=True), MANIFEST_MAGIC))
    assert s3ddb.dataset(uri).count_rows() == 6
    s3ddb.write_dataset(_rows(6, 2), uri, mode="append")
    newest, payload = _newest_manifest(uri)
    assert payload[:2] == bytes([16 << 3 | 5, 1])  # the new layout
    assert s3ddb.dataset(uri).to_table()["id"].to_pylist() == list(range(8))
    assert newest.fragments.ids() == [0, 1, 2, 3]


def _prefixed(header: bytes) -> bytes:
    """The payload's first two fields (fragments offset, header CRC) and ``header``."""
    offset = 12 + len(header)
    return struct.pack("<2sI2sI", b"\x85\x01", offset, b"\x9d\x01", zlib.crc32(header)) + header


def _planted(manifest: Manifest, edit: object) -> bytes:
    payload = bytearray(manifest.payload())
    edit(payload)  # type: ignore[operator]
    return frame(bytes(payload), MANIFEST_MAGIC)


def test_a_wrong_summary_or_offset_is_corruption() -> None:
    manifest = Manifest.from_bytes(
        _manifest([_fragment(0, 5), _fragment(1, 7, deleted=2)]).to_bytes(), "m"
    )
    header = manifest._header_pb()

    def with_header(**fields: int) -> bytes:
        h = pb.Manifest()
        h.CopyFrom(header)
        for k, v in fields.items():
            setattr(h, k, v)
        body = h.SerializeToString(deterministic=True)
        return frame(_prefixed(body) + manifest.fragments.encoded(), MANIFEST_MAGIC)

    with pytest.raises(ManifestCorruptError, match="summary says 3"):
        tuple(Manifest.from_bytes(with_header(fragment_count=3), "m").fragments)
    # Opening trusts the summary; counting checks it against the parsed fragments
    # (none decoded), and so does decoding.
    with pytest.raises(ManifestCorruptError, match="hold 10 visible rows, its summary says 11"):
        _ = Manifest.from_bytes(with_header(visible_rows=11), "m").num_rows
    with pytest.raises(ManifestCorruptError, match="summary says 11"):
        tuple(Manifest.from_bytes(with_header(visible_rows=11), "m").fragments)

    def bad_offset(p: bytearray) -> None:
        p[2:6] = struct.pack("<I", len(p) + 1)

    def bad_header(p: bytearray) -> None:
        p[13] ^= 0xFF

    with pytest.raises(ManifestCorruptError, match="corrupt header"):
        Manifest.from_bytes(_planted(manifest, bad_header), "m")

    with pytest.raises(ManifestCorruptError, match="offset"):
        Manifest.from_bytes(_planted(manifest, bad_offset), "m")

    def offset_at_start(p: bytearray) -> None:
        p[2:6] = struct.pack("<I", 12)  # the header parsed among the fragments
        p[8:12] = struct.pack("<I", zlib.crc32(b""))

    # The header is then empty: refused on open for its version 0, or when decoded.
    with pytest.raises(ManifestCorruptError, match=r"stored among the fragments|version 0 is out"):
        tuple(Manifest.from_bytes(_planted(manifest, offset_at_start), "m").fragments)


def test_a_planted_fragment_is_refused_when_decoded(tmp_path: Path) -> None:
    fragments = [_fragment(0, 2)]
    bad = pb.Manifest(fragments=[f.to_pb() for f in fragments])
    bad.fragments[0].files[0].path = "../../elsewhere.parquet"
    manifest = _manifest(())
    body = manifest._header_pb()
    body.fragment_count = 1
    body.visible_rows = 2
    head = body.SerializeToString(deterministic=True)
    data = frame(_prefixed(head) + bad.SerializeToString(), MANIFEST_MAGIC)
    opened = Manifest.from_bytes(data, "planted")
    assert opened.num_rows == 2
    with pytest.raises(PathOutsideDatasetError, match=r"elsewhere.*planted"):
        opened.fragments[0]


# --- splicing over concurrent changes --------------------------------------------------
# What an open, an append or a rebase costs as fragments pile up (they decode only the
# fragments they touch) is measured by benchmarks/metadata_scale.py (`make bench-scale`:
# time and Python heap beside pylance), not counted here.


def test_a_stale_append_rebased_over_a_delete_keeps_every_stored_fragment(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    n = 400
    s3ddb.write_dataset(_rows(0, n), uri, max_rows_per_file=1)
    stale = s3ddb.dataset(uri)
    s3ddb.write_dataset(_rows(n, 2), uri, mode="append")
    s3ddb.dataset(uri).delete("id = 7")
    # The stale append is read at version 1 and rebases over the append and the delete:
    # the manifest it writes splices the stored fragments it did not touch.
    stale.insert(_rows(n + 2, 1))
    latest = s3ddb.dataset(uri)
    assert latest.version == 4
    assert latest.count_rows() == n + 2
    assert sorted(latest.to_table()["id"].to_pylist()) == [i for i in range(n + 3) if i != 7]
    # The delete emptied the one-row fragment of id 7, which left the dataset.
    assert len(latest.get_fragments()) == n + 1
    # Every version still reads as it was committed.
    assert s3ddb.dataset(uri, version=1).count_rows() == n
    assert s3ddb.dataset(uri, version=3).count_rows() == n + 1
