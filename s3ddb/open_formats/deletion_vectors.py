"""Delta Lake deletion vectors: the bytes of a DV file and its descriptor.

A Delta deletion vector (PROTOCOL.md, "Deletion Vector Format") is a set of row
positions of one data file, serialized as a 64-bit ``RoaringBitmapArray``: the little
endian magic number :data:`PORTABLE_MAGIC`, then the 64-bit "portable" Roaring
serialization (a little endian u64 bucket count, then per bucket its u32 high key and
a standard 32-bit portable Roaring bitmap). A DV *file* holds a version byte (1)
followed, per DV, by its big endian size, its bytes and their big endian CRC-32.

s3ddb writes one DV per file (offset 1) and names the file from a UUID derived from
the s3ddb deletion key (:func:`deletion_vector_uuid`), so two finishers of one version
write the same file under the same name. The serializer here writes array and bitmap
containers only, never run containers: every Roaring reader reads those two, and the
bytes depend on nothing but the set (pyroaring's own ``serialize`` emits run
containers for ranges and depends on the library version); tests check it against
pyroaring. The reader (:func:`deserialize_positions`) accepts run containers too.

The descriptor is storage type ``u``: ``pathOrInlineDv`` is :data:`DV_PREFIX` followed
by the Z85 encoding of the UUID's 16 bytes, and the file is
``<root>/<prefix>/deletion_vector_<uuid>.bin``.
"""

from __future__ import annotations

import itertools
import struct
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from s3ddb.errors import StoredMetadataError

__all__ = [
    "DV_FILE_VERSION",
    "DV_NAMESPACE",
    "DV_PREFIX",
    "PORTABLE_MAGIC",
    "DeletionVectorDescriptor",
    "deletion_vector_uuid",
    "deserialize_positions",
    "dv_file_bytes",
    "dv_path",
    "parse_u_descriptor",
    "serialize_positions",
    "z85_decode",
    "z85_encode",
]

#: The RoaringBitmapArray magic number of the portable 64-bit format (little endian).
PORTABLE_MAGIC = 1681511377
#: The version byte that starts a DV file.
DV_FILE_VERSION = 1
#: The directory (relative to the dataset root) of s3ddb's DV files: the optional
#: "random prefix" of a ``u`` descriptor, fixed so every DV lives in one place.
DV_PREFIX = "dv"
#: Namespace of the uuid5 that names a DV file from its s3ddb deletion key.
DV_NAMESPACE = uuid.UUID("5d0a3c2e-8f4b-5a7e-9c61-3b2d4e6f7a81")

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}

# 32-bit portable Roaring cookies (RoaringFormatSpec).
_COOKIE_NO_RUN = 12346
_COOKIE_RUN = 12347
# An array container holds at most this many values; beyond it a bitmap is smaller.
_ARRAY_MAX = 4096


@dataclass(frozen=True)
class DeletionVectorDescriptor:
    """The ``deletionVector`` of an ``add``/``remove`` action (storage type ``u``)."""

    storage_type: str
    path_or_inline_dv: str
    offset: int
    size_in_bytes: int
    cardinality: int

    def to_json(self) -> dict[str, object]:
        """The descriptor as Delta JSON (keys in the protocol's order)."""
        return {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
            "offset": self.offset,
            "sizeInBytes": self.size_in_bytes,
            "cardinality": self.cardinality,
        }

    @property
    def unique_id(self) -> str:
        """The protocol's derived ``uniqueId`` (the DV half of a logical file's key)."""
        return f"{self.storage_type}{self.path_or_inline_dv}@{self.offset}"


# --- Z85 ----------------------------------------------------------------------------


