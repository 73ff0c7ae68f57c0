"""Spark upserts: ``s3ddb.spark_ext.merge_insert`` beside Spark's own rewrite, one run.

    make bench-spark-merge                     # or: python benchmarks/spark_merge.py [--quick]
    python benchmarks/spark_merge.py --target-rows 2000000 [--sources 0.01,0.1,1]
    python benchmarks/spark_merge.py --target-rows 200000 --ops update,compact

On a local path, ``local[2]``: a target of ``--target-rows`` rows (``id`` bigint, the
even numbers ``0, 2, ..., 2(N-1)``; ``v`` a 20-character string; ``n`` bigint), written
by ``s3ddb.spark_ext.write`` (Spark's own Parquet writer) in fragments of
``--fragment-rows`` (default: N / 20, at most 1,000,000), each holding one contiguous
id range. Sources of each ``--sources`` fraction of N rows, in two key layouts:

* ``spread``: every k-th id over the whole range, half of them existing (even ids),
  half new (odd ids, between existing ones): every fragment holds keys of it;
* ``clustered``: a contiguous range of existing ids in the last fragments (at most 5 %
  of them, and at most half the source), then new ids just above the maximum.

For each (size, layout), from the same data (the target is restored to version 1
before each run, and the files the previous merge wrote are removed):

* ``s3ddb``: ``s3ddb.spark_ext.merge_insert(spark, uri, source, "id")`` (update all
  matched, insert all unmatched; ``--writer jvm`` or ``python`` forces who writes the
  merged rows, default ``auto``, the library's choice); the driver Python process's
  peak RSS growth over its size just before the call (sampled from
  ``/proc/self/statm`` every 5 ms); the bytes of files it added under the dataset's
  root (data, deletion files, manifest, transaction);
* ``Spark rewrite``: the floor of a merge that rewrites everything, Spark's own upsert
  of the same Parquet files: ``spark.read.parquet(<the target's data files>)`` full
  outer joined with the source on ``id``, columns coalesced (source wins), written as
  Parquet to a fresh directory (bytes: its ``part-`` files).

Beside the merges (``--ops``, default ``merge,update,compact``), on the same target and
again beside Spark rewriting the same files:

* ``update``: ``s3ddb.spark_ext.update(spark, uri, {"v": "upper(v)"}, "id % 20 = 0",
  writer=<--writer>)`` (10 % of the rows), and through the other writer too (Spark's
  under ``auto`` and ``python``, Python tasks' under ``jvm``; a row without a target),
  beside Spark reading every file and writing every row with the same change applied
  where the condition holds;
* ``compact``: a second dataset of ``--compact-rows`` rows (default N / 10) written in
  ``--compact-fragments`` fragments (default 200), compacted by
  ``s3ddb.spark_ext.compact`` into fragments of up to 1,000,000 rows, beside Spark
  reading the same files and writing the same rows in as many files.

Each row of the tables gives rows per second through each writer: the rows s3ddb
wrote (updated and inserted; updated; compacted) and the rows the rewrite wrote, per
second of the whole operation.

Both results are checked: the merge's counts, the rewrite's row count, and in the
first round the same rows from both (count and an XOR of row hashes, the merged
version read with ``spark.read.format("s3ddb")``). Systems alternate within each round; the
best time of ``--rounds`` (default 2) counts, the driver's largest peak of any round.
Prints a Markdown table (with the target fragments each merge changed) and the
targets with PASS/MISS, and writes JSON to benchmarks/results/:

* driver Python peak growth <= 64 MiB at every source size, and the largest source's
  within 64 MiB of the smallest's (per layout);
* s3ddb / Spark rewrite, per source size (:func:`ratio_bound`): <= 1.0 ``spread`` and
  <= 0.6 ``clustered`` for a source as large as the target, and the ratios measured
  before Spark wrote the merge's rows (0.74 / 0.11 at 1 %, 0.85 / 0.29 at 10 %);
* update of 10 % of the rows <= 0.5x its rewrite; compaction <= 1.0x Spark reading
  and writing the same rows.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MIB = 2**20

#: Driver Python peak RSS growth bounds (MiB): per run, and largest minus smallest source.
PEAK_BOUND_MIB = 64
PEAK_SPREAD_MIB = 64
#: s3ddb / Spark rewrite time, per layout, for sources of 1 %, 10 % and 100 % of the
#: target (issue 46); other sizes take the bound of the next larger one listed.
RATIO_BOUNDS = {
    "spread": ((0.01, 0.74), (0.1, 0.85), (1.0, 1.0)),
    "clustered": ((0.01, 0.11), (0.1, 0.29), (1.0, 0.6)),
}
#: s3ddb / Spark rewrite time of the update and of the compaction.
UPDATE_BOUND, COMPACT_BOUND = 0.5, 1.0
#: The update's condition (10 % of the target's even ids) and change.
UPDATE_WHERE, UPDATE_VALUES = "id % 20 = 0", {"v": "upper(v)"}
OPS = ("merge", "update", "compact")
#: The clustered source's existing keys lie in at most this share of the fragments.
CLUSTER_SHARE = 0.05
LAYOUTS = ("spread", "clustered")


def ratio_bound(layout: str, fraction: float) -> float:
    """The s3ddb / rewrite bound of a source of ``fraction`` of the target."""
    for upto, bound in RATIO_BOUNDS[layout]:
        if fraction <= upto + 1e-9:
            return bound
    return RATIO_BOUNDS[layout][-1][1]


# --- data -------------------------------------------------------------------------------


def _partitions(rows: int, fragment_rows: int) -> int:
    return max(1, math.ceil(rows / fragment_rows))


def target_frame(spark: Any, rows: int, fragments: int) -> Any:
    """``rows`` rows with ids 0, 2, ..., in ``fragments`` contiguous id ranges."""
    return spark.range(0, rows, numPartitions=fragments).selectExpr(
        "id * 2 AS id",
        "SUBSTR(MD5(CAST(id AS STRING)), 1, 20) AS v",
        "id AS n",
    )


def clustered_existing(target_rows: int, fragments: int, source_rows: int) -> int:
    """How many of a clustered source's keys exist: at most half the source, all in
    the last ``CLUSTER_SHARE`` of the fragments (at least one). Spark splits
    ``range`` into partitions at ``i * rows // fragments``, as the target was written."""
    last = max(1, int(fragments * CLUSTER_SHARE))
    first_row = (fragments - last) * target_rows // fragments
    return min(math.ceil(source_rows / 2), target_rows - first_row)


