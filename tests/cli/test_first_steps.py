"""What a new user meets before any code runs: the README's install paths, the
package metadata ``pip show`` prints, and the help of the entry points."""

from __future__ import annotations

import pydoc
import re
from pathlib import Path

import pytest

import s3ddb
from s3ddb.io import AwsConfig

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, object]:
    tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11 reads pyproject.toml")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]  # type: ignore[no-any-return]


def _install_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Install\n(.*?)^## ", readme, re.S | re.M)
    assert match, "README.md has an '## Install' section"
    return match.group(1)


def test_readme_installs_the_package_and_every_extra() -> None:
    section = _install_section()
    assert re.search(r"^pip install \.\s", section, re.M), section
    extras = _pyproject()["optional-dependencies"]
    assert isinstance(extras, dict)
    for extra in extras:
        assert f'pip install ".[{extra}]"' in section, f"README.md does not install [{extra}]"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for command in ("make demo", "make test"):
        assert re.search(rf"^{command}\b", readme, re.M), command


def test_package_metadata_names_its_authors_and_what_it_is() -> None:
    project = _pyproject()
    authors = project.get("authors")
    assert isinstance(authors, list) and authors and all(a.get("name") for a in authors)
    assert project.get("keywords") and project.get("classifiers")
    assert project.get("license") and project.get("requires-python")


def _help(obj: object) -> str:
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


@pytest.mark.parametrize("entry", [s3ddb.dataset, s3ddb.write_dataset])
def test_entry_points_explain_uri_forms_and_storage_options(entry: object) -> None:
    text = _help(entry)
    for form in ("local path", "file://", "memory://", "s3://", "s3+ddb://", "ddbTableName"):
        assert form in text, f"help({entry}) does not mention {form}"
    assert "storage_options" in text
    # Every storage option the help names is one s3ddb accepts.
    start = text.index("storage_options``")
    paragraph = re.split(r"\n\s*\n", text[start:])[0]
    named = set(re.findall(r"``([a-z][a-z0-9_]*)``", paragraph))
    options = named - {"storage_options", "uri"}
    assert {"endpoint_url", "region", "s3_endpoint", "dynamodb_region"} <= options
    AwsConfig.from_storage_options(dict.fromkeys(options, "true"))


def test_write_dataset_help_lists_the_data_it_accepts() -> None:
    text = _help(s3ddb.write_dataset)
    for kind in ("pyarrow Table", "RecordBatchReader", "pandas DataFrame", "dict of columns",
                 "list of row dicts", "__arrow_c_stream__"):  # fmt: skip
        assert kind in text, kind


def test_package_help_points_to_the_entry_points() -> None:
    text = s3ddb.__doc__ or ""
    assert ":func:`dataset`" in text and ":func:`write_dataset`" in text
    assert "S3DDBError" in text
