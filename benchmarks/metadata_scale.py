"""Metadata at scale: what a commit and an open cost as fragments and versions pile up,
s3ddb beside pylance in one run.

    python benchmarks/metadata_scale.py [--fragments 10,1000,10000,100000]
        [--versions 10,10000] [--repeat 3]

For each fragment count N, on a local path, each system gets a dataset of N one-row
fragments (one commit), then, median of ``--repeat`` runs:

* **append**: an append of 3 rows (one new fragment) on the newest version;
* **open + count**: opening the newest version and counting its rows;
* **open old**: opening version 1;
* **delete one row**: a delete of one row (a deletion file on one fragment);

plus the newest manifest's size, and the peak Python heap (tracemalloc) of an open and
of an append (Python objects only: pylance's memory is in Rust and does not show there).

For each version count V, each system gets V one-row appends, then: **versions()**
(the whole history) and **open as of** a time in the middle of the history.
docs/performance.md records a run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import s3ddb


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _median(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class System:
    name = ""

    def create(self, uri: str, n: int) -> None: ...
    def append(self, uri: str, start: int) -> None: ...
    def open_count(self, uri: str) -> int: ...
    def open_old(self, uri: str) -> int: ...
    def delete_one(self, uri: str, key: int) -> None: ...
    def manifest_bytes(self, uri: str) -> int: ...
    def versions(self, uri: str) -> list[Any]: ...
    def open_asof(self, uri: str, when: Any) -> int: ...


class S3DDB(System):
    name = "s3ddb"

    def create(self, uri: str, n: int) -> None:
        s3ddb.write_dataset(_rows(0, n), uri, max_rows_per_file=1)

    def append(self, uri: str, start: int) -> None:
        s3ddb.write_dataset(_rows(start, 3), uri, mode="append")

    def open_count(self, uri: str) -> int:
        return s3ddb.dataset(uri).count_rows()

    def open_old(self, uri: str) -> int:
        return s3ddb.dataset(uri, version=1).version

    def delete_one(self, uri: str, key: int) -> None:
        s3ddb.dataset(uri).delete(f"id = {key}")

    def manifest_bytes(self, uri: str) -> int:
        return min((Path(uri) / "_versions").iterdir()).stat().st_size

    def versions(self, uri: str) -> list[Any]:
        return [v.timestamp for v in s3ddb.dataset(uri).versions()]

    def open_asof(self, uri: str, when: Any) -> int:
        return s3ddb.dataset(uri, asof=when).version


class Pylance(System):
    name = "pylance"

    def __init__(self) -> None:
        import lance

        self.lance = lance

    def create(self, uri: str, n: int) -> None:
        self.lance.write_dataset(_rows(0, n), uri, max_rows_per_file=1)

    def append(self, uri: str, start: int) -> None:
        self.lance.write_dataset(_rows(start, 3), uri, mode="append")

    def open_count(self, uri: str) -> int:
        return int(self.lance.dataset(uri).count_rows())

    def open_old(self, uri: str) -> int:
        return int(self.lance.dataset(uri, version=1).version)

    def delete_one(self, uri: str, key: int) -> None:
        self.lance.dataset(uri).delete(f"id = {key}")

    def manifest_bytes(self, uri: str) -> int:
        return max(p.stat().st_size for p in (Path(uri) / "_versions").iterdir())

    def versions(self, uri: str) -> list[Any]:
        return [v["timestamp"] for v in self.lance.dataset(uri).versions()]

    def open_asof(self, uri: str, when: Any) -> int:
        return int(self.lance.dataset(uri, asof=when).version)


def _measure(system: System, uri: str, n: int, repeat: int) -> str:
    """One row of the table: ``system`` at ``n`` fragments."""
    system.create(uri, n)
    start = n

    def append() -> None:
        nonlocal start
        system.append(uri, start)
        start += 3

    t_append = _median(append, repeat)
    t_open = _median(lambda: system.open_count(uri), repeat)
    t_old = _median(lambda: system.open_old(uri), repeat)
    keys = iter(range(repeat))
    t_delete = _median(lambda: system.delete_one(uri, next(keys)), repeat)
    peak = _peak(lambda: system.open_count(uri))
    peak_append = _peak(append)
    return (
        f"{n:>9} {system.name:<8} {t_append * 1000:>7.1f}ms {t_open * 1000:>9.1f}ms "
        f"{t_old * 1000:>7.1f}ms {t_delete * 1000:>7.1f}ms "
        f"{system.manifest_bytes(uri) / 1024:>8.0f}KiB {peak / 2**20:>8.1f}MiB "
        f"{peak_append / 2**20:>9.1f}MiB"
    )


def _measure_versions(system: System, uri: str, v: int, repeat: int) -> str:
    """One row of the history table: ``system`` with ``v`` versions."""
    system.create(uri, 1)
    started = time.perf_counter()
    for i in range(1, v):
        system.append(uri, i)
    per_append = (time.perf_counter() - started) / max(v - 1, 1)
    times = system.versions(uri)
    assert len(times) == v, (system.name, len(times), v)
    middle = times[len(times) // 2]
    t_versions = _median(lambda: system.versions(uri), repeat)
    t_asof = _median(lambda: system.open_asof(uri, middle), repeat)
    return (
        f"{v:>9} {system.name:<8} {t_versions * 1000:>10.1f}ms {t_asof * 1000:>9.1f}ms "
        f"{per_append * 1000:>11.1f}ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", default="10,1000,10000,100000")
    parser.add_argument("--versions", default="10,10000", help="'' to skip")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    systems: list[System] = [S3DDB()]
    try:
        systems.append(Pylance())
    except ImportError:
        print("pylance is not installed (make bench installs the bench extra): s3ddb only")
    counts = [int(x) for x in args.fragments.split(",") if x]
    version_counts = [int(x) for x in args.versions.split(",") if x]
    root = Path(tempfile.mkdtemp(prefix="s3ddb-scale-"))
    try:
        if counts:
            print(
                f"{'fragments':>9} {'system':<8} {'append':>9} {'open+count':>11} "
                f"{'open old':>9} {'delete 1':>9} {'manifest':>10} {'open heap':>10} "
                f"{'append heap':>11}"
            )
        for n in counts:
            for system in systems:
                uri = str(root / f"{system.name}-{n}")
                print(_measure(system, uri, n, args.repeat), flush=True)
                shutil.rmtree(uri, ignore_errors=True)
        if version_counts:
            print(f"\n{'versions':>9} {'system':<8} {'versions()':>12} {'open asof':>11} "
                  f"{'each append':>13}")  # fmt: skip
        for v in version_counts:
            for system in systems:
                uri = str(root / f"{system.name}-v{v}")
                print(_measure_versions(system, uri, v, args.repeat), flush=True)
                shutil.rmtree(uri, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