def z85_encode(data: bytes) -> str:
    """Z85 (ZeroMQ RFC 32) text of ``data``.

    Raises:
        ValueError: ``len(data)`` is not a multiple of 4.
    """
    if len(data) % 4:
        raise ValueError(f"Z85 encodes multiples of 4 bytes, not {len(data)}")
    out = []
    for (word,) in struct.iter_unpack(">I", data):
        chars = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            chars.append(_Z85[digit])
        out.append("".join(reversed(chars)))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    """The bytes of Z85 ``text``.

    Raises:
        ValueError: a length that is not a multiple of 5, a character outside the Z85
            alphabet, or a group above 2^32 - 1.
    """
    if len(text) % 5:
        raise ValueError(f"Z85 text is a multiple of 5 characters, not {len(text)}")
    out = bytearray()
    for i in range(0, len(text), 5):
        word = 0
        for char in text[i : i + 5]:
            digit = _Z85_INDEX.get(char)
            if digit is None:
                raise ValueError(f"{char!r} is not a Z85 character")
            word = word * 85 + digit
        if word > 0xFFFFFFFF:
            raise ValueError(f"Z85 group {text[i : i + 5]!r} is out of range")
        out += struct.pack(">I", word)
    return bytes(out)


# --- naming ---------------------------------------------------------------------------


def deletion_vector_uuid(deletion_key: str) -> uuid.UUID:
    """The UUID naming the DV file of an s3ddb deletion key (uuid5: deterministic, and a
    new key, i.e. a changed set of deleted rows, gets a new file)."""
    return uuid.uuid5(DV_NAMESPACE, deletion_key)


def dv_path(dv_uuid: uuid.UUID, prefix: str = DV_PREFIX) -> str:
    """The DV file's path relative to the table root, as readers derive it from a ``u``
    descriptor: ``<prefix>/deletion_vector_<uuid>.bin``."""
    name = f"deletion_vector_{dv_uuid}.bin"
    return f"{prefix}/{name}" if prefix else name


def parse_u_descriptor(path_or_inline_dv: str) -> tuple[str, uuid.UUID]:
    """The prefix and UUID a ``u`` descriptor's ``pathOrInlineDv`` names.

    Raises:
        StoredMetadataError: shorter than 20 characters, or its last 20 characters are
            not the Z85 of 16 bytes.
    """
    if not isinstance(path_or_inline_dv, str) or len(path_or_inline_dv) < 20:
        raise StoredMetadataError(f"not a 'u' deletion vector path: {path_or_inline_dv!r}")
    prefix, encoded = path_or_inline_dv[:-20], path_or_inline_dv[-20:]
    try:
        return prefix, uuid.UUID(bytes=z85_decode(encoded))
    except ValueError as e:
        raise StoredMetadataError(f"not a 'u' deletion vector path: {path_or_inline_dv!r}") from e


# --- the bitmap ---------------------------------------------------------------------


def _container(lows: list[int]) -> bytes:
    if len(lows) <= _ARRAY_MAX:
        return struct.pack(f"<{len(lows)}H", *lows)
    bits = bytearray(8192)
    for low in lows:
        bits[low >> 3] |= 1 << (low & 7)
    return bytes(bits)


def _bitmap32(values: list[int]) -> bytes:
    # values: sorted, distinct, each < 2^32. Portable format without run containers:
    # cookie, container count, (key, cardinality - 1) per container, an offset per
    # container, then the containers.
    groups: list[tuple[int, list[int]]] = []
    for value in values:
        key, low = value >> 16, value & 0xFFFF
        if not groups or groups[-1][0] != key:
            groups.append((key, []))
        groups[-1][1].append(low)
    header = bytearray(struct.pack("<II", _COOKIE_NO_RUN, len(groups)))
    for key, lows in groups:
        header += struct.pack("<HH", key, len(lows) - 1)
    bodies = [_container(lows) for _, lows in groups]
    offset = len(header) + 4 * len(groups)
    for body in bodies:
        header += struct.pack("<I", offset)
        offset += len(body)
    return bytes(header) + b"".join(bodies)


