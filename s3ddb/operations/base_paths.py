"""Operations on base paths: Clone (a dataset's first commit, made from another
dataset's version) and UpdateBases (declare more base paths).

Their builders are in :mod:`s3ddb.commit.builders`, their conflict rules in the
table of :mod:`s3ddb.commit.conflicts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from s3ddb.errors import InvalidInputError
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.bases import BasePath, check_base_paths
from s3ddb.format.manifest import Manifest
from s3ddb.operations.operation import Changes, Operation

__all__ = ["Clone", "UpdateBases"]


@dataclass(frozen=True)
class Clone(Operation):
    """Create a dataset (its version 1) from version ``ref_version`` of the dataset at
    ``ref_path``. Only valid as a dataset's first commit.

    A shallow clone references the source's files through a base path; a deep clone's
    files were copied into its own root beforehand (``copied``: deleted again if the
    commit definitely fails).

    Attributes:
        is_shallow: whether files are referenced (True) or were copied (False).
        ref_name: the source tag it was made from ("" if a version number).
        ref_version: the source version.
        ref_path: the source's root URI.
        template: the new version's manifest content, prepared by
            :mod:`s3ddb.writes.clones`; None when decoded from a transaction file (such a
            Clone cannot be committed again).
        copied: paths (under the new root) of the deep clone's copies.

    Raises:
        InvalidInputError: a bad version or path.
    """

    is_shallow: bool
    ref_name: str
    ref_version: int
    ref_path: str
    template: Manifest | None = field(default=None, compare=False, repr=False)
    copied: tuple[str, ...] = field(default=(), compare=False, repr=False)
    kind: ClassVar[str] = "Clone"
    pb_field: ClassVar[str] = "clone"
    changes: ClassVar[Changes] = Changes.ROWS
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.ref_version, int) or self.ref_version < 1:
            raise InvalidInputError(f"Clone.ref_version must be >= 1, got {self.ref_version!r}")
        if not self.ref_path:
            raise InvalidInputError("Clone.ref_path must name the source dataset")
        object.__setattr__(self, "copied", tuple(self.copied))

    def to_pb(self) -> tpb.Clone:
        return tpb.Clone(
            is_shallow=self.is_shallow,
            ref_name=self.ref_name,
            ref_version=self.ref_version,
            ref_path=self.ref_path,
        )

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Clone:
        body = message.clone
        return cls(body.is_shallow, body.ref_name, body.ref_version, body.ref_path)

    def written_paths(self) -> tuple[str, ...]:
        return self.copied


@dataclass(frozen=True)
class UpdateBases(Operation):
    """Declare more base paths (other dataset roots this dataset may read files from).

    Raises:
        InvalidInputError: no bases given.
        PathOutsideDatasetError: a bad base path or a repeated id.
    """

    new_bases: tuple[BasePath, ...]
    kind: ClassVar[str] = "UpdateBases"
    pb_field: ClassVar[str] = "update_bases"
    changes: ClassVar[Changes] = Changes.NOTHING
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if isinstance(self.new_bases, BasePath):
            raise InvalidInputError("UpdateBases.new_bases must be a sequence of BasePath")
        object.__setattr__(self, "new_bases", check_base_paths(self.new_bases))
        if not self.new_bases:
            raise InvalidInputError("UpdateBases needs at least one base path")

    def to_pb(self) -> tpb.UpdateBases:
        return tpb.UpdateBases(new_bases=[b.to_pb() for b in self.new_bases])

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> UpdateBases:
        return cls(tuple(BasePath.from_pb(b) for b in message.update_bases.new_bases))
