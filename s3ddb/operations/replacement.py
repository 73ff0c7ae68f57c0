"""DataReplacement: swap data files of existing fragments for new files of the same
columns and rows (e.g. a column backfilled or re-encoded by an external job).

Each replacement names a fragment and a new data file holding exactly the field ids of
one of that fragment's data files, with the same number of physical rows; that file is
replaced, the fragment's other files and its deletion file are kept. Indices stop
covering the fragment if the replaced file held an indexed column (see
:mod:`s3ddb.commit.index_coverage`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import pyarrow.parquet as pq

from s3ddb.errors import CommitConflictError, InvalidInputError
from s3ddb.format import layout
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.datafile import open_data_file
from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectStore
from s3ddb.operations.operation import Changes, Operation

__all__ = ["DataReplacement", "DataReplacementGroup", "check_replacement", "replaced_fragment"]


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
    # The same rows, other values: the change feed lists the rows whose values the
    # new files change, and a stream of appends stops here as at an update.
    changes: ClassVar[Changes] = Changes.ROWS
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

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

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> DataReplacement:
        return cls(
            tuple(
                DataReplacementGroup(g.fragment_id, DataFile.from_pb(g.new_file))
                for g in message.data_replacement.replacements
            )
        )

    def written_paths(self) -> tuple[str, ...]:
        return tuple(layout.data_file_path(g.new_file.path) for g in self.replacements)


def replaced_fragment(
    fragment: FragmentMetadata, new_file: DataFile, version: int
) -> FragmentMetadata:
    """``fragment`` (of version ``version``) with the data file holding exactly
    ``new_file``'s fields replaced by ``new_file``.

    Raises:
        CommitConflictError: it has no data file holding exactly those fields.
    """
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
            replaced_fragment(fragment, group.new_file, base.version)
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
