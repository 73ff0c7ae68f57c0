"""The change feed's cost: ``ds.changes`` of a version that changed k rows of a large
table, beside a full scan of that table and a full diff of the two versions.

    make bench-changes                 # or: python benchmarks/changes.py [--rows N] [--k 1,100]

A local dataset of ``--rows`` rows (int64 ``id``, float64 ``x``, string ``s``) in
``--fragments`` equal appends. For each k of ``--k``: an update of k rows spread over
the whole id range (``id % step = 0``) commits a version; then, best of ``--runs``:

* **feed**: ``ds.changes(v - 1, v)`` (2k rows: the old and the new value of each row);
* **full scan**: ``to_table()`` of the version (every column), best of at least 5,
  after one uncounted scan of the table just written (those run slower);
* **full diff**: what a feed without s3ddb's metadata costs at least: reading both
  versions whole (the comparison itself is not counted).

Bytes and read calls come from ``/proc/self/io`` (``rchar``, ``syscr``: bytes through
read calls, page cache included) around each run. Each feed is checked against the
reference diff of the two versions by ``id`` (the rows whose values differ): a
MISMATCH is printed loudly and ``consistent`` is false in the JSON. The target of
issue 48 is printed beside the ratio (a 1-row update of a 10M-row table: the feed at
most 1 % of the full scan's time); no speed is asserted here.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

if __name__ == "__main__" and sys.path and Path(sys.path[0]).resolve() == Path(__file__).parent:
    del sys.path[0]  # a dataset folder named s3ddb beside this script must not shadow it

import s3ddb

#: (k, bound): the feed of a k-row update takes at most bound x the full scan's time.
TARGETS = [(1, 0.01)]


def _io() -> tuple[int, int]:
    """(bytes read through read calls, read calls) of this process so far."""
    fields = dict(
        line.split(": ") for line in Path("/proc/self/io").read_text().splitlines() if ": " in line
    )
    return int(fields["rchar"]), int(fields["syscr"])


def _best(runs: int, call: Callable[[], Any]) -> tuple[float, int, int, Any]:
    """Best wall time of ``runs`` calls, with the bytes and read calls of that run."""
    best: tuple[float, int, int, Any] | None = None
    for _ in range(runs):
        before = _io()
        start = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - start
        after = _io()
        if best is None or seconds < best[0]:
            best = (seconds, after[0] - before[0], after[1] - before[1], result)
    assert best is not None
    return best


def _table(start: int, rows: int) -> pa.Table:
    ids = pa.array(range(start, start + rows), pa.int64())
    return pa.table(
        {
            "id": ids,
            "x": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            "s": pc.cast(pc.add(ids, 1_000_000_000), pa.string()),
        }
    )


def _reference(before: pa.Table, after: pa.Table) -> set[tuple[int, float]]:
    """(id, x) of every row whose x differs between the two versions (both sides)."""
    joined = before.select(["id", "x"]).join(
        after.select(["id", "x"]), "id", right_suffix="_after", join_type="full outer"
    )
    differs = pc.invert(pc.fill_null(pc.equal(joined["x"], joined["x_after"]), False))
    changed = joined.filter(differs)
    ids = changed["id"].to_pylist()
    old = {(i, x) for i, x in zip(ids, changed["x"].to_pylist()) if x is not None}
    new = {(i, x) for i, x in zip(ids, changed["x_after"].to_pylist()) if x is not None}
    return old | new


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    uri = str(root / "events")
    per = args.rows // args.fragments
    print(f"writing {args.rows:,} rows in {args.fragments} appends...", flush=True)
    for i in range(args.fragments):
        rows = per if i < args.fragments - 1 else args.rows - per * (args.fragments - 1)
        s3ddb.write_dataset(_table(i * per, rows), uri, mode="append" if i else "create")
    # The first scans of a table just written run up to several times slower than the
    # ones after (1-4 s against 0.5 s at 10M rows, on this machine): the feed is
    # compared with a scan in its steady state, so one scan runs first, uncounted.
    start = time.perf_counter()
    s3ddb.dataset(uri).to_table()
    print(f"warm-up scan: {(time.perf_counter() - start) * 1000:.0f} ms", flush=True)
    results: list[dict[str, Any]] = []
    consistent = True
    for k in args.k:
        ds = s3ddb.dataset(uri)
        step = max(1, args.rows // k)
        ds.update({"x": "x + 1"}, where=f"id % {step} = 0 AND id < {step * k}")
        ds = s3ddb.dataset(uri)
        v = ds.version
        previous = ds.checkout_version(v - 1)
        feed_s, feed_b, feed_c, feed = _best(args.runs, lambda d=ds, v=v: d.changes(v - 1, v))
        scan_s, scan_b, scan_c, _ = _best(max(args.runs, 5), ds.to_table)
        diff_s, diff_b, _, pair = _best(
            args.runs, lambda d=ds, p=previous: (p.to_table(), d.to_table())
        )
        got = {(i, x) for i, x in zip(feed["id"].to_pylist(), feed["x"].to_pylist())}
        ok = got == _reference(*pair) and feed.num_rows == 2 * k
        consistent &= ok
        results.append(
            {
                "k": k,
                "feed_rows": feed.num_rows,
                "feed_ms": feed_s * 1000,
                "feed_mib": feed_b / 2**20,
                "feed_calls": feed_c,
                "scan_ms": scan_s * 1000,
                "scan_mib": scan_b / 2**20,
                "scan_calls": scan_c,
                "diff_ms": diff_s * 1000,
                "diff_mib": diff_b / 2**20,
                "feed_over_scan": feed_s / scan_s,
                "feed_over_diff": feed_s / diff_s,
                "consistent": ok,
            }
        )
    return {"rows": args.rows, "fragments": args.fragments, "results": results,
            "consistent": consistent}  # fmt: skip


def report(data: dict[str, Any]) -> None:
    print(f"\nchange feed of a k-row update in {data['rows']:,} rows ({data['fragments']} "
          "fragments); best time, MiB / read calls of that run")  # fmt: skip
    print(f"  {'k':>7} {'feed ms':>9} {'MiB/calls':>12} {'scan ms':>9} {'MiB/calls':>12} "
          f"{'diff ms':>9} {'feed/scan':>10} {'feed/diff':>10}")  # fmt: skip
    for r in data["results"]:
        print(
            f"  {r['k']:>7,} {r['feed_ms']:>9.1f} {r['feed_mib']:>6.1f}/{r['feed_calls']:<5}"
            f" {r['scan_ms']:>9.1f} {r['scan_mib']:>6.1f}/{r['scan_calls']:<5}"
            f" {r['diff_ms']:>9.1f} {r['feed_over_scan']:>9.4f}x {r['feed_over_diff']:>9.4f}x"
            + ("" if r["consistent"] else "  MISMATCH")
        )
    for k, bound in TARGETS:
        for r in data["results"]:
            if r["k"] == k:
                met = "met" if r["feed_over_scan"] <= bound else "MISSED"
                print(f"  target k = {k}: feed / full scan = {r['feed_over_scan']:.4f}x "
                      f"(<= {bound}x: {met})")  # fmt: skip
    print("\nconsistent" if data["consistent"] else "\nMISMATCH: a feed differs from the diff")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--fragments", type=int, default=10)
    parser.add_argument(
        "--k", type=lambda s: [int(x) for x in s.split(",")], default=[1, 100, 10_000]
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="also write the figures as JSON here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="s3ddb-bench-changes-"))
    try:
        data = run(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(data)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0 if data["consistent"] else 1


if __name__ == "__main__":
    sys.exit(main())
