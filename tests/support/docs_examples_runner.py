"""Run one document's examples, each block alone, as a reader who copies just that
block would: ``python THIS BLOCKS RESULTS``.

BLOCKS is a JSON list of ``{"line", "kind", "code"}`` (kind ``python`` or ``shell``) or
``{"line", "kind": "console", "commands"}``; RESULTS gets a JSON list with one entry per
block. Every block runs alone:

- in a fresh interpreter: a child forked from this process, which has imported pyarrow,
  numpy, boto3 and s3ddb and nothing else (so the child skips the import time) and has
  run nothing of the package; the child runs the block in a new ``__main__``
  namespace and then what an interpreter runs at exit (threading's exit hooks, where
  s3ddb waits for its background finalizer, and atexit's handlers);
- in a new empty working directory;
- against an empty endpoint: before each block, the ``s3ddb local-aws`` the
  environment points at is reset (moto's reset API) and given back the bucket and table
  it starts with, so a block finds only what it creates itself.

Shell blocks run in ``bash -e``; a console block is a list of ``$ command`` lines, each
run with its output and exit status recorded (one console block is one session: its
commands share the directory and the endpoint's state). A command that is only
``s3ddb ARGS`` or ``python -c CODE`` (maybe after ``NAME=value`` assignments), with
nothing else for a shell to do, runs in a child forked like a Python block's, with the
arguments bash would pass, as the installed ``s3ddb`` script runs ``main``; any other
command runs in ``bash``. A failing block does not stop the others.

Run by tests/project/test_docs_examples.py in a child process whose environment points at a
fresh ``s3ddb local-aws``.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

# What every child gets already imported: the package and what its import brings.
# Nothing that starts threads at import (polars) or connects (duckdb) is imported here.
import boto3
import numpy  # noqa: F401
import pyarrow  # noqa: F401

import s3ddb  # noqa: F401
from s3ddb.cli.local_aws_cmd import DEFAULT_BUCKET, DEFAULT_TABLE

_BLOCK_TIMEOUT = 600  # seconds


def _fresh_endpoint(clients: dict[str, Any]) -> None:
    """Empty the local endpoint and create the bucket and table ``s3ddb local-aws``
    starts with."""
    endpoint = os.environ["AWS_ENDPOINT_URL"].rstrip("/")
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert answer.status == 200, f"moto reset answered {answer.status}"
    clients["s3"].create_bucket(Bucket=DEFAULT_BUCKET)
    clients["dynamodb"].create_table(
        TableName=DEFAULT_TABLE,
        KeySchema=[
            {"AttributeName": "base_uri", "KeyType": "HASH"},
            {"AttributeName": "version", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "base_uri", "AttributeType": "S"},
            {"AttributeName": "version", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def _run_exit_hooks() -> None:
    """What the interpreter runs at exit, in its order: threading's exit hooks (s3ddb
    drains its background finalizer there) and the joins of non-daemon threads, then
    atexit's handlers. Tearing down the modules (a second or two with pyarrow and boto3
    loaded) has no effect outside the process: the children's os._exit skips it."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()


