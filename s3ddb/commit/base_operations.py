"""Operations on base paths: Clone (a dataset's first commit, made from another
dataset's version) and UpdateBases (declare more base paths).

Their builders and conflict rules are registered by :mod:`s3ddb.commit.build` and
:mod:`s3ddb.commit.conflicts` at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from s3ddb.commit.transaction import OPERATION_KINDS, Operation, register_operation_decoder
from s3ddb.errors import InvalidInputError, PathOutsideDatasetError
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.bases import BasePath, check_base_paths
from s3ddb.format.manifest import Manifest


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

    def __post_init__(self) -> None:
        if isinstance(self.new_bases, BasePath):
            raise InvalidInputError("UpdateBases.new_bases must be a sequence of BasePath")
        object.__setattr__(self, "new_bases", check_base_paths(self.new_bases))
        if not self.new_bases:
            raise InvalidInputError("UpdateBases needs at least one base path")

    def to_pb(self) -> tpb.UpdateBases:
        return tpb.UpdateBases(new_bases=[b.to_pb() for b in self.new_bases])


def _decode_clone(message: tpb.Transaction) -> Clone:
    body = message.clone
    return Clone(body.is_shallow, body.ref_name, body.ref_version, body.ref_path)


def _decode_update_bases(message: tpb.Transaction) -> UpdateBases:
    return UpdateBases(tuple(BasePath.from_pb(b) for b in message.update_bases.new_bases))


register_operation_decoder("clone", _decode_clone)
register_operation_decoder("update_bases", _decode_update_bases)


# --- builders --------------------------------------------------------------------------


def build_clone(base: Manifest | None, op: Operation, version: int, load: Any) -> Manifest:
    """Clone's manifest: its template, as the dataset's first version.

    Raises:
        InvalidInputError: the dataset exists already, or the Clone has no template.
    """
    assert isinstance(op, Clone)
    if base is not None:
        raise InvalidInputError(
            f"Clone is only valid as a dataset's first commit (version {base.version} exists)"
        )
    if op.template is None:
        raise InvalidInputError("this Clone was read from a transaction file: clone again")
    return op.template


def build_update_bases(base: Manifest | None, op: Operation, version: int, load: Any) -> Manifest:
    """``base`` with ``op``'s bases added.

    Raises:
        InvalidInputError: no dataset yet.
        PathOutsideDatasetError: an id, name or root the dataset's bases already use.
    """
    assert isinstance(op, UpdateBases)
    if base is None:
        raise InvalidInputError("UpdateBases needs an existing dataset")
    ids = {b.id: b for b in base.base_paths}
    paths = {b.path for b in base.base_paths}
    names = {b.name for b in base.base_paths if b.name}
    for new in op.new_bases:
        if new.id in ids:
            raise PathOutsideDatasetError(
                f"base path id {new.id} is already used by {ids[new.id].path} "
                f"in version {base.version}"
            )
        if new.path in paths:
            raise PathOutsideDatasetError(f"base path {new.path} is already declared")
        if new.name and new.name in names:
            raise PathOutsideDatasetError(f"base path name {new.name!r} is already used")
    return base.evolve(base_paths=base.base_paths + op.new_bases)


# --- conflict rules ---------------------------------------------------------------------


def register_rules(register: Callable[..., None], fixed: Callable[..., Any]) -> None:
    """Register Clone's and UpdateBases' rows of the conflict matrix."""
    from s3ddb.commit.conflicts import Outcome

    for theirs in OPERATION_KINDS:
        register(
            "Clone",
            theirs,
            fixed(Outcome.INCOMPATIBLE, "a clone is only valid as a dataset's first commit"),
        )
        register("UpdateBases", theirs, fixed(Outcome.COMPATIBLE, "bases touch no data"))
    register(
        "UpdateBases",
        "UpdateBases",
        fixed(Outcome.RETRYABLE, "concurrent base change: ids or roots may collide; re-read"),
    )
    register(
        "UpdateBases",
        "Clone",
        fixed(Outcome.INCOMPATIBLE, "clone is only valid as a dataset's first commit"),
    )
