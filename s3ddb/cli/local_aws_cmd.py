"""``s3ddb local-aws``: serve a local S3 + DynamoDB endpoint (moto) until stopped.

Standard output gets the endpoint URL on the first line, then ``export`` lines that
point boto3 and s3ddb at it, all in one write so a parent process can read the first
line and go. Progress and notes go to standard error. Serves until Ctrl-C or SIGTERM.

moto is imported only when the verb runs, so the rest of the CLI works without the
``testing`` extra.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from s3ddb.testing import DEFAULT_REGION

_HELP = "serve a local S3 + DynamoDB endpoint (moto) for tests and demos"

# What the README and docs/ examples use, so they run as shown against a fresh endpoint.
DEFAULT_BUCKET = "my-bucket"
DEFAULT_TABLE = "s3ddb_manifests"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``local-aws`` options to ``parser``."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; use 0.0.0.0 only to serve containers)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port to bind (default 0: a free port the OS picks)"
    )
    parser.add_argument(
        "--region", default=DEFAULT_REGION, help=f"region (default {DEFAULT_REGION})"
    )
    parser.add_argument(
        "--conditional-writes",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="honour If-None-Match and If-Match on S3 writes, as AWS S3 does. Default: "
        "off: they are dropped, as by the S3-compatible stores s3+ddb:// exists for, so "
        "plain s3:// writers are refused and 's3ddb doctor s3://...' fails; use "
        "s3+ddb:// URIs",
    )
    parser.add_argument(
        "--bucket",
        dest="buckets",
        action="append",
        default=None,
        metavar="NAME",
        help=f"create this S3 bucket at start (repeatable; default {DEFAULT_BUCKET}, the "
        "bucket the docs use)",
    )
    parser.add_argument(
        "--table",
        dest="tables",
        action="append",
        default=None,
        metavar="NAME",
        help="create this DynamoDB table with the s3ddb commit-table key schema at start "
        f"(repeatable; default {DEFAULT_TABLE}, the table the docs use)",
    )
    parser.add_argument(
        "--empty",
        action="store_true",
        help="create no bucket or table beyond those --bucket and --table name",
    )


def _buckets_and_tables(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The buckets and tables to create at start: those named, else the defaults."""
    default_buckets, default_tables = (
        ([], []) if args.empty else ([DEFAULT_BUCKET], [DEFAULT_TABLE])
    )
    buckets = default_buckets if args.buckets is None else args.buckets
    tables = default_tables if args.tables is None else args.tables
    return buckets, tables


def register(subparsers: Any) -> None:
    """Add the ``local-aws`` verb to the ``s3ddb`` command's subparsers."""
    parser = subparsers.add_parser(
        "local-aws",
        help=_HELP,
        description=f"{_HELP[:1].upper()}{_HELP[1:]}. By default its S3 ignores "
        f"conditional writes, and it creates the bucket {DEFAULT_BUCKET!r} and the "
        f"DynamoDB table {DEFAULT_TABLE!r} that the docs' examples use. Prints the "
        "endpoint URL, then shell 'export' lines for AWS_ENDPOINT_URL and dummy "
        "credentials; serves until Ctrl-C or SIGTERM. Requires pip install "
        "'s3ddb[testing]'.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def _create_buckets_and_tables(aws: Any, buckets: list[str], tables: list[str]) -> str | None:
    """Create ``buckets`` and ``tables`` on ``aws``; the reason if one is refused, else None."""
    from botocore.exceptions import ClientError

    for kind, names, create in (
        ("bucket", buckets, aws.create_bucket),
        ("table", tables, aws.create_table),
    ):
        for name in names:
            try:
                create(name)
            except ClientError as exc:
                error = exc.response.get("Error", {})
                return (
                    f"cannot create the {kind} {name!r} (--{kind}): "
                    f"{error.get('Code', 'ClientError')}: {error.get('Message', exc)}"
                )
    return None


def _announcement(env: dict[str, str]) -> str:
    lines = [env["AWS_ENDPOINT_URL"]]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; returns the exit status: 0; 1 if it cannot start; 2 if a
    ``--bucket`` or ``--table`` name is refused (the message says which and why)."""
    try:
        from s3ddb.testing import LocalAWS

        aws = LocalAWS(
            conditional_writes=args.conditional_writes,
            region=args.region,
            host=args.host,
            port=args.port,
        )
        aws.start()
    except ImportError as exc:
        print(f"s3ddb local-aws: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"s3ddb local-aws: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous: list[tuple[int, Any]] = []
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (and SIGHUP: the terminal went away) end the server like Ctrl-C.
        for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if signum is not None:
                previous.append((signum, signal.signal(signum, on_signal)))
    try:
        buckets, tables = _buckets_and_tables(args)
        refused = _create_buckets_and_tables(aws, buckets, tables)
        if refused:
            print(f"s3ddb local-aws: error: {refused}", file=sys.stderr)
            return 2
        sys.stdout.write(_announcement(aws.env()))
        sys.stdout.flush()
        mode = "on" if aws.conditional_writes else "OFF (If-None-Match/If-Match dropped)"
        print(
            f"s3ddb local-aws: serving S3 + DynamoDB at {aws.endpoint_url} "
            f"(region {aws.region}, S3 conditional writes {mode}); "
            f"buckets: {', '.join(buckets) or 'none'}; tables: {', '.join(tables) or 'none'}; "
            "Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )
        try:
            # A timed wait keeps the main thread responsive to signals on every platform.
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        aws.stop()
        for signum, handler in previous:
            signal.signal(signum, handler)
    print("s3ddb local-aws: stopped", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m s3ddb.testing`` (same options as ``s3ddb local-aws``)."""
    parser = argparse.ArgumentParser(prog="python -m s3ddb.testing", description=_HELP)
    add_arguments(parser)
    return run(parser.parse_args(argv))


__all__ = ["DEFAULT_BUCKET", "DEFAULT_TABLE", "add_arguments", "main", "register", "run"]
