"""The manifest model: one immutable description of one dataset version."""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any
from zlib import crc32

from google.protobuf.message import DecodeError

from s3ddb.errors import (
    ManifestCorruptError,
    PathOutsideDatasetError,
    StoredMetadataError,
    UnsupportedFormatError,
)
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.bases import BasePath, check_base_paths, fragment_files
from s3ddb.format.chunks import MAX_CHUNKS, ChunkIds, ChunkRef, ChunkSource, StoredChunk
from s3ddb.format.fragment_list import EncodedFragments, FragmentList
from s3ddb.format.framing import frame_parts, unframe, unframe_view
from s3ddb.format.index import IndexMetadata
from s3ddb.format.limits import (
    MAX_FRAGMENT_ID,
    MAX_MANIFEST_BYTES,
    MAX_PHYSICAL_ROWS,
    MAX_VERSION,
    check_range,
)
from s3ddb.format.naming import NamingScheme
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.version_metrics import dumps_metrics, read_metrics
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.paths import check_name
from s3ddb.version import __version__

__all__ = [
    "CHUNKED_MANIFEST_MAGIC",
    "CHUNKS_FORMAT",
    "CONDITIONAL_PUT",
    "DYNAMODB",
    "FORMAT_VERSION",
    "HEADER_READ_BYTES",
    "MANIFEST_MAGIC",
    "MANIFEST_SHA256_RE",
    "ROW_IDS_FORMAT",
    "WRITER_LIBRARY",
    "Manifest",
    "ManifestHeader",
    "check_manifest_digest",
    "has_manifest_digest",
    "manifest_sha256",
    "new_dataset_id",
    "read_committed_manifest",
    "read_manifest_bytes",
    "read_manifest_header",
    "referenced_files",
    "referenced_paths",
]

