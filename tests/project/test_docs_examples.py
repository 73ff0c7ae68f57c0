"""Every example in README.md and docs/*.md runs verbatim against an emptied ``s3ddb local-aws``.

A reader copies an example, any one, into a shell where the ``export`` lines of
``s3ddb local-aws`` were pasted, or into a Python session started there. So does this
test: it starts the command once for all documents (a real child process, with its
defaults: no S3 conditional writes, the bucket ``my-bucket`` and the table
``s3ddb_manifests``), and runs each document's code blocks alone
(tests/support/docs_examples_runner.py): in a fresh interpreter, in an empty directory, against
the endpoint emptied back to that bucket and table (moto's whole state reset before each
block, so a block sees what a fresh command would show). So every block does its own
set-up and needs nothing an earlier block defined or wrote;

- ``python`` blocks run as a script;
- ``bash`` and ``sh`` blocks run in ``bash -e`` and must exit 0;
- ``console`` blocks are transcripts: each ``$ command`` runs, and its exit status and
  output must be what the block shows, up to ports, times, ids and column widths;
- ``text`` and ``mermaid`` blocks are not code.

Blocks also never share a dataset: a reader who runs the examples of several pages on
one endpoint must not meet a dataset of the same name with another schema. And shell
commands quote URIs with a query (``'s3+ddb://...?ddbTableName=...'``): zsh takes an
unquoted ``?`` for a wildcard.

A block that cannot run here says so where readers see it, in its fence:
```` ```python no-run: needs a SparkSession ````. Any other language, or a fence with no
language, fails the test.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.python_children import PythonChild, run_python, start_python

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNER = "tests.support.docs_examples_runner"

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_KINDS = {"python": "python", "bash": "shell", "sh": "shell", "console": "console"}
_NOT_CODE = {"text", "mermaid"}
_NO_RUN = "no-run:"
_EXIT_STATUS = re.compile(r"^# exit status (\d+)$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a document."""

    path: Path
    line: int
    language: str
    no_run_reason: str | None
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Command:
    """One ``$ command`` of a console block, with the output and status it shows."""

    command: str
    output: list[str]
    status: int | None


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        language, _, rest = match.group(1).strip().partition(" ")
        rest = rest.strip()
        reason = rest[len(_NO_RUN) :].strip() if rest.startswith(_NO_RUN) else None
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(path, line, language, reason, match.group(2)))
    return found


def commands_of(block: Block) -> list[Command]:
    """The commands of a console block, each with the output lines below it."""
    commands: list[Command] = []
    current: str | None = None
    output: list[str] = []
    status: int | None = None
    for line in block.code.splitlines():
        exit_status = _EXIT_STATUS.match(line)
        if line.startswith("$ "):
            if current is not None:
                commands.append(Command(current, output, status))
            current, output, status = line[2:], [], None
        elif exit_status:
            status = int(exit_status.group(1))
        elif current is not None and status is None:
            output.append(line)
    if current is not None:
        commands.append(Command(current, output, status))
    for command in commands:
        while command.output and not command.output[-1].strip():
            command.output.pop()
    return commands


# What differs between two runs of the same command: ports, times, ids, committers
# (host and process), and the column widths and rules that follow from them.
_VARYING = [
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?"), "TIME"),
    (re.compile(r"s3ddb/\S+ \S+:\d+:[0-9a-f]+"), "COMMITTER"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "HEX"),
    (re.compile(r"\b\d{12}\b"), "ACCOUNT"),
    (re.compile(r"-{3,}"), "---"),
    (re.compile(r"[ \t]+"), " "),
]


def normalized(lines: list[str]) -> list[str]:
    """``lines`` with what varies between runs replaced by placeholders."""
    result = []
    for line in lines:
        for pattern, replacement in _VARYING:
            line = pattern.sub(replacement, line)
        result.append(line.rstrip())
    return result


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_every_block_runs_or_says_why_not(path: Path) -> None:
    for block in blocks_of(path):
        if block.no_run_reason is not None:
            assert block.no_run_reason, f"{block.where}: 'no-run:' needs a reason"
            continue
        assert block.language in _KINDS or block.language in _NOT_CODE, (
            f"{block.where}: a ```{block.language} block cannot be run here: give it one of "
            f"the languages {sorted(_KINDS)} (run), {sorted(_NOT_CODE)} (not code), or "
            f"mark it '```{block.language or 'LANGUAGE'} no-run: REASON'"
        )
        if _KINDS.get(block.language) == "console":
            commands = commands_of(block)
            assert commands, f"{block.where}: a console block without a '$ ' command"
            for command in commands:
                assert command.status is not None, (
                    f"{block.where}: '$ {command.command}' shows no '# exit status N'"
                )


def _shell_lines(block: Block) -> list[str]:
    """The command lines of a shell or console block (no-run ones too: readers copy
    them); nothing for other blocks."""
    kind = _KINDS.get(block.language)
    if kind == "console":
        return [command.command for command in commands_of(block)]
    return block.code.splitlines() if kind == "shell" else []


def unquoted_at(line: str, position: int) -> bool:
    """Whether ``line[position]`` is outside shell quotes (bash and zsh alike)."""
    quote = None
    escaped = False
    for char in line[:position]:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
    return quote is None


_URI_WITH_QUERY = re.compile(r"s3\+ddb://[^\s'\"]*\?")


