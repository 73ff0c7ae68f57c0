"""The checked-in generated protobuf code matches protos/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "s3ddb" / "format" / "_proto"


def _load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_not_stale(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    gen = _load_generator()
    written = gen.generate(tmp_path)
    assert {p.name for p in written} >= {"manifest_pb2.py", "transaction_pb2.py"}
    stale = [p.name for p in written if p.read_bytes() != (GENERATED / p.name).read_bytes()]
    assert not stale, (
        f"regenerate with `make protos` (python {sys.executable} scripts/gen_protos.py): {stale}"
    )


def test_transaction_has_every_lance_operation() -> None:
    from s3ddb.format._proto import transaction_pb2 as tpb

    oneof = tpb.Transaction.DESCRIPTOR.oneofs_by_name["operation"]
    names = {f.message_type.name for f in oneof.fields}
    assert names == {
        "Append",
        "Delete",
        "Overwrite",
        "CreateIndex",
        "Rewrite",
        "Merge",
        "Project",
        "Restore",
        "ReserveFragments",
        "Clone",
        "Update",
        "UpdateConfig",
        "DataReplacement",
        "UpdateMemWalState",
        "UpdateBases",
    }


def test_manifest_fields_cover_the_format() -> None:
    from s3ddb.format._proto import manifest_pb2 as pb

    fields = set(pb.Manifest.DESCRIPTOR.fields_by_name)
    assert {
        "version",
        "schema",
        "fragments",
        "max_fragment_id",
        "config",
        "table_metadata",
        "timestamp_nanos",
        "writer_version",
        "naming_scheme",
        "transaction_file",
        "base_paths",
        "indices",
    } <= fields
    assert {"id", "files", "physical_rows", "deletion_file"} <= set(
        pb.Fragment.DESCRIPTOR.fields_by_name
    )
    assert {"path", "fields"} <= set(pb.DataFile.DESCRIPTOR.fields_by_name)
