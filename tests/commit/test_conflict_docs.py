"""docs/conflicts.md states the conflict matrix; it must match the table of rules
(``s3ddb.commit.conflicts.CONFLICT_MATRIX``)."""

from __future__ import annotations

from pathlib import Path

from s3ddb.commit import conflicts
from s3ddb.operations import OPERATION_KINDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "conflicts.md"
_WORD = {"compatible": "rebase", "retryable": "retry", "incompatible": "refuse"}


def _documented() -> dict[tuple[str, str], str]:
    text = DOC.read_text()
    table = text.split("<!-- matrix:begin -->")[1].split("<!-- matrix:end -->")[0]
    lines = [line for line in table.strip().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    out = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        mine = cells[0].strip("*")
        for theirs, cell in zip(header, cells[1:]):
            out[(mine, theirs)] = cell
    return out


def _registered(mine: str, theirs: str) -> str:
    rule = conflicts.CONFLICT_MATRIX[mine][theirs]
    if isinstance(rule, conflicts.Fixed):
        return _WORD[rule.outcome.value]
    return "data"


def test_matrix_table_lists_every_kind_as_theirs_in_every_row() -> None:
    for mine, row in conflicts.CONFLICT_MATRIX.items():
        assert list(row) == list(OPERATION_KINDS), mine


def test_matrix_lists_every_kind_as_theirs() -> None:
    documented = _documented()
    assert {t for _m, t in documented} == set(OPERATION_KINDS)


def test_every_documented_cell_matches_the_registered_rule() -> None:
    documented = _documented()
    mismatches = {
        cell: (said, _registered(*cell))
        for cell, said in documented.items()
        if said != _registered(*cell)
    }
    assert not mismatches, f"docs/conflicts.md disagrees with the rules: {mismatches}"


def test_every_committable_kind_has_a_row() -> None:
    from s3ddb.commit.build import BUILDERS

    built = {op.kind for op in BUILDERS}
    assert {m for m, _t in _documented()} == built
    assert set(conflicts.CONFLICT_MATRIX) == built


def _differences() -> list[dict[str, str]]:
    text = DOC.read_text()
    table = text.split("<!-- differences:begin -->")[1].split("<!-- differences:end -->")[0]
    lines = [line for line in table.strip().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def test_every_stated_difference_from_lance_is_what_s3ddb_registers() -> None:
    rows = _differences()
    assert len(rows) >= 30
    for row in rows:
        mine, theirs = row["mine"], row["theirs"]
        assert _registered(mine, theirs) == row["s3ddb"], row
        assert row["Lance"] in ("rebase", "retry", "refuse"), row
        assert row["why s3ddb differs"], row