MANIFEST_MAGIC = b"S3DDBMF1"
#: The magic of a manifest with fragment-list chunks (format 2): a format-1 reader
#: refuses it rather than read its inline tail as every fragment.
CHUNKED_MANIFEST_MAGIC = b"S3DDBMF2"
#: The newest manifest format this s3ddb reads and writes.
FORMAT_VERSION = 3
#: The format of a manifest with fragment-list chunks.
CHUNKS_FORMAT = 2
#: The format of a manifest of a dataset with stable row ids (chunks or not): older
#: s3ddb releases refuse it, rather than read or write it without its row ids.
ROW_IDS_FORMAT = 3
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
        metrics: what the commit of this version recorded about itself (see
            :mod:`s3ddb.observe.commit_metrics`; empty for versions written before).
        stable_row_ids: the dataset gives rows stable ids (stored as format 3;
            :mod:`s3ddb.format.row_lineage`); once on, every later version keeps it.
        next_row_id: the id the next new row gets (stable row ids only).

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
    metrics: dict[str, Any] = field(default_factory=dict, compare=False)
    stable_row_ids: bool = False
    next_row_id: int = 0

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
        # Parsing stored fragments checks them against the stored maximum (a chunk's
        # id range against it when its root is read); those built in memory are
        # checked here.
        highest = self.fragments.max_listed_id()
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
            commit_metrics=dumps_metrics(self.metrics) if self.metrics else "",
            next_row_id=self.next_row_id,
        )
        if self.stable_row_ids:
            m.format_version = ROW_IDS_FORMAT
        if self.max_fragment_id is not None:
            m.max_fragment_id = self.max_fragment_id
        if self.cloned_from_version is not None:
            m.cloned_from_version = self.cloned_from_version
        return m

    def _payload_parts(self) -> list[bytes | memoryview]:
        header_pb = self._header_pb()
        refs = self.fragments.chunk_refs()
        inline = self.fragments.segments[len(refs) :]
        if refs:
            head = self.fragments.segments[: len(refs)]
            if any(not isinstance(s, StoredChunk) for s in head):
                raise ValueError("a manifest's chunks come before its inline fragments")
            header_pb.chunks.extend(r.to_pb() for r in refs)
            header_pb.format_version = max(header_pb.format_version, CHUNKS_FORMAT)
        header = header_pb.SerializeToString(deterministic=True)
        prefix = _PREFIX.pack(_OFFSET_TAG, _PREFIX_SIZE + len(header), _CRC_TAG, crc32(header))
        return [prefix, header, *FragmentList.of_segments(inline).encoded_parts()]

    @property
    def format_version(self) -> int:
        """The format this manifest is stored in: 1 (every fragment inline), 2
        (fragment-list chunks) or 3 (stable row ids, with chunks or without)."""
        if self.stable_row_ids:
            return ROW_IDS_FORMAT
        return CHUNKS_FORMAT if self.fragments.chunk_refs() else 1

    def payload(self) -> bytes:
        """The serialized ``Manifest`` message: its ``fragments_offset`` and
        ``header_crc`` fields, the other fields, then the fragments (untouched stored
        fragments as their bytes)."""
        return b"".join(self._payload_parts())

    def to_pb(self) -> pb.Manifest:
        """The whole manifest as one protobuf message (every fragment decoded)."""
        return pb.Manifest.FromString(self.payload())

    def to_bytes(self) -> bytes:
        """The framed, serialized manifest (what is stored on object storage): format
        1, or format 2 when its fragments are in chunks (written beforehand, see
        :mod:`s3ddb.format.chunk_writer`).

        Raises:
            ValueError: fragments not in a chunk come before one that is.
        """
        magic = CHUNKED_MANIFEST_MAGIC if self.fragments.chunk_refs() else MANIFEST_MAGIC
        return frame_parts(self._payload_parts(), magic)

    @classmethod
    def from_pb(
        cls, m: pb.Manifest, where: str = "", chunks: ChunkSource | None = None
    ) -> Manifest:
        """The manifest of a parsed message (its fragments stay encoded until used)."""
        fragments = pb.Manifest()
        fragments.CopyFrom(m)
        return cls._from_parsed(fragments, where, chunks)

    @classmethod
    def _from_parsed(cls, m: pb.Manifest, where: str, chunks: ChunkSource | None) -> Manifest:
        """The manifest of ``m``, which it takes over: its fields other than the
        fragments are cleared once read."""
        header = pb.Manifest()
        header.CopyFrom(m)
        header.ClearField("fragments")
        for descriptor, _value in m.ListFields():
            if descriptor.name != "fragments":
                m.ClearField(descriptor.name)  # type: ignore[arg-type]
        return cls._from_header(header, fragments=None, message=m, where=where, chunks=chunks)

    @classmethod
    def _from_header(
        cls,
        m: pb.Manifest,
        *,
        fragments: bytes | memoryview | None,
        message: pb.Manifest | None,
        where: str,
        chunks: ChunkSource | None = None,
    ) -> Manifest:
        _check_header(m, where)
        max_id = m.max_fragment_id if m.HasField("max_fragment_id") else None
        bases = tuple(BasePath.from_pb(b) for b in m.base_paths)
        base_ids = frozenset(b.id for b in bases)
        stored, claims = _stored_chunks(m, where, chunks, base_ids, max_id)
        in_chunks = sum(len(c) for c in stored)
        count = m.fragment_count - in_chunks if m.HasField("fragment_count") else None
        rows = m.visible_rows if m.HasField("visible_rows") else None
        if rows is not None:
            rows -= sum(c.ref.visible_rows for c in stored)
        if (count is not None and count < 0) or (rows is not None and rows < 0):
            raise ManifestCorruptError(
                f"manifest {where}: its chunks hold more fragments or rows than its summary"
            )
        encoded = EncodedFragments(
            fragments,
            message=message,
            count=count,
            visible_rows=rows,
            bases=base_ids,
            where=where,
            version=m.version,
            max_id=max_id,
        )
        listed = FragmentList.of_segments([*stored, encoded])
        if claims is not None:
            # Once per opened root, before any path reads a fragment (or counts rows
            # from the summary): no id in two places. The inline tail is small and
            # parsed, not decoded; chunks are fetched only if their references
            # cannot tell alone (written before they recorded their ids exactly).
            named = f"manifest {where} (version {m.version})"
            claims.check_inline(encoded.ids(), named)
            if claims.ambiguous:
                listed.check_unique(named)
        # An index covers only fragments of this version (see index.maintenance): at
        # most as many as it holds, none above max_fragment_id.
        covered = len(listed) if m.indices else None  # parses fragments only without a count
        try:
            schema = DatasetSchema.from_pb(m.schema)
            indices = tuple(
                IndexMetadata.from_pb(i, max_fragment_id=max_id, max_fragments=covered)
                for i in m.indices
            )
        except StoredMetadataError as exc:
            raise StoredMetadataError(f"manifest {where} (version {m.version}): {exc}") from None
        if max_id is None and (len(listed) or indices):
            # Optional in the format (older Lance writers omit it). Like Lance, take the
            # highest id in use, an index's too, so no new fragment reuses one.
            in_use = [listed.max_listed_id(), *(i for x in indices for i in x.fragment_ids)]
            max_id = max(in_use) if max(in_use) >= 0 else None
        return cls(
            version=m.version,
            schema=schema,
            fragments=listed,
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
            # Malformed metrics do not keep a version from opening (see version_metrics).
            metrics=read_metrics(m.commit_metrics, f"manifest {where}")[0],
            stable_row_ids=m.format_version >= ROW_IDS_FORMAT,
            next_row_id=_checked_next_row_id(m.next_row_id, where),
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str, chunks: ChunkSource | None = None) -> Manifest:
        """Parse a stored manifest. Its fragments are parsed when first used, and its
        chunks (format 2) fetched from ``chunks`` when first used: their errors are
        raised then, with the same types and ``where`` (or the chunk's location).

        Raises:
            UnsupportedFormatError: a format newer than this s3ddb reads.
            ManifestCorruptError: framing, checksum or protobuf decoding failed; the
                message names ``where`` (the manifest's location); or it has chunks and
                no ``chunks`` to read them from was given.
            PathOutsideDatasetError: a path in the manifest would leave the dataset.
        """
        magic = _magic_of(data, where)
        payload = unframe_view(data, magic, f"manifest {where}")
        try:
            offset = _fragments_offset(payload, len(payload), where)
            if offset is not None:
                header = _parse_header(payload, offset, where)
                _check_format(header, magic, where)
                return cls._from_header(
                    header, fragments=payload[offset:], message=None, where=where,
                    chunks=chunks,
                )  # fmt: skip
            # Written before fragments were stored last: every field parsed at once.
            parsed = pb.Manifest.FromString(bytes(payload))
            _check_format(parsed, magic, where)
            return cls._from_parsed(parsed, where, chunks)
        except PathOutsideDatasetError as exc:
            raise PathOutsideDatasetError(f"{exc} [manifest {where}]") from None
        except ManifestCorruptError:
            raise
        except (DecodeError, ValueError, KeyError, IndexError, TypeError, OverflowError) as exc:
            raise ManifestCorruptError(f"manifest {where}: cannot decode: {exc}") from exc


