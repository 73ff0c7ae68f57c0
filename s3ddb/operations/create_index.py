"""CreateIndex: add (or replace) indices, as a transaction.

The index files are written before the commit (they are the operation's written
paths, deleted if the commit definitely fails). Committing only adds the index
descriptions to the manifest, so a CreateIndex rebases over anything that leaves the
indexed data of the fragments it covers as they were: appends (new fragments are not
covered and are scanned), deletes (applied at read time), compactions (the builder
drops fragments that vanished) and changes to other columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from s3ddb.errors import InvalidInputError
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.index import IndexMetadata
from s3ddb.operations.operation import Changes, Operation

__all__ = ["CreateIndex"]


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
    changes: ClassVar[Changes] = Changes.NOTHING
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

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

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> CreateIndex:
        body = message.create_index
        return cls(
            tuple(IndexMetadata.from_pb(i) for i in body.new_indices),
            tuple(IndexMetadata.from_pb(i) for i in body.removed_indices),
        )

    def written_paths(self) -> tuple[str, ...]:
        return tuple(p for i in self.new_indices for p in i.file_paths)

    @property
    def field_ids(self) -> set[int]:
        return {f for i in self.new_indices for f in i.fields}
