"""Conflict rules of the schema-changing operations (Merge, Project) as *mine*.

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

docs/conflicts.md has the matrix and how this differs from Lance.
"""

from __future__ import annotations

from collections.abc import Callable

from s3ddb.commit.conflicts import ConflictContext, Outcome, Rule, Verdict
from s3ddb.commit.schema_ops import Project
from s3ddb.commit.transaction import OPERATION_KINDS, Transaction, UpdateConfig

_C, _R, _I = Outcome.COMPATIBLE, Outcome.RETRYABLE, Outcome.INCOMPATIBLE


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


def register_rules(
    register_rule: Callable[[str, str, Rule], None],
    fixed: Callable[[Outcome, str], Rule],
) -> None:
    """Register the rules of Merge and Project against every kind."""
    for theirs in OPERATION_KINDS:
        register_rule("Merge", theirs, fixed(_R, "rows or schema changed; recompute the columns"))
        register_rule("Project", theirs, fixed(_C, "a schema-only change keeps every row"))
    for mine in ("Merge", "Project"):
        for theirs in ("CreateIndex", "ReserveFragments", "UpdateMemWalState", "UpdateBases"):
            register_rule(mine, theirs, fixed(_C, "touches no rows and no schema"))
        register_rule(mine, "UpdateConfig", unless_schema_metadata_changed)
        for theirs in ("Merge", "Project"):
            register_rule(mine, theirs, fixed(_R, "the schema changed; re-apply on the new one"))
        register_rule(
            mine,
            "Overwrite",
            fixed(_I, "the dataset was overwritten: the columns this changed are gone"),
        )
        register_rule(
            mine,
            "Restore",
            fixed(_I, "the dataset was restored to another version: the schema it changed is gone"),
        )
        register_rule(mine, "Clone", fixed(_I, "clone is only valid as a dataset's first commit"))
    for theirs in ("Append", "Update", "DataReplacement"):
        register_rule("Project", theirs, unless_nullability_tightened)
