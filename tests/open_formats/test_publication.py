"""Every version published as Iceberg and Delta, read back by readers s3ddb did not
write (pyiceberg, deltalake, DuckDB's iceberg_scan and delta_scan), through a
dataset's whole life: appends, deletes, updates, merges, schema changes, compaction,
restores, overwrites, cleanup; on local paths and on the local S3 endpoint through
DynamoDB (where a crash before publication is repaired by the next reader)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.commit.failpoints import EXIT_CODE
from s3ddb.errors import OpenFormatError
from s3ddb.io.object_store import ObjectStore
from s3ddb.open_formats import iceberg_state
from s3ddb.open_formats.publisher import forget_states
from tests.open_formats.readers import (
    deltalake_read,
    duckdb_read,
    pyiceberg_read,
    rows_of,
    same_rows,
)
from tests.support.python_children import run_python

FORMATS = ["iceberg", "delta"]
REPO = Path(__file__).resolve().parents[2]


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"row-{i}" for i in ids],
            "small": pa.array([i % 7 for i in ids], pa.int32()),
        }
    )


def _root(uri: str) -> str:
    """Where other engines find the dataset: its root as a path or s3:// URI."""
    url = ObjectStore(uri).url
    return url[len("file://") :] if url.startswith("file://") else url


def _check_version(
    uri: str, version: int, expected: pa.Table, options: dict[str, str] | None
) -> None:
    root = _root(uri)
    want = rows_of(expected)
    metadata = f"{root}/metadata/v{version}.metadata.json"
    assert same_rows(pyiceberg_read(metadata, options), expected) == want, (
        f"pyiceberg, version {version}"
    )
    assert same_rows(deltalake_read(root, version, options), expected) == want, (
        f"deltalake, version {version}"
    )


def _check_duckdb_version(
    uri: str, version: int, expected: pa.Table, options: dict[str, str] | None
) -> None:
    root = _root(uri)
    want = rows_of(expected)
    metadata = f"{root}/metadata/v{version}.metadata.json"
    got = duckdb_read(f"select * from iceberg_scan('{metadata}')", options)
    assert same_rows(got, expected) == want, f"DuckDB iceberg_scan, version {version}"
    got = duckdb_read(f"select * from delta_scan('{root}', version => {version})", options)
    assert same_rows(got, expected) == want, f"DuckDB delta_scan, version {version}"


def _check_newest(uri: str, expected: pa.Table, options: dict[str, str] | None) -> None:
    root = _root(uri)
    want = rows_of(expected)
    got = duckdb_read(f"select * from iceberg_scan('{root}')", options)
    assert same_rows(got, expected) == want, "DuckDB iceberg_scan"
    got = duckdb_read(f"select * from delta_scan('{root}')", options)
    assert same_rows(got, expected) == want, "DuckDB delta_scan"


def _life(uri: str, so: dict[str, str] | None) -> dict[int, pa.Table]:
    """Take a publishing dataset through its life; the rows of every version."""
    seen: dict[int, pa.Table] = {}

    def note(ds: s3ddb.Dataset) -> s3ddb.Dataset:
        seen[ds.version] = ds.to_table()
        return ds

    ds = note(s3ddb.write_dataset(_table(0, 20), uri, open_formats=FORMATS, storage_options=so))
    assert ds.open_formats == ("iceberg", "delta")
    ds = note(s3ddb.write_dataset(_table(20, 10), uri, mode="append", storage_options=so))
    ds.delete("id < 3")
    note(ds)
    ds.delete("id = 5 OR id = 25")  # more rows deleted in the same files
    note(ds)
    ds.update({"name": "'changed'"}, where="id >= 10 AND id < 15")
    note(ds)
    source = _table(28, 4).set_column(1, "name", pa.array(["merged"] * 4))
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
    note(ds)
    ds.add_columns({"doubled": "id * 2"})
    note(ds)
    ds.alter_columns({"path": "name", "name": "label"})
    note(ds)
    ds.alter_columns({"path": "small", "data_type": pa.int64()})
    note(ds)
    ds.drop_columns(["doubled"])
    note(ds)
    ds.optimize.compact_files()
    ds = note(s3ddb.dataset(uri, storage_options=so))
    assert ds.manifest.operation == "Rewrite"
    ds.checkout_version(3).restore()
    ds = note(s3ddb.dataset(uri, storage_options=so))
    ds = note(s3ddb.write_dataset(_table(100, 5), uri, mode="overwrite", storage_options=so))
    return seen


