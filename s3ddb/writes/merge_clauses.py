"""What a merge does with each row: the clauses of ``merge_insert``, one place.

A merge pairs source rows with target rows by key. Each pair, and each row left
unpaired, gets one outcome:

* a **matched** pair (a target row whose key a source row holds): *fail* if
  ``when_matched_fail()`` is set; else *delete* the target row if
  ``when_matched_delete`` is set and its condition holds; else *update* it (replace
  it by the source row) if ``when_matched_update_all`` is set and its condition holds;
  else keep it;
* a source row matching no target row: *insert* it if
  ``when_not_matched_insert_all`` is set and its condition holds;
* a target row matching no source row: *delete* it if
  ``when_not_matched_by_source_delete`` is set and its condition holds.

Conditions are SQL over ``source.<col>`` and ``target.<col>`` (insert: ``source``
only; by-source delete: the target's columns, bare as in pylance, or as
``target.<col>``). A source column the target lacks (e.g. the ``op`` column of a
change feed) may be read by conditions and is never written; one no condition reads
is refused, since it would be silently dropped.

The same compiled clauses decide the outcome in a single process
(:mod:`s3ddb.writes.merge_insert`) and in Spark tasks (:mod:`s3ddb.spark_ext.merge`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from s3ddb.errors import (
    ColumnNotFoundError,
    DuplicateKeyError,
    InvalidExpressionError,
    InvalidInputError,
    MatchedRowError,
    SchemaMismatchError,
)
from s3ddb.expressions import parse_predicate
from s3ddb.expressions.conditions import Condition as PushedCondition
from s3ddb.expressions.conditions import PushedFilters
from s3ddb.format.keys import key_hashes
from s3ddb.format.row_evaluation import evaluate
from s3ddb.format.rowgroups import RowGroupPredicate

__all__ = [
    "DELETE",
    "KEEP",
    "UPDATE",
    "CompiledClauses",
    "Condition",
    "MergeClauses",
    "check_clauses",
    "check_unique_keys",
    "describe_key",
    "duplicate_key_error",
    "key_range_pruner",
    "matched_row_error",
]

#: Outcomes of a matched pair.
KEEP, UPDATE, DELETE = 0, 1, 2

#: A clause's condition: SQL text, a pyarrow Expression, or None (always).
Condition: TypeAlias = "str | pc.Expression | None"


@dataclass(frozen=True)
class MergeClauses:
    """The clauses of one merge, as configured (nothing compiled yet).

    ``on`` are the key columns. Each clause is off, on (condition None), or on with a
    condition (SQL text or a pyarrow Expression over the struct columns ``source``
    and ``target``).
    """

    on: tuple[str, ...]
    update: bool = False
    update_condition: Condition = None
    delete: bool = False
    delete_condition: Condition = None
    fail: bool = False
    insert: bool = False
    insert_condition: Condition = None
    delete_by_source: bool = False
    by_source_condition: Condition = None

    def describe(self) -> str:
        """One line for the history: the keys and the clauses set."""
        parts = []
        if self.fail:
            parts.append("when matched fail")
        if self.delete:
            parts.append("when matched delete" + _if(self.delete_condition))
        if self.update:
            parts.append("when matched update all" + _if(self.update_condition))
        if self.insert:
            parts.append("when not matched insert all" + _if(self.insert_condition))
        if self.delete_by_source:
            parts.append("when not matched by source delete" + _if(self.by_source_condition))
        head = f"merge_insert on ({', '.join(self.on)})"
        return f"{head}: {', '.join(parts)}" if parts else head

    @property
    def reads_matched(self) -> bool:
        """Whether matched pairs decide anything (else only the keys are compared)."""
        return self.fail or self.delete or self.update

    @property
    def writes_every_source_row(self) -> bool:
        """Whether a merge that is not refused writes every source row: each matched
        row is updated (unconditionally, with no delete clause) or refuses the merge
        (``when_matched_fail``), and each unmatched one is inserted unconditionally.
        Which rows are written then needs no join, only whether the merge is refused."""
        matched_written = self.fail or (
            self.update and self.update_condition is None and not self.delete
        )
        return matched_written and self.insert and self.insert_condition is None

    def compile(self, target: pa.Schema, source: pa.Schema) -> CompiledClauses:
        """The clauses compiled against the target's schema and the source's (the
        target's columns, in the target's types, plus any columns the target lacks).

        Raises:
            ColumnNotFoundError, InvalidExpressionError: a condition that does not
                compile (an unknown column, bad SQL, not boolean).
            SchemaMismatchError: a source column the target lacks is read by no
                condition.
        """
        pair = pa.schema([_struct_field("target", target), _struct_field("source", source)])
        only_source = pa.schema([_struct_field("source", source)])
        update = _compile(self.update_condition, pair, "when_matched_update_all")
        delete = _compile(self.delete_condition, pair, "when_matched_delete")
        insert = _compile(self.insert_condition, only_source, "when_not_matched_insert_all")
        by_source, by_source_bare = _compile_by_source(self.by_source_condition, target)
        target_read = set(self.on)
        source_read: set[str] = set()
        for expr in (update, delete):
            if expr is not None:
                target_read |= _fields_read(expr, pair, "target")
                source_read |= _fields_read(expr, pair, "source")
        if insert is not None:
            source_read |= _fields_read(insert, only_source, "source")
        if by_source is not None:
            if by_source_bare:
                target_read |= _columns_read(by_source, target)
            else:
                target_read |= _fields_read(by_source, pa.schema([pair.field("target")]), "target")
        extras = [n for n in source.names if n not in set(target.names)]
        unread = [n for n in extras if n not in source_read]
        if unread:
            raise SchemaMismatchError(
                f"merge_insert source has unexpected columns {unread} (the dataset lacks "
                "them). A source column the dataset lacks may only be read by a condition "
                "(e.g. when_matched_delete(\"source.op = 'D'\")); it is never written"
            )
        return CompiledClauses(
            self,
            update,
            delete,
            insert,
            by_source,
            by_source_bare,
            target_columns=[n for n in target.names if n in target_read],
            source_extras=extras,
        )


@dataclass(frozen=True)
class CompiledClauses:
    """:class:`MergeClauses` compiled against one target schema: what a scan of the
    target must read, and the outcome of each row."""

    clauses: MergeClauses
    update_expr: pc.Expression | None
    delete_expr: pc.Expression | None
    insert_expr: pc.Expression | None
    by_source_expr: pc.Expression | None
    #: The by-source condition reads bare target columns (not ``target.<col>``).
    by_source_bare: bool
    #: Target columns the outcome depends on, in schema order (the keys included).
    target_columns: list[str]
    #: Source columns the target lacks (read by conditions, never written).
    source_extras: list[str]

    def matched(self, source: pa.Table, target: pa.Table) -> np.ndarray:
        """The outcome (:data:`KEEP`, :data:`UPDATE`, :data:`DELETE`) of each matched
        pair: row i of ``source`` matched row i of ``target`` (which holds at least
        :attr:`target_columns`).

        Raises:
            MatchedRowError: ``when_matched_fail()`` and there is a pair (names its key).
            InvalidExpressionError: evaluating a condition failed.
        """
        c = self.clauses
        n = source.num_rows
        outcome = np.full(n, KEEP, dtype=np.int8)
        if n == 0:
            return outcome
        if c.fail:
            raise matched_row_error(source, c.on, 0)
        pairs = None
        if self.update_expr is not None or self.delete_expr is not None:
            pairs = pa.table({"target": _struct(target), "source": _struct(source)})
        if c.update:
            outcome[_holds(pairs, self.update_expr, n)] = UPDATE
        if c.delete:
            outcome[_holds(pairs, self.delete_expr, n)] = DELETE
        return outcome

    def inserted(self, source: pa.Table) -> np.ndarray:
        """Which unmatched source rows are inserted (a boolean mask).

        Raises:
            InvalidExpressionError: evaluating the condition failed.
        """
        n = source.num_rows
        if not self.clauses.insert:
            return np.zeros(n, dtype=bool)
        table = pa.table({"source": _struct(source)}) if self.insert_expr is not None else None
        return _holds(table, self.insert_expr, n)

    def deleted_by_source(self, target: pa.Table) -> np.ndarray:
        """Which unmatched target rows are deleted (a boolean mask).

        Raises:
            InvalidExpressionError: evaluating the condition failed.
        """
        n = target.num_rows
        if not self.clauses.delete_by_source:
            return np.zeros(n, dtype=bool)
        if self.by_source_expr is None:
            return np.ones(n, dtype=bool)
        table = target if self.by_source_bare else pa.table({"target": _struct(target)})
        return _holds(table, self.by_source_expr, n)


def check_unique_keys(source: pa.Table, keys: Sequence[str]) -> None:
    """Raises:
    DuplicateKeyError: two rows of ``source`` hold one (non-NULL) key; the message
        names it.
    """
    hashes = np.asarray(key_hashes(source, list(keys)), dtype=np.uint64)
    if len(hashes) == len(np.unique(hashes)):
        return
    counts = source.group_by(list(keys), use_threads=False).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1)).slice(0, 1)
    raise duplicate_key_error(dup, keys, 0) if dup.num_rows else duplicate_key_error(None, keys, 0)


def duplicate_key_error(table: pa.Table | None, keys: Sequence[str], row: int) -> DuplicateKeyError:
    """The refusal of a source holding the key of ``table``'s row ``row`` twice
    (None: a key not known)."""
    key = describe_key(table, keys, row) if table is not None else "?"
    return DuplicateKeyError(
        f"merge_insert source has more than one row for key {key}: which one should win "
        "is ambiguous; nothing was committed"
    )


def matched_row_error(table: pa.Table, keys: Sequence[str], row: int) -> MatchedRowError:
    """The refusal, by ``when_matched_fail()``, of the source row ``row`` of ``table``
    whose key the target holds."""
    return MatchedRowError(
        f"merge_insert: the target holds key {describe_key(table, keys, row)}, and "
        "when_matched_fail() refuses a source row whose key the target holds; "
        "nothing was committed"
    )


def key_range_pruner(bounds: Iterable[tuple[str, Any, Any]]) -> RowGroupPredicate | None:
    """Statistics test for "may hold a key within every ``(column, low, high)``
    bound" (fragments and row groups that fail it hold no key of the source); None
    when there is no bound."""
    conditions = tuple(
        c
        for name, low, high in bounds
        for c in (PushedCondition("ge", name, low), PushedCondition("le", name, high))
    )
    return PushedFilters(conditions).may_match if conditions else None


def describe_key(table: pa.Table, keys: Sequence[str], row: int) -> str:
    """``(id=3, region='eu')``: the key of ``table``'s row ``row``."""
    values = [f"{k}={table.column(k)[row].as_py()!r}" for k in keys]
    return f"({', '.join(values)})"


