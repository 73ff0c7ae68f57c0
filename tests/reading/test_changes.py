"""The change feed (``Dataset.changes``, ``s3ddb changes``): every row change of a
range of versions, checked against a reference diff of the versions by key, and
reading only the fragments a version changed."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb
from s3ddb.cli.main import main
from s3ddb.errors import (
    DataFileError,
    DataFileMissingError,
    InvalidInputError,
    ManifestCorruptError,
)

META = ("_change_type", "_commit_version", "_commit_timestamp")
REPLACING = ("Overwrite", "Restore")


# --- the reference: two versions compared by key ----------------------------------------


def _rows_by_field_id(ds: s3ddb.Dataset, version: int) -> tuple[dict[int, dict[int, Any]], str]:
    """Version ``version``'s rows by id, each {field id: value}, and its operation."""
    if version == 0:
        return {}, ""
    at = ds.checkout_version(version)
    table = at.to_table()
    ids = at.manifest.schema.top_level_ids(table.column_names)
    rows = {r["id"]: {i: r[n] for n, i in zip(table.column_names, ids)} for r in table.to_pylist()}
    return rows, at.manifest.operation


def _reference(ds: s3ddb.Dataset, version: int) -> list[tuple[str, int, dict[int, Any]]]:
    """The changes of ``version`` from a diff of it and the version before, by key:
    rows only after are inserts, only before deletes, changed (in a column both have)
    a delete and an insert; an overwrite or a restore deletes and inserts every row."""
    old, _ = _rows_by_field_id(ds, version - 1)
    new, operation = _rows_by_field_id(ds, version)
    changes: list[tuple[str, int, dict[int, Any]]] = []
    for key, row in old.items():
        after = new.get(key)
        common = [] if after is None else [i for i in row if i in after]
        if operation in REPLACING or after is None or any(row[i] != after[i] for i in common):
            changes.append(("delete", version, row))
    for key, row in new.items():
        before = old.get(key)
        common = [] if before is None else [i for i in row if i in before]
        if operation in REPLACING or before is None or any(row[i] != before[i] for i in common):
            changes.append(("insert", version, row))
    return changes


def _as_rows(changes: list[tuple[str, int, dict[int, Any]]], end: s3ddb.Dataset) -> list[tuple]:
    """Reference changes as the feed's rows read as of ``end``: its columns by field
    id (a field the change's version lacked is null), sorted."""
    names = end.schema.names
    ids = end.manifest.schema.top_level_ids(names)
    return sorted(
        ((*(row.get(i) for i in ids), kind, version) for kind, version, row in changes),
        key=repr,
    )


def _feed_rows(table: pa.Table) -> list[tuple]:
    data = table.drop_columns(["_commit_timestamp"]).to_pylist()
    return sorted((tuple(r.values()) for r in data), key=repr)


# --- random histories -------------------------------------------------------------------


