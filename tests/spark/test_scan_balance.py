"""How Spark cuts a scan into tasks (s3ddb.spark_ext.scan_balance): the simulation
gives the task count Spark's own planner gives for the same files and setting, and
the setting it chooses fills the cores to the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3ddb.spark_ext.scan_balance import balanced_scan_settings, scan_tasks
from s3ddb.spark_ext.session_settings import session_settings

OPEN_COST = 4 << 20


def _files(root: Path, rows: list[int]) -> list[Path]:
    """Parquet files of incompressible doubles, one per entry of ``rows``, each
    cut into row groups of 16,384 rows (where Spark's splits may start)."""
    rng = np.random.default_rng(7)
    paths = []
    for i, n in enumerate(rows):
        path = root / f"f{i:03d}.parquet"
        pq.write_table(
            pa.table({"x": rng.random(n)}), path, row_group_size=16_384, compression="none"
        )
        paths.append(path)
    return paths


@pytest.mark.parametrize(
    ("rows", "max_bytes"),
    [
        ([40_000] * 20, 1 << 20),  # equal files, several per task
        ([10_000, 90_000, 30_000, 200_000, 5_000, 60_000], 1 << 20),  # uneven
        ([400_000, 20_000], 512 << 10),  # a file split at the partition size
    ],
)
def test_the_simulation_gives_the_tasks_spark_plans(
    spark: Any, tmp_path: Path, rows: list[int], max_bytes: int
) -> None:
    """Spark's planner, given the setting, makes as many tasks of these files as
    :func:`scan_tasks` says (with a small open cost, so that files pack together)."""
    paths = _files(tmp_path, rows)
    sizes = [p.stat().st_size for p in paths]
    settings = {
        "spark.sql.files.maxPartitionBytes": str(max_bytes),
        "spark.sql.files.openCostInBytes": str(64 << 10),
    }
    with session_settings(spark, settings):
        planned = spark.read.parquet(*[str(p) for p in paths]).rdd.getNumPartitions()
    cores = spark.sparkContext.defaultParallelism
    assert planned == len(scan_tasks(sizes, max_bytes, 64 << 10, cores))


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Context:
    defaultParallelism = 2


class _Session:
    """What :func:`balanced_scan_settings` reads of a SparkSession."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.conf = _Conf(values or {})
        self.sparkContext = _Context()


def _rounds(tasks: list[int], cores: int) -> list[int]:
    free = [0] * cores
    for task in tasks:
        free[free.index(min(free))] += task
    return free


def test_twenty_equal_files_on_two_cores_end_together() -> None:
    """Twenty 29 MB files: Spark's default makes five tasks (the last runs alone);
    the setting chosen makes an even number, each core scanning as many bytes."""
    sizes = [28_968_804] * 20
    assert len(scan_tasks(sizes, 128 << 20, OPEN_COST, 2)) == 5
    chosen = balanced_scan_settings(_Session(), sizes)
    tasks = scan_tasks(sizes, int(chosen["spark.sql.files.maxPartitionBytes"]), OPEN_COST, 2)
    assert len(tasks) % 2 == 0 and len(tasks) >= 4
    per_core = _rounds(tasks, 2)
    assert max(per_core) == min(per_core)


@pytest.mark.parametrize(
    "sizes",
    [
        [300_000] * 200,
        [50 << 20] * 7,
        [700 << 20],
        [10 << 20] * 3,
        [(i % 9 + 1) << 22 for i in range(37)],
    ],
)
def test_the_setting_chosen_never_ends_later_than_sparks(sizes: list[int]) -> None:
    """Whatever the files, the tasks of the setting chosen end no later than Spark's
    own (the bytes of the busiest core, with each task's start-up)."""
    chosen = balanced_scan_settings(_Session(), sizes)
    default = _rounds([t + (8 << 20) for t in scan_tasks(sizes, 128 << 20, OPEN_COST, 2)], 2)
    size = int(chosen.get("spark.sql.files.maxPartitionBytes", 128 << 20))
    mine = _rounds([t + (8 << 20) for t in scan_tasks(sizes, size, OPEN_COST, 2)], 2)
    # A setting is chosen only when it ends sooner.
    assert max(mine) < max(default) if chosen else max(mine) == max(default)


def test_a_setting_of_the_users_own_is_kept() -> None:
    """A session that sets maxPartitionBytes itself keeps it: nothing is chosen."""
    sizes = [28_968_804] * 20
    assert balanced_scan_settings(_Session(), sizes)
    own = _Session({"spark.sql.files.maxPartitionBytes": "64m"})
    assert balanced_scan_settings(own, sizes) == {}
