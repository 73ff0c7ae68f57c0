"""Schema-changing operations: Merge (columns added or rewritten) and Project (schema
only).

A **Merge** carries the dataset's complete fragment list, each fragment with the data
files it gained (new columns, or a column rewritten under a new field id by a cast),
and the new schema. A **Project** carries only the new schema: columns dropped,
renamed or made (non-)nullable; no data file changes, and files keep holding the ids
of dropped fields, which readers skip because the schema no longer names them.

Field ids are never reused: a new field's id is above every id the schema or any
data file of the version holds (:func:`next_field_id`), so a file written before a
drop can never be mistaken for a column added later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from s3ddb.errors import InvalidInputError
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.schema import DatasetSchema
from s3ddb.operations.operation import Changes, Operation

__all__ = ["Merge", "Project", "next_field_id"]


def next_field_id(manifest: Manifest) -> int:
    """The first field id no field of ``manifest``'s schema and no data file of its
    fragments uses."""
    highest = manifest.schema.max_field_id
    for fragment in manifest.fragments:
        for data_file in fragment.files:
            highest = max(highest, *data_file.fields) if data_file.fields else highest
    return highest + 1


@dataclass(frozen=True)
class Merge(Operation):
    """Add (or rewrite) columns: every fragment, with its new data files, and the
    new schema.

    Attributes:
        fragments: the complete fragment list of the read version, in order, each
            with its data files old and new (ids are final).
        schema: the schema after the change.
        added_files: paths (relative to the dataset root) of the data files this
            operation wrote (in memory only: deleted if the commit fails).
    """

    fragments: tuple[FragmentMetadata, ...]
    schema: DatasetSchema
    added_files: tuple[str, ...] = field(default=(), compare=False)
    kind: ClassVar[str] = "Merge"
    pb_field: ClassVar[str] = "merge"
    changes: ClassVar[Changes] = Changes.SCHEMA
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "fragments", tuple(self.fragments))
        object.__setattr__(self, "added_files", tuple(self.added_files))
        if not isinstance(self.schema, DatasetSchema):
            raise InvalidInputError("Merge.schema must be a DatasetSchema")
        if not self.schema.arrow.names:
            raise InvalidInputError("Merge.schema must have at least one column")
        ids = [f.id for f in self.fragments]
        if len(ids) != len(set(ids)):
            raise InvalidInputError(f"Merge lists a fragment more than once: {sorted(ids)}")

    def to_pb(self) -> tpb.Merge:
        return tpb.Merge(fragments=[f.to_pb() for f in self.fragments], schema=self.schema.to_pb())

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Merge:
        body = message.merge
        return cls(
            tuple(FragmentMetadata.from_pb(f) for f in body.fragments),
            DatasetSchema.from_pb(body.schema),
        )

    def written_paths(self) -> tuple[str, ...]:
        return self.added_files


@dataclass(frozen=True)
class Project(Operation):
    """Change the schema only (drop, rename, nullability); data files are untouched."""

    schema: DatasetSchema
    kind: ClassVar[str] = "Project"
    pb_field: ClassVar[str] = "project"
    changes: ClassVar[Changes] = Changes.SCHEMA
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.schema, DatasetSchema):
            raise InvalidInputError("Project.schema must be a DatasetSchema")
        if not self.schema.arrow.names:
            raise InvalidInputError("Project.schema must keep at least one column")

    def to_pb(self) -> tpb.Project:
        return tpb.Project(schema=self.schema.to_pb())

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Project:
        return cls(DatasetSchema.from_pb(message.project.schema))
