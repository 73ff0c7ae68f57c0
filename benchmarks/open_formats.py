"""What publishing Iceberg and Delta metadata costs a commit (docs/performance.md,
"Open formats").

On the embedded local endpoint (S3 without conditional writes + DynamoDB,
``s3+ddb://``), two datasets take the same sequential one-row appends, one publishing
``iceberg,delta`` and one publishing nothing, alternating append by append so the
machine's load moves both alike:

* requests per commit: every request an append causes, its background finishing
  (copy, publication, repoint) included, with and without publication; the
  difference is what publication adds (checkpoints included: every 10th version);
* the append median as the caller sees it (publication runs on the background
  finalizer, off the caller's path), and the ratio with / without.

The same on a local path, where the writer publishes in its own path.

Usage: ``python benchmarks/open_formats.py [--appends 100]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import pyarrow as pa

import s3ddb


def print_table(title: str, head: tuple[str, ...], body: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [list(head), *body]) for i in range(len(head))]
    print(f"\n{title}")
    for row in [list(head), *body]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def _row(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64()), "name": [f"row-{i}"]})


def _endpoint(appends: int) -> list[list[str]]:
    from s3ddb.commit.finalizer import drain
    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig
    from s3ddb.testing import LocalAWS

    with LocalAWS() as aws:
        so = aws.storage_options()
        aws.create_bucket("bench")
        create_table("bench", AwsConfig.from_storage_options(so))
        uris = {
            "without": "s3+ddb://bench/plain?ddbTableName=bench",
            "with": "s3+ddb://bench/published?ddbTableName=bench",
        }
        s3ddb.write_dataset(_row(0), uris["without"], storage_options=so)
        s3ddb.write_dataset(
            _row(0), uris["with"], storage_options=so, open_formats=["iceberg", "delta"]
        )
        drain()
        requests: dict[str, list[int]] = {"with": [], "without": []}
        kinds: dict[str, Counter[str]] = {"with": Counter(), "without": Counter()}
        times: dict[str, list[float]] = {"with": [], "without": []}
        for i in range(1, appends + 1):
            for variant, uri in uris.items():
                aws.clear_requests()
                started = time.perf_counter()
                s3ddb.write_dataset(_row(i), uri, mode="append", storage_options=so)
                times[variant].append(time.perf_counter() - started)
                drain()
                sent = aws.requests
                requests[variant].append(len(sent))
                kinds[variant].update(_operation(r) for r in sent)
        rows = []
        for variant in ("without", "with"):
            per = statistics.mean(requests[variant])
            top = ", ".join(f"{k} {v / appends:.1f}" for k, v in kinds[variant].most_common(6))
            rows.append(
                [
                    f"s3+ddb://, {variant} publication",
                    f"{statistics.median(times[variant]) * 1000:.1f} ms",
                    f"{per:.2f} ({top})",
                ]
            )
        added = statistics.mean(requests["with"]) - statistics.mean(requests["without"])
        ratio = statistics.median(times["with"]) / statistics.median(times["without"])
        rows.append(["publication adds", f"{ratio:.2f}x", f"{added:.2f} requests / commit"])
        # A cold writer: one process per append (a CLI, a batch job), which reads
        # where each format stands from its files before publishing.
        cold: dict[str, list[int]] = {"with": [], "without": []}
        env = aws.env(inherit=True)
        for i in range(appends + 1, appends + 1 + _COLD):
            for variant, uri in uris.items():
                aws.clear_requests()
                subprocess.run(
                    [sys.executable, "-c", _COLD_CHILD, uri, str(i), json.dumps(so)],
                    env=env, check=True, timeout=300,
                )  # fmt: skip
                cold[variant].append(len(aws.requests))
        added = statistics.mean(cold["with"]) - statistics.mean(cold["without"])
        rows.append(
            [
                "cold writer (a process per append)",
                "",
                f"{statistics.mean(cold['without']):.1f} without, "
                f"{statistics.mean(cold['with']):.1f} with: {added:+.1f} requests",
            ]
        )
        return rows


_COLD = 10
_COLD_CHILD = """
import json, sys
import pyarrow as pa
import s3ddb
i = int(sys.argv[2])
table = pa.table({"id": pa.array([i], pa.int64()), "name": [f"row-{i}"]})
s3ddb.write_dataset(table, sys.argv[1], mode="append", storage_options=json.loads(sys.argv[3]))
"""


def _operation(request: Any) -> str:
    return str(request.operation)


def _local(appends: int) -> list[list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        uris = {"without": f"{tmp}/plain", "with": f"{tmp}/published"}
        s3ddb.write_dataset(_row(0), uris["without"])
        s3ddb.write_dataset(_row(0), uris["with"], open_formats=["iceberg", "delta"])
        times: dict[str, list[float]] = {"with": [], "without": []}
        for i in range(1, appends + 1):
            for variant, uri in uris.items():
                started = time.perf_counter()
                s3ddb.write_dataset(_row(i), uri, mode="append")
                times[variant].append(time.perf_counter() - started)
        ratio = statistics.median(times["with"]) / statistics.median(times["without"])
        return [
            [
                f"local path, {variant} publication",
                f"{statistics.median(times[variant]) * 1000:.1f} ms",
                "",
            ]
            for variant in ("without", "with")
        ] + [["publication adds (in the writer's path)", f"{ratio:.2f}x", ""]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=100)
    args = parser.parse_args()
    rows = _endpoint(args.appends) + _local(args.appends)
    print_table(
        f"Sequential one-row appends ({args.appends}), with and without publication",
        ("dataset", "append median (caller)", "requests per commit (all, by operation)"),
        rows,
    )


if __name__ == "__main__":
    main()
