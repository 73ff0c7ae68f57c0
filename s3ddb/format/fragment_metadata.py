"""Fragments: the unit of data in a manifest.

A fragment is a set of rows stored in one or more data files (one per group of
columns), plus an optional deletion file of row offsets that are deleted. These
dataclasses pickle, so Spark executors or worker processes can write data files and
send the resulting :class:`FragmentMetadata` to one driver that commits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from s3ddb.errors import InvalidInputError, PathOutsideDatasetError, StoredMetadataError
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.limits import (
    MAX_FILE_SIZE,
    MAX_FRAGMENT_ID,
    MAX_PHYSICAL_ROWS,
    MAX_VERSION,
    check_range,
)
from s3ddb.format.row_lineage import check_row_ids, check_versions
from s3ddb.io.paths import check_name

if TYPE_CHECKING:
    from s3ddb.format.stats import FileStatistics

__all__ = ["DataFile", "DeletionFile", "FragmentMetadata", "data_file_paths", "data_files_apart"]


@dataclass(frozen=True)
class DataFile:
    """One data file of a fragment.

    Attributes:
        path: path relative to ``data/`` of the dataset (or of base ``base_id``).
        fields: ids of the fields whose columns the file holds.
        file_format: "parquet".
        file_size_bytes: size on storage (0 if unknown).
        base_id: base path id for files outside the dataset root (shallow clones).
    """

    path: str
    fields: tuple[int, ...]
    file_format: str = "parquet"
    file_size_bytes: int = 0
    base_id: int | None = None

    def __post_init__(self) -> None:
        # One plain name under data/ (as Lance treats it): a planted "../x" never
        # leaves the dataset.
        check_name(self.path, "data file")

    def to_pb(self) -> pb.DataFile:
        m = pb.DataFile(
            path=self.path,
            fields=list(self.fields),
            file_format=self.file_format,
            file_size_bytes=self.file_size_bytes,
        )
        if self.base_id is not None:
            m.base_id = self.base_id
        return m

    @classmethod
    def from_pb(cls, m: pb.DataFile) -> DataFile:
        return cls(
            path=m.path,
            fields=tuple(m.fields),
            file_format=m.file_format or "parquet",
            file_size_bytes=m.file_size_bytes,
            base_id=m.base_id if m.HasField("base_id") else None,
        )


@dataclass(frozen=True)
class DeletionFile:
    """Deleted row offsets of one fragment (see design: ``_deletions/``)."""

    kind: str  # "roaring" or "arrow"
    read_version: int
    id: str
    num_deleted_rows: int
    base_id: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("roaring", "arrow"):
            raise ValueError(f"unknown deletion file kind {self.kind!r}")
        check_name(self.id, "deletion file id")
        if self.num_deleted_rows < 0:
            raise ValueError("num_deleted_rows must be >= 0")

    @property
    def extension(self) -> str:
        return "bin" if self.kind == "roaring" else "arrow"

    def to_pb(self) -> pb.DeletionFile:
        m = pb.DeletionFile(
            kind=pb.DeletionFile.ROARING_BITMAP
            if self.kind == "roaring"
            else pb.DeletionFile.ARROW_ARRAY,
            read_version=self.read_version,
            id=self.id,
            num_deleted_rows=self.num_deleted_rows,
        )
        if self.base_id is not None:
            m.base_id = self.base_id
        return m

    @classmethod
    def from_pb(cls, m: pb.DeletionFile) -> DeletionFile:
        return cls(
            kind="roaring" if m.kind == pb.DeletionFile.ROARING_BITMAP else "arrow",
            read_version=m.read_version,
            id=m.id,
            num_deleted_rows=m.num_deleted_rows,
            base_id=m.base_id if m.HasField("base_id") else None,
        )


#: Where a fragment keeps its encoded manifest entry (:meth:`FragmentMetadata.manifest_entry`).
_ENTRY = "_manifest_entry"


@dataclass(frozen=True)
class FragmentMetadata:
    """A fragment: its id, data files, physical row count and deletion file.

    Fragments written by :func:`s3ddb.fragment.write_fragments` have id 0 until a
    commit assigns them ids.

    ``stats`` holds column statistics of its data files (:mod:`s3ddb.format.stats`),
    used only to skip it when a filter cannot match; they are trusted per field only
    while the file they describe still holds that field, so code that replaces files
    may carry them along unchanged. They take no part in equality.
    """

    id: int
    files: tuple[DataFile, ...]
    physical_rows: int
    deletion_file: DeletionFile | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    stats: tuple[FileStatistics, ...] = field(default=(), compare=False, repr=False)
    #: Stable row ids and row versions, encoded (s3ddb.format.row_lineage): empty
    #: without stable row ids, or until a commit allocates them.
    row_ids: bytes = field(default=b"", compare=False, repr=False)
    created_at: bytes = field(default=b"", compare=False, repr=False)
    updated_at: bytes = field(default=b"", compare=False, repr=False)

    def __post_init__(self) -> None:
        # InvalidInputError is a ValueError: typed under S3DDBError, also when a commit
        # builds a fragment from a stored one whose counts disagree with its deletions.
        if self.id < 0:
            raise InvalidInputError(f"fragment id must be >= 0, got {self.id}")
        if self.physical_rows < 0:
            raise InvalidInputError(
                f"fragment {self.id}: physical_rows must be >= 0, got {self.physical_rows}"
            )
        if not self.files:
            raise InvalidInputError(f"fragment {self.id} needs at least one data file")
        if self.deletion_file and self.deletion_file.num_deleted_rows > self.physical_rows:
            raise InvalidInputError(
                f"fragment {self.id} cannot delete {self.deletion_file.num_deleted_rows} rows: "
                f"it has {self.physical_rows}"
            )

    @property
    def num_deleted_rows(self) -> int:
        return self.deletion_file.num_deleted_rows if self.deletion_file else 0

    @property
    def num_rows(self) -> int:
        """Rows visible to readers (physical rows minus deleted ones)."""
        return self.physical_rows - self.num_deleted_rows

    def with_id(self, fragment_id: int) -> FragmentMetadata:
        return replace(self, id=fragment_id)

    def with_deletion_file(self, deletion_file: DeletionFile | None) -> FragmentMetadata:
        return replace(self, deletion_file=deletion_file)

    def to_pb(self) -> pb.Fragment:
        m = pb.Fragment(
            id=self.id,
            files=[f.to_pb() for f in self.files],
            physical_rows=self.physical_rows,
        )
        if self.deletion_file is not None:
            m.deletion_file.CopyFrom(self.deletion_file.to_pb())
        if self.stats:
            m.statistics.extend(s.to_pb() for s in self.stats)
        if self.row_ids:
            m.row_id_sequence = self.row_ids
        if self.created_at:
            m.row_created_at_versions = self.created_at
        if self.updated_at:
            m.row_last_updated_at_versions = self.updated_at
        return m

    def manifest_entry(self) -> bytes:
        """This fragment as one entry of a ``Manifest``'s ``fragments``: the bytes of a
        ``Manifest`` message holding only it, so that a list of fragments encodes as the
        concatenation of their entries.

        Computed once per object and kept on it: everything encoded is immutable (a
        frozen dataclass of frozen parts; ``extra`` is not encoded), and a writer that
        appends again and again writes the same inline fragments in every manifest.
        The bytes are not pickled (see ``__getstate__``)."""
        entry: bytes | None = self.__dict__.get(_ENTRY)
        if entry is None:
            entry = pb.Manifest(fragments=[self.to_pb()]).SerializeToString(deterministic=True)
            object.__setattr__(self, _ENTRY, entry)
        return entry

    def __getstate__(self) -> dict[str, Any]:
        # The cached manifest entry is derived: pickles (to Spark executors, worker
        # processes) carry the fields alone.
        return {k: v for k, v in self.__dict__.items() if k != _ENTRY}

    @classmethod
    def from_pb(cls, m: pb.Fragment) -> FragmentMetadata:
        """Decode a stored fragment.

        Raises:
            PathOutsideDatasetError: a file name would leave the dataset (the message
                names the fragment).
            StoredMetadataError: its id, row counts, a file size or a version is out
                of range, its deletion file is of an unknown kind, or its row ids or
                row versions are malformed or not one per physical row (the message
                names the fragment).
        """
        _check_ranges(m)
        try:
            return cls._from_pb(m)
        except PathOutsideDatasetError as exc:
            raise PathOutsideDatasetError(f"{exc} [fragment {m.id}]") from None

    @classmethod
    def _from_pb(cls, m: pb.Fragment) -> FragmentMetadata:
        return cls(
            id=m.id,
            files=tuple(DataFile.from_pb(f) for f in m.files),
            physical_rows=m.physical_rows,
            deletion_file=DeletionFile.from_pb(m.deletion_file)
            if m.HasField("deletion_file")
            else None,
            stats=_stats_from_pb(m),
            row_ids=m.row_id_sequence,
            created_at=m.row_created_at_versions,
            updated_at=m.row_last_updated_at_versions,
        )

    def to_json(self) -> str:
        """A JSON text of this fragment (for passing between processes as text)."""
        from google.protobuf.json_format import MessageToDict

        return json.dumps(MessageToDict(self.to_pb()))

    @classmethod
    def from_json(cls, text: str) -> FragmentMetadata:
        from google.protobuf.json_format import ParseDict

        return cls.from_pb(ParseDict(json.loads(text), pb.Fragment()))


def _check_ranges(m: pb.Fragment) -> None:
    """Refuse numbers no s3ddb writer stores, before anything is built from them.

    Raises:
        StoredMetadataError: see :meth:`FragmentMetadata.from_pb`.
    """
    where = f"fragment {m.id}"
    check_range(m.id, 0, MAX_FRAGMENT_ID, "fragment id", where)
    check_range(m.physical_rows, 0, MAX_PHYSICAL_ROWS, "physical_rows", where)
    check_range(m.created_at_version, 0, MAX_VERSION, "created_at_version", where)
    check_range(m.last_updated_at_version, 0, MAX_VERSION, "last_updated_at_version", where)
    for f in m.files:
        check_range(f.file_size_bytes, 0, MAX_FILE_SIZE, f"file_size_bytes of {f.path!r}", where)
    if len(m.files) > 1:
        _check_files_apart(m, where)
    if m.HasField("deletion_file"):
        d = m.deletion_file
        if d.kind not in (pb.DeletionFile.ROARING_BITMAP, pb.DeletionFile.ARROW_ARRAY):
            raise StoredMetadataError(f"{where}: unknown deletion file kind {d.kind}")
        check_range(d.read_version, 0, MAX_VERSION, "deletion file read_version", where)
        check_range(d.num_deleted_rows, 0, m.physical_rows, "deletion file num_deleted_rows", where)
    # Lineage may still be pending here (a transaction's fragments); a manifest's
    # fragments are checked further when decoded (fragment_list).
    if m.row_id_sequence:
        check_row_ids(m.row_id_sequence, m.physical_rows, where, pending_ok=True)
    for what in ("row_created_at_versions", "row_last_updated_at_versions"):
        data = getattr(m, what)
        if data:
            check_versions(data, m.physical_rows, where, what, None, pending_ok=True)


def _check_files_apart(m: pb.Fragment, where: str) -> None:
    """A fragment reads each of its files once, and each column from one file (a
    column rewritten into a new file is a tombstone, a negative id, in the old one).

    Raises:
        StoredMetadataError: a file listed twice, or a field id in two files (one
            file's values would replace the other's).
    """
    files: set[tuple[int | None, str]] = set()
    owner: dict[int, str] = {}
    for f in m.files:
        key = (f.base_id if f.HasField("base_id") else None, f.path)
        if key in files:
            raise StoredMetadataError(f"{where}: data file {f.path!r} is listed twice")
        files.add(key)
        for field_id in f.fields:
            if field_id < 0:
                continue
            first = owner.setdefault(field_id, f.path)
            if first != f.path:
                raise StoredMetadataError(
                    f"{where}: field id {field_id} is in two data files, {first!r} and "
                    f"{f.path!r} (a fragment reads each column from one file)"
                )


def data_files_apart(fragments: Iterable[FragmentMetadata], where: str) -> None:
    """Check that no data file belongs to two of ``fragments`` (its rows would be read
    twice, or in place of another fragment's).

    Raises:
        StoredMetadataError: a file listed by two fragments, naming ``where`` (the
            manifest), the file and both fragments.
    """
    fragments = list(fragments)
    files = [(d.base_id, d.path) for f in fragments for d in f.files]
    if len(set(files)) == len(files):
        return  # the usual case, found without a dict of who holds what
    holder: dict[tuple[int | None, str], int] = {}
    for fragment in fragments:
        for data_file in fragment.files:
            first = holder.setdefault((data_file.base_id, data_file.path), fragment.id)
            if first != fragment.id:
                raise StoredMetadataError(
                    f"{where}: data file {data_file.path!r} is listed by fragments {first} "
                    f"and {fragment.id} (its rows would be read twice)"
                )


def _stats_from_pb(m: pb.Fragment) -> tuple[FileStatistics, ...]:
    if not m.statistics:
        return ()
    from s3ddb.format.stats import FileStatistics

    return tuple(FileStatistics.from_pb(s) for s in m.statistics)


def data_file_paths(fragments: Iterable[FragmentMetadata]) -> tuple[str, ...]:
    """Paths (relative to the dataset root) of the data files of ``fragments``."""
    return tuple(layout.data_file_path(d.path) for f in fragments for d in f.files)
