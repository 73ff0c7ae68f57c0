"""The casts that would make refused column types publishable in an open format, for
the hint a refusal ends with (`enable_open_formats`, and a commit a published dataset
refuses)."""

from __future__ import annotations

import pyarrow as pa

from s3ddb.open_formats.model import FormatWriter

__all__ = ["MAX_HINTED", "castable", "describe_casts", "publishable_casts"]

#: Columns a cast hint names at most.
MAX_HINTED = 8


def castable(t: pa.DataType) -> pa.DataType:
    """``t`` with each part a format may refuse replaced by the nearest type that
    holds its values: timestamps and times in microseconds, unsigned integers in a
    wider signed one, float16 in float32, date64 as date32, a dictionary as its
    values, views and fixed-size lists as plain ones; nested types part by part."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", t.tz)
    if pa.types.is_time(t):
        return pa.time64("us")
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_unsigned_integer(t) and t.bit_width < 64:
        return {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}[t.bit_width]
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_dictionary(t):
        return castable(t.value_type)
    # By name: pyarrow before 16 has no view types (nor their constructors).
    if str(t) in ("string_view", "binary_view"):
        return pa.string() if str(t) == "string_view" else pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = t.value_field.with_type(castable(t.value_type))
        return pa.large_list(item) if pa.types.is_large_list(t) else pa.list_(item)
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        return pa.map_(key.with_type(castable(key.type)), item.with_type(castable(item.type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(castable(f.type)) for f in t])
    return t


def publishable_casts(
    arrow: pa.Schema, writer: FormatWriter
) -> list[tuple[str, pa.DataType, pa.DataType]]:
    """(column, its type, the type to cast it to) for each top-level column of
    ``arrow`` that ``writer``'s format refuses and would accept cast (each cast is
    checked against the format)."""
    casts = []
    for column in arrow:
        target = castable(column.type)
        if (
            not target.equals(column.type)
            and writer.type_problem(pa.schema([column])) is not None
            and writer.type_problem(pa.schema([column.with_type(target)])) is None
        ):
            casts.append((column.name, column.type, target))
    return casts


def describe_casts(casts: list[tuple[str, pa.DataType, pa.DataType]]) -> str:
    """``casts`` as the words of a hint: "'a' to int64, 't' to timestamp[us]" (at most
    :data:`MAX_HINTED` named, then how many more)."""
    listed = ", ".join(f"{c!r} to {t}" for c, _, t in casts[:MAX_HINTED])
    more = f" and {len(casts) - MAX_HINTED} more" if len(casts) > MAX_HINTED else ""
    return listed + more
