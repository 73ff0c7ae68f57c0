"""Fragment-list chunks (manifest format 2): the layout, what readers fetch, what
commits write, untrusted chunks, the format-1 fixture, cleanup and verify, crashes
on the DynamoDB path."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s3ddb
from s3ddb.errors import (
    ManifestCorruptError,
    ManifestFinalizationError,
    StoredMetadataError,
    UnsupportedFormatError,
)
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.chunk_writer import ChunkPolicy, write_chunks
from s3ddb.format.chunks import ChunkSource, StoredChunk, clear_chunk_cache
from s3ddb.format.fragment_list import FragmentList
from s3ddb.format.framing import frame, unframe
from s3ddb.format.manifest import CHUNKED_MANIFEST_MAGIC, MANIFEST_MAGIC, Manifest
from s3ddb.io.object_store import ObjectStore
from s3ddb.maintenance.verify import verify

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "format1_dataset"
SMALL = {"s3ddb.chunk_fragments": "8", "s3ddb.inline_fragments": "3"}


def _ids(rows: range) -> pa.Table:
    return pa.table({"id": pa.array(list(rows), pa.int64())})


def _chunked(uri: str, fragments: int, config: dict[str, str] = SMALL) -> s3ddb.Dataset:
    """A dataset of ``fragments`` one-row fragments (sorted ids), with ``config``."""
    s3ddb.write_dataset(_ids(range(1)), uri)
    s3ddb.dataset(uri).update_config(config)
    s3ddb.write_dataset(_ids(range(1, fragments)), uri, mode="append", max_rows_per_file=1)
    return s3ddb.dataset(uri)


def _newest_manifest(root: Path) -> Path:
    return min((root / "_versions").glob("*.manifest"), key=lambda p: p.name)


def _chunk_files(root: Path) -> set[str]:
    return {p.name for p in (root / "_fragments").glob("*.chunk")}


def _loaded(ds: s3ddb.Dataset) -> int:
    segments = ds.manifest.fragments.segments
    return sum(1 for s in segments if isinstance(s, StoredChunk) and s.loaded)


# --- layout ---------------------------------------------------------------------------


def test_a_large_fragment_list_is_stored_in_chunks_and_reads_the_same(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = _chunked(uri, 60)
    assert ds.manifest.format_version == 2
    assert _newest_manifest(tmp_path / "ds").read_bytes()[:8] == CHUNKED_MANIFEST_MAGIC
    refs = ds.manifest.fragments.chunk_refs()
    assert refs and all(r.fragment_count <= 8 for r in refs)
    assert _chunk_files(tmp_path / "ds") == {r.name for r in refs}
    assert sorted(ds.to_table().column("id").to_pylist()) == list(range(60))
    assert ds.count_rows() == 60 and len(ds.get_fragments()) == 60
    # Appends one by one: every version reads its rows.
    for i in range(60, 75):
        s3ddb.write_dataset(_ids(range(i, i + 1)), uri, mode="append")
    ds = s3ddb.dataset(uri)
    assert sorted(ds.to_table().column("id").to_pylist()) == list(range(75))
    assert ds.checkout_version(ds.version - 5).count_rows() == 70
    # The small chunks at the end are merged: few chunks however many appends.
    assert len(ds.manifest.fragments.chunk_refs()) <= 75 // 4 + 4


def test_a_small_dataset_stays_in_format_1(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_ids(range(10)), uri, max_rows_per_file=1)
    assert ds.manifest.format_version == 1
    assert _newest_manifest(tmp_path / "ds").read_bytes()[:8] == MANIFEST_MAGIC
    assert not (tmp_path / "ds" / "_fragments").exists()


def test_the_layout_keeps_every_fragment_in_order() -> None:
    from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
    from s3ddb.format.schema import DatasetSchema

    def fragment(i: int) -> FragmentMetadata:
        return FragmentMetadata(i, (DataFile(f"{i}.parquet", (0,)),), i % 5 + 1)

    class Store:  # what write_chunks needs of a store: a URL, to name the chunks
        url = "memory://layout"
        is_local = True

    schema = DatasetSchema.assign(pa.schema([pa.field("id", pa.int64())]))
    written: dict[str, bytes] = {}
    policy = ChunkPolicy(chunk_fragments=16, inline_fragments=5)
    manifest = Manifest(1, schema, [fragment(i) for i in range(3)], max_fragment_id=2)
    for step in range(1, 40):
        grown = manifest.evolve(
            version=step + 1,
            fragments=manifest.fragments + [fragment(3 * step + k) for k in range(3)],
            max_fragment_id=3 * step + 2,
        )
        manifest, paths = write_chunks(
            grown,
            ChunkSource(Store()),
            lambda p, d: written.__setitem__(p, d),
            policy,  # type: ignore[arg-type]
        )
        assert [f.id for f in manifest.fragments] == list(range(3 * step + 3))
        refs = manifest.fragments.chunk_refs()
        assert all(r.fragment_count <= 16 for r in refs)
        # Only chunks written by this step are new; the others are listed again.
        assert {p.rsplit("/", 1)[1] for p in paths} <= {r.name for r in refs}
        assert len(manifest.fragments.segments) - len(refs) <= 1  # the inline tail
    # A binary counter at the end: few small chunks.
    small = [r.fragment_count for r in manifest.fragments.chunk_refs() if r.fragment_count < 8]
    assert len(small) <= 4


# --- what readers fetch, what commits write -------------------------------------------


def test_open_and_count_fetch_no_chunk_and_a_point_query_one(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _chunked(uri, 120)
    ds = s3ddb.dataset(uri)
    assert ds.count_rows() == 120
    assert _loaded(ds) == 0
    assert ds.to_table(filter="id = 77").column("id").to_pylist() == [77]
    assert _loaded(ds) == 1
    assert len(ds.manifest.fragments.chunk_refs()) > 10


def test_an_append_writes_a_small_root_and_at_most_one_chunk(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    root = tmp_path / "ds"
    _chunked(uri, 400, {"s3ddb.chunk_fragments": "64", "s3ddb.inline_fragments": "8"})
    flat = s3ddb.dataset(uri).manifest.evolve(fragments=list(s3ddb.dataset(uri).manifest.fragments))
    whole = len(flat.to_bytes())  # the same fragments, every one inline
    before = _chunk_files(root)
    s3ddb.write_dataset(_ids(range(400, 401)), uri, mode="append")
    new_chunks = _chunk_files(root) - before
    assert len(new_chunks) <= 1
    root_size = _newest_manifest(root).stat().st_size
    written = root_size + sum((root / "_fragments" / n).stat().st_size for n in new_chunks)
    assert written * 4 < whole, (written, whole)


def test_a_delete_rewrites_only_the_chunk_it_touches(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = _chunked(uri, 100)
    before = [r.name for r in ds.manifest.fragments.chunk_refs()]
    ds.delete("id = 42")
    ds = s3ddb.dataset(uri)
    after = [r.name for r in ds.manifest.fragments.chunk_refs()]
    assert len(after) == len(before)
    assert sum(1 for a, b in zip(before, after) if a != b) == 1
    assert sorted(ds.to_table().column("id").to_pylist()) == [i for i in range(100) if i != 42]
    ds.update({"id": "id + 1000"}, where="id = 43")
    assert ds.to_table(filter="id = 1043").num_rows == 1


# --- untrusted chunks -----------------------------------------------------------------


def test_a_damaged_or_missing_chunk_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = _chunked(uri, 40)
    ref = ds.manifest.fragments.chunk_refs()[1]
    path = tmp_path / "ds" / "_fragments" / ref.name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    clear_chunk_cache()  # as a new process: nothing fetched yet
    fresh = ChunkSource(ObjectStore(uri))
    with pytest.raises(ManifestCorruptError, match=ref.name):
        fresh.read(ref)
    path.write_bytes(bytes(data[:-1]))
    with pytest.raises(ManifestCorruptError, match="bytes"):
        ChunkSource(ObjectStore(uri)).read(ref)
    path.unlink()
    with pytest.raises(ManifestCorruptError, match="missing"):
        ChunkSource(ObjectStore(uri)).read(ref)
    report = verify(uri, grace_seconds=0)
    [bad] = [p for p in report.problems if p.kind == "bad_chunk_file"]
    assert bad.path == ref.path


def test_each_chunk_is_listed_with_its_digest_and_read_only_with_it(tmp_path: Path) -> None:
    """A chunk replaced after its commit by one of the same size and CRC-32 (which
    anyone can forge) is refused by its SHA-256, which the manifest records (and an
    external store's row records the manifest's)."""
    uri = str(tmp_path / "ds")
    refs = _chunked(uri, 40).manifest.fragments.chunk_refs()
    for ref in refs:
        data = (tmp_path / "ds" / "_fragments" / ref.name).read_bytes()
        assert ref.sha256 == hashlib.sha256(data).digest()
    clear_chunk_cache()
    other = dataclasses.replace(refs[0], sha256=bytes(32), message=None)  # same size, CRC
    with pytest.raises(ManifestCorruptError, match="SHA-256 digest differs"):
        ChunkSource(ObjectStore(uri)).read(other)
    assert ChunkSource(ObjectStore(uri)).read(refs[0])


def _rewrite_root(path: Path, change: Any, magic: bytes = CHUNKED_MANIFEST_MAGIC) -> None:
    message = pb.Manifest.FromString(unframe(path.read_bytes(), magic, str(path)))
    change(message)
    path.write_bytes(frame(message.SerializeToString(), magic))


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda m: setattr(m.chunks[0], "name", "../../etc.chunk"), StoredMetadataError, "name"),
        (lambda m: setattr(m.chunks[0], "size", 1 << 40), StoredMetadataError, "size"),
        (lambda m: setattr(m.chunks[0], "fragment_count", 1), ManifestCorruptError, "fragment"),
        (lambda m: setattr(m.chunks[0], "max_fragment_id", 10**6), StoredMetadataError, "max"),
        (lambda m: m.chunks.append(m.chunks[0]), StoredMetadataError, "twice"),
        (lambda m: setattr(m, "format_version", 4), UnsupportedFormatError, "format 4"),
        (lambda m: setattr(m.chunks[0], "sha256", b"\0" * 5), StoredMetadataError, "SHA-256"),
    ],
)
def test_a_root_whose_chunk_references_lie_is_refused(
    tmp_path: Path, change: Any, error: type[Exception], match: str
) -> None:
    uri = str(tmp_path / "ds")
    _chunked(uri, 30)
    _rewrite_root(_newest_manifest(tmp_path / "ds"), change)
    with pytest.raises(error, match=match):
        s3ddb.dataset(uri).to_table()


def test_a_newer_format_is_refused_by_its_magic(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _chunked(uri, 30)
    path = _newest_manifest(tmp_path / "ds")
    path.write_bytes(b"S3DDBMF3" + path.read_bytes()[8:-8] + b"S3DDBMF3")
    with pytest.raises(UnsupportedFormatError, match="upgrade"):
        s3ddb.dataset(uri)


# --- the format-1 fixture -------------------------------------------------------------

FIXTURE_IDS = [i for i in range(40) if i % 7 != 0]


def test_a_format_1_dataset_reads_travels_and_takes_commits(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    shutil.copytree(FIXTURE, uri)
    ds = s3ddb.dataset(uri)
    assert (ds.version, ds.manifest.format_version) == (6, 1)
    assert sorted(ds.to_table().column("id").to_pylist()) == FIXTURE_IDS
    assert ds.to_table(filter="id = 11").column("name").to_pylist() == ["upd"]
    assert ds.checkout_version(1).count_rows() == 10
    # Its next commits convert it once the fragments outgrow the inline tail.
    ds.update_config({"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "2"})
    s3ddb.write_dataset(pa.table({"id": [100], "name": ["new"]}), uri, mode="append")
    ds = s3ddb.dataset(uri)
    assert ds.manifest.format_version == 2
    assert sorted(ds.to_table().column("id").to_pylist()) == [*FIXTURE_IDS, 100]
    assert s3ddb.dataset(uri, version=6).manifest.format_version == 1
    assert sorted(s3ddb.dataset(uri, version=6).to_table().column("id").to_pylist()) == FIXTURE_IDS
    ds.delete("id = 1")
    assert s3ddb.dataset(uri).count_rows() == len(FIXTURE_IDS)
    assert verify(uri, grace_seconds=0).healthy


# --- cleanup, verify, failed commits --------------------------------------------------


def test_cleanup_deletes_the_chunks_no_kept_version_lists(
    tmp_path: Path, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    root = tmp_path / "ds"
    _chunked(uri, 50, {"s3ddb.chunk_fragments": "16", "s3ddb.inline_fragments": "1"})
    for i in range(50, 70):
        s3ddb.write_dataset(_ids(range(i, i + 1)), uri, mode="append")
    assert len(_chunk_files(root)) > len(s3ddb.dataset(uri).manifest.fragments.chunk_refs())
    stats = s3ddb.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert stats.files.get("chunk_files", 0) > 0
    ds = s3ddb.dataset(uri)
    assert _chunk_files(root) == {r.name for r in ds.manifest.fragments.chunk_refs()}
    assert sorted(ds.to_table().column("id").to_pylist()) == list(range(70))
    assert verify(uri, grace_seconds=0).healthy
    # A planted chunk file is reported, never read.
    (root / "_fragments" / ("0" * 32 + ".chunk")).write_bytes(b"planted")
    assert [p.kind for p in verify(uri, grace_seconds=0).problems] == ["unreferenced_file"]


def test_a_refused_commit_deletes_the_chunks_it_wrote(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    root = tmp_path / "ds"
    _chunked(uri, 40)
    stale = s3ddb.dataset(uri)
    s3ddb.write_dataset(_ids(range(40, 41)), uri, mode="overwrite")  # recreates the rows
    before = _chunk_files(root)
    with pytest.raises(s3ddb.errors.S3DDBError):
        stale.delete("id = 5")  # built on a version an overwrite replaced: refused
    assert _chunk_files(root) == before


# --- the DynamoDB path ------------------------------------------------------------------


@pytest.mark.parametrize("point", ["commit.after_stage_manifest", "commit.after_external_put"])
def test_a_crash_of_a_chunked_commit_is_finished_or_forgotten(
    aws: Any, ddb_uri: str, point: str
) -> None:
    from s3ddb.commit.failpoints import EXIT_CODE
    from tests.support.proc import run_workers
    from tests.support.workers import rows_for

    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, storage_options=so)
    s3ddb.dataset(ddb_uri, storage_options=so).update_config(
        {"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "1"}
    )
    for i in range(1, 6):
        s3ddb.write_dataset(rows_for(0, i, 2), ddb_uri, mode="append", storage_options=so)
    [crashed] = run_workers(
        [("append", ddb_uri, "1", "1", "2")], env={**aws.env(), "S3DDB_FAILPOINTS": f"{point}=exit"}
    )
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-2000:]
    decided = point == "commit.after_external_put"
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert ds.manifest.format_version == 2
    assert ds.version == (8 if decided else 7)
    after = s3ddb.write_dataset(rows_for(2, 0, 2), ddb_uri, mode="append", storage_options=so)
    ids = Counter(after.to_table(columns=["id"]).column("id").to_pylist())
    assert all(c == 1 for c in ids.values())
    assert len(ids) == 2 * (6 + 1 + int(decided))


def test_a_staged_root_whose_chunk_is_missing_is_never_finished(aws: Any, ddb_uri: str) -> None:
    from s3ddb.commit.failpoints import EXIT_CODE
    from s3ddb.io.uri import parse_uri
    from tests.conftest import TEST_BUCKET
    from tests.support.proc import run_workers
    from tests.support.workers import rows_for

    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, storage_options=so)
    s3ddb.dataset(ddb_uri, storage_options=so).update_config(
        {"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "1"}
    )
    for i in (1, 2):
        s3ddb.write_dataset(rows_for(0, i, 2), ddb_uri, mode="append", storage_options=so)
    plain = ddb_uri.replace("s3+ddb://", "s3://").split("?")[0]
    before = {m.path for m in ObjectStore(plain, so).list("_fragments/")}
    [crashed] = run_workers(
        [("append", ddb_uri, "1", "1", "2")],
        env={**aws.env(), "S3DDB_FAILPOINTS": "commit.after_external_put=exit"},
    )
    assert crashed.returncode == EXIT_CODE
    new = {m.path for m in ObjectStore(plain, so).list("_fragments/")} - before
    assert new, "the crashed append wrote a chunk"
    prefix = parse_uri(ddb_uri).path.split("/", 1)[1]
    for path in new:
        aws.boto3_client("s3").delete_object(Bucket=TEST_BUCKET, Key=f"{prefix}/{path}")
    with pytest.raises(ManifestFinalizationError, match="chunk"):
        s3ddb.dataset(ddb_uri, storage_options=so)


def test_fragment_lists_of_chunks_pickle_without_fetching(tmp_path: Path) -> None:
    import pickle

    uri = str(tmp_path / "ds")
    ds = _chunked(uri, 30)
    copied = pickle.loads(pickle.dumps(ds.manifest.fragments))
    assert isinstance(copied, FragmentList)
    assert [f.id for f in copied] == [f.id for f in ds.manifest.fragments]


def test_an_index_lookup_fetches_only_the_chunks_of_the_fragments_it_names(
    tmp_path: Path,
) -> None:
    import random

    uri = str(tmp_path / "ds")
    keys = list(range(120))
    random.Random(7).shuffle(keys)  # bounds of every chunk span nearly every key
    s3ddb.write_dataset(pa.table({"id": pa.array(keys[:1], pa.int64())}), uri)
    s3ddb.dataset(uri).update_config(SMALL)
    rest = pa.table({"id": pa.array(keys[1:], pa.int64())})
    s3ddb.write_dataset(rest, uri, mode="append", max_rows_per_file=1)
    s3ddb.dataset(uri).create_scalar_index("id", "BTREE")
    ds = s3ddb.dataset(uri)
    assert ds.manifest.format_version == 2
    assert ds.to_table(filter="id = 77").column("id").to_pylist() == [77]
    assert _loaded(ds) == 1
    # The same filter without the index reads every chunk its bounds allow.
    plain = s3ddb.dataset(uri)
    assert plain.to_table(filter="id + 0 = 77").column("id").to_pylist() == [77]
    assert _loaded(plain) > 5


def test_clones_and_drop_of_a_chunked_dataset(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = _chunked(uri, 40)
    expected = sorted(ds.to_table().column("id").to_pylist())
    shallow = ds.shallow_clone(str(tmp_path / "shallow"))
    deep = ds.deep_clone(str(tmp_path / "deep"))
    for clone in (shallow, deep):
        reopened = s3ddb.dataset(clone.uri)
        assert reopened.manifest.format_version == 2
        assert sorted(reopened.to_table().column("id").to_pylist()) == expected
        # The clone's chunks are its own, under its own root.
        refs = reopened.manifest.fragments.chunk_refs()
        assert {r.name for r in refs} <= _chunk_files(Path(clone.uri))
        assert verify(clone.uri, grace_seconds=0).healthy
    s3ddb.Dataset.drop(uri)
    assert not (tmp_path / "ds" / "_fragments").exists() or not _chunk_files(tmp_path / "ds")
    assert sorted(s3ddb.dataset(str(tmp_path / "deep")).to_table().column("id").to_pylist()) == (
        expected
    )


def test_the_diff_of_two_versions_skips_the_chunks_they_share(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    before = _chunked(uri, 60)
    s3ddb.write_dataset(_ids(range(60, 61)), uri, mode="append")
    s3ddb.dataset(uri).delete("id = 3")
    after = s3ddb.dataset(uri)
    removed, added, changed = before.manifest.fragments.diff(after.manifest.fragments)
    assert (removed, len(added), changed) == ({3}, 1, set())  # one-row fragment 3 is gone
    shared = {r.name for r in before.manifest.fragments.chunk_refs()} & {
        r.name for r in after.manifest.fragments.chunk_refs()
    }
    assert shared
    for ds in (before, after):
        for s in ds.manifest.fragments.segments:
            if isinstance(s, StoredChunk) and s.ref.name in shared:
                assert not s.loaded, s.ref.name


# --- the layout under random changes --------------------------------------------------

_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 40)),
        st.tuples(st.just("change"), st.integers(0, 10**6)),
        st.tuples(st.just("remove"), st.integers(0, 10**6)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40)
@given(steps=_STEPS, chunk=st.integers(2, 24), inline=st.integers(0, 6))
def test_any_sequence_of_changes_keeps_the_fragments_and_bounds_the_chunks(
    steps: list[tuple[str, int]], chunk: int, inline: int
) -> None:
    import uuid
    from dataclasses import replace

    from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
    from s3ddb.format.schema import DatasetSchema

    store = ObjectStore(f"memory://chunks-{uuid.uuid4().hex}")
    source = ChunkSource(store)
    policy = ChunkPolicy(chunk_fragments=chunk, inline_fragments=inline)
    schema = DatasetSchema.assign(pa.schema([pa.field("id", pa.int64())]))
    manifest = Manifest(1, schema, [], max_fragment_id=None)
    expected: list[FragmentMetadata] = []
    next_id = 0
    for n, (kind, value) in enumerate(steps, start=2):
        if kind == "append":
            new = [
                FragmentMetadata(i, (DataFile(f"{i}.parquet", (0,)),), 3)
                for i in range(next_id, next_id + value)
            ]
            next_id += value
            expected += new
            fragments = manifest.fragments + new
        elif not expected:
            continue
        else:
            target = expected[value % len(expected)].id
            if kind == "change":
                expected = [replace(f, physical_rows=f.physical_rows + 1) if f.id == target
                            else f for f in expected]  # fmt: skip
                fragments, _ = manifest.fragments.changed(
                    {target}, lambda f: replace(f, physical_rows=f.physical_rows + 1)
                )
            else:
                expected = [f for f in expected if f.id != target]
                fragments, _ = manifest.fragments.changed({target}, lambda f: None)
        grown = manifest.evolve(
            version=n, fragments=fragments, max_fragment_id=next_id - 1 if next_id else None
        )
        manifest, _written = write_chunks(grown, source, store.put, policy)
        # Read back from its bytes, as a reader would: the same fragments, in order.
        clear_chunk_cache()
        reread = Manifest.from_bytes(manifest.to_bytes(), "m", ChunkSource(store))
        assert [(f.id, f.physical_rows) for f in reread.fragments] == [
            (f.id, f.physical_rows) for f in expected
        ]
        assert reread.num_rows == sum(f.num_rows for f in expected)
        refs = reread.fragments.chunk_refs()
        assert all(r.fragment_count <= chunk for r in refs)
        if len(expected) <= inline:
            assert not refs  # small enough to be inline again
        # Few chunks: about 2 per full chunk's worth of fragments, plus the small ones
        # at the end (a binary counter).
        assert len(refs) <= 4 * len(expected) // chunk + 2 + len(expected).bit_length()
