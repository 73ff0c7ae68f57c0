"""The Delta log s3ddb publishes, against an attacker with write access to the dataset
prefix: the manifests are the source of truth and the log is output. A planted
``add``, a commit that is not JSON or a file built to exhaust memory is never carried
into what s3ddb writes next; publication goes on (afresh), verify names the file; and
after cleanup a Delta reader reaches exactly the versions s3ddb keeps, each readable."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

import s3ddb
from s3ddb.maintenance.verify import verify
from s3ddb.open_formats.publisher import forget_states
from tests.open_formats.readers import deltalake_read, duckdb_read, rows_of, same_rows

REPO = Path(__file__).resolve().parents[2]
LOG = "_delta_log"


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids]})


def _commit(version: int) -> str:
    return f"{LOG}/{version:020d}.json"


def _checkpoint(version: int) -> str:
    return f"{LOG}/{version:020d}.checkpoint.parquet"


def _published(uri: str) -> dict[str, bytes]:
    root = Path(uri)
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for folder in (LOG, "dv")
        if (root / folder).exists()
        for p in sorted((root / folder).rglob("*"))
        if p.is_file()
    }


def _text(path: str, data: bytes) -> str:
    """What a published file says: a checkpoint's rows (its bytes are compressed),
    else its bytes."""
    if path.endswith(".parquet"):
        return json.dumps(pq.read_table(pa.BufferReader(data)).to_pylist(), default=str)
    return data.decode("utf-8", errors="replace")


def _dataset(uri: str, versions: int) -> s3ddb.Dataset:
    ds = s3ddb.write_dataset(_table(0, 5), uri, open_formats=["delta"])
    for i in range(1, versions):
        ds.insert(_table(i * 5, 5))
    assert ds.version == versions
    return ds


def _damage(uri: str) -> list[tuple[str, str]]:
    return [(p.kind, p.path) for p in verify(uri).problems]


def test_a_planted_add_is_never_carried_into_what_s3ddb_writes_next(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _dataset(uri, 9)
    other = s3ddb.write_dataset(_table(1000, 3), str(tmp_path / "other"))
    planted = next(Path(other.uri, "data").glob("*.parquet"))
    # The attacker splices another dataset's file into s3ddb's commit 9, in the exact
    # form s3ddb writes an add.
    commit = Path(uri, _commit(9))
    info = json.loads(commit.read_text().splitlines()[0])["commitInfo"]
    add = {
        "path": str(planted),
        "partitionValues": {},
        "size": planted.stat().st_size,
        "modificationTime": info["timestamp"],
        "dataChange": True,
        "stats": json.dumps({"numRecords": 3}, separators=(",", ":")),
    }
    with commit.open("a") as out:
        out.write(json.dumps({"add": add}, separators=(",", ":")) + "\n")
    assert 1000 in deltalake_read(uri, 9).column("id").to_pylist()  # the damage is real
    before = _published(uri)

    forget_states()  # a writer that reads where Delta stands from the log
    ds = s3ddb.dataset(uri)
    ds.insert(_table(100, 2))  # version 10: a checkpoint version
    written = {p: d for p, d in _published(uri).items() if before.get(p) != d}
    assert _commit(10) in written and _checkpoint(10) in written
    for path, data in written.items():
        assert planted.name not in _text(path, data), path
    expected = ds.to_table()
    assert same_rows(deltalake_read(uri, 10), expected) == rows_of(expected)
    got = duckdb_read(f"select * from delta_scan('{uri}')")
    assert same_rows(got, expected) == rows_of(expected)
    assert ("damaged_open_format_state", _commit(9)) in _damage(uri)


def test_a_commit_that_is_not_json_is_named_and_publication_goes_on(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _dataset(uri, 3)
    Path(uri, _commit(3)).write_text("{not json")
    assert ("damaged_open_format_state", _commit(3)) in _damage(uri)

    forget_states()
    ds = s3ddb.dataset(uri)
    ds.insert(_table(100, 2))
    # Version 4 is published afresh: a whole commit and a checkpoint readers start from.
    assert Path(uri, _checkpoint(4)).exists()
    assert "unpublished_version" not in {p.kind for p in verify(uri, grace_seconds=0).problems}
    forget_states()
    assert s3ddb.dataset(uri).publish_open_formats() == ("delta",)
    expected = ds.to_table()
    assert same_rows(deltalake_read(uri, 4), expected) == rows_of(expected)


@pytest.mark.parametrize(
    "outside",
    ["../other/data/x.parquet", "file:{tmp}/other/x.parquet", "s3a://bucket/x.parquet"],
    ids=["dot-dot", "scheme without slashes", "another scheme"],
)
def test_verify_names_paths_outside_the_dataset_and_stale_pointers(
    tmp_path: Path, outside: str
) -> None:
    uri = str(tmp_path / "ds")
    _dataset(uri, 4)
    assert verify(uri).healthy
    # Commit 2 adds a file outside the root and commit 3 removes it again: the newest
    # state is right, but a reader travelling to version 2 reads it. And
    # _last_checkpoint names a checkpoint that is not there.
    for version, kind in ((2, "add"), (3, "remove")):
        commit = Path(uri, _commit(version))
        info = json.loads(commit.read_text().splitlines()[0])["commitInfo"]
        action: dict[str, object] = {"path": outside.format(tmp=tmp_path)}
        if kind == "add":
            action.update(partitionValues={}, size=10, modificationTime=info["timestamp"])
            action.update(dataChange=True, stats='{"numRecords":1}')
        else:
            action.update(deletionTimestamp=info["timestamp"], dataChange=True)
            action.update(extendedFileMetadata=True, partitionValues={}, size=10)
        with commit.open("a") as out:
            out.write(json.dumps({kind: action}, separators=(",", ":")) + "\n")
    Path(uri, LOG, "_last_checkpoint").write_text('{"version":7,"size":3}')
    problems = {p.path: p.meaning for p in verify(uri).problems}
    assert "outside the dataset" in problems[_commit(2)]
    assert "outside the dataset" in problems[_commit(3)]
    assert f"{LOG}/_last_checkpoint" in problems
    assert _commit(4) not in problems and _commit(1) not in problems


# --- bombs, in a child process with 2 GiB of address space --------------------------------

_CHILD = """
import resource, sys
limit = 2 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import pyarrow as pa
import s3ddb
from s3ddb.io.object_store import ObjectStore
from s3ddb.maintenance.verify import verify
from s3ddb.open_formats.delta import DeltaWriter
from s3ddb.open_formats.publisher import table_version
uri = sys.argv[1]
ds = s3ddb.dataset(uri)
store = ObjectStore(uri)
try:
    DeltaWriter().load_state(store, table_version(store, ds.manifest, None))
    print("loaded")
