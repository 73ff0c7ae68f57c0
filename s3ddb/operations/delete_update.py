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

from s3ddb.errors import InvalidInputError
from s3ddb.format import layout
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.deletion import deletion_path
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.operations.operation import Changes, Operation

__all__ = [
    "TOMBSTONE_FIELD_ID",
    "Delete",
    "KeyExistenceFilter",
    "RowChangePlan",
    "Update",
    "UpdateMode",
    "check_fragments_listed_once",
]

#: Field id written into a data file's field list for a column that a later data file
#: of the same fragment replaced (REWRITE_COLUMNS): readers skip it.
TOMBSTONE_FIELD_ID = -2


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


def check_fragments_listed_once(what: str, fragments: Iterable[FragmentMetadata]) -> None:
    """Raises:
    InvalidInputError: a fragment id appears twice in ``fragments``.
    """
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


# --- what the planner knew ------------------------------------------------------------


@dataclass(frozen=True)
class RowChangePlan:
    """What the planner of a Delete or Update knew beyond the rows it changed: kept in
    memory beside the operation (never stored; a transaction read back has an empty
    plan) so that a rebase can re-apply the operation to rows a concurrent commit
    added or changed (:mod:`s3ddb.commit.rebase`).

    Attributes:
        predicate_expr: the compiled predicate or where-clause (None: parse
            ``predicate`` again when needed).
        value_exprs: the compiled ``{column: expression}`` of an update: a rebase
            applies them to rows a concurrent commit added that ``where`` matches.
        merge_keys: key column names (merge_insert only).
        source_key_hashes: hashes of every source key (merge_insert only): a
            concurrent write of any of them changes what the merge should do.
        source_key_bounds: instead of the hashes, where the source's keys were
            never gathered in one process (Spark's merge): ``(column, min, max)`` of
            each key column; a concurrent write of a key within every bound may be
            one of them.
        deletes_unmatched: the merge deletes target rows the source lacks.
        matched_rows: target rows the merge matched, updated or not: a concurrent
            delete or change of one makes its decision stale.
    """

    predicate_expr: Any = None
    value_exprs: Mapping[str, Any] = field(default_factory=dict)
    merge_keys: tuple[str, ...] = ()
    source_key_hashes: frozenset[int] = frozenset()
    source_key_bounds: tuple[tuple[str, Any, Any], ...] = ()
    deletes_unmatched: bool = False
    matched_rows: Mapping[int, BitMap] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "merge_keys", tuple(self.merge_keys))
        object.__setattr__(self, "source_key_hashes", frozenset(self.source_key_hashes))
        object.__setattr__(self, "source_key_bounds", tuple(map(tuple, self.source_key_bounds)))
        object.__setattr__(self, "matched_rows", _frozen_rows(self.matched_rows))


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
        plan: what its planner knew (in memory only; see :class:`RowChangePlan`).
    """

    updated_fragments: tuple[FragmentMetadata, ...] = ()
    deleted_fragment_ids: tuple[int, ...] = ()
    predicate: str = ""
    affected_rows: Mapping[int, BitMap] = field(default_factory=dict)
    plan: RowChangePlan = field(default_factory=RowChangePlan, compare=False, repr=False)
    kind: ClassVar[str] = "Delete"
    pb_field: ClassVar[str] = "delete"
    changes: ClassVar[Changes] = Changes.ROWS
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "updated_fragments", tuple(self.updated_fragments))
        object.__setattr__(self, "deleted_fragment_ids", tuple(self.deleted_fragment_ids))
        object.__setattr__(self, "affected_rows", _frozen_rows(self.affected_rows))
        # An empty Delete is valid: a rebase finds every row it meant to delete gone.
        check_fragments_listed_once("Delete.updated_fragments", self.updated_fragments)
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

    def add_transaction_fields(self, message: tpb.Transaction) -> None:
        _affected_to_pb(self.affected_rows, message)

    def written_paths(self) -> tuple[str, ...]:
        return tuple(deletion_path(f) for f in self.updated_fragments)

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Delete:
        body = message.delete
        return cls(
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
        plan: what its planner knew (in memory only; see :class:`RowChangePlan`).
    """

    removed_fragment_ids: tuple[int, ...] = ()
    updated_fragments: tuple[FragmentMetadata, ...] = ()
    new_fragments: tuple[FragmentMetadata, ...] = ()
    fields_modified: tuple[int, ...] = ()
    mode: UpdateMode = UpdateMode.REWRITE_ROWS
    inserted_keys: KeyExistenceFilter | None = None
    predicate: str = ""
    affected_rows: Mapping[int, BitMap] = field(default_factory=dict)
    plan: RowChangePlan = field(default_factory=RowChangePlan, compare=False, repr=False)
    kind: ClassVar[str] = "Update"
    pb_field: ClassVar[str] = "update"
    changes: ClassVar[Changes] = Changes.APPENDS
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for name in ("removed_fragment_ids", "updated_fragments", "new_fragments"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "fields_modified", tuple(self.fields_modified))
        object.__setattr__(self, "affected_rows", _frozen_rows(self.affected_rows))
        if not isinstance(self.mode, UpdateMode):
            raise InvalidInputError(f"Update.mode must be an UpdateMode, got {self.mode!r}")
        check_fragments_listed_once("Update.updated_fragments", self.updated_fragments)
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
        """Whether a merge_insert planned (or, read back, committed) this update."""
        return bool(self.plan.merge_keys) or self.inserted_keys is not None

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

    def add_transaction_fields(self, message: tpb.Transaction) -> None:
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

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Update:
        body = message.update
        return cls(
            tuple(body.removed_fragment_ids),
            tuple(FragmentMetadata.from_pb(f) for f in body.updated_fragments),
            tuple(FragmentMetadata.from_pb(f) for f in body.new_fragments),
            tuple(body.fields_modified),
            UpdateMode(body.update_mode),
            KeyExistenceFilter.from_pb(body.inserted_rows)
            if body.HasField("inserted_rows")
            else None,
            body.predicate,
            _affected_from_pb(message),
        )
