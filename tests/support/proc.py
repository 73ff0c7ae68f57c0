"""Running real child processes for concurrency and crash tests."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tests.support.python_children import PythonChild, start_python

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ChildResult:
    returncode: int
    stdout: str
    stderr: str


def start_worker(*args: str, env: dict[str, str] | None = None) -> PythonChild:
    """``python -m tests.support.workers *args`` with ``env`` added to this environment
    (forked from a pre-imported interpreter: tests/support/python_children.py)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    return start_python(["-m", "tests.support.workers", *args], env=full_env, cwd=ROOT)


def run_workers(
    commands: list[tuple[str, ...]], env: dict[str, str] | None = None, timeout: float = 300
) -> list[ChildResult]:
    """Start every command at once, wait for all, return their results."""
    procs = [start_worker(*cmd, env=env) for cmd in commands]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        results.append(ChildResult(p.returncode, out, err))
    return results


def append_and_die_after_claim(env: dict[str, str], uri: str, table: str) -> None:
    """A child appends ``table`` (a Python expression over ``pa``) to ``uri`` and dies
    right after DynamoDB decided its version (the failpoint's exit status 86): its row
    stays staged, its staged manifest the only copy of the version. ``env``: the
    endpoint's (``LocalAWS.env()``)."""
    import subprocess
    import sys

    code = (
        "import sys, pyarrow as pa, s3ddb; "
        f"s3ddb.write_dataset({table}, sys.argv[1], mode='append')"
    )
    child_env = {
        **os.environ,
        **env,
        "S3DDB_FAILPOINTS": "commit.after_external_put=exit",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, uri], env=child_env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 86, done.stderr[-2000:]