def test_every_version_reads_the_same_in_every_reader(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    seen = _life(uri, None)
    ds = s3ddb.dataset(uri)
    # (Compaction may commit more than one version.)
    seen = {v.version: ds.checkout_version(v.version).to_table() for v in ds.versions()}
    assert len(seen) >= 14
    for version, expected in seen.items():
        _check_version(uri, version, expected, None)
        _check_duckdb_version(uri, version, expected, None)
    _check_newest(uri, seen[max(seen)], None)
    # Every manifest a version's manifest list names is there, of the length it
    # records (a group listed again after a restore got manifests of its own).
    from pyiceberg.table import StaticTable

    for version in seen:
        table = StaticTable.from_metadata(f"{uri}/metadata/v{version}.metadata.json")
        snapshot = table.current_snapshot()
        assert snapshot is not None
        for manifest in snapshot.manifests(table.io):
            assert Path(manifest.manifest_path).stat().st_size == manifest.manifest_length
    # Every fragment stayed one file: the schema changes wrote whole files.
    for version in seen:
        fragments = ds.checkout_version(version).manifest.fragments
        assert all(len(f.files) == 1 for f in fragments)


def test_on_the_s3_endpoint_through_dynamodb(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    ds = s3ddb.write_dataset(_table(0, 10), ddb_uri, open_formats=FORMATS, storage_options=so)
    ds.delete("id < 2")
    ds.insert(_table(10, 5))
    ds.add_columns({"doubled": "id * 2"})
    finalizer.drain()  # the background finalizer publishes
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    expected = {v: ds.checkout_version(v).to_table() for v in range(1, ds.version + 1)}
    for version, table in expected.items():
        _check_version(ddb_uri, version, table, so)
    _check_newest(ddb_uri, expected[ds.version], so)


def test_a_crash_before_publication_is_repaired_by_the_next_reader(aws: Any, ddb_uri: str) -> None:
    so = aws.storage_options()
    s3ddb.write_dataset(_table(0, 10), ddb_uri, open_formats=FORMATS, storage_options=so)
    code = (
        "import sys, json, s3ddb, pyarrow as pa;"
        "so = json.loads(sys.argv[2]);"
        "t = pa.table({'id': pa.array([50, 51], pa.int64()), 'name': ['a', 'b'],"
        " 'small': pa.array([1, 2], pa.int32())});"
        "s3ddb.write_dataset(t, sys.argv[1], mode='append', storage_options=so)"
    )
    env = {
        **os.environ,
        **aws.env(),
        "S3DDB_FAILPOINTS": "commit.before_publication=exit",
        "PYTHONPATH": str(REPO),
    }
    crashed = run_python(["-c", code, ddb_uri, json.dumps(so)], env=env, timeout=120)
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-2000:]
    store = ObjectStore(ddb_uri, so)
    assert not store.exists("metadata/v2.metadata.json")
    assert not store.exists("_delta_log/00000000000000000002.json")
    forget_states()
    ds = s3ddb.dataset(ddb_uri, storage_options=so)  # the reader finishes version 2
    assert ds.version == 2
    assert store.exists("metadata/v2.metadata.json")
    assert store.exists("_delta_log/00000000000000000002.json")
    _check_version(ddb_uri, 2, ds.to_table(), so)


def test_publication_is_deterministic(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 10), uri, open_formats=FORMATS)
    ds.insert(_table(10, 10))
    ds.delete("id % 3 = 0")
    published = {
        p.relative_to(uri).as_posix(): p.read_bytes()
        for d in ("metadata", "_delta_log")
        for p in Path(uri, d).rglob("*")
        if p.is_file()
    }
    for path in Path(uri).rglob("*"):
        if path.is_file() and path.relative_to(uri).parts[0] in ("metadata", "_delta_log"):
            path.unlink()
    forget_states()
    # A finisher that knows nothing publishes version 3 and catches up 1 and 2: the
    # same bytes.
    assert ds.publish_open_formats() == ("iceberg", "delta")
    again = {
        p.relative_to(uri).as_posix(): p.read_bytes()
        for d in ("metadata", "_delta_log")
        for p in Path(uri, d).rglob("*")
        if p.is_file()
    }
    assert again == published


