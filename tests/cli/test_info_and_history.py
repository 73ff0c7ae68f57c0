"""What info and history tell a user: the call that made each version (``add_columns``)
beside the kind its manifest records (``Merge``), the open formats a version publishes
and where their readers find it; and open-formats --publish on a dataset that
publishes nothing, answered with how to start."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.observe.commit_metrics import operation_metrics
from tests.support.cli_runner import run_cli as run

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "format1_dataset"


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids]})


def _history_cells(out: str) -> dict[int, tuple[str, str]]:
    """(operation, call) of each version in ``history``'s text table."""
    lines = [line.split() for line in out.splitlines()]
    assert lines[0][:4] == ["version", "timestamp", "operation", "call"], out
    return {int(row[0]): (row[2], row[3]) for row in lines[2:] if row and row[0].isdigit()}


def test_history_names_the_call_beside_the_kind(tmp_path: Path, capsys: Any) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 6), uri)
    ds = s3ddb.dataset(uri)
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _rows(4, 4)
    )
    ds.update({"v": "'x'"}, where="id = 1")
    ds.delete("id = 2")
    ds.optimize.compact_files()
    ds.create_scalar_index("id", "BTREE")
    ds.add_columns({"w": "id * 2"})
    ds.alter_columns({"path": "w", "name": "w2"})
    ds.drop_columns(["w2"])
    ds.checkout_version(2).restore()
    calls = {
        "merge_insert": "Update",
        "update": "Update",
        "delete": "Delete",
        "compact_files": "Rewrite",
        "create_scalar_index": "CreateIndex",
        "add_columns": "Merge",
        "alter_columns": "Project",
        "drop_columns": "Project",
        "restore": "Restore",
    }
    infos = s3ddb.dataset(uri).versions()
    made = {(v.api_operation, v.operation) for v in infos}
    assert set(calls.items()) <= made, made
    # write_dataset's kind says it all: no call recorded.
    assert (infos[0].api_operation, infos[0].operation) == (None, "Overwrite")

    code, out, _ = run(capsys, "history", uri, "--json")
    assert code == 0
    entries = json.loads(out)
    assert {(e["api_operation"], e["operation"]) for e in entries} == {
        (v.api_operation, v.operation) for v in infos
    }
    code, out, _ = run(capsys, "history", uri)
    assert code == 0
    cells = _history_cells(out)
    assert {(kind, call) for call, kind in calls.items()} <= set(cells.values()), out
    assert cells[1] == ("Overwrite", "-")


def test_versions_written_before_show_only_the_kind(tmp_path: Path, capsys: Any) -> None:
    uri = str(tmp_path / "ds")
    shutil.copytree(FIXTURE, uri)
    assert [v.api_operation for v in s3ddb.dataset(uri).versions()] == [None] * 6
    s3ddb.dataset(uri).delete("id = 1")
    code, out, _ = run(capsys, "history", uri)
    assert code == 0
    cells = _history_cells(out)
    assert cells[7] == ("Delete", "delete")
    assert [cells[v] for v in range(1, 7)] == [
        ("Overwrite", "-"), ("Append", "-"), ("Append", "-"), ("Append", "-"),
        ("Delete", "-"), ("Update", "-"),
    ]  # fmt: skip
    code, out, _ = run(capsys, "info", uri, "--version", "6", "--json")
    assert code == 0
    facts = json.loads(out)
    assert (facts["operation"], facts["api_operation"]) == ("Update", None)


def test_a_recorded_call_that_is_not_a_name_is_not_shown(tmp_path: Path, capsys: Any) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 3), uri)
    # Stored metrics are anyone's writing: a writer that recorded this, say.
    with operation_metrics(api_operation="\x1b]0;pwned\x07 (Delete)"):
        s3ddb.write_dataset(_rows(3, 1), uri, mode="append")
    [*_, last] = s3ddb.dataset(uri).versions()
    assert "pwned" in last.metrics["api_operation"]  # stored as written
    assert last.api_operation is None and last.operation == "Append"
    code, out, _ = run(capsys, "history", uri)
    assert code == 0 and "pwned" not in out and _history_cells(out)[2] == ("Append", "-")
    code, out, _ = run(capsys, "info", uri)
    assert code == 0 and "pwned" not in out and "call:             -\n" in out


