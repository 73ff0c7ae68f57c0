"""Operator verbs of the ``s3ddb`` command: verify, sync, cleanup, drop,
migrate-commits and open-formats.

``verify`` exits 0 when the dataset is healthy and 1 when it found problems (each with
what it means and how to fix it); ``sync`` repairs what needs no judgement; ``drop``
deletes a dataset's objects and DynamoDB rows after confirmation. Long work shows a
progress bar on a terminal (never in pipes or with ``--json``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from typing import Any

from s3ddb.cli import reader_snippets
from s3ddb.cli.commands import _verb, published_locations, storage_options
from s3ddb.cli.output import emit_json, progress_bar
from s3ddb.dataset import dataset
from s3ddb.errors import InvalidInputError
from s3ddb.io.aws import AwsConfig
from s3ddb.maintenance import cleanup
from s3ddb.maintenance.cleanup import KeptVersion
from s3ddb.maintenance.drop import drop
from s3ddb.maintenance.repair import sync, table_datasets
from s3ddb.maintenance.verify import DEFAULT_GRACE_SECONDS, verify
from s3ddb.writes import version_writes as writes

__all__ = [
    "register",
    "run_cleanup",
    "run_drop",
    "run_migrate_commits",
    "run_open_formats",
    "run_sync",
    "run_verify",
]


def _grace(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


_GRACE_HELP = (
    "ignore objects younger than this many seconds: a writer may be committing them "
    f"(default {DEFAULT_GRACE_SECONDS:g})"
)


def register(subparsers: Any) -> None:
    p = _verb(subparsers, "verify", run_verify)
    p.add_argument(
        "--grace", type=_grace, default=DEFAULT_GRACE_SECONDS, metavar="SECONDS", help=_GRACE_HELP
    )

    # With --all there is no URI: s3ddb sync --all --table NAME.
    p = _verb(subparsers, "sync", run_sync, uri_optional=True)
    p.add_argument("--table", metavar="NAME", help="with --all: the DynamoDB table")
    p.add_argument("--all", action="store_true", help="every dataset with rows in --table")
    p.add_argument(
        "--grace", type=_grace, default=DEFAULT_GRACE_SECONDS, metavar="SECONDS", help=_GRACE_HELP
    )

    p = _verb(subparsers, "cleanup", run_cleanup)
    p.add_argument(
        "--older-than",
        type=_age,
        metavar="AGE",
        help="remove versions older than this: 7d, 12h, 30m (default 14d)",
    )
    p.add_argument(
        "--retain-versions",
        type=int,
        metavar="N",
        help="keep the N newest versions whatever their age",
    )
    p.add_argument(
        "--delete-unverified",
        action="store_true",
        help="also delete unreferenced files younger than 7 days (only when "
        "no writer can be committing)",
    )
    p.add_argument(
        "--claim-window",
        type=_age,
        metavar="AGE",
        help="keep a version until the version after it is this old (default "
        "10m): a writer may still be claiming the next number; lower it only "
        "when no writer can be committing",
    )

    p = _verb(subparsers, "drop", run_drop)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--missing-ok",
        action="store_true",
        help="exit 0 when nothing of a dataset is there (default: exit 2, no such dataset)",
    )

    _verb(subparsers, "migrate-commits", run_migrate_commits)

    p = _verb(subparsers, "open-formats", run_open_formats)
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--enable",
        metavar="FORMATS",
        help="publish every version from now on as these formats too: iceberg, delta "
        "or iceberg,delta (one new version, the first published)",
    )
    what.add_argument("--disable", action="store_true", help="stop publishing (a new version)")
    what.add_argument(
        "--publish",
        action="store_true",
        help="publish the newest version again, and any version before it that is missing",
    )
    what.add_argument(
        "--rebuild",
        action="store_true",
        help="republish every kept version from the manifests alone and delete published "
        "files no kept version writes (the fix for a damaged or tampered Iceberg or "
        "Delta state that verify reports)",
    )
    p.add_argument(
        "--reader",
        choices=reader_snippets.READERS,
        help="print code that reads the newest version with this engine, with the storage "
        "settings this dataset's location needs (credentials as environment variable "
        "names, never their values)",
    )


def run_verify(args: argparse.Namespace) -> int:
    """Check a dataset and report every problem, with what it means and how to fix it.

    Compares the DynamoDB rows (s3+ddb://) or manifests with the objects: staged
    rows, missing or size-mismatched final manifests, gaps in versions, manifests
    without rows, rows pointing outside the dataset, orphaned staged manifests,
    missing data files and files no version references. Exit status 0: healthy;
    1: problems found; 2: usage or access error.
    """
    with progress_bar(not getattr(args, "json", False)) as progress:
        report = verify(
            args.uri, storage_options(args), grace_seconds=args.grace, progress=progress
        )
    if args.json:
        emit_json(report.to_json())
        return 0 if report.healthy else 1
    print(
        f"{report.uri}: {report.versions} versions (latest {report.latest_version}), "
        f"{report.objects} objects; {report.mechanism}"
    )
    for problem in report.problems:
        where = f"version {problem.version}: " if problem.version is not None else ""
        print(f"\n[{problem.kind}] {where}{problem.path}")
        print(f"  means: {problem.meaning}")
        print(f"  fix:   {problem.fix}")
    if report.healthy:
        print("healthy")
        return 0
    kinds = sorted({p.kind for p in report.problems})
    print(f"\n{len(report.problems)} problem(s): {', '.join(kinds)}")
    return 1


def run_sync(args: argparse.Namespace) -> int:
    """Finish staged commits and repair what needs no judgement; idempotent.

    Finalizes every staged version (copy the staged manifest to its final name,
    verify, repoint the DynamoDB row), puts back final manifests whose staged copy is
    left, and deletes staged manifests no row refers to (older than --grace). Safe
    while writers commit. With --all --table NAME, does so for every dataset with rows
    in the table. Exit status 1 if anything could not be repaired.
    """
    options = storage_options(args)
    if args.all:
        if not args.table or args.uri:
            raise InvalidInputError("sync --all takes --table NAME and no URI")
        uris = list(table_datasets(args.table, options))
    else:
        if not args.uri or args.table:
            raise InvalidInputError("sync takes a dataset URI (or --all --table NAME)")
        uris = [args.uri]
    reports = []
    with progress_bar(not getattr(args, "json", False)) as progress:
        for done, uri in enumerate(uris, 1):
            reports.append(sync(uri, options, grace_seconds=args.grace))
            progress("syncing datasets", done, len(uris))
    ok = all(r.ok for r in reports)
    if args.json:
        emit_json([r.to_json() for r in reports] if args.all else reports[0].to_json())
        return 0 if ok else 1
    for report in reports:
        parts = [
            f"finalized {len(report.finalized)}",
            f"restored {len(report.restored)}",
            f"deleted {len(report.deleted_staged)} orphaned staged manifest(s)",
        ]
        print(f"{report.uri}: {', '.join(parts)}")
        for failure in report.failed:
            print(f"  FAILED {failure}")
    if args.all:
        total = sum(len(r.finalized) for r in reports)
        print(
            f"{len(reports)} dataset(s), {total} version(s) finalized, "
            f"{sum(not r.ok for r in reports)} with failures"
        )
    return 0 if ok else 1


def _age(text: str) -> dt.timedelta:
    """``7d``, ``12h``, ``30m``, ``45s`` or plain seconds."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    text = text.strip().lower()
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an age like 7d, 12h, 30m, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an age >= 0, got {text!r}")
    return dt.timedelta(seconds=value * units[unit])


def run_cleanup(args: argparse.Namespace) -> int:
    """Remove old versions and the files only they reference.

    Removes every version committed more than --older-than ago (default 14d), except
    the newest, the --retain-versions newest and every tagged version: their DynamoDB
    rows, manifests and transaction files, and the data and deletion files no kept
    version references. A version also stays until the version after it is
    --claim-window old (default 10m): a writer that saw it as the newest may still be
    claiming the next number. Files no version references (a crashed writer's, and
    the _spark_staging/ folders of native Spark writes whose driver stopped) go once
    older than 7 days, or at any age with --delete-unverified. Safe while writers
    commit. Prints what went, and each version kept with why and when it can go.
    """
    import s3ddb

    ds = s3ddb.dataset(args.uri, storage_options=storage_options(args))
    stats = ds.cleanup_old_versions(
        args.older_than,
        args.retain_versions,
        args.delete_unverified,
        claim_window=args.claim_window,
    )
    if args.json:
        emit_json(stats.to_json())
        return 0
    versions = stats.versions_removed
    print(
        f"removed {len(versions)} version(s)"
        + (f" ({_ranges(versions)})" if versions else "")
        + f", {stats.rows_removed} DynamoDB row(s), {stats.bytes_removed} bytes"
    )
    for kind in sorted(stats.files):
        label = kind.replace("_", " ") + ":"
        print(f"  {label:20}{stats.files[kind]} ({stats.bytes[kind]} bytes)")
    print(f"kept {len(stats.versions_kept)} version(s):")
    for group in _by_reason(stats.versions_kept):
        print(f"  {_ranges([k.version for k in group]):10} {_why_kept(group, args)}")
    return 0


def _ranges(versions: list[int]) -> str:
    """``1, 3..5``: ascending ``versions`` with runs of consecutive ones joined."""
    runs: list[list[int]] = []
    for version in versions:
        if runs and version == runs[-1][-1] + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
    return ", ".join(", ".join(map(str, r)) if len(r) <= 2 else f"{r[0]}..{r[-1]}" for r in runs)


def _by_reason(kept: list[KeptVersion]) -> list[list[KeptVersion]]:
    """Kept versions, newest first, in runs that share a reason."""
    groups: list[list[KeptVersion]] = []
    for k in sorted(kept, key=lambda k: -k.version):
        if groups and groups[-1][0].reason == k.reason:
            groups[-1].insert(0, k)
        else:
            groups.append([k])
    return groups


def _why_kept(group: list[KeptVersion], args: argparse.Namespace) -> str:
    """Why the versions of ``group`` stay, and when the first of them can go."""
    reason = group[0].reason
    older_than = cleanup.DEFAULT_OLDER_THAN if args.older_than is None else args.older_than
    claim_window = cleanup.CLAIM_WINDOW if args.claim_window is None else args.claim_window
    why = {
        "newest": "the newest",
        "tagged": "tagged",
        "retain_versions": f"among the {args.retain_versions} newest (--retain-versions)",
        "older_than": f"younger than --older-than {_age_text(older_than)}",
        "claim_window": f"the next version is younger than the {_age_text(claim_window)} "
        "claim window (--claim-window): a writer may still be claiming its number",
    }[reason]
    times = [k.removable_after for k in group if k.removable_after is not None]
    if not times:
        return why
    first = "the first " if len(group) > 1 else ""
    # Whole seconds, rounded up: "after" must not name a time before the real one.
    earliest = min(times)
    whole = earliest.replace(microsecond=0)
    whole += dt.timedelta(seconds=1) if whole < earliest else dt.timedelta(0)
    when = whole.strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{why}; {first}removable after {when}"


def _age_text(age: dt.timedelta) -> str:
    """``14d``, ``10m``, ``90s``: ``age`` in its largest whole unit."""
    seconds = int(age.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{age.total_seconds():g}s"


def run_migrate_commits(args: argparse.Namespace) -> int:
    """Move a dataset's commits to the mechanism its URI names.

    From plain s3:// (conditional writes) to s3+ddb:// (DynamoDB), from a DynamoDB
    dataset to its local copy's path, or from one DynamoDB table to another. Writes
    one version; writers of the old mechanism then refuse. Stop them first. Exit
    status 0: done (or nothing to do); 2: usage or access error.
    """
    ds = dataset(args.uri, storage_options=storage_options(args))
    before = ds.version
    moved = writes.migrate_commits(ds)
    mechanism, table = ds.handler.mechanism_record()
    how = f"{mechanism} (table {table})" if table else mechanism
    if args.json:
        emit_json({"uri": args.uri, "migrated": moved, "version": ds.version, "mechanism": how})
    elif moved:
        print(
            f"{args.uri}: commits now go through {how}, from version {ds.version} "
            f"(was version {before})"
        )
    else:
        print(f"{args.uri}: already commits through {how}; nothing to do")
    return 0


def run_drop(args: argparse.Namespace) -> int:
    """Delete a dataset: every object under its root and every DynamoDB row.

    Asks for confirmation (type the dataset URI) unless --yes; without a terminal
    and without --yes it refuses. Nothing there is a DatasetNotFoundError (exit 2)
    unless --missing-ok.
    """
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidInputError(f"refusing to drop {args.uri} without confirmation: pass --yes")
        answer = input(
            f"This deletes every object and DynamoDB row of\n  {args.uri}\n"
            "Type the URI to confirm: "
        )
        if answer.strip() != args.uri:
            print("not confirmed; nothing deleted", file=sys.stderr)
            return 1
    with progress_bar(not getattr(args, "json", False)) as progress:
        report = drop(
            args.uri, storage_options(args), progress=progress, missing_ok=args.missing_ok
        )
    if args.json:
        emit_json(report.to_json())
    else:
        print(
            f"dropped {args.uri}: {report.objects} objects ({report.bytes} bytes), "
            f"{report.rows} DynamoDB rows"
        )
    return 0


def _print_reader_snippet(
    args: argparse.Namespace, version: int, formats: tuple[str, ...], root: str
) -> int:
    """--reader: the snippet (docs/open-formats.md, "Reading it elsewhere").

    Raises:
        InvalidInputError: nothing published, a dataset in memory, or a reader of a
            format not published.
    """
    settings = AwsConfig.from_storage_options(storage_options(args)).settings("s3")
    access = reader_snippets.s3_access(settings, os.environ)
    table = reader_snippets.published_table(root, version, formats, access)
    snippet = reader_snippets.reader_snippet(args.reader, table)
    if args.json:
        emit_json({"version": version, "reader": args.reader, "snippet": snippet})
    else:
        sys.stdout.write(snippet)
    return 0


def run_open_formats(args: argparse.Namespace) -> int:
    """Show, turn on or off, or redo the publication of Iceberg and Delta metadata.

    Without an option, prints the formats the newest version publishes and where an
    Iceberg or Delta reader finds it. --enable FORMATS and --disable commit a config
    change; --publish writes the newest version's metadata again (and any earlier
    version's that is missing), the same bytes its finisher writes (exit status 2,
    saying how to turn publication on, when the dataset publishes nothing); --rebuild
    republishes every kept version from the manifests alone, replacing a damaged or
    tampered published state, and deletes published files no kept version writes.
    --reader NAME then prints, instead of the summary, code that reads the newest
    version with that engine.
    """
    ds = dataset(args.uri, storage_options=storage_options(args))
    rebuilt = None
    if args.enable:
        ds.enable_open_formats(args.enable)
    elif args.disable:
        ds.disable_open_formats()
    elif args.publish:
        if not ds.publish_open_formats():
            # Publishing what publishes nothing is a usage error: say how to start.
            raise InvalidInputError(
                f"{args.uri} publishes no open formats (version {ds.version}): nothing "
                f"to publish. Turn publication on first: s3ddb open-formats {args.uri} "
                "--enable iceberg,delta"
            )
    elif args.rebuild:
        rebuilt = ds.rebuild_open_formats()
    formats = ds.open_formats
    if args.reader:
        return _print_reader_snippet(args, ds.version, tuple(formats), ds.handler.store.url)
    places = published_locations(ds)
    if args.json:
        emit_json(
            {
                "uri": ds.uri,
                "version": ds.version,
                "formats": list(formats),
                "locations": {f: places[f] for f in formats},
                **(
                    {
                        "rebuilt": {
                            "first_version": rebuilt.first_version,
                            "newest_version": rebuilt.newest_version,
                            "deleted_files": rebuilt.deleted_files,
                        }
                    }
                    if rebuilt is not None
                    else {}
                ),
            }
        )
        return 0
    if not formats:
        print(f"{ds.uri}: version {ds.version} publishes no open formats")
        return 0
    print(f"{ds.uri}: version {ds.version} publishes {', '.join(formats)}")
    for name in formats:
        print(f"  {name}: {places[name]}")
    if rebuilt is not None:
        print(
            f"rebuilt from the manifests: versions {rebuilt.first_version} to "
            f"{rebuilt.newest_version}; deleted {len(rebuilt.deleted_files)} published "
            "files no kept version writes"
        )
    return 0
