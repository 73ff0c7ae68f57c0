"""Dataset verbs of the ``s3ddb`` command: info, history, show, changes, delete, update,
compact, restore and tags.

Every verb takes a dataset URI and the AWS options ``--endpoint-url``, ``--region`` and
``--profile``, passed to the library as the storage options ``endpoint_url``, ``region``
and ``profile``. Errors the library raises on purpose (a missing dataset, an unknown
column, bad SQL...) propagate as :class:`~s3ddb.errors.S3DDBError`, which
:func:`s3ddb.cli.main.main` prints on one line with exit status 1.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import os
import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.cli.output import (
    emit_json,
    help_summary,
    help_text,
    json_default,
    json_text,
    print_table,
    safe_text,
    value_text,
)
from s3ddb.commit.committer import load_transaction
from s3ddb.errors import InvalidInputError, ManifestCorruptError
from s3ddb.format.fragment_list import FragmentList
from s3ddb.maintenance.compaction import DEFAULT_TARGET_ROWS_PER_FRAGMENT
from s3ddb.observe.commit_metrics import api_operation_of
from s3ddb.open_formats.publisher import writer_of
from s3ddb.operations import Append

__all__ = [
    "published_locations",
    "register",
    "run_changes",
    "run_compact",
    "run_delete",
    "run_history",
    "run_info",
    "run_restore",
    "run_show",
    "run_tag_create",
    "run_tag_delete",
    "run_tag_list",
    "run_tags",
    "run_update",
    "storage_options",
]

_URI_HELP = (
    "dataset URI: a local path, file://, s3://bucket/prefix or "
    "s3+ddb://bucket/prefix?ddbTableName=TABLE"
)
_VERSION_HELP = "a version number or a tag name"
_RETRIES_HELP = (
    "re-execute at most N times on the newest version when a concurrent commit "
    "conflicts (default 10; 0 fails on the first conflict)"
)
_MAX_CELL = 60  # widest cell of `show --format table`; csv and json are never cut


# --- argument types and parsers -----------------------------------------------------


def _version(text: str) -> int | str:
    """A version number (ASCII digits, at least 1) or a tag name (which never starts
    with '-' or is a number below 1: those are said to be bad versions)."""
    number = text[1:] if text[:1] in "+-" else text
    if number.isascii() and number.isdigit():
        if text.startswith("-") or int(number) < 1:
            raise argparse.ArgumentTypeError(f"expected a version >= 1 or a tag, got {text!r}")
        return int(number)
    return text


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return int(text)

    return parse


def _columns(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected column names separated by ',', got {text!r}")
    return names


def _assignment(text: str) -> tuple[str, str]:
    column, sep, expr = text.partition("=")
    if not sep or not column.strip() or not expr.strip():
        raise argparse.ArgumentTypeError(f"expected COLUMN=EXPRESSION, got {text!r}")
    return column.strip(), expr.strip()


# The AWS options of every verb, by flag; each is the storage option of the same name.
_AWS_OPTIONS = {
    "--endpoint-url": "S3 and DynamoDB endpoint (default: AWS_ENDPOINT_URL)",
    "--region": "AWS region (default: AWS_REGION / AWS_DEFAULT_REGION)",
    "--profile": "AWS named profile (default: AWS_PROFILE)",
    # Per service: each overrides the shared option for its service only.
    "--s3-endpoint": "S3 endpoint only (default: AWS_ENDPOINT_URL_S3)",
    "--s3-region": "S3 region only (default: AWS_REGION_S3)",
    "--s3-profile": "named profile for S3 only (default: AWS_PROFILE_S3)",
    "--dynamodb-endpoint": "DynamoDB endpoint only (default: AWS_ENDPOINT_URL_DYNAMODB)",
    "--dynamodb-region": "DynamoDB region only (default: AWS_REGION_DYNAMODB)",
    "--dynamodb-profile": "named profile for DynamoDB only (default: AWS_PROFILE_DYNAMODB)",
}
_STORAGE_OPTIONS = [flag[2:].replace("-", "_") for flag in _AWS_OPTIONS]


def _storage_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _aws_options(
    parser: argparse.ArgumentParser,
    default: Any = None,
    services: tuple[str, ...] = ("s3", "dynamodb"),
) -> None:
    """Add the AWS options (shared, and per service for each of ``services``),
    ``--storage-option`` and ``--debug`` to ``parser``."""
    where = "s3:// and s3+ddb:// only; " if "s3" in services else ""
    group = parser.add_argument_group(
        "AWS options",
        f"{where}passed as the storage options of the same names "
        "(endpoint_url, region, profile, s3_endpoint...), which override the environment "
        "(docs/deployments.md: precedence)",
    )
    for flag, text in _AWS_OPTIONS.items():
        service = flag[2:].split("-", 1)[0]
        if service in ("s3", "dynamodb") and service not in services:
            continue
        group.add_argument(flag, default=default, help=text)
    group.add_argument(
        "--storage-option",
        dest="storage_option",
        type=_storage_option,
        action="append",
        default=default,
        metavar="KEY=VALUE",
        help="any other storage option, e.g. aws_access_key_id=... (repeatable)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the traceback of an error",
    )


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The storage options a verb's flags give (None: none at all)."""
    options: dict[str, Any] = {
        key: v for key in _STORAGE_OPTIONS if (v := getattr(args, key, None))
    }
    for key, value in getattr(args, "storage_option", None) or []:
        options[key] = value
    return options or None


