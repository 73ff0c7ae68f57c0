"""Metadata at scale: what a commit, an open and a point query cost as fragments and
versions pile up, s3ddb beside pylance in one run.

    python benchmarks/metadata_scale.py [--fragments 1000,10000,100000]
        [--pylance-max 100000] [--endpoint 1000,100000] [--series 0]
        [--versions 10,10000] [--repeat 3]

The run docs/performance.md records (about 17 minutes on 2 cores):

    make bench-scale SCALE_ARGS="--fragments 1000,10000,100000,1000000 \\
        --endpoint 1000,100000,1000000 --series 4224 --versions '' --repeat 5"

**Fragments** (``--fragments``), on a local path. s3ddb's dataset of N one-row
fragments is *synthesised*: N :class:`FragmentMetadata` whose data files do not exist,
each with the column statistics a real write records (fragment i holds ``id = i``, so
ids are sorted and statistics prune a point query), committed as one Overwrite through
s3ddb's own commit path, so its fragments are laid out in chunks exactly as a written
dataset's. Only the fragments a measured query or delete reads get real Parquet files.
pylance (up to ``--pylance-max`` fragments: writing a million files takes it too long)
writes its N one-row files for real. Then, median of ``--repeat`` runs:

* **append**: an append of one row (one new fragment) on the newest version, and the
  metadata it wrote (s3ddb: the new root manifest and any chunk files; pylance: its new
  manifest);
* **open + count**: opening the newest version and counting its rows;
* **open old**: opening version 1;
* **point query**: ``to_table(filter="id = X")`` in a fresh process (nothing cached),
  with the metadata it read: the root, and the chunks fetched (``ChunkSource.fetched``)
  times their size; s3ddb only;
* **delete one row**: ``delete("id = X")`` (a deletion file on one fragment);

plus the root manifest's size and chunk count, and the peak Python heap (tracemalloc)
of an open and of an append (Python objects only: pylance's memory is in Rust).

**Append series** (``--series K``): K one-row appends in a row on s3ddb's largest
dataset; the distribution of the metadata each wrote (most write only a root; one in
129 overflows the inline tail and writes a chunk, merged with others as
``s3ddb/format/chunk_writer.py`` lays them out) and of their times.

**Endpoint** (``--endpoint``): the same synthetic dataset on the local S3 + DynamoDB
endpoint (moto, ``s3ddb.testing.LocalAWS``; ``s3+ddb://`` as in benchmarks/peers.py):
requests of a one-row append (background work finished, the batched deletes of staged
manifests left batched as in a process that keeps appending), of an open + count and of
a point query in a fresh process, with the bytes the endpoint sent for each.

**Versions** (``--versions``): V one-row appends per system, then **versions()** (the
whole history) and **open as of** a time in the middle of the history.
docs/performance.md records a run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

import s3ddb
import s3ddb.fragment
from s3ddb.format.chunks import StoredChunk
from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.stats import ColumnStatistics, FileStatistics, file_key
from s3ddb.operations import Overwrite

Options = dict[str, str] | None
SCHEMA = pa.schema([("id", pa.int64())])
KIB = 1024


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


def _forget_manifests() -> None:
    """Drop the per-process cache of committed manifests (used for datasets whose
    versions an external store decides), so an open reads its manifest. Guarded: the
    module is internal."""
    try:
        from s3ddb.commit.manifest_cache import MANIFESTS
    except ImportError:
        return
    MANIFESTS.clear()


def _drain() -> None:
    """Finish the background work of this process's commits (copying a staged manifest
    to its final name, repointing the DynamoDB row); staged manifests' deletes stay
    batched. Guarded: the module is internal."""
    try:
        from s3ddb.commit.finalizer import drain
    except ImportError:
        return
    drain(flush=False)


def _keys(n: int, repeat: int) -> tuple[list[int], list[int]]:
    """Ids the point queries and the deletes read: spread over the dataset (one chunk
    each where there are enough), none of them twice."""
    spread = sorted({int(n * (i + 0.5) / (2 * repeat)) for i in range(2 * repeat)})
    return spread[0::2], spread[1::2]


# -- s3ddb's synthetic dataset ---------------------------------------------------------------


def create_synthetic(uri: str, n: int, real: Sequence[int], options: Options = None) -> None:
    """A dataset of ``n`` one-row fragments, fragment i holding ``id = i`` with its
    statistics, committed as one Overwrite; only the fragments of ``real`` ids have
    data files (written by s3ddb, so they are what a real write makes)."""
    schema = DatasetSchema.assign(SCHEMA)
    written = {}
    for i in real:
        fragments = s3ddb.fragment.write_fragments(
            _rows(i, 1), uri, schema=schema, storage_options=options
        )
        assert isinstance(fragments, list) and len(fragments) == 1
        written[i] = fragments[0]
    size = next(iter(written.values())).files[0].file_size_bytes if written else 600
    fragments = []
    for i in range(n):
        if i in written:
            fragments.append(written[i])
            continue
        path = f"{i:032x}.parquet"  # what a writer names a file: 32 hex digits
        stats = FileStatistics(file_key(path), (ColumnStatistics(0, 0, i, i),))
        files = (DataFile(path, (0,), file_size_bytes=size),)
        fragments.append(FragmentMetadata(0, files, 1, stats=(stats,)))
    s3ddb.Dataset.commit(uri, Overwrite(fragments, schema), storage_options=options)
    file_key.cache_clear()


@dataclass
class LocalFiles:
    """What s3ddb keeps on a local path: its newest root and its chunk files."""

    uri: str

    def root_bytes(self) -> int:
        # V2 manifest names sort newest first.
        return min((Path(self.uri) / "_versions").iterdir()).stat().st_size

    def chunks(self) -> dict[str, int]:
        folder = Path(self.uri) / "_fragments"
        if not folder.is_dir():
            return {}
        return {p.name: p.stat().st_size for p in folder.iterdir()}


@dataclass
class Written:
    """Metadata bytes one commit wrote: its root manifest and the chunk files it added."""

    root: int
    chunks: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.root + sum(self.chunks)


def s3ddb_append(uri: str, start: int, options: Options = None) -> None:
    s3ddb.write_dataset(_rows(start, 1), uri, mode="append", storage_options=options)


def measured_append(files: LocalFiles, start: int) -> tuple[float, Written]:
    """One s3ddb append on a local path: its time and the metadata it wrote."""
    before = files.chunks()
    started = time.perf_counter()
    s3ddb_append(files.uri, start)
    elapsed = time.perf_counter() - started
    added = [size for name, size in files.chunks().items() if name not in before]
    return elapsed, Written(files.root_bytes(), added)


# -- a fresh reader (a child process: no chunk or manifest cached) ---------------------------


def probe(uri: str, options: Options, key: int) -> dict[str, Any]:
    """In this process (started for it, so nothing is cached): the point query
    ``id = key`` on the newest version; its time and the chunks it fetched."""
    started = time.perf_counter()
    ds = s3ddb.dataset(uri, storage_options=options)
    rows = ds.to_table(filter=f"id = {key}").num_rows
    elapsed = time.perf_counter() - started
    assert rows == 1, (uri, key, rows)
    chunks = [s for s in ds.manifest.fragments.segments if isinstance(s, StoredChunk)]
    sources = {id(c.source): c.source for c in chunks}
    return {
        "seconds": elapsed,
        "chunks": len(chunks),
        "fetched": sum(s.fetched for s in sources.values()),
        "fetched_bytes": sum(c.ref.size for c in chunks if c.loaded),
    }


def run_probe(
    uri: str, key: int, options: Options = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """:func:`probe` in a child process."""
    spec = json.dumps({"uri": uri, "options": options, "key": key})
    out = subprocess.run(
        [sys.executable, __file__, "--probe", spec],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# -- the fragments table ----------------------------------------------------------------------


@dataclass
class Row:
    """One row of the fragments table."""

    n: int
    system: str
    create: float
    append: float
    written: list[int]
    open_count: float
    open_old: float
    delete: float
    root: int
    chunks: int = 0
    point: float | None = None
    point_metadata: int | None = None
    point_fetched: int | None = None
    open_heap: int = 0
    append_heap: int = 0


def measure_s3ddb(uri: str, n: int, repeat: int) -> Row:
    point_keys, delete_keys = _keys(n, repeat)
    started = time.perf_counter()
    create_synthetic(uri, n, point_keys + delete_keys)
    create = time.perf_counter() - started
    files = LocalFiles(uri)
    start = n
    times, written = [], []
    for _ in range(repeat):
        elapsed, w = measured_append(files, start)
        start += 1
        times.append(elapsed)
        written.append(w.total)

    def open_count() -> int:
        _forget_manifests()
        return s3ddb.dataset(uri).count_rows()

    t_open = _median(open_count, repeat)
    t_old = _median(lambda: s3ddb.dataset(uri, version=1).version, repeat)
    root = files.root_bytes()
    probes = [run_probe(uri, k) for k in point_keys]
    point_fetched = max(p["fetched"] for p in probes)
    point_metadata = root + max(p["fetched_bytes"] for p in probes)
    keys = iter(delete_keys)
    t_delete = _median(lambda: s3ddb.dataset(uri).delete(f"id = {next(keys)}"), repeat)
    peak = _peak(open_count)

    def append() -> None:
        nonlocal start
        s3ddb_append(uri, start)
        start += 1

    peak_append = _peak(append)
    return Row(
        n, "s3ddb", create, statistics.median(times), written, t_open, t_old, t_delete,
        root, chunks=probes[0]["chunks"], point=statistics.median(p["seconds"] for p in probes),
        point_metadata=point_metadata, point_fetched=point_fetched, open_heap=peak,
        append_heap=peak_append,
    )  # fmt: skip


def measure_pylance(uri: str, n: int, repeat: int) -> Row:
    import lance

    started = time.perf_counter()
    lance.write_dataset(_rows(0, n), uri, max_rows_per_file=1)
    create = time.perf_counter() - started
    start = n

    def newest_manifest() -> int:
        return max(p.stat().st_size for p in (Path(uri) / "_versions").iterdir())

    times, written = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        lance.write_dataset(_rows(start, 1), uri, mode="append")
        times.append(time.perf_counter() - started)
        written.append(newest_manifest())
        start += 1
    t_open = _median(lambda: lance.dataset(uri).count_rows(), repeat)
    t_old = _median(lambda: lance.dataset(uri, version=1).version, repeat)
    keys = iter(_keys(n, repeat)[1])
    t_delete = _median(lambda: lance.dataset(uri).delete(f"id = {next(keys)}"), repeat)
    return Row(n, "pylance", create, statistics.median(times), written, t_open, t_old, t_delete,
               newest_manifest())  # fmt: skip


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:,.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def _kib(n: int | None) -> str:
    return "—" if n is None else f"{n / KIB:,.1f} KiB"


FRAGMENT_COLUMNS = (
    "fragments", "system", "setup", "append", "append writes", "open + count", "open v1",
    "point query", "point metadata", "delete 1", "root", "chunks", "open heap", "append heap",
)  # fmt: skip


def fragment_cells(r: Row) -> list[str]:
    s3 = r.system == "s3ddb"
    point = f"{_kib(r.point_metadata)} ({r.point_fetched} chunk)" if s3 else "—"
    return [
        f"{r.n:,}", r.system, _ms(r.create), _ms(r.append), _kib(max(r.written)),
        _ms(r.open_count), _ms(r.open_old), _ms(r.point) if s3 else "—", point,
        _ms(r.delete), _kib(r.root), str(r.chunks) if s3 else "—",
        f"{r.open_heap / 2**20:.1f} MiB" if s3 else "—",
        f"{r.append_heap / 2**20:.1f} MiB" if s3 else "—",
    ]  # fmt: skip


def print_table(title: str, columns: Sequence[str], rows: list[list[str]], labels: int = 2) -> None:
    """A markdown table (what docs/performance.md records): ``labels`` text columns,
    then numbers."""
    print(f"\n{title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" if i < labels else "---:" for i in range(len(columns))) + "|")
    for cells in rows:
        print("| " + " | ".join(cells) + " |", flush=True)


def print_verdicts(rows: list[Row]) -> None:
    """The issue's targets against this run."""
    s3 = {r.n: r for r in rows if r.system == "s3ddb"}
    lance = {r.n: r for r in rows if r.system == "pylance"}
    print("\nAgainst the targets:")
    if 1000 in s3 and len(s3) > 1:
        base, top = s3[1000], s3[max(s3)]
        print(f"- append at {top.n:,} / at 1,000: {top.append / base.append:.1f}x (<= 2x); "
              f"metadata written {_kib(max(top.written))} (<= 64 KiB)")  # fmt: skip
        print(f"- delete at {top.n:,} / at 1,000: {top.delete / base.delete:.1f}x (<= 5x)")
    for n, r in sorted(s3.items()):
        print(f"- {n:,}: open + count {_ms(r.open_count)} (<= 10 ms at 1M); point query "
              f"metadata {_kib(r.point_metadata)} (<= 1 MiB at 1M)")  # fmt: skip
    for n in sorted(set(s3) & set(lance)):
        a, b = s3[n], lance[n]
        print(f"- {n:,} vs pylance: append {a.append / b.append:.2f}x, open + count "
              f"{a.open_count / b.open_count:.3f}x (<= 0.1x at 100,000)")  # fmt: skip


