"""The metrics every commit records in its version.

A writer stores them in the version's manifest (its header, read with the rest of a
version's history) and, on the DynamoDB path, in the version's row: how many claim
attempts the commit took, which versions it was rebased over, where its time went,
and what it changed. ``ds.versions()`` entries carry them as ``.metrics`` (a dict;
empty for versions written before s3ddb recorded them), and ``s3ddb history --json``
shows them.

Keys (every commit): ``attempts``, ``rebased_over`` (versions committed between the
version it read and the one it built on, oldest first, at most 64 listed) and
``rebased_over_count``, ``duration_ms`` (from the start of the commit to the claim
that won) and ``phases_ms`` (``prepare``: the transaction file and catching up;
``write_files``: waiting for the commit's files to land; ``stage``: the staged
manifest, DynamoDB path; ``claim``: the conditional write(s)), ``num_added_rows``,
``num_deleted_rows``, ``num_updated_rows``, ``num_added_files``,
``num_removed_files``, ``bytes_added``, ``bytes_removed`` (data files). Per
operation: a merge adds ``source_rows``, ``matched_rows``, ``inserted_rows``,
``updated_rows``, ``deleted_rows``, ``fragments_scanned``, ``fragments_skipped`` (and a
Spark merge ``merge_writer``: ``"jvm"`` or ``"python"``, who wrote its rows; a
Spark update ``update_writer``, the same); a
compaction ``fragments_in`` and ``fragments_out``; a delete ``fragments_touched``.
The call that made the version, where one is known: ``api_operation`` (a string:
``add_columns``, ``alter_columns``, ``drop_columns``, ``merge_insert``, ``update``,
``delete``, ``compact_files``, ``create_scalar_index``, ``enable_open_formats``,
``restore``...), beside the operation kind the manifest records (a Lance kind,
``Merge`` for ``add_columns``, ``Update`` for ``merge_insert``, which users do not
recognise as theirs).
Finishing a version (copy and repoint, after the claim) is not in them: it happens
after the version is stored (traces and the ``s3ddb.commit`` log record show it).

Stored metrics are untrusted input like the rest of a manifest or row: a JSON object
of at most 16 KiB, keys and values checked
(:func:`s3ddb.format.version_metrics.parse_metrics`).
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3ddb.format.fragment_metadata import FragmentMetadata
    from s3ddb.format.manifest import Manifest
    from s3ddb.operations.operation import Operation

__all__ = [
    "API_OPERATION",
    "add_operation_metrics",
    "adding_operation_metrics",
    "api_operation_of",
    "change_metrics",
    "listed_versions",
    "operation_metrics",
    "recorded_operation_metrics",
    "replayed_operation_metrics",
]

_MAX_LISTED = 64

#: The metrics key naming the call that made a version (see the module docstring).
API_OPERATION = "api_operation"
# What a recorded call name may be (stored metrics are untrusted: anything else is
# not shown as a name).
_API_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")

_OPERATION: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "s3ddb_operation_metrics", default=None
)
#: What a caller adds to every :func:`operation_metrics` block opened inside its
#: :func:`adding_operation_metrics` block.
_ADDED: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "s3ddb_added_operation_metrics", default=None
)


@contextmanager
def operation_metrics(api_operation: str | None = None, **values: int) -> Iterator[dict[str, Any]]:
    """Inside the block, commits record ``values`` (and whatever is added to the
    yielded dict) besides their own metrics: what an operation knows of its work
    that the versions do not show (a merge's matched rows), and ``api_operation``,
    the name of the call that commits (``add_columns``), as :data:`API_OPERATION`."""
    recorded: dict[str, Any] = {**(_ADDED.get() or {}), **values}
    if api_operation is not None:
        recorded[API_OPERATION] = api_operation
    token = _OPERATION.set(recorded)
    try:
        yield recorded
    finally:
        _OPERATION.reset(token)


@contextmanager
def adding_operation_metrics(**values: int | str) -> Iterator[None]:
    """Inside the block, every :func:`operation_metrics` block opened records
    ``values`` too: for a caller around an operation that opens its own block (a
    Spark update around ``Dataset.update``: who wrote the rows)."""
    token = _ADDED.set({**(_ADDED.get() or {}), **values})
    try:
        yield
    finally:
        _ADDED.reset(token)


def api_operation_of(metrics: Mapping[str, Any]) -> str | None:
    """The call that made a version, as its stored ``metrics`` record it
    (:data:`API_OPERATION`); None when they do not (versions written before s3ddb
    recorded it, calls it does not name) or hold anything but a lower-case name."""
    name = metrics.get(API_OPERATION)
    return name if isinstance(name, str) and _API_NAME.fullmatch(name) else None


def add_operation_metrics(**values: int | str) -> None:
    """Record ``values`` in the innermost :func:`operation_metrics` block (nothing
    outside one): a planner's figures, for the commit that follows it."""
    recorded = _OPERATION.get()
    if recorded is not None:
        recorded.update(values)


def recorded_operation_metrics() -> dict[str, Any]:
    """The values the innermost :func:`operation_metrics` block recorded."""
    return dict(_OPERATION.get() or {})


@contextmanager
def replayed_operation_metrics(recorded: Mapping[str, Any]) -> Iterator[None]:
    """Inside the block, commits record ``recorded``, what
    :func:`recorded_operation_metrics` gave where the change was planned: for a change
    committed elsewhere (a group holds its members' changes until the block ends)."""
    token = _OPERATION.set(dict(recorded))
    try:
        yield
    finally:
        _OPERATION.reset(token)


def _files(fragment: FragmentMetadata) -> dict[str, int]:
    return {d.path: d.file_size_bytes for d in fragment.files}


def change_metrics(base: Manifest | None, new: Manifest, operation: Operation) -> dict[str, Any]:
    """Rows, files and bytes ``new`` added and removed over ``base``, and the
    operation's own figures. Only the fragments that differ are decoded (with
    fragment-list chunks, only the chunks that differ are read)."""
    from s3ddb.format.fragment_list import FragmentList

    if operation.kind == "Append":
        # What an append adds is its fragments: no need to compare the versions.
        fragments = getattr(operation, "fragments", ())
        added_files = {p: n for f in fragments for p, n in _files(f).items()}
        return {
            "num_added_rows": sum(f.num_rows for f in fragments),
            "num_deleted_rows": 0,
            "num_updated_rows": 0,
            "num_added_files": len(added_files),
            "num_removed_files": 0,
            "bytes_added": sum(added_files.values()),
            "bytes_removed": 0,
            **recorded_operation_metrics(),
        }
    before = base.fragments if base is not None else FragmentList()
    removed, added, changed = before.diff(new.fragments)
    old = before.select(removed | changed) if removed or changed else {}
    now = new.fragments.select(set(added) | changed) if added or changed else {}
    added_rows = sum(now[i].num_rows for i in added)
    deleted_rows = sum(old[i].num_rows for i in removed)
    old_files: dict[str, int] = {}
    new_files: dict[str, int] = {}
    for i in removed:
        old_files.update(_files(old[i]))
    for i in added:
        new_files.update(_files(now[i]))
    for i in changed:
        deleted_rows += max(0, old[i].num_rows - now[i].num_rows)
        added_rows += max(0, now[i].num_rows - old[i].num_rows)
        before_files, after_files = _files(old[i]), _files(now[i])
        old_files.update({p: s for p, s in before_files.items() if p not in after_files})
        new_files.update({p: s for p, s in after_files.items() if p not in before_files})
    out: dict[str, Any] = {
        "num_added_rows": added_rows,
        "num_deleted_rows": deleted_rows,
        "num_updated_rows": 0,
        "num_added_files": len(new_files),
        "num_removed_files": len(old_files),
        "bytes_added": sum(new_files.values()),
        "bytes_removed": sum(old_files.values()),
    }
    kind = operation.kind
    if kind == "Rewrite":
        # Rows moved, none added or deleted (deleted rows a compaction drops were
        # deleted before).
        out["num_added_rows"] = out["num_deleted_rows"] = 0
        out["fragments_in"] = len(removed) + len(changed)
        out["fragments_out"] = len(added)
    elif kind == "Delete":
        out["fragments_touched"] = len(removed) + len(changed)
    elif kind == "Update":
        affected = getattr(operation, "affected_rows", {})
        updated = sum(len(rows) for rows in affected.values())
        out["num_updated_rows"] = updated
        out["num_added_rows"] = max(0, added_rows - updated)
        out["num_deleted_rows"] = max(0, deleted_rows - updated)
    recorded = recorded_operation_metrics()
    if "updated_rows" in recorded:  # a merge knows its inserts, updates and deletes
        out["num_updated_rows"] = int(recorded["updated_rows"])
        out["num_added_rows"] = int(recorded.get("inserted_rows", out["num_added_rows"]))
        out["num_deleted_rows"] = int(recorded.get("deleted_rows", out["num_deleted_rows"]))
    out.update(recorded)
    return out


def listed_versions(versions: list[int]) -> list[int]:
    """At most the last 64 of ``versions`` (a commit rebased over hundreds records
    their count and the newest)."""
    return versions[-_MAX_LISTED:]
