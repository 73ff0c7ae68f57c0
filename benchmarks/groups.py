"""Group commits (``s3ddb.atomic``) and snapshots (``s3ddb.snapshot``) against single
appends, on the embedded local AWS endpoint (S3 without conditional writes).

    python benchmarks/groups.py               # or: make bench-groups
    python benchmarks/groups.py --rounds 10   # a quick run

Measures, interleaved round by round in one warm process:

* a single-dataset append (``s3ddb.write_dataset(..., mode="append")``);
* a group of two appends (``with s3ddb.atomic() as tx:`` one insert into each of two
  datasets);
* a snapshot of 10 datasets (warm: manifests cached in the process; cold: caches
  dropped first).

Each commit's background work (steps 3-4) is waited for outside the timing and its
requests counted with the commit. Requests are counted at the endpoint by operation;
round trips on the caller's path are the sequential phases: requests sent in parallel
(one Query per dataset, the manifest reads) are one round trip. Targets (issue 28): a
group of 2 within 1.5x the median single append, with at most 2 more requests per
member; a snapshot of 10 in at most 3 round trips when nothing commits meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.commit.manifest_cache import MANIFESTS

RESULTS = Path(__file__).resolve().parent / "results" / "groups-latest.json"


def _table(i: int) -> pa.Table:
    return pa.table({"id": pa.array(range(i * 3, i * 3 + 3), pa.int64())})


def _timed(aws: Any, fn: Callable[[], object]) -> tuple[float, Counter[str]]:
    finalizer.drain()
    aws.clear_requests()
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    finalizer.drain()
    return elapsed, Counter(f"{r.service}.{r.operation}" for r in aws.requests)


def _summary(times: list[float], requests: list[Counter[str]]) -> dict[str, Any]:
    total: Counter[str] = Counter()
    for r in requests:
        total.update(r)
    n = len(requests)
    return {
        "median_ms": round(statistics.median(times) * 1000, 1),
        "p90_ms": round(sorted(times)[max(0, int(len(times) * 0.9) - 1)] * 1000, 1),
        "requests": round(sum(total.values()) / n, 2),
        "by_operation": {k: round(v / n, 2) for k, v in sorted(total.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--datasets", type=int, default=10, help="datasets in a snapshot")
    args = parser.parse_args()

    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig
    from s3ddb.testing import LocalAWS

    with LocalAWS(conditional_writes=False) as aws:
        aws.create_bucket("bench")
        so = aws.storage_options()
        create_table("bench", AwsConfig.from_storage_options(so))
        run = uuid.uuid4().hex[:8]
        single = f"s3+ddb://bench/{run}/single?ddbTableName=bench"
        a, b = (f"s3+ddb://bench/{run}/{n}?ddbTableName=bench" for n in "ab")
        many = [f"s3+ddb://bench/{run}/snap{i}?ddbTableName=bench" for i in range(args.datasets)]
        for uri in [single, a, b, *many]:
            s3ddb.write_dataset(_table(0), uri, storage_options=so)

        def append() -> None:
            s3ddb.write_dataset(_table(1), single, mode="append", storage_options=so)

        def group() -> None:
            with s3ddb.atomic(storage_options=so) as tx:
                tx.dataset(a).insert(_table(1))
                tx.dataset(b).insert(_table(1))

        def snapshot_cold() -> None:
            MANIFESTS.clear()
            s3ddb.snapshot(many, so)

        def snapshot_warm() -> None:
            s3ddb.snapshot(many, so)

        cases: dict[str, Callable[[], object]] = {
            "single append": append,
            "group of 2 appends": group,
            f"snapshot of {args.datasets} (warm)": snapshot_warm,
            f"snapshot of {args.datasets} (cold)": snapshot_cold,
        }
        for fn in cases.values():  # warm up: imports, clients, pools
            _timed(aws, fn)
        times: dict[str, list[float]] = {name: [] for name in cases}
        requests: dict[str, list[Counter[str]]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, fn in cases.items():
                elapsed, counted = _timed(aws, fn)
                times[name].append(elapsed)
                requests[name].append(counted)

    results = {name: _summary(times[name], requests[name]) for name in cases}
    single_ms = results["single append"]["median_ms"]
    for name, r in results.items():
        ratio = r["median_ms"] / single_ms
        print(
            f"{name:<26} median {r['median_ms']:7.1f} ms  p90 {r['p90_ms']:7.1f} ms  "
            f"({ratio:4.2f}x single)  requests {r['requests']:5.2f}"
        )
        print("    " + ", ".join(f"{k} {v:g}" for k, v in r["by_operation"].items()))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"rounds": args.rounds, "results": results}, indent=2) + "\n")
    print(f"raw numbers: {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
