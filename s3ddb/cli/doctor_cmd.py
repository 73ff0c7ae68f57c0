"""``s3ddb doctor URI``: check that a URI's configuration can commit, and how."""

from __future__ import annotations

import argparse
from typing import Any

from s3ddb.cli.commands import _verb, storage_options
from s3ddb.cli.output import emit_json

__all__ = [
    "register",
    "run_doctor",
]


def run_doctor(args: argparse.Namespace) -> int:
    """Check the services a URI needs and say how its commits are decided.

    Reaches each service with its own settings, checks the DynamoDB table's key schema,
    tries every call commits make on a scratch object and a scratch item (deleted
    afterwards), and probes whether the object store honours If-None-Match. Prints the
    commit mechanism and, for each failed check, the setting to change. Exit status 0:
    ok; 1: a check failed; 2: a service is unreachable or refuses the credentials (or
    bad arguments).
    """
    from s3ddb.maintenance.doctor import diagnose, render

    report = diagnose(args.uri, storage_options(args))
    if args.json:
        emit_json(report.to_dict())
    else:
        print(render(report))
    return report.exit_status


def register(subparsers: Any) -> None:
    """Add the ``doctor`` verb."""
    _verb(subparsers, "doctor", run_doctor)
