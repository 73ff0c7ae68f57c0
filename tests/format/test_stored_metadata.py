"""Stored metadata is checked before use: a manifest, transaction, deletion file, index
or tag that decodes but is inconsistent or out of range is a typed error naming the
file (and the version, the fragment), raised in bounded time and memory; never a wrong
read, a bare IndexError or an exhausted memory."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

import s3ddb
from s3ddb.errors import S3DDBError, StoredMetadataError
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.deletion import deletion_path
from s3ddb.format.framing import frame, unframe
from s3ddb.format.manifest import MANIFEST_MAGIC, Manifest
from s3ddb.format.naming import NamingScheme, parse_manifest_name, parse_staged_name
from s3ddb.operations import TRANSACTION_MAGIC, Transaction


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "s": [f"s{i}" for i in ids]})


def _make(uri: str, *, delete: bool = True) -> s3ddb.Dataset:
    """10 rows in two fragments of 5 (ids 0-4, 5-9); with ``delete``, id 3 deleted."""
    ds = s3ddb.write_dataset(_rows(0, 10), uri, max_rows_per_file=5)
    if delete:
        ds.delete("id = 3")
    return s3ddb.dataset(uri)


def _newest(uri: str) -> Path:
    return min((Path(uri) / layout.VERSIONS_DIR).glob("*.manifest"))  # V2: newest first


def _load(path: Path) -> pb.Manifest:
    return pb.Manifest.FromString(unframe(path.read_bytes(), MANIFEST_MAGIC, str(path)))


def _store(path: Path, m: pb.Manifest, *, summary: bool = True) -> None:
    """Write ``m`` as s3ddb lays a manifest out (header, then fragments) with valid
    checksums, as a hostile writer could; ``summary``: recompute the fragment summary
    so it agrees with the (edited) fragments."""
    header = pb.Manifest()
    header.CopyFrom(m)
    for name in ("fragments", "fragments_offset", "header_crc"):
        header.ClearField(name)  # type: ignore[arg-type]
    if summary:
        header.fragment_count = len(m.fragments)
        header.visible_rows = sum(
            f.physical_rows - (f.deletion_file.num_deleted_rows if f.HasField("deletion_file")
                               else 0)
            for f in m.fragments
        )  # fmt: skip
    body = header.SerializeToString(deterministic=True)
    fragments = pb.Manifest(fragments=m.fragments).SerializeToString(deterministic=True)
    prefix = struct.pack("<2sI2sI", b"\x85\x01", 12 + len(body), b"\x9d\x01", zlib.crc32(body))
    path.write_bytes(frame(prefix + body + fragments, MANIFEST_MAGIC))


def _edit_newest(uri: str, edit: Callable[[pb.Manifest], None], **kw: bool) -> Path:
    path = _newest(uri)
    m = _load(path)
    edit(m)
    _store(path, m, **kw)
    return path


def _reads(uri: str) -> list[Callable[[], object]]:
    """The reads that use every fragment."""
    return [
        lambda: s3ddb.dataset(uri).to_table(),
        lambda: s3ddb.dataset(uri).scanner(filter="id >= 0").to_table(),
        lambda: s3ddb.dataset(uri).delete("id = 1"),
    ]


# --- 1. fragments ---------------------------------------------------------------------


def test_a_fragment_listed_twice_is_refused_when_its_fragments_are_used(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 10), uri)

    def twice(m: pb.Manifest) -> None:
        m.fragments.add().CopyFrom(m.fragments[0])

    path = _edit_newest(uri, twice)
    ds = s3ddb.dataset(uri)  # opening decodes no fragment
    assert ds.version == 1
    # Counting, which needs no fragment decoded, is refused too (not 20 rows).
    for read in [*_reads(uri), lambda: s3ddb.dataset(uri).count_rows()]:
        with pytest.raises(StoredMetadataError) as info:
            read()
        message = str(info.value)
        assert path.name in message and "version 1" in message and "fragment 0" in message
        assert "twice" in message
    assert s3ddb.dataset(uri).version == 1  # the delete committed nothing


def test_a_fragment_id_above_max_fragment_id_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _make(uri, delete=False)

    def low_max(m: pb.Manifest) -> None:
        m.max_fragment_id = 0  # fragment 1 exists: the next append would reuse its id

    path = _edit_newest(uri, low_max)
    for read in _reads(uri):
        with pytest.raises(StoredMetadataError, match=r"fragment 1.*max_fragment_id 0") as info:
            read()
        assert path.name in str(info.value)


def test_an_append_over_a_too_low_max_fragment_id_commits_nothing(tmp_path: Path) -> None:
    """An append numbers its fragments from max_fragment_id without reading the listed
    ones; it must check them first, not land a version that lists an id twice."""
    uri = str(tmp_path / "ds")
    _make(uri, delete=False)

    def low_max(m: pb.Manifest) -> None:
        m.max_fragment_id = 0  # fragment 1 exists

    _edit_newest(uri, low_max)
    with pytest.raises(StoredMetadataError, match=r"fragment 1.*max_fragment_id 0"):
        s3ddb.dataset(uri).insert(_rows(10, 1))
    assert [p.name for p in (Path(uri) / layout.VERSIONS_DIR).glob("*.manifest")] == [
        _newest(uri).name
    ]  # still the one version


@pytest.mark.parametrize("indexed", [False, True])
def test_without_max_fragment_id_new_fragments_take_ids_above_those_in_use(
    tmp_path: Path, indexed: bool
) -> None:
    """max_fragment_id is optional in the format (older Lance writers omit it): the next
    id is then above the highest listed, or covered by an index, never a reused one."""
    uri = str(tmp_path / "ds")
    _make(uri, delete=False)  # fragments 0 and 1
    if indexed:
        s3ddb.dataset(uri).create_scalar_index("id", "BTREE")

    def covered_by_index_only(m: pb.Manifest) -> None:
        m.ClearField("max_fragment_id")
        if indexed:  # the index covers an id no longer listed (5)
            m.indices[0].fragment_bitmap = BitMap([0, 5]).serialize()

    _edit_newest(uri, covered_by_index_only, summary=True)
    s3ddb.dataset(uri).insert(_rows(10, 2))
    ds = s3ddb.dataset(uri)
    ids = ds.manifest.fragments.ids()
    assert len(set(ids)) == len(ids)
    assert ids == [0, 1, 6] if indexed else [0, 1, 2]
    assert sorted(ds.to_table().column("id").to_pylist()) == [*range(10), 10, 11]


# --- 2. schema ------------------------------------------------------------------------


def _first_field_id_1(m: pb.Manifest) -> None:
    m.schema.fields[0].id = m.schema.fields[1].id


def _parent_missing(m: pb.Manifest) -> None:
    m.schema.fields[1].parent_id = 77


def _duplicate_name(m: pb.Manifest) -> None:
    m.schema.fields[1].name = m.schema.fields[0].name
    m.schema.fields[1].arrow_field = (
        pa.schema([pa.field("id", pa.string())]).serialize().to_pybytes()
    )


def _arrow_name_differs(m: pb.Manifest) -> None:
    m.schema.fields[1].name = "renamed"


def _no_arrow_field(m: pb.Manifest) -> None:
    m.schema.fields[0].ClearField("arrow_field")


def _negative_id(m: pb.Manifest) -> None:
    m.schema.fields[1].id = -5


def _garbled_arrow_field(body: bytes) -> Callable[[pb.Manifest], None]:
    """An edit that replaces the Arrow IPC bytes of field ``s`` (id 1) with ``body``."""

    def edit(m: pb.Manifest) -> None:
        m.schema.fields[1].arrow_field = body

    return edit


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xff\x10\x00\x00\x00" + b"\x00" * 16,  # OSError: bad flatbuffer
        b"\xff\xff\xff\xff\xf0\xff\xff\xff" + b"\x00" * 16,  # OSError: negative length
        b"\xfe\xff\xff\xff" + b"\x00" * 16,  # OSError: negative continuation token
        b"\xff\xff\xff\xff\x78\x00\x00\x00\x10",  # ArrowInvalid: truncated
        b"not arrow at all",
    ],
    ids=["flatbuffer", "negative-length", "continuation", "truncated", "text"],
)
def test_arrow_field_bytes_that_do_not_decode_are_refused_naming_the_field(
    tmp_path: Path, body: bytes
) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    path = _edit_newest(uri, _garbled_arrow_field(body))
    with pytest.raises(StoredMetadataError, match=r"field 's' \(id 1\).*Arrow field") as info:
        s3ddb.dataset(uri)
    assert path.name in str(info.value) and "version 2" in str(info.value)
    assert s3ddb.dataset(uri, version=1).count_rows() == 10


@pytest.mark.parametrize(
    "edit, words",
    [
        (_first_field_id_1, "field id 1.*twice"),
        (_parent_missing, "parent"),
        (_duplicate_name, "'id'.*twice"),
        (_arrow_name_differs, "'renamed'"),
        (_no_arrow_field, "Arrow field"),
        (_negative_id, "field id -5"),
    ],
    ids=["shared-id", "missing-parent", "duplicate-name", "arrow-name", "no-arrow", "negative"],
)
def test_an_inconsistent_schema_is_refused_on_open(
    tmp_path: Path, edit: Callable[[pb.Manifest], None], words: str
) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    path = _edit_newest(uri, edit)
    with pytest.raises(StoredMetadataError, match=words) as info:
        s3ddb.dataset(uri).to_table()
    assert path.name in str(info.value) and "version 2" in str(info.value)
    assert s3ddb.dataset(uri, version=1).count_rows() == 10


def test_nested_schema_fields_must_match_the_arrow_type(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    table = pa.table({"id": [1, 2], "p": [{"x": 1, "y": "a"}, {"x": 2, "y": "b"}]})
    s3ddb.write_dataset(table, uri)
    assert s3ddb.dataset(uri).to_table().equals(s3ddb.dataset(uri).to_table())

    def rename_child(m: pb.Manifest) -> None:
        [child] = [f for f in m.schema.fields if f.name == "y"]
        child.name = "z"

    _edit_newest(uri, rename_child)
    with pytest.raises(StoredMetadataError, match=r"p\.z"):
        s3ddb.dataset(uri)


# --- 3. deletion files and index bitmaps ------------------------------------------------


def _deleted_fragment(uri: str) -> tuple[Path, pb.Manifest]:
    ds = s3ddb.dataset(uri)
    [fragment] = [f for f in ds.get_fragments() if f.deletion_file is not None]
    return Path(uri) / deletion_path(fragment), _load(_newest(uri))


@pytest.mark.parametrize(
    "offsets, words",
    [
        ([3, 5], "offset 5 .*5 physical rows"),
        ([3, 2**31], "offset 2147483648"),
        (range(0, 3 * 2**16), "196608 offsets"),
        (range(0, 2**32), "larger than"),  # 65,536 containers: refused unread
    ],
    ids=["just-beyond", "far-beyond", "many", "all-2^32"],
)
def test_deletion_offsets_beyond_the_fragment_are_refused(
    tmp_path: Path, offsets: range | list[int], words: str
) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    path, _m = _deleted_fragment(uri)
    bitmap = BitMap(offsets)
    bitmap.run_optimize()  # 2^32 offsets in a few bytes
    path.write_bytes(bitmap.serialize())
    for read in _reads(uri):
        with pytest.raises(StoredMetadataError, match=words) as info:
            read()
        assert path.name in str(info.value) and "fragment 0" in str(info.value)


@pytest.mark.parametrize("body", [b"", b"\x3a\x30", b"\x3a\x30\x00\x00\x01"])
def test_a_truncated_deletion_bitmap_is_a_typed_error(tmp_path: Path, body: bytes) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    path, _m = _deleted_fragment(uri)
    path.write_bytes(body)
    with pytest.raises(S3DDBError, match="corrupt") as info:
        s3ddb.dataset(uri).to_table()
    assert path.name in str(info.value)


def test_a_deletion_count_that_disagrees_with_the_file_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    path, _m = _deleted_fragment(uri)
    path.write_bytes(BitMap([1, 3]).serialize())  # the manifest says 1 deleted row
    with pytest.raises(StoredMetadataError, match=r"2 offsets.*manifest says 1"):
        s3ddb.dataset(uri).to_table()


def _arrow_deletions(array: pa.Array) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, pa.schema([pa.field("offsets", array.type)])) as writer:
        writer.write_batch(pa.record_batch([array], names=["offsets"]))
    return bytes(sink.getvalue().to_pybytes())


@pytest.mark.parametrize(
    "array, words",
    [
        (pa.array([7], pa.uint32()), "offset 7"),
        (pa.array([-1], pa.int32()), "uint32"),
        (pa.array([1, 1], pa.uint32()), "2 offsets.*manifest says 1|twice"),
        (pa.array(["x"]), "uint32"),
    ],
    ids=["beyond", "negative", "repeated", "strings"],
)
def test_an_arrow_deletion_file_is_checked_like_a_bitmap(
    tmp_path: Path, array: pa.Array, words: str
) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    _path, m = _deleted_fragment(uri)
    [fragment] = [f for f in m.fragments if f.HasField("deletion_file")]
    fragment.deletion_file.kind = pb.DeletionFile.ARROW_ARRAY
    _store(_newest(uri), m)
    ds = s3ddb.dataset(uri)
    [planted] = [f for f in ds.get_fragments() if f.deletion_file is not None]
    arrow_path = Path(uri) / deletion_path(planted)
    arrow_path.write_bytes(_arrow_deletions(array))
    with pytest.raises(StoredMetadataError, match=words) as info:
        s3ddb.dataset(uri).to_table()
    assert arrow_path.name in str(info.value)
    arrow_path.write_bytes(_arrow_deletions(pa.array([3], pa.uint32())))  # a good one reads
    assert sorted(s3ddb.dataset(uri).to_table()["id"].to_pylist()) == [
        i for i in range(10) if i != 3
    ]


def test_an_oversized_deletion_file_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    path, _m = _deleted_fragment(uri)
    path.write_bytes(BitMap([3]).serialize() + b"\x00" * (8 << 20))
    with pytest.raises(StoredMetadataError, match="larger than") as info:
        s3ddb.dataset(uri).to_table()
    assert path.name in str(info.value)


def _bitmap_bytes(ids: range | list[int]) -> bytes:
    bitmap = BitMap(ids)
    bitmap.run_optimize()
    return bytes(bitmap.serialize())


@pytest.mark.parametrize(
    "ids, words",
    [([0, 9], "fragment 9"), (range(0, 2**32), "4294967296 fragments")],
    ids=["beyond-max", "2^32"],
)
def test_an_index_bitmap_beyond_the_fragments_is_refused_on_open(
    tmp_path: Path, ids: range | list[int], words: str
) -> None:
    uri = str(tmp_path / "ds")
    _make(uri).create_scalar_index("id")

    def plant(m: pb.Manifest) -> None:
        m.indices[0].fragment_bitmap = _bitmap_bytes(ids)

    path = _edit_newest(uri, plant)
    with pytest.raises(StoredMetadataError, match=words) as info:
        s3ddb.dataset(uri)
    assert path.name in str(info.value) and "index" in str(info.value)


def _btree_path(uri: str) -> Path:
    [path] = (Path(uri) / layout.INDICES_DIR).glob("*/btree.parquet")
    return path


@pytest.mark.parametrize(
    "column, value, words, fragment",
    [
        ("row_offset", 4_000_000, "row offset 4000000", 1),
        # Key 9 now points at fragment 0, offset 4, which holds key 4: the row read
        # there is not key 9's (and key 9's own row would never be read).
        ("fragment_id", 0, "do not hold the keys", 0),
    ],
    ids=["offset-beyond", "other-fragment"],
)
def test_a_btree_row_beyond_its_fragment_is_refused(
    tmp_path: Path, column: str, value: int, words: str, fragment: int
) -> None:
    import pyarrow.parquet as pq

    uri = str(tmp_path / "ds")
    _make(uri).create_scalar_index("id")
    path = _btree_path(uri)
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[-1] = value  # the key 9 (fragment 1, offset 4)
    table = table.set_column(
        table.schema.get_field_index(column), column, pa.array(values, pa.uint32())
    )
    pq.write_table(table, path)
    with pytest.raises(StoredMetadataError, match=words) as info:
        s3ddb.dataset(uri).to_table(filter="id = 9")
    assert "btree.parquet" in str(info.value) and f"fragment {fragment}" in str(info.value)


def test_a_btree_file_that_is_not_one_is_a_typed_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _make(uri).create_scalar_index("id")
    path = _btree_path(uri)
    for body in (b"garbage", b"PAR1" + b"\x00" * 100 + b"PAR1"):
        path.write_bytes(body)
        with pytest.raises(StoredMetadataError, match=r"btree\.parquet"):
            s3ddb.dataset(uri).to_table(filter="id = 9")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"key": ["a"], "x": [1]}), path)  # another layout
    with pytest.raises(StoredMetadataError, match="columns"):
        s3ddb.dataset(uri).to_table(filter="id = 9")


# --- 4. versions, sizes and times ---------------------------------------------------------


def _set(**fields: int) -> Callable[[pb.Manifest], None]:
    def edit(m: pb.Manifest) -> None:
        for k, v in fields.items():
            setattr(m, k, v)

    return edit


def _set_fragment(**fields: int) -> Callable[[pb.Manifest], None]:
    def edit(m: pb.Manifest) -> None:
        for k, v in fields.items():
            if k == "file_size_bytes":
                m.fragments[0].files[0].file_size_bytes = v
            elif k == "read_version":
                m.fragments[0].deletion_file.read_version = v
            else:
                setattr(m.fragments[0], k, v)

    return edit


@pytest.mark.parametrize("version", [0, 2**63, 2**64 - 1])
def test_a_manifest_version_out_of_range_is_refused(version: int) -> None:
    m = pb.Manifest(version=version, schema=pb.Schema())
    data = frame(m.SerializeToString(), MANIFEST_MAGIC)
    with pytest.raises(StoredMetadataError, match=f"version {version}"):
        Manifest.from_bytes(data, "m")


@pytest.mark.parametrize(
    "edit, words, on_open",
    [
        (_set(timestamp_nanos=-1), "timestamp", True),
        (_set(cloned_from_version=2**64 - 1), "cloned_from_version", True),
        (_set(max_fragment_id=2**64 - 1), "max_fragment_id", True),
        (_set_fragment(physical_rows=2**63), "physical_rows", False),
        (_set_fragment(physical_rows=2**33), "physical_rows", False),
        (_set_fragment(file_size_bytes=2**64 - 1), "file_size_bytes", False),
        (_set_fragment(created_at_version=3), "created_at_version 3", False),
        (_set_fragment(last_updated_at_version=2**64 - 1), "last_updated_at_version", False),
        (_set_fragment(read_version=2**64 - 1), "read_version", False),
    ],
    ids=[
        "negative-time", "clone-version", "max-fragment-id", "rows-2^63", "rows-2^33",
        "file-size", "created-later", "updated-absurd", "deletion-read-version",
    ],
)  # fmt: skip
def test_versions_sizes_and_times_out_of_range_are_refused(
    tmp_path: Path, edit: Callable[[pb.Manifest], None], words: str, on_open: bool
) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    path = _edit_newest(uri, edit, summary=False)
    with pytest.raises(StoredMetadataError, match=words) as info:
        ds = s3ddb.dataset(uri)
        assert not on_open, "refused on open"
        ds.to_table()
    assert path.name in str(info.value)
    assert s3ddb.dataset(uri, version=1).count_rows() == 10


def test_history_refuses_a_header_out_of_range(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    versions = sorted((Path(uri) / layout.VERSIONS_DIR).glob("*.manifest"))
    oldest = versions[-1]
    m = _load(oldest)
    m.timestamp_nanos = -5
    _store(oldest, m)
    with pytest.raises(StoredMetadataError, match="timestamp"):
        s3ddb.dataset(uri).versions()


def test_manifest_names_parse_only_to_versions_in_range() -> None:
    u64 = 2**64 - 1
    assert parse_manifest_name(f"{u64 - 1:020d}.manifest") == (1, NamingScheme.V2)
    assert parse_manifest_name(f"{u64 - (2**63 - 1):020d}.manifest") == (
        2**63 - 1, NamingScheme.V2,
    )  # fmt: skip
    for name in (
        f"{u64:020d}.manifest",  # version 0
        "99999999999999999999.manifest",  # beyond u64: a negative version
        f"{u64 - 2**63:020d}.manifest",  # 2^63
        "00000000000000000000.manifest",  # u64::MAX
        "0.manifest",
        "9223372036854775808.manifest",  # V1 2^63
        "9999999999999999999.manifest",
    ):
        assert parse_manifest_name(name) is None, name
        assert parse_staged_name(f"{name}-{'a' * 32}") is None, name
    assert parse_manifest_name("9223372036854775807.manifest") == (2**63 - 1, NamingScheme.V1)
    for version in (0, 2**63, 2**64 - 1, -1):
        for scheme in NamingScheme:
            with pytest.raises(ValueError, match="out of range"):
                scheme.manifest_name(version)


# --- 5. tags ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, words",
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b"{}", "no version"),
        (b'{"version": 1.5}', "1.5"),
        (b'{"version": true}', "True"),
        (b'{"version": -1}', "-1"),
        (b'{"version": 0}', "0"),
        (b'{"version": "1"}', "'1'"),
        (b'{"version": 18446744073709551616}', "18446744073709551616"),
        (b'{"version": 1e999}', "inf"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 3_000, "not JSON"),
        (b'{"version": 1}' + b" " * (64 << 10), "larger than"),
    ],
    ids=[
        "not-json", "array", "no-version", "fraction", "bool", "negative", "zero", "string",
        "huge", "inf", "binary", "deep", "oversized",
    ],
)  # fmt: skip
def test_a_bad_tag_file_is_refused_naming_it(tmp_path: Path, body: bytes, words: str) -> None:
    uri = str(tmp_path / "ds")
    ds = _make(uri)
    ds.tags.create("good", 1)
    path = Path(uri) / layout.tag_path("bad")
    path.write_bytes(body)
    for read in (
        lambda: ds.tags.get("bad"),
        lambda: ds.tags.list(),
        lambda: s3ddb.dataset(uri, version="bad"),
    ):
        with pytest.raises(StoredMetadataError, match=words) as info:
            read()
        assert "_refs/tags/bad.json" in str(info.value)
    assert ds.tags.get("good") == 1


def test_verify_reads_tags_with_the_same_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3ddb.maintenance import verify
    from s3ddb.versions import tags

    uri = str(tmp_path / "ds")
    ds = _make(uri)
    ds.tags.create("good", 1)
    (Path(uri) / layout.tag_path("bad")).write_bytes(b'{"version": 1.5}')
    seen: list[str] = []
    real = tags.read_tag_version

    def spy(store: object, path: str) -> int:
        seen.append(path)
        return real(store, path)  # type: ignore[arg-type]

    monkeypatch.setattr(verify, "read_tag_version", spy)
    report = verify.verify(uri)  # a bad tag protects nothing, and breaks nothing
    assert sorted(seen) == [layout.tag_path("bad"), layout.tag_path("good")]
    assert report is not None


# --- 6. transaction files -----------------------------------------------------------------


def _txn_bytes(edit: Callable[[tpb.Transaction], None]) -> bytes:
    message = tpb.Transaction(read_version=1, uuid="a" * 32)
    message.restore.version = 1
    edit(message)
    return frame(message.SerializeToString(), TRANSACTION_MAGIC)


def _fragment_pb(**fields: int) -> pb.Fragment:
    f = pb.Fragment(id=0, physical_rows=1, files=[pb.DataFile(path="x.parquet", fields=[0])])
    for k, v in fields.items():
        setattr(f, k, v)
    return f


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda t: setattr(t, "read_version", 2**63), "read_version"),
        (lambda t: setattr(t, "read_version", 2**64 - 1), "read_version"),
        (lambda t: setattr(t.restore, "version", 2**64 - 1), "version"),
        (lambda t: t.append.fragments.append(_fragment_pb(physical_rows=2**63)), "physical_rows"),
        (lambda t: t.append.fragments.append(_fragment_pb(id=2**64 - 1)), "fragment id"),
        (lambda t: t.overwrite.schema.fields.add(id=1, parent_id=5, name="x"), "parent"),
        (lambda t: setattr(t, "uuid", "../x"), "transaction"),
    ],
    ids=["read-2^63", "read-u64", "restore", "rows", "fragment-id", "schema", "uuid"],
)
def test_a_transaction_out_of_range_is_a_typed_error(
    edit: Callable[[tpb.Transaction], None], words: str
) -> None:
    with pytest.raises(S3DDBError, match=words) as info:
        Transaction.from_bytes(_txn_bytes(edit), "_transactions/t.txn")
    assert "_transactions/t.txn" in str(info.value)


def test_a_tag_written_by_s3ddb_still_reads(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = _make(uri)
    ds.tags.create("v1", 1)
    assert json.loads((Path(uri) / layout.tag_path("v1")).read_bytes()) == {"version": 1}
    assert ds.tags.list() == {"v1": 1}
    assert s3ddb.dataset(uri, version="v1").count_rows() == 10


def test_a_version_beyond_the_range_is_not_found(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    for version in (2**63, 2**64 - 2, 2**64 - 1):
        with pytest.raises(s3ddb.VersionNotFoundError, match=f"version {version}"):
            s3ddb.dataset(uri, version=version)


def test_a_rebase_onto_a_fragment_with_fewer_rows_is_a_typed_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    stale = s3ddb.dataset(uri, version=1)

    def no_rows(m: pb.Manifest) -> None:
        m.fragments[1].physical_rows = 0  # fragment 1 holds ids 5-9 in its data file

    _edit_newest(uri, no_rows)
    with pytest.raises(S3DDBError, match="fragment 1 cannot delete 1 rows"):
        stale.delete("id = 6", conflict_retries=0)
    assert s3ddb.dataset(uri).version == 2


def test_a_btree_key_of_another_type_than_its_column_is_a_typed_error(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    uri = str(tmp_path / "ds")
    _make(uri).create_scalar_index("id")
    path = _btree_path(uri)
    table = pq.read_table(path)
    table = table.set_column(0, "key", pa.array([f"k{i}" for i in range(table.num_rows)]))
    pq.write_table(table, path)
    with pytest.raises(StoredMetadataError, match=r"btree\.parquet.* holds keys of type string"):
        s3ddb.dataset(uri).to_table(filter="id = 9")


def _rewrite_btree(uri: str, edit: Callable[[pa.Table], pa.Table]) -> None:
    import pyarrow.parquet as pq

    path = _btree_path(uri)
    pq.write_table(edit(pq.read_table(path)), path)


def _swap_keys(table: pa.Table, a: int, b: int) -> pa.Table:
    keys = table.column("key").to_pylist()
    i, j = keys.index(a), keys.index(b)
    keys[i], keys[j] = keys[j], keys[i]
    return table.set_column(0, "key", pa.array(keys, table.schema.field("key").type))


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda t: t.filter(pa.compute.field("key") != 7), "19 rows .* records 20"),
        (lambda t: _swap_keys(t, 7, 8), "do not hold the keys"),
    ],
    ids=["a key dropped", "two keys swapped"],
)
def test_an_index_that_does_not_describe_the_data_is_refused_where_it_is_used(
    tmp_path: Path, edit: Callable[[pa.Table], pa.Table], words: str
) -> None:
    """A filtered read through it would leave key 7's row out, and an upsert of key 7
    would insert it a second time: both are refused, and nothing is committed."""
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows(0, 20), uri, max_rows_per_file=10)
    ds.create_scalar_index("id")
    _rewrite_btree(uri, edit)
    ds = s3ddb.dataset(uri)
    version = ds.version
    with pytest.raises(StoredMetadataError, match=words) as info:
        ds.to_table(filter="id = 7")
    assert "btree.parquet" in str(info.value)
    with pytest.raises(StoredMetadataError, match=words):
        ds.count_rows(filter="id = 7")
    source = _rows(7, 1)
    with pytest.raises(StoredMetadataError, match=words):
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
            source
        )
    after = s3ddb.dataset(uri)
    assert after.version == version
    assert sorted(after.to_table()["id"].to_pylist()) == list(range(20))  # a full scan


def test_an_index_file_declaring_millions_of_rows_is_refused_by_its_footer(
    tmp_path: Path,
) -> None:
    """A small file (its rows compress to nothing) whose footer declares far more rows
    than its manifest entry records is refused before any row is decoded."""
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows(0, 20), uri, max_rows_per_file=10)
    ds.create_scalar_index("id")
    n = 2_000_000
    _rewrite_btree(
        uri,
        lambda t: pa.table(
            {
                "key": pa.array(np.full(n, 5), t.schema.field("key").type),
                "fragment_id": pa.array(np.zeros(n, np.uint32)),
                "row_offset": pa.array(np.zeros(n, np.uint32)),
            }
        ),
    )
    with pytest.raises(StoredMetadataError, match=f"footer gives {n} rows"):
        s3ddb.dataset(uri).to_table(filter="id = 5")


def test_an_index_of_keys_of_another_type_is_refused_before_they_are_compared(
    tmp_path: Path,
) -> None:
    """Decimal keys under a float64 column: comparing NaN with a Decimal raised a bare
    ``decimal.InvalidOperation``; other values silently matched nothing."""
    import decimal

    uri = str(tmp_path / "ds")
    table = pa.table({"f": pa.array([float(i) for i in range(10)])})
    ds = s3ddb.write_dataset(table, uri)
    ds.create_scalar_index("f")
    _rewrite_btree(
        uri,
        lambda t: t.set_column(
            0,
            "key",
            pa.array(
                [decimal.Decimal(str(k)) for k in t.column("key").to_pylist()], pa.decimal128(10, 2)
            ),
        ),
    )
    for where in ("f = 'NaN'", "f = 1.0", "f < 'NaN'"):
        with pytest.raises(StoredMetadataError, match="holds keys of type decimal128"):
            s3ddb.dataset(uri).to_table(filter=where)


@pytest.mark.parametrize(
    "path", ["_refs/tags/sub/keep.json", "_refs/tags/bad name.json", "_refs/tags/.json"]
)
def test_a_file_under_the_tags_folder_no_tag_can_be_is_no_tag(tmp_path: Path, path: str) -> None:
    """Listings are recursive: a file in a folder below ``_refs/tags/``, or with a name
    no tag can have, is not a tag for ``tags.list()``, cleanup or verify alike (it
    neither breaks them nor keeps a version)."""
    import datetime as dt

    from s3ddb.maintenance.verify import verify
    from s3ddb.versions.tags import tag_name_of

    uri = str(tmp_path / "ds")
    ds = _make(uri)  # versions 1 and 2
    ds.insert(_rows(10, 1))  # version 3
    ds.tags.create("good", 1)
    planted = Path(uri) / path
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_bytes(b'{"version": 2}')
    assert tag_name_of(path) is None
    assert ds.tags.list() == {"good": 1}
    assert verify(uri, grace_seconds=0).healthy
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0), claim_window=dt.timedelta(0))
    assert stats.versions_removed == [2]  # the planted file keeps nothing apart
    assert [v.version for v in s3ddb.dataset(uri).versions()] == [1, 3]
    assert ds.tags.list() == {"good": 1}