def test_enable_on_an_existing_dataset_and_disable(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 10), uri)
    ds.insert(_table(10, 5))
    assert ds.open_formats == ()
    assert not Path(uri, "metadata").exists() and not Path(uri, "_delta_log").exists()
    ds.enable_open_formats(["delta", "iceberg"])
    assert ds.version == 3 and ds.open_formats == ("iceberg", "delta")
    _check_version(uri, 3, ds.to_table(), None)
    ds.insert(_table(15, 5))
    _check_version(uri, 4, ds.to_table(), None)
    _check_newest(uri, ds.to_table(), None)
    ds.disable_open_formats()
    ds.insert(_table(20, 5))
    assert ds.open_formats == ()
    assert not Path(uri, "metadata", "v6.metadata.json").exists()
    assert not Path(uri, "_delta_log", "00000000000000000006.json").exists()
    assert Path(uri, "metadata", "version-hint.text").read_text().strip() == "4"


def test_types_without_a_counterpart_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    unsigned = pa.table(
        {"id": pa.array([1, 2], pa.int64()), "count": pa.array([1, 2], pa.uint32())}
    )
    with pytest.raises(OpenFormatError, match="count"):
        s3ddb.write_dataset(unsigned, uri, open_formats=FORMATS)
    assert not Path(uri).exists() or not any(Path(uri).rglob("*.parquet"))
    ds = s3ddb.write_dataset(unsigned, uri)
    with pytest.raises(OpenFormatError, match="count"):
        ds.enable_open_formats(FORMATS)
    assert s3ddb.dataset(uri).version == 1
    with pytest.raises(OpenFormatError, match="parquet"):
        ds.enable_open_formats(["parquet"])


def test_a_schema_change_to_a_type_without_counterpart_commits_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 10), uri, open_formats=FORMATS)
    unsigned = pa.table({"unsigned": pa.array(range(10), pa.uint16())})
    with pytest.raises(OpenFormatError, match="unsigned"):
        ds.add_columns(unsigned)
    assert s3ddb.dataset(uri).version == 1
    with pytest.raises(OpenFormatError, match="rewrite"):
        ds.update({"name": "'x'"}, rewrite="columns")
    assert s3ddb.dataset(uri).version == 1


def test_cleanup_removes_what_only_removed_versions_published(
    tmp_path: Path, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 10), uri, open_formats=FORMATS)
    for i in range(1, 13):
        ds.insert(_table(i * 10, 10))
    ds.delete("id < 5")
    newest = ds.version
    assert newest == 14
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    assert stats.versions_removed == list(range(1, newest - 1))
    assert stats.files.get("open_format_files", 0) > 0
    for version in range(1, newest - 1):
        assert not Path(uri, "metadata", f"v{version}.metadata.json").exists()
    # The Delta log starts at the oldest kept version, checkpointed there: Delta
    # readers reach exactly the kept versions.
    log = sorted(p.name for p in Path(uri, "_delta_log").iterdir())
    assert "00000000000000000012.json" not in log
    assert "00000000000000000010.checkpoint.parquet" not in log
    assert "00000000000000000013.checkpoint.parquet" in log
    for version in (newest - 1, newest):
        _check_version(uri, version, ds.checkout_version(version).to_table(), None)
    _check_newest(uri, ds.to_table(), None)


def test_verify_reports_a_foreign_commit(tmp_path: Path) -> None:
    from s3ddb.maintenance.verify import verify

    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_table(0, 10), uri, open_formats=FORMATS)
    assert verify(uri).healthy
    planted = {"commitInfo": {"operation": "WRITE", "timestamp": 1}}
    Path(uri, "_delta_log", "00000000000000000002.json").write_text(json.dumps(planted) + "\n")
    report = verify(uri)
    kinds = {p.kind for p in report.problems}
    assert kinds == {"foreign_open_format_commit"}
    # Where is the file alone (the sentence is the meaning).
    assert [p.path for p in report.problems] == ["_delta_log/00000000000000000002.json"]
    assert report.problems[0].meaning.startswith("Delta commit 2 is newer than s3ddb version 1")


