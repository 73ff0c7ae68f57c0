"""docs/operations.md's table "What it checks, by problem kind" is the table of problem
kinds (``s3ddb.maintenance.problems.PROBLEM_KINDS``): the same rows, in the same
order, cell for cell; every problem verify reports is of a kind in it, and every kind
in it is reported somewhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from s3ddb.maintenance import staging
from s3ddb.maintenance.problems import PROBLEM_KINDS, Problem

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"
HEADER = "| kind | what it means | fix |"


def _documented() -> list[tuple[str, str, str]]:
    """The table's rows as (kind, what it means, fix), in order."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER)
    assert set(lines[start + 1]) <= set("|-"), "the header is not followed by |---|"
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == 3, f"not three cells: {line}"
        kind, meaning, fix = cells
        assert kind.startswith("`") and kind.endswith("`"), f"kind not in backticks: {line}"
        rows.append((kind.strip("`"), meaning, fix))
    return rows


def test_the_documented_table_is_the_table_of_problem_kinds() -> None:
    documented = _documented()
    listed = [(kind, k.meaning, k.fix) for kind, k in PROBLEM_KINDS.items()]
    documented_kinds = [kind for kind, _, _ in documented]
    assert documented_kinds == list(PROBLEM_KINDS), "kinds differ (or their order)"
    differing = {row[0]: (row, doc) for row, doc in zip(listed, documented) if row != doc}
    assert not differing, f"docs/operations.md says otherwise: {differing}"


def test_a_problem_of_a_kind_not_in_the_table_is_refused() -> None:
    Problem("staged_row", "_versions/x", "meaning", "fix", 3)
    with pytest.raises(ValueError, match="not in PROBLEM_KINDS"):
        Problem("made_up_kind", "path", "meaning", "fix")


def _reported_kinds() -> set[str]:
    """The kinds the checks of s3ddb/maintenance/ report: the first argument of each
    call of ``problem(...)`` (the :data:`ReportProblem` they are given)."""
    kinds = set()
    for path in (ROOT / "s3ddb" / "maintenance").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id != "problem" or not node.args:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                kinds.add(first.value)
            elif isinstance(first, ast.Name) and first.id == "LEFTOVER_KIND":
                kinds.add(staging.LEFTOVER_KIND)
            else:
                raise AssertionError(f"{path.name}:{node.lineno}: a kind that is no literal")
    return kinds


def test_every_kind_in_the_table_is_reported_and_no_other() -> None:
    reported = _reported_kinds()
    assert reported - set(PROBLEM_KINDS) == set(), "reported, missing from the table"
    assert set(PROBLEM_KINDS) - reported == set(), "in the table, never reported"