def _checked_next_row_id(value: int, where: str) -> int:
    """``next_row_id``, which stays below 2**63 (ids are int64 columns).

    Raises:
        ManifestCorruptError: it is out of range.
    """
    if value >= 1 << 63:
        raise ManifestCorruptError(f"manifest {where}: next_row_id {value} is out of range")
    return value


def _magic_of(data: bytes | memoryview, where: str) -> bytes:
    """The magic ``data`` starts with, if this s3ddb reads it.

    Raises:
        UnsupportedFormatError: the magic of a newer manifest format.
    """
    head = bytes(data[:8])
    if head == CHUNKED_MANIFEST_MAGIC:
        return CHUNKED_MANIFEST_MAGIC
    if head[:7] == MANIFEST_MAGIC[:7] and head[7:8].isdigit() and head != MANIFEST_MAGIC:
        raise UnsupportedFormatError(
            f"manifest {where} is in format {head[7:8].decode()}, newer than this s3ddb "
            f"reads (formats 1 to {FORMAT_VERSION}): upgrade s3ddb to read it"
        )
    return MANIFEST_MAGIC


def _check_format(m: pb.Manifest, magic: bytes, where: str) -> None:
    """Refuse a ``format_version`` newer than this s3ddb reads, and chunks in a
    manifest framed as format 1.

    Raises:
        UnsupportedFormatError, ManifestCorruptError.
    """
    if m.format_version > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"manifest {where} is in format {m.format_version}, newer than this s3ddb "
            f"reads (formats 1 to {FORMAT_VERSION}): upgrade s3ddb to read it"
        )
    if len(m.chunks) and magic != CHUNKED_MANIFEST_MAGIC:
        raise ManifestCorruptError(f"manifest {where}: chunks listed in a format-1 manifest")


