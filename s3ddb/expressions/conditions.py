"""Conditions on one column (``column <op> value``): exact row filters, and whether a
row group (or fragment) with given statistics can hold a matching row.

Used by the row-group pruning of SQL filters (:mod:`s3ddb.expressions.pruning`) and by the Spark
data source's pushed filters (:mod:`s3ddb.spark_ext._filters`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from s3ddb.format.rowgroups import ColumnStats

__all__ = [
    "Condition",
    "PushedFilters",
    "product_of_shares",
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

    def match_share(self, stats: ColumnStats | None, rows: int) -> float | None:
        """About which share of the rows of a row group with these statistics match,
        its values taken as spread evenly between min and max; None when the
        statistics cannot tell (no statistics, not numbers, ``starts_with``)."""
        if stats is None or rows <= 0:
            return None
        if not self.may_match(stats, rows):
            return 0.0
        nulls = stats.null_count
        if self.op in ("is_null", "not_null"):
            if nulls is None:
                return None
            return nulls / rows if self.op == "is_null" else 1 - nulls / rows
        lo, hi, value = stats.min, stats.max, self.value
        numbers = (lo, hi) + ((value,) if self.op != "in" else self.values)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in numbers):
            return None
        valid = _valid_share(stats, rows)
        integral = all(isinstance(v, int) for v in numbers)
        step = 1 if integral else 0  # integers: the count of values; else: a length
        span = hi - lo + step
        if span <= 0 or self.op == "ne":
            return valid  # one value in the group (matching, as may_match said)
        if self.op == "eq":
            share = step / span
        elif self.op == "in":
            share = step * sum(1 for v in set(self.values) if lo <= v <= hi) / span
        elif self.op in ("lt", "le"):
            share = (value - lo + (step if self.op == "le" else 0)) / span
        elif self.op in ("gt", "ge"):
            share = (hi - value + (step if self.op == "ge" else 0)) / span
        else:
            return None
        return valid * min(1.0, max(0.0, share))


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

    def match_share(self, stats: Mapping[str, ColumnStats], rows: int) -> float | None:
        """The share of rows matching every condition (None: one of them cannot
        tell): the bounds on one column as one range, columns taken as independent."""
        by_column: dict[str, list[Condition]] = {}
        for c in self.conditions:
            by_column.setdefault(c.column, []).append(c)
        return product_of_shares(
            _column_share(group, stats.get(column), rows) for column, group in by_column.items()
        )


_LOWER, _UPPER = ("gt", "ge"), ("lt", "le")


def _column_share(
    conditions: list[Condition], stats: ColumnStats | None, rows: int
) -> float | None:
    """The share of rows matching all ``conditions`` on one column: a lower and an
    upper bound make a range (P(a and b) = P(a) + P(b) - P(a or b), where a or b is
    every non-NULL row); other conditions are taken as independent."""
    if stats is None:
        return None
    known: list[float] = []
    for c in conditions:
        share = c.match_share(stats, rows)
        if share is None:
            return None
        known.append(share)
    lower = [s for c, s in zip(conditions, known) if c.op in _LOWER]
    upper = [s for c, s in zip(conditions, known) if c.op in _UPPER]
    if not lower or not upper:
        return product_of_shares(known)
    valid = _valid_share(stats, rows)
    ranged = max(0.0, min(lower) + min(upper) - valid)
    others = [s for c, s in zip(conditions, known) if c.op not in _LOWER + _UPPER]
    if valid > 0:
        # Each other condition's share already holds the non-NULL share once.
        others = [s / valid for s in others]
    return product_of_shares([ranged, *others])


def _valid_share(stats: ColumnStats, rows: int) -> float:
    """The share of ``rows`` that is not NULL (all, when nulls are not counted)."""
    return 1.0 if stats.null_count is None else 1 - stats.null_count / rows


def product_of_shares(shares: Iterable[float | None]) -> float | None:
    out = 1.0
    for share in shares:
        if share is None:
            return None
        out *= share
    return out