def test_the_command_line_enables_shows_and_republishes(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_table(0, 10), uri)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_python(
            ["-m", "s3ddb.cli.main", *args], env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=120,
        )  # fmt: skip

    shown = cli("open-formats", uri)
    assert shown.returncode == 0 and "publishes no open formats" in shown.stdout
    enabled = cli("open-formats", uri, "--enable", "iceberg,delta", "--json")
    assert enabled.returncode == 0, enabled.stderr
    report = json.loads(enabled.stdout)
    assert report["version"] == 2 and report["formats"] == ["iceberg", "delta"]
    assert Path(uri, "metadata", "v2.metadata.json").exists()
    Path(uri, "metadata", "v2.metadata.json").unlink()
    again = cli("open-formats", uri, "--publish")
    assert again.returncode == 0, again.stderr
    assert "iceberg" in again.stdout and Path(uri, "metadata", "v2.metadata.json").exists()
    bad = cli("open-formats", uri, "--enable", "hudi")
    assert bad.returncode == 2 and "hudi" in bad.stderr


def test_nested_columns_read_the_same_in_every_reader(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "point": pa.array(
                [{"x": 1.0, "y": 2.0}, {"x": 3.0, "y": None}, None],
                pa.struct([("x", pa.float64()), ("y", pa.float64())]),
            ),
            "tags": pa.array([["a", "b"], [], None], pa.list_(pa.string())),
            "attrs": pa.array(
                [[("k", 1)], [], [("a", 2), ("b", 3)]], pa.map_(pa.string(), pa.int64())
            ),
        }
    )
    ds = s3ddb.write_dataset(table, uri, open_formats=FORMATS)
    ds.delete("id = 2")
    for version in (1, 2):
        expected = ds.checkout_version(version).to_table()
        _check_version(uri, version, expected, None)
        _check_duckdb_version(uri, version, expected, None)


def test_clones_publish_their_own_tables(tmp_path: Path) -> None:
    src = s3ddb.write_dataset(_table(0, 10), str(tmp_path / "src"), open_formats=FORMATS)
    src.delete("id < 2")
    shallow = src.shallow_clone(str(tmp_path / "shallow"))
    shallow.insert(_table(10, 3))
    deep = src.deep_clone(str(tmp_path / "deep"))
    for clone in (shallow, deep):
        assert clone.open_formats == ("iceberg", "delta")
        for version in range(1, clone.version + 1):
            expected = clone.checkout_version(version).to_table()
            _check_version(clone.uri, version, expected, None)
        _check_newest(clone.uri, clone.to_table(), None)
    # The shallow clone's tables name the source's files where they are.
    text = Path(tmp_path, "shallow", "_delta_log", "00000000000000000001.json").read_text()
    assert str(tmp_path / "src" / "data") in text


def test_concurrent_writers_publish_every_version(aws: Any, ddb_uri: str) -> None:
    from tests.support.proc import run_workers
    from tests.support.workers import rows_for

    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, open_formats=FORMATS, storage_options=so)
    results = run_workers([("append", ddb_uri, str(w), "4", "3") for w in (1, 2, 3)], env=aws.env())
    assert all(r.returncode == 0 for r in results), [r.stderr[-1500:] for r in results]
    forget_states()
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert ds.version == 13
    store = ObjectStore(ddb_uri, so)
    for version in range(1, 14):
        expected = ds.checkout_version(version).to_table()
        want = rows_of(expected)
        metadata = f"{_root(ddb_uri)}/metadata/v{version}.metadata.json"
        assert same_rows(pyiceberg_read(metadata, so), expected) == want, version
        assert store.exists(f"_delta_log/{version:020d}.json")
    _check_version(ddb_uri, 13, ds.to_table(), so)
    _check_newest(ddb_uri, ds.to_table(), so)


def test_chunked_manifests_publish_one_iceberg_manifest_per_chunk(
    tmp_path: Path, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 2), uri, open_formats=FORMATS)
    ds.update_config({"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "2"})
    for i in range(1, 15):
        ds.insert(_table(i * 2, 2))
    ds.delete("id = 3 OR id = 20")
    chunks = {ref.name for ref in ds.manifest.fragments.chunk_refs()}
    assert len(chunks) >= 3
    # Each chunk's manifest was written once and is listed again by later versions.
    manifests = [p.name for p in Path(uri, "metadata").glob("m-*.avro")]
    assert chunks <= {iceberg_state.group_of(f"metadata/{name}") for name in manifests}
    assert len(manifests) < 2 * ds.version
    for version in range(1, ds.version + 1):
        expected = ds.checkout_version(version).to_table()
        _check_version(uri, version, expected, None)
    _check_duckdb_version(uri, ds.version, ds.to_table(), None)
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=3)
    assert stats.files.get("open_format_files", 0) > 0
    for version in range(ds.version - 2, ds.version + 1):
        expected = ds.checkout_version(version).to_table()
        _check_version(uri, version, expected, None)
        _check_duckdb_version(uri, version, expected, None)


def test_verify_reports_a_version_left_unpublished(tmp_path: Path) -> None:
    from s3ddb.maintenance.verify import verify

    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 10), uri, open_formats=FORMATS)
    ds.insert(_table(10, 2))
    assert verify(uri, grace_seconds=0).healthy
    Path(uri, "_delta_log", "00000000000000000002.json").unlink()
    report = verify(uri, grace_seconds=0)
    assert [(p.kind, p.version) for p in report.problems] == [("unpublished_version", 2)]
    assert verify(uri).healthy  # a young version may be being published
    ds.publish_open_formats()
    assert verify(uri, grace_seconds=0).healthy
    _check_version(uri, 2, ds.to_table(), None)