def _verb(
    subparsers: Any,
    name: str,
    func: Callable[..., int],
    *,
    action: bool = False,
    reports: bool = True,
    aliases: tuple[str, ...] = (),
    uri_optional: bool = False,
) -> argparse.ArgumentParser:
    """The parser of a verb (or of a ``tags`` action): its help is the first sentence
    of ``func``'s docstring, its description the whole docstring (both without
    reStructuredText markup: :func:`~s3ddb.cli.output.help_text`)."""
    doc = (func.__doc__ or "").strip()
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        aliases=list(aliases),
        help=help_summary(doc),
        description=" ".join(help_text(doc).split()),
    )
    if not action:
        parser.add_argument(
            "uri", metavar="URI", nargs="?" if uri_optional else None, help=_URI_HELP
        )
    # An action's copies must not reset the options given before it (tags --region R URI list).
    _aws_options(parser, default=argparse.SUPPRESS if action else None)
    if reports:
        parser.add_argument(
            "--json",
            action="store_true",
            default=argparse.SUPPRESS if action else False,
            help="print the result as JSON (for scripts)",
        )
    parser.set_defaults(func=func)
    return parser


def register(subparsers: Any) -> None:
    """Add the dataset verbs to the ``s3ddb`` command's subparsers."""
    count, positive = _at_least(0), _at_least(1)
    p = _verb(subparsers, "info", run_info)
    p.add_argument("--version", type=_version, help=f"describe this version: {_VERSION_HELP}")

    p = _verb(subparsers, "history", run_history, aliases=("versions",))
    p.add_argument("--limit", type=positive, metavar="N", help="only the N newest versions")

    p = _verb(subparsers, "show", run_show, reports=False)
    p.add_argument("--version", type=_version, help=f"read this version: {_VERSION_HELP}")
    p.add_argument("--columns", type=_columns, metavar="A,B", help="columns to print, in order")
    p.add_argument("--filter", metavar="SQL", help="keep rows matching this predicate")
    p.add_argument("--limit", type=count, default=20, metavar="N", help="default 20; 0: all")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument(
        "--json", dest="format", action="store_const", const="json", help="= --format json"
    )

    p = _verb(subparsers, "changes", run_changes, reports=False)
    p.add_argument(
        "--from",
        dest="start",
        type=count,
        required=True,
        metavar="V",
        help="the changes of the versions after V (0: from the first version)",
    )
    p.add_argument("--to", dest="end", type=positive, metavar="W", help="up to W (default: latest)")
    p.add_argument("--limit", type=count, default=20, metavar="N", help="default 20; 0: all")
    p.add_argument("--json", action="store_true", help="one JSON object per line")

    p = _verb(subparsers, "delete", run_delete)
    p.add_argument("predicate", metavar="PREDICATE", help="SQL predicate, e.g. 'id < 10'")
    p.add_argument("--retries", type=count, metavar="N", help=_RETRIES_HELP)

    p = _verb(subparsers, "update", run_update)
    p.add_argument(
        "--set",
        dest="assignments",
        type=_assignment,
        action="append",
        required=True,
        metavar="COL=EXPR",
        help="e.g. --set 'price=price * 1.1' (repeatable)",
    )
    p.add_argument("--where", metavar="SQL", help="update only rows matching this predicate")
    p.add_argument(
        "--rewrite",
        choices=("auto", "rows", "columns"),
        default="auto",
        help="move changed rows to new fragments (rows), rewrite the changed columns of "
        "the touched fragments (columns), or let s3ddb choose (auto, the default)",
    )
    p.add_argument("--retries", type=count, metavar="N", help=_RETRIES_HELP)

    p = _verb(subparsers, "compact", run_compact)
    p.add_argument(
        "--target-rows",
        type=positive,
        default=DEFAULT_TARGET_ROWS_PER_FRAGMENT,
        metavar="N",
        help=f"rows per new fragment (default {DEFAULT_TARGET_ROWS_PER_FRAGMENT})",
    )
    p.add_argument(
        "--no-materialize-deletions",
        dest="materialize_deletions",
        action="store_false",
        help="do not rewrite a fragment only because many of its rows are deleted",
    )
    p.add_argument("--retries", type=count, metavar="N", help=_RETRIES_HELP)

    p = _verb(subparsers, "restore", run_restore)
    p.add_argument("version", metavar="VERSION", type=_version, help=_VERSION_HELP)

    p = _verb(subparsers, "tags", run_tags)
    actions = p.add_subparsers(dest="tags_action", metavar="ACTION")
    _verb(actions, "list", run_tag_list, action=True)
    p = _verb(actions, "create", run_tag_create, action=True)
    p.add_argument("name", metavar="NAME", help="tag name: letters, digits, '.', '_', '-'")
    p.add_argument("tag_version", metavar="VERSION", type=positive, help="version number")
    p = _verb(actions, "delete", run_tag_delete, action=True)
    p.add_argument("name", metavar="NAME", help="the tag")