except BaseException as exc:
    print(type(exc).__name__, isinstance(exc, s3ddb.errors.PublishedStateError),
          getattr(exc, "path", ""), str(exc)[:300].replace(chr(10), " "))
try:
    print(sorted({(p.kind, p.path) for p in verify(uri).problems}))
except BaseException as exc:
    print("verify:", type(exc).__name__, str(exc)[:300].replace(chr(10), " "))
try:
    ds.insert(pa.table({"id": pa.array([999], pa.int64()), "name": ["new"]}))
    print("published", ds.version)
except BaseException as exc:
    print("insert:", type(exc).__name__, str(exc)[:300].replace(chr(10), " "))
"""


def _in_a_small_address_space(uri: str) -> list[str]:
    """What a child limited to 2 GiB of address space (python, pyarrow and s3ddb take
    about 1.6 GiB of it before reading anything) prints: loading the Delta state of
    the newest version, verify's Delta problems, then an insert that publishes."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, uri],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


def test_a_checkpoint_declaring_millions_of_rows_is_refused_in_bounded_memory(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    _dataset(uri, 3)
    # 40 million null rows in a few hundred kilobytes: the checkpoint the state after
    # version 3 starts from (the one at 1).
    bomb = pa.table({"add": pa.nulls(40_000_000, pa.int32())})
    pq.write_table(bomb, Path(uri, _checkpoint(1)))
    assert Path(uri, _checkpoint(1)).stat().st_size < 1 << 20
    loaded, damage, published = _in_a_small_address_space(uri)
    assert loaded.startswith(f"PublishedStateError True {_checkpoint(1)} "), loaded
    assert "40000000 rows" in loaded, loaded
    assert f"('damaged_open_format_state', '{_checkpoint(1)}')" in damage, damage
    assert published == "published 4", published
    assert Path(uri, _checkpoint(4)).exists()  # afresh, from the manifests


def test_a_commit_of_a_gibibyte_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _dataset(uri, 3)
    os.truncate(Path(uri, _commit(3)), 1 << 30)  # sparse: its last line is 1 GiB of NULs
    loaded, damage, published = _in_a_small_address_space(uri)
    assert loaded.startswith(f"PublishedStateError True {_commit(3)} "), loaded
    assert "longer than" in loaded, loaded
    assert f"('damaged_open_format_state', '{_commit(3)}')" in damage, damage
    assert published == "published 4", published


# --- cleanup -------------------------------------------------------------------------------


def test_after_cleanup_delta_readers_reach_exactly_the_kept_versions(
    tmp_path: Path, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    ds = _dataset(uri, 11)
    ds.delete("id % 7 = 0")  # deletion vectors
    ds.optimize.compact_files()  # every earlier data file is replaced
    ds.delete("id = 50")
    ds.insert(_table(200, 3))
    newest = ds.version
    assert newest >= 15
    rows = {v: ds.checkout_version(v).to_table() for v in range(newest - 2, newest + 1)}
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=3)
    assert stats.files.get("data_files", 0) > 0
    kept = [v.version for v in s3ddb.dataset(uri).versions()]
    assert kept == sorted(rows)

    assert sorted(h["version"] for h in DeltaTable(uri).history()) == kept
    for version in range(1, newest + 1):
        if version not in kept:
            with pytest.raises(DeltaError):
                DeltaTable(uri, version=version)
            continue
        expected = rows[version]
        want = rows_of(expected)
        assert same_rows(deltalake_read(uri, version), expected) == want, version
        got = duckdb_read(f"select * from delta_scan('{uri}', version => {version})")
        assert same_rows(got, expected) == want, version
    last = json.loads(Path(uri, LOG, "_last_checkpoint").read_text())
    assert Path(uri, _checkpoint(last["version"])).exists()
    assert verify(uri).healthy, verify(uri).problems


def test_a_tagged_version_kept_apart_leaves_the_delta_log_at_the_newest_run(
    tmp_path: Path, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    ds = _dataset(uri, 6)
    ds.tags.create("keep", 2)
    ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    assert [v.version for v in s3ddb.dataset(uri).versions()] == [2, 5, 6]
    # A Delta log has no gaps: it holds the unbroken run 5, 6; s3ddb still reads 2.
    assert sorted(h["version"] for h in DeltaTable(uri).history()) == [5, 6]
    for version in (2, 3, 4):
        with pytest.raises(DeltaError):
            DeltaTable(uri, version=version)
    expected = s3ddb.dataset(uri).checkout_version(5).to_table()
    assert same_rows(deltalake_read(uri, 5), expected) == rows_of(expected)
    assert s3ddb.dataset(uri).checkout_version(2).count_rows() == 10
    assert verify(uri).healthy, verify(uri).problems


def test_cleanup_after_delta_was_disabled_removes_the_log_of_removed_versions(
    tmp_path: Path, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    ds = _dataset(uri, 3)
    ds.disable_open_formats()
    ds.insert(_table(100, 1))
    ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    assert [v.version for v in s3ddb.dataset(uri).versions()] == [4, 5]
    assert sorted(p.name for p in Path(uri, LOG).iterdir()) == []


def test_a_checkpoint_whose_pages_disagree_with_its_footer_is_refused(tmp_path: Path) -> None:
    from s3ddb.errors import PublishedStateError
    from s3ddb.io.object_store import ObjectStore
    from s3ddb.open_formats.delta import DeltaWriter
    from s3ddb.open_formats.publisher import table_version

    uri = str(tmp_path / "ds")
    ds = _dataset(uri, 2)
    path = Path(uri, _checkpoint(1))
    data = bytearray(path.read_bytes())
    chunk = pq.ParquetFile(pa.BufferReader(bytes(data))).metadata.row_group(0).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    # A page header begins with its type (field 1) and uncompressed size (field 2),
    # both i32 in the Thrift compact protocol: 0x15, a varint, 0x15, a varint.
    assert data[start] == 0x15 and data[start + 2] == 0x15 and data[start + 3] < 0x7E
    data[start + 3] = 0x7E  # 63 bytes more than the footer counts for the column
    path.write_bytes(bytes(data))
    store = ObjectStore(uri)
    with pytest.raises(PublishedStateError, match="decompress to") as caught:
        DeltaWriter().load_state(store, table_version(store, ds.manifest, None))
    assert caught.value.path == _checkpoint(1)


def test_cleanup_starts_the_log_only_at_a_checkpoint_it_checked(
    tmp_path: Path, instant_cleanup: None
) -> None:
    """A file bearing the name of the checkpoint at the oldest version cleanup keeps
    is not taken on its name: every commit before it is about to go. Cleanup writes
    its own there, and Delta readers still read every kept version."""
    uri = str(tmp_path / "ds")
    ds = _dataset(uri, 8)
    Path(uri, _checkpoint(5)).write_bytes(b"PAR1 not a checkpoint PAR1")
    rows = {v: ds.checkout_version(v).to_table() for v in range(5, 9)}
    ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=4)
    assert [v.version for v in s3ddb.dataset(uri).versions()] == [5, 6, 7, 8]
    assert not Path(uri, _commit(4)).exists()
    assert pq.read_table(Path(uri, _checkpoint(5))).num_rows > 0  # s3ddb's, readable
    for version, expected in rows.items():
        assert same_rows(deltalake_read(uri, version), expected) == rows_of(expected), version


def test_names_with_other_digits_are_not_taken_for_s3ddbs_files(
    tmp_path: Path, instant_cleanup: None
) -> None:
    """Regular expressions' ``\\d`` and ``int()`` take any script's digits: a file
    named with Arabic-Indic digits must be foreign to verify, and never the
    checkpoint cleanup starts the log at."""
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 5), uri, open_formats=["delta", "iceberg"])
    for i in range(1, 8):
        ds.insert(_table(i * 5, 5))
    zeros = "\u0660" * 19
    planted = [
        f"{LOG}/{zeros}\u0661.json",
        f"{LOG}/{zeros}\u0665.checkpoint.parquet",
        "metadata/v\u0661.metadata.json",
        "metadata/snap-\u0661.avro",
    ]
    for path in planted:
        Path(uri, path).write_bytes(b'{"planted": true}\n')
    found = {p.path for p in verify(uri, grace_seconds=0).problems}
    assert set(planted) <= found, found
    rows = ds.to_table()
    ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=4)
    assert Path(uri, _checkpoint(5)).exists()  # written: the planted name was not taken
    assert same_rows(deltalake_read(uri, 8), rows) == rows_of(rows)


