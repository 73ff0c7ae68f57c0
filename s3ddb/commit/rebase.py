"""Rebasing row-changing transactions (Delete, Update, merge_insert) over others.

Serializability is the rule: my transaction may land after theirs only if the result
equals running my operation *after* theirs. My operation read every row of the
version it started from; theirs changed that version in three ways, each checked:

  * rows it removed (deletion files, removed fragments): a delete of the same rows
    is idempotent, so deletes merge their deletion vectors; an update or upsert of
    a removed row would resurrect it, so it is retryable;
  * rows it changed in place (REWRITE_COLUMNS): my predicate may now answer
    differently for them;
  * rows it added (new fragments of Append, Update, merge_insert): my predicate, or
    my merge keys, may match them.

For rows added or changed, my predicate is re-evaluated on exactly those rows (or my
source keys compared with theirs). A Delete absorbs the answer: it deletes the added
rows that match, which is what running it second would do. An Update that rewrites
rows absorbs it too: it applies its values to the matching rows. An Update rewriting
columns, or a merge_insert, whose predicate or keys match is retryable: re-executing
it is the only way to apply it to rows it never saw.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from s3ddb.commit.fragment_reuse import (
    apply_deletions,
    carry_deletes_into_rewrite,
    carry_over_rewrite,
)
from s3ddb.commit.verdicts import ConflictContext, Outcome, Verdict
from s3ddb.errors import InvalidInputError
from s3ddb.expressions import parse_predicate, referenced_columns
from s3ddb.format.datafile import read_fragment, write_fragments_from_table
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.format.keys import key_hashes
from s3ddb.format.row_evaluation import (
    all_rows,
    apply_values,
    matching_rows,
    take_rows,
    within_key_bounds,
)
from s3ddb.format.row_lineage import RowLineage
from s3ddb.operations import (
    Delete,
    KeyExistenceFilter,
    OpaqueOperation,
    Rewrite,
    Transaction,
    Update,
    UpdateMode,
)

__all__ = [
    "RowChanges",
    "rebase_delete",
    "rebase_over_compaction",
    "rebase_rewrite",
    "rebase_update",
    "their_changes",
]

_C, _R = Outcome.COMPATIBLE, Outcome.RETRYABLE


@dataclass
class RowChanges:
    """What one committed transaction did to the rows of the version before it."""

    removed_fragments: set[int] = field(default_factory=set)
    removed_rows: dict[int, BitMap] = field(default_factory=dict)
    changed_rows: dict[int, BitMap] = field(default_factory=dict)
    files_changed: set[int] = field(default_factory=set)
    new_fragment_ids: list[int] = field(default_factory=list)
    key_filter: KeyExistenceFilter | None = None


def _visible(ctx: ConflictContext, fragment: FragmentMetadata) -> BitMap:
    return all_rows(fragment.physical_rows) - read_deleted_rows(ctx.files, fragment)


def their_changes(theirs: Transaction, ctx: ConflictContext) -> RowChanges:
    """Compare the manifests around ``theirs``, using its recorded affected rows where
    it has them (and the deletion files where it does not)."""
    op = theirs.operation
    recorded: dict[int, BitMap] = dict(op.affected_rows) if isinstance(op, (Delete, Update)) else {}
    in_place = isinstance(op, Update) and op.mode is UpdateMode.REWRITE_COLUMNS
    before = ctx.before_fragments
    after = ctx.after_fragments
    removed, added, changed = ctx.fragment_diff
    out = RowChanges(
        removed_fragments=removed,
        new_fragment_ids=added,
        key_filter=op.inserted_keys if isinstance(op, Update) else None,
    )
    for fid in changed:
        b, a = before[fid], after[fid]
        if a.deletion_file != b.deletion_file:
            if fid in recorded and not in_place:
                out.removed_rows[fid] = recorded[fid]
            else:
                out.removed_rows[fid] = read_deleted_rows(ctx.files, a) - read_deleted_rows(
                    ctx.files, b
                )
        if a.files != b.files:
            out.files_changed.add(fid)
            out.changed_rows[fid] = recorded.get(fid) or _visible(ctx, a)
    return out


def _rows_to_recheck(changes: RowChanges, ctx: ConflictContext) -> dict[int, BitMap]:
    """Rows theirs added or changed, per fragment of ``ctx.after``."""
    after = ctx.after_fragments
    out = {fid: _visible(ctx, after[fid]) for fid in changes.new_fragment_ids}
    for fid, rows in changes.changed_rows.items():
        out[fid] = out.get(fid, BitMap()) | rows
    return {fid: rows for fid, rows in out.items() if rows}


def _predicate(op: Delete | Update, ctx: ConflictContext) -> pc.Expression | None:
    if op.plan.predicate_expr is not None:
        return op.plan.predicate_expr
    if isinstance(op, Update) and not op.predicate:
        return pc.scalar(True)  # an update without a where clause changes every row
    if not op.predicate:
        return None
    try:
        return parse_predicate(op.predicate, ctx.after.schema.arrow)
    except InvalidInputError:
        return None  # e.g. a column was renamed: re-executing gives the clear error


def _matching(
    ctx: ConflictContext, fragment_id: int, predicate: pc.Expression, rows: BitMap
) -> BitMap:
    fragment = ctx.after_fragments[fragment_id]
    schema = ctx.after.schema
    columns = sorted(referenced_columns(predicate, schema.arrow))
    table = read_fragment(ctx.files, fragment, schema, columns)
    return matching_rows(table, predicate, rows)


def _keys_written(ctx: ConflictContext, keys: tuple[str, ...], rows: dict[int, BitMap]) -> set[int]:
    out: set[int] = set()
    after = ctx.after_fragments
    for fid, wanted in rows.items():
        table = read_fragment(ctx.files, after[fid], ctx.after.schema, list(keys))
        out.update(key_hashes(take_rows(table, wanted), list(keys)))
    return out


def _unrecorded(
    op: Delete | Update, updated: Iterable[int], removed: Iterable[int]
) -> Verdict | None:
    """A retry, if ``op`` changes or removes a fragment without recording which of
    its rows it touched (``affected_rows``): an operation built elsewhere, by hand
    (pylance's ``LanceOperation.Delete/Update``). A rebase checks and moves those rows
    only; with none recorded it would drop the change, or bring back rows deleted
    concurrently. None if every such fragment records its rows."""
    for fid in (*updated, *removed):
        if fid not in op.affected_rows:
            return Verdict(
                _R,
                f"this {op.kind} does not record which rows of fragment {fid} it touched "
                "(built without them): it cannot be moved onto a newer version; build it "
                "again on the newest",
            )
    return None


def rebase_delete(mine: Transaction, theirs: Transaction, ctx: ConflictContext | None) -> Verdict:
    """Deletes always rebase over appends, deletes and updates: deleted rows stay
    deleted, and the predicate is re-applied to the rows theirs added or changed."""
    if ctx is None:
        return Verdict(_R, "the rows both touched cannot be compared without the data")
    op = mine.operation
    assert isinstance(op, Delete)
    unknown = _unrecorded(op, [f.id for f in op.updated_fragments], op.deleted_fragment_ids)
    if unknown is not None:
        return unknown
    changes = their_changes(theirs, ctx)
    affected = {fid: BitMap(rows) for fid, rows in op.affected_rows.items()}
    for fid in changes.removed_fragments:
        affected.pop(fid, None)
    recompute = {fid for fid in affected if fid in changes.removed_rows}
    recheck = _rows_to_recheck(changes, ctx)
    if recheck:
        predicate = _predicate(op, ctx)
        if predicate is None:
            return Verdict(_R, "rows were added concurrently and the predicate cannot be re-read")
        for fid, rows in recheck.items():
            old = affected.get(fid, BitMap())
            new = (old - rows) | _matching(ctx, fid, predicate, rows)
            if new != old:
                affected[fid] = new
                recompute.add(fid)
    updated = {f.id: f for f in op.updated_fragments if f.id in affected}
    removed = {i for i in op.deleted_fragment_ids if i in affected}
    if (
        recompute
        or len(updated) != len(op.updated_fragments)
        or len(removed) != len(op.deleted_fragment_ids)
    ):
        apply_deletions(ctx, affected, recompute, updated, removed)
        rebased = replace(
            op,
            updated_fragments=tuple(updated[i] for i in sorted(updated)),
            deleted_fragment_ids=tuple(sorted(removed)),
            affected_rows=affected,
        )
        return Verdict(_C, "deletion vectors merged", replace(mine, operation=rebased))
    return Verdict(_C, "the rows deleted and the rows added or changed are disjoint")


def rebase_update(mine: Transaction, theirs: Transaction, ctx: ConflictContext | None) -> Verdict:
    """Updates and upserts rebase only when theirs touched none of their rows and
    added no row their predicate (or keys) would have matched."""
    if ctx is None:
        return Verdict(_R, "the rows both touched cannot be compared without the data")
    op = mine.operation
    assert isinstance(op, Update)
    unknown = _unrecorded(op, [f.id for f in op.updated_fragments], op.removed_fragment_ids)
    if unknown is not None:
        return unknown
    what = "merge_insert" if op.is_merge else "update"
    changes = their_changes(theirs, ctx)
    # The rows this operation read and acted on: those it changed, and (merge) every
    # target row it matched, changed or not (an insert-only merge skips them).
    read = {fid: BitMap(rows) for fid, rows in op.affected_rows.items()}
    for fid, rows in op.plan.matched_rows.items():
        read[fid] = read.get(fid, BitMap()) | rows
    before = ctx.before_fragments
    for fid, rows in read.items():
        if fid in changes.removed_fragments:
            return Verdict(_R, f"fragment {fid}, whose rows this {what} read, was removed")
        if fid not in before:
            # An address an earlier rebase failed to move: the rows' changes since
            # cannot be checked, so running this again is the only safe answer.
            return Verdict(_R, f"fragment {fid}, whose rows this {what} read, no longer exists")
        clash = rows & (
            changes.removed_rows.get(fid, BitMap()) | changes.changed_rows.get(fid, BitMap())
        )
        if clash:
            return Verdict(
                _R,
                f"{len(clash)} row(s) of fragment {fid} that this {what} changed or matched "
                f"were deleted or changed concurrently (first: offset {clash.min()})",
            )
        if op.mode is UpdateMode.REWRITE_COLUMNS and fid in changes.files_changed:
            return Verdict(_R, f"columns of fragment {fid} were rewritten concurrently")
    recheck = _rows_to_recheck(changes, ctx)
    absorbed: dict[int, BitMap] = {}
    if recheck and op.is_merge:
        stale = _stale_merge(op, ctx, changes, recheck)
        if stale:
            return Verdict(_R, stale)
    elif recheck:
        predicate = _predicate(op, ctx)
        if predicate is None:
            return Verdict(_R, "rows were added concurrently; the where clause cannot be re-read")
        for fid, rows in recheck.items():
            matched = _matching(ctx, fid, predicate, rows)
            if matched:
                absorbed[fid] = matched
        if absorbed and (op.mode is not UpdateMode.REWRITE_ROWS or not op.plan.value_exprs):
            return Verdict(
                _R,
                f"rows added or changed concurrently (fragment {min(absorbed)}) match the "
                "where clause; re-run the update to change them too",
            )
    recompute = (
        {f.id for f in op.updated_fragments if f.id in changes.removed_rows}
        if op.mode is UpdateMode.REWRITE_ROWS
        else set()
    )
    if not recompute and not absorbed:
        return Verdict(_C, f"theirs touched no row this {what} read or changed")
    affected = {fid: BitMap(rows) for fid, rows in op.affected_rows.items()}
    new_fragments = list(op.new_fragments)
    if absorbed:
        # Running second, this update would change the matching rows theirs added:
        # change them here (delete them where they are, write them updated).
        new_fragments += _updated_copies(ctx, op, absorbed)
        for fid, rows in absorbed.items():
            affected[fid] = affected.get(fid, BitMap()) | rows
            recompute.add(fid)
    updated = {f.id: f for f in op.updated_fragments}
    removed = set(op.removed_fragment_ids)
    apply_deletions(ctx, affected, recompute, updated, removed)
    rebased = replace(
        op,
        updated_fragments=tuple(updated[i] for i in sorted(updated)),
        removed_fragment_ids=tuple(sorted(removed)),
        new_fragments=tuple(new_fragments),
        affected_rows=affected,
    )
    reason = "applied to the matching rows theirs added" if absorbed else "deletion vectors merged"
    return Verdict(_C, reason, replace(mine, operation=rebased))


def _updated_copies(
    ctx: ConflictContext, op: Update, rows: dict[int, BitMap]
) -> list[FragmentMetadata]:
    """The rows ``rows`` of ``ctx.after`` with ``op``'s values applied, written as new
    fragments (their files are recorded in ``ctx.written``)."""
    schema = ctx.after.schema
    names = list(schema.arrow.names)
    after = ctx.after_fragments
    pieces = []
    for fid in sorted(rows):
        table = read_fragment(ctx.files, after[fid], schema, names)
        pieces.append(
            apply_values(
                take_rows(table, rows[fid]), dict(op.plan.value_exprs), schema.arrow, ctx.store.url
            )
        )
    fragments = write_fragments_from_table(ctx.store, pa.concat_tables(pieces), schema)
    ctx.written.extend(data_file_paths(fragments))
    if ctx.after.stable_row_ids:
        # The rows keep their ids, as an update run after theirs would keep them.
        lineage = RowLineage.concat(
            [RowLineage.of_rows(after[fid], rows[fid]) for fid in sorted(rows)]
        )
        fragments = lineage.touched().spread(fragments)
    return fragments


def _stale_merge(
    op: Update, ctx: ConflictContext, changes: RowChanges, recheck: dict[int, BitMap]
) -> str | None:
    """Why rows theirs added or changed make my merge's read stale, or None."""
    plan = op.plan
    if plan.deletes_unmatched:
        return "rows were added concurrently; this merge would have deleted those its source lacks"
    stale = (
        "a key of this merge ({}) was written concurrently; re-run the merge so that it "
        "updates that row instead of duplicating it"
    ).format(", ".join(plan.merge_keys))
    if plan.merge_keys and plan.source_key_bounds and not plan.source_key_hashes:
        return stale if _keys_within(ctx, plan, recheck) else None
    if not plan.merge_keys or not plan.source_key_hashes:
        return "rows were added concurrently and this merge's keys are not known here"
    key_ids = tuple(ctx.after.schema.top_level_ids(list(plan.merge_keys)))
    theirs_filter = changes.key_filter
    if theirs_filter is not None and theirs_filter.field_ids == key_ids:
        # Their filter covers every row they wrote: no need to read their files.
        hit = theirs_filter.intersects(plan.source_key_hashes)
        rest = {fid: r for fid, r in recheck.items() if fid in changes.changed_rows}
        hit = hit or bool(_keys_written(ctx, plan.merge_keys, rest) & plan.source_key_hashes)
    else:
        hit = bool(_keys_written(ctx, plan.merge_keys, recheck) & plan.source_key_hashes)
    return stale if hit else None


def _keys_within(ctx: ConflictContext, plan: Any, rows: dict[int, BitMap]) -> bool:
    """Whether a row of ``rows`` (of ``ctx.after``) has a key within every one of
    ``plan.source_key_bounds``: it may be a key of the source."""
    after = ctx.after_fragments
    names = [name for name, _low, _high in plan.source_key_bounds]
    for fid, wanted in rows.items():
        table = take_rows(read_fragment(ctx.files, after[fid], ctx.after.schema, names), wanted)
        inside = within_key_bounds(table, plan.source_key_bounds)
        if inside is not None and pc.any(inside).as_py():
            return True
    return False


def _rewritten_fragments(their_op: Any) -> set[int] | None:
    if isinstance(their_op, Rewrite):
        return {f.id for f in their_op.old_fragments()}
    if isinstance(their_op, OpaqueOperation):
        return {f.id for group in their_op.message.groups for f in group.old_fragments}
    return None


def _touched_by(op: Delete | Update) -> set[int]:
    """Fragments whose rows ``op`` changed or (a merge) matched. A matched row that the
    merge left unchanged still decides its outcome (it was not inserted): a compaction
    must carry its address along, or a later delete of the row goes unnoticed."""
    ids = set(op.affected_rows) | {f.id for f in op.updated_fragments}
    ids |= set(op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids)
    if isinstance(op, Update):
        ids |= {fid for fid, rows in op.plan.matched_rows.items() if rows}
    return ids


def rebase_over_compaction(
    mine: Transaction, theirs: Transaction, ctx: ConflictContext | None
) -> Verdict:
    """Rewrite (compaction) moves rows to new fragments without changing them: only a
    fragment this transaction changed (or, a merge, matched rows of) is affected, and
    its changes and matched rows follow the rows to their new addresses (see
    :mod:`s3ddb.commit.fragment_reuse`)."""
    op = mine.operation
    assert isinstance(op, (Delete, Update))
    rewritten = _rewritten_fragments(theirs.operation)
    if rewritten is None:
        return Verdict(_R, f"{theirs.kind} is not understood by this version")
    overlap = _touched_by(op) & rewritten
    if not overlap:
        return Verdict(_C, "theirs rewrote no fragment this transaction changed or matched")
    # The rows recorded move to their new addresses; a fragment changed without its
    # rows recorded (built by hand) would lose its change. One removed whole moves all.
    unknown = _unrecorded(op, [f.id for f in op.updated_fragments if f.id in overlap], ())
    if unknown is not None:
        return unknown
    if ctx is None or not isinstance(theirs.operation, Rewrite):
        return Verdict(_R, f"fragments {sorted(overlap)} were rewritten concurrently")
    return carry_over_rewrite(mine, theirs.operation, ctx, overlap)


def rebase_rewrite(mine: Transaction, theirs: Transaction, ctx: ConflictContext | None) -> Verdict:
    """A compaction still applies if nobody changed the fragments it compacts; rows
    deleted there meanwhile are deleted in its new fragments too. Changed data files
    (or another compaction of them) make its copies stale."""
    if ctx is None:
        return Verdict(_R, "the fragments both touched cannot be compared without the manifests")
    return carry_deletes_into_rewrite(mine, theirs, ctx)
