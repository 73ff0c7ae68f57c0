"""Index metadata: what a manifest says about one index (Lance's ``IndexMetadata``).

An index is a set of files under ``_indices/<uuid>/`` plus this description in the
manifest of every version that uses it. ``fragment_ids`` (stored as a Roaring bitmap)
are the fragments whose rows the index covers: a reader uses the index for those and
scans the others, so an index never has to be rebuilt for an append to stay correct.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pyroaring import BitMap

from s3ddb.errors import StoredMetadataError
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.limits import MAX_FRAGMENT_ID, MAX_VERSION, check_range
from s3ddb.io.paths import check_name

__all__ = ["FILES_KEY", "FORMAT_KEY", "IndexMetadata", "index_by_name"]

#: ``details`` key listing the index's file names (comma separated) under its directory.
FILES_KEY = "s3ddb.files"
#: ``details`` key naming the file layout s3ddb wrote; an index without it (written by
#: another Lance-format writer) is listed and kept but never used for reads.
FORMAT_KEY = "s3ddb.format"


@dataclass(frozen=True)
class IndexMetadata:
    """One index of a dataset version.

    Attributes:
        uuid: names the index's directory ``_indices/<uuid>/``.
        name: unique among the version's indices.
        fields: the field ids it indexes (one for a scalar index).
        dataset_version: the version whose data it was built from.
        fragment_ids: the fragments it covers.
        index_type: "BTREE" for s3ddb's scalar index (other writers' types are kept).
        details: free-form strings (s3ddb records its file names and format there).
        base_id: base path id for an index stored outside the dataset root.
    """

    uuid: str
    name: str
    fields: tuple[int, ...]
    dataset_version: int
    fragment_ids: frozenset[int]
    index_type: str = "BTREE"
    details: dict[str, str] = field(default_factory=dict, compare=False)
    base_id: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(int(f) for f in self.fields))
        object.__setattr__(self, "fragment_ids", frozenset(int(i) for i in self.fragment_ids))
        # Name and fields may be empty: Lance's system indices (fragment reuse, MemWAL)
        # have no fields, and a manifest holding them must still read.
        check_name(self.uuid, "index uuid")
        for name in self.file_names:
            check_name(name, f"file of index {self.name!r}")

    @property
    def file_names(self) -> tuple[str, ...]:
        raw = self.details.get(FILES_KEY, "")
        return tuple(n for n in raw.split(",") if n)

    @property
    def file_paths(self) -> tuple[str, ...]:
        """The index's files, relative to the dataset root (empty if not recorded)."""
        return tuple(layout.index_file_path(self.uuid, n) for n in self.file_names)

    @property
    def directory(self) -> str:
        return f"{layout.INDICES_DIR}/{self.uuid}"

    def covering(self, fragment_ids: frozenset[int] | set[int]) -> IndexMetadata:
        """This index covering only those of its fragments in ``fragment_ids``."""
        kept = self.fragment_ids & frozenset(fragment_ids)
        return self if kept == self.fragment_ids else replace(self, fragment_ids=kept)

    def to_pb(self) -> pb.IndexMetadata:
        m = pb.IndexMetadata(
            uuid=self.uuid,
            fields=list(self.fields),
            name=self.name,
            dataset_version=self.dataset_version,
            fragment_bitmap=BitMap(sorted(self.fragment_ids)).serialize(),
            index_type=self.index_type,
            details=self.details,
        )
        if self.base_id is not None:
            m.base_id = self.base_id
        return m

    @classmethod
    def from_pb(
        cls,
        m: pb.IndexMetadata,
        *,
        max_fragment_id: int | None = None,
        max_fragments: int | None = None,
    ) -> IndexMetadata:
        """Decode a stored index description. Its fragment bitmap is checked before
        any set is built from it: at most ``max_fragments`` fragments (the version's
        fragment count), none above ``max_fragment_id``.

        Raises:
            PathOutsideDatasetError: its uuid or a file name would leave the dataset.
            StoredMetadataError: the fragment bitmap is corrupt, or covers fragments
                beyond those limits; its dataset version is out of range.
        """
        where = f"index {m.name[:80]!r}"
        try:
            bitmap = BitMap.deserialize(m.fragment_bitmap) if m.fragment_bitmap else BitMap()
        except (ValueError, TypeError, OverflowError, IndexError, MemoryError) as exc:
            raise StoredMetadataError(f"{where}: corrupt fragment bitmap: {exc}") from None
        most = MAX_FRAGMENT_ID + 1 if max_fragments is None else max_fragments
        if len(bitmap) > most:
            raise StoredMetadataError(
                f"{where}: covers {len(bitmap)} fragments, the version holds {most}"
            )
        highest = MAX_FRAGMENT_ID if max_fragment_id is None else max_fragment_id
        if bitmap and bitmap.max() > highest:
            raise StoredMetadataError(
                f"{where}: covers fragment {bitmap.max()}, above max_fragment_id {highest}"
            )
        check_range(m.dataset_version, 0, MAX_VERSION, "dataset_version", where)
        return cls(
            uuid=m.uuid,
            name=m.name,
            fields=tuple(m.fields),
            dataset_version=m.dataset_version,
            fragment_ids=frozenset(bitmap),
            index_type=m.index_type,
            details=dict(m.details),
            base_id=m.base_id if m.HasField("base_id") else None,
        )


def index_by_name(indices: Any, name: str) -> IndexMetadata | None:
    """The index called ``name`` among ``indices``, if any."""
    return next((i for i in indices if i.name == name), None)
