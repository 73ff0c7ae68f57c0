"""Run one document's examples in order, as a reader would: ``python THIS BLOCKS RESULTS``.

BLOCKS is a JSON list of ``{"line", "kind", "code"}`` (kind ``python``, ``shell`` or
``console``); RESULTS gets a JSON list with one entry per block. Python blocks share one
namespace (a document's later blocks use what its earlier ones defined); shell blocks
run in ``bash -e``; a console block is a list of ``$ command`` lines, each run in
``bash`` with its output and exit status recorded. The first failing python or shell
block ends the run: later blocks build on it.

Run by tests/project/test_docs_examples.py in a child process whose environment points at a
fresh ``s3ddb local-aws``, in an empty working directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from typing import Any


def _run_python(code: str, namespace: dict[str, Any]) -> dict[str, Any]:
    try:
        exec(compile(code, "<docs example>", "exec"), namespace)
    except BaseException:  # the report names whatever the example raised
        return {"ok": False, "error": traceback.format_exc(limit=-3)}
    return {"ok": True}


def _run_shell(code: str) -> dict[str, Any]:
    done = subprocess.run(["bash", "-e", "-c", code], capture_output=True, text=True, timeout=600)
    return {
        "ok": done.returncode == 0,
        "error": f"exit status {done.returncode}\n{done.stdout}{done.stderr}",
    }


def _run_console(commands: list[str]) -> dict[str, Any]:
    runs = []
    for command in commands:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600)
        runs.append({"output": done.stdout + done.stderr, "status": done.returncode})
    return {"ok": True, "runs": runs}


def main(blocks_path: str, results_path: str) -> int:
    with open(blocks_path, encoding="utf-8") as f:
        blocks = json.load(f)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    results: list[dict[str, Any]] = []
    for block in blocks:
        if block["kind"] == "python":
            result = _run_python(block["code"], namespace)
        elif block["kind"] == "shell":
            result = _run_shell(block["code"])
        else:
            result = _run_console(block["commands"])
        results.append({"line": block["line"], **result})
        if not result["ok"]:
            break
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
