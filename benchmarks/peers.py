"""s3ddb beside its peers, pylance and deltalake, on one local S3 + DynamoDB endpoint.

    make bench-peers                          # or: python benchmarks/peers.py [--quick]

Every system commits through a DynamoDB table of its own (s3ddb's external manifest
store, Lance's ``s3+ddb://`` commit store, delta-rs's DynamoDB log store) on the same
in-process endpoint, ``s3ddb.testing.LocalAWS(conditional_writes=False)``: moto behind
one lock, so requests are served one at a time and the request log names each one.
Each commit appends 3 rows (int64 ``id``, string ``kind``); every dataset is created by
a first, untimed write. Sections, all systems in one run:

1. Sequential appends, in this process, clients warm: per round one fresh top-level
   append per system, in an order that rotates each round so noise hits all alike.
   Latency is the wall time of the call. s3ddb returns once a commit is decided and
   finishes it (manifest copy, row repoint, staged-object delete) on a background
   thread: that work is waited for after the call, reported apart ("+ background"),
   and its requests are counted with the append. The request log is cleared before
   each append and read after (nothing else talks to the endpoint then).
1b. The same appends through a link that delays every byte by ``--one-way-ms`` (5 ms)
   each way (``_delayed_link.py``, in this process), so that each round trip a system
   waits for costs what it costs against a remote S3 and DynamoDB; section 1's
   endpoint answers in about a millisecond and hides it.
2. Concurrent appends: for each writer count, for each system in turn, N child
   processes (``_peer_worker.py writer``) import the library and build their tables,
   report ready, and start together when the parent writes "go" to their stdin (start-up
   and imports untimed); each appends back to back. commits/s = successful commits /
   (last commit's end - start moment); "incl. background" runs until the last writer
   finished its background work. Requests are counted from the start moment until every
   writer exited. Afterwards the dataset's rows are counted: anything but
   3 x (1 + successful commits) rows with distinct ids is a MISMATCH (a lost or phantom
   commit), reported loudly.
3. Open latest and list versions at growing history sizes: each history is built by
   appending (delta-rs keeps its default checkpoint interval; its cost is part of the
   result), then a probe child (``_peer_worker.py probe``), warmed by one open, times
   opens of the latest version (median of 5) and one versions()/history() call, with
   the request log cleared before each. Opens are cold for dataset state (s3ddb's
   per-process manifest cache is emptied first; the peers keep none between calls)
   and warm for clients.

Numbers come from moto on this machine: they compare the protocols' round trips and
client-side work, not S3 or DynamoDB latency. No speed assertions live here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from _delayed_link import DelayedLink, delayed_options
from _peer_worker import SYSTEMS, Options, make_table

from s3ddb.testing import LocalAWS

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_peer_worker.py"
DEFAULT_JSON = HERE / "results" / "peers-latest.json"
OPENS = 5
READY_TIMEOUT = 300.0


# -- endpoint and datasets --------------------------------------------------------------


def storage_options(aws: LocalAWS, system: str, table: str) -> Options:
    """Each library's spelling of "this endpoint, these dummy keys, this DynamoDB table"."""
    so = aws.storage_options()
    url, key, secret = aws.endpoint_url, so["aws_access_key_id"], so["aws_secret_access_key"]
    if system == "s3ddb":
        return so
    if system == "lance":
        return {
            "allow_http": "true",
            "aws_endpoint": url,
            "dynamodb_endpoint": url,
            "aws_region": aws.region,
            "aws_access_key_id": key,
            "aws_secret_access_key": secret,
        }
    return {
        "AWS_ENDPOINT_URL": url,
        # delta-rs does not apply AWS_ENDPOINT_URL to DynamoDB: without this it calls AWS.
        "AWS_ENDPOINT_URL_DYNAMODB": url,
        "AWS_REGION": aws.region,
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_LOCKING_PROVIDER": "dynamodb",
        "DELTA_DYNAMO_TABLE_NAME": table,
    }


