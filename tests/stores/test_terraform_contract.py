"""The Terraform module's HCL against the code's contract, without terraform: the
table's key schema and attribute names, and the two policies' actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from s3ddb.external_store import ddb_contract as c

hcl2 = pytest.importorskip("hcl2")

MODULE = Path(__file__).resolve().parents[2] / c.TERRAFORM_MODULE


def _text(value: Any) -> Any:
    """A literal as python-hcl2 returns it, without its quotes."""
    return value[1:-1] if isinstance(value, str) and value[:1] == value[-1:] == '"' else value


def _blocks(path: Path, kind: str) -> dict[str, dict[str, Any]]:
    with path.open() as f:
        parsed = hcl2.load(f)
    out: dict[str, dict[str, Any]] = {}
    for block in parsed.get(kind, []):
        for type_name, named in block.items():
            for name, body in named.items():
                out[f"{_text(type_name)}.{_text(name)}"] = body
    return out


def test_table_key_schema_matches_the_code() -> None:
    table = _blocks(MODULE / "main.tf", "resource")["aws_dynamodb_table.this"]
    keys = {_text(table["hash_key"]): "HASH", _text(table["range_key"]): "RANGE"}
    types = {_text(a["name"]): _text(a["type"]) for a in table["attribute"]}
    declared = tuple((name, types[name], keys[name]) for name in keys)
    assert declared == c.EXPECTED_KEYS
    assert set(types) == set(keys), "only key attributes are declared"
    assert "ttl" not in table, "rows are a dataset's history: no TTL"


def _actions(document: dict[str, Any], documents: dict[str, dict[str, Any]]) -> set[str]:
    """The actions of a policy document, with those of the documents it merges in
    (``source_policy_documents``)."""
    out: set[str] = set()
    for ref in document.get("source_policy_documents", []):
        name = ref.strip("${}").removeprefix("data.").removesuffix(".json")
        out |= _actions(documents[name], documents)
    for statement in document.get("statement", []):
        out.update(_text(a) for a in statement.get("actions", []))
    for dynamic in document.get("dynamic", []):
        for body in dynamic.values():
            for content in body.get("content", []):
                out.update(_text(a) for a in content.get("actions", []))
    return out


def test_read_only_policy_reads_and_never_writes() -> None:
    documents = _blocks(MODULE / "iam.tf", "data")
    writer = _actions(documents["aws_iam_policy_document.s3ddb"], documents)
    reader = _actions(documents["aws_iam_policy_document.s3ddb_read_only"], documents)
    assert reader == {
        "dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:Query",
        "s3:GetObject", "s3:ListBucket", "glue:GetTable",
    }  # fmt: skip
    assert reader < writer
    assert {"dynamodb:PutItem", "dynamodb:UpdateItem", "s3:PutObject"} <= writer - reader
    # The Glue table s3ddb keeps current (docs/catalogs.md): reading it, moving it, and
    # creating it at its registration; nothing else of Glue.
    assert {a for a in writer if a.startswith("glue:")} == {
        "glue:GetTable", "glue:UpdateTable", "glue:CreateTable",
    }  # fmt: skip
