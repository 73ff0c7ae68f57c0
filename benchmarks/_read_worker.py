"""The child process that runs read queries for read_path.py, one system per process.

    python benchmarks/_read_worker.py write  SPEC_JSON   # writes the benchmark's data
    python benchmarks/_read_worker.py query  SPEC_JSON   # answers queries from stdin
    python benchmarks/_read_worker.py stream SPEC_JSON   # streams once, prints peak RSS

SPEC_JSON holds ``system`` (``s3ddb``, ``pyarrow``, ``lance`` or ``delta``), ``uri``,
``options`` (the library's storage options), for ``pyarrow`` also ``files`` (the
Parquet files of the s3ddb version, resolved by the parent from its manifest), for
``stream`` also ``scan_options`` (keyword arguments of ``Dataset.to_batches``).

``write``: writes ``appends`` tables of :func:`make_part` (``rows`` in all) with the
library's own top-level append, and prints ``{"rows", "k_lt_10", "arrow_bytes"}``. It
runs in a child because deltalake holds the GIL during some of its I/O, which would
starve an endpoint served by the parent.

``query``: imports the library, prints a ready line, then for each stdin line
``{"query": NAME}`` runs it as a user would (open the dataset, read the query into one
Table; s3ddb's per-process manifest cache emptied first, clients warm) and prints
``{"seconds", "rows", "ids", "rchar", "syscr"}``: the Table's rows, its ``id`` values
when at most 10, and the bytes / read calls this process made meanwhile (from
``/proc/self/io``: local file reads; socket reads of the endpoint are not in it).

``stream``: streams ``warmup_uri`` (a tiny dataset), notes its RSS, then streams
every batch of ``uri``'s ``to_batches(**scan_options)`` summing ``x``, and prints
``{"rows", "seconds", "rss_before", "peak_rss", "arrow_peak"}``: ``peak_rss`` is the
process's peak RSS (VmHWM, reset to the RSS before the stream where the kernel
allows; the process does nothing else), ``arrow_peak`` the most bytes pyarrow's pool
held above its start, sampled every millisecond.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: name -> (columns or None for all, filter as (column, operator, value) or None).
#: ``point`` looks up ``id = POINT_ID`` where the parent passes the id in the spec.
QUERIES: dict[str, tuple[list[str] | None, tuple[str, str, int] | None]] = {
    "full scan": (None, None),
    "projection x": (["x"], None),
    "k < 10": (None, ("k", "<", 10)),
    "id = X": (None, ("id", "=", -1)),
}


def make_part(index: int, rows: int, seed: int) -> pa.Table:
    """Append number ``index`` of ``rows`` rows: sorted int64 ``id`` continuing the
    previous parts, float64 ``x`` in [0, 1), int32 ``k`` in 0..999, string ``s``;
    the same for a given (index, rows, seed) in every process."""
    rng = np.random.default_rng([seed, index])
    ids = pa.array(np.arange(index * rows, (index + 1) * rows, dtype=np.int64))
    return pa.table(
        {
            "id": ids,
            "x": pa.array(rng.random(rows)),
            "k": pa.array(rng.integers(0, 1000, rows, dtype=np.int32)),
            "s": pc.binary_join_element_wise("s", pc.cast(ids, pa.string()), "-"),
        }
    )


def _write(spec: dict[str, Any]) -> None:
    system, uri, options = spec["system"], spec["uri"], spec.get("options") or None
    appends, per = int(spec["appends"]), int(spec["rows"]) // int(spec["appends"])
    rows = k_lt_10 = arrow_bytes = 0
    for i in range(appends):
        part = make_part(i, per, int(spec["seed"]))
        mode = "create" if i == 0 else "append"
        if system == "s3ddb":
            import s3ddb

            s3ddb.write_dataset(part, uri, mode=mode, storage_options=options)
        elif system == "lance":
            import lance

            lance.write_dataset(part, uri, mode=mode, storage_options=options)
        elif system == "delta":
            from deltalake import write_deltalake

            write_deltalake(uri, part, mode="append", storage_options=options)
        else:
            raise ValueError(f"cannot write with {system!r}")
        rows += part.num_rows
        k_lt_10 += int(pc.sum(pc.less(part["k"], 10)).as_py() or 0)
        arrow_bytes += part.nbytes
    if system == "s3ddb":  # background steps of the last commit, before exiting
        from s3ddb.commit.finalizer import drain

        drain(flush=True)
    _emit({"rows": rows, "k_lt_10": k_lt_10, "arrow_bytes": arrow_bytes})


def sql_text(term: tuple[str, str, int]) -> str:
    return f"{term[0]} {term[1]} {term[2]}"


def _expr(term: tuple[str, str, int]) -> pc.Expression:
    field = pc.field(term[0])
    return field < term[2] if term[1] == "<" else field == term[2]


def query_spec(name: str, point_id: int) -> tuple[list[str] | None, tuple[str, str, int] | None]:
    """The columns and filter of query ``name``, the point lookup aimed at ``point_id``."""
    columns, term = QUERIES[name]
    if term is not None and term[2] == -1:
        term = (term[0], term[1], point_id)
    return columns, term


def run_query(system: str, spec: dict[str, Any], name: str) -> pa.Table:
    """Open the dataset and read query ``name`` with ``system`` into one Table."""
    columns, term = query_spec(name, int(spec["point_id"]))
    uri, options = spec["uri"], spec.get("options") or None
    if system == "s3ddb":
        import s3ddb

        ds = s3ddb.dataset(uri, storage_options=options)
        return ds.to_table(columns=columns, filter=sql_text(term) if term else None)
    if system == "pyarrow":
        import pyarrow.dataset as pads

        pds = pads.dataset(spec["files"], format="parquet")
        return pds.to_table(columns=columns, filter=_expr(term) if term else None)
    if system == "lance":
        import lance

        lds = lance.dataset(uri, storage_options=options)
        return lds.to_table(columns=columns, filter=sql_text(term) if term else None)
    if system == "delta":
        from deltalake import DeltaTable

        table = DeltaTable(uri, storage_options=options)
        return table.to_pyarrow_table(columns=columns, filters=_expr(term) if term else None)
    raise ValueError(f"unknown system {system!r}")


def _forget(system: str) -> None:
    """Drop dataset state s3ddb cached in this process (peers keep none across calls)."""
    if system == "s3ddb":
        from s3ddb.commit.manifest_cache import MANIFESTS

        MANIFESTS.clear()


def _io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        pairs = (line.split(":") for line in f if ":" in line)
        return {k.strip(): int(v) for k, v in pairs}


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _query_loop(spec: dict[str, Any]) -> None:
    system = spec["system"]
    # Import the library before the first timing (a user's process has it loaded).
    run_query(system, spec, "id = X")
    _emit({"ready": True})
    for line in sys.stdin:
        name = json.loads(line)["query"]
        _forget(system)
        before = _io()
        t0 = time.perf_counter()
        try:
            table = run_query(system, spec, name)
        except Exception as exc:
            _emit({"error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            continue
        seconds = time.perf_counter() - t0
        after = _io()
        ids = table["id"].to_pylist() if "id" in table.column_names and len(table) <= 10 else []
        _emit(
            {
                "seconds": seconds,
                "rows": table.num_rows,
                "ids": ids,
                "rchar": after["rchar"] - before["rchar"],
                "syscr": after["syscr"] - before["syscr"],
            }
        )


def _peak_rss() -> int:
    """This process's peak RSS since it started or :func:`_reset_peak_rss` (VmHWM).

    Not ``getrusage().ru_maxrss``: Linux keeps that across ``execve``, so a child
    spawned by a large parent reports at least the parent's RSS at the spawn."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak_rss() -> None:
    """Set the peak RSS to the current RSS, where the kernel allows (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _stream(spec: dict[str, Any]) -> None:
    import s3ddb

    def stream(uri: str) -> tuple[int, float]:
        rows, total = 0, 0.0
        for batch in s3ddb.dataset(uri).to_batches(**spec.get("scan_options", {})):
            rows += batch.num_rows
            total += float(pc.sum(batch.column("x")).as_py() or 0.0)
        return rows, total

    # A stream of a tiny dataset first: the modules, thread pools and allocator arenas a
    # first read sets up are then in the baseline, not counted against the budget.
    stream(spec["warmup_uri"])
    _reset_peak_rss()
    before, base = _current_rss(), pa.total_allocated_bytes()
    # Arrow's own peak (buffers held), sampled: it tells held data from allocator slack.
    stop, arrow_peak = threading.Event(), [0]

    def sample() -> None:
        while not stop.is_set():
            arrow_peak[0] = max(arrow_peak[0], pa.total_allocated_bytes() - base)
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    rows, total = stream(spec["uri"])
    seconds = time.perf_counter() - t0
    stop.set()
    sampler.join()
    peak = _peak_rss()
    _emit(
        {"rows": rows, "sum_x": total, "seconds": seconds, "rss_before": before,
         "peak_rss": peak, "arrow_peak": arrow_peak[0]}
    )  # fmt: skip


def main(argv: list[str]) -> int:
    role, spec = argv[1], json.loads(argv[2])
    {"write": _write, "query": _query_loop, "stream": _stream}[role](spec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