# --- helpers --------------------------------------------------------------------------


def _open(args: argparse.Namespace, version: int | str | None = None) -> s3ddb.Dataset:
    return s3ddb.dataset(args.uri, version=version, storage_options=storage_options(args))


def published_locations(ds: s3ddb.Dataset) -> dict[str, str]:
    """Where an Iceberg or a Delta reader finds ``ds``'s version, for each open format
    it publishes (none: {})."""
    root = ds.handler.store.url
    return {name: writer_of(name).reader_location(root, ds.version) for name in ds.open_formats}


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _iso(timestamp: dt.datetime) -> str:
    return timestamp.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    text = safe_text(value_text(value))
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


# --- verbs ----------------------------------------------------------------------------


def _mechanism(ds: s3ddb.Dataset) -> str:
    """How the URI ``ds`` was opened with commits, or, when the newest version records
    another mechanism (a DynamoDB dataset opened as s3://), that it is read-only so and
    which URI writes."""
    latest = (
        ds.manifest
        if ds.version == ds.latest_version
        else ds.checkout_version(ds.latest_version).manifest
    )
    elsewhere = ds.handler.recorded_elsewhere(latest)
    if elsewhere is None:
        return ds.handler.describe()
    return (
        f"{'DynamoDB table ' + repr(elsewhere[1]) if elsewhere[1] else 'conditional put'}, "
        f"as version {latest.version} records: read-only through this URI; write with "
        f"{ds.handler.writer_uri(*elsewhere)}"
    )


