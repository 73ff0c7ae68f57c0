"""A whole Spark application that appends rows to an s3ddb dataset, then exits.

    python -m s3ddb.spark_ext.append_app URI --start 0 --rows 1000 \\
        [--option KEY=VALUE ...] [--tag NAME]

It appends ids ``start .. start+rows-1`` (``id`` bigint, ``app`` string, ``value``
double) with ``df.write.format("s3ddb").mode("append")``, in its own SparkSession
(``local[1]``), and prints one JSON line: ``{"app": ..., "rows": ..., "latest_version": ...}``.
The demo and the tests start several at once to show that separate Spark
applications commit to one dataset through DynamoDB without losing a row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = [
    "main",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m s3ddb.spark_ext.append_app")
    parser.add_argument("uri")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--name", default=f"append-app-{os.getpid()}")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="storage option"
    )
    args = parser.parse_args(argv)
    options = dict(o.split("=", 1) for o in args.option)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import s3ddb
    import s3ddb.spark_ext

    builder = (
        SparkSession.builder.master("local[1]")
        .appName(args.name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "512m")
    )
    spark = s3ddb.spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.range(args.start, args.start + args.rows, numPartitions=args.partitions)
        df = df.selectExpr("id", f"'{args.name}' AS app", "CAST(id AS DOUBLE) / 2 AS value")
        df.write.format("s3ddb").mode("append").options(**options).save(args.uri)
    finally:
        spark.stop()
    ds = s3ddb.dataset(args.uri, storage_options=options)
    print(
        json.dumps({"app": args.name, "rows": args.rows, "latest_version": ds.version}), flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
