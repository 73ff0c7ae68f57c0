"""Latency and round trips of delete, update and merge_insert, and the cost of a rebase.

    python benchmarks/row_changes.py [--rows 200000] [--fragments 20] [--repeat 5]

On s3+ddb:// against the embedded local AWS endpoint (S3 without conditional writes),
for a dataset of ``--rows`` rows in ``--fragments`` fragments:

* a point delete, a point update (REWRITE_ROWS), a 60% update of one column
  (REWRITE_COLUMNS) and an upsert of 1,000 keys: median wall time and requests;
* a delete that loses its version to an append and rebases over it (the predicate is
  re-applied to the appended rows only), against the same delete uncontended.

Targets (local endpoint; real AWS adds ~10-30 ms per round trip): a point delete
within 3x the time of reading the predicate column once; a rebase over one append
costs the appended rows' read plus one manifest and transaction read, not a rescan.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import s3ddb


def _table(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "v": ids, "name": pa.array([f"n{i}" for i in range(n)])})


def _timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _line(name: str, times: list[float], requests: Counter[str], repeat: int) -> None:
    per = ", ".join(f"{k} {v / repeat:.1f}" for k, v in sorted(requests.items()))
    print(f"{name:<34} median {statistics.median(times) * 1000:8.1f} ms   requests/op: {per}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--fragments", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig
    from s3ddb.testing import LocalAWS

    with LocalAWS(conditional_writes=False) as aws:
        aws.create_bucket("bench")
        so = aws.storage_options()
        create_table("bench", AwsConfig.from_storage_options(so))
        uri = "s3+ddb://bench/rows?ddbTableName=bench"
        per_fragment = max(1, args.rows // args.fragments)
        s3ddb.write_dataset(
            _table(0, args.rows), uri, storage_options=so, max_rows_per_file=per_fragment
        )
        print(f"dataset: {args.rows} rows in {args.fragments} fragments on {uri}\n")
        counter = iter(range(10**9))

        def run(name: str, fn: Callable[[s3ddb.Dataset], Any]) -> None:
            aws.clear_requests()
            times = _timed(lambda: fn(s3ddb.dataset(uri, storage_options=so)), args.repeat)
            ops = Counter(f"{r.service}:{r.operation}" for r in aws.requests)
            _line(name, times, ops, args.repeat)

        run("open + point delete", lambda ds: ds.delete(f"id = {next(counter) * 7}"))
        run(
            "open + point update (rows)",
            lambda ds: ds.update({"name": "'x'"}, where=f"id = {next(counter) * 7 + 1}"),
        )
        run(
            "open + 60% update of v (columns)",
            lambda ds: ds.update({"v": "v + 1"}, where="id % 10 < 6", rewrite="columns"),
        )
        start = args.rows * 10

        def upsert(ds: s3ddb.Dataset) -> None:
            base = start + next(counter) * 500
            source = _table(base, 1000)  # half new keys, half the previous run's
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
                source
            )

        run("open + upsert 1,000 keys", upsert)

        # A delete that loses its version to an append and rebases over it.
        rebase_times, plain_times = [], []
        for i in range(args.repeat):
            stale = s3ddb.dataset(uri, storage_options=so)
            s3ddb.write_dataset(
                _table(args.rows * 100 + i * 1000, 1000), uri, mode="append", storage_options=so
            )
            t0 = time.perf_counter()
            stale.delete(f"id = {i * 7 + 3}")
            rebase_times.append(time.perf_counter() - t0)
            fresh = s3ddb.dataset(uri, storage_options=so)
            t0 = time.perf_counter()
            fresh.delete(f"id = {i * 7 + 5}")
            plain_times.append(time.perf_counter() - t0)
        print(
            f"\ndelete uncontended       median {statistics.median(plain_times) * 1000:8.1f} ms"
            f"\ndelete rebased on append median {statistics.median(rebase_times) * 1000:8.1f} ms"
            " (plans on the stale version, loses, re-applies its predicate to the append)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
