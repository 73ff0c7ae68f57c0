"""The manifest model: one immutable description of one dataset version."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from google.protobuf.message import DecodeError

from s3ddb._version import __version__
from s3ddb.errors import ManifestCorruptError, PathOutsideDatasetError
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.bases import BasePath, check_base_paths, file_base_ids, fragment_files
from s3ddb.format.fragment import FragmentMetadata
from s3ddb.format.framing import frame, unframe
from s3ddb.format.index import IndexMetadata
from s3ddb.format.naming import NamingScheme
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.paths import check_name

MANIFEST_MAGIC = b"S3DDBMF1"
WRITER_LIBRARY = "s3ddb"


@dataclass(frozen=True)
class Manifest:
    """One version of a dataset.

    Attributes:
        version: the version number (>= 1).
        schema: the dataset schema with field ids.
        fragments: the fragments, in order.
        max_fragment_id: highest fragment id ever assigned, None before the first.
        config: dataset configuration (string map).
        table_metadata: free-form table metadata.
        timestamp_nanos: commit time, nanoseconds since the epoch.
        naming_scheme: the scheme of this dataset's manifest names.
        transaction_file: transaction file name (under ``_transactions/``).
        operation: the operation kind that produced this version ("Append"...).
        writer_library, writer_version: who wrote it.
        base_paths: other dataset roots whose files this version references (see
            :mod:`s3ddb.format.bases`); every ``base_id`` of a file must be declared.
        cloned_from_version: the source version, for a clone's manifests (else None).
        indices: the indices of this version (see :mod:`s3ddb.format.index`).

    Raises:
        PathOutsideDatasetError: a bad base path, or a file of an undeclared base.
    """

    version: int
    schema: DatasetSchema
    fragments: tuple[FragmentMetadata, ...]
    max_fragment_id: int | None = None
    config: dict[str, str] = field(default_factory=dict)
    table_metadata: dict[str, str] = field(default_factory=dict)
    timestamp_nanos: int = 0
    naming_scheme: NamingScheme = NamingScheme.V2
    transaction_file: str = ""
    operation: str = ""
    writer_library: str = WRITER_LIBRARY
    writer_version: str = __version__
    base_paths: tuple[BasePath, ...] = ()
    indices: tuple[IndexMetadata, ...] = ()
    cloned_from_version: int | None = None

    def __post_init__(self) -> None:
        if self.transaction_file:
            check_name(self.transaction_file, "transaction file")
        object.__setattr__(self, "base_paths", check_base_paths(self.base_paths))
        undeclared = file_base_ids(self.fragments) - {b.id for b in self.base_paths}
        if undeclared:
            raise PathOutsideDatasetError(
                f"refusing files of base path(s) {sorted(undeclared)}: the manifest "
                "declares no such base"
            )

    @property
    def num_rows(self) -> int:
        return sum(f.num_rows for f in self.fragments)

    def next_fragment_id(self) -> int:
        return 0 if self.max_fragment_id is None else self.max_fragment_id + 1

    def evolve(self, **changes: Any) -> Manifest:
        return replace(self, **changes)

    # --- serialization -----------------------------------------------------------------

    def to_pb(self) -> pb.Manifest:
        m = pb.Manifest(
            version=self.version,
            schema=self.schema.to_pb(),
            fragments=[f.to_pb() for f in self.fragments],
            config=self.config,
            table_metadata=self.table_metadata,
            timestamp_nanos=self.timestamp_nanos,
            writer_version=pb.WriterVersion(
                library=self.writer_library, version=self.writer_version
            ),
            naming_scheme=(
                pb.NAMING_SCHEME_V1
                if self.naming_scheme is NamingScheme.V1
                else pb.NAMING_SCHEME_V2
            ),
            transaction_file=self.transaction_file,
            operation=self.operation,
            base_paths=[b.to_pb() for b in self.base_paths],
            indices=[i.to_pb() for i in self.indices],
        )
        if self.max_fragment_id is not None:
            m.max_fragment_id = self.max_fragment_id
        if self.cloned_from_version is not None:
            m.cloned_from_version = self.cloned_from_version
        return m

    def to_bytes(self) -> bytes:
        """The framed, serialized manifest (what is stored on object storage)."""
        return frame(self.to_pb().SerializeToString(deterministic=True), MANIFEST_MAGIC)

    @classmethod
    def from_pb(cls, m: pb.Manifest) -> Manifest:
        return cls(
            version=m.version,
            schema=DatasetSchema.from_pb(m.schema),
            fragments=tuple(FragmentMetadata.from_pb(f) for f in m.fragments),
            max_fragment_id=m.max_fragment_id if m.HasField("max_fragment_id") else None,
            config=dict(m.config),
            table_metadata=dict(m.table_metadata),
            timestamp_nanos=m.timestamp_nanos,
            naming_scheme=NamingScheme.V1
            if m.naming_scheme == pb.NAMING_SCHEME_V1
            else NamingScheme.V2,
            transaction_file=m.transaction_file,
            operation=m.operation,
            writer_library=m.writer_version.library,
            writer_version=m.writer_version.version,
            base_paths=tuple(BasePath.from_pb(b) for b in m.base_paths),
            indices=tuple(IndexMetadata.from_pb(i) for i in m.indices),
            cloned_from_version=m.cloned_from_version or None,
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Manifest:
        """Parse a stored manifest.

        Raises:
            ManifestCorruptError: framing, checksum or protobuf decoding failed; the
                message names ``where`` (the manifest's location).
        """
        payload = unframe(data, MANIFEST_MAGIC, f"manifest {where}")
        message = pb.Manifest()
        try:
            message.ParseFromString(payload)
            return cls.from_pb(message)
        except PathOutsideDatasetError as exc:
            raise PathOutsideDatasetError(f"{exc} [manifest {where}]") from None
        except (DecodeError, ValueError, KeyError, IndexError) as exc:
            raise ManifestCorruptError(f"manifest {where}: cannot decode: {exc}") from exc


def referenced_paths(manifest: Manifest, *, transaction: bool = True) -> list[str]:
    """Every file under the dataset's own root that ``manifest`` references, relative
    to that root, in manifest order: its transaction file (unless
    ``transaction=False``), then each fragment's data files and deletion file, then
    each index's files. Files of base paths (another dataset's) are not listed: see
    :func:`referenced_files`."""
    out = []
    if transaction and manifest.transaction_file:
        out.append(layout.transaction_path(manifest.transaction_file))
    out.extend(path for base_id, path in referenced_files(manifest) if base_id is None)
    for index in manifest.indices:
        out.extend(index.file_paths)
    return list(dict.fromkeys(out))


def referenced_files(manifest: Manifest) -> list[tuple[int | None, str]]:
    """(base id, path under that root) of every data and deletion file of
    ``manifest``, in manifest order (base id None: the dataset's own root)."""
    out = (pair for fragment in manifest.fragments for pair in fragment_files(fragment))
    return list(dict.fromkeys(out))
