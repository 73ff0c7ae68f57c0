"""A Spark application that streams an s3ddb dataset into per-batch Parquet folders,
for the crash test of the streaming source.

    python -m tests.support.stream_app URI CHECKPOINT OUT --options JSON --hold-batch N
        [--merge-into COPY]

Each micro-batch ``n`` is written (overwriting) to ``OUT/batch=n``, which makes a
replayed batch replace its first attempt; with ``--merge-into`` (a change-feed stream)
it is instead merged into the dataset ``COPY`` exactly once
(:func:`tests.support.change_feed.copy_merger`). After batch ``--hold-batch`` it
creates ``OUT/held`` and waits forever, so the test can SIGKILL it between a batch's
output and Spark's commit of that batch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: The repository root: the child runs ``-m tests.support.stream_app`` from it.
ROOT = Path(__file__).resolve().parents[2]


def run_and_kill_when_held(arguments: list[str], held: Path, *, wait: float = 240) -> None:
    """Run this application with ``arguments`` in a child process (the tests' Python
    for Spark's workers, the repository on its path), and SIGKILL it once it creates
    ``held`` (the ``--hold-batch`` marker): between a batch's output and Spark's commit.

    Raises:
        pytest's Failed / AssertionError: the child exited early (its stderr is in the
            message) or did not reach the hold within ``wait`` seconds.
    """
    import pytest

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.stream_app", *arguments],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + wait
        while not held.exists():
            if child.poll() is not None:
                assert child.stderr is not None
                pytest.fail(f"the streaming application exited early: {child.stderr.read()}")
            assert time.monotonic() < deadline, "the streaming application never got to its hold"
            time.sleep(0.2)
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.stream_app")
    parser.add_argument("uri")
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    parser.add_argument("--options", default="{}")
    parser.add_argument("--hold-batch", type=int, default=-1)
    parser.add_argument("--merge-into")
    args = parser.parse_args(argv)
    options = json.loads(args.options)

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
    out = Path(args.out)

    merge = None
    if args.merge_into:
        from tests.support.change_feed import copy_merger

        merge = copy_merger(args.merge_into, "copy-from-feed")

    def sink(df: object, batch_id: int) -> None:
        if merge is not None:
            merge(df, batch_id)
        else:
            df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))  # type: ignore[attr-defined]
        if batch_id == args.hold_batch:
            out.mkdir(parents=True, exist_ok=True)
            (out / "held").write_text(str(batch_id))
            while True:  # until SIGKILL
                time.sleep(1)

    query = (
        spark.readStream.format("s3ddb")
        .options(**options)
        .load(args.uri)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
