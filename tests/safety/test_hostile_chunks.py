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
