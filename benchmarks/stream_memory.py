"""Streaming a dataset as Arrow keeps memory bounded by a few fragments.

    python benchmarks/stream_memory.py [--fragments 40] [--rows-per-fragment 250000]

Writes a dataset of ``--fragments`` fragments on a local path, then, each in a fresh
process so that peak RSS is its own, reads every row:

* ``stream``: ``pa.RecordBatchReader.from_stream(ds)``, batch by batch (sums a column);
* ``duckdb``: ``duckdb.sql("select sum(v), count(*) from ds")`` over the Arrow stream;
* ``table``: ``ds.to_table()``, the whole version in memory, for comparison.

Prints the dataset's size in Arrow memory, and per mode the peak RSS growth and the
peak bytes pyarrow had allocated (sampled at every batch): the streamed modes stay
near a few fragments whatever the number of fragments, ``table`` grows with it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import s3ddb


def _write(uri: str, fragments: int, rows: int) -> int:
    """Write the dataset; returns its size in Arrow memory (bytes)."""
    total = 0
    for i in range(fragments):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "v": ids.astype(np.float64) * 0.5,
                "s": pa.array(np.char.add("row-", ids.astype(str)).astype(object)),
            }
        )
        total += table.nbytes
        s3ddb.write_dataset(table, uri, mode="append", max_rows_per_file=rows)
    return total


def _peak_sampler() -> tuple[threading.Event, list[int]]:
    """Samples pyarrow's allocated bytes every millisecond until the event is set."""
    stop, peak = threading.Event(), [0]

    def run() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], pa.total_allocated_bytes())
            time.sleep(0.001)

    threading.Thread(target=run, daemon=True).start()
    return stop, peak


def _current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _measure(mode: str, uri: str) -> dict[str, float]:
    ds = s3ddb.dataset(uri)
    before = _current_rss()
    stop, peak = _peak_sampler()
    start = time.perf_counter()
    if mode == "stream":
        reader = pa.RecordBatchReader.from_stream(ds)
        rows, total = 0, 0.0
        for batch in reader:
            rows += batch.num_rows
            total += float(pa.compute.sum(batch.column("v")).as_py() or 0)
    elif mode == "duckdb":
        import duckdb

        total, rows = duckdb.sql("select sum(v), count(*) from ds").fetchall()[0]
    else:
        table = ds.to_table()
        rows = table.num_rows
    seconds = time.perf_counter() - start
    stop.set()
    # ru_maxrss is the process's peak (KiB on Linux): growth over the RSS at the start.
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "rows": rows,
        "seconds": seconds,
        "rss_growth": after - before,
        "arrow_peak": peak[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fragments", type=int, default=40)
    parser.add_argument("--rows-per-fragment", type=int, default=250_000)
    parser.add_argument("--measure", nargs=2, metavar=("MODE", "URI"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(*args.measure)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "ds")
        size = _write(uri, args.fragments, args.rows_per_fragment)
        fragment = size / args.fragments
        print(
            f"dataset: {args.fragments} fragments x {args.rows_per_fragment:,} rows, "
            f"{size / 2**20:,.0f} MiB in Arrow memory ({fragment / 2**20:.1f} MiB per fragment)"
        )
        print(f"{'mode':<8} {'seconds':>8} {'peak RSS growth':>16} {'peak Arrow alloc':>17}")
        for mode in ("stream", "duckdb", "table"):
            out = subprocess.run(
                [sys.executable, __file__, "--measure", mode, uri],
                check=True,
                capture_output=True,
                text=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            assert r["rows"] == args.fragments * args.rows_per_fragment, r
            print(
                f"{mode:<8} {r['seconds']:>8.2f} {r['rss_growth'] / 2**20:>12,.0f} MiB "
                f"{r['arrow_peak'] / 2**20:>13,.0f} MiB"
            )


if __name__ == "__main__":
    main()
