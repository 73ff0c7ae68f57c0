"""A Spark application that runs streaming queries of s3ddb datasets at once, for the
crash tests of the streaming source (tests/spark/test_stream_crashes.py).

    python -m tests.support.stream_app QUERIES

``QUERIES`` is a JSON list, one object per query: ``uri``, ``checkpoint``, ``out``,
``options`` (the source's options), ``hold_batch`` and optionally ``merge_into``. Each
micro-batch ``n`` of a query is written (overwriting) to ``OUT/batch=n``, which makes a
replayed batch replace its first attempt; with ``merge_into`` (a change-feed stream) it
is instead merged into the dataset ``merge_into`` exactly once
(:func:`tests.support.change_feed.copy_merger`). After batch ``hold_batch`` a query
creates ``OUT/held`` and waits forever (its other queries go on), so the test can
SIGKILL the application between a batch's output and Spark's commit of that batch in
every query: one application (one JVM to start) serves several crash tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: The repository root: the child runs ``-m tests.support.stream_app`` from it.
ROOT = Path(__file__).resolve().parents[2]


def run_and_kill_when_held(queries: list[dict[str, Any]], *, wait: float = 300) -> None:
    """Run this application with ``queries`` in a child process (the tests' Python for
    Spark's workers, the repository on its path), and SIGKILL it once every query
    created its ``OUT/held`` marker: between a batch's output and Spark's commit.

    Raises:
        pytest's Failed / AssertionError: the child exited early (its stderr is in the
            message) or not every query got to its hold within ``wait`` seconds.
    """
    import pytest

    held = [Path(query["out"]) / "held" for query in queries]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.stream_app", json.dumps(queries)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + wait
        while not all(marker.exists() for marker in held):
            if child.poll() is not None:
                assert child.stderr is not None
                pytest.fail(f"the streaming application exited early: {child.stderr.read()}")
            assert time.monotonic() < deadline, "the streaming application never got to its holds"
            time.sleep(0.2)
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def _start(spark: Any, query: dict[str, Any]) -> Any:
    out = Path(query["out"])
    merge = None
    if query.get("merge_into"):
        from tests.support.change_feed import copy_merger

        merge = copy_merger(query["merge_into"], "copy-from-feed")

    def sink(df: Any, batch_id: int) -> None:
        if merge is not None:
            merge(df, batch_id)
        else:
            df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))
        if batch_id == query["hold_batch"]:
            out.mkdir(parents=True, exist_ok=True)
            (out / "held").write_text(str(batch_id))
            while True:  # until SIGKILL
                time.sleep(1)

    return (
        spark.readStream.format("s3ddb")
        .options(**query["options"])
        .load(query["uri"])
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", query["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    queries = json.loads(args[0])

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import s3ddb.spark_ext

    builder = (
        SparkSession.builder.master("local[1]")
        .appName("s3ddb-stream-app")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
    )
    spark = s3ddb.spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    running = [_start(spark, query) for query in queries]
    while any(query.isActive for query in running):
        spark.streams.awaitAnyTermination()  # raises if a query failed
        spark.streams.resetTerminated()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