def test_a_deletion_vector_rewritten_with_the_same_size_is_not_built_on(tmp_path: Path) -> None:
    """A deletion vector file rewritten with other positions of as many bytes (a valid
    CRC: its size, all the log's checks saw, is unchanged): verify names it, and a cold
    writer refuses the state, so the next version is published afresh, which writes
    the file again; Delta readers of that version read exactly s3ddb's rows."""
    from s3ddb.open_formats.deletion_vectors import deserialize_positions, dv_file_bytes

    uri = str(tmp_path / "ds")
    ds = _dataset(uri, 3)
    ds.delete("id = 1")  # the second row of the first file
    ds.insert(_table(100, 2))  # a commit that adds no deletion vector: it is reused
    (dv,) = Path(uri, "dv").glob("*.bin")
    original = dv.read_bytes()
    assert deserialize_positions(original[5:-4]) == [1]
    tampered = dv_file_bytes([0])[0]  # the first row deleted instead
    assert len(tampered) == len(original) and tampered != original
    dv.write_bytes(tampered)

    damaged = {p.path: p.meaning for p in verify(uri, grace_seconds=0).problems}
    assert any(dv.name in meaning for meaning in damaged.values()), damaged

    forget_states()  # a cold process
    ds = s3ddb.dataset(uri)
    ds.insert(_table(200, 1))
    assert dv.read_bytes() == original  # written again: every reader of it reads s3ddb's
    assert Path(uri, _checkpoint(ds.version)).exists()  # afresh: the log starts again
    expected = ds.to_table()
    assert same_rows(deltalake_read(uri, ds.version), expected) == rows_of(expected)
    assert verify(uri, grace_seconds=0).healthy


