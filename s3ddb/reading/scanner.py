"""Scanners: pylance-shaped reads of a pinned version, streamed as Arrow.

A :class:`Scanner` is one planned read (columns, filter, limit, offset) of the version
a Dataset is pinned to. It reads in order through :mod:`s3ddb.scan`: the filter's
simple terms skip whole fragments (by the statistics kept in the manifest) and Parquet
row groups (:mod:`s3ddb.expressions.pruning`), filter columns are read before the others, deletion
files are applied by position, and reads in flight stay within a read-ahead budget in
bytes (``readahead_bytes``), so a stream of it holds a bounded amount of data, never
the whole version. It exports the Arrow PyCapsule
stream interface (``__arrow_c_stream__``): DuckDB, polars and
``pyarrow.RecordBatchReader.from_stream`` read it without a copy of the dataset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from s3ddb.arguments import check_int
from s3ddb.errors import InvalidInputError, UnsupportedOperationError
from s3ddb.format.row_lineage import ROW_ID
from s3ddb.reading.version_reader import (
    DEFAULT_READAHEAD,
    DEFAULT_READAHEAD_BYTES,
    Filter,
    VersionReader,
)

if TYPE_CHECKING:
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "TUNING_OPTIONS",
    "Scanner",
    "positions",
    "require_pandas",
    "take",
]

#: pylance scan options that only tune how a scan runs, never what it returns:
#: accepted and ignored.
TUNING_OPTIONS = frozenset(
    {"batch_readahead", "scan_in_order", "use_stats", "io_buffer_size", "prefilter",
     "late_materialization", "use_scalar_index", "fast_search", "strict_batch_size",
     "batch_size_bytes", "blob_handling", "disable_scoring_autoprojection"}
)  # fmt: skip


def require_pandas() -> None:
    """Check that pandas can be imported, before rows are read for a DataFrame.

    Raises:
        ModuleNotFoundError: it cannot, saying how to install it.
    """
    try:
        import pandas  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            'to_pandas() needs pandas, which is not installed: pip install "s3ddb[pandas]"',
            name="pandas",
        ) from exc


class Scanner:
    """One read of a pinned version. Build with ``Dataset.scanner(...)``."""

    def __init__(
        self,
        ds: PinnedVersion,
        columns: list[str] | None = None,
        filter: Filter = None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int | None = None,
        fragment_readahead: int | None = None,
        readahead_bytes: int | None = None,
        **options: Any,
    ) -> None:
        """Check the read; nothing is read yet.

        Args:
            columns: names to read, in this order (default all). pylance's
                ``{"name": "SQL"}`` projections are not supported.
            filter: SQL text or a pyarrow Expression.
            limit, offset: the slice of the matching rows to return.
            batch_size: maximum rows per batch (default: as stored).
            fragment_readahead: threads planning and reading ahead of the consumer
                (default 4; 0 reads one thing at a time).
            readahead_bytes: the read-ahead budget: decoded column bytes that reads
                in flight may hold (default 256 MiB). Streaming memory stays about
                within twice this, however large the version.
            options: pylance's tuning options (:data:`TUNING_OPTIONS`) are ignored.

        Raises:
            UnsupportedOperationError: a pylance option s3ddb does not implement
                (``nearest``, ``full_text_query``..., ``with_row_id`` on a dataset
                without stable row ids; with them it adds ``_rowid``).
            ColumnNotFoundError, InvalidExpressionError: bad columns or filter.
            InvalidInputError: bad ``limit``, ``offset``, ``batch_size``.
        """
        with_row_id = options.pop("with_row_id", False)
        if with_row_id and ds.manifest.stable_row_ids:
            # pylance's flag: the stable id as a last column (without stable row ids
            # it would be a row address, which s3ddb does not have).
            names = list(ds.schema.names) if columns is None else list(columns)
            columns = names if ROW_ID in names else [*names, ROW_ID]
            with_row_id = False
        if with_row_id:
            raise UnsupportedOperationError(
                "with_row_id needs stable row ids, which this dataset was not written "
                "with (s3ddb has no row addresses): create it with "
                "write_dataset(..., enable_stable_row_ids=True) (docs/pylance.md)"
            )
        unsupported = sorted(k for k, v in options.items() if k not in TUNING_OPTIONS and v)
        if unsupported:
            raise UnsupportedOperationError(
                f"scan option(s) {unsupported} are not supported by s3ddb (docs/pylance.md)"
            )
        if isinstance(columns, dict):
            raise UnsupportedOperationError(
                "column projections ({'name': 'SQL'}) are not supported; pass a list of names"
            )
        for name, value, minimum in (
            ("limit", limit, 0),
            ("offset", offset, 0),
            ("fragment_readahead", fragment_readahead, 0),
            ("readahead_bytes", readahead_bytes, 1),
            ("batch_size", batch_size, 1),
        ):
            if value is not None:
                check_int(name, value, minimum=minimum)
        self._reader = VersionReader(ds, columns, filter)
        self._schema = self._reader.schema
        self._has_filter = filter is not None
        self._ds = ds
        self._limit = limit
        self._offset = offset or 0
        self._batch_size = batch_size
        self._readahead = DEFAULT_READAHEAD if fragment_readahead is None else fragment_readahead
        self._readahead_bytes = (
            DEFAULT_READAHEAD_BYTES if readahead_bytes is None else readahead_bytes
        )

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the rows this scanner returns."""
        return self._schema

    @property
    def dataset_schema(self) -> pa.Schema:
        return self._ds.schema

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The matching rows as record batches, in order; stops reading once
        ``offset + limit`` rows are out."""
        skip, left = self._offset, self._limit
        if left == 0:
            return
        # With a limit, read ahead less: the rows needed may all be in the first reads.
        readahead = self._readahead if left is None else min(self._readahead, 1)
        for table in self._reader.tables(readahead, self._readahead_bytes):
            if skip:
                dropped = min(skip, table.num_rows)
                table, skip = table.slice(dropped), skip - dropped
            if left is not None:
                table = table.slice(0, left)
                left -= table.num_rows
            for batch in table.to_batches(max_chunksize=self._batch_size):
                if batch.num_rows:
                    yield batch
            if left == 0:
                return

    def to_reader(self) -> pa.RecordBatchReader:
        """A RecordBatchReader streaming :meth:`to_batches`."""
        return pa.RecordBatchReader.from_batches(self._schema, self.to_batches())

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream of :meth:`to_batches` (a new stream per call)."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self._schema)

    def to_pandas(self, *, blob_mode: str = "lazy") -> Any:
        """The rows as a pandas DataFrame; pylance's ``blob_mode`` is accepted at its
        default (s3ddb has no blob columns).

        Raises:
            UnsupportedOperationError: another ``blob_mode``.
            ModuleNotFoundError: pandas is not installed (before anything is read).
        """
        if blob_mode != "lazy":
            raise UnsupportedOperationError(
                f"to_pandas(blob_mode={blob_mode!r}) is not supported by s3ddb: it has no"
                " blob columns (docs/pylance.md)"
            )
        require_pandas()
        return self.to_table().to_pandas()

    def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` rows this scanner returns."""
        check_int("num_rows", num_rows, minimum=0)
        left, batches = num_rows, []
        for batch in self.to_batches():
            if left <= 0:
                break
            batches.append(batch.slice(0, left))
            left -= min(left, batch.num_rows)
        return pa.Table.from_batches(batches, schema=self._schema)

    def count_rows(self) -> int:
        """How many rows this scanner returns (no column is read without a filter)."""
        total = self._reader.count() if self._has_filter else self._ds.manifest.num_rows
        total = max(total - self._offset, 0)
        return total if self._limit is None else min(total, self._limit)

    def take(self, indices: Any) -> pa.Table:
        """The rows at 0-based positions ``indices`` of what this scanner returns, in
        the order given (reads the whole result).

        Raises:
            InvalidInputError: a position out of range, or ``indices`` not integers
                (see :func:`positions`).
        """
        table = self.to_table()
        wanted = positions(indices, table.num_rows, "this scan's result")
        if not table.num_columns:  # Arrow's take would lose the row count
            return _rows_without_columns(len(wanted))
        return table.take(pa.array(wanted))

    # pylance scanner members s3ddb does not implement (docs/pylance.md).

    def explain_plan(self, verbose: bool = False) -> str:
        """Raises UnsupportedOperationError: s3ddb has no query plans."""
        raise _unsupported("explain_plan()", "s3ddb plans no queries; it reads fragments")

    def analyze_plan(self, count_rows: bool = False) -> str:
        """Raises UnsupportedOperationError: s3ddb has no query plans."""
        raise _unsupported("analyze_plan()", "s3ddb plans no queries; it reads fragments")

    def scan_batches(self) -> Any:
        """Raises UnsupportedOperationError: use :meth:`to_batches`."""
        raise _unsupported("scan_batches()", "read batches with to_batches()")

    @staticmethod
    def from_dataset(*args: Any, **kwargs: Any) -> Scanner:
        """Raises UnsupportedOperationError: use ``Dataset.scanner``."""
        raise _unsupported("Scanner.from_dataset()", "build a scanner with ds.scanner(...)")

    @staticmethod
    def from_fragment(*args: Any, **kwargs: Any) -> Scanner:
        """Raises UnsupportedOperationError: use ``LanceFragment.scanner``."""
        raise _unsupported("Scanner.from_fragment()", "use ds.get_fragment(id).scanner(...)")

    @staticmethod
    def from_batches(*args: Any, **kwargs: Any) -> Scanner:
        """Raises UnsupportedOperationError: s3ddb scans datasets only."""
        raise _unsupported("Scanner.from_batches()", "s3ddb scans datasets only")


