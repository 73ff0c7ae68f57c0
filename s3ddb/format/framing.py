"""Framing of manifest and transaction files.

A protobuf message parsed from a truncated buffer can succeed and silently yield a
shorter message, so every file is framed::

    magic (8 bytes) | payload | payload length (u64 LE) | CRC-32 of payload (u32 LE) | magic

A reader checks both magics, the length and the CRC before parsing.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from s3ddb.errors import ManifestCorruptError

__all__ = ["frame", "frame_parts", "unframe", "unframe_view"]

_FOOTER = struct.Struct("<QI")


def frame(payload: bytes, magic: bytes) -> bytes:
    """Wrap ``payload`` with ``magic`` (8 bytes), its length and CRC-32."""
    return frame_parts([payload], magic)


def frame_parts(parts: Sequence[bytes | memoryview], magic: bytes) -> bytes:
    """:func:`frame` of the concatenation of ``parts``, copying each byte once (a
    manifest's payload is mostly fragments carried over from its predecessor)."""
    assert len(magic) == 8
    crc, length = 0, 0
    for part in parts:
        crc = zlib.crc32(part, crc)
        length += len(part)
    return b"".join([magic, *parts, _FOOTER.pack(length, crc), magic])


def unframe(data: bytes, magic: bytes, what: str) -> bytes:
    """The payload of a framed buffer.

    Raises:
        ManifestCorruptError: as :func:`unframe_view`.
    """
    return bytes(unframe_view(data, magic, what))


def unframe_view(data: bytes, magic: bytes, what: str) -> memoryview:
    """The payload of a framed buffer, as a view of ``data`` (no copy).

    Raises:
        ManifestCorruptError: wrong magic, truncated, or CRC mismatch; ``what`` (a
            path) is named in the message.
    """
    minimum = 16 + _FOOTER.size
    if len(data) < minimum:
        raise ManifestCorruptError(f"{what}: truncated ({len(data)} bytes)")
    if data[:8] != magic:
        raise ManifestCorruptError(f"{what}: not an s3ddb file (bad header magic)")
    if data[-8:] != magic:
        raise ManifestCorruptError(f"{what}: truncated or corrupt (bad footer)")
    length, crc = _FOOTER.unpack_from(data, len(data) - 8 - _FOOTER.size)
    payload = memoryview(data)[8 : len(data) - 8 - _FOOTER.size]
    if length != len(payload):
        raise ManifestCorruptError(
            f"{what}: truncated or corrupt (length {len(payload)}, expected {length})"
        )
    if zlib.crc32(payload) != crc:
        raise ManifestCorruptError(f"{what}: corrupt (checksum mismatch)")
    return payload
