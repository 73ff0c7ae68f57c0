"""Per-fragment column statistics: bounds recorded when a data file is written, kept
with the fragment in the manifest, so a filter skips fragments without opening them.

Statistics belong to one data file (identified by a short hash of its path) and are
trusted for a field only while that file is the one holding the field: a column
rewrite (an update of some columns, a data replacement) moves the field to a new
file, and the old bounds are then ignored rather than trusted stale. Deletes leave
them valid (bounds of a superset of the visible rows). Fragments without statistics
(written before, or by another writer) are never skipped.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.format._proto import manifest_pb2 as pb

if TYPE_CHECKING:
    from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
    from s3ddb.format.rowgroups import ColumnStats
    from s3ddb.format.schema import DatasetSchema

__all__ = [
    "MAX_SUMMARY_COLUMNS",
    "STRING_PREFIX",
    "Bound",
    "ColumnStatistics",
    "FileStatistics",
    "compute_file_statistics",
    "exact_bound_type",
    "file_key",
    "fragment_column_stats",
    "live_statistics",
    "recorded_type",
    "stored_bounds",
    "summarize_bounds",
    "summary_column_stats",
    "trusted_columns",
    "union_bounds",
]

#: Characters kept of a string bound (a manifest at 10,000 fragments stays small).
STRING_PREFIX = 16

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_EPOCH = dt.date(1970, 1, 1)

Bound = int | float | str | None


@dataclass(frozen=True)
class ColumnStatistics:
    """Bounds of one top-level column over a data file's physical rows (a bound of
    None: unknown)."""

    field_id: int
    null_count: int
    min: Bound
    max: Bound

    def to_pb(self) -> pb.ColumnStatistics:
        m = pb.ColumnStatistics(field_id=self.field_id, null_count=self.null_count)
        for prefix, value in (("min", self.min), ("max", self.max)):
            if isinstance(value, int):  # and bool
                setattr(m, f"{prefix}_int", int(value))
            elif isinstance(value, float):
                setattr(m, f"{prefix}_float", value)
            elif isinstance(value, str):
                setattr(m, f"{prefix}_string", value)
        return m

    @classmethod
    def from_pb(cls, m: pb.ColumnStatistics) -> ColumnStatistics:
        low = m.WhichOneof("min")
        high = m.WhichOneof("max")
        return cls(
            field_id=m.field_id,
            null_count=m.null_count,
            min=getattr(m, low) if low else None,
            max=getattr(m, high) if high else None,
        )


@dataclass(frozen=True)
class FileStatistics:
    """Column statistics of the data file whose path hashes to ``file_key``."""

    file_key: int
    columns: tuple[ColumnStatistics, ...]

    def to_pb(self) -> pb.FileStatistics:
        return pb.FileStatistics(file_key=self.file_key, columns=[c.to_pb() for c in self.columns])

    @classmethod
    def from_pb(cls, m: pb.FileStatistics) -> FileStatistics:
        return cls(m.file_key, tuple(ColumnStatistics.from_pb(c) for c in m.columns))


@functools.lru_cache(maxsize=1 << 16)
def file_key(path: str) -> int:
    """The 64-bit key naming a data file's statistics (a hash of its path)."""
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "little")


def _upper_string(value: str) -> str | None:
    """A short string greater than ``value`` (None if there is none to give)."""
    if len(value) <= STRING_PREFIX:
        return value
    chars = list(value[:STRING_PREFIX])
    while chars:
        code = ord(chars[-1]) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000  # surrogates cannot be encoded
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


#: Columns of at most this many values get their bounds without a compute kernel.
_SMALL = 64


