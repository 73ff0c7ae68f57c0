"""The command line never writes a control character from stored data to the terminal.

Operation names, writers, table metadata, schema field names, tag names and data values
are written by whoever can write the bucket. Here they carry terminal escape sequences
(window title, clear screen, C1 CSI), a carriage return, bidi overrides and line
separators; every verb and output format must show them escaped (``\\x1b`` as four
characters), keep printable Unicode, and keep JSON valid and lossless.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.cli.output import json_text, safe_text
from s3ddb.format.layout import manifest_path
from s3ddb.format.manifest import Manifest
from s3ddb.format.schema import DatasetSchema
from tests.support.cli_runner import run_cli as cli

ROOT = Path(__file__).resolve().parents[2]

EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\r\u202e\u2028\x7f\x00"
OPERATION = f"Append{EVIL}"
WRITER = f"w\x1b[8m{EVIL}"
# Field names with C0 controls are refused (s3ddb.format.schema); C1 and bidi are not.
FIELD = "na\x9b31m\u202eme\u2028\x85"
TAG = "t\x1b[1mag\x9b2J"  # planted as a tag file; not a valid tag name
VALUE = f"v\x1b[2J{EVIL}\nsecond line\ttab"
# Kept as they are: printable text of every script, emoji joined by ZWJ.
PRINTABLE = "é 日本 ✓ 👩\u200d💻"

_BIDI_AND_SEPARATORS = set("\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e") | {
    chr(c) for c in range(0x2066, 0x206A)
}


def _unsafe(text: str) -> list[str]:
    """Characters in ``text`` that a terminal would obey: controls other than newline
    and tab, line/paragraph separators and bidi controls."""
    return sorted(
        {
            c
            for c in text
            if (unicodedata.category(c) == "Cc" and c not in "\n\t") or c in _BIDI_AND_SEPARATORS
        }
    )


def _clean(*outputs: str) -> None:
    for text in outputs:
        assert not _unsafe(text), f"raw control characters {_unsafe(text)!r} in {text!r}"


def _plant(path: Path) -> None:
    """Rewrite the latest manifest of the local dataset at ``path`` with hostile
    text in its operation, writer, metadata, config and one field name."""
    ds = s3ddb.dataset(str(path))
    where = manifest_path(ds.version, ds.manifest.naming_scheme)
    file = path / where
    manifest = Manifest.from_bytes(file.read_bytes(), str(file))
    arrow = manifest.schema.arrow
    renamed = arrow.set(arrow.get_field_index("name"), arrow.field("name").with_name(FIELD))
    ids = tuple(((FIELD, *p[1:]) if p[0] == "name" else p, i) for p, i in manifest.schema.ids)
    evil = manifest.evolve(
        operation=OPERATION,
        writer_library=WRITER,
        table_metadata={f"k{EVIL}": EVIL},
        config={"c": EVIL},
        schema=DatasetSchema(renamed, ids),
    )
    file.write_bytes(evil.to_bytes())


@pytest.fixture
def planted(tmp_path: Path) -> str:
    """A dataset of two versions whose latest manifest and a tag carry hostile text."""
    path = tmp_path / "ds"
    table = pa.table({"id": [1, 2], "name": ["a", PRINTABLE]})
    s3ddb.write_dataset(table, str(path))
    s3ddb.write_dataset(table, str(path), mode="append")
    _plant(path)
    tags = path / "_refs" / "tags"
    tags.mkdir(parents=True, exist_ok=True)
    (tags / f"{TAG}.json").write_text(json.dumps({"version": 2}))
    return str(path)


@pytest.fixture
def values(tmp_path: Path) -> str:
    """A dataset whose data values (and a column of metadata) carry hostile text."""
    path = str(tmp_path / "values")
    s3ddb.write_dataset(
        pa.table({"id": [1, 2, 3], "s": [VALUE, PRINTABLE, None], "m": [{"k": EVIL}, None, None]}),
        path,
    )
    return path


# --- the helpers ---------------------------------------------------------------------


def test_safe_text_escapes_controls_visibly_and_keeps_printable_unicode() -> None:
    assert safe_text("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert safe_text("\x9b\x7f\x00\r\n\t") == "\\x9b\\x7f\\x00\\r\\n\\t"
    assert safe_text("\u202eabc\u2028\u2066") == "\\u202eabc\\u2028\\u2066"
    assert safe_text(PRINTABLE) == PRINTABLE
    assert safe_text("a\nb\tc\rd", keep="\n\t") == "a\nb\tc\\rd"
    assert safe_text(42) == "42"


def test_json_text_is_valid_lossless_and_escapes_what_json_leaves_raw() -> None:
    data = {"k" + EVIL: [EVIL, PRINTABLE]}
    text = json_text(data)
    _clean(text)
    assert "\\u009b" in text and "\\u202e" in text and "\\u2028" in text
    assert PRINTABLE in text  # not \\u-escaped: ensure_ascii stays off
    assert json.loads(text) == data


# --- every verb, in-process ----------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("info",),
        ("info", "--version", "1"),
        ("history",),
        ("versions",),
        ("tags",),
        ("tags", "list"),
        ("verify",),
        ("doctor",),
        ("show",),
        ("show", "--format", "csv"),
        ("changes", "--from", "0"),
        ("changes", "--from", "0", "--json"),
    ],
    ids=lambda a: "-".join(a),
)
def test_text_output_of_planted_metadata_is_escaped(
    capsys: pytest.CaptureFixture[str], planted: str, argv: tuple[str, ...]
) -> None:
    verb, *rest = argv
    code, out, err = cli(capsys, verb, planted, *rest)
    _clean(out, err)
    if verb in ("info", "history", "versions") and "--version" not in rest:
        assert "\\x1b]0;pwned\\x07" in out, out  # shown, escaped, not dropped
        assert code == 0, err


def test_info_and_history_show_each_planted_field_escaped(
    capsys: pytest.CaptureFixture[str], planted: str
) -> None:
    _code, info, _err = cli(capsys, "info", planted)
    assert safe_text(OPERATION) in info
    assert safe_text(FIELD) in info
    _code, history, _err = cli(capsys, "history", planted)
    assert safe_text(OPERATION) in history
    assert safe_text(WRITER) in history


@pytest.mark.parametrize(
    "argv", [("info", "--json"), ("history", "--json"), ("tags", "list", "--json")]
)
def test_json_output_is_escaped_and_round_trips(
    capsys: pytest.CaptureFixture[str], planted: str, argv: tuple[str, ...]
) -> None:
    verb, *rest = argv
    code, out, err = cli(capsys, verb, planted, *rest)
    assert code == 0, err
    _clean(out, err)
    data = json.loads(out)
    if verb == "info":
        assert data["operation"] == OPERATION
        assert [f["name"] for f in data["schema"]] == ["id", FIELD]
    elif verb == "history":
        assert data[0]["operation"] == OPERATION
    else:  # a tag file whose name is not a tag name is not listed
        assert TAG not in data


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_show_escapes_data_values_in_every_format(
    capsys: pytest.CaptureFixture[str], values: str, fmt: str
) -> None:
    code, out, err = cli(capsys, "show", values, "--format", fmt)
    assert code == 0, err
    _clean(out, err)
    assert PRINTABLE in out
    if fmt == "json":
        rows = [json.loads(line) for line in out.splitlines()]
        assert rows[0]["s"] == VALUE and rows[0]["m"] == {"k": EVIL}
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        # CSV keeps the value's newline and tab (quoted); the rest is escaped.
        assert rows[1][1] == safe_text(VALUE, keep="\n\t")
        assert "second line\ttab" in rows[1][1]
    else:
        assert "v\\x1b[2J" in out
        assert len(out.splitlines()) == 2 + 3 + 1  # header, rule, 3 rows, count


def test_error_quoting_stored_text_is_escaped(
    capsys: pytest.CaptureFixture[str], planted: str
) -> None:
    """An error message that quotes stored text (the unknown column's message lists
    the schema's field names) is escaped too."""
    code, out, err = cli(capsys, "show", planted, "--filter", "nosuch = 1")
    assert code == 2
    # (one line: the separators U+2028, U+0085 count as spaces there)
    assert "ColumnNotFoundError" in err and "na\\x9b31m\\u202eme" in err, err
    _clean(out, err)


# --- the real entry point ------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv", [("history",), ("show", "--format", "csv")])
def test_child_process_writes_no_control_characters(
    planted: str, values: str, argv: tuple[str, ...]
) -> None:
    target = values if argv[0] == "show" else planted
    done = subprocess.run(
        [sys.executable, "-m", "s3ddb.cli.main", argv[0], target, *argv[1:]],
        capture_output=True,
        cwd=ROOT,
        timeout=100,
    )
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    assert done.returncode == 0, err
    _clean(out, err)
    assert "\\x1b" in out