def _if(condition: Condition) -> str:
    return "" if condition is None else f" if {condition}"


def _struct_field(name: str, schema: pa.Schema) -> pa.Field:
    return pa.field(name, pa.struct([f.with_nullable(True) for f in schema]))


def _struct(table: pa.Table) -> pa.StructArray:
    columns = [c.combine_chunks() for c in table.columns]
    fields = [f.with_nullable(True) for f in table.schema]
    if not columns:
        return pa.array([{}] * table.num_rows, pa.struct([]))
    return pa.StructArray.from_arrays(columns, fields=fields)


def _compile(condition: Condition, schema: pa.Schema, clause: str) -> pc.Expression | None:
    if condition is None:
        return None
    try:
        return parse_predicate(condition, schema)
    except (ColumnNotFoundError, InvalidExpressionError) as exc:
        sides = " and ".join(f"{n}.<col>" for n in schema.names)
        raise type(exc)(f"{clause} condition (SQL over {sides}): {exc}") from exc


def _compile_by_source(
    condition: Condition, target: pa.Schema
) -> tuple[pc.Expression | None, bool]:
    """The by-source condition over bare target columns (pylance's form), else over
    ``target.<col>``; and whether it is the bare form."""
    if condition is None:
        return None, True
    try:
        return parse_predicate(condition, target), True
    except ColumnNotFoundError:
        if isinstance(condition, pc.Expression):
            raise
    prefixed = pa.schema([_struct_field("target", target)])
    return _compile(condition, prefixed, "when_not_matched_by_source_delete"), False


