"""CreateIndex: add (or replace) indices, as a transaction; its builder and conflict rules.

The index files are written before the commit (they are the operation's written
paths, deleted if the commit definitely fails). Committing only adds the index
descriptions to the manifest, so a CreateIndex rebases over anything that leaves the
indexed data of the fragments it covers as they were: appends (new fragments are not
covered and are scanned), deletes (applied at read time), compactions (the builder
drops fragments that vanished) and changes to other columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from s3ddb.commit.build import register_builder
from s3ddb.commit.conflicts import Outcome, Verdict, fixed, register_rule
from s3ddb.commit.row_operations import Update, UpdateMode
from s3ddb.commit.transaction import (
    OPERATION_KINDS,
    OpaqueOperation,
    Operation,
    Transaction,
    register_operation_decoder,
)
from s3ddb.errors import CommitConflictError, InvalidInputError
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.index import IndexMetadata
from s3ddb.format.manifest import Manifest

_C, _R, _I = Outcome.COMPATIBLE, Outcome.RETRYABLE, Outcome.INCOMPATIBLE


@dataclass(frozen=True)
class CreateIndex(Operation):
    """Add ``new_indices`` and remove ``removed_indices`` (a replaced index of the same
    name is removed and added in one commit).

    Raises:
        InvalidInputError: no index to add, two new indices of one name, or an index
            both added and removed.
    """

    new_indices: tuple[IndexMetadata, ...]
    removed_indices: tuple[IndexMetadata, ...] = ()
    kind: ClassVar[str] = "CreateIndex"
    pb_field: ClassVar[str] = "create_index"

    def __post_init__(self) -> None:
        object.__setattr__(self, "new_indices", tuple(self.new_indices))
        object.__setattr__(self, "removed_indices", tuple(self.removed_indices))
        if not self.new_indices:
            raise InvalidInputError("CreateIndex needs at least one new index")
        for index in (*self.new_indices, *self.removed_indices):
            if not isinstance(index, IndexMetadata):
                raise InvalidInputError(f"not an IndexMetadata: {index!r}")
        for index in self.new_indices:
            if not index.name or not index.fields:
                raise InvalidInputError(f"a new index needs a name and fields: {index!r}")
        names = [i.name for i in self.new_indices]
        if len(names) != len(set(names)):
            raise InvalidInputError(f"CreateIndex adds two indices of one name: {names}")
        both = {i.uuid for i in self.new_indices} & {i.uuid for i in self.removed_indices}
        if both:
            raise InvalidInputError(f"CreateIndex adds and removes index {sorted(both)}")

    def to_pb(self) -> tpb.CreateIndex:
        return tpb.CreateIndex(
            new_indices=[i.to_pb() for i in self.new_indices],
            removed_indices=[i.to_pb() for i in self.removed_indices],
        )

    def written_paths(self) -> tuple[str, ...]:
        return tuple(p for i in self.new_indices for p in i.file_paths)

    @property
    def field_ids(self) -> set[int]:
        return {f for i in self.new_indices for f in i.fields}


def _decode(message: Any) -> CreateIndex:
    body = message.create_index
    return CreateIndex(
        tuple(IndexMetadata.from_pb(i) for i in body.new_indices),
        tuple(IndexMetadata.from_pb(i) for i in body.removed_indices),
    )


def _create_index(base: Manifest | None, op: Operation, version: int, load: Any) -> Manifest:
    """Raises:
    InvalidInputError: no dataset.
    CommitConflictError: an indexed field is gone, or another index took a new
        index's name.
    """
    assert isinstance(op, CreateIndex)
    if base is None:
        raise InvalidInputError("CreateIndex needs an existing dataset")
    known = {i for _p, i in base.schema.ids}
    removed = {i.uuid for i in op.removed_indices}
    kept = [i for i in base.indices if i.uuid not in removed]
    present = {f.id for f in base.fragments}
    for index in op.new_indices:
        missing = set(index.fields) - known
        if missing:
            raise CommitConflictError(
                f"index {index.name!r}: fields {sorted(missing)} are not in version {base.version}"
            )
        if any(k.name == index.name for k in kept):
            raise CommitConflictError(
                f"an index named {index.name!r} exists in version {base.version}"
            )
    new = [i.covering(present) for i in op.new_indices]
    return base.evolve(indices=tuple(kept + new))


def _fields_rewritten(op: Any) -> set[int] | None:
    """Field ids whose column files an Update or DataReplacement replaced (None: not
    understood)."""
    from s3ddb.commit.data_replacement import DataReplacement

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


def _index_vs_rewritten_columns(mine: Transaction, theirs: Transaction, ctx: Any) -> Verdict:
    """My index read the column's old values if theirs replaced its files."""
    op = mine.operation
    assert isinstance(op, CreateIndex)
    rewritten = _fields_rewritten(theirs.operation)
    if rewritten is None:
        return Verdict(_R, f"{theirs.kind} is not understood by this version")
    if rewritten & op.field_ids:
        return Verdict(_R, "the indexed column was rewritten: the index holds old values")
    return Verdict(_C, "the indexed column was not rewritten")


def _index_vs_index(mine: Transaction, theirs: Transaction, ctx: Any) -> Verdict:
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


def register() -> None:
    """Register CreateIndex's decoder, builder and rules (as mine)."""
    register_operation_decoder("create_index", _decode)
    register_builder(CreateIndex, _create_index)
    for theirs in OPERATION_KINDS:
        register_rule("CreateIndex", theirs, fixed(_C, "leaves the indexed data as it was"))
    register_rule("CreateIndex", "Overwrite", fixed(_R, "the dataset was overwritten"))
    register_rule("CreateIndex", "Restore", fixed(_R, "the dataset was restored"))
    register_rule("CreateIndex", "Merge", fixed(_R, "columns were added; fragments rewritten"))
    register_rule("CreateIndex", "Project", fixed(_R, "the schema changed"))
    register_rule("CreateIndex", "Clone", fixed(_I, "clone is only valid as a first commit"))
    register_rule("CreateIndex", "Update", _index_vs_rewritten_columns)
    register_rule("CreateIndex", "DataReplacement", _index_vs_rewritten_columns)
    register_rule("CreateIndex", "CreateIndex", _index_vs_index)


register()
