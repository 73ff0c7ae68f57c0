"""Using a scalar index for a filter.

A filter can use a BTREE index when it is SQL text whose top-level AND holds, on the
indexed column, an equality, an ``IN`` list, a comparison or a ``BETWEEN`` with
literals. The index then gives, per covered fragment, the row offsets whose key
satisfies those conjuncts; only the data row groups holding them are read, deletion
files are applied and the *whole* filter is evaluated again on the rows read, so the
result is exactly that of a scan. Fragments the index does not cover (appended,
compacted or rewritten since it was built) are scanned as usual.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from s3ddb.errors import InvalidInputError
from s3ddb.expressions import (
    S3DDBDialect,
    parse_predicate,
    parse_sql_tree,
    parse_value_expression,
)
from s3ddb.format.bases import FileResolver
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment import FragmentMetadata
from s3ddb.format.index import IndexMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.rows import evaluate, filter_rows
from s3ddb.index.btree import Condition, KeyRange, KeySet, indexed_column, is_btree, lookup
from s3ddb.io.object_store import ObjectStore
from s3ddb.scan import read_rows_at

__all__ = [
    "IndexedScan",
    "lookup_keys",
    "plan_indexed_scan",
    "usable_index",
]

_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ}


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The terms of the top-level AND (the node itself if it is none), without
    recursion: a filter may AND thousands of terms."""
    out: list[exp.Expr] = []
    stack = [node]
    while stack:
        node = stack.pop()
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.And):
            stack.extend(reversed(list(node.flatten())))
        else:
            out.append(node)
    return out


def _column_name(node: exp.Expr, names: list[str]) -> str | None:
    if isinstance(node, exp.Column) and not node.table and node.name in names:
        return str(node.name)
    return None


def _literal(node: exp.Expr, schema: pa.Schema, column: str) -> Any:
    """The value of a constant node as the column's type (raises if it is not one)."""
    if not isinstance(node, (exp.Literal, exp.Neg, exp.Cast, exp.Boolean)):
        raise InvalidInputError("not a literal")
    data_type = schema.field(column).type
    expr = parse_value_expression(node.sql(dialect=S3DDBDialect), schema, target_type=data_type)
    value = evaluate(pa.table({"_": [0]}), {"v": expr}).column(0)[0]
    if not value.is_valid:
        raise InvalidInputError("NULL literal")
    return value.as_py()


def _condition(node: exp.Expr, schema: pa.Schema) -> tuple[str, Condition] | None:
    """(column, condition) if ``node`` is a usable comparison of a column and literals."""
    names = list(schema.names)
    try:
        if isinstance(node, exp.In) and not node.args.get("query"):
            column = _column_name(node.this, names)
            if column is None:
                return None
            values = sorted({_literal(v, schema, column) for v in node.expressions})
            return column, KeySet(tuple(values))
        if isinstance(node, exp.Between):
            column = _column_name(node.this, names)
            if column is None:
                return None
            lo = _literal(node.args["low"], schema, column)
            hi = _literal(node.args["high"], schema, column)
            return column, KeyRange(lo, hi)
        kind = type(node)
        if kind not in _FLIP:
            return None
        assert isinstance(node, exp.Binary)
        left, right = node.left, node.right
        column = _column_name(left, names)
        if column is None:
            column, left, right, kind = _column_name(right, names), right, left, _FLIP[kind]
        if column is None:
            return None
        value = _literal(right, schema, column)
    except (InvalidInputError, KeyError, TypeError, pa.ArrowException):
        return None
    if kind is exp.EQ:
        return column, KeySet((value,))
    if kind in (exp.GT, exp.GTE):
        return column, KeyRange(lo=value, lo_inclusive=kind is exp.GTE)
    return column, KeyRange(hi=value, hi_inclusive=kind is exp.LTE)


