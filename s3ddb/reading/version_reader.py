"""Reading a pinned version: the rows of ``to_table``, ``to_batches`` and
``count_rows``, fragment by fragment, through an index where one applies."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.errors import ColumnNotFoundError, InvalidInputError
from s3ddb.expressions.compiled import compile_filter
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.observe import telemetry
from s3ddb.scan import read_visible_rows
from s3ddb.scan.stream import stream_tables
from s3ddb.scan.visible_rows import candidate_fragments

if TYPE_CHECKING:
    from s3ddb.index.query import IndexedScan
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "DEFAULT_READAHEAD",
    "DEFAULT_READAHEAD_BYTES",
    "Filter",
    "VersionReader",
    "resolve_columns",
]

Filter: TypeAlias = str | pc.Expression | None

#: Threads planning and reading ahead of the consumer.
DEFAULT_READAHEAD = 4
#: Decoded bytes of column data that reads in flight may hold (the read-ahead budget).
DEFAULT_READAHEAD_BYTES = 256 * 1024 * 1024


def resolve_columns(ds: PinnedVersion, columns: list[str] | None) -> list[str]:
    """``columns`` checked against the schema (all columns if None).

    Raises:
        InvalidInputError: a string instead of a list, or a name given twice (a table
            cannot hold two columns of one name; pylance refuses them too).
        ColumnNotFoundError: an unknown column.
    """
    if columns is None:
        return list(ds.schema.names)
    if isinstance(columns, str):
        raise InvalidInputError("columns must be a list of names, not a string")
    columns = list(columns)
    missing = [c for c in columns if c not in ds.schema.names]
    if missing:
        raise ColumnNotFoundError(
            f"no column(s) {missing} in {ds.uri}; columns are {ds.schema.names}"
        )
    twice = sorted(c for c, n in Counter(columns).items() if n > 1)
    if twice:
        raise InvalidInputError(f"column(s) {twice} given more than once in columns={columns!r}")
    return list(columns)


class VersionReader:
    """One read of a pinned version: its columns, compiled filter and index lookup."""

    def __init__(self, ds: PinnedVersion, columns: list[str] | None, filter: Filter) -> None:
        self._ds = ds
        self.columns = resolve_columns(ds, columns)
        # One parse gives the exact predicate, the pruning and the index terms.
        self.filter = compile_filter(filter, ds.schema) if filter is not None else None
        self.predicate = self.filter.predicate if self.filter is not None else None
        # Row groups the filter's simple AND terms rule out are never read.
        self.may_match = self.filter.may_match if self.filter is not None else None
        self._indexed = self._plan_index()

    def _plan_index(self) -> IndexedScan | None:
        if self.filter is None or not self._ds.manifest.indices:
            return None
        from s3ddb.index.query import plan_indexed_scan

        return plan_indexed_scan(self._ds.handler.store, self._ds.manifest, self.filter)

    def fragment(self, fragment: FragmentMetadata, columns: list[str] | None = None) -> pa.Table:
        """The visible rows of ``fragment`` that match the filter."""
        names = self.columns if columns is None else columns
        if self._indexed is not None:
            table = self._indexed.read(fragment, names)
            if table is not None:
                return table
        manifest = self._ds.manifest
        return read_visible_rows(
            self._ds.files(), fragment, manifest.schema, names, self.predicate, self.may_match
        )

    def tables(
        self,
        readahead: int = DEFAULT_READAHEAD,
        readahead_bytes: int = DEFAULT_READAHEAD_BYTES,
        columns: list[str] | None = None,
    ) -> Iterator[pa.Table]:
        """The matching rows, in order, as tables of a fragment's consecutive row groups.

        ``readahead`` threads plan and read ahead of the consumer: fragments whose
        statistics rule the filter out are never opened; reads in flight hold at most
        about ``readahead_bytes`` of decoded column data (at least one read is
        always in flight), so memory stays bounded by the budget, not the version.
        """
        names = self.columns if columns is None else columns
        if self._indexed is not None:
            yield from self._fragment_tables(readahead, names)
            return
        manifest = self._ds.manifest
        attributes = {"s3ddb.dataset": telemetry.dataset_attribute(self._ds.uri)}
        with telemetry.span("s3ddb.scan", attributes) as span:
            fragments = candidate_fragments(manifest.fragments, manifest.schema, self.may_match)
            span.set_attributes(
                {
                    "s3ddb.version": manifest.version,
                    "s3ddb.fragments": len(fragments),
                    "s3ddb.fragments_pruned": len(manifest.fragments) - len(fragments),
                }
            )
        yield from stream_tables(
            self._ds.files(),
            fragments,
            manifest.schema,
            names,
            self.predicate,
            self.may_match,
            workers=readahead,
            budget=readahead_bytes,
        )

    def _fragment_tables(self, readahead: int, names: list[str]) -> Iterator[pa.Table]:
        # Through an index: fragment by fragment, ``readahead`` fragments ahead; only
        # fragments the index does not cover and those it found rows in.
        assert self._indexed is not None
        fragments = iter(self._indexed.fragments_to_read())
        first = next(fragments, None)
        if first is None:
            return
        if readahead < 1:
            yield self.fragment(first, names)
            for fragment in fragments:
                yield self.fragment(fragment, names)
            return
        with ThreadPoolExecutor(max_workers=readahead) as pool:
            pending = deque([pool.submit(self.fragment, first, names)])
            pending.extend(
                pool.submit(self.fragment, f, names) for f in islice(fragments, readahead - 1)
            )
            while pending:
                table = pending.popleft().result()
                following = next(fragments, None)
                if following is not None:
                    pending.append(pool.submit(self.fragment, following, names))
                yield table

    def count(self) -> int:
        """How many rows match the filter (no column is read for them)."""
        if self.predicate is None:
            return self._ds.manifest.num_rows
        return sum(t.num_rows for t in self.tables(columns=[]))
