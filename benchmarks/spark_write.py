"""Spark writes: s3ddb's native path beside Spark's own Parquet writer, one run.

    python benchmarks/spark_write.py [--rows 1000000] [--rounds 3] [--cores 2]

On a local path, one cached wide DataFrame (``id`` bigint, ``k`` int, 16 doubles
``d0``..``d15``, 2 strings ``s0``, ``s1``) is written by ``df.write.parquet`` (the
reference), by ``s3ddb.spark_ext.write`` (Spark's Parquet writer, then one s3ddb
commit) and by ``df.write.format("s3ddb")`` (the Python data source). The systems
alternate within each round; the best round of each counts. Prints each time and
its ratio to Spark Parquet (target for the native path: <= 1.15x), and writes JSON
to benchmarks/results/. :func:`measure_writes` is the part other Spark benchmarks
reuse.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

#: The native write's target, as a multiple of ``df.write.parquet``'s time.
NATIVE_TARGET = 1.15


def wide_frame(spark: Any, rows: int, partitions: int) -> Any:
    """The issue's wide table: id, k, 16 doubles, 2 strings."""
    doubles = [f"CAST(id AS DOUBLE) * {i + 1}.5 AS d{i}" for i in range(16)]
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id",
        "CAST(id % 1000 AS INT) AS k",
        *doubles,
        "CONCAT('row-', CAST(id AS STRING)) AS s0",
        "CONCAT('kind-', CAST(id % 97 AS STRING)) AS s1",
    )


def measure_writes(source: Any, root: Path, rounds: int) -> dict[str, list[float]]:
    """Seconds per round of each way of writing ``source`` (cached) under ``root``:
    ``parquet``, ``s3ddb native``, ``s3ddb python``. Each s3ddb write is checked to
    hold every row."""
    import s3ddb
    import s3ddb.spark_ext

    rows = source.count()

    def parquet(path: Path) -> None:
        source.write.mode("overwrite").parquet(str(path))

    def native(path: Path) -> None:
        s3ddb.spark_ext.write(source, str(path), mode="overwrite")

    def python(path: Path) -> None:
        source.write.format("s3ddb").mode("overwrite").save(str(path))

    systems: dict[str, Callable[[Path], None]] = {
        "parquet": parquet,
        "s3ddb native": native,
        "s3ddb python": python,
    }
    times: dict[str, list[float]] = {name: [] for name in systems}
    for i in range(rounds):
        order = list(systems.items())
        order = order[i % len(order) :] + order[: i % len(order)]
        for name, action in order:
            path = root / f"{name.replace(' ', '-')}-{i}"
            started = time.perf_counter()
            action(path)
            times[name].append(time.perf_counter() - started)
            if name != "parquet":
                assert s3ddb.dataset(str(path)).count_rows() == rows, f"{name} lost rows"
            shutil.rmtree(path, ignore_errors=True)
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import s3ddb.spark_ext

    builder = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
    )
    spark = s3ddb.spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    root = Path(tempfile.mkdtemp(prefix="s3ddb-spark-write-"))
    try:
        source = wide_frame(spark, args.rows, args.partitions).cache()
        source.count()  # every writer reads the same cached rows
        times = measure_writes(source, root, args.rounds)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    best = {k: min(v) for k, v in times.items()}
    ratios = {k: v / best["parquet"] for k, v in best.items()}
    print(f"\n{args.rows:,} rows x 20 columns, local[{args.cores}], best of {args.rounds} rounds")
    print(f"{'':14}{'seconds':>9}{'x Parquet':>11}")
    for name, seconds in best.items():
        note = ""
        if name == "s3ddb native":
            note = f"  target <= {NATIVE_TARGET}: " + (
                "met" if ratios[name] <= NATIVE_TARGET else "MISSED"
            )
        print(f"{name:14}{seconds:>9.2f}{ratios[name]:>11.2f}{note}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"spark-write-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "seconds": times, "ratios": ratios}, indent=2))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