def test_a_checkpoint_planted_after_the_newest_version_is_named_and_rebuilt_away(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    ds = _dataset(uri, 3)
    # An old checkpoint copied past the newest version, the pointer moved to it: Delta
    # readers start there and read version 1's rows as version 1000, whatever s3ddb
    # commits after.
    planted = f"{LOG}/{1000:020d}.checkpoint.parquet"
    Path(uri, planted).write_bytes(Path(uri, _checkpoint(1)).read_bytes())
    pointer = Path(uri, LOG, "_last_checkpoint")
    pointer.write_text(json.dumps({**json.loads(pointer.read_text()), "version": 1000}))
    ds.insert(_table(100, 2))
    assert DeltaTable(uri).version() == 1000  # the damage is real

    found = {p.path: p for p in verify(uri, grace_seconds=0).problems}
    assert set(found) == {planted, f"{LOG}/_last_checkpoint"}, found
    assert {p.kind for p in found.values()} == {"foreign_open_format_commit"}
    assert found[planted].meaning.startswith("Delta checkpoint 1000 is newer than s3ddb version 4")

    past = os.stat(uri).st_mtime - 3600  # a rebuild spares files modified just now
    for path in Path(uri, LOG).iterdir():
        os.utime(path, (past, past))
    rebuilt = s3ddb.dataset(uri).rebuild_open_formats()
    assert planted in rebuilt.deleted_files
    expected = s3ddb.dataset(uri).to_table()
    assert DeltaTable(uri).version() == 4
    assert same_rows(deltalake_read(uri, 4), expected) == rows_of(expected)
    assert verify(uri, grace_seconds=0).healthy, verify(uri, grace_seconds=0).problems


def test_verify_compares_a_deletion_vector_only_an_older_version_uses(tmp_path: Path) -> None:
    """A deletion vector that only an older kept version lists, rewritten with other
    positions of as many bytes: Delta time travel to that version would delete
    another row; verify names the commit that adds it."""
    from s3ddb.open_formats.deletion_vectors import dv_file_bytes

    uri = str(tmp_path / "ds")
    ds = _dataset(uri, 3)
    ds.delete("id = 1")  # version 4: a deletion vector of row 1
    (older,) = Path(uri, "dv").glob("*.bin")
    ds.delete("id = 2")  # version 5: another one replaces it
    ds.insert(_table(100, 2))
    assert verify(uri, grace_seconds=0).healthy
    tampered = dv_file_bytes([3])[0]
    assert len(tampered) == len(older.read_bytes())
    older.write_bytes(tampered)

    found = [(p.kind, p.path, p.version) for p in verify(uri, grace_seconds=0).problems]
    assert found == [("damaged_open_format_state", _commit(4), 4)], found
    assert older.name in verify(uri, grace_seconds=0).problems[0].meaning
