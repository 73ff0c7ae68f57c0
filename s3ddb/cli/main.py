"""The ``s3ddb`` command line.

Each verb lives in its own module under :mod:`s3ddb.cli` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable taking
the parsed arguments and returning the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from s3ddb._version import __version__
from s3ddb.errors import S3DDBError

# Modules under s3ddb.cli that register verbs, in help order.
_VERB_MODULES = ("commands", "create_table", "local_aws", "demo_cmd")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s3ddb",
        description="ACID, multi-version datasets on object storage "
        "(local paths, memory://, s3://, s3+ddb://bucket/prefix?ddbTableName=T).",
    )
    parser.add_argument("--version", action="version", version=f"s3ddb {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    for name in _VERB_MODULES:
        try:
            module = importlib.import_module(f"s3ddb.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"s3ddb.cli.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except S3DDBError as exc:
        print(f"s3ddb: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of our output went away (``s3ddb show ... | head``): not an error.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
