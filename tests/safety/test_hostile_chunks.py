"""Hostile fragment-list chunks (manifest format 2): roots that list the same
fragments twice (a chunk copied under another name, an older version's chunk beside
the one that replaced it, the tail repeating a chunk's fragment), chunk references
whose ids lie, and chunks or manifests grown far past their recorded size.

Every read path must return the right rows or raise a typed error; never a row twice
or a deleted row back, never a MemoryError.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.errors import ManifestCorruptError, StoredMetadataError
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.chunks import CHUNK_MAGIC, clear_chunk_cache
from s3ddb.format.framing import frame, unframe
from s3ddb.format.manifest import CHUNKED_MANIFEST_MAGIC
from tests.conftest import TEST_BUCKET, TEST_TABLE

SMALL = {"s3ddb.chunk_fragments": "8", "s3ddb.inline_fragments": "3"}
REPO = Path(__file__).resolve().parents[2]


def _rows(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "name": [f"row-{i}" for i in ids]})


def _chunked(uri: str, fragments: int = 30, so: dict[str, str] | None = None) -> None:
    """A dataset of ``fragments`` one-row fragments (ids = row ids), in chunks of 8."""
    s3ddb.write_dataset(_rows(range(1)), uri, storage_options=so)
    s3ddb.dataset(uri, storage_options=so).update_config(SMALL)
    s3ddb.write_dataset(
        _rows(range(1, fragments)), uri, mode="append", max_rows_per_file=1, storage_options=so
    )


def _newest_root(root: Path) -> Path:
    return min((root / "_versions").glob("*.manifest"), key=lambda p: p.name)


def _read_root(path: Path) -> pb.Manifest:
    return pb.Manifest.FromString(unframe(path.read_bytes(), CHUNKED_MANIFEST_MAGIC, str(path)))


def _visible(f: pb.Fragment) -> int:
    deleted = f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0
    return int(f.physical_rows - deleted)


def _write_root(path: Path, m: pb.Manifest) -> None:
    """``m`` stored at ``path`` with a valid frame and a summary that agrees with its
    chunks and tail (what a hostile writer with the checksums right would store)."""
    m.fragment_count = sum(c.fragment_count for c in m.chunks) + len(m.fragments)
    m.visible_rows = sum(c.visible_rows for c in m.chunks) + sum(_visible(f) for f in m.fragments)
    m.ClearField("fragments_offset")  # the earlier layout: parsed whole, no header CRC
    m.ClearField("header_crc")
    path.write_bytes(frame(m.SerializeToString(), CHUNKED_MANIFEST_MAGIC))


def _chunk_fragments(root: Path, ref: pb.FragmentChunk) -> pb.Manifest:
    path = root / "_fragments" / ref.name
    return pb.Manifest.FromString(unframe(path.read_bytes(), CHUNK_MAGIC, str(path)))


# --- the same fragments listed twice ----------------------------------------------------


def _copied_chunk(root: Path) -> None:
    """The first chunk copied under another name, listed right after itself."""
    path = _newest_root(root)
    m = _read_root(path)
    copy = pb.FragmentChunk()
    copy.CopyFrom(m.chunks[0])
    copy.name = f"{uuid.uuid4().hex}.chunk"
    original = root / "_fragments" / m.chunks[0].name
    (root / "_fragments" / copy.name).write_bytes(original.read_bytes())
    m.chunks.insert(1, copy)
    _write_root(path, m)


def _older_chunk_beside(root: Path) -> None:
    """After ``delete("id = 3")`` removed fragment 3, the chunk of the version before
    (which still lists it) listed beside the one that replaced it."""
    uri = str(root)
    old = pb.FragmentChunk()
    old.CopyFrom(_read_root(_newest_root(root)).chunks[0])
    s3ddb.dataset(uri).delete("id = 3")
    path = _newest_root(root)
    m = _read_root(path)
    assert m.chunks[0].name != old.name
    m.chunks.insert(0, old)
    _write_root(path, m)


def _tail_repeats_a_chunk(root: Path) -> None:
    """Fragment 3 (of the first chunk) repeated in the root's inline tail."""
    path = _newest_root(root)
    m = _read_root(path)
    [three] = [f for f in _chunk_fragments(root, m.chunks[0]).fragments if f.id == 3]
    m.fragments.append(three)
    _write_root(path, m)


