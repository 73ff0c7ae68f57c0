"""Reading a pinned version: the rows of ``to_table``, ``to_batches`` and
``count_rows``, fragment by fragment, through an index where one applies."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from s3ddb.errors import ColumnNotFoundError, InvalidInputError, StoredMetadataError
from s3ddb.expressions.compiled import compile_filter
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.row_lineage import (
    ROW_ADDRESS_COLUMNS,
    ROW_CREATED_AT_VERSION,
    ROW_ID,
    RowLineage,
)
from s3ddb.observe import telemetry
from s3ddb.scan import read_visible_rows
from s3ddb.scan.stream import stream_tables
from s3ddb.scan.visible_rows import (
    candidate_fragments,
    empty_table,
    plan_fragment,
    read_with_positions,
)

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


def lineage_columns(ds: PinnedVersion, columns: list[str]) -> list[str]:
    """The row lineage columns (``_rowid``, ``_row_created_at_version``,
    ``_row_last_updated_at_version``) among ``columns``, for a dataset with stable
    row ids (a dataset column of such a name is the column)."""
    if not ds.manifest.stable_row_ids:
        return []
    return [c for c in columns if c in ROW_ADDRESS_COLUMNS and c not in ds.schema.names]


def output_schema(ds: PinnedVersion, columns: list[str]) -> pa.Schema:
    """The schema of rows of ``columns`` (resolved) read from ``ds``."""
    lineage = set(lineage_columns(ds, columns))
    return pa.schema(
        [pa.field(n, pa.uint64()) if n in lineage else ds.schema.field(n) for n in columns]
    )


def resolve_columns(ds: PinnedVersion, columns: list[str] | None) -> list[str]:
    """``columns`` checked against the schema (all columns if None). A dataset
    with stable row ids also has ``_rowid``, ``_row_created_at_version`` and
    ``_row_last_updated_at_version`` (uint64) when asked for by name.

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
    lineage = lineage_columns(ds, columns)
    missing = [c for c in columns if c not in ds.schema.names and c not in lineage]
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
        self.lineage = lineage_columns(ds, self.columns)
        self._indexed = self._plan_index()

    @property
    def schema(self) -> pa.Schema:
        """The schema of the rows this read returns."""
        return output_schema(self._ds, self.columns)

    def _plan_index(self) -> IndexedScan | None:
        if self.filter is None or not self._ds.manifest.indices or self.lineage:
            # (A read of row lineage reads each fragment with the rows' positions.)
            return None
        from s3ddb.index.query import plan_indexed_scan

        return plan_indexed_scan(self._ds.handler.store, self._ds.manifest, self.filter)

    def fragment(self, fragment: FragmentMetadata, columns: list[str] | None = None) -> pa.Table:
        """The visible rows of ``fragment`` that match the filter."""
        names = self.columns if columns is None else columns
        if any(n in self.lineage for n in names):
            return self._with_lineage(fragment, names)
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
        if any(n in self.lineage for n in names):
            yield from self._lineage_tables(readahead, names)
            return
        if self._indexed is not None:
            yield from self._fragment_tables(
                readahead, names, iter(self._indexed.fragments_to_read())
            )
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
            match_share=self.filter.match_share if self.filter is not None else None,
        )

    def _fragment_tables(
        self, readahead: int, names: list[str], fragments: Iterator[FragmentMetadata]
    ) -> Iterator[pa.Table]:
        # Fragment by fragment, ``readahead`` fragments ahead (through an index: only
        # fragments the index does not cover and those it found rows in).
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

    def _lineage_tables(self, readahead: int, names: list[str]) -> Iterator[pa.Table]:
        """Fragment by fragment, with row lineage: no id twice in the version.

        Raises:
            StoredMetadataError: two rows of the version have one id.
        """
        manifest = self._ds.manifest
        fragments = candidate_fragments(manifest.fragments, manifest.schema, self.may_match)
        seen = BitMap64()
        for table in self._fragment_tables(readahead, names, iter(fragments)):
            if ROW_ID in names and table.num_rows:
                ids = BitMap64(table.column(ROW_ID).to_numpy())
                if len(ids) != table.num_rows or seen.intersect(ids):
                    raise StoredMetadataError(
                        f"version {manifest.version} of {self._ds.uri}: a row id is held by "
                        "two rows (the manifests' row_id_sequence is corrupt)"
                    )
                seen |= ids
            yield table

    def _with_lineage(self, fragment: FragmentMetadata, names: list[str]) -> pa.Table:
        """The visible rows of ``fragment`` matching the filter, with row lineage.

        Raises:
            StoredMetadataError: the fragment's lineage is missing, malformed, or has
                an id the manifest never allocated (named).
        """
        manifest = self._ds.manifest
        data = [n for n in names if n not in self.lineage]
        plan = plan_fragment(self._ds.files(), fragment, manifest.schema, self.may_match)
        if plan is None:
            table, positions = empty_table(manifest.schema, data), np.empty(0, np.int64)
        else:
            table, positions = read_with_positions(plan, manifest.schema, data, self.predicate)
        where = f"{self._ds.uri}, version {manifest.version}, fragment {fragment.id}"
        if fragment.physical_rows and not (
            fragment.row_ids and fragment.created_at and fragment.updated_at
        ):
            raise StoredMetadataError(f"{where}: no row ids in a dataset with stable row ids")
        try:
            lineage = RowLineage.of(fragment).take(positions)
        except StoredMetadataError as exc:
            raise StoredMetadataError(f"{where}: {exc}") from None
        if lineage.ids.size and int(lineage.ids.max()) >= manifest.next_row_id:
            raise StoredMetadataError(
                f"{where}: row id {int(lineage.ids.max())} was never allocated "
                f"(next_row_id {manifest.next_row_id})"
            )
        latest = max(int(lineage.created.max(initial=0)), int(lineage.updated.max(initial=0)))
        if latest > manifest.version:
            raise StoredMetadataError(f"{where}: a row version {latest} is after the manifest's")
        values = {
            ROW_ID: lineage.ids,
            ROW_CREATED_AT_VERSION: lineage.created,
        }
        arrays = []
        for name in names:
            if name not in self.lineage:
                arrays.append(table.column(name))
            else:
                chosen = values.get(name, lineage.updated)
                arrays.append(pa.array(chosen.astype(np.uint64), pa.uint64()))
        schema = output_schema(self._ds, names)
        return pa.Table.from_arrays(arrays, schema=schema)

    def count(self) -> int:
        """How many rows match the filter (no column is read for them)."""
        if self.predicate is None:
            return self._ds.manifest.num_rows
        return sum(t.num_rows for t in self.tables(columns=[]))
