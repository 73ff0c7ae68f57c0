"""Using a scalar index for a filter.

A filter can use a BTREE index when its top-level AND holds, on the indexed column, an
equality, an ``IN`` list, a comparison or a ``BETWEEN`` with literals (SQL text), or
the same as a pyarrow Expression (``equal``, ``less``... of the column and a literal,
``is_in``): the compiled filter's index terms
(:meth:`s3ddb.expressions.compiled.CompiledFilter.index_terms`). The index then gives,
per covered fragment, the row offsets whose key satisfies those terms; only the data
row groups holding them are read, deletion files are applied and the *whole* filter
is evaluated again on the rows read, so the result is exactly that of a scan.
Fragments the index does not cover (appended, compacted or rewritten since it was
built) are scanned as usual.
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.expressions.compiled import CompiledFilter, IndexTerm
from s3ddb.format.bases import FileResolver
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.index import IndexMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_evaluation import filter_rows
from s3ddb.index.btree import (
    Condition,
    KeyRange,
    KeySet,
    check_keys_at,
    index_file_name,
    indexed_column,
    is_btree,
    lookup,
)
from s3ddb.io.object_store import ObjectStore
from s3ddb.scan import read_rows_at

__all__ = [
    "IndexedScan",
    "KeyLookup",
    "lookup_keys",
    "plan_indexed_scan",
    "usable_index",
]


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
    #: The indexed column and the predicate its keys were looked up with: every row
    #: read at the index's offsets must satisfy it (see ``check_keys_at``).
    column: str = ""
    key_predicate: pc.Expression | None = None
    row_groups_read: int = 0
    _covered: frozenset[int] = field(default_factory=frozenset)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @functools.cached_property
    def files(self) -> FileResolver:
        """Where the fragments' files are (the dataset's root and its base paths)."""
        return FileResolver.for_manifest(self.store, self.manifest)

    def covers(self, fragment: FragmentMetadata) -> bool:
        return fragment.id in self._covered

    def fragments_to_read(self) -> list[FragmentMetadata]:
        """The version's fragments, in order, that the scan must read: those the index
        does not cover, and those it found rows in. The chunks of a fragment list
        (format 2) whose id range the index covers whole, with no row found in it,
        are never fetched."""
        covered, found = self._covered, self.offsets.keys()

        def chunk_needed(ref: Any) -> bool:
            low, high = ref.min_fragment_id, ref.max_fragment_id
            if ref.may_hold(found) or high - low + 1 > 4 * ref.fragment_count:
                return True  # (sparse ids: not worth proving the range is covered)
            return not all(i in covered for i in range(low, high + 1))

        listed = self.manifest.fragments.matching(chunk_needed)
        return [f for f in listed if f.id not in covered or f.id in found]

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
        if self.key_predicate is not None and self.column not in needed:
            needed.append(self.column)
        table, groups = read_rows_at(self.files, fragment, schema, needed, offsets)
        with self._lock:  # fragments are read in parallel
            self.row_groups_read += groups
        if self.key_predicate is not None:
            where = index_file_name(self.store, self.index)
            check_keys_at(
                table.column(self.column), self.key_predicate, self.column, where, fragment.id
            )
        return filter_rows(table, self.predicate).select(columns)


def _key_condition(term: IndexTerm) -> Condition:
    if term.keys is not None:
        return KeySet(term.keys)
    return KeyRange(term.lo, term.hi, term.lo_inclusive, term.hi_inclusive)


def usable_index(
    manifest: Manifest, compiled: CompiledFilter
) -> tuple[IndexMetadata, str, list[Condition], pc.Expression] | None:
    """The first index a compiled filter can use, its column, the key conditions and
    their predicate (over that column alone); None if none can be used."""
    indexed: dict[str, IndexMetadata] = {}
    for index in manifest.indices:
        column = indexed_column(manifest, index) if index.fragment_ids else None
        if column is not None:
            indexed.setdefault(column, index)
    if not indexed:
        return None
    terms = compiled.index_terms(indexed.keys())
    if not terms:
        return None
    column = terms[0].column  # the indexed column the filter names first
    chosen = [t for t in terms if t.column == column]
    exact = functools.reduce(operator.and_, [t.expression for t in chosen])
    return indexed[column], column, [_key_condition(t) for t in chosen], exact


def plan_indexed_scan(
    store: ObjectStore, manifest: Manifest, compiled: CompiledFilter | None
) -> IndexedScan | None:
    """Look the filter's keys up in an index of ``manifest``, if one applies.

    ``compiled.predicate``, the whole filter, is re-applied to every row read.
    """
    if compiled is None or not manifest.indices:
        return None
    usable = usable_index(manifest, compiled)
    if usable is None:
        return None
    index, column, conditions, exact = usable
    key_type = manifest.schema.arrow.field(column).type
    offsets = lookup(store, index, conditions, exact, column, _rows_of(manifest), key_type)
    return IndexedScan(
        index,
        offsets,
        compiled.predicate,
        store,
        manifest,
        column=column,
        key_predicate=exact,
        _covered=index.fragment_ids,
    )


def _rows_of(manifest: Manifest) -> Callable[[set[int]], dict[int, int]]:
    """Physical rows of the fragments among some ids that ``manifest`` lists (only
    the chunks that may hold them are fetched)."""

    def rows_of(ids: set[int]) -> dict[int, int]:
        return {fid: f.physical_rows for fid, f in manifest.fragments.select(ids).items()}

    return rows_of


@dataclass(frozen=True)
class KeyLookup:
    """For merge_insert: what an index of its key column gave for the source's keys.

    Attributes:
        covered: the fragments the index covers (ids no longer listed are harmless:
            callers test listed fragments).
        offsets: per covered fragment, the row offsets holding one of the keys.
    """

    covered: frozenset[int]
    offsets: dict[int, np.ndarray]
    column: str
    key_predicate: pc.Expression
    where: str

    def check(self, read: pa.ChunkedArray | pa.Array, fragment: int) -> None:
        """Check that the key values ``read`` at :attr:`offsets` of ``fragment`` are
        the source's keys (the index points no key at another row).

        Raises:
            StoredMetadataError: one is not.
        """
        check_keys_at(read, self.key_predicate, self.column, self.where, fragment)


def lookup_keys(
    store: ObjectStore, manifest: Manifest, column: str, keys: pa.ChunkedArray | pa.Array
) -> KeyLookup | None:
    """For merge_insert: the fragments an index of ``column`` covers, and in them the
    row offsets holding one of ``keys``; None if no index of ``column`` applies. The
    caller checks the rows it reads there hold those keys (:meth:`KeyLookup.check`)."""
    field_id = manifest.schema.field_id(column)
    index = next(
        (i for i in manifest.indices if is_btree(i) and i.fields == (field_id,) and i.fragment_ids),
        None,
    )
    if index is None:
        return None
    values = pa.chunked_array([keys]) if isinstance(keys, pa.Array) else keys
    values = pc.drop_null(values).combine_chunks()
    wanted = KeySet(tuple(sorted(set(values.to_pylist()))))
    exact = pc.is_in(pc.field(column), value_set=values)
    key_type = manifest.schema.arrow.field(column).type
    offsets = lookup(store, index, [wanted], exact, column, _rows_of(manifest), key_type)
    return KeyLookup(index.fragment_ids, offsets, column, exact, index_file_name(store, index))
