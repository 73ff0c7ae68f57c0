"""Compaction's operations: Rewrite (fragments replaced by new ones holding the same
rows) and ReserveFragments (fragment ids reserved ahead of a Rewrite, so that it can
record where each copied row went; see :mod:`s3ddb.commit.fragment_reuse`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pyroaring import BitMap

from s3ddb.errors import InvalidInputError
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.deletion import deletion_path
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.operations.delete_update import check_fragments_listed_once
from s3ddb.operations.operation import Changes, Operation

__all__ = ["ReserveFragments", "Rewrite", "RewriteGroup"]


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
    changes: ClassVar[Changes] = Changes.NOTHING
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        if not self.groups:
            raise InvalidInputError("Rewrite needs at least one group")
        check_fragments_listed_once("Rewrite", self.old_fragments())

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

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Rewrite:
        return cls(
            tuple(
                RewriteGroup(
                    tuple(FragmentMetadata.from_pb(f) for f in g.old_fragments),
                    tuple(FragmentMetadata.from_pb(f) for f in g.new_fragments),
                    tuple((r.fragment_id, BitMap.deserialize(r.rows)) for r in g.copied_rows),
                )
                for g in message.rewrite.groups
            )
        )

    def written_paths(self) -> tuple[str, ...]:
        new = [f for g in self.groups for f in g.new_fragments]
        return data_file_paths(new) + tuple(
            deletion_path(f) for f in new if f.deletion_file is not None
        )


@dataclass(frozen=True)
class ReserveFragments(Operation):
    """Reserve ``num_fragments`` fragment ids (the highest ones of the version it
    commits), so that a later Rewrite can name its new fragments before it commits."""

    num_fragments: int
    kind: ClassVar[str] = "ReserveFragments"
    pb_field: ClassVar[str] = "reserve_fragments"
    changes: ClassVar[Changes] = Changes.NOTHING
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = False

    def __post_init__(self) -> None:
        n = self.num_fragments
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n < 2**32:
            raise InvalidInputError(f"ReserveFragments needs 1 to 2**32-1 fragments, got {n!r}")

    def to_pb(self) -> tpb.ReserveFragments:
        return tpb.ReserveFragments(num_fragments=self.num_fragments)

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> ReserveFragments:
        return cls(message.reserve_fragments.num_fragments)
