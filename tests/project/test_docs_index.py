"""The documentation's indexes are complete: README's "More" list links every page of
docs/, and docs/architecture.md's layer table names every public module of the
folders it describes module by module (``groups/``, ``spark_ext/``), in that folder's
row."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_readme_more_links_every_docs_page() -> None:
    more = _section((ROOT / "README.md").read_text(encoding="utf-8"), "More")
    linked = set(re.findall(r"`docs/([\w.-]+\.md)`", more))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), "pages missing from README's More list"
    assert linked - pages == set(), "README's More list links pages that do not exist"


@pytest.mark.parametrize("folder", ["groups", "spark_ext"])
def test_architecture_names_every_module_of_a_folder_in_its_row(folder: str) -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("|") and f"`{folder}/`" in line]
    rows += [line for line in text.splitlines() if line.startswith("|") and f"(`{folder}`:" in line]
    assert rows, f"no layer row names {folder}/"
    named = set(re.findall(r"`(\w+)`", " ".join(rows)))
    modules = {p.stem for p in (ROOT / "s3ddb" / folder).glob("*.py") if not p.stem.startswith("_")}
    assert modules - named == set(), f"modules of {folder}/ missing from architecture.md"