PLANTS: dict[str, Callable[[Path], None]] = {
    "a chunk copied under another name": _copied_chunk,
    "an older version's chunk beside the new one": _older_chunk_beside,
    "the tail repeats a chunk's fragment": _tail_repeats_a_chunk,
}


def _read_paths(uri: str) -> dict[str, Callable[[], Any]]:
    """Every way to read or change the dataset's rows, each from a fresh open."""

    def ds() -> s3ddb.Dataset:
        return s3ddb.dataset(uri)

    def spark_plan() -> Any:
        from s3ddb.spark_ext.native_plan import plan_native_read

        return plan_native_read(ds())

    def merge() -> Any:
        source = _rows(range(2, 4))
        return ds().merge_insert("id").when_matched_update_all().execute(source)

    return {
        "filtered scan": lambda: ds().to_table(filter="id < 8"),
        "scan": lambda: ds().to_table(),
        "scanner with a filter": lambda: ds().scanner(filter="id < 8").to_table(),
        "index-assisted scan": lambda: ds().to_table(filter="id = 3"),
        "count_rows": lambda: ds().count_rows(),
        "count_rows with a filter": lambda: ds().count_rows(filter="id < 8"),
        "take": lambda: ds().take([0, 1, 2, 3]),
        "get_fragment": lambda: ds().get_fragment(3),
        "delete": lambda: ds().delete("id = 2"),
        "update": lambda: ds().update({"name": "'x'"}, where="id = 2"),
        "merge_insert": merge,
        "compaction": lambda: ds().optimize.compact_files(),
        "Spark planning": spark_plan,
    }


@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_root_listing_fragments_twice_is_refused_on_every_path(
    tmp_path: Path, plant: str
) -> None:
    uri = str(tmp_path / "ds")
    _chunked(uri)
    s3ddb.dataset(uri).create_scalar_index("id", "BTREE")
    PLANTS[plant](tmp_path / "ds")
    clear_chunk_cache()
    version = int(_read_root(_newest_root(tmp_path / "ds")).version)
    for name, read in _read_paths(uri).items():
        with pytest.raises(StoredMetadataError, match=r"fragment \d+") as caught:
            result = read()
            pytest.fail(f"{name} returned {result!r:.300}")
        assert "twice" in str(caught.value) or "both" in str(caught.value), (name, caught.value)
    # Nothing was committed on top of the planted root.
    assert int(_read_root(_newest_root(tmp_path / "ds")).version) == version


# --- sizes: read no more than recorded -----------------------------------------------------

_HUGE = 5 << 30
_CHILD = """
import resource, sys
limit = 2 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import s3ddb
from s3ddb.format.chunks import clear_chunk_cache
try:
    ds = s3ddb.dataset(sys.argv[1])
    print(ds.to_table(filter=sys.argv[2]).num_rows)
except BaseException as exc:
    print(type(exc).__name__, isinstance(exc, s3ddb.S3DDBError), str(exc)[:300])
"""


