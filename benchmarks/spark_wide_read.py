"""Spark reads of a wide table: s3ddb's native path, its Python data source (projected)
and ``spark.read.parquet`` on the same files, in one session.

    python benchmarks/spark_wide_read.py [--rows 1000000] [--rounds 3] [--quick]

(``benchmarks/spark_throughput.py`` runs this section too.) The table has 20 columns:
``id`` bigint, ``k`` int (``id % 100``), ``d0``..``d15`` double, ``s0``, ``s1``
string, written once by s3ddb in fragments of a quarter of the rows. Each query runs on
the version without deletions and on one where 1% of the rows (``id % 100 = 7``, in
every fragment) are deleted:

* ``full``: every column of every row into Spark's ``noop`` sink;
* ``sum(d3)``: one column of twenty;
* ``k = 7 count``: a selective filter (1%), counted;
* ``id = X``: a point lookup.

``native`` is ``s3ddb.spark_ext.read`` (planning included in each query's time),
``python`` the ``s3ddb`` data source given only the query's columns
(``.schema(...)``; the full scan and the lookup take all), ``parquet``
``spark.read.parquet`` of the same data files (deleted rows included: it is the floor,
not an equal). Systems alternate within each round; each one's best round counts.
Answers are checked: native and python agree with each other and with
``s3ddb.dataset(...)`` for every query. Speed is printed, never asserted.
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

QUERIES = ("full", "sum(d3)", "k = 7 count", "id = X")
SYSTEMS = ("native", "python", "parquet")
#: Targets of the time ratio to ``spark.read.parquet`` (lower is better).
TARGETS = {"native": 1.15, "native deleted": 1.3, "python sum(d3)": 1.5}


def make_table(rows: int) -> Any:
    """The wide table: id, k, d0..d15, s0, s1."""
    import numpy as np
    import pyarrow as pa

    ids = np.arange(rows, dtype=np.int64)
    columns: dict[str, Any] = {"id": ids, "k": (ids % 100).astype(np.int32)}
    rng = np.random.default_rng(7)
    for i in range(16):
        columns[f"d{i}"] = rng.random(rows)
    columns["s0"] = pa.array([f"name-{i % 5000}" for i in range(rows)])
    columns["s1"] = pa.array([f"{i:012d}" for i in range(rows)])
    return pa.table(columns)


def _queries(lookup: int) -> dict[str, tuple[list[str] | None, Callable[[Any], Any]]]:
    """query -> (the columns a projected Python read takes (None: all), the action)."""
    from pyspark.sql import functions as F

    def full(df: Any) -> Any:
        df.write.format("noop").mode("overwrite").save()
        return None

    return {
        "full": (None, full),
        "sum(d3)": (["d3"], lambda df: df.agg(F.sum("d3")).collect()[0][0]),
        "k = 7 count": (["k"], lambda df: df.filter("k = 7").count()),
        "id = X": (None, lambda df: [r.asDict() for r in df.filter(f"id = {lookup}").collect()]),
    }


def _frame(spark: Any, system: str, uri: str, version: int, columns: list[str] | None,
           files: list[str]) -> Any:  # fmt: skip
    import s3ddb.spark_ext

    if system == "native":
        return s3ddb.spark_ext.read(spark, uri, version, native=True)
    if system == "python":
        reader = spark.read.format("s3ddb").option("version", str(version))
        if columns is not None:
            reader = reader.option("columns", ",".join(columns))
        return reader.load(uri)
    return spark.read.parquet(*files)


def _agree(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))
    return bool(a == b)


def run(spark: Any, rows: int, rounds: int) -> dict[str, Any]:
    """Write the table, run every query on every system, check the answers; returns
    {"seconds": {"<version> <query> <system>": [..]}, "ratios": {...}}."""
    import pyarrow.compute as pc

    import s3ddb
    from s3ddb.format import layout

    root = Path(tempfile.mkdtemp(prefix="s3ddb-spark-wide-"))
    uri = str(root / "wide")
    try:
        table = make_table(rows)
        ds = s3ddb.write_dataset(table, uri, max_rows_per_file=max(1, rows // 4))
        ds.delete("id % 100 = 7")
        files = [str(Path(uri) / layout.data_file_path(d.path))
                 for f in ds.get_fragments() for d in f.files]  # fmt: skip
        lookup = rows // 2 + 1
        truth = {
            1: {"k = 7 count": rows // 100 + (1 if rows % 100 > 7 else 0)},
            2: {"k = 7 count": 0},
        }
        for version in (1, 2):
            pinned = s3ddb.dataset(uri, version).to_table(columns=["d3"])
            truth[version]["sum(d3)"] = pc.sum(pinned["d3"]).as_py()
        queries = _queries(lookup)
        seconds: dict[str, list[float]] = {}
        for i in range(rounds):
            order = SYSTEMS if i % 2 == 0 else tuple(reversed(SYSTEMS))
            for version in (1, 2):
                for query, (columns, action) in queries.items():
                    answers = {}
                    for system in order:
                        started = time.perf_counter()
                        df = _frame(spark, system, uri, version, columns, files)
                        answers[system] = action(df)
                        elapsed = time.perf_counter() - started
                        seconds.setdefault(f"v{version} {query} {system}", []).append(elapsed)
                    _check(version, query, answers, truth)
            print(f"round {i + 1} of {rounds} done", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    best = {k: min(v) for k, v in seconds.items()}
    ratios = {}
    for version in (1, 2):
        for query in QUERIES:
            base = best[f"v{version} {query} parquet"]
            for system in ("native", "python"):
                ratios[f"v{version} {query} {system}"] = best[f"v{version} {query} {system}"] / base
    return {"rows": rows, "rounds": rounds, "seconds": seconds, "best": best, "ratios": ratios}


def _check(version: int, query: str, answers: dict[str, Any], truth: dict[int, Any]) -> None:
    native, python = answers["native"], answers["python"]
    if not _agree(native, python):
        raise AssertionError(f"v{version} {query}: native {native!r} != python {python!r}")
    if query in truth[version] and not _agree(native, truth[version][query]):
        expected = truth[version][query]
        raise AssertionError(f"v{version} {query}: {native!r}, s3ddb says {expected!r}")
    if query == "id = X" and len(native) != 1:
        raise AssertionError(f"v{version} {query}: {len(native)} rows, not 1")
    if version == 1 and not _agree(native, answers["parquet"]):
        raise AssertionError(f"v1 {query}: native {native!r} != parquet {answers['parquet']!r}")


def report(result: dict[str, Any]) -> str:
    """The results table: each system's best time and its ratio to Parquet."""
    best, ratios = result["best"], result["ratios"]
    lines = [
        f"wide table: {result['rows']:,} rows x 20 columns, best of {result['rounds']} rounds",
        f"{'version':<14}{'query':<14}{'parquet s':>10}{'native s':>10}{'python s':>10}"
        f"{'native/pq':>11}{'python/pq':>11}",
    ]
    for version, label in ((1, "no deletions"), (2, "1% deleted")):
        for query in QUERIES:
            key = f"v{version} {query}"
            lines.append(
                f"{label:<14}{query:<14}{best[key + ' parquet']:>10.3f}"
                f"{best[key + ' native']:>10.3f}{best[key + ' python']:>10.3f}"
                f"{ratios[key + ' native']:>11.2f}{ratios[key + ' python']:>11.2f}"
            )
    lines.append(
        "targets: native <= 1.15 (<= 1.3 with deletions); python sum(d3) <= 1.5 (projected)"
    )
    return "\n".join(lines)


def session(cores: int, confs: list[str]) -> Any:
    """A local session as the benchmarks use it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import s3ddb.spark_ext

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", str(cores * 2))
    )
    for item in confs:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = s3ddb.spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, one round")
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    rows, rounds = (20_000, 1) if args.quick else (args.rows, args.rounds)
    spark = session(args.cores, args.conf)
    try:
        result = run(spark, rows, rounds)
    finally:
        spark.stop()
    print(report(result))
    out = args.json or RESULTS / f"spark-wide-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
