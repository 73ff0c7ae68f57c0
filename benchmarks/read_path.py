"""The read path: selective and full scans of s3ddb beside pyarrow, pylance and deltalake.

    make bench-read                          # or: python benchmarks/read_path.py [--quick]

One data set (sorted int64 ``id``, float64 ``x``, int32 ``k`` in 0..999, string ``s``,
written in equal appends) and four queries, each opened and read into one Table as a
user would: the full scan, the projection of ``x``, ``k < 10`` (1 % of the rows, all
columns) and ``id = X`` (one row, all columns). Per query and system: the best wall
time of ``--runs`` runs, rows returned, and what was read. Sections, in one run:

1. **Local**: a local path, s3ddb beside ``pyarrow.dataset`` over the very Parquet
   files of the s3ddb version (resolved from its manifest: the floor for those files)
   and pylance (its own copy of the data). Bytes read and read calls come from
   ``/proc/self/io`` of the process that ran the query.
2. **Endpoint**: one strict local S3 + DynamoDB endpoint
   (``s3ddb.testing.LocalAWS(conditional_writes=False)``, moto serving one request at
   a time), s3ddb, pylance and deltalake each with its own bucket and DynamoDB table;
   requests and response bytes are counted at the endpoint per run.
3. **Memory**: streaming (``to_batches``) a local dataset ~``--mem-ratio`` times larger
   than the scan's read-ahead budget, in a fresh process: peak RSS growth against the
   budget.

Every query runs in a child process per system (``_read_worker.py``), clients and
imports warm, dataset state cold (each run opens the dataset; s3ddb's per-process
manifest cache is emptied first). Systems take turns within each round, so noise hits
all alike. Every answer is checked (row count, and the point lookup's single id): a
MISMATCH is printed loudly and ``consistent`` is false in the JSON. The targets of the
read-path work are printed beside the ratios; no speed is asserted here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack
from inspect import signature
from pathlib import Path
from typing import Any

from _read_worker import QUERIES
from peers import create_store, dataset_uri, machine_info, read_json_line

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_read_worker.py"
DEFAULT_JSON = HERE / "results" / "read-path-latest.json"
LABELS = {"s3ddb": "s3ddb", "pyarrow": "pyarrow", "lance": "pylance", "delta": "deltalake"}
TIMEOUT = 900.0

# (query, peer, bound): s3ddb's time must be <= bound x the peer's ("best" = best peer).
LOCAL_TARGETS = [
    ("full scan", "pyarrow", 1.1),
    ("id = X", "pyarrow", 2.0),
    ("k < 10", "pyarrow", 1.0),
    ("k < 10", "lance", 1.5),
]
MEMORY_BOUND = 2.0  # peak RSS growth <= this x the read-ahead budget


def _child(role: str, spec: dict[str, Any], env: dict[str, str] | None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), role, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if role != "query" else subprocess.DEVNULL,
        text=True,
        env=env,
    )


def run_child(role: str, spec: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    """Run a ``write`` or ``stream`` child to its end; its one JSON line."""
    proc = _child(role, spec, env)
    out, err = proc.communicate(timeout=TIMEOUT)
    if proc.returncode:
        raise RuntimeError(f"{role} {spec.get('system')} exited {proc.returncode}: {err[-1500:]}")
    return json.loads(out.strip().splitlines()[-1])


class Reader:
    """A warm ``query`` child of one system."""

    def __init__(self, spec: dict[str, Any], env: dict[str, str] | None) -> None:
        self.system = spec["system"]
        self.proc = _child("query", spec, env)
        read_json_line(self.proc, TIMEOUT)

    def ask(self, query: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"query": query}) + "\n")
        self.proc.stdin.flush()
        reply = read_json_line(self.proc, TIMEOUT)
        if "error" in reply:
            raise RuntimeError(f"{self.system} {query}: {reply['error']}")
        return reply

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


# -- measuring --------------------------------------------------------------------------


def is_data_file(path: str) -> bool:
    """A data file of any of the systems (s3ddb and deltalake: Parquet, pylance: .lance)."""
    return path.endswith((".parquet", ".lance"))


def expected_rows(stats: dict[str, int], query: str) -> int:
    return {"k < 10": stats["k_lt_10"], "id = X": 1}.get(query, stats["rows"])


def measure(
    readers: dict[str, Reader],
    runs: int,
    stats: dict[str, int],
    point_id: int,
    aws: Any = None,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every query ``runs`` times per system, systems taking turns within a round.

    Per query and system: ``ms`` (best run), ``rows``, and of the best run local
    ``read_mib`` / ``read_calls`` or, with ``aws``, ``requests`` / ``get_mib`` and the
    requests by operation. Returns the results and the mismatches found."""
    systems = list(readers)
    out: dict[str, dict[str, Any]] = {q: {} for q in QUERIES}
    mismatches: list[str] = []
    for query in QUERIES:
        best: dict[str, dict[str, Any]] = {}
        for r in range(runs):
            for system in systems[r % len(systems) :] + systems[: r % len(systems)]:
                if aws is not None:
                    aws.clear_requests()
                reply = readers[system].ask(query)
                if aws is not None:
                    log = list(aws.requests)
                    reply["requests"] = len(log)
                    reply["by_operation"] = dict(Counter(f"{x.service}:{x.operation}" for x in log))
                    reply["get_mib"] = sum(x.response_bytes for x in log) / 2**20
                    reply["data_files"] = len({x.path for x in log if is_data_file(x.path)})
                want = expected_rows(stats, query)
                ok = reply["rows"] == want and (query != "id = X" or reply["ids"] == [point_id])
                if not ok:
                    text = f"{LABELS[system]} {query}: {reply['rows']} rows {reply['ids']}"
                    mismatches.append(f"{text}, expected {want}")
                    print(f"\n!!! MISMATCH {mismatches[-1]}\n", flush=True)
                if system not in best or reply["seconds"] < best[system]["seconds"]:
                    best[system] = reply
        for system, reply in best.items():
            row = {"ms": reply["seconds"] * 1000, "rows": reply["rows"]}
            if aws is not None:
                row.update(
                    requests=reply["requests"],
                    get_mib=reply["get_mib"],
                    data_files=reply["data_files"],
                    by_operation=reply["by_operation"],
                )
            else:
                row.update(read_mib=reply["rchar"] / 2**20, read_calls=reply["syscr"])
            out[query][system] = row
    return out, mismatches