def source_frame(
    spark: Any, layout: str, target_rows: int, fragments: int, rows: int, partitions: int
) -> tuple[Any, int]:
    """The source of ``layout`` with ``rows`` rows, and how many of its keys exist."""
    n = target_rows
    if layout == "spread":
        # Row j: 2 * floor(j * N / S), made odd (a new id) for odd j.
        key = f"2 * ((id * {n}) DIV {rows}) + id % 2"
        existing = math.ceil(rows / 2)
    else:
        existing = clustered_existing(n, fragments, rows)
        key = (
            f"CASE WHEN id < {existing} THEN 2 * ({n - existing} + id) "
            f"ELSE {2 * n - 1} + (id - {existing}) END"
        )
    frame = spark.range(0, rows, numPartitions=partitions).selectExpr(
        f"CAST({key} AS BIGINT) AS id",
        "SUBSTR(MD5(CONCAT('s', CAST(id AS STRING))), 1, 20) AS v",
        "id + 1 AS n",
    )
    return frame, existing


# --- measuring --------------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


class PeakRSS:
    """Samples this process's RSS every 5 ms while in the ``with`` block."""

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.idle = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            self._stop.wait(0.005)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.idle) / MIB


def files_under(root: Path) -> dict[str, int]:
    """Every file under ``root``: relative path -> size."""
    out = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            out[str(path.relative_to(root))] = path.stat().st_size
    return out


