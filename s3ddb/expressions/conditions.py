"""Conditions on one column (``column <op> value``): exact row filters, and whether a
row group (or fragment) with given statistics can hold a matching row.

Used by the row-group pruning of SQL filters (:mod:`s3ddb.expressions.pruning`) and by the Spark
data source's pushed filters (:mod:`s3ddb.spark_ext._filters`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from s3ddb.format.rowgroups import ColumnStats

__all__ = [
    "Condition",
    "PushedFilters",
]


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
