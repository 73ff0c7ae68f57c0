"""Round trips each call waits for, on ``s3+ddb://`` (or plain ``s3://``).

    make bench-round-trips         # or: python benchmarks/round_trips.py [--plain-s3]

Each call runs on a fresh small dataset (30 rows in 3 appends, background work
finished), once against the in-process endpoint directly and once through a
:class:`DelayedLink` that delays every byte by ``--one-way-ms`` (5 ms) each way. The
difference, divided by the round trip, is about how many round trips the call waits
for one after the other: what it costs against S3 and DynamoDB in another place. The
requests column counts what the endpoint served for the direct call (background work
included). Medians of ``--runs`` (5) runs, the two alternating. No speed assertions
live here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from _delayed_link import DelayedLink, delayed_options

import s3ddb
from s3ddb.testing import LocalAWS

BUCKET = "round-trips"
Options = dict[str, Any]
Call = Callable[[str, Options], object]


def rows(first: int, n: int = 3) -> pa.Table:
    ids = pa.array(range(first, first + n), pa.int64())
    return pa.table({"id": ids, "kind": pa.array(["a", "b", "c"] * (n // 3))})


class Datasets:
    """Fresh datasets of 30 rows in three versions, and fresh ids for new rows."""

    def __init__(self, plain_s3: bool) -> None:
        self.plain_s3 = plain_s3
        self._next_id = 1000

    def new_id(self) -> int:
        self._next_id += 100
        return self._next_id

    def uri(self) -> str:
        name = f"d{uuid.uuid4().hex[:10]}"
        if self.plain_s3:
            return f"s3://{BUCKET}/{name}"
        return f"s3+ddb://{BUCKET}/{name}?ddbTableName={BUCKET}"

    def fresh(self, options: Options) -> str:
        uri = self.uri()
        s3ddb.write_dataset(rows(0, 30), uri, storage_options=options)
        for _ in range(2):
            s3ddb.write_dataset(rows(self.new_id()), uri, mode="append", storage_options=options)
        settle()
        return uri


def settle() -> None:
    """Finish the process's background commit work (copies, repoints, deletes), so
    that a call does not wait for its predecessor's. Guarded: the module is internal."""
    try:
        from s3ddb.commit.finalizer import drain
    except ImportError:
        return
    drain(flush=True)


def forget_manifests() -> None:
    """Empty the process's manifest cache. Guarded: the module is internal."""
    try:
        from s3ddb.commit.manifest_cache import MANIFESTS
    except ImportError:
        return
    MANIFESTS.clear()


def calls(data: Datasets) -> dict[str, tuple[Callable[[Options], str], Call]]:
    """name: (set-up returning the dataset's URI, the call)."""

    def opened(uri: str, so: Options) -> s3ddb.Dataset:
        return s3ddb.dataset(uri, storage_options=so)

    def merge(uri: str, so: Options) -> object:
        source = rows(data.new_id())
        builder = opened(uri, so).merge_insert("id").when_matched_update_all()
        return builder.when_not_matched_insert_all().execute(source)

    def fresh(so: Options) -> str:
        return data.fresh(so)

    def new(_so: Options) -> str:
        return data.uri()

    def create(uri: str, so: Options) -> object:
        return s3ddb.write_dataset(rows(0), uri, storage_options=so)

    def append(uri: str, so: Options) -> object:
        return s3ddb.write_dataset(rows(data.new_id()), uri, mode="append", storage_options=so)

    def version_1(uri: str, so: Options) -> object:
        return s3ddb.dataset(uri, version=1, storage_options=so)

    def update(uri: str, so: Options) -> object:
        return opened(uri, so).update({"kind": "'z'"}, where="id < 5")

    def tag(uri: str, so: Options) -> None:
        opened(uri, so).tags.create(f"t{uuid.uuid4().hex[:6]}", 1)

    # Dataset.commit of an append computed at version 3 (as a Spark job's commit is),
    # after other writers committed 20 versions: it reads their transactions to
    # refuse committing the same files twice. The manifest cache is emptied, as in
    # the fresh Python worker where Spark runs a commit.
    fragments: dict[str, list[s3ddb.FragmentMetadata]] = {}

    def behind(so: Options) -> str:
        uri = data.fresh(so)
        fragments[uri] = s3ddb.fragment.write_fragments(
            rows(data.new_id()), uri, storage_options=so
        )
        for _ in range(20):
            s3ddb.write_dataset(rows(data.new_id()), uri, mode="append", storage_options=so)
        settle()
        forget_manifests()
        return uri

    def commit_behind(uri: str, so: Options) -> object:
        operation = s3ddb.LanceOperation.Append(fragments.pop(uri))
        return s3ddb.Dataset.commit(uri, operation, read_version=3, storage_options=so)

    return {
        "write_dataset (create)": (new, create),
        "write_dataset (append)": (fresh, append),
        "dataset (open latest)": (fresh, opened),
        "dataset(version=1)": (fresh, version_1),
        "open + to_table()": (fresh, lambda u, so: opened(u, so).to_table()),
        "open + to_table(filter)": (fresh, lambda u, so: opened(u, so).to_table(filter="id < 5")),
        "open + versions()": (fresh, lambda u, so: opened(u, so).versions()),
        "open + delete": (fresh, lambda u, so: opened(u, so).delete("id < 5")),
        "open + update": (fresh, update),
        "open + merge_insert": (fresh, merge),
        "open + add_columns": (fresh, lambda u, so: opened(u, so).add_columns({"x": "id * 2"})),
        "open + tags.create": (fresh, tag),
        "open + compact_files": (fresh, lambda u, so: opened(u, so).optimize.compact_files()),
        "commit, 20 versions behind": (behind, commit_behind),
    }