# -- append series ------------------------------------------------------------------------------


def append_series(root: Path, n: int, appends: int) -> None:
    """``appends`` one-row appends in a row on a synthetic dataset of ``n`` fragments."""
    uri = str(root / f"series-{n}")
    create_synthetic(uri, n, [])
    files = LocalFiles(uri)
    times, sizes, chunked = [], [], []
    for k in range(appends):
        elapsed, w = measured_append(files, n + k)
        times.append(elapsed)
        sizes.append(w.total)
        if w.chunks:
            chunked.append((k, w))
    shutil.rmtree(uri, ignore_errors=True)
    ordered = sorted(sizes)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    biggest = max(chunked, key=lambda kw: kw[1].total) if chunked else None
    print_table(
        f"Append series: {appends} one-row appends on {n:,} fragments",
        ("", "median", "p99", "max", "mean"),
        [
            ["metadata written", _kib(int(statistics.median(sizes))), _kib(p99),
             _kib(max(sizes)), _kib(int(statistics.mean(sizes)))],
            ["time", _ms(statistics.median(times)),
             _ms(sorted(times)[min(len(times) - 1, int(len(times) * 0.99))]),
             _ms(max(times)), _ms(statistics.mean(times))],
        ],
        labels=1,
    )  # fmt: skip
    over = sum(1 for s in sizes if s > 64 * KIB)
    print(f"\n{len(chunked)} of {appends} appends wrote chunk files; {over} wrote more than "
          "64 KiB" + (f"; the largest: a root of {_kib(biggest[1].root)} and chunks of "
                      f"{', '.join(_kib(c) for c in biggest[1].chunks)} (append {biggest[0]})"
                      if biggest else ""))  # fmt: skip


