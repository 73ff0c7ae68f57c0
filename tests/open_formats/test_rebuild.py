"""Rebuilding the published Iceberg and Delta state from the manifests
(``Dataset.rebuild_open_formats``, ``s3ddb open-formats URI --rebuild``): whatever the
published files hold (damaged, planted, another engine's commits, a bomb), the result is
what publication derives from the manifests, every version it lists reads the same in
every reader, and nothing planted survives."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from pathlib import Path

import pyarrow as pa
import pytest

import s3ddb
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
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids]})


def _history(uri: str) -> dict[int, pa.Table]:
    """A publishing dataset of four versions (appends and a delete); their rows."""
    seen: dict[int, pa.Table] = {}
    ds = s3ddb.write_dataset(_table(0, 10), uri, open_formats=FORMATS)
    seen[ds.version] = ds.to_table()
    ds = s3ddb.write_dataset(_table(10, 5), uri, mode="append")
    seen[ds.version] = ds.to_table()
    ds.delete("id < 3")
    seen[ds.version] = ds.to_table()
    ds = s3ddb.write_dataset(_table(15, 5), uri, mode="append")
    seen[ds.version] = ds.to_table()
    return seen


def _published(uri: str) -> dict[str, bytes]:
    root = Path(uri)
    return {
        str(p.relative_to(root)): p.read_bytes()
        for folder in ("metadata", "_delta_log", "dv")
        if (root / folder).exists()
        for p in sorted((root / folder).rglob("*"))
        if p.is_file()
    }


def _age(uri: str) -> None:
    """Date every published file an hour back: a rebuild keeps files modified since
    just before it began (a concurrent writer's)."""
    past = os.stat(uri).st_mtime - 3600
    for name in _published(uri):
        os.utime(Path(uri, name), (past, past))


def _check_every_version(uri: str, seen: dict[int, pa.Table]) -> None:
    for version, expected in seen.items():
        want = rows_of(expected)
        metadata = f"{uri}/metadata/v{version}.metadata.json"
        assert same_rows(pyiceberg_read(metadata), expected) == want, version
        assert same_rows(deltalake_read(uri, version), expected) == want, version
    newest = max(seen)
    got = duckdb_read(f"select * from delta_scan('{uri}', version => {newest})")
    assert same_rows(got, seen[newest]) == rows_of(seen[newest])
    got = duckdb_read(f"select * from iceberg_scan('{uri}/metadata/v{newest}.metadata.json')")
    assert same_rows(got, seen[newest]) == rows_of(seen[newest])


def test_rebuild_replaces_a_damaged_and_planted_state(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    other = str(tmp_path / "other")
    seen = _history(uri)
    s3ddb.write_dataset(_table(1000, 3), other)
    planted_file = next(Path(other, "data").glob("*.parquet"))
    clean = _published(uri)

    # Damage: a commit that is not JSON, a metadata file that is not JSON, a planted
    # add of another dataset's file, and a foreign file in each folder.
    root = Path(uri)
    (root / "_delta_log" / "00000000000000000002.json").write_text("{not json")
    (root / "metadata" / "v3.metadata.json").write_text("[[[[")
    add = {"add": {"path": str(planted_file), "size": planted_file.stat().st_size,
                   "partitionValues": {}, "modificationTime": 1, "dataChange": True}}  # fmt: skip
    with open(root / "_delta_log" / "00000000000000000004.json", "a") as out:
        out.write(json.dumps(add) + "\n")
    (root / "metadata" / "planted.avro").write_bytes(b"Obj\x01junk")
    (root / "_delta_log" / "00000000000000000099.json").write_text("{}\n")

    _age(uri)
    forget_states()
    ds = s3ddb.dataset(uri)
    rebuilt = ds.rebuild_open_formats()
    assert rebuilt.formats == ("iceberg", "delta")
    assert (rebuilt.first_version, rebuilt.newest_version) == (1, 4)
    assert sorted(rebuilt.deleted_files) == [
        "_delta_log/00000000000000000099.json",
        "metadata/planted.avro",
    ]
    after = _published(uri)
    # Publication from the first version is what was published before the damage.
    assert after == clean
    assert all(str(planted_file).encode() not in data for data in after.values())
    _check_every_version(uri, seen)
    # A second rebuild changes nothing and deletes nothing.
    again = s3ddb.dataset(uri).rebuild_open_formats()
    assert again.deleted_files == [] and _published(uri) == clean


def test_rebuild_after_cleanup_starts_at_the_oldest_kept_version(
    tmp_path: Path, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    seen = _history(uri)
    ds = s3ddb.dataset(uri)
    ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    kept = {v.version for v in ds.versions()}
    assert kept == {3, 4}
    Path(uri, "_delta_log", "00000000000000000004.json").write_text("garbage")
    _age(uri)

    rebuilt = s3ddb.dataset(uri).rebuild_open_formats()
    assert (rebuilt.first_version, rebuilt.newest_version) == (3, 4)
    names = set(_published(uri))
    # Nothing a removed version stands for is left, in either format.
    assert not any(n.startswith(("metadata/v1.", "metadata/v2.")) for n in names)
    assert not any(
        n.startswith("_delta_log/0000000000000000000") and n[30] in "12" for n in names
    ), names
    _check_every_version(uri, {v: seen[v] for v in kept})


def test_rebuild_of_a_dataset_that_publishes_nothing_does_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_table(0, 3), uri)
    rebuilt = s3ddb.dataset(uri).rebuild_open_formats()
    assert rebuilt.formats == () and rebuilt.deleted_files == []
    assert _published(uri) == {}


def test_the_command_line_rebuilds(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    seen = _history(uri)
    Path(uri, "_delta_log", "00000000000000000003.json").write_text("not json")
    Path(uri, "metadata", "foreign.metadata.json").write_text("{}")
    _age(uri)

    done = run_python(
        ["-m", "s3ddb.cli.main", "open-formats", uri, "--rebuild", "--json"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rebuilt"] == {
        "first_version": 1,
        "newest_version": 4,
        "deleted_files": ["metadata/foreign.metadata.json"],
    }
    _check_every_version(uri, seen)


def test_a_damaged_state_is_said_and_the_next_version_published_afresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from s3ddb.maintenance.verify import verify

    uri = str(tmp_path / "ds")
    seen = _history(uri)
    damaged = "_delta_log/00000000000000000004.json"
    Path(uri, damaged).write_text("{not json")
    Path(uri, "metadata", "v4.metadata.json").write_text("[" * 100_000)
    forget_states()  # a cold writer reads where each format stands from its files
    with caplog.at_level(logging.WARNING, logger="s3ddb"):
        ds = s3ddb.write_dataset(_table(50, 2), uri, mode="append")
    seen[ds.version] = ds.to_table()
    said = [r.getMessage() for r in caplog.records if "--rebuild" in r.getMessage()]
    assert len(said) == 2, said  # one per format
    # The new version reads right in both formats, though the one before is damaged.
    want = rows_of(seen[5])
    assert same_rows(pyiceberg_read(f"{uri}/metadata/v5.metadata.json"), seen[5]) == want
    assert same_rows(deltalake_read(uri, 5), seen[5]) == want
    # verify names the damage and the fix; publishing again works; a rebuild mends it.
    report = verify(uri)
    damage = [p for p in report.problems if p.kind == "damaged_open_format_state"]
    assert any(p.path == damaged for p in damage), report.problems
    assert all(p.fix == "`s3ddb open-formats URI --rebuild`" for p in damage)
    forget_states()
    assert s3ddb.dataset(uri).publish_open_formats() == ("iceberg", "delta")
    _age(uri)
    s3ddb.dataset(uri).rebuild_open_formats()
    assert verify(uri).healthy, verify(uri).problems
    _check_every_version(uri, seen)


def test_a_state_kept_in_process_drops_what_another_process_cleaned_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3ddb.open_formats import publisher

    uri = str(tmp_path / "ds")
    seen = _history(uri)  # this process keeps the state after version 4
    cleanup = (
        "import datetime as dt, sys, s3ddb\n"
        "s3ddb.dataset(sys.argv[1]).cleanup_old_versions(older_than=dt.timedelta(0), "
        "retain_versions=2, claim_window=dt.timedelta(0))\n"
    )
    done = run_python(
        ["-c", cleanup, uri], env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # Long after: the kept state's snapshots are older than cleanup's claim window.
    monkeypatch.setattr(publisher, "_now_ms", lambda: 2**62)
    ds = s3ddb.write_dataset(_table(60, 2), uri, mode="append")
    seen[ds.version] = ds.to_table()
    listed = json.loads(Path(uri, "metadata", "v5.metadata.json").read_text())["snapshots"]
    assert sorted(s["snapshot-id"] for s in listed) == [3, 4, 5]
    for snapshot in (3, 4, 5):
        from pyiceberg.table import StaticTable

        table = StaticTable.from_metadata(f"{uri}/metadata/v5.metadata.json")
        got = table.scan(snapshot_id=snapshot).to_arrow()
        assert same_rows(got, seen[snapshot]) == rows_of(seen[snapshot]), snapshot


def test_rebuild_keeps_a_tagged_version_kept_apart_readable_in_iceberg(
    tmp_path: Path, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    seen = _history(uri)
    ds = s3ddb.dataset(uri)
    ds.tags.create("audit", 1)
    ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    assert {v.version for v in ds.versions()} == {1, 3, 4}
    _age(uri)

    rebuilt = s3ddb.dataset(uri).rebuild_open_formats()
    # The oldest version republished: the tagged one, in Iceberg.
    assert (rebuilt.first_version, rebuilt.newest_version) == (1, 4)
    # Iceberg publishes the tagged version alone; a Delta log has no gaps.
    tagged = f"{uri}/metadata/v1.metadata.json"
    assert same_rows(pyiceberg_read(tagged), seen[1]) == rows_of(seen[1])
    _check_every_version(uri, {3: seen[3], 4: seen[4]})


def test_rebuild_keeps_the_versions_published_before_publication_was_disabled(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    seen = _history(uri)  # versions 1-4 publish
    ds = s3ddb.dataset(uri)
    ds.disable_open_formats()  # 5
    ds.insert(_table(100, 2))  # 6: not published
    ds.enable_open_formats(FORMATS)  # 7: publishes afresh
    ds.insert(_table(200, 2))  # 8
    seen.update({v: ds.checkout_version(v).to_table() for v in (7, 8)})
    clean = _published(uri)
    assert "_delta_log/00000000000000000007.checkpoint.parquet" in clean
    # Damage on each side of the gap.
    Path(uri, "_delta_log", "00000000000000000002.json").write_text("{not json")
    Path(uri, "metadata", "v3.metadata.json").write_text("[[[[")
    Path(uri, "metadata", "v8.metadata.json").write_text("[[[[")
    _age(uri)

    forget_states()
    rebuilt = s3ddb.dataset(uri).rebuild_open_formats()
    assert (rebuilt.first_version, rebuilt.newest_version, rebuilt.deleted_files) == (1, 8, [])
    # Exactly what publication wrote: versions 1-4 as one run, 7-8 as another that
    # starts afresh (with a Delta checkpoint), nothing for 5 and 6.
    assert _published(uri) == clean
    _check_every_version(uri, seen)
