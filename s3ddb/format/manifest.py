"""The manifest model: one immutable description of one dataset version."""

from __future__ import annotations

import re
import struct
import uuid
from dataclasses import dataclass, field, replace
from typing import Any
from zlib import crc32

from google.protobuf.message import DecodeError

from s3ddb.errors import ManifestCorruptError, PathOutsideDatasetError, StoredMetadataError
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.bases import BasePath, check_base_paths, fragment_files
from s3ddb.format.fragment_list import EncodedFragments, FragmentList
from s3ddb.format.framing import frame_parts, unframe, unframe_view
from s3ddb.format.index import IndexMetadata
from s3ddb.format.limits import MAX_FRAGMENT_ID, MAX_PHYSICAL_ROWS, MAX_VERSION, check_range
from s3ddb.format.naming import NamingScheme
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.paths import check_name
from s3ddb.version import __version__

__all__ = [
    "CONDITIONAL_PUT",
    "DYNAMODB",
    "HEADER_READ_BYTES",
    "MANIFEST_MAGIC",
    "WRITER_LIBRARY",
    "Manifest",
    "ManifestHeader",
    "new_dataset_id",
    "read_manifest_header",
    "referenced_files",
    "referenced_paths",
]

MANIFEST_MAGIC = b"S3DDBMF1"
#: Commit mechanisms a manifest records (see :attr:`Manifest.commit_mechanism`).
CONDITIONAL_PUT = "conditional-put"
DYNAMODB = "dynamodb"
_MECHANISMS = ("", CONDITIONAL_PUT, DYNAMODB)
_IDENTITY_RE = re.compile(r"[0-9a-f]{32}")
_TABLE_RE = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
WRITER_LIBRARY = "s3ddb"

#: The payload of a manifest starts with two fixed32 fields: ``fragments_offset``
#: (16: where the fragments start in the payload) and ``header_crc`` (19: CRC-32 of the
#: bytes from the end of these two fields to that offset).
_OFFSET_TAG = bytes([16 << 3 | 5, 1])
_CRC_TAG = bytes([19 << 3 | 5, 1])
_PREFIX = struct.Struct("<2sI2sI")
_PREFIX_SIZE = _PREFIX.size
#: How much of a manifest a reader of its header fetches first.
HEADER_READ_BYTES = 64 * 1024


