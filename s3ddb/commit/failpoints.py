"""Failpoints: crash or fail a commit at a named step, for crash and fault tests.

``S3DDB_FAILPOINTS="name=action[,name=action]"`` is read at commit time. Actions:
``exit`` (``os._exit(86)``: no cleanup, no flush — a crash), ``raise`` (raise
:class:`~s3ddb.errors.InjectedFault`), ``sleep:<ms>``. With the variable unset a
failpoint costs one dict lookup.
"""

from __future__ import annotations

import os
import sys
import time

from s3ddb.errors import InjectedFault, InvalidInputError

__all__ = ["ENV_VAR", "EXIT_CODE", "NAMES", "active", "failpoint"]

ENV_VAR = "S3DDB_FAILPOINTS"
EXIT_CODE = 86
NAMES = frozenset(
    {
        "commit.after_transaction_file",
        "commit.after_stage_manifest",
        "commit.after_external_put",
        "commit.after_copy_final",
        "commit.after_external_finalize",
        # Before a finished version is published as Iceberg and Delta metadata.
        "commit.before_publication",
        # s3ddb.spark_ext.write: its files are in data/, nothing is committed yet.
        "native_write.after_move",
        # s3ddb.spark_ext.write, removing its staging folder: files moved, not committed.
        "native_write.remove_staging",
    }
)

_parsed: tuple[str, dict[str, str]] = ("", {})


def _parse(spec: str) -> dict[str, str]:
    actions: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, action = item.partition("=")
        if not sep or name not in NAMES:
            raise InvalidInputError(
                f"{ENV_VAR}: bad entry {item!r}; expected name=action with name in {sorted(NAMES)}"
            )
        if action not in ("exit", "raise") and not action.startswith("sleep:"):
            raise InvalidInputError(f"{ENV_VAR}: bad action {action!r} (exit, raise, sleep:<ms>)")
        actions[name] = action
    return actions


def active() -> bool:
    """Whether any failpoint is configured (callers may then wait for work in flight,
    so that a failpoint fires after the step it names has really happened)."""
    return bool(os.environ.get(ENV_VAR))


def failpoint(name: str) -> None:
    """Trigger the action configured for ``name``, if any.

    Raises:
        InjectedFault: the action is ``raise``.
    """
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return
    global _parsed
    if _parsed[0] != spec:
        _parsed = (spec, _parse(spec))
    action = _parsed[1].get(name)
    if action is None:
        return
    if action == "exit":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_CODE)
    if action == "raise":
        raise InjectedFault(f"failpoint {name} fired")
    time.sleep(int(action.split(":", 1)[1]) / 1000)