def _fork(child: Callable[[], None]) -> int | None:
    """Run ``child`` (which never returns) in a child forked from this process: its wait
    status, or None if it still ran after the block timeout (it is killed then)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child()
    deadline = time.monotonic() + _BLOCK_TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


def _python_child(code: str, report: str) -> None:
    """In the forked child: run ``code`` as ``__main__``, leave as the interpreter
    leaves, and write the outcome to ``report``. Never returns."""
    outcome: dict[str, Any] = {"ok": True}
    try:
        exec(compile(code, "<docs example>", "exec"), {"__name__": "__main__"})
        _run_exit_hooks()
    except BaseException:  # the report names whatever the example raised
        outcome = {"ok": False, "error": traceback.format_exc(limit=-3)}
    with open(report, "w", encoding="utf-8") as f:
        json.dump(outcome, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run_python(code: str, work: Path) -> dict[str, Any]:
    report = work.parent / f"{work.name}.result.json"

    def child() -> None:
        os.chdir(work)
        _python_child(code, str(report))

    status = _fork(child)
    if status is None:
        return {"ok": False, "error": f"still running after {_BLOCK_TIMEOUT} s: killed"}
    if not report.exists():
        return {"ok": False, "error": f"the interpreter ended without a report ({status=})"}
    result: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    if result["ok"] and os.waitstatus_to_exitcode(status) != 0:
        result = {"ok": False, "error": f"exit status {os.waitstatus_to_exitcode(status)}"}
    return result


def _run_shell(code: str, work: Path) -> dict[str, Any]:
    done = subprocess.run(
        ["bash", "-e", "-c", code], cwd=work, capture_output=True, text=True,
        timeout=_BLOCK_TIMEOUT,
    )  # fmt: skip
    return {
        "ok": done.returncode == 0,
        "error": f"exit status {done.returncode}\n{done.stdout}{done.stderr}",
    }


def _run_console(commands: list[str], work: Path) -> dict[str, Any]:
    runs = []
    for number, command in enumerate(commands):
        forkable = _forkable(command)
        if forkable is not None:
            runs.append(_run_forked_command(*forkable, work, work.parent / f"{work.name}.{number}"))
            continue
        done = subprocess.run(
            ["bash", "-c", command], cwd=work, capture_output=True, text=True,
            timeout=_BLOCK_TIMEOUT,
        )  # fmt: skip
        runs.append({"output": done.stdout + done.stderr, "status": done.returncode})
    return {"ok": True, "runs": runs}


#: Characters bash acts on outside quotes, and inside double quotes.
_SHELL_OUTSIDE_QUOTES = set("|&;<>()$`\\*?[]{}~!#\n")
_SHELL_IN_DOUBLE_QUOTES = set("$`\\!")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _forkable(command: str) -> tuple[dict[str, str], list[str]] | None:
    """(environment assignments, argv) of a command a forked child of this process
    runs as bash would: ``s3ddb ARGS`` or ``python -c CODE`` after optional
    ``NAME=value`` words, quoted with ' and " only, and nothing else bash expands,
    redirects or chains; None for any other command."""
    quote = ""
    for char in command:
        if quote == "'":
            quote = "" if char == "'" else quote
        elif quote == '"':
            if char in _SHELL_IN_DOUBLE_QUOTES:
                return None
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char in _SHELL_OUTSIDE_QUOTES:
            return None
    if quote:
        return None
    words = shlex.split(command)
    env: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if words[:1] == ["s3ddb"] or (len(words) == 3 and words[:2] == ["python", "-c"]):
        return env, words
    return None


def _command_child(env: dict[str, str], argv: list[str], work: Path, output: Path) -> None:
    """In the forked child: run ``argv`` (``s3ddb ...`` or ``python -c CODE``) with
    ``env`` added, in ``work``, its stdout and stderr to ``output``.out/.err; leave as
    the interpreter leaves, with the exit status it would have. Never returns."""
    os.chdir(work)
    os.environ.update(env)
    for fd, suffix in ((1, ".out"), (2, ".err")):
        target = os.open(f"{output}{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    status = 0
    try:
        if argv[0] == "s3ddb":
            from s3ddb.cli.main import main

            sys.argv = argv
            status = main(argv[1:])
        else:
            sys.argv = ["-c"]
            exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})
        _run_exit_hooks()
    except SystemExit as exc:  # as the interpreter reports it
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _run_forked_command(
    env: dict[str, str], argv: list[str], work: Path, output: Path
) -> dict[str, Any]:
    status = _fork(lambda: _command_child(env, argv, work, output))
    text = [Path(f"{output}{suffix}").read_text(encoding="utf-8", errors="replace")
            for suffix in (".out", ".err")]  # fmt: skip
    exit_status = -signal.SIGKILL if status is None else os.waitstatus_to_exitcode(status)
    return {"output": "".join(text), "status": exit_status}


def main(blocks_path: str, results_path: str) -> int:
    with open(blocks_path, encoding="utf-8") as f:
        blocks = json.load(f)
    clients = {service: boto3.client(service) for service in ("s3", "dynamodb")}
    root = Path(tempfile.mkdtemp(prefix="docs-blocks-", dir=Path.cwd()))
    results: list[dict[str, Any]] = []
    for block in blocks:
        _fresh_endpoint(clients)
        work = root / f"block-{block['line']}"
        work.mkdir()
        if block["kind"] == "python":
            result = _run_python(block["code"], work)
        elif block["kind"] == "shell":
            result = _run_shell(block["code"], work)
        else:
            result = _run_console(block["commands"], work)
        results.append({"line": block["line"], **result})
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