@dataclass
class IndexedScan:
    """The fragments an index lookup answered for one filter, and how to read them.

    Attributes:
        index: the index used.
        offsets: per covered fragment, the row offsets its key conditions match.
        row_groups_read: data row groups read through the index so far (a counter
            for tests and benchmarks).
    """

    index: IndexMetadata
    offsets: dict[int, np.ndarray]
    predicate: pc.Expression
    store: ObjectStore
    manifest: Manifest
    row_groups_read: int = 0
    _covered: frozenset[int] = field(default_factory=frozenset)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @functools.cached_property
    def files(self) -> FileResolver:
        """Where the fragments' files are (the dataset's root and its base paths)."""
        return FileResolver.for_manifest(self.store, self.manifest)

    def covers(self, fragment: FragmentMetadata) -> bool:
        return fragment.id in self._covered

    def read(self, fragment: FragmentMetadata, columns: list[str]) -> pa.Table | None:
        """The visible rows of ``fragment`` matching the filter, or None if the index
        does not cover it (the caller scans it)."""
        if fragment.id not in self._covered:
            return None
        offsets = self.offsets.get(fragment.id)
        if offsets is not None and fragment.deletion_file is not None:
            deleted = read_deleted_rows(self.files, fragment)
            offsets = offsets[~np.isin(offsets, np.fromiter(deleted, np.int64, len(deleted)))]
        schema = self.manifest.schema
        from s3ddb.expressions import referenced_columns

        needed = list(columns) + [
            c for c in sorted(referenced_columns(self.predicate, schema.arrow)) if c not in columns
        ]
        if offsets is None or len(offsets) == 0:
            return pa.schema([schema.arrow.field(n) for n in columns]).empty_table()
        table, groups = read_rows_at(self.files, fragment, schema, needed, offsets)
        with self._lock:  # fragments are read in parallel
            self.row_groups_read += groups
        return filter_rows(table, self.predicate).select(columns)


def usable_index(
    manifest: Manifest, text: str
) -> tuple[IndexMetadata, str, list[Condition], pc.Expression] | None:
    """The first index a filter text can use, its column, the key conditions and their
    predicate (over that column alone); None if none can be used."""
    indexed: dict[str, IndexMetadata] = {}
    for index in manifest.indices:
        column = indexed_column(manifest, index) if index.fragment_ids else None
        if column is not None:
            indexed.setdefault(column, index)
    if not indexed:
        return None
    try:
        tree = parse_sql_tree(text)
    except InvalidInputError:
        return None
    found: dict[str, list[tuple[exp.Expr, Condition]]] = {}
    for node in _conjuncts(tree):
        parsed = _condition(node, manifest.schema.arrow)
        if parsed is not None and parsed[0] in indexed:
            found.setdefault(parsed[0], []).append((node, parsed[1]))
    for column, pairs in found.items():
        # No parentheses: the terms are comparisons, IN and BETWEEN, which bind
        # tighter than AND, and the text stays within the limits the whole filter met.
        sql = " AND ".join(n.sql(dialect=S3DDBDialect) for n, _c in pairs)
        try:
            exact = parse_predicate(sql, manifest.schema.arrow)
        except InvalidInputError:
            return None  # the filter itself compiled: scanning gives its answer
        return indexed[column], column, [c for _n, c in pairs], exact
    return None


def plan_indexed_scan(
    store: ObjectStore,
    manifest: Manifest,
    text: Any,
    predicate: pc.Expression | None,
) -> IndexedScan | None:
    """Look the filter's keys up in an index of ``manifest``, if one applies.

    ``text`` is the filter as given (only SQL text is analysed); ``predicate`` is
    the compiled filter, re-applied to every row read.
    """
    if not isinstance(text, str) or predicate is None or not manifest.indices:
        return None
    usable = usable_index(manifest, text)
    if usable is None:
        return None
    index, column, conditions, exact = usable
    present = {f.id: f.physical_rows for f in manifest.fragments}
    covered = frozenset(index.fragment_ids & present.keys())
    offsets = lookup(store, index, conditions, exact, column, {i: present[i] for i in covered})
    return IndexedScan(index, offsets, predicate, store, manifest, _covered=covered)


def lookup_keys(
    store: ObjectStore, manifest: Manifest, column: str, keys: pa.ChunkedArray | pa.Array
) -> tuple[frozenset[int], dict[int, np.ndarray]] | None:
    """For merge_insert: the fragments an index of ``column`` covers, and in them the
    row offsets holding one of ``keys``; None if no index of ``column`` applies."""
    field_id = manifest.schema.field_id(column)
    index = next(
        (i for i in manifest.indices if is_btree(i) and i.fields == (field_id,) and i.fragment_ids),
        None,
    )
    if index is None:
        return None
    values = pa.chunked_array([keys]) if isinstance(keys, pa.Array) else keys
    values = pc.drop_null(values).combine_chunks()
    present = {f.id: f.physical_rows for f in manifest.fragments}
    covered = frozenset(index.fragment_ids & present.keys())
    wanted = KeySet(tuple(sorted(set(values.to_pylist()))))
    exact = pc.is_in(pc.field(column), value_set=values)
    return covered, lookup(store, index, [wanted], exact, column, {i: present[i] for i in covered})
