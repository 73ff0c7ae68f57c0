"""A Spark application (``local[2,2]``: a failed task is retried once) whose native
writes have every task's first attempt fail after writing rows, for the tests of
``s3ddb.spark_ext.write``.

    python -m tests.support.native_write_app URI --rows N [--hang MARKER]
        [--first-uri URI0 --first-rows N0]

Prints one JSON line per write it finished: ``{"uri": ..., "version": ...}``. With
``--hang``, no attempt of the write to URI fails; instead task 1 writes some rows,
creates the file MARKER and waits to be killed (task 0 finishes: the staging folder
holds files of both), for crash tests. With ``--first-uri``, a write of N0 rows whose
first attempts fail goes to URI0 before that one, in the same application: a test of
retried attempts and a crash test then start one JVM between them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.native_write_app")
    parser.add_argument("uri")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--hang", default=None)
    parser.add_argument("--first-uri", default=None)
    parser.add_argument("--first-rows", type=int, default=1000)
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import SparkSession

    import s3ddb.spark_ext

    builder = (
        SparkSession.builder.master("local[2,2]")
        .appName("s3ddb-native-write-app")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    )
    spark = s3ddb.spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def first_attempts_fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        for i, batch in enumerate(batches):
            if context is not None and context.attemptNumber() == 0 and i == 2:
                raise RuntimeError("the first attempt of every task fails midway")
            yield batch

    marker = args.hang

    def task_1_hangs(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time

        context = TaskContext.get()
        for i, batch in enumerate(batches):
            if context is not None and context.partitionId() == 1 and i == 2:
                open(marker, "w").close()
                time.sleep(3600)  # killed long before
            yield batch

    def write(uri: str, rows: int, tasks: Any) -> None:
        df: Any = spark.range(0, rows, numPartitions=2).selectExpr("id", "CAST(id AS STRING) AS s")
        df = df.mapInArrow(tasks, df.schema)
        committed = s3ddb.spark_ext.write(df, uri, mode="append", max_rows_per_file=50)
        version = committed.version if committed else None
        print(json.dumps({"uri": uri, "version": version}), flush=True)

    if args.first_uri:
        write(args.first_uri, args.first_rows, first_attempts_fail)
    write(args.uri, args.rows, task_1_hangs if marker else first_attempts_fail)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
