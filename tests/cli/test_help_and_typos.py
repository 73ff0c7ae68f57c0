"""What the command says to a user meeting it: every verb's help (whole sentences, no
reStructuredText markup), and a mistyped verb, flag or storage option answered by the
verb's own usage and the name likely meant."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.cli.main import build_parser
from tests.support.cli_runner import run_cli as run

# Words a sentence does not end with: a summary ending so was cut.
_DANGLING = {"a", "an", "and", "by", "for", "from", "in", "of", "on", "or", "the", "to", "with"}
# reStructuredText a reader of --help should never see: ``literals``, `refs`, :roles:.
_MARKUP = re.compile(r"`|:(func|class|meth|mod|data|attr|exc|ref):")


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the command (each verb once, aliases skipped), ``tags``'s
    actions too, with the words that reach it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from _parsers(sub, (*path, name))


def _summaries(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(verb, its one-line help in the parent's verb list)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for listed in action._get_subactions():
                yield listed.dest, listed.help or ""


def test_every_verbs_help_is_plain_text() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 20  # every verb, the hidden ones and tags's actions
    for path, parser in parsers:
        text = parser.format_help()
        assert not _MARKUP.search(text), (path, [ln for ln in text.splitlines() if "`" in ln])


def test_every_verbs_summary_is_a_whole_sentence() -> None:
    for path, parser in _parsers(build_parser()):
        for verb, summary in _summaries(parser):
            where = (*path, verb)
            assert summary and summary.count("(") == summary.count(")"), (where, summary)
            last = summary.rstrip().split()[-1]
            assert last.lower() not in _DANGLING and last[-1] not in ",:;", (where, summary)
            sub = next(
                a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            ).choices[verb]
            described = sub.description or ""
            if described.lower().startswith(summary.lower()):
                # The summary is the description's first sentence, not a cut of it.
                assert described[len(summary) : len(summary) + 1] in (".", ""), (where, summary)


def test_migrate_commits_summary_and_history_help(capsys: Any) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    [line] = [ln for ln in out.splitlines() if "migrate-commits" in ln]
    assert line.split("migrate-commits", 1)[1].strip().endswith("names")
    code, out, _ = run(capsys, "history", "--help")
    assert code == 0 and "``" not in out and "(versions is the same verb)" in out


def test_a_mistyped_flag_gets_the_verbs_usage_and_the_flag_meant(
    capsys: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1, 2]}), uri)
    code, out, err = run(capsys, "show", uri, "--limt", "1")
    assert code == 2 and not out
    assert err.startswith("usage: s3ddb show "), err
    assert "s3ddb show: error: unrecognized arguments: --limt 1 (did you mean --limit?)" in err
    # An action of tags: its own usage too.
    code, _, err = run(capsys, "tags", uri, "list", "--jsn")
    assert code == 2 and err.startswith("usage: s3ddb tags URI list ")
    assert "(did you mean --json?)" in err
    # Two at once: each with the flag it was likely meant to be.
    code, _, err = run(capsys, "show", uri, "--limt=1", "--colums", "id")
    assert code == 2 and "did you mean --limit for --limt, --columns for --colums?" in err
    # Nothing close: no guess.
    code, _, err = run(capsys, "show", uri, "--zzzzzz")
    assert code == 2 and "unrecognized arguments: --zzzzzz\n" in err
    # Well typed, the verb runs.
    code, out, _ = run(capsys, "show", uri, "--limit", "1")
    assert code == 0 and "first 1 of 2 rows" in out


def test_a_mistyped_verb_gets_the_verb_meant(capsys: Any) -> None:
    code, _, err = run(capsys, "histroy", "x")
    assert code == 2 and "invalid choice: 'histroy' (did you mean history?" in err


@pytest.mark.parametrize(
    ("given", "meant"),
    [("endpont_url", "endpoint_url"), ("regoin", "region"), ("s3_endpiont", "s3_endpoint")],
)
def test_a_mistyped_storage_option_gets_the_option_meant(
    capsys: Any, tmp_path: Path, given: str, meant: str
) -> None:
    code, _, err = run(capsys, "info", str(tmp_path), f"--storage-option={given}=x")
    assert code == 2
    assert f"unknown storage option {given!r} (did you mean {meant!r}?)" in " ".join(err.split())
    with pytest.raises(s3ddb.errors.InvalidInputError, match=f"did you mean {meant!r}"):
        s3ddb.dataset(str(tmp_path), storage_options={given: "x"})