@dataclass(frozen=True)
class Manifest:
    """One version of a dataset.

    Attributes:
        version: the version number (>= 1).
        schema: the dataset schema with field ids.
        fragments: the fragments, in order: any iterable of :class:`FragmentMetadata`
            is accepted and held as a :class:`FragmentList`, which decodes stored
            fragments only when they are used.
        max_fragment_id: highest fragment id ever assigned, None before the first. Read
            from a manifest that omits it (optional in the format), the highest id it
            lists or an index of it covers.
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
        dataset_id: the dataset's identity, chosen with its first version and kept
            by every later one ("" in manifests written before s3ddb recorded it).
        commit_mechanism: how versions are claimed: :data:`CONDITIONAL_PUT` or
            :data:`DYNAMODB` ("" before s3ddb recorded it).
        commit_table: the DynamoDB table deciding versions, for :data:`DYNAMODB`.

    Raises:
        PathOutsideDatasetError: a bad base path, or a file of an undeclared base.
    """

    version: int
    schema: DatasetSchema
    fragments: FragmentList
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
    dataset_id: str = ""
    commit_mechanism: str = ""
    commit_table: str = ""

    def __post_init__(self) -> None:
        if self.transaction_file:
            check_name(self.transaction_file, "transaction file")
        object.__setattr__(self, "base_paths", check_base_paths(self.base_paths))
        if not isinstance(self.fragments, FragmentList):
            object.__setattr__(self, "fragments", FragmentList(self.fragments))
        self.fragments.check_bases([b.id for b in self.base_paths])

    @property
    def num_rows(self) -> int:
        """Rows visible to readers (from the stored summary: no fragment is decoded)."""
        return self.fragments.visible_rows()

    def next_fragment_id(self) -> int:
        """The id of the next new fragment: above every id ever assigned, so a commit
        never gives a new fragment the id of a listed (or once-listed) one. Without a
        recorded ``max_fragment_id``, above the highest listed id (as Lance does).

        Raises:
            StoredMetadataError: a listed fragment's id is above ``max_fragment_id``
                (checked here, before any commit numbers from it).
        """
        # ids() parses stored fragments, which checks them against the stored maximum;
        # fragments built in memory are checked here.
        highest = max(self.fragments.ids(), default=-1)
        if self.max_fragment_id is None:
            return highest + 1
        if highest > self.max_fragment_id:
            raise StoredMetadataError(
                f"manifest of version {self.version}: fragment {highest} is above its "
                f"max_fragment_id {self.max_fragment_id} (a new fragment would reuse an id)"
            )
        return self.max_fragment_id + 1

    def evolve(self, **changes: Any) -> Manifest:
        return replace(self, **changes)

    # --- serialization -----------------------------------------------------------------

    def _header_pb(self) -> pb.Manifest:
        """Everything but the fragments, with their summary."""
        m = pb.Manifest(
            version=self.version,
            schema=self.schema.to_pb(),
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
            fragment_count=len(self.fragments),
            visible_rows=self.fragments.visible_rows(),
            dataset_id=self.dataset_id,
            commit_mechanism=self.commit_mechanism,
            commit_table=self.commit_table,
        )
        if self.max_fragment_id is not None:
            m.max_fragment_id = self.max_fragment_id
        if self.cloned_from_version is not None:
            m.cloned_from_version = self.cloned_from_version
        return m

    def _payload_parts(self) -> list[bytes | memoryview]:
        header = self._header_pb().SerializeToString(deterministic=True)
        prefix = _PREFIX.pack(_OFFSET_TAG, _PREFIX_SIZE + len(header), _CRC_TAG, crc32(header))
        return [prefix, header, *self.fragments.encoded_parts()]

    def payload(self) -> bytes:
        """The serialized ``Manifest`` message: its ``fragments_offset`` and
        ``header_crc`` fields, the other fields, then the fragments (untouched stored
        fragments as their bytes)."""
        return b"".join(self._payload_parts())

    def to_pb(self) -> pb.Manifest:
        """The whole manifest as one protobuf message (every fragment decoded)."""
        return pb.Manifest.FromString(self.payload())

    def to_bytes(self) -> bytes:
        """The framed, serialized manifest (what is stored on object storage)."""
        return frame_parts(self._payload_parts(), MANIFEST_MAGIC)

    @classmethod
    def from_pb(cls, m: pb.Manifest, where: str = "") -> Manifest:
        """The manifest of a parsed message (its fragments stay encoded until used)."""
        fragments = pb.Manifest()
        fragments.CopyFrom(m)
        return cls._from_parsed(fragments, where)

    @classmethod
    def _from_parsed(cls, m: pb.Manifest, where: str) -> Manifest:
        """The manifest of ``m``, which it takes over: its fields other than the
        fragments are cleared once read."""
        header = pb.Manifest()
        header.CopyFrom(m)
        header.ClearField("fragments")
        for descriptor, _value in m.ListFields():
            if descriptor.name != "fragments":
                m.ClearField(descriptor.name)  # type: ignore[arg-type]
        return cls._from_header(header, fragments=None, message=m, where=where)

    @classmethod
    def _from_header(
        cls,
        m: pb.Manifest,
        *,
        fragments: bytes | memoryview | None,
        message: pb.Manifest | None,
        where: str,
    ) -> Manifest:
        _check_header(m, where)
        max_id = m.max_fragment_id if m.HasField("max_fragment_id") else None
        bases = tuple(BasePath.from_pb(b) for b in m.base_paths)
        encoded = EncodedFragments(
            fragments,
            message=message,
            count=m.fragment_count if m.HasField("fragment_count") else None,
            visible_rows=m.visible_rows if m.HasField("visible_rows") else None,
            bases=frozenset(b.id for b in bases),
            where=where,
            version=m.version,
            max_id=max_id,
        )
        # An index covers only fragments of this version (see index.maintenance): at
        # most as many as it holds, none above max_fragment_id.
        covered = len(encoded) if m.indices else None  # parses fragments only without a count
        try:
            schema = DatasetSchema.from_pb(m.schema)
            indices = tuple(
                IndexMetadata.from_pb(i, max_fragment_id=max_id, max_fragments=covered)
                for i in m.indices
            )
        except StoredMetadataError as exc:
            raise StoredMetadataError(f"manifest {where} (version {m.version}): {exc}") from None
        if max_id is None and (len(encoded) or indices):
            # Optional in the format (older Lance writers omit it). Like Lance, take the
            # highest id in use, an index's too, so no new fragment reuses one.
            in_use = [*encoded.ids(), *(i for x in indices for i in x.fragment_ids)]
            max_id = max(in_use) if in_use else None
        return cls(
            version=m.version,
            schema=schema,
            fragments=FragmentList(encoded),
            max_fragment_id=max_id,
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
            base_paths=bases,
            indices=indices,
            cloned_from_version=m.cloned_from_version or None,
            dataset_id=_checked_identity(m.dataset_id, where),
            commit_mechanism=_checked_mechanism(m.commit_mechanism, where),
            commit_table=_checked_table(m.commit_table, where),
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Manifest:
        """Parse a stored manifest. Its fragments are parsed when first used: their
        decoding errors are raised then, with the same types and ``where``.

        Raises:
            ManifestCorruptError: framing, checksum or protobuf decoding failed; the
                message names ``where`` (the manifest's location).
            PathOutsideDatasetError: a path in the manifest would leave the dataset.
        """
        payload = unframe_view(data, MANIFEST_MAGIC, f"manifest {where}")
        try:
            offset = _fragments_offset(payload, len(payload), where)
            if offset is not None:
                header = _parse_header(payload, offset, where)
                return cls._from_header(
                    header, fragments=payload[offset:], message=None, where=where
                )
            # Written before fragments were stored last: every field parsed at once.
            return cls._from_parsed(pb.Manifest.FromString(bytes(payload)), where)
        except PathOutsideDatasetError as exc:
            raise PathOutsideDatasetError(f"{exc} [manifest {where}]") from None
        except ManifestCorruptError:
            raise
        except (DecodeError, ValueError, KeyError, IndexError, TypeError, OverflowError) as exc:
            raise ManifestCorruptError(f"manifest {where}: cannot decode: {exc}") from exc


def _check_header(m: pb.Manifest, where: str) -> None:
    """Refuse a header whose numbers no s3ddb writer stores: a version outside
    1..2^63-1 (V2 names are ``u64::MAX - version``), a negative commit time, ids and
    counts beyond what fragments can hold.

    Raises:
        StoredMetadataError: naming the manifest, its version and the number.
    """
    named = f"manifest {where} (version {m.version})"
    check_range(m.version, 1, MAX_VERSION, "version", named)
    check_range(m.timestamp_nanos, 0, 2**63 - 1, "timestamp_nanos", named)
    check_range(m.cloned_from_version, 0, MAX_VERSION, "cloned_from_version", named)
    if m.HasField("max_fragment_id"):
        check_range(m.max_fragment_id, 0, MAX_FRAGMENT_ID, "max_fragment_id", named)
    if m.HasField("fragment_count"):
        check_range(m.fragment_count, 0, MAX_FRAGMENT_ID + 1, "fragment_count", named)
        if m.HasField("visible_rows"):
            most = m.fragment_count * MAX_PHYSICAL_ROWS
            check_range(m.visible_rows, 0, most, "visible_rows", named)


def new_dataset_id() -> str:
    """A fresh dataset identity (32 lowercase hex digits)."""
    return uuid.uuid4().hex


def _checked_identity(value: str, where: str) -> str:
    if value and not _IDENTITY_RE.fullmatch(value):
        raise ManifestCorruptError(
            f"manifest {where}: dataset identity {value[:80]!r} is not 32 hex digits"
        )
    return value


def _checked_mechanism(value: str, where: str) -> str:
    if value not in _MECHANISMS:
        raise ManifestCorruptError(
            f"manifest {where}: unknown commit mechanism {value[:80]!r} (known: "
            f"{', '.join(repr(m) for m in _MECHANISMS[1:])})"
        )
    return value


def _checked_table(value: str, where: str) -> str:
    if value and not _TABLE_RE.fullmatch(value):
        raise ManifestCorruptError(f"manifest {where}: malformed commit table {value[:80]!r}")
    return value


def _fragments_offset(payload: bytes | memoryview, size: int, where: str) -> int | None:
    """Where the fragments start, from the payload's prefix; None if the manifest was
    written without one (every field then parses at once). ``size``: the payload's
    whole size (``payload`` may be its beginning only).

    Raises:
        ManifestCorruptError: an offset outside the payload.
    """
    if len(payload) < _PREFIX_SIZE:
        return None
    tag, offset, crc_tag, _crc = _PREFIX.unpack_from(payload)
    if tag != _OFFSET_TAG or crc_tag != _CRC_TAG:
        return None
    if not _PREFIX_SIZE <= offset <= size:
        raise ManifestCorruptError(
            f"manifest {where}: fragments offset {offset} is outside the payload ({size} bytes)"
        )
    return int(offset)


def _parse_header(payload: bytes | memoryview, offset: int, where: str) -> pb.Manifest:
    """The fields before the fragments (``payload`` holds at least ``offset`` bytes).

    Raises:
        ManifestCorruptError: a header CRC mismatch, or fragments in the header.
    """
    _tag, _offset, _crc_tag, crc = _PREFIX.unpack_from(payload)
    body = payload[_PREFIX_SIZE:offset]
    if crc32(body) != crc:
        raise ManifestCorruptError(f"manifest {where}: corrupt header (checksum mismatch)")
    header = pb.Manifest.FromString(bytes(body))
    if len(header.fragments):
        raise ManifestCorruptError(
            f"manifest {where}: fragments stored before the fragments offset"
        )
    return header


@dataclass(frozen=True)
class ManifestHeader:
    """What a manifest says about its version, read without its fragments (see
    :func:`read_manifest_header`)."""

    version: int
    timestamp_nanos: int
    operation: str
    table_metadata: dict[str, str]
    dataset_id: str = ""

    @classmethod
    def of(cls, m: pb.Manifest | Manifest, where: str = "") -> ManifestHeader:
        """The header of ``m``.

        Raises:
            StoredMetadataError: its version or commit time is out of range.
        """
        named = f"manifest {where} (version {m.version})"
        check_range(m.version, 1, MAX_VERSION, "version", named)
        check_range(m.timestamp_nanos, 0, 2**63 - 1, "timestamp_nanos", named)
        return cls(m.version, m.timestamp_nanos, m.operation, dict(m.table_metadata), m.dataset_id)


def read_manifest_header(store: ObjectStore, path: str, where: str) -> ManifestHeader:
    """The header of the manifest at ``path``, reading only its first bytes (the
    fragments come last). A manifest written without a header CRC is read whole.

    Raises:
        FileNotFoundError: it does not exist.
        ManifestCorruptError: its magic, header or (when read whole) checksum is wrong.
    """
    data = store.get_prefix(path, HEADER_READ_BYTES)
    if len(data) < HEADER_READ_BYTES:
        return ManifestHeader.of(Manifest.from_bytes(data, where))
    if data[:8] != MANIFEST_MAGIC:
        raise ManifestCorruptError(f"manifest {where}: not an s3ddb file (bad header magic)")
    try:
        offset = _fragments_offset(data[8:], 2**32, where)
        if offset is None:
            full = unframe(store.get(path), MANIFEST_MAGIC, f"manifest {where}")
            return ManifestHeader.of(pb.Manifest.FromString(full), where)
        if 8 + offset > len(data):
            data = store.get_prefix(path, 8 + offset)
            if len(data) < 8 + offset:
                raise ManifestCorruptError(f"manifest {where}: truncated header")
        return ManifestHeader.of(_parse_header(data[8:], offset, where), where)
    except (DecodeError, ValueError) as exc:
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