def test_info_shows_the_call_and_the_publication(tmp_path: Path, capsys: Any) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 3), uri)
    code, out, _ = run(capsys, "info", uri)
    assert code == 0
    assert "open formats:     none (s3ddb open-formats URI --enable)" in out
    code, out, _ = run(capsys, "info", uri, "--json")
    assert json.loads(out)["open_formats"] == {"formats": [], "locations": {}}

    s3ddb.dataset(uri).enable_open_formats("iceberg,delta")
    root = Path(uri).resolve().as_uri()
    code, out, _ = run(capsys, "info", uri)
    assert code == 0
    assert "operation:        UpdateConfig at " in out
    assert "call:             enable_open_formats\n" in out
    assert "open formats:     iceberg, delta\n" in out
    assert f"  iceberg: {root}/metadata/v2.metadata.json\n" in out
    assert f"  delta: {root} (_delta_log version 2)\n" in out
    assert (tmp_path / "ds" / "metadata" / "v2.metadata.json").exists()
    code, out, _ = run(capsys, "info", uri, "--json")
    facts = json.loads(out)
    assert (facts["operation"], facts["api_operation"]) == ("UpdateConfig", "enable_open_formats")
    assert facts["open_formats"] == {
        "formats": ["iceberg", "delta"],
        "locations": {
            "iceberg": f"{root}/metadata/v2.metadata.json",
            "delta": f"{root} (_delta_log version 2)",
        },
    }
    # open-formats names the same places.
    code, out, _ = run(capsys, "open-formats", uri, "--json")
    assert json.loads(out)["locations"] == facts["open_formats"]["locations"]


def test_publishing_a_dataset_that_publishes_nothing_says_how_to_start(
    tmp_path: Path, capsys: Any
) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 3), uri)
    for flags in ([], ["--json"]):
        code, out, err = run(capsys, "open-formats", uri, "--publish", *flags)
        assert code == 2 and out == ""
        said = " ".join(err.split())  # the message is wrapped to the terminal's width
        assert "publishes no open formats" in said
        assert f"s3ddb open-formats {uri} --enable iceberg,delta" in said
    assert s3ddb.dataset(uri).version == 1  # nothing committed
    s3ddb.dataset(uri).enable_open_formats("delta")
    code, out, _ = run(capsys, "open-formats", uri, "--publish")
    assert code == 0 and "publishes delta" in out


def test_history_counts_the_rows_a_restore_brings_back(tmp_path: Path, capsys: Any) -> None:
    """A restore of the version before a delete gives its fragment its rows back: they
    count as added (the fragment's row count grew)."""
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_rows(0, 3), uri)
    ds.delete("id = 1")
    ds.checkout_version(1).restore()
    code, out, _ = run(capsys, "history", uri, "--json")
    assert code == 0
    entries = {e["version"]: e for e in json.loads(out)}
    assert (entries[2]["rows_added"], entries[2]["rows_removed"]) == (0, 1)
    assert (entries[3]["rows_added"], entries[3]["rows_removed"]) == (1, 0)


def test_info_through_s3_of_a_dynamodb_dataset_says_it_is_read_only_so(
    aws: Any, ddb_uri: str, capsys: Any
) -> None:
    """It said 'put-if-not-exists on s3://...', the mechanism of the URI it was given,
    while any write through that URI is refused."""
    so = aws.storage_options()
    s3ddb.write_dataset(_rows(0, 3), ddb_uri, storage_options=so)
    s3ddb.write_dataset(_rows(3, 1), ddb_uri, mode="append", storage_options=so)
    plain = "s3://" + ddb_uri.removeprefix("s3+ddb://").split("?")[0]
    flags = [f"--storage-option={k}={v}" for k, v in so.items()]
    for version in ([], ["--version", "1"]):
        code, out, _ = run(capsys, "info", plain, *version, *flags)
        assert code == 0
        [line] = [x for x in out.splitlines() if x.startswith("commit mechanism:")]
        assert "read-only through this URI; write with " + ddb_uri in line, line
    code, out, _ = run(capsys, "info", ddb_uri, *flags)
    assert "read-only" not in out and "DynamoDB table" in out
