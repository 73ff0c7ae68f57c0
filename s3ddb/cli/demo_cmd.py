"""``s3ddb demo``: what s3ddb does, shown end to end on an embedded local AWS endpoint.

1. Start a local S3 + DynamoDB endpoint whose S3 has no conditional writes.
2. Provision the manifest table exactly as the Terraform module does.
3. Create a dataset under ``s3+ddb://`` and run several writer processes at once.
4. Crash one writer (``os._exit``) right after its version is decided in DynamoDB,
   before the manifest is finalized.
5. Show a reader finding the staged version and finalizing it.
6. Run deletes, an update and two upserts of the same keys as processes at once,
   then compact the fragments they left behind.
7. Run two Spark applications appending to another dataset while a Python process
   deletes from it (skipped, and said so, without PySpark or Java).
8. Print the history and a verification with a clear PASS/FAIL.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from s3ddb.cli.output import help_text

if TYPE_CHECKING:
    from s3ddb.dataset import Dataset
    from s3ddb.external_store import ExternalManifestStore
    from s3ddb.testing import LocalAWS

__all__ = [
    "BUCKET",
    "CHANGES",
    "PREFIX",
    "ROWS_PER_APPEND",
    "SEED_ROWS",
    "SPARK_APPS",
    "SPARK_PREFIX",
    "SPARK_ROWS",
    "TABLE",
    "UPSERT_KEYS",
    "register",
    "run",
    "run_change",
    "run_writer",
]

BUCKET = "s3ddb-demo"
TABLE = "s3ddb_demo_manifests"
PREFIX = "events"
ROWS_PER_APPEND = 100


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run concurrent writers, a crash and its repair on an embedded local AWS endpoint",
        description=help_text(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--writers", type=int, default=6, help="concurrent writer processes")
    p.add_argument("--appends", type=int, default=5, help="appends per writer")
    p.add_argument("--no-spark", dest="spark", action="store_false", help="skip the Spark step (7)")
    p.set_defaults(func=run)
    # No help=: hidden from the verb list (help=SUPPRESS prints "==SUPPRESS==").
    w = subparsers.add_parser("demo-writer")
    w.add_argument("uri")
    w.add_argument("writer", type=int)
    w.add_argument("appends", type=int)
    w.set_defaults(func=run_writer)
    c = subparsers.add_parser("demo-change")
    c.add_argument("uri")
    c.add_argument("change", choices=sorted(CHANGES))
    c.set_defaults(func=run_change)


UPSERT_KEYS = range(9_000_000, 9_000_010)

#: Records one named check of the demo, and prints it: ``check(name, ok)``.
Check = Callable[[str, bool], None]

#: The row changes of step 6, each run by its own process at the same time.
CHANGES: dict[str, str] = {
    "delete-writer-0": "delete writer = 0",
    "delete-writer-1-even": "delete writer = 1 AND event_id % 2 = 0",
    "update-writer-2": "update payload = 'updated' where writer = 2",
    "upsert-a": f"upsert event_id {UPSERT_KEYS.start}..{UPSERT_KEYS.stop - 1} (payload 'a')",
    "upsert-b": f"upsert event_id {UPSERT_KEYS.start}..{UPSERT_KEYS.stop - 1} (payload 'b')",
}


def run_change(args: argparse.Namespace) -> int:
    import pyarrow as pa

    import s3ddb

    ds = s3ddb.dataset(args.uri)
    read_version = ds.version
    result: dict[str, int]
    if args.change == "delete-writer-0":
        result = ds.delete("writer = 0")
    elif args.change == "delete-writer-1-even":
        result = ds.delete("writer = 1 AND event_id % 2 = 0")
    elif args.change == "update-writer-2":
        result = ds.update({"payload": "'updated'"}, where="writer = 2")
    else:
        tag = args.change[-1]
        source = pa.table(
            {
                "event_id": pa.array(list(UPSERT_KEYS), pa.int64()),
                "writer": pa.array([99] * len(UPSERT_KEYS), pa.int32()),
                "payload": [f"upsert-{tag}"] * len(UPSERT_KEYS),
            }
        )
        builder = ds.merge_insert("event_id").when_matched_update_all()
        result = builder.when_not_matched_insert_all().execute(source)
    attempts = ds.last_commit.attempts if ds.last_commit else 0
    counts = ", ".join(f"{k.replace('num_', '').replace('_', ' ')} {v}" for k, v in result.items())
    print(
        f"{args.change}: read version {read_version}, committed version {ds.version} "
        f"({attempts} attempt{'s' if attempts != 1 else ''}; {counts})",
        flush=True,
    )
    return 0


def _batch(writer: int, i: int) -> Any:
    import pyarrow as pa

    base = writer * 1_000_000 + i * 1_000
    return pa.table(
        {
            "event_id": pa.array(range(base, base + ROWS_PER_APPEND), pa.int64()),
            "writer": pa.array([writer] * ROWS_PER_APPEND, pa.int32()),
            "payload": [f"w{writer}-a{i}-r{k}" for k in range(ROWS_PER_APPEND)],
        }
    )


def run_writer(args: argparse.Namespace) -> int:
    import s3ddb

    for i in range(args.appends):
        ds = s3ddb.write_dataset(_batch(args.writer, i), args.uri, mode="append")
        attempts = ds.last_commit.attempts if ds.last_commit else 1
        print(
            f"writer {args.writer}: append {i} committed as version {ds.version} "
            f"({attempts} attempt{'s' if attempts > 1 else ''})",
            flush=True,
        )
    return 0


def _spawn_python(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``python *args`` in a child process with ``env``; its stdout and stderr are piped."""
    return subprocess.Popen(
        [sys.executable, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _spawn_writer(
    uri: str, writer: int, appends: int, env: dict[str, str]
) -> subprocess.Popen[str]:
    return _spawn_python(env, "-m", "s3ddb.cli.main", "demo-writer", uri, str(writer), str(appends))


def _wait_and_report(
    procs: list[tuple[str, subprocess.Popen[str]]],
    timeout: float,
    summary: Callable[[str], str],
) -> int:
    """Wait for each ``(label, process)`` in turn; returns how many exited 0.

    Prints ``summary(stdout)`` of each that exited 0, and the label and the tail of the
    stderr of each that did not.

    Raises:
        subprocess.TimeoutExpired: a process ran longer than ``timeout`` seconds.
    """
    ok = 0
    for label, proc in procs:
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode == 0:
            ok += 1
            print(f"   {summary(out)}")
        else:
            print(f"   {label + ' ' if label else ''}FAILED:\n{err[-2000:]}", file=sys.stderr)
    return ok


def _row_changes(uri: str, env: dict[str, str], so: dict[str, Any], check: Check) -> int:
    """Step 6; returns the number of versions it committed."""
    import s3ddb

    before = s3ddb.dataset(uri, storage_options=so)
    table = before.to_table(columns=["event_id", "writer"]).to_pylist()
    print(
        f"6. from version {before.version}, {len(CHANGES)} processes change rows at once "
        "(conflicts are merged, or re-executed on the newest version):"
    )
    for change, what in CHANGES.items():
        print(f"   - {change}: {what}")
    procs = [
        (c, _spawn_python(env, "-m", "s3ddb.cli.main", "demo-change", uri, c)) for c in CHANGES
    ]
    ok = _wait_and_report(procs, 600, str.strip)
    check("every row change committed", ok == len(CHANGES))
    after = s3ddb.dataset(uri, storage_options=so)
    rows = after.to_table().to_pylist()
    by_writer = Counter(r["writer"] for r in rows)
    check("writer 0's rows are deleted", by_writer[0] == 0)
    odd_1 = sum(1 for r in table if r["writer"] == 1 and r["event_id"] % 2)
    check(
        "writer 1's even rows are deleted, its odd rows kept",
        by_writer[1] == odd_1 and all(r["event_id"] % 2 for r in rows if r["writer"] == 1),
    )
    updated = [r["payload"] for r in rows if r["writer"] == 2]
    check(
        f"writer 2's {len(updated)} rows are updated",
        bool(updated) and set(updated) == {"updated"},
    )
    upserted = Counter(r["event_id"] for r in rows if r["event_id"] in UPSERT_KEYS)
    payloads = {r["payload"] for r in rows if r["event_id"] in UPSERT_KEYS}
    check(
        f"each of the {len(UPSERT_KEYS)} upserted keys exists exactly once, from one upsert",
        sorted(upserted) == list(UPSERT_KEYS)
        and set(upserted.values()) == {1}
        and len(payloads) == 1,
    )
    untouched = [r for r in table if r["writer"] not in (0, 1, 2)]
    check(
        "every other row is unchanged",
        Counter(r["event_id"] for r in untouched)
        == Counter(r["event_id"] for r in rows if r["writer"] not in (0, 1, 2, 99)),
    )
    return after.version - before.version


SPARK_PREFIX = "spark_events"
SPARK_APPS = 2
SPARK_ROWS = 5_000
SEED_ROWS = 500


def _spark_available() -> str | None:
    """Why the Spark step cannot run here, or None if it can."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("pyspark") is None:
        return 'PySpark is not installed (pip install "s3ddb[spark]")'
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (PySpark needs Java 17+)"
    return None


def _spark_step(env: dict[str, str], so: dict[str, Any], check: Check) -> None:
    """Two Spark applications append while a Python process deletes, all at once."""
    import pyarrow as pa

    import s3ddb

    uri = f"s3+ddb://{BUCKET}/{SPARK_PREFIX}?ddbTableName={TABLE}"
    print(
        f"7. Spark: {SPARK_APPS} Spark applications (separate JVMs) append {SPARK_ROWS} rows "
        f"each to {uri} while a Python process deletes the {SEED_ROWS} seed rows"
    )
    reason = _spark_available()
    if reason is not None:
        print(f"   skipped: {reason}")
        return
    seed = pa.table(
        {
            "id": pa.array(range(-SEED_ROWS, 0), pa.int64()),
            "app": pa.array(["seed"] * SEED_ROWS),
            "value": pa.array([0.0] * SEED_ROWS),
        }
    )
    s3ddb.write_dataset(seed, uri, storage_options=so)

    app = ("-m", "s3ddb.spark_ext.append_app", uri, "--rows", str(SPARK_ROWS))
    apps = [
        _spawn_python(env, *app, "--start", str(i * SPARK_ROWS), "--name", f"spark-app-{i}")
        for i in range(SPARK_APPS)
    ]
    delete = "import sys, s3ddb; print(s3ddb.dataset(sys.argv[1]).delete(\"app = 'seed'\"))"
    deleter = _spawn_python(env, "-c", delete, uri)
    ok = _wait_and_report(
        [("", proc) for proc in [*apps, deleter]],
        900,
        lambda out: out.strip().splitlines()[-1] if out.strip() else "done",
    )
    check("both Spark applications and the Python delete committed", ok == SPARK_APPS + 1)
    ds = s3ddb.dataset(uri, storage_options=so)
    ids = Counter(ds.to_table(columns=["id"]).column("id").to_pylist())
    expected = set(range(SPARK_APPS * SPARK_ROWS))
    check(
        f"every Spark row exists exactly once ({len(expected)}), every seed row is deleted",
        set(ids) == expected and set(ids.values()) == {1},
    )
    check(
        f"versions 1..{SPARK_APPS + 2} are contiguous",
        [v.version for v in ds.versions()] == list(range(1, SPARK_APPS + 3)),
    )


class _Checklist:
    """The demo's checks in the order made; each is printed as it is made."""

    def __init__(self) -> None:
        self.results: list[tuple[str, bool]] = []

    def check(self, name: str, ok: bool) -> None:
        self.results.append((name, ok))
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")

    def report(self) -> int:
        """Print PASS or FAIL and the count; returns the exit status (0: every check passed)."""
        passed = all(ok for _n, ok in self.results)
        print(
            f"\n{'PASS' if passed else 'FAIL'}: "
            f"{sum(ok for _n, ok in self.results)}/{len(self.results)} checks"
        )
        return 0 if passed else 1


def _provision(aws: LocalAWS) -> dict[str, Any]:
    """Steps 1-2: the bucket and the manifest table; returns the storage options."""
    from s3ddb.external_store import create_table, describe_table
    from s3ddb.io import AwsConfig

    print(
        f"1. local AWS endpoint at {aws.endpoint_url} (S3 ignores If-None-Match, "
        "like a store without conditional writes)"
    )
    aws.create_bucket(BUCKET)
    so: dict[str, Any] = aws.storage_options()
    aws_config = AwsConfig.from_storage_options(so)
    create_table(TABLE, aws_config)
    desc = describe_table(TABLE, aws_config)
    keys = ", ".join(f"{k['AttributeName']} {k['KeyType']}" for k in desc["KeySchema"])
    print(
        f"2. DynamoDB table {TABLE!r} provisioned as infra/terraform does: {keys}, "
        f"{desc.get('BillingModeSummary', {}).get('BillingMode', 'PAY_PER_REQUEST')}"
    )
    return so


def _concurrent_appends(
    uri: str, env: dict[str, str], so: dict[str, Any], args: argparse.Namespace, check: Check
) -> None:
    """Step 3: create the dataset, then ``args.writers`` processes append at once."""
    import s3ddb

    s3ddb.write_dataset(_batch(999, 0), uri, storage_options=so)
    print(
        f"3. created {uri} (version 1); starting {args.writers} writers x "
        f"{args.appends} appends, all at once"
    )
    started = time.monotonic()
    procs = [_spawn_writer(uri, w, args.appends, env) for w in range(args.writers)]
    acknowledged = 0
    for p in procs:
        out, err = p.communicate(timeout=600)
        acknowledged += out.count("committed as version")
        if p.returncode != 0:
            print(err[-2000:], file=sys.stderr)
    elapsed = time.monotonic() - started
    print(f"   {acknowledged} commits acknowledged in {elapsed:.1f} s")
    check("every writer's commits succeeded", acknowledged == args.writers * args.appends)


def _crash_and_repair(
    uri: str, env: dict[str, str], so: dict[str, Any], crash_writer: int, check: Check
) -> ExternalManifestStore:
    """Steps 4-5: a writer dies after DynamoDB decided its version; a reader finishes it.

    Returns the dataset's DynamoDB manifest store.
    """
    import s3ddb
    from s3ddb.commit.failpoints import EXIT_CODE
    from s3ddb.io import ObjectStore, parse_uri
    from s3ddb.versions.connect import external_store_for

    print(
        "4. one more writer crashes right after DynamoDB decided its version "
        "(S3DDB_FAILPOINTS=commit.after_external_put=exit)"
    )
    crash = _spawn_writer(
        uri, crash_writer, 1, {**env, "S3DDB_FAILPOINTS": "commit.after_external_put=exit"}
    )
    crash.communicate(timeout=300)
    check(
        f"the writer process died mid-commit (exit {crash.returncode})",
        crash.returncode == EXIT_CODE,
    )
    parsed = parse_uri(uri)
    external = external_store_for(parsed, ObjectStore(parsed, so))
    row = external.get_latest(parsed.base_uri)
    assert row is not None
    print(f"   DynamoDB row of version {row.version}: path={row.path}")
    check("its version is decided but still staged", row.is_staged)
    plain = s3ddb.dataset(parsed.object_url, storage_options=so)
    print(f"   a reader without DynamoDB (s3://) sees version {plain.version} (at most one behind)")
    check(
        "the S3-only reader is at most one version behind",
        plain.version in (row.version - 1, row.version),
    )

    print("5. a reader opens the dataset and finishes the commit (copy, verify, repoint)")
    ds = s3ddb.dataset(uri, storage_options=so)
    repaired = external.get(parsed.base_uri, row.version)
    assert repaired is not None
    print(f"   reader loaded version {ds.version}; row now path={repaired.path}")
    check(
        "the reader finalized the staged version",
        not repaired.is_staged and ds.version == row.version,
    )
    return external


def _compact(uri: str, so: dict[str, Any], check: Check) -> Dataset:
    """Step 6, end: compact the fragments the row changes left; returns the dataset after.

    Compaction commits two versions: ReserveFragments (the new fragments' ids), then the
    Rewrite.
    """
    import s3ddb

    ds = s3ddb.dataset(uri, storage_options=so)
    before, before_version = ds.to_table(), ds.version
    fragments = len(ds.get_fragments())
    metrics = ds.optimize.compact_files()
    print(
        f"   compaction: {fragments} fragments -> {len(ds.get_fragments())} "
        f"({metrics.fragments_removed} rewritten into {metrics.fragments_added}), "
        f"version {ds.version}"
    )
    check(
        "compaction changed no row and no row order",
        ds.to_table().equals(before)
        and ds.version == before_version + 2
        and len(ds.get_fragments()) < fragments,
    )
    return ds


def _history_and_verification(
    uri: str,
    ds: Dataset,
    so: dict[str, Any],
    external: ExternalManifestStore,
    args: argparse.Namespace,
    changed_versions: int,
    check: Check,
) -> None:
    """Steps 8-9: the last versions with their committers, then the final checks."""
    import s3ddb
    from s3ddb.io import parse_uri

    parsed = parse_uri(uri)
    print("\n8. history (from DynamoDB), newest first as `s3ddb history` prints it:")
    rows = list(external.list_versions(parsed.base_uri))
    for v in reversed(ds.versions()[-8:]):
        committer = next((r.committer for r in rows if r.version == v.version), "")
        print(f"   v{v.version:<4} {v.timestamp:%H:%M:%S.%f} {v.operation:<16} {committer}")
    if len(rows) > 8:
        print(f"   ... {len(rows) - 8} earlier versions")

    print("\n9. verification")
    expected_versions = list(range(1, 1 + 1 + args.writers * args.appends + 1 + changed_versions))
    check(
        f"versions contiguous 1..{expected_versions[-1]}",
        [r.version for r in rows] == expected_versions,
    )
    check("every DynamoDB row finalized", not any(r.is_staged for r in rows))
    ids = Counter(ds.to_table(columns=["event_id"]).column("event_id").to_pylist())
    appended = {
        w * 1_000_000 + i * 1_000 + k
        for w in (999, *range(args.writers + 1))
        for i in range(args.appends if w < args.writers else 1)
        for k in range(ROWS_PER_APPEND)
    }
    expected_ids = {
        i for i in appended if not (i // 1_000_000 == 0 or (i // 1_000_000 == 1 and i % 2 == 0))
    } | set(UPSERT_KEYS)
    check(
        f"every row that should exist exists exactly once ({len(expected_ids)} rows, "
        "with the crashed writer's commit)",
        set(ids) == expected_ids and all(c == 1 for c in ids.values()),
    )
    copy_reader = s3ddb.dataset(parsed.object_url, storage_options=so)
    check("the S3-only reader now sees the latest version", copy_reader.version == ds.version)


def run(args: argparse.Namespace) -> int:
    from s3ddb.testing import LocalAWS

    checks = _Checklist()
    print("== s3ddb demo: many writers, one dataset, plain S3 + DynamoDB ==\n")
    with LocalAWS(conditional_writes=False) as aws:
        so = _provision(aws)
        uri = f"s3+ddb://{BUCKET}/{PREFIX}?ddbTableName={TABLE}"
        env = {**os.environ, **aws.env()}
        env.pop("S3DDB_FAILPOINTS", None)
        _concurrent_appends(uri, env, so, args, checks.check)
        external = _crash_and_repair(uri, env, so, args.writers, checks.check)
        changed_versions = _row_changes(uri, env, so, checks.check)
        ds = _compact(uri, so, checks.check)
        changed_versions += 2  # compaction's ReserveFragments and Rewrite
        if args.spark:
            _spark_step(env, so, checks.check)
        _history_and_verification(uri, ds, so, external, args, changed_versions, checks.check)
    return checks.report()


if __name__ == "__main__":
    from s3ddb.cli.main import main

    sys.exit(main(["demo", *sys.argv[1:]]))
