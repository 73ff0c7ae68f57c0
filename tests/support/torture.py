"""A child process for the SIGKILL torture test: random operations until it is killed.

    python -m tests.support.torture URI GENERATION SEED

Rows are ``{id: int64, val: string}``. Each process (a *generation*) works on ids of
its own (``GENERATION * 1_000_000 + n``), one operation at a time on the newest
version: append, delete, update (rows or columns), upsert (merge_insert) or compact.
So the parent can replay a generation's acknowledged operations to know exactly what
its ids must hold, whatever other generations did at the same time.

Before an operation it prints ``{"start": n, "op": ..., ...}``; after it lands
``{"ack": n, "version": v}``; after a definite failure (a typed commit conflict)
``{"fail": n}``. An unknown outcome prints ``{"unknown": n}`` and exits: the parent
treats that operation like one cut by SIGKILL (all or nothing). Any other exception
is a bug: the traceback goes to stderr and the exit status is 1.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import pyarrow as pa

SCHEMA = pa.schema([("id", pa.int64()), ("val", pa.string())])
KINDS = ("append", "append", "delete", "update", "upsert", "compact")


def table(rows: dict[int, str]) -> pa.Table:
    return pa.table({"id": list(rows), "val": list(rows.values())}, schema=SCHEMA)


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def perform(ds: Any, op: dict[str, Any]) -> int:
    """Perform ``op`` on ``ds`` (an s3ddb Dataset); the version it committed (or
    stayed at)."""
    kind = op["op"]
    rows = table({int(k): v for k, v in op.get("rows", {}).items()})
    if kind == "append":
        ds.insert(rows)
    elif kind == "delete":
        ds.delete(f"id = {op['id']}")
    elif kind == "update":
        ds.update({"val": f"'{op['val']}'"}, f"id = {op['id']}", rewrite=op["rewrite"])
    elif kind == "upsert":
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
    elif kind == "compact":
        ds.optimize.compact_files(target_rows_per_fragment=op["target"])
    else:
        ds.update_config({op["key"]: op["value"]})
    return int(ds.version)


def plan(
    rng: random.Random,
    n: int,
    generation: int,
    mine: dict[int, str],
    kinds: tuple[str, ...] = KINDS,
    max_rows: int = 3,
) -> dict[str, Any]:
    """The ``n``-th operation of a writer whose own rows are ``mine``."""
    kind = rng.choice(kinds) if mine else "append"
    new_id = generation * 1_000_000 + n * 10
    if kind == "append":
        return {"op": kind, "rows": {new_id + j: f"a{n}" for j in range(rng.randint(1, max_rows))}}
    if kind == "compact":
        return {"op": kind, "target": rng.randint(2, 16)}
    if kind == "config":
        return {"op": kind, "key": f"w{generation}", "value": str(n)}
    existing = rng.choice(sorted(mine))
    if kind == "delete":
        return {"op": kind, "id": existing}
    if kind == "update":
        rewrite = rng.choice(["rows", "columns"])
        return {"op": kind, "id": existing, "val": f"u{n}", "rewrite": rewrite}
    return {"op": kind, "rows": {existing: f"m{n}", new_id: f"m{n}"}}


def apply(op: dict[str, Any], rows: dict[int, str]) -> None:
    """The logical effect of ``op`` on this writer's rows (what a checker replays)."""
    kind = op["op"]
    if kind in ("append", "upsert"):
        rows.update({int(k): v for k, v in op["rows"].items()})
    elif kind == "delete":
        rows.pop(int(op["id"]), None)
    elif kind == "update" and int(op["id"]) in rows:
        rows[int(op["id"])] = op["val"]


def allowed_states(log: list[dict[str, Any]]) -> list[dict[int, str]]:
    """A writer's rows after its acknowledged operations; and, if it was cut in the
    middle of one (killed, or an unknown outcome), also with that one applied: all or
    nothing."""
    ops: dict[int, dict[str, Any]] = {}
    rows: dict[int, str] = {}
    pending = None
    for line in log:
        if "start" in line:
            ops[line["start"]] = line
            pending = line
        elif "ack" in line:
            apply(ops[line["ack"]], rows)
            pending = None
        elif "fail" in line:
            pending = None
    out = [dict(rows)]
    if pending is not None:
        with_it = dict(rows)
        apply(pending, with_it)
        out.append(with_it)
    return out


def main(argv: list[str]) -> int:
    """``uri generation seed [lifecycle]``: run operations until killed. With
    ``lifecycle`` the dataset may be dropped and re-created meanwhile: an operation
    that fails with any typed error (the dataset is missing, half dropped, or was
    re-created under it) is logged as failed, and each acknowledgement names the
    dataset identity it landed in."""
    import s3ddb
    from s3ddb.errors import CommitConflictError, CommitStateUnknownError, S3DDBError

    uri, generation, seed = argv[0], int(argv[1]), int(argv[2])
    lifecycle = argv[3:] == ["lifecycle"]
    expected: tuple[type[BaseException], ...] = (
        (S3DDBError,) if lifecycle else (CommitConflictError,)
    )
    rng = random.Random(seed)
    mine: dict[int, str] = {}
    n = 0
    while True:
        n += 1
        op = plan(rng, n, generation, mine)
        say(start=n, **op)
        try:
            ds = s3ddb.dataset(uri)
            version = perform(ds, op)
        except CommitStateUnknownError:
            say(unknown=n)
            return 0
        except expected as exc:
            say(fail=n, error=type(exc).__name__)
            continue
        apply(op, mine)
        say(ack=n, version=version, identity=ds.manifest.dataset_id)


def plain_writer(uri: str) -> int:
    """A writer configured with the dataset's plain ``s3://`` URI: it appends until
    killed; every attempt must be refused."""
    import s3ddb
    from s3ddb.errors import CommitMechanismError, S3DDBError

    n = 0
    while True:
        n += 1
        try:
            ds = s3ddb.dataset(uri)  # never creates: a plain writer of an existing dataset
            ds.insert(table({-n: "plain"}))
        except CommitMechanismError:
            say(refused=n)
            continue
        except S3DDBError as exc:  # the dataset is being dropped or re-created
            say(fail=n, error=type(exc).__name__)
            continue
        say(ack=n, version=int(ds.version))


if __name__ == "__main__":
    if sys.argv[1] == "plain":
        sys.exit(plain_writer(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
