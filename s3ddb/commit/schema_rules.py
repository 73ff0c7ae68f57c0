"""Conflict rules of the schema-changing operations (Merge, Project) and of
configuration changes (UpdateConfig) as *mine*.

Both carry a complete schema computed from their read version, and a Merge the
complete fragment list too, so:

  * a Merge lands only over commits that leave fragments and schema alone: new
    columns were computed (or aligned) for exactly the rows it read. Anything that
    adds, removes or rewrites rows makes it retryable (re-executing computes the
    values for the rows now there); a restore or overwrite refuses it, since the
    rows it extended are gone.
  * a Project (metadata only) rebases over row changes: a drop or rename applies to
    whatever rows exist. The exception is a Project that makes a column NOT NULL: it
    checked the rows of its read version, and rows written since may hold NULL.
  * either retries over a concurrent schema change (Merge, Project) and over a config
    change that edited schema or field metadata, which its full schema would undo.

Two config changes of different keys commute; of a shared key, mine is re-applied on
top (:func:`config_after_config`).

docs/conflicts.md has the matrix and how this differs from Lance.
"""

from __future__ import annotations

from s3ddb.commit.verdicts import ConflictContext, Outcome, Verdict
from s3ddb.operations import MapUpdate, Project, Transaction, UpdateConfig

__all__ = ["config_after_config", "unless_nullability_tightened", "unless_schema_metadata_changed"]

_C, _R = Outcome.COMPATIBLE, Outcome.RETRYABLE


def unless_schema_metadata_changed(
    mine: Transaction, theirs: Transaction, ctx: ConflictContext | None
) -> Verdict:
    """Rebase over a config change unless it edited the schema's or a field's
    metadata: my schema, from before it, would silently undo that edit."""
    op = theirs.operation
    if isinstance(op, UpdateConfig) and op.changes_schema:
        return Verdict(_R, "schema or field metadata changed; re-apply on the new schema")
    return Verdict(_C, "config changes touch no data and no schema")


def unless_nullability_tightened(
    mine: Transaction, theirs: Transaction, ctx: ConflictContext | None
) -> Verdict:
    """A Project rebases over rows written concurrently unless it makes a column
    NOT NULL: those rows were not checked for NULLs."""
    op = mine.operation
    assert isinstance(op, Project)
    if ctx is None:
        return Verdict(_R, "cannot compare nullability without the schema before theirs")
    before = {i: p for p, i in ctx.before.schema.ids if len(p) == 1}
    for path, field_id in op.schema.ids:
        if len(path) != 1 or field_id not in before:
            continue
        now = op.schema.arrow.field(path[0])
        was = ctx.before.schema.arrow.field(before[field_id][0])
        if was.nullable and not now.nullable:
            return Verdict(
                _R,
                f"column {path[0]!r} is made NOT NULL, and {theirs.kind} wrote rows that "
                "were not checked for NULLs",
            )
    return Verdict(_C, "a drop or rename applies to the rows written concurrently too")


def _touched_keys(op: object) -> set[tuple[object, ...]] | None:
    """The keys an UpdateConfig sets or deletes, per map; ``*`` for a map it replaces
    whole. None for an operation whose keys are unknown."""
    if not isinstance(op, UpdateConfig):
        return None
    keys: set[tuple[object, ...]] = {("config", k) for k in (*op.config_upsert, *op.config_delete)}
    keys |= {("metadata", k) for k in (*op.metadata_upsert, *op.metadata_delete)}
    maps: dict[tuple[object, ...], MapUpdate] = {
        ("field", f): c for f, c in op.field_metadata.items()
    }
    if op.schema_metadata is not None:
        maps[("schema",)] = op.schema_metadata
    for where, change in maps.items():
        if change.replace:
            keys.add((*where, "*"))
        keys |= {(*where, k) for k in (*change.upsert, *change.delete)}
    return keys


def config_after_config(
    mine: Transaction, theirs: Transaction, ctx: ConflictContext | None
) -> Verdict:
    """Config changes of different keys commute; of a shared key, mine is re-applied on
    top (it then wins, as a later call would)."""
    a, b = _touched_keys(mine.operation), _touched_keys(theirs.operation)
    if a is None or b is None:
        return Verdict(Outcome.RETRYABLE, "concurrent config change: re-read and re-apply")

    def overlap(x: set[tuple[object, ...]], y: set[tuple[object, ...]]) -> bool:
        return any(k in y or (k[-1] == "*" and any(j[:-1] == k[:-1] for j in y)) for k in x)

    if overlap(a, b) or overlap(b, a):
        return Verdict(
            Outcome.RETRYABLE, "a concurrent config change set the same keys: re-read and re-apply"
        )
    return Verdict(Outcome.COMPATIBLE, "the two config changes touch different keys")
