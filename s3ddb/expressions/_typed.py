"""Translated nodes with their Arrow types, and value-preserving casts of constants."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

_NULL_BOOL = pa.scalar(None, pa.bool_())
#: Every integer of smaller magnitude is a float64 of its own; 2**53 + 1 is not.
_FLOAT_EXACT_INTS = 2**53


@dataclass(frozen=True)
class _Typed:
    """A translated node: its expression, its Arrow type and, for a constant, its value."""

    expr: pc.Expression
    type: pa.DataType
    value: pa.Scalar | None = None  # set only for literals, so they can be re-typed


def _bound_type(probe: pads.Dataset, expr: pc.Expression) -> pa.DataType:
    """The type of ``expr`` bound to ``probe``'s schema (``probe``: a dataset of that
    schema's empty table). Binding (finding each function's kernel for its argument
    types, checking options) is what ``probe.to_table(columns={"v": expr})`` does before
    it evaluates on zero rows, which finds nothing more: the scanner alone binds the same
    way, with the same errors, without building and running a plan (a tenth of the cost).

    Raises:
        pyarrow.ArrowException: ``expr`` does not bind (as ``to_table`` would raise).
    """
    return probe.scanner(columns={"v": expr}, use_threads=False).projected_schema.field(0).type


def _lit(value: pa.Scalar) -> _Typed:
    return _Typed(pc.scalar(value), value.type, value)


def _first_line(error: BaseException) -> str:
    # Arrow appends the whole schema to some messages; the first line says it all.
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _is_stringlike(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _is_numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _cast_scalar(value: pa.Scalar, target: pa.DataType) -> pa.Scalar:
    """Cast a constant, raising pyarrow's error if the value would change, or if a
    float of magnitude 2**53 or more would become an integer (it cannot say which)."""
    if (
        _is_stringlike(value.type)
        and value.is_valid
        and pa.types.is_timestamp(target)
        and target.tz
        and not re.search(r"(Z|[+-]\d\d:?\d\d)$", value.as_py().strip())
    ):
        # A zone-less timestamp text compared to a zoned column is taken as UTC,
        # as it would be in Spark or DataFusion; Arrow refuses to guess.
        value = value.cast(pa.timestamp(target.unit))
    if (
        pa.types.is_floating(value.type)
        and pa.types.is_integer(target)
        and value.is_valid
        and abs(value.as_py()) >= _FLOAT_EXACT_INTS
    ):
        # From 2**53 on a float64 stands for several integers (9007199254740993.0
        # parses as 2**53): narrowing it would pick one of them, where Arrow compares
        # the integer column as float64 and matches them all. (Beyond 2**53 the
        # round trip below refuses too; this message says why.)
        raise pa.ArrowInvalid(
            f"{value} is at or beyond 2**53, where a float does not name one integer "
            f"(write it as an integer literal to get {target})"
        )
    if pa.types.is_decimal(target) and _is_numeric(value.type) and value.is_valid:
        # Arrow sizes int -> decimal casts for the whole int64 range and refuses
        # decimal(10, 2); going through Python's Decimal checks the actual value.
        result = pa.scalar(Decimal(str(value.as_py())), target)
    else:
        result = value.cast(target)
    if (
        _is_numeric(value.type)
        and _is_numeric(target)
        and not result.cast(value.type).equals(value)
    ):
        # Float -> decimal casts round silently (0.125 -> 0.12); refuse instead.
        raise pa.ArrowInvalid(f"{value} does not fit {target} exactly")
    return result


def _int_range(t: pa.DataType) -> tuple[int, int]:
    """The smallest and largest value of integer type ``t``."""
    bits = t.bit_width
    if pa.types.is_signed_integer(t):
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def _widened(item: _Typed) -> _Typed:
    """``item`` as float32 if it is a float16 column or expression (Arrow has no
    comparison or arithmetic kernels for float16; float32 holds every float16
    exactly, NaN included); else ``item`` unchanged."""
    if item.value is None and pa.types.is_float16(item.type):
        return _Typed(item.expr.cast(pa.float32()), pa.float32())
    return item


def _coerce(item: _Typed, target: pa.DataType) -> _Typed:
    """Re-type a literal to ``target`` when that keeps its value; else return it unchanged.

    Only value-preserving conversions are tried: NULL to anything, text to a
    non-text type (``d = '2024-01-01'``, ``n = '5'``), numbers to numbers and
    temporal to temporal. Numbers are never turned into text, so ``s = 5`` on a
    string column is reported as a type error instead of silently comparing '5'.
    """
    if item.value is None or item.type == target or pa.types.is_null(target):
        return item
    src = item.type
    if not (
        pa.types.is_null(src)
        or (_is_stringlike(src) and not _is_stringlike(target))
        or (_is_numeric(src) and _is_numeric(target))
        or (pa.types.is_temporal(src) and pa.types.is_temporal(target))
    ):
        return item
    try:
        return _lit(_cast_scalar(item.value, target))
    except (pa.ArrowException, ValueError, OverflowError):
        return item
