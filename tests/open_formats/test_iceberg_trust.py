"""The published Iceberg state is output, the manifests the truth (issue 43).

An attacker who can write under the dataset prefix plants paths, schemas and
summaries in a published metadata file, or memory bombs in its JSON and Avro: the
next publication carries none of it into a file s3ddb writes (the damaged state is
said, and the next version published afresh from the manifests), ``verify`` names
what was planted, and a bomb is a typed error naming the file in a process limited
to 2 GiB of address space. Cleanup keeps every snapshot a kept metadata file lists
readable: it rewrites the kept metadata files without the snapshots it expires.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import StaticTable

import s3ddb
from s3ddb.errors import PublishedStateError
from s3ddb.io.object_store import ObjectStore
from s3ddb.open_formats.avro import decode_container, encode_container
from s3ddb.open_formats.iceberg import IcebergWriter
from s3ddb.open_formats.iceberg_state import SNAPSHOT_WINDOW, group_of, version_files
from s3ddb.open_formats.model import TableVersion
from s3ddb.open_formats.publisher import forget_states, table_version
from tests.open_formats.readers import duckdb_connection, rows_of

REPO = Path(__file__).resolve().parents[2]


def _table(start: int, n: int, doubled: bool = False) -> pa.Table:
    ids = list(range(start, start + n))
    table = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids]})
    if doubled:
        table = table.append_column("doubled", pa.array([i * 2 for i in ids], pa.int64()))
    return table


def _dataset(tmp_path: Path) -> s3ddb.Dataset:
    """Four versions publishing Iceberg: two appends, a column added (schema 1), a
    delete; every metadata file lists snapshots 1 to its own."""
    ds = s3ddb.write_dataset(_table(0, 10), str(tmp_path / "ds"), open_formats=["iceberg"])
    ds.insert(_table(10, 5))
    ds.add_columns({"doubled": "id * 2"})
    ds.delete("id < 3")
    assert ds.version == 4
    return ds


def _metadata(ds: s3ddb.Dataset, version: int) -> Path:
    return Path(ds.uri, version_files(version)[0])


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_bytes())
    change(doc)
    path.write_text(json.dumps(doc, sort_keys=True, indent=1))


def _expected(ds: s3ddb.Dataset, version: int) -> TableVersion:
    """Version ``version`` as its manifest gives it to publication."""
    manifest = ds.checkout_version(version).manifest
    return table_version(ObjectStore(ds.uri), manifest, None)


def _snapshot(doc: dict[str, Any], snapshot_id: int) -> dict[str, Any]:
    return next(s for s in doc["snapshots"] if s["snapshot-id"] == snapshot_id)


def _plant_etc_passwd(doc: dict[str, Any]) -> str:
    _snapshot(doc, 1)["manifest-list"] = "/etc/passwd"
    return "/etc/passwd"


def _plant_other_bucket(doc: dict[str, Any]) -> str:
    planted = "s3://other-bucket/planted/snap-2.avro"
    _snapshot(doc, 2)["manifest-list"] = planted
    return planted


def _plant_fake_current_schema(doc: dict[str, Any]) -> str:
    planted = "planted_column_from_elsewhere"
    current = next(s for s in doc["schemas"] if s["schema-id"] == doc["current-schema-id"])
    current["fields"].append({"id": 77, "name": planted, "required": False, "type": "string"})
    return planted


def _plant_schema_attribute(doc: dict[str, Any]) -> str:
    planted = "s3://other-bucket/planted-doc"
    earlier = next(s for s in doc["schemas"] if s["schema-id"] != doc["current-schema-id"])
    earlier["fields"][0]["doc"] = planted
    return planted


def _plant_summary(doc: dict[str, Any]) -> str:
    planted = "s3://other-bucket/planted-summary"
    _snapshot(doc, 1)["summary"]["planted"] = planted
    return planted


def _plant_metadata_log(doc: dict[str, Any]) -> str:
    planted = "s3://other-bucket/planted/v1.metadata.json"
    doc["metadata-log"][0]["metadata-file"] = planted
    return planted


CARRIED_PLANTS = {
    "etc_passwd": _plant_etc_passwd,
    "other_bucket": _plant_other_bucket,
    "fake_current_schema": _plant_fake_current_schema,
    "schema_attribute": _plant_schema_attribute,
    "summary": _plant_summary,
}
PLANTS = {**CARRIED_PLANTS, "metadata_log": _plant_metadata_log}


def _plant(ds: s3ddb.Dataset, plant: Callable[[dict[str, Any]], str]) -> str:
    planted: list[str] = []
    _edit(_metadata(ds, ds.version), lambda doc: planted.append(plant(doc)))
    return planted[0]


def _files_with(root: Path, text: str, but: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in (root / "metadata").rglob("*")
        if p.is_file() and p != but and text.encode() in p.read_bytes()
    )


@pytest.mark.parametrize("plant", sorted(CARRIED_PLANTS))
def test_a_planted_snapshot_path_schema_or_summary_is_not_carried(
    tmp_path: Path, plant: str
) -> None:
    ds = _dataset(tmp_path)
    tampered = _metadata(ds, 4)
    planted = _plant(ds, CARRIED_PLANTS[plant])
    forget_states()  # the next commit reads the published state, as another process
    ds.insert(_table(100, 3, doubled=True))
    assert ds.version == 5
    # Nothing s3ddb wrote holds what was planted: version 5 was published afresh.
    assert _files_with(Path(ds.uri), planted, but=tampered) == []
    table = StaticTable.from_metadata(str(_metadata(ds, 5)))
    assert rows_of(table.scan().to_arrow()) == rows_of(ds.to_table())
    for snapshot in table.metadata.snapshots:
        assert snapshot.manifest_list == f"{ds.uri}/metadata/snap-{snapshot.snapshot_id}.avro"
        got = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        assert rows_of(got) == rows_of(ds.checkout_version(snapshot.snapshot_id).to_table())


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_verify_and_load_state_name_the_tampered_metadata(tmp_path: Path, plant: str) -> None:
    from s3ddb.maintenance.verify import verify

    ds = _dataset(tmp_path)
    assert verify(ds.uri, grace_seconds=0).healthy
    _plant(ds, PLANTS[plant])
    report = verify(ds.uri, grace_seconds=0)
    found = [p for p in report.problems if p.kind == "damaged_open_format_state"]
    assert [p.path for p in found] == [version_files(4)[0]], report.problems
    assert "s3ddb open-formats" in found[0].fix
    with pytest.raises(PublishedStateError, match=r"v4\.metadata\.json") as caught:
        IcebergWriter().load_state(ObjectStore(ds.uri), _expected(ds, 4))
    assert caught.value.path == version_files(4)[0]


def _manifest_of_current(ds: s3ddb.Dataset) -> Path:
    listed = decode_container(Path(ds.uri, version_files(ds.version)[1]).read_bytes(), "l")
    path = listed.records[0]["manifest_path"]
    assert path.startswith(f"{ds.uri}/metadata/m-")
    return Path(path)


def test_a_planted_data_file_path_in_a_manifest_is_named_by_verify_and_not_reused(
    tmp_path: Path,
) -> None:
    from s3ddb.maintenance.verify import verify

    ds = _dataset(tmp_path)
    manifest = _manifest_of_current(ds)
    avro = decode_container(manifest.read_bytes(), manifest.name)
    avro.records[0]["data_file"]["file_path"] = "/etc/passwd"
    extra = [(k, v) for k, v in avro.metadata.items() if not k.startswith("avro.")]
    manifest.write_bytes(encode_container(avro.schema, avro.records, extra))
    report = verify(ds.uri, grace_seconds=0)
    found = {p.path: p.meaning for p in report.problems if p.kind == "damaged_open_format_state"}
    # The manifest names the planted path; the manifest list records another size.
    assert "'/etc/passwd', outside the table" in found[f"metadata/{manifest.name}"], found
    assert set(found) == {f"metadata/{manifest.name}", version_files(4)[1]}, found
    forget_states()
    ds.insert(_table(100, 3, doubled=True))
    assert _files_with(Path(ds.uri), "/etc/passwd", but=manifest) == []
    table = StaticTable.from_metadata(str(_metadata(ds, 5)))
    assert rows_of(table.scan().to_arrow()) == rows_of(ds.to_table())


def _chunked(tmp_path: Path, inserts: int) -> s3ddb.Dataset:
    """A dataset publishing Iceberg whose fragments are mostly in chunks of 4 (each a
    group whose manifests later versions reuse by reference)."""
    ds = s3ddb.write_dataset(_table(0, 10), str(tmp_path / "ds"), open_formats=["iceberg"])
    ds.update_config({"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "2"})
    for i in range(1, inserts + 1):
        ds.insert(_table(10 * i, 2))
    return ds


def _listed_manifests(ds: s3ddb.Dataset, version: int) -> list[str]:
    listed = decode_container(Path(ds.uri, version_files(version)[1]).read_bytes(), "l")
    return [r["manifest_path"] for r in listed.records]


def _named_by_verify_and_refused(
    ds: s3ddb.Dataset, version: int, relative: str, verify_says: str, refusal: str
) -> None:
    """``verify`` names the file at ``relative`` as damaged (saying ``verify_says``),
    and a cold writer's load of ``version``'s state refuses it (``refusal``)."""
    from s3ddb.maintenance.verify import verify

    report = verify(ds.uri, grace_seconds=0)
    found = {p.path: p.meaning for p in report.problems if p.kind == "damaged_open_format_state"}
    assert verify_says in found.get(relative, ""), found
    with pytest.raises(PublishedStateError, match=refusal) as caught:
        IcebergWriter().load_state(ObjectStore(ds.uri), _expected(ds, version))
    assert caught.value.path == relative


def test_a_manifest_rewritten_with_the_same_length_is_not_reused(tmp_path: Path) -> None:
    """A chunk's manifest rewritten with one data file path swapped for a planted file
    outside the dataset, of the same length (so its size, which is all a HEAD shows,
    is unchanged): a cold writer refuses the state, names the manifest, and publishes
    the next version afresh, which neither lists the manifest nor reads the planted
    rows."""

    ds = _chunked(tmp_path, 7)
    version, root = ds.version, Path(ds.uri)
    chunks = {ref.name for ref in ds.manifest.fragments.chunk_refs()}
    manifest = next(
        Path(p) for p in _listed_manifests(ds, version) if group_of(p[len(ds.uri) + 1 :]) in chunks
    )
    avro = decode_container(manifest.read_bytes(), manifest.name)
    entry = avro.records[0]["data_file"]
    original = entry["file_path"]
    evil = tmp_path / "evil"
    evil.mkdir()
    planted = evil / ("x" * (len(original) - len(f"{evil}/.parquet")) + ".parquet")
    rows = entry["record_count"]
    pq.write_table(
        pa.table({"id": pa.array([666] * rows, pa.int64()), "name": ["PLANTED"] * rows}), planted
    )
    entry["file_path"] = str(planted)
    entry["file_size_in_bytes"] = planted.stat().st_size
    extra = [(k, v) for k, v in avro.metadata.items() if not k.startswith("avro.")]
    tampered = encode_container(avro.schema, avro.records, extra)
    assert len(str(planted)) == len(original)
    assert len(tampered) == manifest.stat().st_size  # a HEAD sees nothing
    manifest.write_bytes(tampered)
    relative = f"metadata/{manifest.name}"

    _named_by_verify_and_refused(
        ds, version, relative, "outside the table", "not the manifest s3ddb writes"
    )

    forget_states()  # a cold process
    ds = s3ddb.dataset(ds.uri)
    ds.insert(_table(100, 1))
    assert ds.version == version + 1
    assert str(manifest) not in _listed_manifests(ds, ds.version)
    assert _files_with(root, str(planted), but=manifest) == []
    table = StaticTable.from_metadata(str(_metadata(ds, ds.version)))
    assert rows_of(table.scan().to_arrow()) == rows_of(ds.to_table())


def test_a_cold_writer_reuses_a_state_it_checks_manifest_by_manifest(tmp_path: Path) -> None:
    """The other side: a cold writer builds on an untouched state (no afresh
    publication) whose reused manifests include a delete manifest and manifests
    written, out of the snapshot window, under a schema the window no longer has."""
    ds = _chunked(tmp_path, 8)
    ds.delete("id = 11")
    ds.alter_columns({"path": "name", "name": "label"})
    for i in range(SNAPSHOT_WINDOW + 1):
        ds.insert(_table(100 + 10 * i, 2).rename_columns(["id", "label"]))
    version = ds.version
    listed = _listed_manifests(ds, version)
    first = min(
        s["snapshot-id"] for s in json.loads(_metadata(ds, version).read_text())["snapshots"]
    )
    old = [p for p in listed if int(p.rsplit("-", 1)[1].removesuffix(".avro")) < first]
    assert any("/metadata/d-" in p for p in old), listed
    state = IcebergWriter().load_state(ObjectStore(ds.uri), _expected(ds, version))
    assert state is not None and [i for i, _c in state.schemas] == [1]
    forget_states()
    ds = s3ddb.dataset(ds.uri)
    ds.insert(_table(1000, 1).rename_columns(["id", "label"]))
    assert set(old) <= set(_listed_manifests(ds, ds.version))  # reused: not afresh
    table = StaticTable.from_metadata(str(_metadata(ds, ds.version)))
    assert rows_of(table.scan().to_arrow()) == rows_of(ds.to_table())


def test_a_delete_file_rewritten_with_the_same_length_is_not_reused(tmp_path: Path) -> None:
    """A chunk's positional delete file rewritten with other positions of as many
    bytes (its size, which the delete manifest records, is unchanged; the manifest
    itself is untouched): verify names it, a cold writer refuses the state, and the
    next version, published afresh, writes the file again; Iceberg readers of that
    version read exactly s3ddb's rows."""
    import io

    import numpy as np

    from s3ddb.maintenance.verify import verify
    from s3ddb.open_formats.iceberg import _positional_deletes

    ds = _chunked(tmp_path, 7)
    ds.delete("id = 11")  # the second row of a chunk's file
    for i in range(3):  # versions that reuse that chunk's manifests by reference
        ds.insert(_table(200 + 10 * i, 2))
    version = ds.version
    (deletes,) = Path(ds.uri, "metadata", "deletes").glob("*.parquet")
    assert any("/metadata/d-" in p for p in _listed_manifests(ds, version))
    original = deletes.read_bytes()
    positions = pq.read_table(io.BytesIO(original))
    assert positions.column("pos").to_pylist() == [1]
    data_path = positions.column("file_path")[0].as_py()
    tampered = _positional_deletes(data_path, np.array([0], np.int64))  # the first row
    assert len(tampered) == len(original) and tampered != original
    deletes.write_bytes(tampered)
    relative = f"metadata/deletes/{deletes.name}"

    _named_by_verify_and_refused(
        ds,
        version,
        relative,
        "not the positional deletes s3ddb writes",
        "not the positional deletes",
    )

    forget_states()  # a cold process
    ds = s3ddb.dataset(ds.uri)
    ds.insert(_table(900, 1))
    assert ds.version == version + 1
    assert deletes.read_bytes() == original  # written again
    table = StaticTable.from_metadata(str(_metadata(ds, ds.version)))
    assert rows_of(table.scan().to_arrow()) == rows_of(ds.to_table())
    assert verify(ds.uri, grace_seconds=0).healthy