def _binds(expr: pc.Expression, schema: pa.Schema) -> bool:
    try:
        pads.dataset(schema.empty_table()).to_table(columns={"v": expr})
    except (pa.ArrowException, ValueError, TypeError):
        return False
    return True


def _columns_read(expr: pc.Expression, schema: pa.Schema) -> set[str]:
    return _fields_read(expr, pa.schema([_struct_field("_", schema)]), "_", bare=schema)


def _fields_read(
    expr: pc.Expression, schema: pa.Schema, side: str, bare: pa.Schema | None = None
) -> set[str]:
    """The fields of the struct column ``side`` (or, with ``bare``, the top-level
    columns of ``bare``) that ``expr`` reads: pyarrow cannot walk an expression, so
    fields are found by bisection, binding without a group of them."""
    if bare is not None:
        names = bare.names

        def without(skip: set[str]) -> pa.Schema:
            return pa.schema([f for f in bare if f.name not in skip])
    else:
        struct = schema.field(side).type
        names = [struct.field(i).name for i in range(struct.num_fields)]

        def without(skip: set[str]) -> pa.Schema:
            kept = pa.struct([f for f in struct if f.name not in skip])
            return pa.schema([pa.field(side, kept) if f.name == side else f for f in schema])

    found: set[str] = set()

    def search(group: list[str]) -> None:
        if not group or _binds(expr, without(set(group))):
            return
        if len(group) == 1:
            found.add(group[0])
            return
        half = len(group) // 2
        search(group[:half])
        search(group[half:])

    search(list(names))
    return found


def _holds(table: pa.Table | None, expr: pc.Expression | None, n: int) -> np.ndarray:
    """Where ``expr`` is TRUE over ``table`` (NULL counts as false); every row when
    ``expr`` is None."""
    if expr is None or table is None:
        return np.ones(n, dtype=bool)
    mask = evaluate(table, {"m": expr}, f"the condition {expr}").column("m")
    mask = pc.fill_null(mask.cast(pa.bool_()), False)
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def check_clauses(clauses: MergeClauses) -> None:
    """Raises:
    InvalidInputError: no key column, or ``on`` names one twice.
    """
    if not clauses.on or not all(isinstance(k, str) and k for k in clauses.on):
        raise InvalidInputError("merge_insert(on=...) needs one or more key column names")
    if len(set(clauses.on)) != len(clauses.on):
        raise InvalidInputError(f"merge_insert(on=...) names a key column twice: {clauses.on}")