def create_store(aws: LocalAWS, system: str) -> tuple[str, Options]:
    """Create the system's bucket and DynamoDB table; return the bucket and options."""
    bucket, table = aws.create_bucket(f"peers-{system}"), f"peers-{system}"
    if system == "s3ddb":
        from s3ddb.external_store import create_table
        from s3ddb.io import AwsConfig

        create_table(table, AwsConfig.from_storage_options(aws.storage_options()))
    else:
        # Lance: base_uri (S, HASH) + version (N, RANGE); delta-rs: tablePath + fileName.
        keys = [("base_uri", "S"), ("version", "N")]
        if system == "delta":
            keys = [("tablePath", "S"), ("fileName", "S")]
        ddb = aws.boto3_client("dynamodb")
        ddb.create_table(
            TableName=table,
            KeySchema=[
                {"AttributeName": keys[0][0], "KeyType": "HASH"},
                {"AttributeName": keys[1][0], "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in keys],
            BillingMode="PAY_PER_REQUEST",
        )
    return bucket, storage_options(aws, system, table)


def dataset_uri(system: str, bucket: str, prefix: str) -> str:
    """s3ddb and Lance name the DynamoDB table in the URI; delta-rs in its options."""
    if system == "delta":
        return f"s3://{bucket}/{prefix}"
    return f"s3+ddb://{bucket}/{prefix}?ddbTableName={bucket}"


def ddb_items(aws: LocalAWS, table: str) -> int:
    """Items in a DynamoDB table: proof that a system really commits through it."""
    return int(aws.boto3_client("dynamodb").scan(TableName=table, Select="COUNT")["Count"])


def request_log(aws: LocalAWS) -> Counter[str]:
    """The request log as ``service:Operation`` counts."""
    return Counter(f"{r.service}:{r.operation}" for r in aws.requests)


# -- child processes --------------------------------------------------------------------


def spawn(
    aws: LocalAWS, role: str, spec: dict[str, Any], stderr: IO[bytes]
) -> subprocess.Popen[str]:
    """Start ``_peer_worker.py ROLE SPEC`` pointed at ``aws`` (its ready line unread)."""
    return subprocess.Popen(
        [sys.executable, str(WORKER), role, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=aws.env(inherit=True),
    )


def read_json_line(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """One JSON line from ``proc`` (which writes nothing else meanwhile), within ``timeout``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"child {proc.pid} sent nothing within {timeout:.0f} s or exited")
    return dict(json.loads(line))


class Probe:
    """A warm child process of one system that opens, lists versions and counts rows."""

    def __init__(self, aws: LocalAWS, system: str, options: Options) -> None:
        self.aws = aws
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by __exit__
        self.proc = spawn(aws, "probe", {"system": system, "options": options}, self.stderr)
        read_json_line(self.proc, READY_TIMEOUT)

    def call(self, op: str, uri: str, timeout: float = 600.0) -> dict[str, Any]:
        """Run ``op`` on ``uri`` with a fresh request log; add ``requests`` to the reply."""
        assert self.proc.stdin is not None
        self.aws.clear_requests()
        self.proc.stdin.write(json.dumps({"op": op, "uri": uri}) + "\n")
        self.proc.stdin.flush()
        try:
            reply = read_json_line(self.proc, timeout)
        except RuntimeError as exc:
            self.stderr.seek(0)
            tail = self.stderr.read()[-800:].decode(errors="replace")
            raise RuntimeError(f"{exc}; its stderr ends: {tail}") from exc
        if "error" in reply:
            raise RuntimeError(f"{op} {uri}: {reply['error']}")
        reply["requests"] = request_log(self.aws)
        return reply

    def check_rows(self, uri: str, commits: int) -> dict[str, Any]:
        """Rows of ``uri`` against ``commits`` successful 3-row commits; warns on mismatch."""
        rows, distinct = self.call("rows", uri)["value"]
        expected = 3 * commits
        ok = rows == distinct == expected
        if not ok:
            print(
                f"\n!!! MISMATCH at {uri}: {rows} rows ({distinct} distinct ids), "
                f"{expected} expected from {commits} successful commits\n",
                flush=True,
            )
        return {"rows": rows, "distinct_ids": distinct, "expected": expected, "ok": ok}

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()
        self.stderr.close()


# -- statistics and tables --------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks; NaN if empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def per_call(counters: list[Counter[str]], calls: int | None = None) -> dict[str, float]:
    """Requests per call (default: one call per counter), by ``service:Operation``, by
    ``service:*`` and in ``total``."""
    total: Counter[str] = Counter()
    for counter in counters:
        for name, n in counter.items():
            total[name] += n
            total[name.split(":")[0] + ":*"] += n
            total["total"] += n
    calls = len(counters) if calls is None else calls
    return {name: n / max(1, calls) for name, n in sorted(total.items())}


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return "-" if value != value else f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def print_table(title: str, systems: list[str], rows: list[tuple[str, list[Any], bool]]) -> None:
    """One column per system, then s3ddb/peer ratios on rows flagged as key numbers."""
    peers = [s for s in systems if s != "s3ddb"] if "s3ddb" in systems else []
    head = ["", *(SYSTEMS[s].label for s in systems), *(f"s3ddb/{SYSTEMS[p].label}" for p in peers)]
    body = []
    for name, values, key in rows:
        cells = [name, *(fmt(v) for v in values)]
        for peer in peers:
            mine, theirs = values[systems.index("s3ddb")], values[systems.index(peer)]
            numeric = key and all(isinstance(v, (int, float)) for v in (mine, theirs))
            cells.append(f"{mine / theirs:.2f}x" if numeric and theirs else "")
        body.append(cells)
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    print(f"\n{title}")
    for row in [head, *body]:
        print(
            "  "
            + row[0].ljust(widths[0])
            + "".join("  " + c.rjust(w) for c, w in zip(row[1:], widths[1:]))
        )


def request_rows(per: list[dict[str, float]]) -> list[tuple[str, list[Any], bool]]:
    """Table rows for requests per call: the total, per service, then per operation."""
    names = sorted(
        {n for p in per for n in p if n != "total"}, key=lambda n: (n[:3], "*" not in n, n)
    )
    rows: list[tuple[str, list[Any], bool]] = [
        ("requests", [p.get("total", 0.0) for p in per], True)
    ]
    for name in names:
        label = f"  {name.split(':')[0]}" if name.endswith("*") else f"    {name.split(':')[1]}"
        rows.append((label, [p.get(name, 0.0) for p in per], False))
    return rows


# -- the sections -----------------------------------------------------------------------


def rotated(items: list[str], by: int) -> list[str]:
    """``items`` starting at ``by`` (mod len): who goes first changes every round."""
    k = by % len(items)
    return items[k:] + items[:k]


@dataclass
class Run:
    """One endpoint, and per system its bucket (= DynamoDB table name), options and probe."""

    aws: LocalAWS
    systems: list[str]
    buckets: dict[str, str]
    options: dict[str, Options]
    probes: dict[str, Probe]

    def uri(self, system: str, prefix: str) -> str:
        return dataset_uri(system, self.buckets[system], prefix)

    def append(self, system: str, uri: str, first_id: int) -> int | None:
        return SYSTEMS[system].append(uri, self.options[system], make_table(first_id))

    def create(self, system: str, uri: str) -> None:
        """The untimed first write, its background work finished (nothing left running)."""
        self.append(system, uri, 0)
        SYSTEMS[system].settle()

    def sequential(self, rounds: int) -> dict[str, Any]:
        """Section 1: sequential appends in this process, systems interleaved by round."""
        uris = {s: self.uri(s, "sequential") for s in self.systems}
        raw: dict[str, dict[str, list[Any]]] = {}
        for s in self.systems:
            self.create(s, uris[s])
            raw[s] = {"latency": [], "background": [], "requests": [], "attempts": []}
        for r in range(rounds):
            for s in rotated(self.systems, r):
                self.aws.clear_requests()
                t0 = time.perf_counter()
                attempts = self.append(s, uris[s], 3 * (r + 1))
                t1 = time.perf_counter()
                # Background work is finished before the next system runs, so that
                # it neither loads nor is counted against another system; staged
                # manifests stay batched, as in a process that keeps appending.
                SYSTEMS[s].settle(flush=False)
                raw[s]["latency"].append(t1 - t0)
                raw[s]["background"].append(time.perf_counter() - t1)
                raw[s]["requests"].append(request_log(self.aws))
                raw[s]["attempts"].append(attempts)
        for s in self.systems:  # the batched deletes, shared by all appends
            self.aws.clear_requests()
            SYSTEMS[s].settle()
            raw[s]["requests"][-1] += request_log(self.aws)
        out: dict[str, Any] = {}
        for s in self.systems:
            lat = raw[s]["latency"]
            out[s] = {
                "latency_s": lat,
                "median_ms": statistics.median(lat) * 1000,
                "p90_ms": pct(lat, 90) * 1000,
                "background_median_ms": statistics.median(raw[s]["background"]) * 1000,
                "background_s": raw[s]["background"],
                "requests_per_append": per_call(raw[s]["requests"]),
                "attempts": raw[s]["attempts"],
                "rows": self.probes[s].check_rows(uris[s], 1 + rounds),
            }
        col = [out[s] for s in self.systems]
        print_table(
            f"1. Sequential appends ({rounds} per system, warm, in-process): per append",
            self.systems,
            [
                ("median ms", [r["median_ms"] for r in col], True),
                ("p90 ms", [r["p90_ms"] for r in col], True),
                ("+ background ms", [r["background_median_ms"] for r in col], False),
                *request_rows([r["requests_per_append"] for r in col]),
                ("rows check", ["ok" if r["rows"]["ok"] else "MISMATCH" for r in col], False),
            ],
        )
        return out

    def sequential_delayed(self, rounds: int, one_way: float) -> dict[str, Any]:
        """Section 1b: section 1's appends through a :class:`DelayedLink`, so that each
        round trip a system waits for costs ``2 * one_way`` seconds, as against a
        remote S3 and DynamoDB."""
        with DelayedLink((self.aws.host, self.aws.port), one_way) as link:
            options = {
                s: delayed_options(self.options[s], self.aws.endpoint_url, link.url)
                for s in self.systems
            }
            uris = {s: self.uri(s, "delayed") for s in self.systems}
            latency: dict[str, list[float]] = {s: [] for s in self.systems}
            for s in self.systems:
                SYSTEMS[s].append(uris[s], options[s], make_table(0))
                SYSTEMS[s].settle()
            for r in range(rounds):
                for s in rotated(self.systems, r):
                    t0 = time.perf_counter()
                    SYSTEMS[s].append(uris[s], options[s], make_table(3 * (r + 1)))
                    latency[s].append(time.perf_counter() - t0)
                    SYSTEMS[s].settle(flush=False)
            for s in self.systems:
                SYSTEMS[s].settle()
        out = {
            s: {
                "latency_s": latency[s],
                "median_ms": statistics.median(latency[s]) * 1000,
                "p90_ms": pct(latency[s], 90) * 1000,
                "rows": self.probes[s].check_rows(uris[s], 1 + rounds),
            }
            for s in self.systems
        }
        col = [out[s] for s in self.systems]
        print_table(
            f"1b. Sequential appends through a link of {2 * one_way * 1000:g} ms round trip "
            f"({rounds} per system): per append",
            self.systems,
            [
                ("median ms", [r["median_ms"] for r in col], True),
                ("p90 ms", [r["p90_ms"] for r in col], True),
                ("rows check", ["ok" if r["rows"]["ok"] else "MISMATCH" for r in col], False),
            ],
        )
        return {"one_way_s": one_way, **out}

    def writers(
        self, system: str, uri: str, n: int, appends: int, timeout: float
    ) -> dict[str, Any]:
        """Start ``n`` writer children, release them together, collect their commits."""
        records: list[dict[str, Any]] = []
        settled: list[float] = []
        timed_out = 0
        with ExitStack() as stack:
            logs = [stack.enter_context(tempfile.TemporaryFile()) for _ in range(n)]
            procs = []
            for w, log in enumerate(logs):
                spec = {"system": system, "uri": uri, "options": self.options[system]}
                spec.update(appends=appends, first_id=1_000_000 * (w + 1))
                procs.append(stack.enter_context(spawn(self.aws, "writer", spec, log)))
                stack.callback(procs[-1].kill)  # before Popen's exit waits for it
            for proc in procs:
                read_json_line(proc, READY_TIMEOUT)
            self.aws.clear_requests()
            start = time.time()
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            for proc, log in zip(procs, logs):
                try:
                    out, _ = proc.communicate(timeout=max(1.0, start + timeout - time.time()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, _ = proc.communicate()
                    timed_out += 1
                lines = [json.loads(line) for line in out.splitlines() if line.strip()]
                records += [line for line in lines if "ok" in line]
                settled += [line["settled"] for line in lines if "settled" in line]
                if proc.returncode:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-500:]
                    print(f"  writer {proc.pid} exited {proc.returncode}: {tail}", flush=True)
            requests = request_log(self.aws)
        good = [r for r in records if r["ok"]]
        lat = [r["latency"] for r in good]
        wall = max((r["end"] for r in records), default=start) - start
        settled_wall = max([*settled, start + wall]) - start
        first = [r["latency"] for r in good if r["seq"] == 0]
        attempts = [r["attempts"] for r in good if r["attempts"] is not None]
        return {
            "records": records,
            "wall_s": wall,
            "commits_per_s": len(good) / wall if wall > 0 else float("nan"),
            "settled_wall_s": settled_wall,
            "commits_per_s_settled": len(good) / settled_wall if wall > 0 else float("nan"),
            "ok": len(good),
            "failed": len(records) - len(good) + (n * appends - len(records)),
            "timed_out_writers": timed_out,
            "errors": dict(Counter(r["error"] for r in records if not r["ok"])),
            "median_ms": statistics.median(lat) * 1000 if lat else float("nan"),
            "p90_ms": pct(lat, 90) * 1000,
            "max_ms": max(lat, default=float("nan")) * 1000,
            "first_commit_median_ms": statistics.median(first) * 1000 if first else float("nan"),
            "requests": dict(requests),
            "attempts_mean": statistics.mean(attempts) if attempts else "n/a",
            "attempts_max": max(attempts) if attempts else "n/a",
        }

    def concurrent(self, writer_counts: list[int], appends: int, timeout: float) -> dict[str, Any]:
        """Section 2: N writer processes per system, one system at a time."""
        out: dict[str, Any] = {}
        for n in writer_counts:
            out[str(n)] = {}
            for s in self.systems:
                uri = self.uri(s, f"writers-{n}")
                self.create(s, uri)
                print(f"  {n} writers x {appends} appends: {SYSTEMS[s].label}...", flush=True)
                res = self.writers(s, uri, n, appends, timeout)
                res["rows"] = self.probes[s].check_rows(uri, 1 + res["ok"])
                for error, count in res["errors"].items():
                    print(f"    {count} x {error}", flush=True)
                out[str(n)][s] = res
            col = [out[str(n)][s] for s in self.systems]
            per = [per_call([Counter(r["requests"])], r["ok"]) for r in col]
            print_table(
                f"2. Concurrent appends: {n} writer processes x {appends} appends each",
                self.systems,
                [
                    ("commits/s", [r["commits_per_s"] for r in col], True),
                    ("  incl. background", [r["commits_per_s_settled"] for r in col], True),
                    ("successful commits", [r["ok"] for r in col], False),
                    ("failed commits", [r["failed"] for r in col], False),
                    ("median ms", [r["median_ms"] for r in col], True),
                    ("p90 ms", [r["p90_ms"] for r in col], True),
                    ("max ms", [r["max_ms"] for r in col], True),
                    ("first commit ms", [r["first_commit_median_ms"] for r in col], True),
                    ("requests/commit", [p.get("total", 0.0) for p in per], True),
                    ("  s3", [p.get("s3:*", 0.0) for p in per], False),
                    ("  dynamodb", [p.get("dynamodb:*", 0.0) for p in per], False),
                    ("attempts mean", [r["attempts_mean"] for r in col], False),
                    ("attempts max", [r["attempts_max"] for r in col], False),
                    ("rows check", ["ok" if r["rows"]["ok"] else "MISMATCH" for r in col], False),
                ],
            )
        return out

    def history(self, sizes: list[int]) -> dict[str, Any]:
        """Section 3: open latest / list versions as each history grows to each size."""
        uris = {s: self.uri(s, "history") for s in self.systems}
        commits = 0
        out: dict[str, Any] = {}
        for size in sorted(sizes):
            print(f"  building histories up to {size} versions...", flush=True)
            while commits < size:
                for s in self.systems:
                    self.append(s, uris[s], 3 * commits)
                commits += 1
                self.aws.clear_requests()  # the log is only read for measured calls
                if commits % 100 == 0:
                    print(f"    {commits} versions", flush=True)
            res: dict[str, Any] = {s: {"open_s": [], "open_requests": []} for s in self.systems}
            for s in self.systems:
                SYSTEMS[s].settle()
                self.probes[s].call("open", uris[s])  # warm-up: the probe's clients, caches
            for i in range(OPENS):
                for s in rotated(self.systems, i):
                    reply = self.probes[s].call("open", uris[s])
                    res[s]["open_s"].append(reply["seconds"])
                    res[s]["open_requests"].append(reply["requests"])
            for s in self.systems:
                reply = self.probes[s].call("versions", uris[s])
                res[s].update(
                    open_median_ms=statistics.median(res[s]["open_s"]) * 1000,
                    requests_per_open=per_call(res[s]["open_requests"]),
                    versions_ms=reply["seconds"] * 1000,
                    versions_requests=per_call([reply["requests"]]),
                    versions_listed=reply["value"],
                )
                if reply["value"] != size:
                    label = SYSTEMS[s].label
                    print(f"  !!! {label} listed {reply['value']} versions, {size} committed")
            out[str(size)] = res
            col = [res[s] for s in self.systems]
            print_table(
                f"3. History of {size} versions: open latest (median of {OPENS}), list versions",
                self.systems,
                [
                    ("open ms", [r["open_median_ms"] for r in col], True),
                    ("requests/open", [r["requests_per_open"]["total"] for r in col], True),
                    ("versions() ms", [r["versions_ms"] for r in col], True),
                    ("requests/versions()", [r["versions_requests"]["total"] for r in col], True),
                    ("versions listed", [r["versions_listed"] for r in col], False),
                ],
            )
        return out


# -- main -------------------------------------------------------------------------------


def _installed_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    names = ["s3ddb", "pylance", "deltalake", "pyarrow", "moto", "boto3"]
    versions = {name: _installed_version(name) for name in names}
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "libraries": versions,
    }


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: 10 rounds (5 delayed), 4 writers x 3 appends, versions 10,100",
    )
    parser.add_argument(
        "--systems", default="s3ddb,lance,delta", help="comma-separated subset of s3ddb,lance,delta"
    )
    parser.add_argument("--rounds", type=int, help="sequential rounds (default 30)")
    parser.add_argument(
        "--one-way-ms",
        type=float,
        default=5.0,
        help="section 1b's delay each way, in ms (a round trip is twice that; 0 skips 1b)",
    )
    parser.add_argument("--delayed-rounds", type=int, help="section 1b's rounds (default 15)")
    parser.add_argument("--writers", type=int_list, help="writer counts (default 4,8,16)")
    parser.add_argument("--appends-per-writer", type=int, help="appends per writer (default 5)")
    parser.add_argument("--versions", type=int_list, help="history sizes (default 10,100,1000)")
    parser.add_argument(
        "--writer-timeout",
        type=float,
        default=600.0,
        help="seconds before a writer process is killed",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    args = parser.parse_args(argv)
    quick = {
        "rounds": 10,
        "delayed_rounds": 5,
        "writers": [4],
        "appends_per_writer": 3,
        "versions": [10, 100],
    }
    full = {
        "rounds": 30,
        "delayed_rounds": 15,
        "writers": [4, 8, 16],
        "appends_per_writer": 5,
        "versions": [10, 100, 1000],
    }
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown or not args.systems:
        parser.error(f"--systems: unknown {sorted(unknown)}; choose from {list(SYSTEMS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    systems: list[str] = args.systems
    machine = machine_info()
    print(
        f"peers: {', '.join(SYSTEMS[s].label for s in systems)}; cpus {machine['cpu_count']}, "
        f"python {machine['python']}, {machine['platform']}"
    )
    print("libraries: " + ", ".join(f"{k} {v}" for k, v in machine["libraries"].items()))
    for s in systems:
        SYSTEMS[s].import_modules()
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    with LocalAWS(conditional_writes=False) as aws, ExitStack() as stack:
        print(
            f"\nendpoint {aws.endpoint_url} (moto, one request at a time; S3 without "
            "conditional writes)\nratios are s3ddb's value / the peer's: below 1 is better "
            "for s3ddb on times and requests, above 1 on commits/s",
            flush=True,
        )
        buckets, options = {}, {}
        for s in systems:
            buckets[s], options[s] = create_store(aws, s)
        probes = {s: stack.enter_context(Probe(aws, s, options[s])) for s in systems}
        run = Run(aws, systems, buckets, options, probes)
        results["sequential"] = run.sequential(args.rounds)
        if args.one_way_ms > 0:
            results["sequential_delayed"] = run.sequential_delayed(
                args.delayed_rounds, args.one_way_ms / 1000
            )
        print("\nconcurrent appends:", flush=True)
        results["concurrent"] = run.concurrent(
            args.writers, args.appends_per_writer, args.writer_timeout
        )
        print("\nhistories:", flush=True)
        results["history"] = run.history(args.versions)
        items = {s: ddb_items(aws, buckets[s]) for s in systems}
        results["dynamodb_items"] = items
        print(
            "\nDynamoDB items in each system's table (each commits through it): "
            + ", ".join(f"{SYSTEMS[s].label} {n}" for s, n in items.items())
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"\nraw numbers: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
