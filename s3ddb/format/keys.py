"""Stable 64-bit hashes of key tuples, computed column-wise with numpy.

merge_insert records the hashes of the keys it wrote (its key-existence filter) and
compares them with other writers' keys, so the hash must be the same in every process
and on every machine: no Python ``hash()``, no per-process seed. Equal keys (SQL
equality on one schema) hash equally; a NULL key part drops the row (a NULL key never
matches, so it cannot conflict).

Numbers, booleans and temporal values hash their bit patterns (``-0.0`` as ``0.0``,
since SQL compares them equal); strings and binaries hash their bytes (FNV-1a, one
numpy pass per byte position); any other type falls back to hashing its Python value.
Each column's hash is combined with the previous ones and finished with splitmix64.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["key_hashes"]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: Above this many bytes per value, per-position passes stop paying off.
_MAX_VECTOR_BYTES = 256


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _bytes_hash(array: pa.Array) -> np.ndarray | None:
    """FNV-1a of each value's bytes (None if the values are too long to vectorize)."""
    array = array.cast(pa.large_binary())
    lengths = pc.binary_length(array).fill_null(0).to_numpy().astype(np.int64)
    if len(lengths) and int(lengths.max()) > _MAX_VECTOR_BYTES:
        return None
    offsets_buf, data_buf = array.buffers()[1], array.buffers()[2]
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[array.offset : array.offset + len(array)]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    out = np.full(len(array), _FNV_OFFSET, dtype=np.uint64)
    for position in range(int(lengths.max()) if len(lengths) else 0):
        live = lengths > position
        byte = data[offsets[live] + position].astype(np.uint64)
        out[live] = (out[live] ^ byte) * _FNV_PRIME
    return out ^ lengths.astype(np.uint64)


def _python_hash(array: pa.Array) -> np.ndarray:
    out = np.zeros(len(array), dtype=np.uint64)
    for i, value in enumerate(array.to_pylist()):
        if value is not None:
            digest = hashlib.blake2b(repr(value).encode(), digest_size=8).digest()
            out[i] = np.uint64(int.from_bytes(digest, "big"))
    return out


def _column_hash(array: pa.Array) -> np.ndarray:
    t = array.type
    if pa.types.is_dictionary(t):
        return _column_hash(array.dictionary_decode())
    if pa.types.is_boolean(t):
        return array.cast(pa.uint8()).fill_null(0).to_numpy().astype(np.uint64)
    if pa.types.is_integer(t):
        values = array.fill_null(0).to_numpy()
        return values.astype(np.int64).view(np.uint64)
    if pa.types.is_floating(t):
        values = array.cast(pa.float64()).fill_null(0.0).to_numpy() + 0.0  # -0.0 -> 0.0
        return values.view(np.uint64)
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        width = pa.int32() if t.bit_width == 32 else pa.int64()
        return _column_hash(array.view(width))
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        hashed = _bytes_hash(array)
        if hashed is not None:
            return hashed
    return _python_hash(array)


def key_hashes(table: pa.Table, columns: list[str]) -> list[int]:
    """Stable 64-bit hashes of the key tuples ``columns`` of ``table``, one per row
    whose key has no NULL part, in row order."""
    if table.num_rows == 0:
        return []
    combined = np.zeros(table.num_rows, dtype=np.uint64)
    valid = np.ones(table.num_rows, dtype=bool)
    for column in columns:
        array = table.column(column).combine_chunks()
        if array.null_count:
            valid &= array.is_valid().to_numpy(zero_copy_only=False)
        combined = _splitmix64(combined * np.uint64(31) + _column_hash(array))
    return combined[valid].tolist()  # type: ignore[no-any-return]
