"""Spark's pushed filters as s3ddb conditions: exact row filters and row-group pruning.

A filter is accepted only where s3ddb evaluates it exactly as Spark would, so Spark
can drop it from its own plan. That rules out floating-point columns (Spark orders
NaN above every number and equal to itself, Arrow compares NaN false) and timestamps
(time zone conversions); those filters go back to Spark and prune nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.scan import ColumnStats

_ORDERED = {"eq", "gt", "ge", "lt", "le"}


def _supported_type(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
    )


@dataclass(frozen=True)
class Condition:
    """One accepted filter: ``column <op> value`` (``values`` for "in")."""

    op: str  # eq, gt, ge, lt, le, in, is_null, not_null, ne, starts_with
    column: str
    value: Any = None
    values: tuple[Any, ...] = ()

    def expression(self) -> pc.Expression:
        field = pc.field(self.column)
        if self.op == "eq":
            return field == self.value
        if self.op == "ne":
            return field != self.value
        if self.op == "gt":
            return field > self.value
        if self.op == "ge":
            return field >= self.value
        if self.op == "lt":
            return field < self.value
        if self.op == "le":
            return field <= self.value
        if self.op == "in":
            return field.isin(list(self.values))
        if self.op == "is_null":
            return field.is_null()
        if self.op == "not_null":
            return field.is_valid()
        if self.op == "starts_with":
            return pc.starts_with(field, self.value)
        raise AssertionError(self.op)

    def may_match(self, stats: ColumnStats | None, rows: int) -> bool:
        """False only if no row of a row group with these statistics can match."""
        if stats is None:
            return True
        nulls = stats.null_count
        if self.op == "is_null":
            return nulls is None or nulls > 0
        if nulls is not None and nulls == rows and self.op != "ne":
            return False  # every value is NULL: no comparison holds
        if self.op == "not_null" or stats.min is None or stats.max is None:
            return True
        lo, hi = stats.min, stats.max
        try:
            if self.op == "eq":
                return bool(lo <= self.value <= hi)
            if self.op == "gt":
                return bool(hi > self.value)
            if self.op == "ge":
                return bool(hi >= self.value)
            if self.op == "lt":
                return bool(lo < self.value)
            if self.op == "le":
                return bool(lo <= self.value)
            if self.op == "in":
                return any(v is not None and lo <= v <= hi for v in self.values)
            if self.op == "starts_with":
                prefix = self.value
                return bool(lo[: len(prefix)] <= prefix <= hi[: len(prefix)])
        except TypeError:
            return True  # statistics of an unexpected type: cannot tell
        return True


@dataclass(frozen=True)
class PushedFilters:
    """The filters s3ddb applies itself (all must hold). Pickles to executors."""

    conditions: tuple[Condition, ...] = ()

    def expression(self) -> pc.Expression | None:
        out: pc.Expression | None = None
        for condition in self.conditions:
            expr = condition.expression()
            out = expr if out is None else out & expr
        return out

    def may_match(self, stats: Mapping[str, ColumnStats], rows: int) -> bool:
        return all(c.may_match(stats.get(c.column), rows) for c in self.conditions)


def _value(value: Any, t: pa.DataType) -> Any:
    """``value`` as a Python value of ``t``'s kind; raises if it does not fit."""
    return pa.scalar(value, type=t).as_py()


def to_condition(spark_filter: Any, schema: pa.Schema) -> Condition | None:
    """The :class:`Condition` for one Spark filter, or None if s3ddb does not take it."""
    from pyspark.sql import datasource as sds

    def column_of(f: Any) -> tuple[str, pa.DataType] | None:
        path = f.attribute
        if len(path) != 1 or path[0] not in schema.names:
            return None
        t = schema.field(path[0]).type
        return (path[0], t) if _supported_type(t) else None

    if isinstance(spark_filter, sds.Not):
        child = spark_filter.child
        if isinstance(child, sds.IsNull):
            target = column_of(child)
            return Condition("not_null", target[0]) if target else None
        if isinstance(child, sds.EqualTo):
            target = column_of(child)
            if target is None or child.value is None:
                return None
            return _compare("ne", target, child.value)
        return None
    target = column_of(spark_filter)
    if target is None:
        return None
    simple = {
        sds.EqualTo: "eq",
        sds.GreaterThan: "gt",
        sds.GreaterThanOrEqual: "ge",
        sds.LessThan: "lt",
        sds.LessThanOrEqual: "le",
    }
    for kind, op in simple.items():
        if type(spark_filter) is kind:
            value = getattr(spark_filter, "value", None)
            return None if value is None else _compare(op, target, value)
    if isinstance(spark_filter, sds.EqualNullSafe):
        if spark_filter.value is None:
            return Condition("is_null", target[0])
        return _compare("eq", target, spark_filter.value)
    if isinstance(spark_filter, sds.In):
        try:
            values = tuple(_value(v, target[1]) for v in spark_filter.value if v is not None)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            return None
        return Condition("in", target[0], values=values)
    if isinstance(spark_filter, sds.IsNull):
        return Condition("is_null", target[0])
    if isinstance(spark_filter, sds.IsNotNull):
        return Condition("not_null", target[0])
    if isinstance(spark_filter, sds.StringStartsWith):
        if not (pa.types.is_string(target[1]) or pa.types.is_large_string(target[1])):
            return None
        return Condition("starts_with", target[0], str(spark_filter.value))
    return None


def _compare(op: str, target: tuple[str, pa.DataType], value: Any) -> Condition | None:
    assert op in _ORDERED or op == "ne"
    try:
        return Condition(op, target[0], _value(value, target[1]))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return None


def split_filters(filters: Iterable[Any], schema: pa.Schema) -> tuple[PushedFilters, list[Any]]:
    """(the filters s3ddb takes, the ones Spark must still evaluate)."""
    taken, rejected = [], []
    for f in filters:
        condition = to_condition(f, schema)
        if condition is None:
            rejected.append(f)
        else:
            taken.append(condition)
    return PushedFilters(tuple(taken)), rejected