def _stored_chunks(
    m: pb.Manifest,
    where: str,
    source: ChunkSource | None,
    bases: frozenset[int],
    max_id: int | None,
) -> tuple[list[StoredChunk], ChunkIds | None]:
    """The chunks ``m`` lists, checked (nothing fetched), and the ids they claim
    (None without chunks).

    Raises:
        StoredMetadataError: too many chunks, a chunk listed twice, a malformed
            reference, an id above the manifest's ``max_fragment_id``, or an id two
            chunks claim.
        ManifestCorruptError: chunks, but no ``source`` to read them from.
    """
    if not len(m.chunks):
        return [], None
    named = f"manifest {where} (version {m.version})"
    check_range(len(m.chunks), 0, MAX_CHUNKS, "number of chunks", named)
    if source is None:
        raise ManifestCorruptError(f"{named}: has fragment-list chunks and no store to read them")
    refs = [ChunkRef.from_pb(c, named) for c in m.chunks]
    if len({r.name for r in refs}) != len(refs):
        raise StoredMetadataError(f"{named}: a chunk is listed twice")
    for ref in refs:
        if max_id is not None and ref.max_fragment_id > max_id:
            raise StoredMetadataError(
                f"{named}: chunk {ref.name} holds ids up to {ref.max_fragment_id}, above "
                f"max_fragment_id {max_id}"
            )
    claims = ChunkIds(refs, named)
    chunks = [
        StoredChunk(ref, source, bases=bases, version=m.version, max_id=max_id) for ref in refs
    ]
    return chunks, claims


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
    metrics: dict[str, Any] = field(default_factory=dict)
    #: What is wrong with the stored metrics (then ``metrics`` is empty), or None.
    metrics_problem: str | None = None

    @classmethod
    def of(cls, m: pb.Manifest | Manifest, where: str = "") -> ManifestHeader:
        """The header of ``m``. Malformed commit metrics are no error: they read as
        none, ``metrics_problem`` saying what is wrong.

        Raises:
            StoredMetadataError: its version or commit time is out of range.
        """
        named = f"manifest {where} (version {m.version})"
        check_range(m.version, 1, MAX_VERSION, "version", named)
        check_range(m.timestamp_nanos, 0, 2**63 - 1, "timestamp_nanos", named)
        metrics, problem = (
            (m.metrics, None) if isinstance(m, Manifest) else read_metrics(m.commit_metrics, named)
        )
        return cls(
            m.version, m.timestamp_nanos, m.operation, dict(m.table_metadata), m.dataset_id,
            metrics, problem,
        )  # fmt: skip


#: What a manifest's SHA-256 digest (:func:`manifest_sha256`) looks like where it is
#: recorded: 64 lowercase hexadecimal digits.
MANIFEST_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def manifest_sha256(data: bytes) -> str:
    """The SHA-256 digest of a manifest's stored bytes, as 64 lowercase hex digits
    (what an external store's row records of the manifest it committed)."""
    return hashlib.sha256(data).hexdigest()


def has_manifest_digest(data: bytes, sha256: str) -> bool:
    """Whether ``data`` has the SHA-256 digest ``sha256`` (as :func:`manifest_sha256`
    gives it; compared in constant time). Never raises."""
    return hmac.compare_digest(manifest_sha256(data), sha256)


def check_manifest_digest(
    data: bytes, size: int | None, sha256: str, where: str, stored: int | None = None
) -> None:
    """``data`` must be the manifest whose ``size`` (if known) and SHA-256 digest
    ``sha256`` were recorded when it was committed (``stored``: the size of the
    object ``data`` was read from, if not all of it was read). Its checksum only
    catches damage: a manifest rewritten with a valid checksum (planted by whoever
    can write the bucket but not the table) passes it, and not this.

    Raises:
        ManifestCorruptError: ``data`` has another size or digest, naming ``where``.
    """
    problem = None
    found = len(data) if stored is None else stored
    if size is not None and found != size:
        problem = f"it has {found} bytes"
    elif not has_manifest_digest(data, sha256):
        problem = "its SHA-256 digest differs"
    if problem is not None:
        raise ManifestCorruptError(
            f"manifest {where} is not the one its version committed: {problem} "
            f"(the commit recorded {size if size is not None else '?'} bytes, SHA-256 "
            f"{sha256}). It was replaced or damaged after the commit: put the original "
            "back (from a backup, or the bucket's earlier object versions: its size and "
            "digest are above)"
        )


def read_committed_manifest(
    store: ObjectStore, path: str, where: str, size: int, sha256: str
) -> bytes:
    """The bytes of the manifest at ``path`` (named ``where``), which must be the one
    committed with ``size`` and SHA-256 ``sha256``: read no further than ``size`` (a
    larger object is refused having read at most a byte more).

    Raises:
        FileNotFoundError: it does not exist.
        ManifestCorruptError: see :func:`check_manifest_digest`.
    """
    data, stored = store.get_bounded(path, max(0, min(size, MAX_MANIFEST_BYTES)))
    check_manifest_digest(data, size, sha256, where, stored)
    return data