def _read_in_a_small_address_space(uri: str, where: str = "id < 100") -> str:
    """What a child limited to 2 GiB of address space prints after reading ``uri``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, uri, where],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_a_chunk_grown_to_gibibytes_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _chunked(uri)
    ref = _read_root(_newest_root(tmp_path / "ds")).chunks[0]
    chunk = tmp_path / "ds" / "_fragments" / ref.name
    os.truncate(chunk, _HUGE)  # sparse: no disk used
    out = _read_in_a_small_address_space(uri)
    assert out.startswith("ManifestCorruptError True"), out
    assert ref.name in out and str(ref.size) in out, out


def test_a_manifest_grown_to_gibibytes_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _chunked(uri)
    os.truncate(_newest_root(tmp_path / "ds"), _HUGE)
    out = _read_in_a_small_address_space(uri)
    assert out.startswith(("ManifestCorruptError True", "StoredMetadataError True")), out
    assert "bytes" in out, out


def test_a_chunk_longer_than_recorded_on_s3_is_refused_after_a_bounded_read(
    moto_aws: Any,
) -> None:
    so = moto_aws.storage_options()
    prefix = f"c-{uuid.uuid4().hex[:10]}/ds"
    uri = f"s3+ddb://{TEST_BUCKET}/{prefix}?ddbTableName={TEST_TABLE}"
    _chunked(uri, so=so)
    ds = s3ddb.dataset(uri, storage_options=so)
    ref = ds.manifest.fragments.chunk_refs()[0]
    s3 = moto_aws.boto3_client("s3")
    key = f"{prefix}/{ref.path}"
    grown = s3.get_object(Bucket=TEST_BUCKET, Key=key)["Body"].read() + b"\0" * (4 << 20)
    s3.put_object(Bucket=TEST_BUCKET, Key=key, Body=grown)
    clear_chunk_cache()
    MANIFESTS.clear()  # as a new process: no manifest (nor its chunks) in memory
    moto_aws.clear_requests()
    with pytest.raises(ManifestCorruptError, match=ref.name):
        s3ddb.dataset(uri, storage_options=so).to_table()
    gets = [r for r in moto_aws.requests if r.operation == "GetObject" and ref.name in r.path]
    assert gets and all(r.response_bytes <= ref.size + 1 for r in gets), (ref.size, gets)
    # An empty object (no byte 0 to range over) is a short chunk like any other.
    s3.put_object(Bucket=TEST_BUCKET, Key=key, Body=b"")
    clear_chunk_cache()
    MANIFESTS.clear()
    with pytest.raises(ManifestCorruptError, match=f"0 bytes, its manifest says {ref.size}"):
        s3ddb.dataset(uri, storage_options=so).to_table()


# --- what chunk references claim ---------------------------------------------------------


def _compacted(uri: str) -> s3ddb.Dataset:
    """A chunked dataset of two-row fragments in which a compaction put a new fragment
    (a high id) among old ones: the first chunk's id range spans later chunks'."""
    s3ddb.write_dataset(_rows(range(2)), uri)
    s3ddb.dataset(uri).update_config(SMALL)
    s3ddb.write_dataset(_rows(range(2, 60)), uri, mode="append", max_rows_per_file=2)
    s3ddb.dataset(uri).delete("id = 20")
    s3ddb.dataset(uri).optimize.compact_files(target_rows_per_fragment=2)
    return s3ddb.dataset(uri)


def _loaded(ds: s3ddb.Dataset) -> int:
    from s3ddb.format.chunks import StoredChunk

    return sum(1 for s in ds.manifest.fragments.segments if isinstance(s, StoredChunk) and s.loaded)


def test_chunks_whose_id_ranges_overlap_after_a_compaction_are_told_apart_unread(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    ds = _compacted(uri)
    refs = ds.manifest.fragments.chunk_refs()
    spanning = [r for r in refs if r.runs]
    assert spanning and any(
        r.min_fragment_id <= other.min_fragment_id <= r.max_fragment_id
        for r in spanning
        for other in refs
        if other is not r
    ), refs
    clear_chunk_cache()
    fresh = s3ddb.dataset(uri)
    assert fresh.count_rows() == 59 and _loaded(fresh) == 0
    assert fresh.to_table(filter="id = 45").column("name").to_pylist() == ["row-45"]
    assert _loaded(fresh) == 1
    assert sorted(fresh.to_table().column("id").to_pylist()) == [i for i in range(60) if i != 20]


def _strip_runs(root: Path) -> None:
    """The newest root's references as written before they recorded id runs."""
    path = _newest_root(root)
    m = _read_root(path)
    for ref in m.chunks:
        ref.ClearField("id_runs")
    _write_root(path, m)