# --- bombs, in a child process limited to 2 GiB of address space ------------------------

# Importing s3ddb (pyarrow, pandas...) takes about 1.46 GiB of address space on its
# own, measured: a bomb must fail with a typed error in the 600 MiB left.
_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    import pyarrow as pa
    import s3ddb
    from s3ddb.errors import StoredMetadataError
    from s3ddb.io.object_store import ObjectStore
    from s3ddb.open_formats.avro import decode_container
    from s3ddb.open_formats.iceberg import IcebergWriter
    from s3ddb.open_formats.publisher import table_version

    uri, what = sys.argv[1], sys.argv[2]
    out = {}
    if what == "decode":
        for name in sys.argv[3:]:
            try:
                decode_container(open(name, "rb").read(), name)
                out[name] = "decoded"
            except StoredMetadataError as exc:
                out[name] = type(exc).__name__ + ": " + str(exc)
    else:
        ds = s3ddb.dataset(uri)
        expected = table_version(ObjectStore(uri), ds.manifest, None)
        try:
            IcebergWriter().load_state(ObjectStore(uri), expected)
            out["load_state"] = "loaded"
        except StoredMetadataError as exc:
            out["load_state"] = type(exc).__name__ + ": " + str(exc)
        ds.insert(pa.table({"id": pa.array([1000], pa.int64()), "name": ["x"],
                            "doubled": pa.array([2000], pa.int64())}))
        out["published"] = ds.version
    print(json.dumps(out))
    """
)


def _child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "MALLOC_ARENA_MAX": "2"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _varint(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _container(schema: bytes, blocks: list[tuple[int, bytes]], pad: int = 0) -> bytes:
    """An Avro container file written by hand: ``blocks`` of (declared count, body),
    ``pad`` bytes of file metadata (so that bounds relative to the file's size let
    the declared counts through)."""
    sync = b"S" * 16
    entries = [(b"avro.schema", schema), (b"avro.codec", b"null"), (b"pad", b"\0" * pad)]
    out = bytearray(b"Obj\x01" + _varint(len(entries)))
    for key, value in entries:
        out += _varint(len(key)) + key + _varint(len(value)) + value
    out += b"\x00" + sync
    for count, body in blocks:
        out += _varint(count) + _varint(len(body)) + body + sync
    return bytes(out)


def test_avro_bombs_are_typed_errors_under_2_gib(tmp_path: Path) -> None:
    empty = json.dumps({"type": "record", "name": "r", "fields": []}).encode()
    nulls = json.dumps(
        {"type": "record", "name": "r", "fields": [
            {"name": "a", "type": {"type": "array", "items": "null"}}]}
    ).encode()  # fmt: skip
    chain: list[dict[str, Any]] = [{"type": "record", "name": "r0", "fields": []}]
    for i in range(1, 5000):  # each type refers to the one before: deeper than Python
        chain.append({"type": "record", "name": f"r{i}", "fields": [
            {"name": "x", "type": f"r{i - 1}"}]})  # fmt: skip
    linked = json.dumps({"type": "record", "name": "top", "fields": [
        {"name": "u", "type": chain}]}).encode()  # fmt: skip
    bombs = {
        "linked_types": _container(linked, [(1, _varint(4999))]),
        # 125M records of no bytes, in a 32 MB file.
        "empty_records": _container(empty, [(125_000_000, b"")], pad=32 << 20),
        # One record whose array declares 125M nulls, in 5 bytes.
        "null_items": _container(nulls, [(1, _varint(125_000_000) + b"\x00")], pad=32 << 20),
    }
    names = []
    for name, blob in bombs.items():
        Path(tmp_path, name).write_bytes(blob)
        names.append(str(tmp_path / name))
    out = _child("", "decode", *names)
    for name in names:
        assert out[name].startswith("StoredMetadataError: " + name), out


def _manifest_list_bomb(ds: s3ddb.Dataset) -> bytes:
    """The newest manifest list, with s3ddb's own schema, holding 4M of the smallest
    records that schema has (about 60 MB, under the 64 MiB a manifest list may be)."""
    path = Path(ds.uri, version_files(ds.version)[1])
    schema = decode_container(path.read_bytes(), "l").metadata["avro.schema"]
    # manifest_path "" then 12 ints/longs of 0, then two null unions.
    record = b"\x00" + b"\x00" * 12 + b"\x00\x00"
    count = 4_000_000
    return _container(schema, [(count, record * count)])


def _json_value_bomb() -> bytes:
    """60 MB of empty objects in a list: about 20M dicts once parsed."""
    return b'{"format-version": 2, "x": [' + b"{}," * 20_000_000 + b"{}]}"


@pytest.mark.parametrize("bomb", ["manifest_list", "metadata_json", "name_mapping"])
def test_published_state_bombs_are_typed_errors_under_2_gib(tmp_path: Path, bomb: str) -> None:
    ds = _dataset(tmp_path)
    if bomb == "manifest_list":
        target = Path(ds.uri, version_files(4)[1])
        target.write_bytes(_manifest_list_bomb(ds))
    elif bomb == "metadata_json":
        target = _metadata(ds, 4)
        target.write_bytes(_json_value_bomb())
    else:
        target = _metadata(ds, 4)
        mapping = "[" + "{}," * 15_000_000 + "{}]"
        _edit(target, lambda d: d["properties"].update({"schema.name-mapping.default": mapping}))
    out = _child(ds.uri, "publish")
    relative = str(target.relative_to(ds.uri))
    assert out["load_state"].startswith(f"PublishedStateError: {relative}"), out
    # The next version is published afresh from the manifests, in the same process.
    assert out["published"] == 5
    table = StaticTable.from_metadata(str(_metadata(ds, 5)))
    assert [s.snapshot_id for s in table.metadata.snapshots] == [5]
    assert rows_of(table.scan().to_arrow()) == rows_of(s3ddb.dataset(ds.uri).to_table())


def test_deeply_nested_json_is_a_typed_error(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    _metadata(ds, 4).write_bytes(b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    with pytest.raises(PublishedStateError, match=r"v4\.metadata\.json: .*nest"):
        IcebergWriter().load_state(ObjectStore(ds.uri), _expected(ds, 4))


# --- cleanup keeps time travel ----------------------------------------------------------


def _check_every_listed_snapshot(ds: s3ddb.Dataset, kept: list[int]) -> None:
    """Every snapshot each kept metadata file lists reads the rows of its version, in
    pyiceberg and DuckDB; the newest lists exactly the kept versions in its window."""
    con = duckdb_connection()
    for version in kept:
        path = _metadata(ds, version)
        table = StaticTable.from_metadata(str(path))
        listed = [s.snapshot_id for s in table.metadata.snapshots]
        assert set(listed) <= set(kept), (version, listed)
        assert listed == [v for v in kept if version - SNAPSHOT_WINDOW < v <= version]
        for entry in table.metadata.metadata_log:
            assert Path(entry.metadata_file).exists(), entry
        for snapshot_id in listed:
            want = rows_of(ds.checkout_version(snapshot_id).to_table())
            got = table.scan(snapshot_id=snapshot_id).to_arrow()
            assert rows_of(got) == want, (version, snapshot_id)
            duck = con.execute(
                f"SELECT * FROM iceberg_scan('{path}', snapshot_from_id => {snapshot_id})"
            ).to_arrow_table()
            assert rows_of(duck) == want, ("duckdb", version, snapshot_id)


def _cleaned(tmp_path: Path) -> tuple[s3ddb.Dataset, list[int]]:
    ds = s3ddb.write_dataset(_table(0, 10), str(tmp_path / "ds"), open_formats=["iceberg"])
    for i in range(1, 8):
        ds.insert(_table(i * 10, 5, doubled=i > 3))
        if i == 3:
            ds.add_columns({"doubled": "id * 2"})
        if i == 5:
            ds.delete("id < 3")
    ds.tags.create("kept", 4)
    newest = ds.version
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=3)
    kept = sorted(v.version for v in stats.versions_kept)
    assert kept == [4, newest - 2, newest - 1, newest]
    assert stats.versions_removed
    return ds, kept


def test_cleanup_leaves_every_snapshot_a_kept_metadata_file_lists_readable(
    tmp_path: Path, instant_cleanup: None
) -> None:
    ds, kept = _cleaned(tmp_path)
    _check_every_listed_snapshot(ds, kept)
    # What cleanup wrote is what a check of the manifests accepts.
    from s3ddb.maintenance.verify import verify

    assert verify(ds.uri, grace_seconds=0).healthy


def test_cleanup_rewrites_deterministically(tmp_path: Path, instant_cleanup: None) -> None:
    ds, kept = _cleaned(tmp_path)
    before = {v: _metadata(ds, v).read_bytes() for v in kept}
    again = ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=3)
    assert again.versions_removed == []
    assert {v: _metadata(ds, v).read_bytes() for v in kept} == before
    for version in kept:
        state = IcebergWriter().load_state(ObjectStore(ds.uri), _expected(ds, version))
        assert state is not None and [s.snapshot_id for s in state.snapshots] == [
            v for v in kept if version - SNAPSHOT_WINDOW < v <= version
        ]


@pytest.mark.parametrize("loaded", ["after_cleanup", "before_cleanup", "cached"])
def test_publication_after_cleanup_lists_only_readable_snapshots(
    tmp_path: Path, instant_cleanup: None, loaded: str
) -> None:
    """A finisher publishing N+1 with the state of N read after cleanup, read before
    it (another process: it reads the metadata file again once its window could hold
    an expired snapshot), or kept by the process that ran cleanup."""
    ds = s3ddb.write_dataset(_table(0, 10), str(tmp_path / "ds"), open_formats=["iceberg"])
    for i in range(1, 6):
        ds.insert(_table(i * 10, 5))
    store = ObjectStore(ds.uri)
    before = IcebergWriter().load_state(store, _expected(ds, ds.version))
    assert before is not None and len(before.snapshots) == 6
    ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    if loaded == "after_cleanup":
        forget_states()
        ds.insert(_table(100, 1))
    elif loaded == "cached":
        ds.insert(_table(100, 1))  # this process's cached state is the one before
    else:
        # A state read before cleanup, its oldest snapshot old enough to have gone.
        later = 10**15
        kept = {v.version for v in s3ddb.dataset(ds.uri).versions()}
        state = IcebergWriter().refresh_state(store, before, later, kept.__contains__)
        assert [s.snapshot_id for s in state.snapshots] == [5, 6]
        young = IcebergWriter().refresh_state(store, before, 0, kept.__contains__)
        assert young is before  # young: trusted
        forget_states()
        ds.insert(_table(100, 1))
        again = IcebergWriter().publish(_expected_after(ds, 7), state, lambda f: [])[0]
        assert dict(again.then)[version_files(7)[0]] == _metadata(ds, 7).read_bytes()
    assert ds.version == 7
    _check_every_listed_snapshot(ds, [5, 6, 7])


def _expected_after(ds: s3ddb.Dataset, version: int) -> TableVersion:
    store = ObjectStore(ds.uri)
    previous = ds.checkout_version(version - 1).manifest
    return table_version(store, ds.checkout_version(version).manifest, previous)


def test_refresh_reads_again_only_a_window_cleanup_could_have_thinned(tmp_path: Path) -> None:
    from s3ddb.maintenance.cleanup import CLAIM_WINDOW
    from s3ddb.open_formats.iceberg import CLEANUP_CLAIM_WINDOW_MS
    from s3ddb.open_formats.iceberg_checks import SUMMARY_KEYS

    assert CLAIM_WINDOW.total_seconds() * 1000 == CLEANUP_CLAIM_WINDOW_MS
    ds = _dataset(tmp_path)
    store = ObjectStore(ds.uri)
    state = IcebergWriter().load_state(store, _expected(ds, 4))
    assert state is not None and {k for k, _v in state.snapshots[-1].summary} == SUMMARY_KEYS
    oldest = state.snapshots[0].timestamp_ms
    asked: list[int] = []

    def all_kept(version: int) -> bool:
        asked.append(version)
        return True

    assert IcebergWriter().refresh_state(store, state, oldest, all_kept) is state
    later = oldest + CLEANUP_CLAIM_WINDOW_MS
    assert IcebergWriter().refresh_state(store, state, later, all_kept) == state  # all there
    assert asked == []  # nothing to confirm
    # Another engine's planted snapshots are never taken from the file; one it no
    # longer lists is dropped only once the manifests say its version is gone.
    _edit(_metadata(ds, 4), lambda doc: doc["snapshots"].pop(1))
    assert IcebergWriter().refresh_state(store, state, later, all_kept) == state
    assert asked == [2]
    refreshed = IcebergWriter().refresh_state(store, state, later, lambda v: v != 2)
    assert [s.snapshot_id for s in refreshed.snapshots] == [1, 3, 4]
    _metadata(ds, 4).write_bytes(b"[" * 1000)
    assert IcebergWriter().refresh_state(store, state, later, all_kept) == state
    refreshed = IcebergWriter().refresh_state(store, state, later, lambda v: False)
    assert [s.snapshot_id for s in refreshed.snapshots] == [4]


def test_verify_names_a_listed_snapshot_that_cannot_be_read_and_files_not_the_versions(
    tmp_path: Path,
) -> None:
    from s3ddb.maintenance.verify import verify

    ds = _dataset(tmp_path)
    Path(ds.uri, version_files(2)[1]).unlink()
    manifest = _manifest_of_current(ds)
    avro = decode_container(manifest.read_bytes(), manifest.name)
    entry = avro.records[0]["data_file"]
    folder, name = entry["file_path"].rsplit("/", 1)
    other = "x" * (len(name) - len(".parquet")) + ".parquet"  # the manifest keeps its size
    entry["file_path"] = f"{folder}/{other}"
    extra = [(k, v) for k, v in avro.metadata.items() if not k.startswith("avro.")]
    manifest.write_bytes(encode_container(avro.schema, avro.records, extra))
    problems = {
        p.path: p.meaning
        for p in verify(ds.uri, grace_seconds=0).problems
        if p.kind == "damaged_open_format_state"
    }
    assert "snap-2.avro is missing" in problems[version_files(4)[0]], problems
    assert other in problems[f"metadata/{manifest.name}"], problems
    # Version 2's own metadata file names it too: time travel through it fails.
    assert "missing" in problems[version_files(2)[1]], problems
    assert set(problems) == {
        version_files(4)[0],
        f"metadata/{manifest.name}",
        version_files(2)[1],
    }, problems


def test_a_delete_file_another_pyarrow_wrote_is_taken_as_it_is(tmp_path: Path) -> None:
    """A positional delete file whose footer names another pyarrow (its only change:
    pyarrow writes its own version there) holds what s3ddb writes: verify is clean
    and a cold writer builds on the state instead of publishing afresh."""
    from s3ddb.maintenance.verify import verify

    ds = _chunked(tmp_path, 8)
    ds.delete("id = 11")
    ds.insert(_table(500, 1))
    mine = f"parquet-cpp-arrow version {pa.__version__}".encode()
    other = b"parquet-cpp-arrow version " + b"9" * (len(mine) - len(b"parquet-cpp-arrow version "))
    patched = 0
    for path in Path(ds.uri, "metadata").rglob("*.parquet"):
        raw = path.read_bytes()
        if mine in raw:
            path.write_bytes(raw.replace(mine, other))
            patched += 1
    assert patched
    assert verify(ds.uri, grace_seconds=0).healthy
    forget_states()  # a cold process
    ds = s3ddb.dataset(ds.uri)
    version = ds.version
    IcebergWriter().load_state(ObjectStore(ds.uri), _expected(ds, version))  # not refused
    ds.insert(_table(600, 1))
    table = StaticTable.from_metadata(str(_metadata(ds, ds.version)))
    assert rows_of(table.scan().to_arrow()) == rows_of(ds.to_table())


@pytest.mark.parametrize("damage", ["garbage", "a snapshot dropped"])
def test_a_damaged_metadata_file_does_not_thin_the_history_of_later_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """A writer whose kept state is older than cleanup's claim window reads its metadata
    file again: damaged or planted there, it must not drop the snapshots of versions
    s3ddb keeps from every metadata file after it."""
    from s3ddb.open_formats import publisher

    ds = _dataset(tmp_path)  # this process keeps the state after version 4
    if damage == "garbage":
        _metadata(ds, 4).write_bytes(b"garbage")
    else:
        _edit(_metadata(ds, 4), lambda doc: doc["snapshots"].pop(1))
    now = publisher._now_ms()
    monkeypatch.setattr(publisher, "_now_ms", lambda: now + 11 * 60 * 1000)
    with caplog.at_level("WARNING", logger="s3ddb"):
        ds.insert(_table(100, 2, doubled=True))
    ds.insert(_table(200, 2, doubled=True))
    newest = StaticTable.from_metadata(str(_metadata(ds, 6)))
    assert [s.snapshot_id for s in newest.metadata.snapshots] == [1, 2, 3, 4, 5, 6]
    for snapshot_id in range(1, 7):
        got = newest.scan(snapshot_id=snapshot_id).to_arrow()
        assert rows_of(got) == rows_of(ds.checkout_version(snapshot_id).to_table())
    if damage == "garbage":
        said = [r.getMessage() for r in caplog.records if "v4.metadata.json" in r.getMessage()]
        assert said and "--rebuild" in said[0], caplog.records


def test_verify_checks_the_metadata_of_every_kept_version(tmp_path: Path) -> None:
    """Iceberg readers reach an older version through its own metadata file: one
    planted (column names swapped under their field ids), or garbage, is named."""
    from s3ddb.maintenance.verify import verify

    ds = _dataset(tmp_path)
    ds.insert(_table(100, 2, doubled=True))  # version 5
    assert verify(ds.uri, grace_seconds=0).healthy
    renamed = {"id": "name", "name": "id"}

    def swap(doc: dict[str, Any]) -> None:
        for schema in doc["schemas"]:
            for field in schema["fields"]:
                field["name"] = renamed.get(field["name"], field["name"])

    _edit(_metadata(ds, 2), swap)
    _metadata(ds, 3).write_bytes(b"\x00garbage")
    found = {p.path: p for p in verify(ds.uri, grace_seconds=0).problems}
    assert set(found) == {"metadata/v2.metadata.json", "metadata/v3.metadata.json"}, found
    assert {(p.kind, p.version) for p in found.values()} == {
        ("damaged_open_format_state", 2),
        ("damaged_open_format_state", 3),
    }
    assert "schema" in found["metadata/v2.metadata.json"].meaning


def test_verify_compares_a_delete_file_only_an_older_version_uses(tmp_path: Path) -> None:
    """A positional delete file that only an older kept version's snapshot lists,
    rewritten with other positions of as many bytes: Iceberg readers of that version
    would delete another row; verify names it."""
    import io

    import numpy as np

    from s3ddb.maintenance.verify import verify
    from s3ddb.open_formats.iceberg import _positional_deletes

    ds = s3ddb.write_dataset(_table(0, 10), str(tmp_path / "ds"), open_formats=["iceberg"])
    ds.delete("id = 1")  # version 2: a delete file of position 1
    (older,) = Path(ds.uri, "metadata", "deletes").glob("*.parquet")
    ds.delete("id = 2")  # version 3: another delete file replaces it
    assert verify(ds.uri, grace_seconds=0).healthy
    original = older.read_bytes()
    data_path = pq.read_table(io.BytesIO(original)).column("file_path")[0].as_py()
    tampered = _positional_deletes(data_path, np.array([7], np.int64))
    assert len(tampered) == len(original) and tampered != original
    older.write_bytes(tampered)

    found = [(p.kind, p.path, p.version) for p in verify(ds.uri, grace_seconds=0).problems]
    assert found == [("damaged_open_format_state", f"metadata/deletes/{older.name}", 2)]