def _bounds(array: pa.ChunkedArray) -> tuple[Bound, Bound]:
    t = array.type
    if pa.types.is_floating(t):
        # NaN matches no comparison; the bounds are those of the other values.
        array = pc.filter(array, pc.invert(pc.is_nan(array)))
    if len(array) == array.null_count:
        return None, None
    if len(array) <= _SMALL and exact_bound_type(t):
        # A kernel call costs far more than comparing a few values in Python (commits of
        # a few rows, e.g. streaming micro-batches); the order is the same: numbers,
        # dates and booleans by value, strings by code point (UTF-8 byte order).
        values = [v for v in array.to_pylist() if v is not None]
        low, high = min(values), max(values)
    else:
        pair = pc.min_max(array)
        low, high = pair["min"].as_py(), pair["max"].as_py()
    return stored_bounds(t, low, high)


def stored_bounds(t: pa.DataType, low: Any, high: Any) -> tuple[Bound, Bound]:
    """The bounds recorded for a column of type ``t`` whose values (nulls and NaN
    left out) lie between ``low`` and ``high`` (Python values, as Arrow gives them):
    dates as days since 1970-01-01, strings shortened to :data:`STRING_PREFIX`
    characters (the maximum rounded up), NaN and integer bounds beyond int64 (the
    stored type) dropped.
    Writers other than the Python one (Spark's, from Parquet footers) go through
    this too, so every fragment's statistics mean the same."""
    if low is None or high is None:
        return None, None
    if pa.types.is_date32(t):
        if isinstance(low, dt.date) and isinstance(high, dt.date):
            return (low - _EPOCH).days, (high - _EPOCH).days
        return None, None
    if isinstance(low, str) and isinstance(high, str):
        return low[:STRING_PREFIX], _upper_string(high)
    if isinstance(low, float) and isinstance(high, float):
        return (low, high) if not (math.isnan(low) or math.isnan(high)) else (None, None)
    if isinstance(low, int) and isinstance(high, int):  # and bool
        # The manifest stores sint64: a uint64 bound at or over 2**63 (either end,
        # e.g. a fragment whose values all are) is unknown, never a failed write.
        return (
            int(low) if _INT_MIN <= low <= _INT_MAX else None,
            int(high) if _INT_MIN <= high <= _INT_MAX else None,
        )
    return None, None