def _unsupported(member: str, reason: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"{member} is not supported by s3ddb: {reason} (docs/pylance.md)"
    )


def positions(indices: Any, total: int, of: str) -> np.ndarray:
    """``indices`` as int64 positions, each in ``0 <= p < total``.

    Integers only, as pylance's ``take`` (whose positions are unsigned 64-bit
    integers): a list or other iterable of ints (numpy integer scalars too), a numpy
    integer array, or a pyarrow integer array without nulls. Python would otherwise
    turn ``1.7``, ``"3"`` or ``True`` into a position without a word.

    Raises:
        InvalidInputError: anything else (a float, string, bool, None, a null, a
            string or scalar instead of a sequence), or a position out of range; the
            message shows what was given and ``of`` (what the positions index).
    """
    if isinstance(indices, pa.ChunkedArray):
        indices = indices.combine_chunks()
    empty_array = (isinstance(indices, np.ndarray) and indices.size == 0) or (
        isinstance(indices, pa.Array) and len(indices) == 0
    )
    if empty_array:
        return np.empty(0, np.int64)  # pa.array([]) is of type null, np.array([]) float
    if isinstance(indices, pa.Array):
        if not pa.types.is_integer(indices.type):
            raise InvalidInputError(
                f"take: positions must be integers, got a pyarrow array of {indices.type}"
            )
        if indices.null_count:
            raise InvalidInputError(
                f"take: positions must be integers, got a pyarrow array holding "
                f"{indices.null_count} null(s)"
            )
        values = indices.to_numpy()
    elif isinstance(indices, np.ndarray):
        if indices.dtype.kind not in "iu" or indices.ndim != 1:
            raise InvalidInputError(
                f"take: positions must be integers, got a {indices.ndim}-dimensional numpy "
                f"array of {indices.dtype}"
            )
        values = indices
    else:
        if isinstance(indices, str | bytes | dict) or not isinstance(indices, Iterable):
            raise InvalidInputError(
                f"take: positions must be a list of integers, got {type(indices).__name__} "
                f"{_shown(indices)}"
            )
        items = list(indices)
        for item in items:
            if isinstance(item, bool | np.bool_) or not isinstance(item, int | np.integer):
                raise InvalidInputError(
                    f"take: positions must be integers, got {type(item).__name__} {_shown(item)}"
                )
        bad_items = [p for p in items if not 0 <= p < total]
        if bad_items:
            raise InvalidInputError(
                f"take: position {int(bad_items[0])} is out of range for {total} rows of {of}"
            )
        return np.asarray(items, dtype=np.int64).reshape(-1)
    bad = values[(values < 0) | (values >= total)]
    if len(bad):
        raise InvalidInputError(
            f"take: position {int(bad[0])} is out of range for {total} rows of {of}"
        )
    return values.astype(np.int64)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def take(ds: PinnedVersion, indices: Any, columns: list[str] | None = None) -> pa.Table:
    """The visible rows at positions ``indices`` (0-based over the pinned version's rows
    in scan order), in the order given; only fragments holding them are read. A
    column named twice in ``columns`` is returned once, as pylance's take does
    (scans refuse it).

    Raises:
        InvalidInputError: a negative or out-of-range position, or ``indices`` not
            integers (see :func:`positions`).
        ColumnNotFoundError: an unknown column.
    """
    if isinstance(columns, list | tuple) and all(isinstance(c, str) for c in columns):
        columns = list(dict.fromkeys(columns))
    reader = VersionReader(ds, columns, None)
    schema = reader.schema
    fragments = list(ds.manifest.fragments)
    starts = np.cumsum([0] + [f.num_rows for f in fragments])
    wanted_positions = positions(indices, int(starts[-1]), ds.uri)
    if not reader.columns:
        # No column to read: every position is a visible row, and Arrow's take and
        # concat would lose the row count of tables without columns.
        return _rows_without_columns(len(wanted_positions))
    owner = np.searchsorted(starts, wanted_positions, side="right") - 1
    pieces, order = [], []
    for index in sorted(set(owner.tolist())):
        wanted = np.nonzero(owner == index)[0]
        table = reader.fragment(fragments[index])
        pieces.append(table.take(pa.array(wanted_positions[wanted] - starts[index])))
        order.append(wanted)
    if not pieces:
        return schema.empty_table()
    combined = pa.concat_tables(pieces)
    # Rows came out grouped by fragment: put them back in the order asked for.
    inverse = np.empty(len(wanted_positions), dtype=np.int64)
    inverse[np.concatenate(order)] = np.arange(len(wanted_positions))
    return combined.take(pa.array(inverse))


def _rows_without_columns(rows: int) -> pa.Table:
    """A table of ``rows`` rows and no columns (as ``to_table(columns=[])`` gives)."""
    return pa.table({"_": pa.nulls(rows)}).drop_columns(["_"])
