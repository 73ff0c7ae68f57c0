"""Commit latency and round trips per append, by commit mechanism.

    make bench                     # or: python benchmarks/commit_latency.py --appends 30

Measures sequential appends (median and p95 wall time, requests per append) on a local
directory, memory://, and s3+ddb:// against the embedded local AWS endpoint. Speed
targets live here, never in timed tests.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections import Counter

import pyarrow as pa

import s3ddb


def _table(i: int) -> pa.Table:
    return pa.table({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64())})


def _measure(uri: str, appends: int, storage_options: dict[str, str] | None = None) -> list[float]:
    s3ddb.write_dataset(_table(0), uri, storage_options=storage_options)
    times = []
    for i in range(1, appends + 1):
        start = time.perf_counter()
        s3ddb.write_dataset(_table(i), uri, mode="append", storage_options=storage_options)
        times.append(time.perf_counter() - start)
    return times


def _report(name: str, times: list[float], extra: str = "") -> None:
    ordered = sorted(times)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    print(
        f"{name:<10} median {statistics.median(times) * 1000:7.1f} ms"
        f"   p95 {p95 * 1000:7.1f} ms  {extra}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _report("local", _measure(f"{tmp}/ds", args.appends))
    _report("memory", _measure(f"memory://bench-{uuid.uuid4().hex}", args.appends))

    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig
    from s3ddb.testing import LocalAWS

    with LocalAWS(conditional_writes=False) as aws:
        aws.create_bucket("bench")
        so = aws.storage_options()
        create_table("bench", AwsConfig.from_storage_options(so))
        uri = "s3+ddb://bench/ds?ddbTableName=bench"
        s3ddb.write_dataset(_table(0), uri, storage_options=so)
        aws.clear_requests()
        times = _measure(uri.replace("/ds?", "/ds2?"), args.appends, so)
        per_append = Counter(r.service for r in aws.requests)
        n = args.appends + 1
        _report(
            "s3+ddb",
            times,
            f"requests/append: s3 {per_append['s3'] / n:.1f}, "
            f"dynamodb {per_append['dynamodb'] / n:.1f}"
            " (local endpoint; real AWS adds network latency)",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
