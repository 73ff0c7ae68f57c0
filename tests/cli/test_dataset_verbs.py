"""The dataset verbs of the ``s3ddb`` command (s3ddb/cli/commands.py).

Most tests call :func:`s3ddb.cli.main.main` in-process and check what it prints; one
runs the real entry point in child processes.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from tests.support.cli_runner import run_cli as cli

ROOT = Path(__file__).resolve().parents[2]
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
    ]
)


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    names = [None if i == 3 else f"row-{i}" for i in ids]
    return pa.table({"id": ids, "name": names, "score": [i / 2 for i in ids]}, schema=SCHEMA)


@pytest.fixture
def uri(tmp_path: Path) -> str:
    """A dataset with 10 rows (ids 0-9; name NULL for id 3) in two versions."""
    path = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 6), path)
    s3ddb.write_dataset(_rows(6, 4), path, mode="append")
    return path


def fields(out: str) -> dict[str, str]:
    """``label: value`` lines of ``info`` output."""
    pairs = (line.partition(":") for line in out.splitlines() if not line.startswith(" "))
    return {label: value.strip() for label, _, value in pairs}


def table_lines(out: str) -> list[list[str]]:
    """Cells of an aligned text table (header, separator and rows)."""
    return [line.split() for line in out.splitlines() if line and not line.startswith("(")]


def assert_error(result: tuple[int, str, str], code: int, *needles: str) -> str:
    status, out, err = result
    assert status == code, (out, err)
    assert out == ""
    for needle in needles:
        # Long messages wrap at spaces (a long tmp_path moves where): read them unwrapped.
        assert needle in " ".join(err.split())
    return err


# --- reading verbs --------------------------------------------------------------------


def test_info(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    s3ddb.dataset(uri).delete("id = 0")
    code, out, err = cli(capsys, "info", uri)
    assert code == 0 and err == ""
    info = fields(out)
    assert info["dataset"] == uri
    assert info["version"] == "3"
    assert info["latest version"] == "3"
    assert info["operation"].startswith("Delete at ")
    assert ISO_UTC.match(info["operation"].removeprefix("Delete at "))
    assert info["rows"] == "9"
    assert info["fragments"] == "2"
    assert info["deletion files"] == "1 (1 row deleted)"
    assert info["data files"] == "2"
    assert info["commit mechanism"] == s3ddb.dataset(uri).handler.describe()
    assert info["commit mechanism"].startswith("rename-if-not-exists on file://")
    assert info["naming scheme"] == "V2"
    schema = out.split("schema:\n", 1)[1].splitlines()
    assert schema == ["  id: int64 not null", "  name: string", "  score: double"]

    code, out, _ = cli(capsys, "info", uri, "--version", "1")
    info = fields(out)
    assert (code, info["version"], info["latest version"], info["rows"]) == (0, "1", "3", "6")
    assert info["operation"].startswith("Overwrite at ")
    assert info["deletion files"] == "0 (0 rows deleted)"


def test_history(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    s3ddb.dataset(uri).delete("id < 2")
    code, out, err = cli(capsys, "history", uri)
    assert code == 0 and err == ""
    lines = table_lines(out)
    assert lines[0] == [
        "version", "timestamp", "operation", "call", "added", "removed", "attempts", "committer"
    ]  # fmt: skip
    body = lines[2:]
    assert [r[6] for r in body] == ["1", "1", "1"]
    assert [(r[0], r[2], r[3]) for r in body] == [
        ("3", "Delete", "delete"), ("2", "Append", "-"), ("1", "Overwrite", "-")
    ]  # fmt: skip
    assert all(ISO_UTC.match(r[1]) for r in body)
    expected = [v.timestamp for v in s3ddb.dataset(uri).versions()][::-1]
    assert [dt.datetime.fromisoformat(r[1].replace("Z", "+00:00")) for r in body] == [
        t.replace(microsecond=t.microsecond // 1000 * 1000) for t in expected
    ]

    code, out, _ = cli(capsys, "history", uri, "--limit", "1")
    assert code == 0 and [r[0] for r in table_lines(out)[2:]] == ["3"]

    s3ddb.dataset(uri).tags.create("first", 1)
    s3ddb.dataset(uri).tags.create("also-first", 1)
    code, out, _ = cli(capsys, "history", uri)
    lines = table_lines(out)
    assert lines[0] == [
        "version", "timestamp", "operation", "call", "added", "removed", "attempts",
        "committer", "tags",
    ]  # fmt: skip
    assert lines[-1][2:6] == ["Overwrite", "-", "6", "0"]
    assert lines[-1][-2:] == ["also-first,", "first"]
    assert lines[2][2:6] == ["Delete", "delete", "0", "2"]


def test_show_table(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    code, out, err = cli(capsys, "show", uri)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["id", "name", "score"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].split() == ["0", "row-0", "0.0"]
    assert lines[5].split() == ["3", "null", "1.5"]
    assert lines[-1] == "(10 rows)"
    # Aligned: numbers right, text left, every line as wide as the separator.
    assert lines[11].index("9") == lines[1].index(" ") - 1
    assert lines[2].index("row-0") == lines[0].index("name")

    code, out, _ = cli(capsys, "show", uri, "--limit", "3", "--columns", "name, id")
    assert code == 0
    assert table_lines(out) == [
        ["name", "id"],
        ["-----", "--"],
        ["row-0", "0"],
        ["row-1", "1"],
        ["row-2", "2"],
    ]
    assert out.splitlines()[-1] == "(first 3 of 10 rows; --limit 0 prints all)"

    code, out, _ = cli(capsys, "show", uri, "--filter", "score >= 3 AND name IS NOT NULL")
    assert [r[0] for r in table_lines(out)[2:]] == ["6", "7", "8", "9"]
    assert out.splitlines()[-1] == "(4 rows)"
    code, out, _ = cli(capsys, "show", uri, "--filter", "id > 0", "--limit", "2")
    assert out.splitlines()[-1] == "(first 2 matching rows; --limit 0 prints all)"

    s3ddb.write_dataset(_rows(100, 25), uri, mode="append")
    code, out, _ = cli(capsys, "show", uri, "--limit", "0")
    assert code == 0 and out.splitlines()[-1] == "(35 rows)"
    code, out, _ = cli(capsys, "show", uri)
    assert out.splitlines()[-1] == "(first 20 of 35 rows; --limit 0 prints all)"
    assert len(table_lines(out)) == 22


def test_show_versions_and_tags(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    s3ddb.dataset(uri).tags.create("before", 1)
    s3ddb.dataset(uri).delete("id < 5")
    for version in ("1", "before"):
        code, out, _ = cli(capsys, "show", uri, "--version", version, "--columns", "id")
        assert code == 0
        assert [r[0] for r in table_lines(out)[2:]] == [str(i) for i in range(6)]
    code, out, _ = cli(capsys, "show", uri, "--columns", "id")
    assert [r[0] for r in table_lines(out)[2:]] == ["5", "6", "7", "8", "9"]


def test_show_csv_and_json(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    code, out, err = cli(capsys, "show", uri, "--format", "csv", "--limit", "0")
    assert code == 0 and err == ""
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["id", "name", "score"]
    assert rows[1] == ["0", "row-0", "0.0"]
    assert rows[4] == ["3", "", "1.5"]
    assert len(rows) == 11

    code, out, err = cli(capsys, "show", uri, "--format", "json", "--filter", "id IN (2, 3)")
    assert code == 0 and err == ""
    assert [json.loads(line) for line in out.splitlines()] == [
        {"id": 2, "name": "row-2", "score": 1.0},
        {"id": 3, "name": None, "score": 1.5},
    ]

    # Machine formats keep stdout clean; a cut result is noted on stderr.
    code, out, err = cli(capsys, "show", uri, "--format", "json", "--limit", "2")
    assert code == 0 and len(out.splitlines()) == 2
    assert err == "s3ddb: printed the first 2 rows; --limit 0 prints all\n"
    code, out, err = cli(capsys, "show", uri, "--format", "csv", "--limit", "1")
    assert len(out.splitlines()) == 2 and "first 1 row;" in err


def test_show_value_types(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(tmp_path / "types")
    when = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.timezone.utc)
    table = pa.table(
        {
            "flag": [True, None],
            "day": pa.array([dt.date(2024, 1, 2), None], pa.date32()),
            "at": pa.array([when, None], pa.timestamp("ms", tz="UTC")),
            "price": pa.array([decimal.Decimal("12.30"), None], pa.decimal128(10, 2)),
            "blob": pa.array([b"\x00\xff", None], pa.binary()),
            "tags": pa.array([["a", "b"], None], pa.list_(pa.string())),
            "text": ["line1\nline2\t" + "x" * 100, None],
        }
    )
    s3ddb.write_dataset(table, path)

    code, out, _ = cli(capsys, "show", path, "--format", "json")
    assert code == 0
    first, second = (json.loads(line) for line in out.splitlines())
    assert first == {
        "flag": True,
        "day": "2024-01-02",
        "at": "2024-05-06T07:08:09.123000+00:00",
        "price": "12.30",
        "blob": "AP8=",
        "tags": ["a", "b"],
        "text": "line1\nline2\t" + "x" * 100,
    }
    assert set(second.values()) == {None}

    code, out, _ = cli(capsys, "show", path, "--format", "csv")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[1][:6] == [
        "true",
        "2024-01-02",
        "2024-05-06T07:08:09.123000+00:00",
        "12.30",
        "AP8=",
        '["a", "b"]',
    ]
    assert rows[1][6] == "line1\nline2\t" + "x" * 100  # csv quotes, never cuts
    assert rows[2] == [""] * 7

    code, out, _ = cli(capsys, "show", path, "--format", "table", "--columns", "flag,text")
    lines = out.splitlines()
    assert len(lines) == 5  # header, separator, 2 rows, footer: no raw newline
    shown = "line1\\nline2\\t" + "x" * 100  # control characters escaped, cut at 60
    assert lines[2].split(maxsplit=1) == ["true", shown[:59] + "…"]
    assert lines[3].split() == ["null", "null"]


# --- writing verbs --------------------------------------------------------------------


def test_delete(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    code, out, err = cli(capsys, "delete", uri, "id < 3 OR name IS NULL", "--retries", "0")
    assert (code, out, err) == (0, "deleted 4 rows; new version 3\n", "")
    ds = s3ddb.dataset(uri)
    assert ds.version == 3
    assert ds.to_table(columns=["id"]).column("id").to_pylist() == [4, 5, 6, 7, 8, 9]

    code, out, _ = cli(capsys, "delete", uri, "id = 4")
    assert (code, out) == (0, "deleted 1 row; new version 4\n")
    code, out, _ = cli(capsys, "delete", uri, "id > 100")
    assert (code, out) == (0, "no rows match 'id > 100'; nothing committed (version 4)\n")
    assert s3ddb.dataset(uri).version == 4


def test_update(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    argv = ["update", uri, "--set", "score=score * 10", "--set", "name = upper(name) || '!'"]
    code, out, err = cli(capsys, *argv, "--where", "id >= 8")
    assert (code, out, err) == (0, "updated 2 rows; new version 3\n", "")
    table = s3ddb.dataset(uri).to_table(filter="id >= 7")
    assert table.to_pylist() == [
        {"id": 7, "name": "row-7", "score": 3.5},
        {"id": 8, "name": "ROW-8!", "score": 40.0},
        {"id": 9, "name": "ROW-9!", "score": 45.0},
    ]

    # An expression may contain '='; no --where updates every row.
    code, out, _ = cli(capsys, "update", uri, "--set", "name=CASE WHEN id = 0 THEN 'zero' END")
    assert (code, out) == (0, "updated 10 rows; new version 4\n")
    names = s3ddb.dataset(uri).to_table(columns=["name"]).column("name").to_pylist()
    assert names == ["zero"] + [None] * 9

    for rewrite in ("rows", "columns"):
        code, out, _ = cli(
            capsys, "update", uri, "--set", "score=0", "--where", "id = 1", "--rewrite", rewrite
        )
        assert code == 0 and out.startswith("updated 1 row; new version ")
    assert s3ddb.dataset(uri).count_rows("score = 0") == 2  # ids 0 and 1

    code, out, _ = cli(capsys, "update", uri, "--set", "score=1", "--where", "id < 0")
    assert (code, out) == (0, "no rows match 'id < 0'; nothing committed (version 6)\n")


def test_compact(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    ds = s3ddb.dataset(uri)
    ds.delete("id IN (1, 2, 3)")
    before = ds.to_table()
    code, out, err = cli(capsys, "compact", uri)
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "compacted version 3; new version 5",  # 4 reserves the new fragment ids
        "  fragments removed: 2",
        "  fragments added:   1",
        "  files removed:     2",
        "  files added:       1",
    ]
    ds = s3ddb.dataset(uri)
    assert ds.to_table().equals(before)
    assert len(ds.get_fragments()) == 1 and ds.get_fragments()[0].deletion_file is None

    code, out, _ = cli(capsys, "compact", uri)
    assert code == 0
    assert out.splitlines()[0] == "nothing to compact; nothing committed (version 5)"
    assert "  fragments removed: 0" in out.splitlines()


def test_compact_options(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    s3ddb.write_dataset(_rows(10, 4), uri, mode="append")  # fragments of 6, 4 and 4 rows
    code, out, _ = cli(capsys, "compact", uri, "--target-rows", "8", "--retries", "1")
    assert code == 0 and "  fragments removed: 2" in out.splitlines()
    assert [f.num_rows for f in s3ddb.dataset(uri).get_fragments()] == [6, 8]

    # One big fragment with a few deleted rows: rewritten only to materialize deletions.
    s3ddb.write_dataset(_rows(0, 100), uri, mode="overwrite")
    s3ddb.dataset(uri).delete("id < 20")
    code, out, _ = cli(capsys, "compact", uri, "--no-materialize-deletions")
    assert code == 0 and out.startswith("nothing to compact")
    code, out, _ = cli(capsys, "compact", uri)
    assert code == 0 and out.startswith("compacted version")
    assert s3ddb.dataset(uri).get_fragments()[0].deletion_file is None


def test_restore(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    first = s3ddb.dataset(uri, version=1).to_table()
    code, out, err = cli(capsys, "restore", uri, "1")
    assert (code, out, err) == (0, "restored version 1 as new version 3\n", "")
    ds = s3ddb.dataset(uri)
    assert ds.version == 3 and ds.to_table().equals(first)
    assert ds.versions()[-1].operation == "Restore"

    s3ddb.dataset(uri).tags.create("two", 2)
    code, out, _ = cli(capsys, "restore", uri, "two")
    assert (code, out) == (0, "restored version 2 as new version 4\n")
    assert s3ddb.dataset(uri).count_rows() == 10


def test_tags(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    assert cli(capsys, "tags", uri, "list") == (0, "no tags\n", "")
    assert cli(capsys, "tags", uri, "create", "v1", "1") == (
        0,
        "created tag 'v1' -> version 1\n",
        "",
    )
    assert cli(capsys, "tags", uri, "create", "latest", "2")[0] == 0
    for argv in (["tags", uri, "list"], ["tags", uri]):  # list is the default action
        code, out, _ = cli(capsys, *argv)
        assert code == 0
        assert table_lines(out) == [
            ["tag", "version"],
            ["------", "-------"],
            ["v1", "1"],
            ["latest", "2"],
        ]
    assert s3ddb.dataset(uri).tags.list() == {"v1": 1, "latest": 2}

    assert cli(capsys, "tags", uri, "delete", "v1") == (
        0,
        "deleted tag 'v1' (it named version 1)\n",
        "",
    )
    assert s3ddb.dataset(uri).tags.list() == {"latest": 2}
    assert_error(cli(capsys, "tags", uri, "delete", "v1"), 2, "VersionNotFoundError", "'v1'")
    assert_error(cli(capsys, "tags", uri, "create", "latest", "1"), 2, "already exists")
    assert_error(cli(capsys, "tags", uri, "create", "x", "9"), 2, "VersionNotFoundError")
    assert_error(cli(capsys, "tags", uri, "create", "bad/name", "1"), 2, "invalid tag name")
    assert_error(cli(capsys, "tags", uri, "create", "x", "one"), 2, "expected an integer")
    assert_error(cli(capsys, "tags", uri, "rename"), 2, "invalid choice")


# --- AWS options ------------------------------------------------------------------------


def test_aws_options_become_storage_options(
    capsys: pytest.CaptureFixture[str], uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any] | None] = []
    real = s3ddb.dataset

    def spy(*args: Any, storage_options: dict[str, Any] | None = None, **kw: Any) -> Any:
        seen.append(storage_options)
        return real(*args, **kw)  # a local dataset needs no AWS settings

    monkeypatch.setattr(s3ddb, "dataset", spy)
    aws = ["--endpoint-url", "http://127.0.0.1:1", "--region", "eu-west-3", "--profile", "p"]
    expected = {"endpoint_url": "http://127.0.0.1:1", "region": "eu-west-3", "profile": "p"}
    assert cli(capsys, "info", uri, *aws)[0] == 0
    assert cli(capsys, "show", *aws, uri, "--limit", "1")[0] == 0
    assert cli(capsys, "tags", *aws, uri, "list")[0] == 0  # before the action...
    assert cli(capsys, "tags", uri, "list", *aws)[0] == 0  # ...or after it
    assert cli(capsys, "tags", uri, "list", "--region", "eu-west-3")[0] == 0
    assert cli(capsys, "history", uri)[0] == 0
    assert seen == [expected] * 4 + [{"region": "eu-west-3"}, None]


def test_aws_options_reach_s3_and_dynamodb(
    capsys: pytest.CaptureFixture[str], aws: Any, ddb_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    s3ddb.write_dataset(_rows(0, 5), ddb_uri, storage_options=aws.storage_options())
    options = ["--endpoint-url", aws.endpoint_url, "--region", aws.region]

    code, out, _ = cli(capsys, "info", ddb_uri, *options)
    assert code == 0
    assert fields(out)["commit mechanism"].startswith("external manifest store")
    assert fields(out)["rows"] == "5"
    assert cli(capsys, "delete", ddb_uri, "id = 0", *options)[1] == (
        "deleted 1 row; new version 2\n"
    )
    code, out, _ = cli(capsys, "history", ddb_uri, *options)
    assert [r[2] for r in table_lines(out)[2:]] == ["Delete", "Overwrite"]


# --- errors ---------------------------------------------------------------------------


def test_missing_dataset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing-here")
    for argv in (
        ["info", missing],
        ["history", missing],
        ["show", missing],
        ["delete", missing, "id = 1"],
        ["update", missing, "--set", "id=1"],
        ["compact", missing],
        ["restore", missing, "1"],
        ["tags", missing],
    ):
        err = assert_error(cli(capsys, *argv), 2, "s3ddb: error: DatasetNotFoundError: ")
        assert err.count("\n") == 1 and "nothing-here" in err, argv


def test_read_errors(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    err = assert_error(
        cli(capsys, "show", uri, "--filter", "nope = 1"),
        2,
        "s3ddb: error: ColumnNotFoundError: column 'nope' not found",
        "available columns: id, name, score",
    )
    assert err.count("\n") == 1
    assert_error(
        cli(capsys, "show", uri, "--filter", "id <"), 2, "s3ddb: error: InvalidExpressionError: "
    )
    assert_error(cli(capsys, "show", uri, "--columns", "id,nope"), 2, "ColumnNotFoundError")
    assert_error(
        cli(capsys, "show", uri, "--version", "7"), 2, "VersionNotFoundError", "latest is 2"
    )
    assert_error(cli(capsys, "info", uri, "--version", "no-tag"), 2, "no tag 'no-tag'")
    assert_error(cli(capsys, "restore", uri, "9"), 2, "VersionNotFoundError")
    assert_error(cli(capsys, "info", "ftp://host/x"), 2, "s3ddb: error: InvalidURIError: ")


def test_write_errors_change_nothing(capsys: pytest.CaptureFixture[str], uri: str) -> None:
    assert_error(cli(capsys, "delete", uri, "nope > 1"), 2, "ColumnNotFoundError")
    assert_error(cli(capsys, "delete", uri, "id >"), 2, "InvalidExpressionError")
    err = assert_error(
        cli(capsys, "update", uri, "--set", "id='abc'"),
        1,
        "s3ddb: error: SchemaMismatchError: ",
        "would change its type from int64 to string",
    )
    assert err.count("\n") == 1
    assert_error(cli(capsys, "update", uri, "--set", "nope=1"), 2, "ColumnNotFoundError")
    assert_error(
        cli(capsys, "update", uri, "--set", "id=NULL"), 1, "SchemaMismatchError", "not nullable"
    )
    assert_error(
        cli(capsys, "update", uri, "--set", "score=1", "--set", "score=2"),
        2,
        "InvalidInputError: --set score=... is given more than once",
    )
    ds = s3ddb.dataset(uri)
    assert ds.version == 2 and ds.to_table().equals(pa.concat_tables([_rows(0, 6), _rows(6, 4)]))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["update", "URI", "--set", "score"], "argument --set: expected COLUMN=EXPRESSION"),
        (["update", "URI", "--set", "=1"], "argument --set: expected COLUMN=EXPRESSION"),
        (["update", "URI", "--set", "score="], "argument --set: expected COLUMN=EXPRESSION"),
        (["update", "URI"], "the following arguments are required: --set"),
        (["update", "URI", "--set", "a=1", "--rewrite", "cols"], "invalid choice: 'cols'"),
        (["delete", "URI"], "the following arguments are required: PREDICATE"),
        (["delete", "URI", "id=1", "--retries", "-1"], "expected an integer >= 0"),
        (["show", "URI", "--limit", "ten"], "argument --limit: expected an integer >= 0"),
        (["show", "URI", "--format", "xml"], "invalid choice: 'xml'"),
        (["show", "URI", "--columns", "id,,name"], "expected column names separated by ','"),
        (["history", "URI", "--limit", "0"], "expected an integer >= 1"),
        (["compact", "URI", "--target-rows", "0"], "expected an integer >= 1"),
        (["restore", "URI"], "the following arguments are required: VERSION"),
        (["info"], "the following arguments are required: URI"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], uri: str, argv: list[str], message: str
) -> None:
    argv = [uri if a == "URI" else a for a in argv]
    err = assert_error(cli(capsys, *argv), 2, message)
    assert err.startswith(f"usage: s3ddb {argv[0]}")
    assert s3ddb.dataset(uri).version == 2


def test_help_describes_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--help")
    assert code == 0
    verbs = ("info", "history", "show", "delete", "update", "compact", "restore", "tags",
             "verify", "sync", "cleanup", "drop")  # fmt: skip
    for verb in verbs:
        assert re.search(rf"^\s+{verb}( \(\w+\))?\s+\w", out, re.MULTILINE), verb
        code, text, _ = cli(capsys, verb, "--help")
        assert code == 0 and f"usage: s3ddb {verb}" in text
        assert "--endpoint-url" in text and "AWS_PROFILE" in text and "--storage-option" in text
    assert "exit status: 0 success" in out
    code, text, _ = cli(capsys, "tags", "URI", "create", "--help")
    assert code == 0 and "Name a version." in text and "--region" in text


# --- the real command -----------------------------------------------------------------


def test_console_script_end_to_end(tmp_path: Path) -> None:
    path = str(tmp_path / "events")
    s3ddb.write_dataset(_rows(0, 6), path)
    s3ddb.write_dataset(_rows(6, 4), path, mode="append")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def s3ddb_cmd(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "s3ddb.cli.main", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    info = s3ddb_cmd("info", path)
    assert info.returncode == 0, info.stderr
    assert fields(info.stdout)["version"] == "2"
    assert fields(info.stdout)["rows"] == "10"
    assert "  id: int64 not null" in info.stdout

    deleted = s3ddb_cmd("delete", path, "id >= 7")
    assert (deleted.returncode, deleted.stdout) == (0, "deleted 3 rows; new version 3\n")
    assert s3ddb.dataset(path).count_rows() == 7

    history = s3ddb_cmd("history", path)
    assert history.returncode == 0, history.stderr
    assert [r[2] for r in table_lines(history.stdout)[2:]] == ["Delete", "Append", "Overwrite"]

    missing = s3ddb_cmd("info", str(tmp_path / "missing"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("s3ddb: error: DatasetNotFoundError: no dataset at ")
    assert missing.stderr.count("\n") == 1

    usage = s3ddb_cmd("update", path, "--set", "oops")
    assert usage.returncode == 2 and "expected COLUMN=EXPRESSION" in usage.stderr