def test_references_without_id_runs_make_the_reader_check_every_chunk(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _compacted(uri)
    _strip_runs(tmp_path / "ds")
    clear_chunk_cache()
    ds = s3ddb.dataset(uri)
    # Ranges that overlap, and chunks that may hold fewer ids than their ranges: only
    # the chunks tell, so the open fetched them all (and found each id once).
    assert _loaded(ds) == len(ds.manifest.fragments.chunk_refs())
    assert sorted(ds.to_table(filter="id < 30").column("id").to_pylist()) == [
        i for i in range(30) if i != 20
    ]
    # The next commit records the ids its references lacked: its readers fetch nothing.
    s3ddb.write_dataset(_rows(range(60, 61)), uri, mode="append")
    clear_chunk_cache()
    after = s3ddb.dataset(uri)
    assert all(r.exact for r in after.manifest.fragments.chunk_refs())
    assert after.count_rows() == 60 and _loaded(after) == 0


def test_an_old_chunk_beside_its_successor_without_id_runs_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _chunked(uri)
    _older_chunk_beside(tmp_path / "ds")
    _strip_runs(tmp_path / "ds")  # the new chunk lost fragment 3: a gap, no runs
    clear_chunk_cache()
    with pytest.raises(StoredMetadataError, match=r"fragment \d+ is listed twice"):
        s3ddb.dataset(uri).to_table(filter="id < 8")


def test_a_chunk_that_does_not_hold_the_ids_its_reference_claims_is_refused(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    ds = _compacted(uri)
    [spanning] = [r for r in ds.manifest.fragments.chunk_refs() if r.runs][:1]
    path = _newest_root(tmp_path / "ds")
    m = _read_root(path)
    [ref] = [r for r in m.chunks if r.name == spanning.name]
    # The same count of ids, its last run (the compaction's new fragment) moved up by
    # one: an id no fragment has, which no other chunk claims.
    runs = list(ref.id_runs)
    runs[-2] += 1
    ref.ClearField("id_runs")
    ref.id_runs.extend(runs)
    ref.max_fragment_id += 1
    m.max_fragment_id = max(m.max_fragment_id, ref.max_fragment_id)
    _write_root(path, m)
    clear_chunk_cache()
    opened = s3ddb.dataset(uri)  # the claims alone are consistent
    with pytest.raises(StoredMetadataError, match="not among the ids"):
        opened.to_table()
    with pytest.raises(StoredMetadataError, match="not among the ids"):
        opened.to_table()  # refused again, never read unchecked the second time


def test_planted_chunk_bounds_can_only_hide_its_rows_from_filtered_reads(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _chunked(uri)
    path = _newest_root(tmp_path / "ds")
    m = _read_root(path)
    [bound] = [b for b in m.chunks[0].bounds if b.HasField("min_int")][:1]
    bound.min_int, bound.max_int = 1000, 2000  # chunk 0 holds ids 0..7
    _write_root(path, m)
    clear_chunk_cache()
    ds = s3ddb.dataset(uri)
    # A filter the planted bounds rule out skips the chunk: its rows are hidden, as
    # a planted fragment statistic would hide a fragment's; nothing else is returned.
    assert ds.to_table(filter="id < 8").num_rows == 0
    assert sorted(ds.to_table(filter="id < 12").column("id").to_pylist()) == list(range(8, 12))
    # Any read that decodes the chunk refuses it.
    for read in (lambda: ds.to_table(), lambda: ds.to_table(filter="id >= 1000")):
        with pytest.raises(StoredMetadataError, match="not within the bounds"):
            read()


def test_a_manifest_listed_larger_than_the_limit_is_refused_without_a_request(
    tmp_path: Path,
) -> None:
    from s3ddb.format.limits import MAX_MANIFEST_BYTES
    from s3ddb.format.manifest import read_manifest_bytes
    from s3ddb.io.object_store import ObjectStore

    store = ObjectStore(str(tmp_path))  # no such manifest: any request would say so
    with pytest.raises(ManifestCorruptError, match="refused unread"):
        read_manifest_bytes(store, "_versions/1.manifest", "m", MAX_MANIFEST_BYTES + 1)
    with pytest.raises(FileNotFoundError):
        read_manifest_bytes(store, "_versions/1.manifest", "m", 100)
