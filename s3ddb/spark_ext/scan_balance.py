"""How Spark cuts a scan of known files into tasks, chosen so that the tasks fill the
cores to the end.

Spark packs a scan's files into partitions of at most
``spark.sql.files.maxPartitionBytes`` (128 MiB, or less when the data is small for
the cores). Twenty 29 MiB files on two cores make five tasks: three rounds, the last
with one core idle, a sixth of the scan's time lost (a 10 % update of 20,000,000 rows:
its two scans took 0.3-0.4 s longer than in four tasks). :func:`balanced_scan_settings`
simulates Spark's packing for a few partition sizes and picks the one whose tasks end
together soonest.

The simulation follows Spark's ``FilePartition`` (files split at the partition size,
longest first, packed in that order, each file also counting
``spark.sql.files.openCostInBytes``). If a Spark version packed otherwise, only the
balance would suffer: the setting never changes which rows a scan reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["balanced_scan_settings", "scan_tasks"]

#: Spark's defaults of ``spark.sql.files.maxPartitionBytes`` and ``openCostInBytes``.
_MAX_PARTITION_BYTES, _OPEN_COST = 128 << 20, 4 << 20
#: What starting a task costs, as bytes of scan (a task's set-up, a Python worker's
#: batch, a file written per write task).
_TASK_COST = 8 << 20


def scan_tasks(sizes: Sequence[int], max_bytes: int, open_cost: int, cores: int) -> list[int]:
    """The bytes of each task Spark's file scan makes of files of ``sizes`` with
    ``spark.sql.files.maxPartitionBytes`` ``max_bytes`` on ``cores`` cores."""
    total = sum(s + open_cost for s in sizes)
    split = min(max_bytes, max(open_cost, total // max(1, cores)))
    pieces = []
    for size in sizes:
        start = 0
        while start < size:
            pieces.append(min(split, size - start))
            start += split
    pieces.sort(reverse=True)
    tasks: list[int] = []
    current = 0
    for piece in pieces:
        if current and current + piece > split:
            tasks.append(current)
            current = 0
        current += piece + open_cost
    if current:
        tasks.append(current)
    return tasks


def _makespan(tasks: list[int], cores: int) -> int:
    """When the last of ``tasks`` (run in order, each on the first free core) ends."""
    free = [0] * max(1, cores)
    for task in tasks:
        i = free.index(min(free))
        free[i] += task + _TASK_COST
    return max(free)


def balanced_scan_settings(spark: Any, sizes: Sequence[int]) -> dict[str, str]:
    """``spark.sql.files.maxPartitionBytes`` for a scan of files of ``sizes`` whose
    tasks end soonest on the session's cores (no larger than Spark would choose
    unless that ends sooner); empty when Spark's own choice is as good, or the
    session has its own setting (the user's choice is kept)."""
    if not sizes or spark.conf.get("spark.sql.files.maxPartitionBytes", None) is not None:
        return {}
    cores = spark.sparkContext.defaultParallelism
    open_cost = _bytes(spark.conf.get("spark.sql.files.openCostInBytes", None), _OPEN_COST)
    best = _makespan(scan_tasks(sizes, _MAX_PARTITION_BYTES, open_cost, cores), cores)
    chosen = None
    total = sum(s + open_cost for s in sizes)
    # Two rounds at least: a core slowed by other work is caught up by the other.
    for rounds in range(2, 10):
        ideal = math.ceil(total / (cores * rounds))
        for step in range(6):
            size = ideal + ideal * step // 10
            span = _makespan(scan_tasks(sizes, size, open_cost, cores), cores)
            if span < best:
                best, chosen = span, size
    return {} if chosen is None else {"spark.sql.files.maxPartitionBytes": str(chosen)}


def _bytes(value: str | None, default: int) -> int:
    """A byte size setting (``4194304``, ``4m``, ``4MB``) as bytes; ``default`` if unset
    or unreadable."""
    if value is None:
        return default
    text = value.strip().lower().rstrip("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        return default