def serialize_positions(positions: Iterable[int]) -> tuple[bytes, int]:
    """The RoaringBitmapArray bytes (magic number included) of a set of row positions,
    and its cardinality.

    Raises:
        ValueError: a position that is negative or not below 2^63 (Delta requires
            the high 32-bit keys to leave the sign bit clear).
    """
    ordered = sorted(set(positions))
    if ordered and (ordered[0] < 0 or ordered[-1] >= 1 << 63):
        raise ValueError("deletion vector positions must be in [0, 2^63)")
    buckets: list[tuple[int, list[int]]] = []
    for position in ordered:
        high = position >> 32
        if not buckets or buckets[-1][0] != high:
            buckets.append((high, []))
        buckets[-1][1].append(position & 0xFFFFFFFF)
    out = bytearray(struct.pack("<IQ", PORTABLE_MAGIC, len(buckets)))
    for high, lows in buckets:
        out += struct.pack("<I", high)
        out += _bitmap32(lows)
    return bytes(out), len(ordered)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise StoredMetadataError("deletion vector bitmap is truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))


def _read_bitmap32(reader: _Reader, high: int, out: list[int]) -> None:
    (cookie_word,) = reader.unpack("<I")
    cookie = cookie_word & 0xFFFF
    run_flags = b""
    if cookie == _COOKIE_RUN:
        count = (cookie_word >> 16) + 1
        run_flags = reader.take((count + 7) // 8)
    elif cookie_word == _COOKIE_NO_RUN:
        (count,) = reader.unpack("<I")
    else:
        raise StoredMetadataError(f"unknown Roaring cookie {cookie_word}")
    if count > 65536:
        raise StoredMetadataError(f"{count} Roaring containers (at most 65536)")
    keys = [reader.unpack("<HH") for _ in range(count)]
    # The offset header is present without runs, and with runs from 4 containers on.
    if cookie_word == _COOKIE_NO_RUN or count >= 4:
        reader.take(4 * count)
    for i, (key, card_minus_one) in enumerate(keys):
        cardinality = card_minus_one + 1
        base = (high << 32) | (key << 16)
        is_run = bool(run_flags) and bool(run_flags[i // 8] & (1 << (i % 8)))
        if is_run:
            (runs,) = reader.unpack("<H")
            for _ in range(runs):
                begin, length = reader.unpack("<HH")
                if begin + length > 0xFFFF:
                    raise StoredMetadataError("Roaring run beyond its container")
                out.extend(base | v for v in range(begin, begin + length + 1))
        elif cardinality <= _ARRAY_MAX:
            out.extend(base | v for v in reader.unpack(f"<{cardinality}H"))
        else:
            bits = reader.take(8192)
            for byte_index, byte in enumerate(bits):
                while byte:
                    lowest = byte & -byte
                    out.append(base | (byte_index << 3) | (lowest.bit_length() - 1))
                    byte ^= lowest


def deserialize_positions(data: bytes) -> list[int]:
    """The sorted row positions of RoaringBitmapArray bytes (portable format).

    Raises:
        StoredMetadataError: another magic number, truncated or malformed bytes,
            bytes left over, or positions out of order.
    """
    reader = _Reader(data)
    magic, buckets = reader.unpack("<IQ")
    if magic != PORTABLE_MAGIC:
        raise StoredMetadataError(f"deletion vector magic number {magic}, not {PORTABLE_MAGIC}")
    if buckets > len(data):
        raise StoredMetadataError(f"{buckets} buckets in {len(data)} bytes")
    out: list[int] = []
    for _ in range(buckets):
        (high,) = reader.unpack("<I")
        if high >= 1 << 31:
            raise StoredMetadataError(f"deletion vector key {high} has its sign bit set")
        _read_bitmap32(reader, high, out)
    if reader.pos != len(data):
        raise StoredMetadataError("bytes left after the deletion vector bitmap")
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise StoredMetadataError("deletion vector positions out of order")
    return out


# --- DV files -------------------------------------------------------------------------


def dv_file_bytes(positions: Sequence[int]) -> tuple[bytes, int, int]:
    """A DV file holding one DV of ``positions``; returns the file, the DV's
    ``sizeInBytes`` and its cardinality. The DV starts at offset 1.

    Raises:
        ValueError: see :func:`serialize_positions`.
    """
    bitmap, cardinality = serialize_positions(positions)
    body = struct.pack(">BI", DV_FILE_VERSION, len(bitmap)) + bitmap
    return body + struct.pack(">I", zlib.crc32(bitmap)), len(bitmap), cardinality