def bytes_added(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(size for path, size in after.items() if before.get(path) != size)


def reset_target(uri: str, pristine: set[str]) -> None:
    """Make version 1 the newest again, and remove the data and deletion files that
    only the versions since then reference (every run starts from the same files)."""
    import s3ddb

    s3ddb.dataset(uri).checkout_version(1).restore()
    root = Path(uri)
    for folder in ("data", "_deletions"):
        if (root / folder).exists():
            for path in (root / folder).iterdir():
                if str(path.relative_to(root)) not in pristine:
                    path.unlink()


def run_s3ddb(
    spark: Any, uri: str, source: Any, pristine: set[str], writer: str = "auto"
) -> dict[str, Any]:
    import s3ddb
    import s3ddb.spark_ext

    reset_target(uri, pristine)
    before = files_under(Path(uri))
    with PeakRSS() as rss:
        started = time.perf_counter()
        counts = s3ddb.spark_ext.merge_insert(spark, uri, source, "id", writer=writer)
        seconds = time.perf_counter() - started
    after = files_under(Path(uri))
    new = [p for p in after if p not in before]
    # Target fragments the merge changed: given a deletion file, or removed whole.
    kept = {f.id: f for f in s3ddb.dataset(uri).get_fragments()}
    touched = sum(
        1
        for f in s3ddb.dataset(uri).checkout_version(1).get_fragments()
        if f.id not in kept or kept[f.id].deletion_file is not None
    )
    return {
        "seconds": seconds,
        "peak_growth_mib": rss.growth_mib,
        "idle_rss_mib": rss.idle / MIB,
        "bytes_written": bytes_added(before, after),
        "fragments_touched": touched,
        "data_files": sum(1 for p in new if p.startswith("data")),
        "counts": counts,
    }


def run_rewrite(spark: Any, files: list[str], source: Any, out: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    target = spark.read.parquet(*files).alias("t")
    src = source.alias("s")
    joined = target.join(src, F.col("t.id") == F.col("s.id"), "full_outer").select(
        *(F.coalesce(F.col(f"s.{c}"), F.col(f"t.{c}")).alias(c) for c in ("id", "v", "n"))
    )
    joined.write.parquet(str(out))
    seconds = time.perf_counter() - started
    written = sum(size for path, size in files_under(out).items() if path.startswith("part-"))
    rows = spark.read.parquet(str(out)).count()
    return {"seconds": seconds, "bytes_written": written, "rows": rows}


def run_update(spark: Any, uri: str, pristine: set[str], writer: str) -> dict[str, Any]:
    import s3ddb.spark_ext

    reset_target(uri, pristine)
    before = files_under(Path(uri))
    with PeakRSS() as rss:
        started = time.perf_counter()
        counts = s3ddb.spark_ext.update(
            spark,
            uri,
            UPDATE_VALUES,
            UPDATE_WHERE,
            writer=writer,  # type: ignore[arg-type]
        )
        seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "peak_growth_mib": rss.growth_mib,
        "bytes_written": bytes_added(before, files_under(Path(uri))),
        "rows_written": counts["num_rows_updated"],
        "counts": counts,
    }


def run_update_rewrite(spark: Any, files: list[str], out: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    target = spark.read.parquet(*files)
    changed = F.expr(UPDATE_WHERE)
    updated = target.select(
        "id", F.when(changed, F.expr(UPDATE_VALUES["v"])).otherwise(F.col("v")).alias("v"), "n"
    )
    updated.write.parquet(str(out))
    seconds = time.perf_counter() - started
    written = sum(size for path, size in files_under(out).items() if path.startswith("part-"))
    return {
        "seconds": seconds,
        "bytes_written": written,
        "rows": spark.read.parquet(str(out)).count(),
    }


def run_compact(spark: Any, uri: str, pristine: set[str]) -> dict[str, Any]:
    import s3ddb.spark_ext

    reset_target(uri, pristine)
    before = files_under(Path(uri))
    with PeakRSS() as rss:
        started = time.perf_counter()
        metrics = s3ddb.spark_ext.compact(spark, uri, target_rows_per_fragment=1_000_000)
        seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "peak_growth_mib": rss.growth_mib,
        "bytes_written": bytes_added(before, files_under(Path(uri))),
        "fragments_removed": metrics.fragments_removed,
        "fragments_added": metrics.fragments_added,
    }


def run_compact_rewrite(spark: Any, files: list[str], rows: int, out: Path) -> dict[str, Any]:
    started = time.perf_counter()
    spark.read.parquet(*files).repartition(_partitions(rows, 1_000_000)).write.parquet(str(out))
    seconds = time.perf_counter() - started
    written = sum(size for path, size in files_under(out).items() if path.startswith("part-"))
    return {
        "seconds": seconds,
        "bytes_written": written,
        "rows": spark.read.parquet(str(out)).count(),
    }


def checksum(df: Any) -> tuple[int, int]:
    """Rows and an order-independent digest of every value: equal for equal row sets."""
    row = df.selectExpr("COUNT(*)", "BIT_XOR(XXHASH64(id, v, n))").collect()[0]
    return int(row[0]), int(row[1] or 0)


def warm_up(spark: Any, root: Path) -> None:
    """One small merge and rewrite: the JVM's and the Python workers' first-use costs
    stay out of the measured runs."""
    import s3ddb.spark_ext

    uri = str(root / "warm-up")
    s3ddb.spark_ext.write(target_frame(spark, 20_000, 2), uri, mode="append")
    files = [str(p) for p in sorted((root / "warm-up" / "data").iterdir())]
    source, _ = source_frame(spark, "spread", 20_000, 2, 2_000, 2)
    for writer in ("jvm", "python"):  # both writers' first-use costs
        s3ddb.spark_ext.merge_insert(spark, uri, source, "id", writer=writer)
    run_rewrite(spark, files, source, root / "warm-up-rewrite")
    checksum(spark.read.format("s3ddb").load(uri))
    shutil.rmtree(uri, ignore_errors=True)
    shutil.rmtree(root / "warm-up-rewrite", ignore_errors=True)


# --- report -----------------------------------------------------------------------------


def _mib(n: float) -> str:
    return f"{n / MIB:,.1f}"


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Print the Markdown table and the targets; return the target checks."""
    if not runs:
        return []
    print(
        f"\n{args.target_rows:,} target rows in {args.fragments} fragments of "
        f"<= {args.fragment_rows:,} rows, local[{args.cores}], best of {args.rounds} "
        f"round(s)\n"
    )
    head = [
        "source rows",
        "layout",
        "updated / inserted",
        "s3ddb s",
        "Spark rewrite s",
        "s3ddb / rewrite",
        "s3ddb rows/s",
        "rewrite rows/s",
        "driver peak +MiB",
        "s3ddb MiB written",
        "rewrite MiB written",
        "fragments touched",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in runs:
        s, w = r["s3ddb"], r["rewrite"]
        cells = [
            f"{r['source_rows']:,}",
            r["layout"],
            f"{s['counts']['num_updated_rows']:,} / {s['counts']['num_inserted_rows']:,}",
            f"{s['seconds']:.2f}",
            f"{w['seconds']:.2f}",
            f"{r['ratio']:.2f}",
            _rate(s["counts"]["num_updated_rows"] + s["counts"]["num_inserted_rows"], s["seconds"]),
            _rate(w["rows"], w["seconds"]),
            f"{s['peak_growth_mib']:,.1f}",
            _mib(s["bytes_written"]),
            _mib(w["bytes_written"]),
            f"{s['fragments_touched']} of {args.fragments}",
        ]
        print("| " + " | ".join(cells) + " |")

    checks: list[dict[str, Any]] = []

    def check(name: str, value: float, bound: float, unit: str) -> None:
        met = value <= bound
        checks.append({"target": name, "value": value, "bound": bound, "met": met})
        shown = f"{value:.3f}" if unit == "x" else f"{value:,.2f}"
        print(f"  {'PASS' if met else 'MISS'}  {name}: {shown}{unit} (<= {bound:g}{unit})")

    print("\ntargets:")
    sizes = sorted({r["source_rows"] for r in runs})
    for size in sizes:
        peak = max(r["s3ddb"]["peak_growth_mib"] for r in runs if r["source_rows"] == size)
        check(f"driver peak growth, {size:,}-row sources", peak, PEAK_BOUND_MIB, " MiB")
    for layout in LAYOUTS:
        by_size = {r["source_rows"]: r for r in runs if r["layout"] == layout}
        if len(by_size) > 1:
            grow = (
                by_size[sizes[-1]]["s3ddb"]["peak_growth_mib"]
                - by_size[sizes[0]]["s3ddb"]["peak_growth_mib"]
            )
            check(
                f"driver peak, {sizes[-1]:,} rows minus {sizes[0]:,} rows, {layout}",
                grow,
                PEAK_SPREAD_MIB,
                " MiB",
            )
    for r in runs:
        check(
            f"s3ddb / Spark rewrite, {r['source_rows']:,} rows, {r['layout']}",
            r["ratio"],
            ratio_bound(r["layout"], r["fraction"]),
            "x",
        )
    return checks


# --- main -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target-rows", type=int, help="rows of the target (default 20,000,000)")
    parser.add_argument(
        "--fragment-rows", type=int, help="rows per fragment (default N / 20, <= 1,000,000)"
    )
    parser.add_argument(
        "--sources",
        default="0.01,0.1,1",
        help="source sizes as fractions of the target, each <= 1 (default 0.01,0.1,1)",
    )
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="spread,clustered")
    parser.add_argument("--ops", default=",".join(OPS), help="merge,update,compact")
    parser.add_argument("--compact-rows", type=int, help="rows compacted (default N / 10)")
    parser.add_argument(
        "--compact-fragments", type=int, default=200, help="small fragments compacted"
    )
    parser.add_argument(
        "--writer",
        default="auto",
        choices=("auto", "jvm", "python"),
        help="merge_insert's and update's writer: who writes their rows (default auto)",
    )
    parser.add_argument("--rounds", type=int, help="rounds, the best time counts (default 2)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: a 200,000-row target, one round"
    )
    args = parser.parse_args(argv)
    if args.target_rows is None:
        args.target_rows = 200_000 if args.quick else 20_000_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.fragment_rows is None:
        args.fragment_rows = max(1, min(1_000_000, args.target_rows // 20))
    args.fractions = [float(x) for x in args.sources.split(",") if x.strip()]
    if not args.fractions or any(not 0 < f <= 1 for f in args.fractions):
        parser.error("--sources: fractions in (0, 1]")
    args.layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    if not args.layouts or set(args.layouts) - set(LAYOUTS):
        parser.error(f"--layouts: choose from {LAYOUTS}")
    args.fragments = _partitions(args.target_rows, args.fragment_rows)
    args.ops = [x.strip() for x in args.ops.split(",") if x.strip()]
    if not args.ops or set(args.ops) - set(OPS):
        parser.error(f"--ops: choose from {OPS}")
    if args.compact_rows is None:
        args.compact_rows = max(args.compact_fragments, args.target_rows // 10)
    return args


def _best(got: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    best = {k: dict(min(v, key=lambda r: r["seconds"])) for k, v in got.items()}
    # The driver's peak counts in every round, not only the fastest (s3ddb's runs
    # measure it, whichever writer; the rewrite's do not).
    for k, v in got.items():
        if "peak_growth_mib" in v[0]:
            best[k]["peak_growth_mib"] = max(r["peak_growth_mib"] for r in v)
    return best


def bench_update(
    spark: Any, uri: str, files: list[str], pristine: set[str], root: Path, args: Any
) -> dict[str, Any]:
    """The update of 10 % of the target's rows beside its rewrite, best of the rounds:
    as ``--writer`` says (``s3ddb``), and through the other writer too (``other``:
    Spark's writer under ``auto`` and ``python``, Python tasks under ``jvm``)."""
    other = "python" if args.writer == "jvm" else "jvm"
    got: dict[str, list[dict[str, Any]]] = {"s3ddb": [], "other": [], "rewrite": []}
    want = len(range(0, 2 * args.target_rows, 20))
    for i in range(args.rounds):
        for system in ["s3ddb", "other", "rewrite"][:: 1 if i % 2 == 0 else -1]:
            if system != "rewrite":
                writer = args.writer if system == "s3ddb" else other
                result = run_update(spark, uri, pristine, writer)
                assert result["rows_written"] == want, (result["counts"], want)
            else:
                out = root / f"update-rewrite-{i}"
                result = run_update_rewrite(spark, files, out)
                shutil.rmtree(out, ignore_errors=True)
                assert result["rows"] == args.target_rows, result
                result["rows_written"] = result["rows"]
            got[system].append(result)
        print(
            f"update, round {i + 1}: s3ddb {got['s3ddb'][-1]['seconds']:.2f} s "
            f"(writer={args.writer}; writer={other} {got['other'][-1]['seconds']:.2f} s), "
            f"rewrite {got['rewrite'][-1]['seconds']:.2f} s",
            flush=True,
        )
    best = _best(got)
    reset_target(uri, pristine)
    ratio = best["s3ddb"]["seconds"] / best["rewrite"]["seconds"]
    return {
        "op": f"update (writer={args.writer})",
        "rows": want,
        **best,
        "ratio": ratio,
        "bound": UPDATE_BOUND,
        "other_writer": other,
    }


def bench_compact(spark: Any, root: Path, args: Any) -> dict[str, Any]:
    """Compaction of ``--compact-fragments`` small fragments beside Spark reading and
    writing the same rows, best of the rounds."""
    import s3ddb
    import s3ddb.spark_ext

    uri = str(root / "small")
    rows, fragments = args.compact_rows, args.compact_fragments
    per = math.ceil(rows / fragments)
    frame = target_frame(spark, rows, fragments)
    s3ddb.spark_ext.write(frame, uri, mode="append", max_rows_per_file=per)
    assert len(s3ddb.dataset(uri).get_fragments()) == fragments, "bad compaction target"
    pristine = set(files_under(Path(uri)))
    files = sorted(str(Path(uri, p)) for p in pristine if p.startswith("data/"))
    got: dict[str, list[dict[str, Any]]] = {"s3ddb": [], "rewrite": []}
    for i in range(args.rounds):
        for system in ["s3ddb", "rewrite"][:: 1 if i % 2 == 0 else -1]:
            if system == "s3ddb":
                result = run_compact(spark, uri, pristine)
                assert result["fragments_removed"] == fragments, result
                assert s3ddb.dataset(uri).count_rows() == rows
            else:
                out = root / f"compact-rewrite-{i}"
                result = run_compact_rewrite(spark, files, rows, out)
                shutil.rmtree(out, ignore_errors=True)
                assert result["rows"] == rows, result
            result["rows_written"] = rows
            got[system].append(result)
        print(
            f"compact, round {i + 1}: s3ddb {got['s3ddb'][-1]['seconds']:.2f} s, "
            f"rewrite {got['rewrite'][-1]['seconds']:.2f} s",
            flush=True,
        )
    best = _best(got)
    ratio = best["s3ddb"]["seconds"] / best["rewrite"]["seconds"]
    return {
        "op": f"compact {fragments} fragments",
        "rows": rows,
        **best,
        "ratio": ratio,
        "bound": COMPACT_BOUND,
    }


def report_others(others: list[dict[str, Any]], args: Any) -> list[dict[str, Any]]:
    """Print the update and compaction table and their targets; return the checks."""
    if not others:
        return []
    head = [
        "operation",
        "rows",
        "s3ddb s",
        "Spark rewrite s",
        "s3ddb / rewrite",
        "s3ddb rows/s",
        "rewrite rows/s",
        "driver peak +MiB",
    ]
    print("\n| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    checks = []
    for r in others:
        w = r["rewrite"]
        rows = [(r["op"], r["s3ddb"])]
        if "other" in r:  # the update through the other writer, without a target
            rows.append((f"update (writer={r['other_writer']})", r["other"]))
        for op, s in rows:
            cells = [
                op,
                f"{r['rows']:,}",
                f"{s['seconds']:.2f}",
                f"{w['seconds']:.2f}",
                f"{s['seconds'] / w['seconds']:.2f}",
                _rate(s["rows_written"], s["seconds"]),
                _rate(w["rows_written"], w["seconds"]),
                f"{s['peak_growth_mib']:,.1f}",
            ]
            print("| " + " | ".join(cells) + " |")
    print("\ntargets:")
    for r in others:
        met = r["ratio"] <= r["bound"]
        checks.append({"target": r["op"], "value": r["ratio"], "bound": r["bound"], "met": met})
        print(f"  {'PASS' if met else 'MISS'}  s3ddb / rewrite, {r['op']}: {r['ratio']:.3f}x")
    return checks


def _rate(rows: int, seconds: float) -> str:
    if seconds <= 0:
        return "-"
    rate = rows / seconds
    return f"{rate / 1e6:,.2f} M" if rate >= 1e6 else f"{rate / 1e3:,.1f} k"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import s3ddb
    import s3ddb.spark_ext

    builder = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .appName("s3ddb-bench-spark-merge")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", args.driver_memory)
    )
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = s3ddb.spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    root = Path(tempfile.mkdtemp(prefix="s3ddb-spark-merge-"))
    runs: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    try:
        warm_up(spark, root)
        uri = str(root / "target")
        started = time.perf_counter()
        target = target_frame(spark, args.target_rows, args.fragments)
        s3ddb.spark_ext.write(target, uri, mode="append", max_rows_per_file=args.fragment_rows)
        ds = s3ddb.dataset(uri)
        assert ds.version == 1 and ds.count_rows() == args.target_rows, "bad target"
        print(
            f"target: {args.target_rows:,} rows, {len(ds.get_fragments())} fragments, "
            f"written in {time.perf_counter() - started:.1f} s; merge writer: {args.writer}"
        )
        pristine = set(files_under(Path(uri)))
        files = sorted(str(Path(uri, p)) for p in pristine if p.startswith("data/"))
        for fraction in args.fractions if "merge" in args.ops else []:
            rows = max(2, round(args.target_rows * fraction))
            partitions = max(args.cores, _partitions(rows, 1_000_000))
            for layout in args.layouts:
                source, existing = source_frame(
                    spark, layout, args.target_rows, args.fragments, rows, partitions
                )
                got: dict[str, list[dict[str, Any]]] = {"s3ddb": [], "rewrite": []}
                for i in range(args.rounds):
                    for system in ["s3ddb", "rewrite"][:: 1 if i % 2 == 0 else -1]:
                        if system == "s3ddb":
                            result = run_s3ddb(spark, uri, source, pristine, args.writer)
                            expected = {
                                "num_inserted_rows": rows - existing,
                                "num_updated_rows": existing,
                                "num_deleted_rows": 0,
                            }
                            assert result["counts"] == expected, (result["counts"], expected)
                        else:
                            out = root / f"rewrite-{i}"
                            result = run_rewrite(spark, files, source, out)
                            want = args.target_rows + rows - existing
                            assert result["rows"] == want, (result["rows"], want)
                        got[system].append(result)
                    if i == 0:
                        # Round 1 ran s3ddb first: the dataset still holds its result.
                        # Through the Python data source: the native read would send
                        # every deleted position from this process (millions here).
                        merged = checksum(spark.read.format("s3ddb").load(uri))
                        rewritten = checksum(spark.read.parquet(str(out)))
                        assert merged == rewritten, f"s3ddb {merged} != rewrite {rewritten}"
                    shutil.rmtree(out, ignore_errors=True)
                    print(
                        f"{rows:,} rows, {layout}, round {i + 1}: "
                        f"s3ddb {got['s3ddb'][-1]['seconds']:.2f} s, "
                        f"rewrite {got['rewrite'][-1]['seconds']:.2f} s",
                        flush=True,
                    )
                best = {k: dict(min(v, key=lambda r: r["seconds"])) for k, v in got.items()}
                # The driver's peak counts in every round, not only the fastest.
                best["s3ddb"]["peak_growth_mib"] = max(r["peak_growth_mib"] for r in got["s3ddb"])
                runs.append(
                    {
                        "source_rows": rows,
                        "fraction": fraction,
                        "layout": layout,
                        "existing_keys": existing,
                        "s3ddb": best["s3ddb"],
                        "rewrite": best["rewrite"],
                        "ratio": best["s3ddb"]["seconds"] / best["rewrite"]["seconds"],
                    }
                )
        if "update" in args.ops:
            others.append(bench_update(spark, uri, files, pristine, root, args))
        if "compact" in args.ops:
            others.append(bench_compact(spark, root, args))
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    checks = report(runs, args) + report_others(others, args)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"spark-merge-{time.strftime('%Y%m%dT%H%M%S')}.json"
    result = {"args": vars(args), "runs": runs, "others": others, "checks": checks}
    out.write_text(json.dumps(result, indent=2))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
