"""Regenerate s3ddb/format/_proto from protos/ (the source of truth).

Usage: python scripts/gen_protos.py [--out DIR]

Uses grpcio-tools' bundled protoc and mypy-protobuf for the .pyi stubs (both pinned in
the ``dev`` extra so that output is reproducible; tests/format/test_protos.py fails when the
checked-in code is stale).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
DEFAULT_OUT = ROOT / "s3ddb" / "format" / "_proto"
PROTOS = ("manifest.proto", "transaction.proto")
PACKAGE = "s3ddb.format._proto"


def generate(out_dir: Path) -> list[Path]:
    """Generate *_pb2.py and *_pb2.pyi for every proto into ``out_dir``."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # The plugin is a console script next to this interpreter, which need not be on PATH.
        plugin = Path(sys.executable).parent / "protoc-gen-mypy"
        args = [
            "protoc",
            f"--plugin=protoc-gen-mypy={plugin}",
            f"-I{PROTO_DIR}",
            f"--python_out={tmp}",
            f"--mypy_out={tmp}",
            *(str(PROTO_DIR / p) for p in PROTOS),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        written = []
        for src in sorted(Path(tmp).iterdir()):
            text = src.read_text()
            # protoc emits flat imports ("import manifest_pb2"); make them package imports.
            text = re.sub(
                r"^import (\w+_pb2) as (\w+)$",
                rf"from {PACKAGE} import \1 as \2",
                text,
                flags=re.M,
            )
            text = re.sub(r"^import (\w+_pb2)$", rf"from {PACKAGE} import \1", text, flags=re.M)
            dst = out_dir / src.name
            dst.write_text(text)
            written.append(dst)
    init = out_dir / "__init__.py"
    init.write_text('"""Generated protobuf code. Do not edit: run scripts/gen_protos.py."""\n')
    written.append(init)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