# -- endpoint -----------------------------------------------------------------------------------


def _by_operation(records: list[Any]) -> str:
    counts = Counter(f"{r.operation}" for r in records)
    return ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))


def _sent(records: list[Any], prefix: str) -> int:
    return sum(r.response_bytes for r in records if f"/{prefix}/" in r.path)


def endpoint(counts: list[int], repeat: int) -> None:
    """Requests of an append, an open + count and a point query on the local endpoint."""
    from s3ddb.commit.finalizer import drain
    from s3ddb.external_store import create_table
    from s3ddb.io import AwsConfig
    from s3ddb.testing import LocalAWS

    rows = []
    notes = []
    with LocalAWS() as aws:
        so = aws.storage_options()
        env = aws.env(inherit=True)
        for n in counts:
            bucket = f"scale{n}"
            aws.create_bucket(bucket)
            create_table(bucket, AwsConfig.from_storage_options(so))
            uri = f"s3+ddb://{bucket}/ds?ddbTableName={bucket}"
            point_keys, _ = _keys(n, repeat)
            started = time.perf_counter()
            create_synthetic(uri, n, point_keys, so)
            _drain()
            notes.append(f"{n:,}: created in {time.perf_counter() - started:.0f} s")
            appends = []
            for k in range(repeat):
                aws.clear_requests()
                s3ddb_append(uri, n + k, so)
                _drain()
                appends.append(aws.requests)
            aws.clear_requests()
            _forget_manifests()  # a writer that did not commit the newest version
            s3ddb_append(uri, n + repeat, so)
            _drain()
            cold = aws.requests
            drain(flush=True)  # the batched deletes of staged manifests
            _forget_manifests()
            aws.clear_requests()
            ds = s3ddb.dataset(uri, storage_options=so)
            ds.count_rows()
            open_requests = aws.requests
            chunks = len(ds.manifest.fragments.chunk_refs())
            points = []
            for key in point_keys:
                aws.clear_requests()
                result = run_probe(uri, key, so, env)
                points.append((result, aws.requests))
            warm = appends[len(appends) // 2]
            point, point_requests = points[len(points) // 2]
            root = _sent(open_requests, "_versions")
            metadata = _sent(point_requests, "_versions") + _sent(point_requests, "_fragments")
            rows.append([
                f"{n:,}",
                f"{statistics.median(len(a) for a in appends):.0f} ({_by_operation(warm)})",
                f"{len(cold)} ({_by_operation(cold)})",
                f"{len(open_requests)} ({_by_operation(open_requests)}), {_kib(root)}",
                f"{len(point_requests)} ({_by_operation(point_requests)}), metadata "
                f"{_kib(metadata)}, {point['fetched']} chunk",
                str(chunks),
            ])  # fmt: skip
    print_table(
        "Endpoint (local S3 + DynamoDB, s3+ddb://): requests (by operation), bytes sent",
        ("fragments", "append", "append, cold writer", "open + count",
         "point query (fresh process)", "chunks"),
        rows,
        labels=1,
    )  # fmt: skip
    print("\n" + "; ".join(notes))


# -- versions -----------------------------------------------------------------------------------


class History:
    name = ""

    def create(self, uri: str) -> None:
        raise NotImplementedError

    def append(self, uri: str, start: int) -> None:
        raise NotImplementedError

    def versions(self, uri: str) -> list[Any]:
        raise NotImplementedError

    def open_asof(self, uri: str, when: Any) -> int:
        raise NotImplementedError


class S3DDBHistory(History):
    name = "s3ddb"

    def create(self, uri: str) -> None:
        s3ddb.write_dataset(_rows(0, 1), uri)

    def append(self, uri: str, start: int) -> None:
        s3ddb_append(uri, start)

    def versions(self, uri: str) -> list[Any]:
        return [v.timestamp for v in s3ddb.dataset(uri).versions()]

    def open_asof(self, uri: str, when: Any) -> int:
        return s3ddb.dataset(uri, asof=when).version


class PylanceHistory(History):
    name = "pylance"

    def __init__(self) -> None:
        import lance

        self.lance = lance

    def create(self, uri: str) -> None:
        self.lance.write_dataset(_rows(0, 1), uri)

    def append(self, uri: str, start: int) -> None:
        self.lance.write_dataset(_rows(start, 1), uri, mode="append")

    def versions(self, uri: str) -> list[Any]:
        return [v["timestamp"] for v in self.lance.dataset(uri).versions()]

    def open_asof(self, uri: str, when: Any) -> int:
        return int(self.lance.dataset(uri, asof=when).version)


def measure_versions(system: History, uri: str, v: int, repeat: int) -> list[str]:
    """One row of the history table: ``system`` with ``v`` versions."""
    system.create(uri)
    started = time.perf_counter()
    for i in range(1, v):
        system.append(uri, i)
    per_append = (time.perf_counter() - started) / max(v - 1, 1)
    times = system.versions(uri)
    assert len(times) == v, (system.name, len(times), v)
    middle = times[len(times) // 2]
    t_versions = _median(lambda: system.versions(uri), repeat)
    t_asof = _median(lambda: system.open_asof(uri, middle), repeat)
    return [f"{v:,}", system.name, _ms(t_versions), _ms(t_asof), _ms(per_append)]


# -- main ---------------------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", default="1000,10000,100000", help="'' to skip")
    parser.add_argument("--pylance-max", type=int, default=100_000,
                        help="largest fragment count pylance runs at")  # fmt: skip
    parser.add_argument("--endpoint", default="1000,100000", help="'' to skip")
    parser.add_argument("--series", type=int, default=0,
                        help="appends in a row on the largest dataset (0: none)")  # fmt: skip
    parser.add_argument("--versions", default="10,10000", help="'' to skip")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        spec = json.loads(args.probe)
        print(json.dumps(probe(spec["uri"], spec["options"], spec["key"])))
        return
    try:
        import lance  # noqa: F401

        with_pylance = True
    except ImportError:
        with_pylance = False
        print("pylance is not installed (make bench installs the bench extra): s3ddb only")
    counts = _sizes(args.fragments)
    root = Path(tempfile.mkdtemp(prefix="s3ddb-scale-"))
    try:
        rows: list[Row] = []
        if counts:
            print_table("Fragments (local path)", FRAGMENT_COLUMNS, [])
        for n in counts:
            uri = str(root / f"s3ddb-{n}")
            rows.append(measure_s3ddb(uri, n, args.repeat))
            print("| " + " | ".join(fragment_cells(rows[-1])) + " |", flush=True)
            shutil.rmtree(uri, ignore_errors=True)
            if with_pylance and n <= args.pylance_max:
                uri = str(root / f"pylance-{n}")
                rows.append(measure_pylance(uri, n, args.repeat))
                print("| " + " | ".join(fragment_cells(rows[-1])) + " |", flush=True)
                shutil.rmtree(uri, ignore_errors=True)
        if rows:
            print_verdicts(rows)
        if args.series and counts:
            append_series(root, max(counts), args.series)
        if _sizes(args.endpoint):
            endpoint(_sizes(args.endpoint), args.repeat)
        version_counts = _sizes(args.versions)
        systems: list[History] = [S3DDBHistory()] + ([PylanceHistory()] if with_pylance else [])
        if version_counts:
            print_table("Versions (local path)", ("versions", "system", "versions()",
                        "open as of", "each append"), [])  # fmt: skip
        for v in version_counts:
            for system in systems:
                uri = str(root / f"{system.name}-v{v}")
                print("| " + " | ".join(measure_versions(system, uri, v, args.repeat)) + " |",
                      flush=True)  # fmt: skip
                shutil.rmtree(uri, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