def test_shell_examples_quote_uris_with_a_query() -> None:
    """zsh (macOS's default shell) takes an unquoted ``?`` for a wildcard and refuses
    the command ("no matches found"): every URI with a query is quoted."""
    problems = []
    for path in DOCUMENTS:
        for block in blocks_of(path):
            for line in _shell_lines(block):
                for match in _URI_WITH_QUERY.finditer(line):
                    if unquoted_at(line, match.start()):
                        problems.append(f"{block.where}: {line}")
    assert not problems, "quote these URIs ('s3+ddb://...?...'):\n" + "\n".join(problems)


def test_the_quoting_check_finds_an_unquoted_uri() -> None:
    line = "s3ddb verify s3+ddb://b/p?ddbTableName=t && echo 's3+ddb://b/q?ddbTableName=t'"
    found = [m.start() for m in _URI_WITH_QUERY.finditer(line) if unquoted_at(line, m.start())]
    assert found == [line.index("s3+ddb://b/p")]
    assert not unquoted_at("python -c \"x = 's3+ddb://b/p?t'\"", 20)


#: A dataset on the bucket of ``s3ddb local-aws``, as the docs name them.
_DATASET = re.compile(r"s3(?:\+ddb)?://my-bucket/([\w.\-/]+)")


def test_no_two_examples_share_a_dataset() -> None:
    """Each block names its own datasets: a reader who runs the examples of several
    pages on one endpoint never meets one of them with another schema (issue 44: the
    docs wrote my-bucket/events with different columns). ``s3ddb doctor`` writes only
    scratch objects it deletes, so its checks of a location do not count."""
    users: dict[str, set[str]] = {}
    for path in DOCUMENTS:
        for block in _runnable(path):
            kind = _KINDS[block.language]
            lines = _shell_lines(block) if kind != "python" else block.code.splitlines()
            for line in lines:
                if "s3ddb doctor" in line:
                    continue
                for name in _DATASET.findall(line):
                    users.setdefault(name.rstrip("/"), set()).add(block.where)
    shared = {name: sorted(where) for name, where in users.items() if len(where) > 1}
    assert not shared, f"datasets used by several examples: {shared}"


@pytest.fixture(scope="module")
def local_aws_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One ``s3ddb local-aws`` for every document, and the environment its ``export``
    lines give (the command in a child forked from the pre-imported interpreter of
    tests/support/python_children.py). The runner resets the endpoint before each block,
    so one command serves as well as one per document, and starts (and imports moto's
    services) once."""
    proc = start_python(["-m", "s3ddb.cli.main", "local-aws"], cwd=Path.cwd())
    try:
        yield _exported_environment(proc, tmp_path_factory.mktemp("home"))
    finally:
        _stop(proc)


def _stop(proc: PythonChild) -> None:
    """SIGTERM ``proc`` and wait for it to exit (not for its pipes: anything it started
    may hold them); one that ignores SIGTERM for a minute is killed and fails the test."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
        pytest.fail("s3ddb local-aws did not stop within 60 s of SIGTERM")
    finally:
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _exported_environment(proc: PythonChild, home: Path) -> dict[str, str]:
    assert proc.stderr is not None and proc.stdout is not None
    deadline = time.monotonic() + 60
    while "Ctrl-C to stop" not in proc.stderr.readline():
        assert proc.poll() is None and time.monotonic() < deadline, "local-aws did not start"
    # The endpoint line and the exports were written (in one write) before that notice.
    ready, _, _ = select.select([proc.stdout], [], [], 10)
    assert ready, "local-aws printed no exports"
    announcement = os.read(proc.stdout.fileno(), 1 << 16).decode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)  # no ~/.aws of the machine
    env["PYTHONPATH"] = str(ROOT)
    for line in announcement.splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = value
    assert "AWS_ENDPOINT_URL" in env, announcement
    return env


def _runnable(path: Path) -> list[Block]:
    return [b for b in blocks_of(path) if b.no_run_reason is None and b.language in _KINDS]


@pytest.mark.slow  # one local-aws and child processes per document, a crash
@pytest.mark.parametrize("path", [p for p in DOCUMENTS if _runnable(p)], ids=lambda p: p.name)
def test_examples_run_verbatim(path: Path, local_aws_env: dict[str, str], tmp_path: Path) -> None:
    blocks = _runnable(path)
    payload = []
    for block in blocks:
        entry: dict[str, object] = {"line": block.line, "kind": _KINDS[block.language]}
        if entry["kind"] == "console":
            entry["commands"] = [c.command for c in commands_of(block)]
        else:
            entry["code"] = block.code
        payload.append(entry)
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "blocks.json").write_text(json.dumps(payload))
    results_path = tmp_path / "results.json"
    # The runner forks each block's interpreter from itself; it is forked in turn from
    # the pre-imported interpreter of tests/support/python_children.py.
    done = run_python(
        ["-m", RUNNER, str(tmp_path / "blocks.json"), str(results_path)],
        cwd=work,
        env=local_aws_env,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(results_path.read_text())
    problems = []
    for block, result in zip(blocks, results):
        if not result["ok"]:
            problems.append(f"{block.where}: {result['error']}")
            continue
        for command, run in zip(commands_of(block), result.get("runs", [])):
            shown = f"{block.where}: $ {command.command}"
            if run["status"] != command.status:
                problems.append(
                    f"{shown}: exit status {run['status']}, the doc shows {command.status}"
                    f"\n{run['output']}"
                )
            elif normalized(run["output"].splitlines()) != normalized(command.output):
                problems.append(
                    f"{shown}: output differs from the doc:\n"
                    + "\n".join(normalized(run["output"].splitlines()))
                )
    assert len(results) == len(blocks), "the runner did not report every block"
    assert not problems, "\n\n".join(problems)
