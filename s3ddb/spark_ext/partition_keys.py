"""Keys that Spark's hash partitioning sends to the partitions one chooses.

``frame.repartition(n, column)`` puts a row in partition ``pmod(hash(column), n)``,
where ``hash`` is Spark's Murmur3 (x86, 32 bits, seed 42). Numbering the units of work
0, 1, ... and repartitioning by that number leaves it to the hash where each unit goes:
two units often share a partition while another stays empty (the numbers 0 and 1 both
go to partition 1 of 2), so one task does the work of two while a core idles. Keying
each unit by :func:`partition_keys`' value for it sends unit ``i`` to partition ``i``.

Only the placement depends on the hash: a Spark that hashed otherwise would still
group each key's rows in one partition, only not spread them as chosen.
"""

from __future__ import annotations

__all__ = ["partition_keys", "spark_int_hash"]

_MASK = 0xFFFFFFFF
_SEED = 42  # HashPartitioning's Murmur3Hash seed


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_int_hash(value: int) -> int:
    """Spark's ``hash(value)`` of an IntegerType value (signed 32 bits)."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotate_left(k1, 15) * 0x1B873593 & _MASK
    h1 = _rotate_left(_SEED ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_keys(partitions: int) -> list[int]:
    """For each partition ``i`` of ``partitions``, the smallest non-negative int (to be
    stored in an IntegerType column) that ``repartition(partitions, column)`` sends to
    partition ``i``.

    Raises:
        ValueError: ``partitions`` is not positive.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be positive, not {partitions}")
    keys: list[int | None] = [None] * partitions
    missing, candidate = partitions, 0
    while missing:
        target = spark_int_hash(candidate) % partitions  # Python's % is pmod
        if keys[target] is None:
            keys[target] = candidate
            missing -= 1
        candidate += 1
    return [k for k in keys if k is not None]