def run_info(args: argparse.Namespace) -> int:
    """Describe a dataset version.

    Prints the version and the latest version, the operation that made it (the kind
    its manifest records, e.g. Merge) and when, the call that made it (e.g.
    add_columns; '-' for versions written before s3ddb recorded it), the row,
    fragment, deletion-file and data-file counts, the commit mechanism, the manifest
    naming scheme, the open formats it publishes (Iceberg, Delta) with where their
    readers find it, and the schema.
    """
    ds = _open(args, args.version)
    manifest = ds.manifest
    fragments = ds.get_fragments()
    committed = dt.datetime.fromtimestamp(manifest.timestamp_nanos / 1e9, tz=dt.timezone.utc)
    deleted = sum(f.num_deleted_rows for f in fragments)
    deletion_files = sum(f.deletion_file is not None for f in fragments)
    api_operation = api_operation_of(manifest.metrics)
    published = published_locations(ds)
    facts = (
        ("dataset", ds.uri),
        ("version", ds.version),
        ("latest version", ds.latest_version),
        ("operation", f"{manifest.operation or '?'} at {_iso(committed)}"),
        ("call", api_operation or "-"),
        ("rows", manifest.num_rows),
        ("fragments", len(fragments)),
        ("deletion files", f"{deletion_files} ({_rows(deleted)} deleted)"),
        ("data files", sum(len(f.files) for f in fragments)),
        ("commit mechanism", _mechanism(ds)),
        ("naming scheme", manifest.naming_scheme.name),
        ("open formats", ", ".join(published) or "none (s3ddb open-formats URI --enable)"),
    )
    if getattr(args, "json", False):
        data: dict[str, Any] = {k.replace(" ", "_"): v for k, v in facts if k != "call"}
        data.update(
            operation=manifest.operation,
            api_operation=api_operation,
            open_formats={"formats": list(published), "locations": published},
            committed_at=committed,
            deleted_rows=deleted,
            deletion_files=deletion_files,
            schema=[
                {"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in ds.schema
            ],
        )
        emit_json(data)
        return 0
    for label, value in facts:
        print(f"{label + ':':18}{safe_text(value)}")
        if label == "open formats":
            for name, place in published.items():
                print(f"  {name}: {safe_text(place)}")
    print("schema:")
    for field in ds.schema:
        nullable = "" if field.nullable else " not null"
        print(f"  {safe_text(field.name)}: {safe_text(field.type)}{nullable}")
    return 0


def run_history(args: argparse.Namespace) -> int:
    """List a dataset's versions (``versions`` is the same verb).

    One line per version, newest first: the version, its commit time (UTC, ISO 8601),
    the operation that made it (the kind its manifest records, e.g. ``Merge``) and
    the call that made it (e.g. ``add_columns``; ``-`` for versions written before
    s3ddb recorded it; ``api_operation`` in JSON), the rows it added and removed (a
    compaction rewrites rows: it adds and removes as many), who committed it, the
    tags that name it and the group (``s3ddb.atomic``) it was committed in, with the
    group's members, and how many claim attempts its commit took. Where cleanup
    removed the version before, an append's rows are still known (from its
    transaction); other versions' are not (``-``, null in JSON) and a note says so.
    ``--json`` adds each version's commit metrics (``metrics``: attempts, versions
    rebased over, durations, rows and files added and removed; empty for versions
    written before s3ddb recorded them).

    A version whose stored metadata is damaged (a lost fragment-list chunk, malformed
    metrics) is listed like the others: what cannot be known is ``?`` (null in JSON)
    and a line below the table says what is wrong (``problem`` in JSON, else null).
    """
    ds = _open(args)
    tags: dict[int, list[str]] = {}
    for name, version in sorted(ds.tags.list().items()):
        tags.setdefault(version, []).append(name)
    infos = ds.versions()[::-1][: args.limit]
    committers = _committers(ds)
    entries: list[dict[str, Any]] = []
    unreadable: set[int] = set()  # versions whose changes cannot be read
    for info in infos:
        problems = [info.metrics_problem] if info.metrics_problem else []
        try:
            added, removed, committer = _version_changes(ds, info.version)
        except s3ddb.VersionNotFoundError:
            continue  # a cleanup removed it since the listing
        except ManifestCorruptError as exc:
            # Damage of one version (a lost chunk, say) never hides the others.
            added, removed, committer = None, None, "?"
            unreadable.add(info.version)
            problems.append(f"rows added and removed are unknown: {exc}")
        entries.append(
            {
                "version": info.version,
                "timestamp": info.timestamp,
                "operation": info.operation,
                "api_operation": info.api_operation,
                "rows_added": added,
                "rows_removed": removed,
                "committer": committers.get(info.version, committer),
                "tags": tags.get(info.version, []),
                "group": _group_entry(info),
                "attempts": info.metrics.get("attempts"),
                "metrics": info.metrics,
                "problem": "; ".join(problems) or None,
            }
        )
    if getattr(args, "json", False):
        emit_json(entries)
        return 0
    header = ["version", "timestamp", "operation", "call", "added", "removed", "attempts"]
    header += ["committer"]
    header += ["tags"] if tags else []
    grouped = any(e["group"] for e in entries)

    def count(e: dict[str, Any], key: str) -> str:
        if e[key] is None:
            return "?" if e["version"] in unreadable else "-"
        return str(e[key])

    rows = [
        [
            str(e["version"]),
            _iso(e["timestamp"]),
            e["operation"],
            e["api_operation"] or "-",
            count(e, "rows_added"),
            count(e, "rows_removed"),
            "-" if e["attempts"] is None else str(e["attempts"]),
            e["committer"],
            ", ".join(e["tags"]),
        ][: len(header)]
        + ([_group_text(e["group"])] if grouped else [])
        for e in entries
    ]
    header += ["group"] if grouped else []
    print_table(header, rows, right={0, 4, 5, 6})
    after_gap = [str(e["version"]) for e in entries if count(e, "rows_added") == "-"]
    if after_gap:
        print(
            "-: rows added and removed are not known where cleanup removed the version "
            f"before (version {', '.join(after_gap)})"
        )
    for e in entries:
        if e["problem"]:
            print(safe_text(f"version {e['version']}: {e['problem']}"))
    return 0


def _group_entry(info: s3ddb.VersionInfo) -> dict[str, Any] | None:
    """The group a version was committed in, for ``history --json`` (None: alone)."""
    if info.group_id is None or info.group_members is None:
        return None
    return {
        "id": info.group_id,
        "members": [
            {"base_uri": uri, "version": version, "table": table}
            for uri, version, table in info.group_members
        ],
    }


def _group_text(group: dict[str, Any] | None) -> str:
    """A group in the history table: its id and members (``uri@version``)."""
    if group is None:
        return ""
    members = ", ".join(f"{m['base_uri']}@{m['version']}" for m in group["members"])
    return safe_text(f"{group['id']}: {members}")


def _committers(ds: s3ddb.Dataset) -> dict[int, str]:
    """Committer of each version, as the DynamoDB rows record it (s3+ddb only)."""
    manifest_store = ds.handler.manifest_store()
    if manifest_store is None:
        return {}
    external, base_uri = manifest_store
    return {r.version: r.committer for r in external.list_versions(base_uri)}


def _version_changes(ds: s3ddb.Dataset, version: int) -> tuple[int | None, int | None, str]:
    """(rows added, rows removed, writer) of ``version`` against the version before.
    Where cleanup removed that version, an append's rows come from its transaction
    file; other rows are None (not known).

    Raises:
        S3DDBError: ``version`` cannot be read (e.g. removed meanwhile).
    """
    manifest = ds.checkout_version(version).manifest
    writer = f"{manifest.writer_library}/{manifest.writer_version}"
    try:
        before = ds.checkout_version(version - 1).manifest.fragments if version > 1 else ()
    except s3ddb.VersionNotFoundError:
        txn = load_transaction(ds.handler, manifest)
        if txn is not None and isinstance(txn.operation, Append):
            return sum(f.num_rows for f in txn.operation.fragments), 0, writer
        return None, None, writer
    # Only fragments that differ are decoded (chunks both versions list are not read).
    gone, new, changed = FragmentList(before).diff(manifest.fragments)
    previous = FragmentList(before).select(gone | changed)
    current = manifest.fragments.select(set(new) | changed)
    added = sum(current[i].num_rows for i in new)
    removed = sum(previous[i].num_rows for i in gone)
    for i in changed:
        # Rows a fragment lost were deleted; rows it gained came back (a restore of a
        # version before a delete gives the fragment its old deletions again).
        if previous[i].num_rows > current[i].num_rows:
            removed += previous[i].num_rows - current[i].num_rows
        else:
            added += current[i].num_rows - previous[i].num_rows
    return added, removed, writer


def run_show(args: argparse.Namespace) -> int:
    """Print a dataset's rows.

    Reads one version (default: the latest), optionally projected to --columns and
    filtered with SQL (docs/expressions.md), and prints the first --limit rows as an
    aligned table (long values cut), CSV (a header line; NULL is an empty field) or
    JSON (one object per line).
    """
    ds = _open(args, args.version)
    limit = args.limit or None
    table = ds.to_table(args.columns, args.filter, limit=None if limit is None else limit + 1)
    more = limit is not None and table.num_rows > limit
    table = table.slice(0, limit)
    try:
        _write_rows(table, args.format)
        hint = "--limit 0 prints all"
        if args.format == "table" and not more:
            print(f"({_rows(table.num_rows)})")
        elif args.format == "table":
            total = f"{limit} matching" if args.filter else f"{limit} of {ds.count_rows()}"
            print(f"(first {total} rows; {hint})")
        elif more:
            print(f"s3ddb: printed the first {_rows(table.num_rows)}; {hint}", file=sys.stderr)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as other command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


#: Rows of one aligned table of ``changes`` (a page: each has its header).
_CHANGES_PAGE = 500


def run_changes(args: argparse.Namespace) -> int:
    """Print the row changes of a range of versions (the change feed).

    One line per change of the versions after --from up to --to (default: the latest):
    the row's columns, then _change_type (insert or delete; an update is a delete of
    the old row and an insert of the new one, or with stable row ids update_preimage
    and update_postimage), _commit_version and _commit_timestamp
    (docs/changes.md). Versions that change no row (compaction, indices,
    configuration, schema changes) print none. Prints the first --limit changes as
    aligned tables of at most 500 rows each, or with --json one object per line;
    memory holds one version's changes of one fragment at a time.
    """
    ds = _open(args)
    # Ranges are refused in the command's words (--from, --to), not the API's.
    if args.end is not None and args.end > ds.version:
        raise InvalidInputError(f"--to {args.end} is after the latest version, {ds.version}")
    end = args.end if args.end is not None else ds.version
    if args.start > end:
        upto = f"--to {end}" if args.end is not None else f"the latest version, {end}"
        raise InvalidInputError(f"--from {args.start} is after {upto}")
    batches = ds.change_batches(args.start, args.end)
    fmt = "json" if args.json else "table"
    limit = args.limit or None
    printed, more = 0, False
    page: list[pa.RecordBatch] = []
    try:
        for batch in batches:
            if limit is not None and printed + batch.num_rows > limit:
                batch, more = batch.slice(0, limit - printed), True
            printed += batch.num_rows
            page.append(batch)
            if more or sum(b.num_rows for b in page) >= _CHANGES_PAGE:
                _write_rows(pa.Table.from_batches(page), fmt)
                page = []
            if more:
                break
        if page:
            _write_rows(pa.Table.from_batches(page), fmt)
        hint = "--limit 0 prints all"
        if fmt == "table":
            print(f"(first {limit} changes; {hint})" if more else f"({printed} changes)")
        elif more:
            print(f"s3ddb: printed the first {printed} changes; {hint}", file=sys.stderr)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _write_rows(table: pa.Table, fmt: str) -> None:
    names = table.column_names
    rows = table.to_pylist()
    if fmt == "json":
        for row in rows:
            print(json_text(row, default=json_default))
    elif fmt == "csv":
        # CSV quoting keeps a field's newlines and tabs apart; any other control
        # character (a carriage return too) is escaped.
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([safe_text(n, keep="\n\t") for n in names])
        writer.writerows(
            [
                ["" if v is None else safe_text(value_text(v), keep="\n\t") for v in r.values()]
                for r in rows
            ]
        )
    else:
        numeric = {
            i
            for i, f in enumerate(table.schema)
            if pa.types.is_integer(f.type)
            or pa.types.is_floating(f.type)
            or pa.types.is_decimal(f.type)
        }
        print_table(names, [[_cell(v) for v in r.values()] for r in rows], right=numeric)


def run_delete(args: argparse.Namespace) -> int:
    """Delete the rows matching a predicate.

    Commits a new version without the rows matching PREDICATE (SQL, see
    docs/expressions.md) and prints how many rows it deleted; commits nothing if no row
    matches.
    """
    ds = _open(args)
    deleted = ds.delete(args.predicate, conflict_retries=args.retries)["num_deleted_rows"]
    if args.json:
        emit_json({"num_deleted_rows": deleted, "version": ds.version, "committed": deleted > 0})
    elif deleted == 0:
        print(f"no rows match {args.predicate!r}; nothing committed (version {ds.version})")
    else:
        print(f"deleted {_rows(deleted)}; new version {ds.version}")
    return 0


def run_update(args: argparse.Namespace) -> int:
    """Set columns on the rows matching a predicate.

    Commits a new version where each --set column holds the value of its SQL
    expression, computed from the old row, on the rows matching --where (every row
    without it). A value must keep the column's type: CAST it if needed. Commits
    nothing if no row matches.
    """
    values: dict[str, Any] = {}
    for column, expr in args.assignments:
        if column in values:
            raise InvalidInputError(f"--set {column}=... is given more than once")
        values[column] = expr
    ds = _open(args)
    result = ds.update(values, args.where, rewrite=args.rewrite, conflict_retries=args.retries)
    updated = result["num_rows_updated"]
    if args.json:
        emit_json({"num_rows_updated": updated, "version": ds.version, "committed": updated > 0})
    elif updated == 0:
        what = f"no rows match {args.where!r}" if args.where else "the dataset has no rows"
        print(f"{what}; nothing committed (version {ds.version})")
    else:
        print(f"updated {_rows(updated)}; new version {ds.version}")
    return 0


def run_compact(args: argparse.Namespace) -> int:
    """Rewrite small and deletion-heavy fragments into fewer ones.

    Runs ds.optimize.compact_files on the latest version: runs of adjacent small
    fragments, fragments with many deleted rows and fragments with several data files
    are rewritten into fragments of up to --target-rows rows. Rows and their order are
    unchanged, and old versions keep their files. Commits nothing if no fragment is
    worth rewriting.
    """
    ds = _open(args)
    before = ds.version
    metrics = ds.optimize.compact_files(
        target_rows_per_fragment=args.target_rows,
        materialize_deletions=args.materialize_deletions,
        conflict_retries=args.retries,
    )
    if args.json:
        emit_json({"read_version": before, "version": ds.version, **dataclasses.asdict(metrics)})
        return 0
    if metrics.fragments_removed == 0:
        print(f"nothing to compact; nothing committed (version {ds.version})")
    else:
        print(f"compacted version {before}; new version {ds.version}")
    for name, value in dataclasses.asdict(metrics).items():
        print(f"  {name.replace('_', ' ') + ':':19}{value}")
    return 0


def run_restore(args: argparse.Namespace) -> int:
    """Make an old version the latest.

    Commits a new version with VERSION's content; the versions in between stay in the
    history.
    """
    ds = _open(args, args.version)
    restored = ds.version
    ds.restore()
    if args.json:
        emit_json({"restored": restored, "version": ds.version})
    else:
        print(f"restored version {restored} as new version {ds.version}")
    return 0


def run_tags(args: argparse.Namespace) -> int:
    """List, create or delete tags.

    A tag names one version and can be used wherever a version is accepted (show
    --version TAG, restore URI TAG). Without ACTION, lists the tags.
    """
    return run_tag_list(args)


def run_tag_list(args: argparse.Namespace) -> int:
    """List the tags and the versions they name."""
    tags = _open(args).tags.list()
    if getattr(args, "json", False):
        emit_json(dict(sorted(tags.items())))
        return 0
    rows = [[name, str(v)] for name, v in sorted(tags.items(), key=lambda t: (t[1], t[0]))]
    if rows:
        print_table(["tag", "version"], rows, right={1})
    else:
        print("no tags")
    return 0


def run_tag_create(args: argparse.Namespace) -> int:
    """Name a version."""
    _open(args).tags.create(args.name, args.tag_version)
    if getattr(args, "json", False):
        emit_json({"tag": args.name, "version": args.tag_version})
        return 0
    print(f"created tag {args.name!r} -> version {args.tag_version}")
    return 0


def run_tag_delete(args: argparse.Namespace) -> int:
    """Remove a tag (the version it names stays)."""
    tags = _open(args).tags
    version = tags.resolve(args.name)
    tags.delete(args.name)
    if getattr(args, "json", False):
        emit_json({"tag": args.name, "version": version, "deleted": True})
        return 0
    print(f"deleted tag {args.name!r} (it named version {version})")
    return 0
