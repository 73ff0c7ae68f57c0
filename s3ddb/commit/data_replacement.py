"""DataReplacement: swap data files of existing fragments for new files of the same
columns and rows (e.g. a column backfilled or re-encoded by an external job).

Each replacement names a fragment and a new data file holding exactly the field ids of
one of that fragment's data files, with the same number of physical rows; that file is
replaced, the fragment's other files and its deletion file are kept. Indices stop
covering the fragment if the replaced file held an indexed column (see
:mod:`s3ddb.index.maintenance`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import pyarrow.parquet as pq

from s3ddb.commit.build import register_builder
from s3ddb.commit.conflicts import Outcome, Verdict, fixed, register_rule
from s3ddb.commit.row_operations import Delete, Rewrite, Update
from s3ddb.commit.transaction import (
    OPERATION_KINDS,
    Operation,
    Transaction,
    register_operation_decoder,
)
from s3ddb.errors import CommitConflictError, InvalidInputError
from s3ddb.format import layout
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.datafile import open_data_file
from s3ddb.format.fragment import DataFile, FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectStore

_C, _R, _I = Outcome.COMPATIBLE, Outcome.RETRYABLE, Outcome.INCOMPATIBLE


@dataclass(frozen=True)
class DataReplacementGroup:
    """Replace, in fragment ``fragment_id``, the data file holding ``new_file.fields``."""

    fragment_id: int
    new_file: DataFile

    def __post_init__(self) -> None:
        if not isinstance(self.fragment_id, int) or self.fragment_id < 0:
            raise InvalidInputError(f"fragment_id must be an int >= 0, got {self.fragment_id!r}")
        if not isinstance(self.new_file, DataFile):
            raise InvalidInputError(f"new_file must be a DataFile, got {self.new_file!r}")
        if not self.new_file.fields or any(f < 0 for f in self.new_file.fields):
            raise InvalidInputError(
                f"replacement file {self.new_file.path} must list the field ids it holds "
                f"(>= 0), got {list(self.new_file.fields)}"
            )


@dataclass(frozen=True)
class DataReplacement(Operation):
    """Replace data files of existing fragments (see the module docstring).

    ``replacements`` are :class:`DataReplacementGroup` or (fragment_id, DataFile) pairs.

    Raises:
        InvalidInputError: none given, or one file of a fragment replaced twice.
    """

    replacements: tuple[DataReplacementGroup, ...]
    kind: ClassVar[str] = "DataReplacement"
    pb_field: ClassVar[str] = "data_replacement"

    def __post_init__(self) -> None:
        groups = tuple(
            g if isinstance(g, DataReplacementGroup) else DataReplacementGroup(*g)
            for g in self.replacements
        )
        object.__setattr__(self, "replacements", groups)
        if not groups:
            raise InvalidInputError("DataReplacement needs at least one replacement")
        seen = [(g.fragment_id, tuple(sorted(g.new_file.fields))) for g in groups]
        if len(seen) != len(set(seen)):
            raise InvalidInputError("DataReplacement replaces one data file twice")

    @property
    def fragment_ids(self) -> set[int]:
        return {g.fragment_id for g in self.replacements}

    def to_pb(self) -> tpb.DataReplacement:
        return tpb.DataReplacement(
            replacements=[
                tpb.DataReplacementGroup(fragment_id=g.fragment_id, new_file=g.new_file.to_pb())
                for g in self.replacements
            ]
        )

    def written_paths(self) -> tuple[str, ...]:
        return tuple(layout.data_file_path(g.new_file.path) for g in self.replacements)


def _decode(message: Any) -> DataReplacement:
    body = message.data_replacement
    return DataReplacement(
        tuple(
            DataReplacementGroup(g.fragment_id, DataFile.from_pb(g.new_file))
            for g in body.replacements
        )
    )


def _replaced(fragment: FragmentMetadata, new_file: DataFile, version: int) -> FragmentMetadata:
    wanted = set(new_file.fields)
    files = list(fragment.files)
    for i, old in enumerate(files):
        if {f for f in old.fields if f >= 0} == wanted:
            files[i] = new_file
            return replace(fragment, files=tuple(files))
    raise CommitConflictError(
        f"DataReplacement: fragment {fragment.id} of version {version} has no data file "
        f"holding exactly fields {sorted(wanted)}"
    )


def _data_replacement(base: Manifest | None, op: Operation, version: int, load: Any) -> Manifest:
    """Raises:
    InvalidInputError: no dataset.
    CommitConflictError: a fragment vanished, or has no file of those fields.
    """
    assert isinstance(op, DataReplacement)
    if base is None:
        raise InvalidInputError("DataReplacement needs an existing dataset")
    by_id = {f.id: f for f in base.fragments}
    for group in op.replacements:
        fragment = by_id.get(group.fragment_id)
        if fragment is None:
            raise CommitConflictError(
                f"DataReplacement: fragment {group.fragment_id} is not in version {base.version}"
            )
        by_id[group.fragment_id] = _replaced(fragment, group.new_file, base.version)
    return base.evolve(fragments=tuple(by_id[f.id] for f in base.fragments))


def check_replacement(store: ObjectStore, base: Manifest, op: DataReplacement) -> None:
    """Check ``op`` against the version it was computed from, before committing: each
    fragment exists, has a file of exactly those fields, and each new file exists with
    the fragment's physical row count.

    Raises:
        InvalidInputError: it does not (nothing is committed).
    """
    by_id = {f.id: f for f in base.fragments}
    for group in op.replacements:
        fragment = by_id.get(group.fragment_id)
        if fragment is None:
            raise InvalidInputError(
                f"DataReplacement: no fragment {group.fragment_id} in version {base.version}"
            )
        try:
            _replaced(fragment, group.new_file, base.version)
        except CommitConflictError as exc:
            raise InvalidInputError(str(exc)) from None
        try:
            with open_data_file(store, group.new_file) as f:
                rows = pq.ParquetFile(f).metadata.num_rows
        except FileNotFoundError:
            raise InvalidInputError(
                f"DataReplacement: new data file {group.new_file.path} does not exist"
            ) from None
        if rows != fragment.physical_rows:
            raise InvalidInputError(
                f"DataReplacement: {group.new_file.path} has {rows} rows, fragment "
                f"{fragment.id} has {fragment.physical_rows} physical rows"
            )


def _touched(op: Any) -> set[int] | None:
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


def _replacement_vs_fragments(mine: Transaction, theirs: Transaction, ctx: Any) -> Verdict:
    """My new files must still line up with the fragments I replace: a fragment that
    was removed, compacted, or had rows moved or columns rewritten makes them stale.
    (Deleted rows alone do not: the deletion file is kept, offsets are unchanged.)"""
    op = mine.operation
    assert isinstance(op, DataReplacement)
    touched = _touched(theirs.operation)
    if touched is None:
        return Verdict(_R, f"{theirs.kind} is not understood by this version")
    overlap = touched & op.fragment_ids
    if overlap:
        return Verdict(_R, f"fragments {sorted(overlap)} changed concurrently")
    return Verdict(_C, "theirs changed no fragment this replaces")


def register() -> None:
    """Register DataReplacement's decoder, builder and rules (as mine)."""
    register_operation_decoder("data_replacement", _decode)
    register_builder(DataReplacement, _data_replacement)
    for theirs in OPERATION_KINDS:
        register_rule("DataReplacement", theirs, fixed(_C, "touches no fragment it replaces"))
    for theirs in ("Overwrite", "Restore"):
        register_rule("DataReplacement", theirs, fixed(_R, "the fragments it replaced are gone"))
    for theirs in ("Merge", "Project"):
        register_rule("DataReplacement", theirs, fixed(_R, "the schema changed"))
    register_rule("DataReplacement", "Clone", fixed(_I, "clone is only valid as a first commit"))
    for theirs in ("Delete", "Update", "Rewrite", "DataReplacement"):
        register_rule("DataReplacement", theirs, _replacement_vs_fragments)


register()
