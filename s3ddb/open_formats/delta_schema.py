"""The Delta schema of an Arrow schema (:func:`delta_schema`), and which Arrow types
have an exact Delta type (:func:`delta_type_problem`).

No column mapping: the schema written is the current Arrow schema, by name. s3ddb
rewrites every data file of a Delta-publishing dataset when a column is renamed (and
whole files on add-column and type widening), so the column names in data files are
always the current schema's. Mapping would not help the readers tested anyway:
deltalake 1.6 and DuckDB's delta extension 1.5.5 resolve columns by
``delta.columnMapping.physicalName``, not by Parquet field id, so files written under a
renamed column's new name would read as nulls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from s3ddb.errors import InvalidInputError
from s3ddb.open_formats.delta_state import dumps

__all__ = ["delta_schema", "delta_type_problem"]


def _field_id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(b"PARQUET:field_id")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _primitive_type(t: pa.DataType) -> str | None:
    if pa.types.is_boolean(t):
        return "boolean"
    for check, name in (
        (pa.types.is_int8, "byte"),
        (pa.types.is_int16, "short"),
        (pa.types.is_int32, "integer"),
        (pa.types.is_int64, "long"),
        (pa.types.is_float32, "float"),
        (pa.types.is_float64, "double"),
        (pa.types.is_date32, "date"),
    ):
        if check(t):
            return name
    # Large variants are an Arrow in-memory choice: Parquet stores the same bytes.
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t) and t.unit in ("ms", "us"):
        # Parquet keeps ms as TIMESTAMP(MILLIS) and readers widen it to microseconds
        # exactly; Delta's timestamp is UTC-adjusted, timestamp_ntz is not.
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    return None


def _type_problem(t: pa.DataType, where: str) -> str | None:
    if pa.types.is_struct(t):
        return _fields_problem(list(t), where + ".")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _fields_problem([t.value_field], where + ".", check_names=False)
    if pa.types.is_map(t):
        return _fields_problem([t.key_field, t.item_field], where + ".", check_names=False)
    if _primitive_type(t) is not None:
        return None
    if pa.types.is_timestamp(t):
        why = (
            "nanosecond timestamps are not exact in Delta (microseconds)"
            if t.unit == "ns"
            else "second timestamps are stored as milliseconds"
        )
        if t.unit == "s":
            # pyarrow writes timestamp[s] as TIMESTAMP(MILLIS): exact, but the Arrow
            # type readers return differs; Delta's type is still exact.
            return None
        return f"column {where!r}: {why}"
    return f"column {where!r}: Arrow type {t} has no exact Delta type"


def _fields_problem(
    fields: Sequence[pa.Field], prefix: str, *, check_names: bool = True
) -> str | None:
    seen: dict[str, str] = {}
    for f in fields:
        where = f"{prefix}{f.name}"
        if _field_id(f) is None:
            return f"column {where!r} has no PARQUET:field_id"
        if check_names:
            folded = f.name.casefold()
            if folded in seen:
                return (
                    f"columns {seen[folded]!r} and {where!r} differ only by case (Delta forbids it)"
                )
            seen[folded] = where
        problem = _type_problem(f.type, where)
        if problem is not None:
            return problem
    return None


def delta_type_problem(schema: pa.Schema) -> str | None:
    """Why ``schema`` cannot be published as Delta exactly (naming the column), or
    None.

    Accepted: booleans, signed integers, float32/64, strings and binaries (large ones
    too), decimal128, date32, timestamps in s, ms and us (with a time zone: Delta
    ``timestamp``; without: ``timestamp_ntz``), structs, lists (large too) and maps of
    those. Refused: unsigned integers, float16, nanosecond timestamps (Delta keeps
    microseconds), time of day, durations, intervals, decimal256, date64, fixed-size
    binaries and lists, dictionaries, views, null columns, a field without
    ``PARQUET:field_id``, and sibling names that differ only by case.
    """
    return _fields_problem(list(schema), "")


def _delta_type(t: pa.DataType) -> Any:
    primitive = _primitive_type(t)
    if primitive is not None:
        return primitive
    if pa.types.is_timestamp(t) and t.unit == "s":
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": _delta_fields(list(t))}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {
            "type": "array",
            "elementType": _delta_type(t.value_type),
            "containsNull": t.value_field.nullable,
        }
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": _delta_type(t.key_type),
            "valueType": _delta_type(t.item_type),
            "valueContainsNull": t.item_field.nullable,
        }
    raise InvalidInputError(f"Arrow type {t} has no exact Delta type")


def _delta_fields(fields: Iterable[pa.Field]) -> list[dict[str, Any]]:
    return [
        {"name": f.name, "type": _delta_type(f.type), "nullable": f.nullable, "metadata": {}}
        for f in fields
    ]


def delta_schema(schema: pa.Schema) -> str:
    """The Delta ``schemaString`` of an Arrow schema: its fields by name.

    Raises:
        InvalidInputError: a type :func:`delta_type_problem` refuses.
    """
    return dumps({"type": "struct", "fields": _delta_fields(list(schema))})
