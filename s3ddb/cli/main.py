"""The ``s3ddb`` command line.

Each verb lives in its own module under :mod:`s3ddb.cli` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable taking
the parsed arguments and returning the exit status.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
import textwrap
import traceback
from collections.abc import Sequence
from typing import Any

from s3ddb.cli.output import guarded_output, safe_text
from s3ddb.errors import (
    BucketNotFoundError,
    CommitMechanismError,
    CredentialsError,
    DatasetLocationError,
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
    "operator_verbs",
    "doctor_cmd",
    "create_table",
    "local_aws_cmd",
    "demo_cmd",
    "catalog_cmd",
)

#: Exit statuses (documented in docs/operations.md).
EXIT_OK = 0
EXIT_FAILED = 1  # the operation failed, or verify found problems
EXIT_USAGE = 2  # bad arguments, or the dataset, table or endpoint cannot be reached

# Error messages: one line up to _ONE_LINE characters, else wrapped at _WIDTH.
_ONE_LINE = 300
_WIDTH = 100

# Errors that mean "you asked for something that cannot be reached or parsed".
_USAGE_ERRORS = (
    InvalidInputError,
    # A URI that commits another way than the dataset (s3:// of a DynamoDB dataset)
    # or than the store allows: the fix is the URI the message names.
    CommitMechanismError,
    BucketNotFoundError,
    DatasetLocationError,
    DatasetNotFoundError,
    VersionNotFoundError,
    CredentialsError,
    EndpointUnreachableError,
    ExternalStoreTableError,
    PermissionError,
)

EPILOG = """exit status: 0 success (verify: healthy); 1 the operation failed or verify found
problems; 2 usage or access error (bad arguments, URI or option; no such dataset,
version or table; endpoint unreachable; access denied). Errors print one line (long
ones wrapped, continuation lines indented); --debug adds the traceback and keeps the
exit status."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # Refused by the verb's own parser: its usage, and the option meant.
        _verb_parser(parser, args).error(_unrecognized(_verb_parser(parser, args), unknown))
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
        code = EXIT_USAGE if isinstance(exc, _USAGE_ERRORS) else EXIT_FAILED
        _report(exc, "error", debug)
        return code
    except Exception as exc:
        _report(exc, "unexpected error", debug)
        return EXIT_FAILED


def _verb_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The innermost parser ``args`` went through: the verb's (``tags``'s action's)."""
    current = parser
    while True:
        verbs = next(
            (a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        chosen = getattr(args, verbs.dest, None) if verbs is not None else None
        if verbs is None or chosen not in (verbs.choices or {}):
            return current
        current = verbs.choices[chosen]


def _unrecognized(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """argparse's "unrecognized arguments" message, with the option of ``parser``
    each unknown one was likely meant to be."""
    flags = [flag for action in parser._actions for flag in action.option_strings]
    meant: dict[str, str] = {}  # unknown flag -> the close one
    for text in unknown:
        flag = text.split("=", 1)[0]
        close = difflib.get_close_matches(flag, flags, n=1) if flag.startswith("-") else []
        if close:
            meant[flag] = close[0]
    if len(meant) == 1:
        hint = f" (did you mean {next(iter(meant.values()))}?)"
    else:
        hint = f" (did you mean {', '.join(f'{v} for {k}' for k, v in meant.items())}?)"
    return f"unrecognized arguments: {' '.join(unknown)}{hint if meant else ''}"


def _report(exc: BaseException, kind: str, debug: bool) -> None:
    """Print ``exc`` on stderr: its traceback first with ``--debug``, then the message
    (the exit status is the same either way: scripts that add --debug behave alike)."""
    if debug:
        traceback.print_exc(file=sys.stderr)
    hint = "" if debug or kind == "error" else " (run again with --debug for the traceback)"
    print(_wrapped(f"s3ddb: {kind}: {type(exc).__name__}: ", str(exc), hint), file=sys.stderr)


def _wrapped(head: str, message: str, hint: str = "") -> str:
    """``head + message + hint``: one line if the message is one line of at most
    :data:`_ONE_LINE` characters (what scripts grep), else lines of at most
    :data:`_WIDTH` characters.

    Prose lines are wrapped at spaces, continuation lines indented two spaces. Lines
    the message itself indents (commands, key schemas) are kept whole, indented under
    the first, so a command can still be copied."""
    # Only "\n" ends a line (str.splitlines would also break at U+2028, U+0085... that
    # stored text may carry); every line after the first is indented, so no text quoted
    # in a message can pass for a line of its own.
    lines = [line.rstrip() for line in message.split("\n") if line.strip()] or [""]
    if len(lines) == 1 and len(head + lines[0] + hint) <= _ONE_LINE:
        return safe_text(head + lines[0].strip() + hint)
    lines[0] = head + lines[0].strip()
    lines[-1] += hint
    out: list[str] = []
    for line in lines:
        if out and line[:1].isspace():
            out.append("  " + safe_text(line))
            continue
        text = safe_text(line.strip())
        out.extend(
            textwrap.wrap(
                text,
                width=_WIDTH,
                subsequent_indent="  ",
                initial_indent="" if not out else "  ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            or [text]
        )
    return "\n".join(out)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose "invalid choice" message for a verb names the verb
    likely meant and lists only the verbs ``s3ddb --help`` lists (not the hidden
    ``demo-writer`` and ``demo-change``, which ``s3ddb demo`` runs in child
    processes)."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if not isinstance(action, argparse._SubParsersAction) or value in (action.choices or {}):
            super()._check_value(action, value)
            return
        listed = {id(action.choices[a.dest]) for a in action._get_subactions()}
        shown = [name for name, parser in action.choices.items() if id(parser) in listed]
        close = difflib.get_close_matches(str(value), shown, n=1)
        meant = f"did you mean {close[0]}? " if close else ""
        raise argparse.ArgumentError(
            action, f"invalid choice: {value!r} ({meant}choose from {', '.join(shown)})"
        )


if __name__ == "__main__":
    sys.exit(main())
