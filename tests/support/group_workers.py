"""Child-process entry points for the group commit tests (tests/groups/test_group_processes.py).

    python -m tests.support.group_workers group URI_A URI_B START COUNT
    python -m tests.support.group_workers single URI START COUNT
    python -m tests.support.group_workers chain URI_A URI_B ID

``group`` commits COUNT groups, group ``i`` appending the row ``START + i`` to both
datasets; ``chain`` commits one group of two appends to the first dataset (rows ID
and ID + 1, consecutive versions) and one to the second (row ID); ``single`` appends
the row ``START + i`` to one dataset, COUNT times. Each prints ``ok <id>`` after each
acknowledged commit. Environment (AWS endpoint, failpoints) comes from the parent.
Any exception exits non-zero.
"""

from __future__ import annotations

import sys

import pyarrow as pa


def row(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64()), "tag": [f"t{i}"]})


def group(uri_a: str, uri_b: str, start: int, count: int) -> int:
    import s3ddb

    for i in range(start, start + count):
        with s3ddb.atomic() as tx:
            tx.dataset(uri_a).insert(row(i))
            tx.dataset(uri_b).insert(row(i))
        print(f"ok {i}", flush=True)
    return 0


def chain(uri_a: str, uri_b: str, i: int) -> int:
    import s3ddb

    with s3ddb.atomic() as tx:
        tx.dataset(uri_a).insert(row(i))
        tx.dataset(uri_a).insert(row(i + 1))
        tx.dataset(uri_b).insert(row(i))
    print(f"ok {i}", flush=True)
    return 0


def single(uri: str, start: int, count: int) -> int:
    import s3ddb

    for i in range(start, start + count):
        s3ddb.write_dataset(row(i), uri, mode="append")
        print(f"ok {i}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    verb, *args = argv
    if verb == "group":
        return group(args[0], args[1], int(args[2]), int(args[3]))
    if verb == "chain":
        return chain(args[0], args[1], int(args[2]))
    if verb == "single":
        return single(args[0], int(args[1]), int(args[2]))
    raise SystemExit(f"unknown verb {verb!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
