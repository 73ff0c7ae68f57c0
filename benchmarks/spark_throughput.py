"""Spark throughput: the ``s3ddb`` data source beside Spark's own Parquet, one run.

    python benchmarks/spark_throughput.py [--rows 3000000] [--rounds 3] [--cores 2]
        [--wide-rows 1000000] [--quick]

Then the wide-table read queries of ``benchmarks/spark_wide_read.py`` (the native
path, the projected Python path and ``spark.read.parquet`` on the same files) run in
the same session; ``--wide-rows 0`` skips them, ``--quick`` runs both sections small.

On a local path, the same DataFrame (``id`` bigint, ``k`` int, ``x`` double, ``s``
string) is written by ``df.write.format("s3ddb")`` and by ``df.write.parquet``, and
read back whole by ``spark.read.format("s3ddb")`` and ``spark.read.parquet`` (into
Spark's ``noop`` sink, so every column of every row is materialized and nothing is
pruned away). The systems alternate within each round; the best round of each counts.
Prints rows/s for each and the s3ddb/Parquet ratio (target: >= 0.8 for both), and
writes JSON to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import spark_wide_read  # a sibling script: Python puts this folder on the path

RESULTS = Path(__file__).resolve().parent / "results"


def _floor_source() -> Any:
    """A minimal Python data source, for the floor any Python data source pays to move
    rows between Spark and Python: its reader hands pyarrow's batches of the s3ddb
    dataset's own Parquet files to Spark untouched; its writer drops what it gets."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    class FloorReader(DataSourceReader):
        def __init__(self, files: list[str]) -> None:
            self.files = files

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(f) for f in self.files]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pq.read_table(partition.value)
            # Spark checks batches against the declared (nullable, plain) schema.
            yield from pa.Table.from_arrays(table.columns, names=table.column_names).to_batches()

    class FloorWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _batch in iterator:
                pass
            return WriterCommitMessage()

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python_floor"

        def schema(self) -> str:
            return "id BIGINT, k INT, x DOUBLE, s STRING"

        def reader(self, schema: Any) -> FloorReader:
            return FloorReader(self.options["files"].split(","))

        def writer(self, schema: Any, overwrite: bool) -> FloorWriter:
            return FloorWriter()

    return FloorSource


def _timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    parser.add_argument("--wide-rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.rounds, args.wide_rows = 50_000, 1, 20_000

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import s3ddb
    import s3ddb.spark_ext

    builder = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
    )
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = s3ddb.spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    root = Path(tempfile.mkdtemp(prefix="s3ddb-spark-bench-"))
    source = (
        spark.range(0, args.rows, numPartitions=args.partitions)
        .selectExpr(
            "id",
            "CAST(id % 1000 AS INT) AS k",
            "CAST(id AS DOUBLE) * 1.5 AS x",
            "CONCAT('row-', CAST(id AS STRING)) AS s",
        )
        .cache()
    )
    source.count()  # materialize once: both writers read the same cached rows

    def write_s3ddb(path: Path) -> None:
        source.write.format("s3ddb").mode("overwrite").save(str(path))

    def write_parquet(path: Path) -> None:
        source.write.mode("overwrite").parquet(str(path))

    def read_s3ddb(path: Path) -> None:
        spark.read.format("s3ddb").load(str(path)).write.format("noop").mode("overwrite").save()

    def read_parquet(path: Path) -> None:
        spark.read.parquet(str(path)).write.format("noop").mode("overwrite").save()

    spark.dataSource.register(_floor_source())

    def write_floor(path: Path) -> None:
        source.write.format("python_floor").mode("append").save()

    def read_floor(path: Path) -> None:
        from s3ddb.format import layout

        ds = s3ddb.dataset(str(path))
        files = [str(path / layout.data_file_path(d.path)) for f in ds.get_fragments()
                 for d in f.files]  # fmt: skip
        reader = spark.read.format("python_floor").option("files", ",".join(files)).load()
        reader.write.format("noop").mode("overwrite").save()

    kinds = ("s3ddb", "parquet", "floor")
    times: dict[str, list[float]] = {f"{k} {op}": [] for op in ("write", "read") for k in kinds}
    writers = {"s3ddb": write_s3ddb, "parquet": write_parquet, "floor": write_floor}
    readers = {"s3ddb": read_s3ddb, "parquet": read_parquet, "floor": read_floor}
    try:
        for i in range(args.rounds):
            ds_path, pq_path = root / f"s3ddb-{i}", root / f"parquet-{i}"
            # The floor reads the s3ddb dataset's files: it runs after s3ddb wrote them.
            order = [("s3ddb", ds_path), ("parquet", pq_path), ("floor", ds_path)]
            if i % 2:
                order = [order[1], order[0], order[2]]
            for system, path in order:
                times[f"{system} write"].append(_timed(lambda w=writers[system], p=path: w(p)))
            for system, path in order:
                times[f"{system} read"].append(_timed(lambda r=readers[system], p=path: r(p)))
            print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()))
        written = s3ddb.dataset(str(root / "s3ddb-0"))
        assert written.count_rows() == args.rows, "the s3ddb write lost rows"
        wide = spark_wide_read.run(spark, args.wide_rows, args.rounds) if args.wide_rows else None
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    best = {k: min(v) for k, v in times.items()}
    rate = {k: args.rows / v for k, v in best.items()}
    ratios = {op: rate[f"s3ddb {op}"] / rate[f"parquet {op}"] for op in ("write", "read")}
    floors = {op: rate[f"floor {op}"] / rate[f"parquet {op}"] for op in ("write", "read")}
    print(f"\n{args.rows:,} rows, local[{args.cores}], best of {args.rounds} rounds")
    print(
        f"{'':8}{'s3ddb rows/s':>15}{'Parquet rows/s':>16}{'ratio':>7}  target"
        f"{'floor rows/s':>18}{'floor ratio':>13}{'s3ddb/floor':>13}"
    )
    for op in ("write", "read"):
        s, p, f = rate[f"s3ddb {op}"], rate[f"parquet {op}"], rate[f"floor {op}"]
        met = "met   " if ratios[op] >= 0.8 else "MISSED"
        print(
            f"{op:8}{s:>15,.0f}{p:>16,.0f}{ratios[op]:>7.2f}  >= 0.8 {met}"
            f"{f:>12,.0f}{floors[op]:>13.2f}{s / f:>13.2f}"
        )
    print("floor: a Python data source that only moves the same rows between Spark and Python")
    if wide is not None:
        print("\n" + spark_wide_read.report(wide))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"spark-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "seconds": times,
                "ratios": ratios,
                "floor_ratios": floors,
                "wide_read": wide,
            },
            indent=2,
        )
    )
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
