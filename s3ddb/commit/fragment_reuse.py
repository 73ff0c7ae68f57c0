"""Carrying row changes across a compaction through its fragment-reuse mapping.

A compaction (Rewrite) copies the visible rows of some fragments, in order, into new
fragments whose ids it reserved beforehand (ReserveFragments), and records which
offsets it copied (:attr:`RewriteGroup.copied_rows`). So every copied row has a known
new address, and a delete that races a compaction need not be thrown away:

* a Delete or Update committed *after* the compaction, that changed rows of fragments
  the compaction replaced, moves its deletions to the rows' new addresses;
* a compaction committed *after* a Delete or Update of fragments it copied carries
  the rows deleted meanwhile over to its new fragments (as deletion files).

Both are what running the two operations one after the other would give: a
compaction moves rows without changing them. A change that rewrote data files of a
copied fragment (an update of columns in place, another compaction) still makes the
copy stale: those cases stay retryable.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, replace

import numpy as np
from pyroaring import BitMap

from s3ddb.commit.verdicts import ConflictContext, Outcome, Verdict
from s3ddb.format.deletion import deletion_path, read_deleted_rows, write_deletion_file
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.operations import Delete, Rewrite, RewriteGroup, Transaction, Update, UpdateMode

__all__ = [
    "GroupMapping",
    "apply_deletions",
    "carry_deletes_into_rewrite",
    "carry_over_rewrite",
    "mappings",
]

_C, _R = Outcome.COMPATIBLE, Outcome.RETRYABLE


@dataclass(frozen=True)
class GroupMapping:
    """Where the copied rows of one rewrite group went."""

    copied: dict[int, np.ndarray]  # old fragment id -> sorted copied offsets
    start: dict[int, int]  # old fragment id -> position of its first copied row
    new_ids: tuple[int, ...]
    new_starts: tuple[int, ...]  # position of each new fragment's first row

    @classmethod
    def of(cls, group: RewriteGroup) -> GroupMapping | None:
        """The mapping of ``group``, or None if it records none (older writers)."""
        if not group.has_mapping:
            return None
        copied, start, position = {}, {}, 0
        for fid, rows in group.copied_rows:
            copied[fid] = np.asarray(rows.to_array(), dtype=np.int64)
            start[fid] = position
            position += len(rows)
        new_starts, position = [], 0
        for fragment in group.new_fragments:
            new_starts.append(position)
            position += fragment.physical_rows
        return cls(copied, start, tuple(f.id for f in group.new_fragments), tuple(new_starts))

    def map_rows(self, old_id: int, rows: BitMap) -> tuple[dict[int, BitMap], BitMap]:
        """``rows`` of old fragment ``old_id`` at their new addresses, and the rows that
        were not copied (deleted before the compaction read the fragment)."""
        copied = self.copied[old_id]
        wanted = np.asarray(rows.to_array(), dtype=np.int64)
        rank = np.searchsorted(copied, wanted)
        found = (rank < len(copied)) & (copied[np.minimum(rank, len(copied) - 1)] == wanted)
        out: dict[int, BitMap] = {}
        for position in (rank[found] + self.start[old_id]).tolist():
            index = bisect_right(self.new_starts, position) - 1
            new_id = self.new_ids[index]
            out.setdefault(new_id, BitMap()).add(position - self.new_starts[index])
        return out, BitMap(wanted[~found].tolist())

    def all_rows(self, old_id: int) -> BitMap:
        """Every row the compaction copied from ``old_id``."""
        return BitMap(self.copied[old_id].tolist())


def mappings(op: Rewrite) -> dict[int, GroupMapping] | None:
    """Old fragment id -> the mapping of its group; None if any group lacks one."""
    out: dict[int, GroupMapping] = {}
    for group in op.groups:
        mapping = GroupMapping.of(group)
        if mapping is None:
            return None
        for fid in mapping.copied:
            out[fid] = mapping
    return out


def carry_over_rewrite(
    mine: Transaction, theirs: Rewrite, ctx: ConflictContext, overlap: set[int]
) -> Verdict:
    """My Delete or Update (rewriting rows) changed rows of fragments ``overlap`` (or,
    a merge, matched rows there) that ``theirs`` compacted: move my changes, and the
    rows my merge matched, to the rows' new addresses.

    Retryable when theirs records no mapping, or my update rewrote columns in place
    (column files cannot follow rows into other fragments)."""
    op = mine.operation
    assert isinstance(op, (Delete, Update))
    by_old = mappings(theirs)
    if by_old is None or not overlap <= set(by_old):
        return Verdict(_R, f"fragments {sorted(overlap)} were rewritten concurrently")
    if isinstance(op, Update) and op.mode is UpdateMode.REWRITE_COLUMNS:
        return Verdict(
            _R, f"fragments {sorted(overlap)}, whose columns this update rewrote, were compacted"
        )
    whole = set(op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids)

    def moved(rows_by_fragment: dict[int, BitMap], strict: bool) -> dict[int, BitMap] | None:
        out = {fid: BitMap(r) for fid, r in rows_by_fragment.items() if fid not in overlap}
        for fid in overlap:
            rows = by_old[fid].all_rows(fid) if fid in whole else rows_by_fragment.get(fid)
            if not rows:
                continue
            mapped, lost = by_old[fid].map_rows(fid, rows)
            if lost and strict:
                return None
            for new_id, new_rows in mapped.items():
                out[new_id] = out.get(new_id, BitMap()) | new_rows
        return out

    # A deleted row that was not copied is already gone; an updated one means my
    # update read a row that no longer exists: re-run it.
    affected = moved(dict(op.affected_rows), strict=isinstance(op, Update))
    if affected is None:
        return Verdict(_R, "rows this update changed were deleted before the compaction")
    new_ids = {new_id for fid in overlap for new_id in by_old[fid].new_ids}
    updated = {f.id: f for f in op.updated_fragments if f.id not in overlap}
    removed = {fid for fid in whole if fid not in overlap}
    apply_deletions(ctx, affected, new_ids & set(affected), updated, removed)
    changes: dict[str, object] = {
        "updated_fragments": tuple(updated[i] for i in sorted(updated)),
        "affected_rows": affected,
    }
    if isinstance(op, Delete):
        changes["deleted_fragment_ids"] = tuple(sorted(removed))
    else:
        changes["removed_fragment_ids"] = tuple(sorted(removed))
        # The rows my merge matched (changed or not) move too: a later commit that
        # deletes or changes one of them must still be seen as touching my merge's
        # read. A matched row the compaction did not copy was deleted after my read
        # version, so my merge read a row that no longer exists: re-run it.
        matched = moved(dict(op.plan.matched_rows), strict=True)
        if matched is None:
            return Verdict(_R, "rows this merge matched were deleted before the compaction")
        changes["plan"] = replace(op.plan, matched_rows=matched)
    rebased = replace(op, **changes)  # type: ignore[arg-type]
    return Verdict(_C, "carried over to the compacted fragments", replace(mine, operation=rebased))


def apply_deletions(
    ctx: ConflictContext,
    affected: dict[int, BitMap],
    recompute: set[int],
    updated: dict[int, FragmentMetadata],
    removed: set[int],
) -> None:
    """Re-derive my deletion state of the fragments in ``recompute`` from ``ctx.after``:
    its deletion vector plus the rows I delete. Mutates the arguments."""
    after = ctx.after_fragments
    for fid in recompute:
        updated.pop(fid, None)
        removed.discard(fid)
        fragment = after[fid]
        already = read_deleted_rows(ctx.files, fragment)
        mine = affected.get(fid, BitMap()) - already
        if not mine:
            affected.pop(fid, None)
            continue
        affected[fid] = mine
        total = already | mine
        if len(total) >= fragment.physical_rows:
            removed.add(fid)
            continue
        deletion = write_deletion_file(ctx.store, fid, ctx.after.version, total)
        new = fragment.with_deletion_file(deletion)
        ctx.written.append(deletion_path(new))
        updated[fid] = new


def carry_deletes_into_rewrite(
    mine: Transaction, theirs: Transaction, ctx: ConflictContext
) -> Verdict:
    """My compaction lands after ``theirs`` deleted rows of fragments it copied: the
    deleted rows' copies are deleted in my new fragments too.

    Retryable when theirs changed data files of a copied fragment, or compacted one,
    or when my compaction records no mapping.
    """
    op = mine.operation
    assert isinstance(op, Rewrite)
    before, after = ctx.before_fragments, ctx.after_fragments
    changed = [f.id for f in op.old_fragments() if after.get(f.id) != before.get(f.id)]
    if not changed:
        return Verdict(_C, "theirs changed none of the fragments this compaction rewrites")
    by_old = mappings(op)
    if by_old is None or not isinstance(theirs.operation, (Delete, Update)):
        return Verdict(
            _R,
            f"fragments {sorted(changed)} that this compaction rewrites were changed concurrently",
        )
    deleted: dict[int, BitMap] = {}  # old fragment id -> rows deleted meanwhile
    for fid in changed:
        b, a = before[fid], after.get(fid)
        if a is not None and a.files != b.files:
            return Verdict(_R, f"columns of fragment {fid}, which this compaction copied, changed")
        earlier = read_deleted_rows(ctx.files, b)
        if a is None:  # deleted entirely: every row still visible before goes
            deleted[fid] = by_old[fid].all_rows(fid) - earlier
        else:
            deleted[fid] = read_deleted_rows(ctx.files, a) - earlier
    extra: dict[int, BitMap] = {}  # new fragment id -> rows to delete
    for fid, rows in deleted.items():
        mapped, _lost = by_old[fid].map_rows(fid, rows)
        for new_id, new_rows in mapped.items():
            extra[new_id] = extra.get(new_id, BitMap()) | new_rows
    groups = []
    for group in op.groups:
        old = tuple(after[f.id] for f in group.old_fragments if f.id in after)
        if not old:
            continue  # every row it compacted is deleted: nothing left to replace
        new = []
        for fragment in group.new_fragments:
            carried = extra.get(fragment.id)
            if carried:
                total = read_deleted_rows(ctx.files, fragment) | carried
                fragment = fragment.with_deletion_file(
                    write_deletion_file(ctx.store, fragment.id, ctx.after.version, total)
                )
                ctx.written.append(deletion_path(fragment))
            new.append(fragment)
        groups.append(replace(group, old_fragments=old, new_fragments=tuple(new)))
    if not groups:
        return Verdict(_R, "every row this compaction copied was deleted concurrently")
    rebased = replace(op, groups=tuple(groups))
    return Verdict(
        _C,
        "rows deleted concurrently are deleted in the compacted fragments too",
        replace(mine, operation=rebased),
    )
