"""Child-process entry points for concurrency and crash tests.

    python -m tests.support.workers append URI WRITER_ID COUNT [ROWS]

Each append writes ROWS rows whose ids encode (writer, attempt), so the parent can
check every row is present exactly once. Prints one line per successful commit:
``ok <writer> <i> <version> <attempts>``. Environment (AWS endpoint, failpoints) comes from the
parent.

Row-changing verbs (each runs one operation and prints one JSON line, see
:func:`report`)::

    python -m tests.support.workers delete URI PREDICATE [--retries N] [--barrier DIR PARTIES]
    python -m tests.support.workers update URI COLUMN EXPR WHERE [--retries N] [--rewrite MODE]
                                   [--barrier DIR PARTIES]
    python -m tests.support.workers upsert URI KEY VALUE [--private KEY:VALUE ...] [--retries N]
                                   [--barrier DIR PARTIES]

``upsert`` merges (``when_matched_update_all().when_not_matched_insert_all()`` on
``id``) the rows ``{id: KEY, v: VALUE}`` and the ``--private`` ones into a dataset of
columns ``id`` and ``v`` (int64). ``--retries`` is ``conflict_retries`` (default: the
library's). With ``--barrier``, the child opens the dataset (pinning its read version)
then waits until PARTIES children have done the same, so that they really race.

A commit conflict (``CommitConflictError`` and subclasses) is an expected outcome: it
is reported and the exit status is 0. Any other exception exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

BARRIER_TIMEOUT = 120.0


def rows_for(writer: int, i: int, rows: int) -> pa.Table:
    base = writer * 1_000_000 + i * 1000
    ids = list(range(base, base + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "writer": pa.array([writer] * rows, pa.int32()),
            "seq": pa.array([i] * rows, pa.int32()),
        }
    )


def append(uri: str, writer: int, count: int, rows: int) -> int:
    import s3ddb

    for i in range(count):
        ds = s3ddb.write_dataset(rows_for(writer, i, rows), uri, mode="append")
        attempts = ds.last_commit.attempts if ds.last_commit else 0
        print(f"ok {writer} {i} {ds.version} {attempts}", flush=True)
    return 0


# --- row-changing verbs ----------------------------------------------------------------


def wait_at_barrier(directory: str, parties: int) -> None:
    """Announce this child is ready, then wait until ``parties`` children are."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT
    while len(list(path.iterdir())) < parties:
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier {directory}: fewer than {parties} children arrived")
        time.sleep(0.005)


def report(outcome: str, read_version: int, ds: Any, reexecutions: int, **fields: Any) -> None:
    """One JSON line: ``outcome`` ("ok" or the exception class name), the version the
    child read, whether it committed a version and which (``version``: the version its
    Dataset ended at), the attempts of its last commit, how often the operation was
    re-executed after a retryable conflict, and the operation's counts."""
    commit = ds.last_commit
    line = {
        "outcome": outcome,
        "pid": os.getpid(),
        "read_version": read_version,
        "committed": commit is not None,
        "version": commit.manifest.version if commit is not None else ds.version,
        "attempts": commit.attempts if commit is not None else 0,
        "reexecutions": reexecutions,
        **fields,
    }
    print(json.dumps(line, sort_keys=True), flush=True)


def row_change(args: argparse.Namespace) -> int:
    import s3ddb
    import s3ddb.versions.pinned
    from s3ddb.errors import CommitConflictError

    # Every child's base stays "fresh" (claimed on, not caught up first) however long
    # a loaded machine keeps it between opening and committing: the tests count which
    # child won its first claim.
    s3ddb.versions.pinned.FRESH_BASE_SECONDS = 3600.0
    ds = s3ddb.dataset(args.uri)
    read_version = ds.version
    if args.barrier:
        wait_at_barrier(args.barrier[0], int(args.barrier[1]))
    retries = args.retries
    try:
        if args.verb == "delete":
            counts = ds.delete(args.predicate, conflict_retries=retries)
        elif args.verb == "update":
            counts = ds.update(
                {args.column: args.expr},
                args.where,
                rewrite=args.rewrite,
                conflict_retries=retries,
            )
        else:
            keys, values = [args.key], [args.value]
            for item in args.private:
                key, value = item.split(":")
                keys.append(int(key))
                values.append(int(value))
            source = pa.table({"id": pa.array(keys, pa.int64()), "v": pa.array(values, pa.int64())})
            builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
            if retries is not None:
                builder = builder.conflict_retries(retries)
            counts = builder.execute(source)
    except CommitConflictError as exc:
        report(
            type(exc).__name__, read_version, ds, ds.last_conflict_retries, message=str(exc)[:500]
        )
        return 0
    report("ok", read_version, ds, ds.last_conflict_retries, **counts)
    return 0


def row_change_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.support.workers")
    verbs = parser.add_subparsers(dest="verb", required=True)
    delete = verbs.add_parser("delete")
    delete.add_argument("uri")
    delete.add_argument("predicate")
    update = verbs.add_parser("update")
    update.add_argument("uri")
    update.add_argument("column")
    update.add_argument("expr")
    update.add_argument("where")
    update.add_argument("--rewrite", default="auto", choices=["auto", "rows", "columns"])
    upsert = verbs.add_parser("upsert")
    upsert.add_argument("uri")
    upsert.add_argument("key", type=int)
    upsert.add_argument("value", type=int)
    upsert.add_argument("--private", action="append", default=[], metavar="KEY:VALUE")
    for sub in (delete, update, upsert):
        sub.add_argument("--retries", type=int, default=None)
        sub.add_argument("--barrier", nargs=2, metavar=("DIR", "PARTIES"))
    return parser


def main(argv: list[str]) -> int:
    verb, *args = argv
    if verb == "append":
        uri, writer, count, *rest = args
        return append(uri, int(writer), int(count), int(rest[0]) if rest else 3)
    if verb in ("delete", "update", "upsert"):
        return row_change(row_change_parser().parse_args(argv))
    raise SystemExit(f"unknown verb {verb}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
