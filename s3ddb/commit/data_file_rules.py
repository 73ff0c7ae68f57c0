"""Conflict rules of the operations that replace data files or build on them, as
*mine*: DataReplacement (its new files must still line up with the fragments it
replaces) and CreateIndex (the index must have read the column's current values)."""

from __future__ import annotations

from typing import Any

from s3ddb.commit.verdicts import ConflictContext, Outcome, Verdict
from s3ddb.operations import (
    CreateIndex,
    DataReplacement,
    Delete,
    OpaqueOperation,
    Rewrite,
    Transaction,
    Update,
    UpdateMode,
)

__all__ = ["index_vs_index", "index_vs_rewritten_columns", "replacement_vs_fragments"]

_C, _R = Outcome.COMPATIBLE, Outcome.RETRYABLE


def _fragments_touched(op: Any) -> set[int] | None:
    """Fragments a committed operation changed the files of or removed (None: unknown)."""
    if isinstance(op, Delete):
        return set(op.deleted_fragment_ids)
    if isinstance(op, Update):
        ids = set(op.removed_fragment_ids) | {f.id for f in op.updated_fragments}
        return ids
    if isinstance(op, Rewrite):
        return {f.id for f in op.old_fragments()}
    if isinstance(op, DataReplacement):
        return op.fragment_ids
    return None


def replacement_vs_fragments(
    mine: Transaction, theirs: Transaction, ctx: ConflictContext | None
) -> Verdict:
    """My new files must still line up with the fragments I replace: a fragment that
    was removed, compacted, or had rows moved or columns rewritten makes them stale.
    (Deleted rows alone do not: the deletion file is kept, offsets are unchanged.)"""
    op = mine.operation
    assert isinstance(op, DataReplacement)
    touched = _fragments_touched(theirs.operation)
    if touched is None:
        return Verdict(_R, f"{theirs.kind} is not understood by this version")
    overlap = touched & op.fragment_ids
    if overlap:
        return Verdict(_R, f"fragments {sorted(overlap)} changed concurrently")
    return Verdict(_C, "theirs changed no fragment this replaces")


def _fields_rewritten(op: Any) -> set[int] | None:
    """Field ids whose column files an Update or DataReplacement replaced (None: not
    understood)."""
    if isinstance(op, DataReplacement):
        return {f for g in op.replacements for f in g.new_file.fields}
    if isinstance(op, Update):
        if op.mode is not UpdateMode.REWRITE_COLUMNS:
            return set()
        # A column rewrite appends one file holding the new columns to each fragment.
        return {f for frag in op.updated_fragments for f in frag.files[-1].fields}
    if isinstance(op, OpaqueOperation):
        return None
    return set()


def index_vs_rewritten_columns(
    mine: Transaction, theirs: Transaction, ctx: ConflictContext | None
) -> Verdict:
    """My index read the column's old values if theirs replaced its files."""
    op = mine.operation
    assert isinstance(op, CreateIndex)
    rewritten = _fields_rewritten(theirs.operation)
    if rewritten is None:
        return Verdict(_R, f"{theirs.kind} is not understood by this version")
    if rewritten & op.field_ids:
        return Verdict(_R, "the indexed column was rewritten: the index holds old values")
    return Verdict(_C, "the indexed column was not rewritten")


def index_vs_index(mine: Transaction, theirs: Transaction, ctx: ConflictContext | None) -> Verdict:
    """Two index changes conflict only on an index of the same name."""
    op, their = mine.operation, theirs.operation
    assert isinstance(op, CreateIndex)
    if not isinstance(their, CreateIndex):
        return Verdict(_R, "an index changed concurrently")
    names = {i.name for i in op.new_indices}
    taken = {i.name for i in their.new_indices} | {i.name for i in their.removed_indices}
    removed = {i.uuid for i in op.removed_indices} & {i.uuid for i in their.removed_indices}
    if names & taken or removed:
        return Verdict(_R, f"index {sorted(names & taken)} was (re)created concurrently")
    return Verdict(_C, "indices of other names")