def test_a_group_commit_publishes_each_dataset(aws: Any) -> None:
    import uuid

    from tests.conftest import TEST_BUCKET, TEST_TABLE

    so = aws.storage_options()
    uris = [
        f"s3+ddb://{TEST_BUCKET}/g-{uuid.uuid4().hex[:8]}?ddbTableName={TEST_TABLE}"
        for _ in range(2)
    ]
    for uri in uris:
        s3ddb.write_dataset(_table(0, 4), uri, open_formats=FORMATS, storage_options=so)
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(uris[0]).insert(_table(10, 2))
        tx.dataset(uris[1]).delete("id = 1")
    finalizer.drain()
    for uri in uris:
        ds = s3ddb.dataset(uri, storage_options=so)
        assert ds.version == 2
        expected = ds.to_table()
        metadata = f"{_root(uri)}/metadata/v2.metadata.json"
        assert same_rows(pyiceberg_read(metadata, so), expected) == rows_of(expected)
        assert ObjectStore(uri, so).exists("_delta_log/00000000000000000002.json")


def test_fragments_committed_without_file_sizes_publish_the_real_sizes(tmp_path: Path) -> None:
    from dataclasses import replace

    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 4), uri, open_formats=FORMATS)
    fragments = [
        replace(f, files=tuple(replace(d, file_size_bytes=0) for d in f.files))
        for f in s3ddb.fragment.write_fragments(_table(4, 3), uri)
    ]
    assert all(d.file_size_bytes == 0 for f in fragments for d in f.files)
    ds = s3ddb.LanceDataset.commit(uri, s3ddb.LanceOperation.Append(fragments), read_version=1)
    assert ds.version == 2
    _check_version(uri, 2, ds.to_table(), None)
    _check_duckdb_version(uri, 2, ds.to_table(), None)
    log = Path(uri, "_delta_log", "00000000000000000002.json").read_text()
    sizes = [json.loads(line)["add"]["size"] for line in log.splitlines() if '"add"' in line]
    assert sizes and all(size > 0 for size in sizes)


def test_enabling_on_fragments_of_several_files_asks_for_compaction(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 6), uri)
    ds.add_columns({"doubled": "id * 2"})  # a second file per fragment
    assert any(len(f.files) == 2 for f in ds.manifest.fragments)
    with pytest.raises(OpenFormatError, match="compact"):
        ds.enable_open_formats(FORMATS)
    assert s3ddb.dataset(uri).version == 2
    ds.optimize.compact_files()
    ds = s3ddb.dataset(uri).enable_open_formats(FORMATS)
    _check_version(uri, ds.version, ds.to_table(), None)


def test_a_dropped_and_recreated_dataset_publishes_a_new_table(tmp_path: Path) -> None:
    from s3ddb.maintenance.drop import drop

    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 6), uri, open_formats=FORMATS)
    ds.insert(_table(6, 2))
    old_uuid = json.loads(Path(uri, "metadata", "v2.metadata.json").read_text())["table-uuid"]
    drop(uri)
    assert not any(Path(uri).rglob("*.*"))  # the published tables went with it
    ds = s3ddb.write_dataset(_table(100, 3), uri, open_formats=FORMATS)
    assert ds.version == 1
    new_uuid = json.loads(Path(uri, "metadata", "v1.metadata.json").read_text())["table-uuid"]
    assert new_uuid != old_uuid
    _check_version(uri, 1, ds.to_table(), None)
    _check_newest(uri, ds.to_table(), None)
