"""Operations that change rows of existing fragments: Delete and Update.

Both record, besides the fragments they change, the rows they touched (*affected
rows*: per fragment, a Roaring bitmap of row offsets). The conflict resolver compares
them with the rows a concurrent transaction touched, so that two deletes of different
rows of one fragment both land while an update of a row that was concurrently deleted
does not.

merge_insert commits as an :class:`Update` that also carries a
:class:`KeyExistenceFilter` of the keys it wrote, so that two upserts of one key never
both land.

Fragments in these operations carry their final ids (they exist in the read version),
except ``Update.new_fragments``, whose ids are assigned when the manifest is built.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pyroaring import BitMap

from s3ddb.commit.transaction import Operation, register_operation_decoder
from s3ddb.errors import InvalidInputError
from s3ddb.format import layout
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.deletion import deletion_path
from s3ddb.format.fragment import FragmentMetadata, data_file_paths

#: Field id written into a data file's field list for a column that a later data file
#: of the same fragment replaced (REWRITE_COLUMNS): readers skip it.
TOMBSTONE_FIELD_ID = -2

AffectedRows = Mapping[int, BitMap]


def _frozen_rows(rows: Mapping[int, BitMap] | None) -> dict[int, BitMap]:
    out: dict[int, BitMap] = {}
    for fragment_id, bitmap in (rows or {}).items():
        if not isinstance(bitmap, BitMap):
            bitmap = BitMap(bitmap)
        if len(bitmap):
            out[int(fragment_id)] = BitMap(bitmap)
    return out


def _affected_to_pb(rows: Mapping[int, BitMap], message: tpb.Transaction) -> None:
    for fragment_id in sorted(rows):
        message.affected_rows.add(fragment_id=fragment_id, rows=rows[fragment_id].serialize())


def _affected_from_pb(message: tpb.Transaction) -> dict[int, BitMap]:
    return {r.fragment_id: BitMap.deserialize(r.rows) for r in message.affected_rows}


def _check_fragments(what: str, fragments: Iterable[FragmentMetadata]) -> None:
    ids = [f.id for f in fragments]
    if len(ids) != len(set(ids)):
        raise InvalidInputError(f"{what} lists a fragment more than once: {sorted(ids)}")


# --- key-existence filters -------------------------------------------------------------


@dataclass(frozen=True)
class KeyExistenceFilter:
    """The keys (hashed) of the rows a merge_insert wrote, and the fields they are of.

    Hashes have no false negatives: two transactions that wrote one key always
    intersect. A false positive (a 64-bit collision) only turns a compatible commit
    into a retry.
    """

    field_ids: tuple[int, ...]
    hashes: frozenset[int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "field_ids", tuple(self.field_ids))
        object.__setattr__(self, "hashes", frozenset(self.hashes))
        if not self.field_ids:
            raise InvalidInputError("a key-existence filter needs at least one key field")

    def intersects(self, hashes: Iterable[int]) -> bool:
        return not self.hashes.isdisjoint(hashes)

    def to_pb(self) -> tpb.KeyExistenceFilter:
        return tpb.KeyExistenceFilter(
            field_ids=list(self.field_ids),
            key_hashes=[h.to_bytes(8, "big") for h in sorted(self.hashes)],
        )

    @classmethod
    def from_pb(cls, message: tpb.KeyExistenceFilter) -> KeyExistenceFilter | None:
        if not message.field_ids:
            return None
        return cls(
            tuple(message.field_ids),
            frozenset(int.from_bytes(h, "big") for h in message.key_hashes),
        )


# --- Delete ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delete(Operation):
    """Delete rows: new deletion files for some fragments, others removed whole.

    Attributes:
        updated_fragments: fragments of the read version with a new deletion file
            (every row deleted so far in the fragment, old and new).
        deleted_fragment_ids: fragments all of whose rows are now deleted.
        predicate: the predicate text (for history and for re-evaluation on rebase).
        affected_rows: the rows this delete newly deleted, per fragment id.
        predicate_expr: the compiled predicate (in memory only; not stored).
    """

    updated_fragments: tuple[FragmentMetadata, ...] = ()
    deleted_fragment_ids: tuple[int, ...] = ()
    predicate: str = ""
    affected_rows: Mapping[int, BitMap] = field(default_factory=dict)
    predicate_expr: Any = field(default=None, compare=False, repr=False)
    kind: ClassVar[str] = "Delete"
    pb_field: ClassVar[str] = "delete"

    def __post_init__(self) -> None:
        object.__setattr__(self, "updated_fragments", tuple(self.updated_fragments))
        object.__setattr__(self, "deleted_fragment_ids", tuple(self.deleted_fragment_ids))
        object.__setattr__(self, "affected_rows", _frozen_rows(self.affected_rows))
        # An empty Delete is valid: a rebase finds every row it meant to delete gone.
        _check_fragments("Delete.updated_fragments", self.updated_fragments)
        overlap = {f.id for f in self.updated_fragments} & set(self.deleted_fragment_ids)
        if overlap:
            raise InvalidInputError(f"fragments {sorted(overlap)} are both updated and deleted")
        for fragment in self.updated_fragments:
            if fragment.deletion_file is None:
                raise InvalidInputError(
                    f"Delete.updated_fragments: fragment {fragment.id} has no deletion file"
                )

    @property
    def num_deleted_rows(self) -> int:
        return sum(len(rows) for rows in self.affected_rows.values())

    def to_pb(self) -> tpb.Delete:
        return tpb.Delete(
            updated_fragments=[f.to_pb() for f in self.updated_fragments],
            deleted_fragment_ids=list(self.deleted_fragment_ids),
            predicate=self.predicate,
        )

    def extra_pb(self, message: tpb.Transaction) -> None:
        _affected_to_pb(self.affected_rows, message)

    def written_paths(self) -> tuple[str, ...]:
        return tuple(deletion_path(f) for f in self.updated_fragments)


def _decode_delete(message: tpb.Transaction) -> Delete:
    body = message.delete
    return Delete(
        tuple(FragmentMetadata.from_pb(f) for f in body.updated_fragments),
        tuple(body.deleted_fragment_ids),
        body.predicate,
        _affected_from_pb(message),
    )


# --- Update ------------------------------------------------------------------------------


class UpdateMode(enum.Enum):
    """How an Update stores changed rows.

    REWRITE_ROWS deletes the old rows (deletion files) and writes the new ones, whole,
    into new fragments. REWRITE_COLUMNS writes, for each changed fragment, a new data
    file holding only the changed columns for all its rows; row positions are kept.
    """

    REWRITE_ROWS = 0
    REWRITE_COLUMNS = 1


@dataclass(frozen=True)
class Update(Operation):
    """Change rows (``update``) or upsert them (``merge_insert``).

    Attributes:
        removed_fragment_ids: fragments all of whose rows were removed.
        updated_fragments: changed fragments of the read version: with a new deletion
            file (REWRITE_ROWS) or new data files (REWRITE_COLUMNS).
        new_fragments: fragments holding rewritten and inserted rows.
        fields_modified: ids of the fields whose values changed (REWRITE_COLUMNS).
        mode: see :class:`UpdateMode`.
        inserted_keys: keys of every row written (merge_insert only).
        predicate: the where-clause text, or a description of the merge.
        affected_rows: rows removed (REWRITE_ROWS) or changed in place
            (REWRITE_COLUMNS), per fragment id.
        predicate_expr: the compiled where-clause (in memory only).
        merge_keys: key column names (merge_insert only, in memory).
        source_key_hashes: hashes of every source key (merge_insert only, in memory):
            a concurrent write of any of them changes what this merge should do.
        deletes_unmatched: the merge deletes target rows the source lacks.
        matched_rows: target rows the merge matched, updated or not (in memory): a
            concurrent delete or change of one makes its decision stale.
        value_exprs: the compiled ``{column: expression}`` of an update (in memory):
            a rebase applies them to rows a concurrent commit added that ``where``
            matches.
    """

    removed_fragment_ids: tuple[int, ...] = ()
    updated_fragments: tuple[FragmentMetadata, ...] = ()
    new_fragments: tuple[FragmentMetadata, ...] = ()
    fields_modified: tuple[int, ...] = ()
    mode: UpdateMode = UpdateMode.REWRITE_ROWS
    inserted_keys: KeyExistenceFilter | None = None
    predicate: str = ""
    affected_rows: Mapping[int, BitMap] = field(default_factory=dict)
    predicate_expr: Any = field(default=None, compare=False, repr=False)
    merge_keys: tuple[str, ...] = field(default=(), compare=False)
    source_key_hashes: frozenset[int] = field(default=frozenset(), compare=False, repr=False)
    deletes_unmatched: bool = field(default=False, compare=False)
    matched_rows: Mapping[int, BitMap] = field(default_factory=dict, compare=False, repr=False)
    value_exprs: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind: ClassVar[str] = "Update"
    pb_field: ClassVar[str] = "update"

    def __post_init__(self) -> None:
        for name in ("removed_fragment_ids", "updated_fragments", "new_fragments"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "fields_modified", tuple(self.fields_modified))
        object.__setattr__(self, "affected_rows", _frozen_rows(self.affected_rows))
        object.__setattr__(self, "merge_keys", tuple(self.merge_keys))
        object.__setattr__(self, "source_key_hashes", frozenset(self.source_key_hashes))
        object.__setattr__(self, "matched_rows", _frozen_rows(self.matched_rows))
        if not isinstance(self.mode, UpdateMode):
            raise InvalidInputError(f"Update.mode must be an UpdateMode, got {self.mode!r}")
        _check_fragments("Update.updated_fragments", self.updated_fragments)
        if not (self.removed_fragment_ids or self.updated_fragments or self.new_fragments):
            raise InvalidInputError("Update changes nothing")
        overlap = {f.id for f in self.updated_fragments} & set(self.removed_fragment_ids)
        if overlap:
            raise InvalidInputError(f"fragments {sorted(overlap)} are both updated and removed")
        if self.mode is UpdateMode.REWRITE_COLUMNS:
            if not self.fields_modified:
                raise InvalidInputError("a REWRITE_COLUMNS update must list fields_modified")
            if self.new_fragments or self.removed_fragment_ids:
                raise InvalidInputError(
                    "a REWRITE_COLUMNS update changes fragments in place; it adds or removes none"
                )
        else:
            for fragment in self.updated_fragments:
                if fragment.deletion_file is None:
                    raise InvalidInputError(
                        f"Update.updated_fragments: fragment {fragment.id} has no deletion "
                        "file (REWRITE_ROWS changes fragments only by deleting rows)"
                    )

    @property
    def is_merge(self) -> bool:
        return bool(self.merge_keys) or self.inserted_keys is not None

    def to_pb(self) -> tpb.Update:
        message = tpb.Update(
            removed_fragment_ids=list(self.removed_fragment_ids),
            updated_fragments=[f.to_pb() for f in self.updated_fragments],
            new_fragments=[f.to_pb() for f in self.new_fragments],
            fields_modified=list(self.fields_modified),
            update_mode=self.mode.value,  # type: ignore[arg-type]
            predicate=self.predicate,
        )
        if self.inserted_keys is not None:
            message.inserted_rows.CopyFrom(self.inserted_keys.to_pb())
        return message

    def extra_pb(self, message: tpb.Transaction) -> None:
        _affected_to_pb(self.affected_rows, message)

    def written_paths(self) -> tuple[str, ...]:
        paths = list(data_file_paths(self.new_fragments))
        if self.mode is UpdateMode.REWRITE_ROWS:
            paths += [deletion_path(f) for f in self.updated_fragments]
        else:
            modified = set(self.fields_modified)
            paths += [
                layout.data_file_path(d.path)
                for f in self.updated_fragments
                for d in f.files
                if d.fields and set(d.fields) <= modified
            ]
        return tuple(paths)


def _decode_update(message: tpb.Transaction) -> Update:
    body = message.update
    return Update(
        tuple(body.removed_fragment_ids),
        tuple(FragmentMetadata.from_pb(f) for f in body.updated_fragments),
        tuple(FragmentMetadata.from_pb(f) for f in body.new_fragments),
        tuple(body.fields_modified),
        UpdateMode(body.update_mode),
        KeyExistenceFilter.from_pb(body.inserted_rows) if body.HasField("inserted_rows") else None,
        body.predicate,
        _affected_from_pb(message),
    )


register_operation_decoder("delete", _decode_delete)
register_operation_decoder("update", _decode_update)


# --- Rewrite (compaction) and ReserveFragments ---------------------------------------------


@dataclass(frozen=True)
class RewriteGroup:
    """Fragments rewritten together: the visible rows of ``old_fragments``, in order,
    are the rows of ``new_fragments``.

    ``old_fragments`` are as the dataset holds them when the rewrite commits, so a
    commit can tell whether anyone changed them since.

    ``copied_rows`` is the fragment-reuse mapping: per old fragment (in order), the
    row offsets the rewrite copied. Copied rows are numbered in that order across
    ``new_fragments``, so each (old fragment, offset) has one (new fragment, offset).
    With it, and new fragments whose ids ReserveFragments reserved, a delete committed
    meanwhile is carried over to the new fragments (as deletion files) instead of
    forcing the compaction, or the delete, to run again. A fragment deleted entirely
    since the copy stays in ``copied_rows`` but leaves ``old_fragments``.
    Without it (older writers), new fragments get their ids when committed.
    """

    old_fragments: tuple[FragmentMetadata, ...]
    new_fragments: tuple[FragmentMetadata, ...]
    copied_rows: tuple[tuple[int, BitMap], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "old_fragments", tuple(self.old_fragments))
        object.__setattr__(self, "new_fragments", tuple(self.new_fragments))
        copied = tuple((int(fid), BitMap(rows)) for fid, rows in self.copied_rows)
        object.__setattr__(self, "copied_rows", copied)
        if not self.old_fragments:
            raise InvalidInputError("a rewrite group needs at least one old fragment")
        visible = sum(f.num_rows for f in self.old_fragments)
        written = sum(f.num_rows for f in self.new_fragments)
        if visible != written:
            raise InvalidInputError(
                f"a rewrite group must keep every row: its old fragments have {visible} "
                f"visible rows, its new fragments {written}"
            )
        if copied:
            ids = [fid for fid, _rows in copied]
            if len(set(ids)) != len(ids) or not {f.id for f in self.old_fragments} <= set(ids):
                raise InvalidInputError(
                    "a rewrite group's copied rows must name each old fragment once"
                )
            if sum(len(rows) for _fid, rows in copied) != sum(
                f.physical_rows for f in self.new_fragments
            ):
                raise InvalidInputError(
                    "a rewrite group's copied rows must number its new fragments' rows"
                )
            if any(f.id == 0 for f in self.new_fragments):
                raise InvalidInputError(
                    "a rewrite group with copied rows needs fragment ids reserved by "
                    "ReserveFragments"
                )

    @property
    def has_mapping(self) -> bool:
        """Whether rows can be followed from old to new fragments (see class doc)."""
        return bool(self.copied_rows)


@dataclass(frozen=True)
class Rewrite(Operation):
    """Replace groups of fragments by new ones holding the same rows (compaction)."""

    groups: tuple[RewriteGroup, ...]
    kind: ClassVar[str] = "Rewrite"
    pb_field: ClassVar[str] = "rewrite"

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        if not self.groups:
            raise InvalidInputError("Rewrite needs at least one group")
        _check_fragments("Rewrite", self.old_fragments())

    def old_fragments(self) -> tuple[FragmentMetadata, ...]:
        return tuple(f for g in self.groups for f in g.old_fragments)

    def to_pb(self) -> tpb.Rewrite:
        return tpb.Rewrite(
            groups=[
                tpb.RewriteGroup(
                    old_fragments=[f.to_pb() for f in g.old_fragments],
                    new_fragments=[f.to_pb() for f in g.new_fragments],
                    copied_rows=[
                        tpb.FragmentRows(fragment_id=fid, rows=rows.serialize())
                        for fid, rows in g.copied_rows
                    ],
                )
                for g in self.groups
            ]
        )

    def written_paths(self) -> tuple[str, ...]:
        new = [f for g in self.groups for f in g.new_fragments]
        return data_file_paths(new) + tuple(
            deletion_path(f) for f in new if f.deletion_file is not None
        )


def _decode_rewrite(message: tpb.Transaction) -> Rewrite:
    return Rewrite(
        tuple(
            RewriteGroup(
                tuple(FragmentMetadata.from_pb(f) for f in g.old_fragments),
                tuple(FragmentMetadata.from_pb(f) for f in g.new_fragments),
                tuple((r.fragment_id, BitMap.deserialize(r.rows)) for r in g.copied_rows),
            )
            for g in message.rewrite.groups
        )
    )


register_operation_decoder("rewrite", _decode_rewrite)


@dataclass(frozen=True)
class ReserveFragments(Operation):
    """Reserve ``num_fragments`` fragment ids (the highest ones of the version it
    commits), so that a later Rewrite can name its new fragments before it commits."""

    num_fragments: int
    kind: ClassVar[str] = "ReserveFragments"
    pb_field: ClassVar[str] = "reserve_fragments"

    def __post_init__(self) -> None:
        n = self.num_fragments
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n < 2**32:
            raise InvalidInputError(f"ReserveFragments needs 1 to 2**32-1 fragments, got {n!r}")

    def to_pb(self) -> tpb.ReserveFragments:
        return tpb.ReserveFragments(num_fragments=self.num_fragments)


register_operation_decoder(
    "reserve_fragments",
    lambda message: ReserveFragments(message.reserve_fragments.num_fragments),
)