def _random_history(path: Path, seed: int, steps: int) -> s3ddb.Dataset:
    """A dataset after ``steps`` random appends, deletes, updates, merges,
    compactions, column changes, overwrites and restores (keys are unique)."""
    rng = random.Random(seed)
    uri = str(path / f"history-{seed}")
    next_id = 0

    def rows(n: int) -> pa.Table:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return pa.table(
            {"id": ids, "n": [rng.randrange(100) for _ in ids], "s": [f"r{i}" for i in ids]}
        )

    def fill(table: pa.Table) -> pa.Table:
        # The columns added since, as add_columns computes them.
        for name in ds.schema.names[3:]:
            values = [x * 10 for x in table.column("n").to_pylist()]
            table = table.append_column(ds.schema.field(name), pa.array(values, pa.int64()))
        return table

    ds = s3ddb.write_dataset(rows(12), uri, max_rows_per_file=4)
    added = 0
    for _ in range(steps):
        live = ds.to_table(columns=["id"]).column("id").to_pylist()
        extra = [n for n in ds.schema.names if n not in ("id", "n", "s")]
        some = rng.sample(live, min(len(live), rng.randint(1, 3))) if live else []
        where = f"id IN ({', '.join(map(str, some))})" if some else "id < 0"
        choice = rng.choice(
            [
                "append",
                "append",
                "delete",
                "update",
                "update_all",
                "merge",
                "compact",
                "add",
                "drop",
                "rename",
                "overwrite",
                "restore",
            ]
        )
        if choice == "append":
            ds = s3ddb.write_dataset(
                fill(rows(rng.randint(1, 7))), uri, mode="append", max_rows_per_file=3
            )
        elif choice == "delete" and some:
            ds.delete(where)
        elif choice == "update" and some:
            ds.update({"n": "n + 1"}, where=where, rewrite=rng.choice(["rows", "columns"]))
        elif choice == "update_all" and live:
            ds.update({"n": "n * 2 + 1"}, rewrite=rng.choice(["rows", "columns", "auto"]))
        elif choice == "merge" and some:
            source = rows(2)
            matched = pa.table(
                {
                    "id": some,
                    "n": [1000 + next_id + i for i in range(len(some))],
                    "s": [f"m{i}" for i in some],
                }
            )
            (
                ds.merge_insert("id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(fill(pa.concat_tables([matched, source])))
            )
        elif choice == "compact":
            ds.optimize.compact_files(target_rows_per_fragment=64)
        elif choice == "add":
            added += 1
            ds.add_columns({f"c{added}": "n * 10"})
        elif choice == "drop" and extra:
            ds.drop_columns([rng.choice(extra)])
        elif choice == "rename" and extra:
            old = rng.choice(extra)
            added += 1
            ds.alter_columns({"path": old, "name": f"c{added}"})
        elif choice == "overwrite":
            table = ds.to_table(columns=["id", "n", "s"])
            ds = s3ddb.write_dataset(
                pa.concat_tables([table.slice(1), rows(2)]), uri, mode="overwrite"
            )
        elif choice == "restore" and ds.version > 2:
            ds = ds.checkout_version(rng.randint(1, ds.version - 1)).restore()
    return s3ddb.dataset(uri)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_version_changes_as_a_diff_of_it_and_the_version_before(
    tmp_path: Path, seed: int
) -> None:
    ds = _random_history(tmp_path, seed, steps=16)
    operations = {v.version: v.operation for v in ds.versions()}
    assert len(set(operations.values())) >= 5, operations  # a varied history
    for version in range(1, ds.version + 1):
        end = ds.checkout_version(version)
        feed = ds.changes(version - 1, version)
        assert feed.schema.names == end.schema.names + list(META)
        assert _feed_rows(feed) == _as_rows(_reference(ds, version), end), (version, operations)
        if operations[version] in ("Rewrite", "CreateIndex", "UpdateConfig", "Merge", "Project"):
            assert feed.num_rows == 0, (version, operations[version])


@pytest.mark.parametrize("seed", [4, 5])
def test_a_range_lists_every_change_of_each_of_its_versions(tmp_path: Path, seed: int) -> None:
    ds = _random_history(tmp_path, seed, steps=14)
    rng = random.Random(seed)
    pairs = {(0, ds.version), (1, ds.version), (ds.version, ds.version)}
    while len(pairs) < 6:
        a, b = sorted(rng.sample(range(ds.version + 1), 2))
        pairs.add((a, b))
    for a, b in sorted(pairs):
        end = ds.checkout_version(b) if b else ds
        reference = [c for v in range(a + 1, b + 1) for c in _reference(ds, v)]
        feed = ds.changes(a, b)
        assert _feed_rows(feed) == _as_rows(reference, end), (a, b)
        versions = feed.column("_commit_version").to_pylist()
        assert versions == sorted(versions)  # in version order


def test_rows_inserted_and_deleted_in_the_range_appear_twice_and_timestamps_are_the_versions(
    tmp_path: Path,
) -> None:
    ds = s3ddb.write_dataset(pa.table({"id": [1, 2], "v": ["a", "b"]}), str(tmp_path / "d"))
    ds.insert(pa.table({"id": [3], "v": ["c"]}))
    ds.delete("id = 3")
    feed = ds.changes(1)
    assert feed.select(["id", "v", "_change_type", "_commit_version"]).to_pylist() == [
        {"id": 3, "v": "c", "_change_type": "insert", "_commit_version": 2},
        {"id": 3, "v": "c", "_change_type": "delete", "_commit_version": 3},
    ]
    assert feed.schema.field("_commit_version").type == pa.int64()
    stamps = {v.version: v.timestamp for v in ds.versions()}
    for row in feed.to_pylist():
        when = row["_commit_timestamp"]
        assert abs(when - stamps[row["_commit_version"]]) < dt.timedelta(milliseconds=1)
    # Batches give the same rows.
    batches = list(ds.change_batches(1))
    assert pa.Table.from_batches(batches).equals(feed)


def test_compaction_and_schema_changes_add_no_rows_and_an_update_is_delete_and_insert(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "d")
    ds = s3ddb.write_dataset(
        pa.table({"id": list(range(8)), "v": list(range(8))}), uri, max_rows_per_file=2
    )
    ds.delete("id = 1")
    ds.optimize.compact_files(target_rows_per_fragment=100)
    assert ds.versions()[-1].operation == "Rewrite"
    assert ds.changes(ds.version - 1).num_rows == 0
    ds.add_columns({"w": "v * 10"})
    ds.alter_columns({"path": "v", "name": "value"})
    assert ds.changes(ds.version - 2).num_rows == 0
    ds.update({"w": "w + 1"}, where="id = 4")
    rows = ds.changes(ds.version - 1).select(["id", "value", "w", "_change_type"]).to_pylist()
    assert rows == [
        {"id": 4, "value": 4, "w": 40, "_change_type": "delete"},
        {"id": 4, "value": 4, "w": 41, "_change_type": "insert"},
    ]
    # The delete of version 2, read as of the last version: the renamed column under
    # its new name, the column added later as null.
    feed = ds.changes(1).to_pylist()
    assert [(r["id"], r["value"], r["w"]) for r in feed if r["_commit_version"] == 2] == [
        (1, 1, None)
    ]
    assert ds.changes(1, 2).select(["id", "v"]).to_pylist() == [{"id": 1, "v": 1}]


def _data_files(ds: s3ddb.Dataset, root: Path) -> dict[int, list[Path]]:
    return {f.id: [root / "data" / d.path for d in f.files] for f in ds.get_fragments()}


@pytest.mark.parametrize("rewrite", ["rows", "columns"])
def test_a_one_row_update_reads_only_the_fragment_it_touched(tmp_path: Path, rewrite: str) -> None:
    root = tmp_path / "d"
    ds = s3ddb.write_dataset(
        pa.table({"id": list(range(400)), "v": [i * 3 for i in range(400)]}),
        str(root),
        max_rows_per_file=20,
    )
    before = ds.version
    old = _data_files(ds, root)
    hit = list(old)[205 // 20]  # the fragment holding id 205
    ds.update({"v": "v + 1"}, where="id = 205", rewrite=rewrite)
    new = _data_files(ds, root)
    # The updated fragment's files, before and after, and the new fragments' files.
    kept = set(old[hit]) | set(new[hit]) | {p for f, ps in new.items() if f not in old for p in ps}
    # Every data file of the other 19 fragments removed: reading one would fail.
    removed = {p for ps in (*old.values(), *new.values()) for p in ps} - kept
    assert len(removed) == 19
    for path in removed:
        path.unlink()
    feed = ds.changes(before)
    assert feed.select(["id", "v", "_change_type"]).to_pylist() == [
        {"id": 205, "v": 615, "_change_type": "delete"},
        {"id": 205, "v": 616, "_change_type": "insert"},
    ]
    with pytest.raises(DataFileMissingError):  # the removed files are gone indeed
        ds.to_table()


def test_a_one_row_delete_reads_only_its_fragment(tmp_path: Path) -> None:
    root = tmp_path / "d"
    ds = s3ddb.write_dataset(
        pa.table({"id": list(range(200)), "v": list(range(200))}), str(root), max_rows_per_file=10
    )
    ds.delete("id = 57")
    for fragment in ds.get_fragments():
        if fragment.id != 5:
            for d in fragment.files:
                (root / "data" / d.path).unlink()
    assert ds.changes(ds.version - 1).select(["id", "_change_type"]).to_pylist() == [
        {"id": 57, "_change_type": "delete"}
    ]


def test_bad_ranges_are_typed_errors_naming_the_versions(tmp_path: Path) -> None:
    ds = s3ddb.write_dataset(pa.table({"id": [1]}), str(tmp_path / "d"))
    for i in range(2, 5):
        ds.insert(pa.table({"id": [i]}))
    with pytest.raises(InvalidInputError, match="start_version 3 is after end_version 2"):
        ds.changes(3, 2)
    with pytest.raises(InvalidInputError, match="start_version 5 is after end_version 4"):
        ds.changes(5)
    with pytest.raises(InvalidInputError, match=r"version 9 .* does not exist"):
        ds.changes(1, 9)
    for bad in (-1, True, "1", 1.0):
        with pytest.raises(InvalidInputError, match="start_version must be an int"):
            ds.changes(bad)  # type: ignore[arg-type]
    assert ds.changes(4).num_rows == 0
    assert ds.changes(4).schema.names == ["id", *META]
    ds.cleanup_old_versions(
        older_than=dt.timedelta(0), claim_window=dt.timedelta(0), error_if_tagged_old_versions=False
    )
    with pytest.raises(InvalidInputError, match=r"need version\(s\) 1, 2, 3.*oldest kept is 4"):
        ds.changes(1)
    with pytest.raises(InvalidInputError, match=r"from version 2 to 4 need version\(s\) 2, 3,"):
        ds.changes(2, 4)  # version 2 is read too: the rows before version 3's changes
    assert ds.changes(4).num_rows == 0


def test_a_dataset_with_a_change_column_is_refused(tmp_path: Path) -> None:
    ds = s3ddb.write_dataset(pa.table({"id": [1], "_change_type": ["x"]}), str(tmp_path / "d"))
    with pytest.raises(InvalidInputError, match="_change_type"):
        ds.changes(0)


# --- the command line -----------------------------------------------------------------


def test_cli_prints_the_feed_as_a_table_and_json_lines_with_a_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "d")
    ds = s3ddb.write_dataset(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), uri)
    ds.delete("id = 2")
    ds.update({"v": "'z'"}, where="id = 3")

    assert main(["changes", uri, "--from", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["id", "v", *META]
    assert [line.split()[:4] for line in out[2:5]] == [
        ["2", "b", "delete", "2"],
        ["3", "c", "delete", "3"],
        ["3", "z", "insert", "3"],
    ]
    assert out[-1] == "(3 changes)"

    assert main(["changes", uri, "--from", "0", "--to", "2", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["id"], r["_change_type"], r["_commit_version"]) for r in lines] == [
        (1, "insert", 1),
        (2, "insert", 1),
        (3, "insert", 1),
        (2, "delete", 2),
    ]
    assert dt.datetime.fromisoformat(lines[0]["_commit_timestamp"]).tzinfo is not None

    assert main(["changes", uri, "--from", "0", "--json", "--limit", "2"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert "printed the first 2 changes; --limit 0 prints all" in captured.err

    assert main(["changes", uri, "--from", "0", "--limit", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + 3 + 1 and out[-1] == "(first 3 changes; --limit 0 prints all)"


def test_cli_bad_ranges_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "d")
    s3ddb.write_dataset(pa.table({"id": [1]}), uri)
    assert main(["changes", uri, "--from", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "InvalidInputError" in err
    assert "--from 2 is after the latest version, 1" in err
    assert main(["changes", uri, "--from", "0", "--to", "7"]) == 2
    assert "--to 7 is after the latest version, 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["changes", uri])  # --from is required
    assert exited.value.code == 2
    assert main(["changes", str(tmp_path / "none"), "--from", "0"]) == 2


def test_a_corrupt_deletion_file_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "d"
    ds = s3ddb.write_dataset(pa.table({"id": list(range(10))}), str(root))
    ds.delete("id = 3")
    (deletion,) = [p for p in root.rglob("*") if p.is_file() and "deletion" in p.parent.name]
    deletion.write_bytes(b"\x00" * 64)
    with pytest.raises(ManifestCorruptError, match=f"deletion file .*{deletion.name}"):
        ds.changes(1)


def test_batches_stream_one_fragment_at_a_time(tmp_path: Path) -> None:
    """A version removing every fragment: the first batch is one fragment's rows, read
    before any other fragment is (the others' files are gone: reading them fails)."""
    root = tmp_path / "d"
    ds = s3ddb.write_dataset(pa.table({"id": list(range(100))}), str(root), max_rows_per_file=10)
    fragments = ds.get_fragments()
    ds.delete("id >= 0")
    for fragment in fragments[1:]:
        for d in fragment.files:
            (root / "data" / d.path).unlink()
    batches = ds.change_batches(1)
    first = next(batches)
    assert first.to_pydict()["id"] == list(range(10))
    assert set(first.column("_change_type").to_pylist()) == {"delete"}
    with pytest.raises(DataFileMissingError):
        next(batches)


class _CountedParquetFile(pq.ParquetFile):
    """A real ParquetFile that counts the rows its reads decode (whole reads, row
    group reads and batches)."""

    rows: list[int] = []

    def read(self, *args: Any, **kwargs: Any) -> pa.Table:
        table = super().read(*args, **kwargs)
        self.rows.append(table.num_rows)
        return table

    def read_row_groups(self, *args: Any, **kwargs: Any) -> pa.Table:
        table = super().read_row_groups(*args, **kwargs)
        self.rows.append(table.num_rows)
        return table

    def iter_batches(self, *args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        for batch in super().iter_batches(*args, **kwargs):
            self.rows.append(batch.num_rows)
            yield batch


@pytest.mark.parametrize("store", ["local", "memory"])
def test_deleted_rows_are_decoded_only_up_to_the_last_one_of_each_row_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """Of the row groups holding deleted rows, only their rows up to the last deleted
    one are decoded: the feed's old values come from the heads of those groups."""
    uri = str(tmp_path / "d") if store == "local" else f"memory://heads-{uuid.uuid4().hex[:8]}"
    table = pa.table({"id": list(range(500)), "s": [f"s{i}" for i in range(500)]})
    ds = s3ddb.write_dataset(table, uri, max_rows_per_group=100)
    # Group 0's first row, group 1's last, two rows of group 3; groups 2 and 4 untouched.
    deleted = [0, 199, 310, 350]
    ds.delete(f"id IN ({', '.join(map(str, deleted))})")
    rows: list[int] = []
    monkeypatch.setattr(_CountedParquetFile, "rows", rows)
    monkeypatch.setattr(pq, "ParquetFile", _CountedParquetFile)
    feed = ds.changes(ds.version - 1)
    assert feed.select(["id", "s", "_change_type"]).to_pylist() == [
        {"id": i, "s": f"s{i}", "_change_type": "delete"} for i in deleted
    ]
    assert sum(rows) == 1 + 100 + 51  # groups 0, 1 and 3 up to their last deleted row


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_the_feed_leaves_no_data_file_open_also_when_one_fails_its_checks(tmp_path: Path) -> None:
    """Point reads and small fragments keep a data file open from its footer to its
    read: closed after, and when the footer fails the fragment's checks."""
    root = tmp_path / "d"
    ds = s3ddb.write_dataset(pa.table({"id": list(range(300))}), str(root), max_rows_per_group=100)
    ds.update({"id": "id + 1000"}, where="id = 150")
    ds.delete("id = 250")
    before = _open_files()
    for _ in range(5):
        assert ds.changes(1).num_rows == 3
    assert _open_files() == before
    (fragment,) = ds.checkout_version(1).get_fragments()
    (path,) = [root / "data" / d.path for d in fragment.files]
    pq.write_table(pa.table({"id": list(range(7))}), path)  # another row count
    with pytest.raises(DataFileError, match="holds 7 rows") as failed:
        ds.changes(1)
    # Closed at the failure, not later by garbage collection: the error's traceback
    # (still held here) holds the frames that opened the file.
    assert failed.traceback and _open_files() == before