def exact_bound_type(t: pa.DataType) -> bool:
    """Whether min and max bound every value of ``t`` exactly for comparisons (no
    NaN, no time zones)."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
    )


def recorded_type(t: pa.DataType) -> bool:
    """Whether columns of type ``t`` get statistics (float32 and float64 too: NaN is
    left out of their bounds). float16 gets none: Arrow has no min/max or NaN kernel
    for it, and pruning reads float64 bounds only."""
    return exact_bound_type(t) or pa.types.is_float32(t) or pa.types.is_float64(t)


def compute_file_statistics(
    table: pa.Table, schema: DatasetSchema, data_file: DataFile
) -> FileStatistics:
    """Statistics of the columns of ``table``, just written as ``data_file``."""
    columns = []
    for name, field_id in zip(table.column_names, data_file.fields):
        array = table.column(name)
        if not recorded_type(array.type):
            continue
        low, high = _bounds(array)
        columns.append(ColumnStatistics(field_id, array.null_count, low, high))
    return FileStatistics(file_key(data_file.path), tuple(columns))


def _decoded(value: Bound, t: pa.DataType) -> Any:
    """A stored bound as the Python value filters compare with (None if it does not
    fit the column's current type)."""
    if value is None:
        return None
    if pa.types.is_date32(t):
        if not isinstance(value, int):
            return None
        try:
            return _EPOCH + dt.timedelta(days=value)
        except OverflowError:
            return None
    if pa.types.is_boolean(t):
        return bool(value) if isinstance(value, int) else None
    if pa.types.is_integer(t):
        return value if isinstance(value, int) else None
    if pa.types.is_floating(t):
        return float(value) if isinstance(value, (int, float)) else None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return value if isinstance(value, str) else None
    return None


def trusted_columns(fragment: FragmentMetadata) -> dict[int, ColumnStatistics]:
    """The statistics of ``fragment``'s columns that are trusted (recorded for the file
    that holds the field now), by field id."""
    if not fragment.stats:
        return {}
    holder: dict[int, str] = {}  # field id -> path of the one file holding it
    for d in fragment.files:
        for field_id in d.fields:
            if field_id >= 0:
                holder[field_id] = d.path
    paths = {file_key(d.path): d.path for d in fragment.files}
    out: dict[int, ColumnStatistics] = {}
    for file_stats in fragment.stats:
        path = paths.get(file_stats.file_key)
        if path is None:
            continue
        for c in file_stats.columns:
            if holder.get(c.field_id) == path:
                out[c.field_id] = c
    return out


def fragment_column_stats(
    fragment: FragmentMetadata, schema: DatasetSchema
) -> dict[str, ColumnStats]:
    """The trusted statistics of ``fragment``'s columns, by the column's current name
    (columns without trusted statistics are absent: they may hold anything)."""
    trusted = trusted_columns(fragment)
    if not trusted:
        return {}
    return _by_name(trusted.values(), fragment.physical_rows, schema)


def _by_name(
    columns: Iterable[ColumnStatistics], rows: int, schema: DatasetSchema
) -> dict[str, ColumnStats]:
    from s3ddb.format.rowgroups import ColumnStats

    names = {i: p[0] for p, i in schema.ids if len(p) == 1}
    out = {}
    for c in columns:
        name = names.get(c.field_id)
        if name is None:
            continue
        t = schema.arrow.field(name).type
        out[name] = ColumnStats(_decoded(c.min, t), _decoded(c.max, t), c.null_count, rows)
    return out


#: Columns a summary of many fragments keeps bounds for (the first by field id): a
#: chunk reference stays small whatever the width of the table.
MAX_SUMMARY_COLUMNS = 16


def _lower(a: Bound, b: Bound, pick: Callable[[Any, Any], Any]) -> Bound:
    """``pick`` (min or max) of two bounds of one column; None (unknown) when either
    is unknown or they cannot be compared (a column whose type was widened)."""
    if a is None or b is None or isinstance(a, str) != isinstance(b, str):
        return None
    return pick(a, b)  # type: ignore[no-any-return]


def union_bounds(
    a: tuple[ColumnStatistics, ...], b: tuple[ColumnStatistics, ...]
) -> tuple[ColumnStatistics, ...]:
    """Bounds holding both summaries' rows: only columns bounded in both, each with
    the lower minimum, the higher maximum and the sum of null counts."""
    theirs = {c.field_id: c for c in b}
    out = []
    for c in a:
        other = theirs.get(c.field_id)
        if other is None:
            continue
        out.append(
            ColumnStatistics(
                c.field_id,
                c.null_count + other.null_count,
                _lower(c.min, other.min, min),
                _lower(c.max, other.max, max),
            )
        )
    return tuple(out)


def summarize_bounds(fragments: Iterable[FragmentMetadata]) -> tuple[ColumnStatistics, ...]:
    """Bounds over every physical row of ``fragments``: a column is kept only when
    every fragment has trusted statistics for it (at most
    :data:`MAX_SUMMARY_COLUMNS`, the first by field id). Empty for no fragment."""
    summary: tuple[ColumnStatistics, ...] | None = None
    for fragment in fragments:
        trusted = trusted_columns(fragment)
        mine = tuple(trusted[i] for i in sorted(trusted)[:MAX_SUMMARY_COLUMNS])
        summary = mine if summary is None else union_bounds(summary, mine)
        if not summary:
            return ()
    return summary or ()


def summary_column_stats(
    bounds: tuple[ColumnStatistics, ...], physical_rows: int, schema: DatasetSchema
) -> dict[str, ColumnStats]:
    """A summary's bounds as the statistics a filter tests (as for one fragment of
    ``physical_rows`` rows), by the column's current name."""
    return _by_name(bounds, physical_rows, schema)


def live_statistics(
    files: tuple[DataFile, ...], stats: tuple[FileStatistics, ...]
) -> tuple[FileStatistics, ...]:
    """``stats`` without those of files no longer in ``files`` (after a rewrite, so
    statistics do not pile up in the manifest)."""
    keys = {file_key(d.path) for d in files}
    return tuple(s for s in stats if s.file_key in keys)