def _cells(row: list[str], widths: list[int]) -> str:
    return (
        "  "
        + row[0].ljust(widths[0])
        + "".join("  " + c.rjust(w) for c, w in zip(row[1:], widths[1:]))
    )


def print_table(title: str, head: list[str], body: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    print(f"\n{title}")
    for row in [head, *body]:
        print(_cells(row, widths))


def verdict(ratio: float, bound: float) -> str:
    return f"{ratio:.2f}x (<= {bound:g}x: {'met' if ratio <= bound else 'MISSED'})"


def report_local(res: dict[str, dict[str, Any]], systems: list[str]) -> list[dict[str, Any]]:
    """Print the local tables; return the target checks."""
    head = [
        "query",
        *(f"{LABELS[s]} ms" for s in systems),
        *(f"{LABELS[s]} MiB/calls" for s in systems),
    ]
    body = []
    for query, per in res.items():
        body.append(
            [query, *(f"{per[s]['ms']:,.1f}" for s in systems)]
            + [f"{per[s]['read_mib']:,.1f}/{per[s]['read_calls']}" for s in systems]
        )
    print_table("local: best time; MiB read and read calls of that run", head, body)
    checks = []
    for query, peer, bound in LOCAL_TARGETS:
        if peer not in res[query]:
            continue
        ratio = res[query]["s3ddb"]["ms"] / res[query][peer]["ms"]
        checks.append(
            {"query": query, "peer": peer, "bound": bound, "ratio": ratio, "met": ratio <= bound}
        )
        print(f"  target {query}: s3ddb / {LABELS[peer]} = {verdict(ratio, bound)}")
    return checks


def report_endpoint(res: dict[str, dict[str, Any]], systems: list[str]) -> list[dict[str, Any]]:
    """Print the endpoint table; return the target checks (each query: time <= the best
    peer's, requests < pylance's)."""
    head = ["query", *(f"{LABELS[s]} ms/req/MiB/files" for s in systems), "s3ddb/best peer"]
    body, checks = [], []
    for query, per in res.items():
        peers = [s for s in systems if s != "s3ddb"]
        cells = [
            f"{per[s]['ms']:,.0f} / {per[s]['requests']} / {per[s]['get_mib']:,.1f}"
            f" / {per[s]['data_files']}"
            for s in systems
        ]
        ratio_cell = ""
        if peers and "s3ddb" in per:
            best = min(peers, key=lambda s: per[s]["ms"])
            ratio = per["s3ddb"]["ms"] / per[best]["ms"]
            fewer = "lance" not in per or per["s3ddb"]["requests"] < per["lance"]["requests"]
            checks.append(
                {
                    "query": query,
                    "peer": best,
                    "bound": 1.0,
                    "ratio": ratio,
                    "fewer_requests_than_pylance": fewer,
                    "met": ratio <= 1.0 and fewer,
                }
            )
            ratio_cell = f"{ratio:.2f}x {LABELS[best]}{'' if fewer else ', more req'}"
        body.append([query, *cells, ratio_cell])
    title = "endpoint: best time / requests / MiB sent by the endpoint / data files read"
    print_table(title, head, body)
    for check in checks:
        print(
            f"  target {check['query']}: s3ddb / {LABELS[check['peer']]} = "
            f"{verdict(check['ratio'], 1.0)}, fewer requests than pylance: "
            f"{'met' if check['fewer_requests_than_pylance'] else 'MISSED'}"
        )
    # The ids are sorted and each append holds its own range: one file admits the key.
    files = res["id = X"]["s3ddb"]["data_files"]
    checks.append({"query": "id = X", "data_files": files, "met": files == 1})
    print(f"  target id = X: s3ddb read {files} data file(s), 1 admits the key: "
          f"{'met' if files == 1 else 'MISSED'}")  # fmt: skip
    return checks


# -- sections ---------------------------------------------------------------------------


def write_all(
    systems: list[str],
    uris: dict[str, str],
    options: dict[str, Any],
    args: argparse.Namespace,
    rows: int,
    appends: int,
    env: dict[str, str] | None = None,
) -> dict[str, int]:
    """Write the same data with each system; return its row statistics."""
    stats: dict[str, int] = {}
    for system in systems:
        print(f"  writing {rows:,} rows in {appends} appends with {LABELS[system]}...", flush=True)
        spec = {"system": system, "uri": uris[system], "options": options.get(system)}
        spec.update(rows=rows, appends=appends, seed=args.seed)
        got = run_child("write", spec, env)
        if stats and got != stats:
            raise RuntimeError(f"{system} wrote {got}, another system {stats}")
        stats = got
    return stats


def s3ddb_files(uri: str) -> list[str]:
    """The Parquet files of the latest s3ddb version at local ``uri``, in fragment order."""
    import s3ddb

    ds = s3ddb.dataset(uri)
    assert all(f.deletion_file is None for f in ds.get_fragments())
    return [str(Path(uri) / "data" / df.path) for f in ds.get_fragments() for df in f.files]


def point_id(rows: int) -> int:
    return min(rows - 1, int(rows * 0.8) + 123)


_THREAD_PROFILES: list[Any] = []


def _own_times(profile: Any) -> Counter[str]:
    """Own seconds by function in ``profile`` so far (read while its thread is idle)."""
    out: Counter[str] = Counter()
    for entry in profile.getstats():
        code = entry.code
        if not isinstance(code, str):
            where = "/".join(Path(code.co_filename).parts[-2:])
            code = f"{where}:{code.co_firstlineno}({code.co_name})"
        out[code] += entry.inlinetime
    return out


def profile_s3ddb(query: str, spec: dict[str, Any]) -> None:
    """Print where s3ddb spends the time of ``query``, summed over every thread.

    cProfile sees one thread, and the scan reads on pooled threads that outlive a
    query: every thread started from here on gets a profiler of its own, a warm-up
    run starts the pools, and the profiled run's share is what the profilers gained
    during it."""
    import cProfile
    import threading

    from _read_worker import run_query

    threads = _THREAD_PROFILES  # kept across calls: pooled threads outlive a query

    def start(*_: Any) -> None:  # a new thread's first event: profile the rest of it
        threads.append(cProfile.Profile())
        threads[-1].enable()

    threading.setprofile(start)
    try:
        run_query("s3ddb", spec, query)
        before = [_own_times(p) for p in threads]
        main = cProfile.Profile()
        main.runcall(run_query, "s3ddb", spec, query)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    own = _own_times(main)
    for i, profile in enumerate(threads):
        own.update(_own_times(profile))
        own.subtract(before[i] if i < len(before) else Counter())
    print(
        f"\nprofile of s3ddb {query!r}, local, {1 + len(threads)} threads: own seconds "
        f"summed over threads (lock and queue waits are threads waiting)"
    )
    for name, seconds in own.most_common(12):
        print(f"  {seconds:8.3f}  {name}")


def local_section(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    systems = [s for s in ("s3ddb", "pyarrow", "lance") if s in args.systems or s == "pyarrow"]
    uris = {s: str(root / s) for s in ("s3ddb", "lance")}
    stats = write_all(
        [s for s in systems if s in uris], uris, {}, args, args.local_rows, args.local_appends
    )
    pid = point_id(stats["rows"])
    files = s3ddb_files(uris["s3ddb"])
    readers: dict[str, Reader] = {}
    try:
        for s in systems:
            spec = {
                "system": s,
                "uri": uris.get(s, ""),
                "options": None,
                "point_id": pid,
                "files": files,
            }
            readers[s] = Reader(spec, None)
        res, mismatches = measure(readers, args.runs, stats, pid)
    finally:
        for reader in readers.values():
            reader.close()
    checks = report_local(res, systems)
    for query in args.profile:
        profile_s3ddb(query, {"uri": uris["s3ddb"], "point_id": pid})
    return {
        "rows": stats["rows"],
        "appends": args.local_appends,
        "files": len(files),
        "point_id": pid,
        "queries": res,
        "targets": checks,
        "mismatches": mismatches,
    }


def endpoint_section(args: argparse.Namespace) -> dict[str, Any]:
    from s3ddb.testing import LocalAWS

    systems = [s for s in ("s3ddb", "lance", "delta") if s in args.systems]
    with LocalAWS(conditional_writes=False) as aws, ExitStack() as stack:
        env = aws.env(inherit=True)
        uris, options = {}, {}
        for s in systems:
            bucket, options[s] = create_store(aws, s)
            uris[s] = dataset_uri(s, bucket, "read")
        stats = write_all(
            systems, uris, options, args, args.endpoint_rows, args.endpoint_appends, env
        )
        pid = point_id(stats["rows"])
        readers = {}
        for s in systems:
            spec = {"system": s, "uri": uris[s], "options": options[s], "point_id": pid}
            readers[s] = Reader(spec, env)
            stack.callback(readers[s].close)
        res, mismatches = measure(readers, args.runs, stats, pid, aws)
    checks = report_endpoint(res, systems)
    return {
        "rows": stats["rows"],
        "appends": args.endpoint_appends,
        "point_id": pid,
        "queries": res,
        "targets": checks,
        "mismatches": mismatches,
    }


def memory_section(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Stream a dataset ``--mem-ratio`` x the read-ahead budget; peak RSS against it."""
    per, ahead = args.mem_rows_per_fragment, args.mem_readahead
    fragments = args.mem_ratio * ahead
    uri = str(root / "memory")
    stats = write_all(["s3ddb"], {"s3ddb": uri}, {}, args, per * fragments, fragments)
    budget = stats["arrow_bytes"] * ahead // fragments
    scan_options: dict[str, Any] = {"fragment_readahead": ahead}
    option = args.budget_option
    if option == "auto":  # the byte budget, where the scanner has one
        from s3ddb.reading.scanner import Scanner

        option = "readahead_bytes" if "readahead_bytes" in signature(Scanner).parameters else ""
    if option and option != "none":
        budget = stats["arrow_bytes"] // args.mem_ratio
        scan_options = {"fragment_readahead": ahead, option: budget}
    warmup = str(root / "memory-warmup")
    # More fragments than are read ahead, so that every reading thread starts.
    write_all(["s3ddb"], {"s3ddb": warmup}, {}, args, 500 * (2 * ahead + 2), 2 * ahead + 2)
    spec = {"system": "s3ddb", "uri": uri, "warmup_uri": warmup, "scan_options": scan_options}
    # Peak RSS moves with thread timing on a busy machine: the median of a few fresh
    # processes is reported, the largest beside it.
    streams = [run_child("stream", spec) for _ in range(args.mem_runs)]
    for got in streams:
        got["growth"] = got["peak_rss"] - got["rss_before"]
    streams.sort(key=lambda g: g["growth"])
    got = streams[len(streams) // 2]
    ratio, worst = got["growth"] / budget, streams[-1]["growth"] / budget
    mib = 2**20
    print(
        f"\nmemory: streamed {got['rows']:,} rows ({stats['arrow_bytes'] / mib:,.0f} MiB in Arrow "
        f"memory, {fragments} fragments) with {scan_options} in {got['seconds']:.2f} s\n"
        f"  budget {budget / mib:,.0f} MiB; median of {len(streams)} processes: peak RSS "
        f"{got['peak_rss'] / mib:,.0f} MiB, growth {got['growth'] / mib:,.0f} MiB = "
        f"{verdict(ratio, MEMORY_BOUND)} of the budget (largest {worst:.2f}x);\n"
        f"  Arrow buffers held at most {got['arrow_peak'] / mib:,.0f} MiB"
    )
    ok = all(g["rows"] == stats["rows"] for g in streams)
    if not ok:
        print(
            f"\n!!! MISMATCH memory: {[g['rows'] for g in streams]} rows streamed, "
            f"{stats['rows']} written\n"
        )
    return {
        **got,
        "runs": streams,
        "dataset_arrow_bytes": stats["arrow_bytes"],
        "budget_bytes": budget,
        "scan_options": scan_options,
        "growth_bytes": got["growth"],
        "ratio": ratio,
        "largest_ratio": worst,
        "met": ratio <= MEMORY_BOUND,
        "mismatches": [] if ok else ["memory rows"],
    }


# -- main -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--quick", action="store_true", help="smoke run, well under a minute")
    add("--sections", default="local,endpoint,memory", help="comma-separated subset")
    add("--systems", default="s3ddb,lance,delta", help="peers to include (pyarrow: always, local)")
    add("--runs", type=int, help="runs per query and system, the best reported (default 3)")
    add("--local-rows", type=int, help="rows of the local data set (default 5,000,000)")
    add("--local-appends", type=int, help="appends writing it (default 10)")
    add("--endpoint-rows", type=int, help="rows of the endpoint data set (default 10,000,000)")
    add("--endpoint-appends", type=int, help="appends writing it (default 10)")
    add("--mem-rows-per-fragment", type=int, help="memory section (default 1,000,000)")
    add("--mem-readahead", type=int, default=4, help="fragment_readahead (threads) streamed with")
    add("--mem-ratio", type=int, default=10, help="dataset size / read-ahead budget")
    add("--mem-runs", type=int, help="streaming processes, median reported (default 3)")
    add(
        "--budget-option",
        default="auto",
        help="the to_batches option taking a read-ahead budget in bytes, set to the "
        "dataset's Arrow size / --mem-ratio; 'none': the budget is --mem-readahead "
        "fragments instead; default 'auto': readahead_bytes where the scanner has it",
    )
    add(
        "--profile",
        action="append",
        default=[],
        choices=list(QUERIES),
        help="profile s3ddb's local run of this query (repeatable)",
    )
    add("--seed", type=int, default=16)
    add("--json", type=Path, default=DEFAULT_JSON, help="where to write the raw numbers")
    args = parser.parse_args(argv)
    sizes = {
        "runs": (3, 2),
        "local_rows": (5_000_000, 200_000),
        "local_appends": (10, 4),
        "endpoint_rows": (10_000_000, 100_000),
        "endpoint_appends": (10, 4),
        "mem_rows_per_fragment": (1_000_000, 20_000),
        "mem_runs": (3, 1),
    }
    for name, (full, quick) in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if "s3ddb" not in args.systems:
        args.systems.insert(0, "s3ddb")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info()
    print(
        f"read path; cpus {machine['cpu_count']}, python {machine['python']}, {machine['platform']}"
    )
    print("libraries: " + ", ".join(f"{k} {v}" for k, v in machine["libraries"].items()))
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    root = Path(tempfile.mkdtemp(prefix="s3ddb-read-"))
    try:
        if "local" in args.sections:
            print(f"\nlocal: {args.local_rows:,} rows in {args.local_appends} appends", flush=True)
            results["local"] = local_section(args, root)
        if "endpoint" in args.sections:
            print(
                f"\nendpoint: {args.endpoint_rows:,} rows in {args.endpoint_appends} appends",
                flush=True,
            )
            results["endpoint"] = endpoint_section(args)
        if "memory" in args.sections:
            results["memory"] = memory_section(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mismatches = [
        m for s in ("local", "endpoint", "memory") for m in results.get(s, {}).get("mismatches", [])
    ]
    results["consistent"] = not mismatches
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"\n{'consistent' if not mismatches else 'MISMATCHES: ' + '; '.join(mismatches)}")
    print(f"raw numbers: {args.json}")
    return 0 if not mismatches else 1


if __name__ == "__main__":
    raise SystemExit(main())
