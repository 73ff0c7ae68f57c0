"""Spark's pushed filters as s3ddb conditions: exact row filters and row-group pruning.

A filter is accepted only where s3ddb evaluates it exactly as Spark would, so Spark
can drop it from its own plan. That rules out floating-point columns (Spark orders
NaN above every number and equal to itself, Arrow compares NaN false) and timestamps
(time zone conversions); those filters go back to Spark and prune nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from s3ddb.expressions.conditions import Condition, PushedFilters
from s3ddb.format.stats import exact_bound_type

_ORDERED = {"eq", "gt", "ge", "lt", "le"}


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
        return (path[0], t) if exact_bound_type(t) else None

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
