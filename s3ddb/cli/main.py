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
from typing import Any

from s3ddb.cli.output import guarded_output, safe_text
from s3ddb.errors import (
    CredentialsError,
    DatasetNotFoundError,
    EndpointUnreachableError,
    ExternalStoreTableError,
    InvalidInputError,
    S3DDBError,
    VersionNotFoundError,
)
from s3ddb.version import __version__

__all__ = [
    "EPILOG",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

# Modules under s3ddb.cli that register verbs, in help order.
_VERB_MODULES = (
    "commands",
    "operations",
    "doctor_cmd",
    "create_table",
    "local_aws",
    "demo_cmd",
)

#: Exit statuses (documented in docs/operations.md).
EXIT_OK = 0
EXIT_FAILED = 1  # the operation failed, or verify found problems
EXIT_USAGE = 2  # bad arguments, or the dataset, table or endpoint cannot be reached

# Errors that mean "you asked for something that cannot be reached or parsed".
_USAGE_ERRORS = (
    InvalidInputError,
    DatasetNotFoundError,
    VersionNotFoundError,
    CredentialsError,
    EndpointUnreachableError,
    ExternalStoreTableError,
    PermissionError,
)

EPILOG = """exit status: 0 success (verify: healthy); 1 the operation failed or verify found
problems; 2 usage or access error (bad arguments, URI or option; no such dataset,
version or table; endpoint unreachable; access denied). Errors print one line; add
--debug for the traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s3ddb",
        description="ACID, multi-version datasets on object storage "
        "(local paths, memory://, s3://, s3+ddb://bucket/prefix?ddbTableName=T).",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"s3ddb {__version__}")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error")
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
    debug = bool(getattr(args, "debug", False))
    # Stored text (names, values, messages quoting them) never reaches the terminal raw.
    with guarded_output():
        return _run(func, args, debug)


def _run(func: Any, args: argparse.Namespace, debug: bool) -> int:
    try:
        return int(func(args) or EXIT_OK)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of our output went away (``s3ddb show ... | head``): not an error.
        sys.stderr.close()
        return EXIT_OK
    except (S3DDBError, PermissionError) as exc:
        if debug:
            raise
        print(f"s3ddb: error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, _USAGE_ERRORS) else EXIT_FAILED
    except Exception as exc:
        if debug:
            raise
        print(
            f"s3ddb: unexpected error: {type(exc).__name__}: {_one_line(exc)} "
            "(run again with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _one_line(exc: BaseException) -> str:
    return safe_text(" ".join(str(exc).split()))


if __name__ == "__main__":
    sys.exit(main())
