"""What a BTREE scalar index saves: point filters and merge_insert key lookups.

    python benchmarks/scalar_index.py [--rows 3000000] [--appends 10] [--repeat 5]

On a local path, a dataset of ``--rows`` rows written in ``--appends`` appends (one
fragment each) is copied twice; one copy gets an index on ``id``. Then, median of
``--repeat`` runs:

* an equality filter (``id = k``), a small IN list and a narrow range, with the index
  and without (the same filter on the copy without index);
* ``count_rows`` of the equality filter;
* an upsert (merge_insert on ``id``) of 1,000 keys: 900 consecutive existing keys
  (a typical "recent rows changed" batch) and 100 new ones, on each copy.

Prints times and the ratio unindexed / indexed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import s3ddb


def _table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "id": pa.array(ids),
            "v": pa.array(ids * 2),
            "name": pa.array([f"name-{i}" for i in ids]),
            "score": pa.array(np.random.default_rng(start).random(n)),
        }
    )


def _median(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--appends", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="s3ddb-bench-index-"))
    try:
        _run(root, args.rows, args.appends, args.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(root: Path, rows: int, appends: int, repeat: int) -> None:
    plain_uri, indexed_uri = str(root / "plain"), str(root / "indexed")
    per = rows // appends
    start = time.perf_counter()
    for i in range(appends):
        s3ddb.write_dataset(_table(i * per, per), plain_uri, mode="append")
    print(f"wrote {per * appends:,} rows in {appends} appends: {time.perf_counter() - start:.1f} s")
    shutil.copytree(plain_uri, indexed_uri)
    indexed = s3ddb.dataset(indexed_uri)
    start = time.perf_counter()
    indexed.create_scalar_index("id")
    print(f"create_scalar_index('id'): {time.perf_counter() - start:.2f} s")
    plain = s3ddb.dataset(plain_uri)

    key = per * appends // 2 + 12345
    filters = {
        "equality": f"id = {key}",
        "IN (5 keys)": f"id IN ({key}, {key + 7}, {key + 1000}, 17, {per * appends - 1})",
        "range (100 rows)": f"id >= {key} AND id < {key + 100}",
    }
    print(f"\n{'query':<22}{'no index':>12}{'index':>12}{'ratio':>9}")
    for label, text in filters.items():
        assert plain.to_table(filter=text).equals(indexed.to_table(filter=text))
        slow = _median(lambda t=text: plain.to_table(filter=t), repeat)
        fast = _median(lambda t=text: indexed.to_table(filter=t), repeat)
        print(f"{label:<22}{slow * 1000:>10.1f}ms{fast * 1000:>10.1f}ms{slow / fast:>8.1f}x")
    text = filters["equality"]
    slow = _median(lambda: plain.count_rows(text), repeat)
    fast = _median(lambda: indexed.count_rows(text), repeat)
    label = "count_rows(equality)"
    print(f"{label:<22}{slow * 1000:>10.1f}ms{fast * 1000:>10.1f}ms{slow / fast:>8.1f}x")

    results = {}
    for name, uri in (("no index", plain_uri), ("index", indexed_uri)):
        times = []
        for r in range(repeat):
            first = per * appends // 3 + r * 5000
            source = pa.concat_tables(
                [_table(first, 900), _table(10 * rows + r * 1000 + first, 100)]
            )
            ds = s3ddb.dataset(uri)
            begin = time.perf_counter()
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
                source
            )
            times.append(time.perf_counter() - begin)
        results[name] = statistics.median(times)
    slow, fast = results["no index"], results["index"]
    label = "merge_insert 1,000"
    print(f"{label:<22}{slow * 1000:>10.1f}ms{fast * 1000:>10.1f}ms{slow / fast:>8.1f}x")
    a = s3ddb.dataset(plain_uri).to_table().sort_by("id")
    b = s3ddb.dataset(indexed_uri).to_table().sort_by("id")
    assert a.equals(b), "the indexed and unindexed copies differ after the upserts"


if __name__ == "__main__":
    main()