def read_manifest_bytes(
    store: ObjectStore, path: str, where: str, listed_size: int | None = None
) -> bytes:
    """The stored bytes of the manifest at ``path`` (named ``where``), in bounded
    memory: one larger than :data:`~s3ddb.format.limits.MAX_MANIFEST_BYTES` is
    refused unread, by its ``listed_size`` (from a listing or an external store's
    row) before any request, else by the size its one read finds first.

    Raises:
        FileNotFoundError: it does not exist.
        ManifestCorruptError: it is larger than the limit.
    """
    size = listed_size or 0
    if size <= MAX_MANIFEST_BYTES:
        data, size = store.get_bounded(path, MAX_MANIFEST_BYTES)
        if size <= MAX_MANIFEST_BYTES:
            return data
    raise ManifestCorruptError(
        f"manifest {where}: {size} bytes, larger than any manifest s3ddb reads "
        f"({MAX_MANIFEST_BYTES} bytes): refused unread"
    )


def read_manifest_header(store: ObjectStore, path: str, where: str) -> ManifestHeader:
    """The header of the manifest at ``path``, reading only its first bytes (the
    fragments come last). A manifest written without a header CRC is read whole.

    Raises:
        FileNotFoundError: it does not exist.
        UnsupportedFormatError: it is in a format newer than this s3ddb reads.
        ManifestCorruptError: its magic, header or (when read whole) checksum is wrong.
    """
    data = store.get_prefix(path, HEADER_READ_BYTES)
    if len(data) < HEADER_READ_BYTES:
        return _small_manifest_header(data, where)
    magic = _magic_of(data, where)
    if data[:8] != magic:
        raise ManifestCorruptError(f"manifest {where}: not an s3ddb file (bad header magic)")
    try:
        offset = _fragments_offset(data[8:], MAX_MANIFEST_BYTES, where)
        if offset is None:
            full = unframe(read_manifest_bytes(store, path, where), magic, f"manifest {where}")
            return ManifestHeader.of(pb.Manifest.FromString(full), where)
        if 8 + offset > len(data):
            data = store.get_prefix(path, 8 + offset)
            if len(data) < 8 + offset:
                raise ManifestCorruptError(f"manifest {where}: truncated header")
        header = _parse_header(data[8:], offset, where)
        _check_format(header, magic, where)
        return ManifestHeader.of(header, where)
    except (DecodeError, ValueError) as exc:
        raise ManifestCorruptError(f"manifest {where}: cannot decode: {exc}") from exc


def _small_manifest_header(data: bytes, where: str) -> ManifestHeader:
    """The header of a whole manifest in ``data``: framing and checksum checked, only
    the header parsed (a root with chunks is small: no fragment is decoded).

    Raises:
        UnsupportedFormatError, ManifestCorruptError: as :meth:`Manifest.from_bytes`.
    """
    magic = _magic_of(data, where)
    payload = unframe_view(data, magic, f"manifest {where}")
    try:
        offset = _fragments_offset(payload, len(payload), where)
        if offset is None:
            header = pb.Manifest.FromString(bytes(payload))
            header.ClearField("fragments")
        else:
            header = _parse_header(payload, offset, where)
        _check_format(header, magic, where)
        return ManifestHeader.of(header, where)
    except (DecodeError, ValueError) as exc:
        raise ManifestCorruptError(f"manifest {where}: cannot decode: {exc}") from exc


def referenced_paths(
    manifest: Manifest, *, transaction: bool = True, skip_chunks: Collection[str] = ()
) -> list[str]:
    """Every file under the dataset's own root that ``manifest`` references, relative
    to that root, in manifest order: its transaction file (unless
    ``transaction=False``), its fragment-list chunks, then each fragment's data files
    and deletion file, then each index's files. Files of base paths (another
    dataset's) are not listed: see :func:`referenced_files`. The fragments of the
    chunks named in ``skip_chunks`` are not read (their files were listed already)."""
    out = []
    if transaction and manifest.transaction_file:
        out.append(layout.transaction_path(manifest.transaction_file))
    out.extend(ref.path for ref in manifest.fragments.chunk_refs())
    out.extend(path for base_id, path in referenced_files(manifest, skip_chunks) if base_id is None)
    for index in manifest.indices:
        out.extend(index.file_paths)
    return list(dict.fromkeys(out))


def referenced_files(
    manifest: Manifest, skip_chunks: Collection[str] = ()
) -> list[tuple[int | None, str]]:
    """(base id, path under that root) of every data and deletion file of
    ``manifest``, in manifest order (base id None: the dataset's own root), but
    those of the fragments of chunks named in ``skip_chunks``."""
    fragments = manifest.fragments
    if skip_chunks:
        kept = [
            s for s in fragments.segments
            if not (isinstance(s, StoredChunk) and s.ref.name in skip_chunks)
        ]  # fmt: skip
        fragments = FragmentList.of_segments(kept)
    out = (pair for fragment in fragments for pair in fragment_files(fragment))
    return list(dict.fromkeys(out))