def measure(
    aws: LocalAWS, data: Datasets, direct: Options, linked: Options, runs: int, only: str
) -> list[dict[str, Any]]:
    out = []
    for name, (setup, call) in calls(data).items():
        if only not in name:
            continue
        times: dict[str, list[float]] = {"direct": [], "linked": []}
        requests: list[int] = []
        for _ in range(runs):
            for label, options in (("direct", direct), ("linked", linked)):
                uri = setup(options)
                aws.clear_requests()
                t0 = time.perf_counter()
                call(uri, options)
                times[label].append(time.perf_counter() - t0)
                settle()
                if label == "direct":
                    requests.append(len(aws.requests))
        row = {
            "call": name,
            "direct_ms": statistics.median(times["direct"]) * 1000,
            "linked_ms": statistics.median(times["linked"]) * 1000,
            "requests": statistics.median(requests),
        }
        out.append(row)
        print(
            f"  {name:26s} {row['direct_ms']:8.1f} {row['linked_ms']:9.1f} {row['requests']:9.0f}",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--one-way-ms", type=float, default=5.0)
    parser.add_argument("--only", default="", help="only the calls whose name holds this")
    parser.add_argument(
        "--plain-s3", action="store_true", help="plain s3:// (conditional puts), not s3+ddb://"
    )
    args = parser.parse_args(argv)
    one_way = args.one_way_ms / 1000
    with LocalAWS(conditional_writes=args.plain_s3) as aws:
        aws.create_bucket(BUCKET)
        if not args.plain_s3:
            aws.create_table(BUCKET)
        data = Datasets(args.plain_s3)
        direct = aws.storage_options()
        with DelayedLink((aws.host, aws.port), one_way) as link:
            linked = delayed_options(direct, aws.endpoint_url, link.url)
            data.fresh(direct)  # clients, imports and the table check: not timed
            data.fresh(linked)
            kind = "s3://" if args.plain_s3 else "s3+ddb://"
            print(
                f"{kind} on {time.strftime('%Y-%m-%d')}, {args.runs} runs; the link's round "
                f"trip {2 * args.one_way_ms:g} ms\n"
                f"  {'call':26s} {'direct ms':>8s} {'linked ms':>9s} {'requests':>9s}"
            )
            results = measure(aws, data, direct, linked, args.runs, args.only)
    print("\nround trips waited for, one after the other ((linked - direct) / round trip):")
    for row in results:
        trips = (row["linked_ms"] - row["direct_ms"]) / (2 * args.one_way_ms)
        print(f"  {row['call']:26s} {trips:5.1f}")
    stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    print(f"\n{stamp}; python {sys.version.split()[0]}; {Path(__file__).name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
