"""The ranges stored numbers must lie in, and the checks that refuse the others.

Protobuf gives every counter 64 bits, and a damaged or hostile file can store any of
them: a version next to 2^64 (V2 manifest names are ``u64::MAX - version``), a
fragment of 2^63 rows, a negative commit time. Each decoder checks its numbers
against these bounds once, when it decodes them, and raises
:class:`~s3ddb.errors.StoredMetadataError` naming the number, its value and where it
was found; nothing is allocated in proportion to a number before it is checked.
"""

from __future__ import annotations

from s3ddb.errors import StoredMetadataError
from s3ddb.format.naming import MAX_VERSION

__all__ = [
    "MAX_FILE_SIZE",
    "MAX_FRAGMENT_ID",
    "MAX_MANIFEST_BYTES",
    "MAX_PHYSICAL_ROWS",
    "MAX_TRANSACTION_BYTES",
    "MAX_VERSION",
    "check_range",
]

#: Row offsets within a fragment are unsigned 32-bit (deletion files, index rows), so
#: a fragment holds at most 2^32 rows.
MAX_PHYSICAL_ROWS = 2**32
#: Fragment ids are unsigned 32-bit wherever they are indexed (an index's Roaring
#: bitmap of fragments, the BTREE file's ``fragment_id`` column).
MAX_FRAGMENT_ID = 2**32 - 1
#: Sizes are signed 64-bit in Arrow and in object store APIs.
MAX_FILE_SIZE = 2**63 - 1
#: The largest manifest a reader fetches: a larger one is refused before it is read
#: (a manifest replaced by a huge file must not exhaust memory). Format 2 keeps roots
#: small (fragments past the inline tail are in chunks, see ``format.chunks``); a
#: format-1 manifest holds about 6 million fragments in this much.
MAX_MANIFEST_BYTES = 512 * 1024 * 1024
#: The largest transaction file a reader fetches, refused unread past it like a
#: manifest: a transaction lists no more than the manifest it makes (an append's new
#: fragments, a delete's changed ones).
MAX_TRANSACTION_BYTES = MAX_MANIFEST_BYTES


def check_range(value: int, low: int, high: int, what: str, where: str) -> int:
    """``value`` if ``low <= value <= high``.

    Raises:
        StoredMetadataError: it is not, naming ``what`` and ``where``.
    """
    if not low <= value <= high:
        raise StoredMetadataError(f"{where}: {what} {value} is out of range ({low} to {high})")
    return value
