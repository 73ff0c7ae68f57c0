"""Parquet data files: written and read with pyarrow."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from s3ddb.arguments import check_int
from s3ddb.errors import InvalidInputError
from s3ddb.format import layout
from s3ddb.format.bases import Files, as_resolver
from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.stats import compute_file_statistics
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites

__all__ = [
    "DEFAULT_MAX_ROWS_PER_FILE",
    "DEFAULT_ROW_GROUP_SIZE",
    "DICTIONARY_PAGE_LIMIT_BYTES",
    "WHOLE_READ_MAX_BYTES",
    "FileLayout",
    "WriteProgress",
    "assemble_columns",
    "check_has_columns",
    "open_data_file",
    "read_fragment",
    "write_data_file",
    "write_fragments_from_table",
]

DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
DEFAULT_ROW_GROUP_SIZE = 64 * 1024

#: A column chunk's dictionary grows to at most this many bytes; past it the rest of
#: the chunk is written plain. pyarrow's default (1 MiB) keeps a dictionary of every
#: value of a unique 64 KiB-row column (ids, timestamps, measures): that file is about
#: three times the size of the plain one, slower to scan, and a point read decodes the
#: whole dictionary (a 1-row read of three such columns: 4.5 ms against 0.9 ms). A
#: column of few values keeps its dictionary.
DICTIONARY_PAGE_LIMIT_BYTES = 64 * 1024


def _with_field_ids(table: pa.Table, schema: DatasetSchema) -> pa.Table:
    # Parquet keeps field ids natively ("PARQUET:field_id"), so files stay readable by
    # id even after columns are renamed; nested fields carry theirs too (Iceberg
    # readers resolve struct fields, list elements and map entries by id).
    with_ids = schema.arrow_with_ids
    fields = []
    for f in table.schema:
        target = with_ids.field(f.name)
        meta = {**(f.metadata or {}), **(target.metadata or {})}
        kind = target.type if target.type.equals(f.type, check_metadata=False) else f.type
        fields.append(pa.field(f.name, kind, f.nullable, meta))
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


def write_data_file(
    store: ObjectStore,
    table: pa.Table,
    schema: DatasetSchema,
    pending: PendingWrites | None = None,
    *,
    max_rows_per_group: int | None = None,
) -> DataFile:
    """Write ``table`` (already conformed to ``schema``) as one Parquet data file, in
    row groups of at most ``max_rows_per_group`` rows (default
    :data:`DEFAULT_ROW_GROUP_SIZE`, read when called).

    With ``pending`` the upload is only started: the caller waits for it (the
    commit loop does, before claiming a version)."""
    buffer = io.BytesIO()
    pq.write_table(
        _with_field_ids(table, schema),
        buffer,
        row_group_size=max_rows_per_group or DEFAULT_ROW_GROUP_SIZE,
        compression="zstd",
        dictionary_pagesize_limit=DICTIONARY_PAGE_LIMIT_BYTES,
    )
    data = buffer.getvalue()
    name = layout.new_data_file_name()
    if pending is not None:
        pending.put(store, layout.data_file_path(name), data)
    else:
        store.put(layout.data_file_path(name), data)
    return DataFile(
        path=name,
        fields=tuple(schema.top_level_ids(table.column_names)),
        file_size_bytes=len(data),
    )


def check_has_columns(table: pa.Table) -> None:
    """A table with rows must have a column: no data file can hold rows without one
    (its rows would be counted, and no file would have them).

    Raises:
        InvalidInputError: ``table`` has rows and no column.
    """
    if table.num_columns == 0 and table.num_rows:
        raise InvalidInputError(
            f"a table of {table.num_rows} rows and no column cannot be written: "
            "give it at least one column"
        )


def write_fragments_from_table(
    store: ObjectStore,
    table: pa.Table,
    schema: DatasetSchema,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int | None = None,
    progress: WriteProgress | None = None,
    pending: PendingWrites | None = None,
) -> list[FragmentMetadata]:
    """Split ``table`` into fragments of at most ``max_rows_per_file`` rows and write them
    (with ``pending``: start their uploads, see :func:`write_data_file`), telling
    ``progress`` of each one (:class:`WriteProgress`).

    Returned fragments have id 0 (ids are assigned at commit) and carry their column
    statistics (:mod:`s3ddb.format.stats`). A table without rows writes none.

    Raises:
        InvalidInputError: ``table`` has rows but no column (no data file can hold
            them: its rows would be counted, and no file would have them).
    """
    check_has_columns(table)
    fragments = []
    for offset in range(0, max(table.num_rows, 1), max_rows_per_file):
        # Never past the table's end: pyarrow gives a table with no column as many
        # rows as a slice asks for.
        chunk = table.slice(offset, min(max_rows_per_file, table.num_rows - offset))
        if chunk.num_rows == 0:
            break
        data_file = write_data_file(
            store, chunk, schema, pending, max_rows_per_group=max_rows_per_group
        )
        stats = (compute_file_statistics(chunk, schema, data_file),)
        fragment = FragmentMetadata(
            id=0, files=(data_file,), physical_rows=chunk.num_rows, stats=stats
        )
        if progress is not None:
            # (A fragment has a data file only once written: both calls come then.)
            progress.begin(fragment)
            progress.complete(fragment)
        fragments.append(fragment)
    return fragments


class WriteProgress(Protocol):
    """pylance's ``FragmentWriteProgress``: ``begin`` and then ``complete`` are told
    of each new fragment once its data file is written (pylance tells ``begin``
    before)."""

    def begin(self, fragment: FragmentMetadata) -> None: ...

    def complete(self, fragment: FragmentMetadata) -> None: ...


@dataclass(frozen=True)
class FileLayout:
    """How new data files are written: at most ``max_rows_per_file`` rows per file
    (one fragment each), in Parquet row groups of at most ``max_rows_per_group``
    rows, with ``progress`` told of each fragment."""

    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    max_rows_per_group: int | None = None
    progress: WriteProgress | None = None

    @classmethod
    def checked(
        cls,
        max_rows_per_file: int,
        max_rows_per_group: int | None,
        progress: WriteProgress | None,
    ) -> FileLayout:
        """A layout of limits a user gave.

        Raises:
            InvalidInputError: a limit that is not a positive integer.
        """
        check_int("max_rows_per_file", max_rows_per_file, minimum=1)
        if max_rows_per_group is not None:
            check_int("max_rows_per_group", max_rows_per_group, minimum=1)
        return cls(max_rows_per_file, max_rows_per_group, progress)

    def write(
        self,
        store: ObjectStore,
        table: pa.Table,
        schema: DatasetSchema,
        pending: PendingWrites | None = None,
    ) -> list[FragmentMetadata]:
        """:func:`write_fragments_from_table` with this layout."""
        return write_fragments_from_table(
            store, table, schema, max_rows_per_file=self.max_rows_per_file,
            max_rows_per_group=self.max_rows_per_group, progress=self.progress,
            pending=pending,
        )  # fmt: skip


#: Data files up to this size are read with one GET rather than ranged reads.
WHOLE_READ_MAX_BYTES = 8 * 1024 * 1024


def open_data_file(files: Files, data_file: DataFile) -> Any:
    """A readable file of ``data_file``, in the dataset's root or in its base."""
    store, path = as_resolver(files).data_file(data_file)
    size = data_file.file_size_bytes
    if store.is_remote and 0 < size <= WHOLE_READ_MAX_BYTES:
        # One request instead of a size lookup, a footer read and column reads.
        return pa.BufferReader(store.get(path))
    return store.open_input(path, size=size or None)


def read_fragment(
    files: Files, fragment: FragmentMetadata, schema: DatasetSchema, columns: list[str]
) -> pa.Table:
    """All physical rows of ``fragment`` (deletions not applied), ``columns`` in order.

    ``files`` is the manifest's :class:`~s3ddb.format.bases.FileResolver` (a plain
    store only serves fragments without files in base paths).

    Columns are matched to file columns by field id, so a file written before a
    rename still reads. A column no data file holds (added later) reads as nulls.

    Raises:
        DataFileMissingError: a data file does not exist.
        DataFileError: a data file is not readable Parquet, holds another number of
            rows than the fragment, or lacks a column the fragment says it holds.
    """
    from s3ddb.format.parquet_source import ParquetSource  # the scan package imports this module

    wanted = dict(zip(columns, schema.top_level_ids(columns)))
    pieces: dict[str, pa.ChunkedArray] = {}
    for data_file in fragment.files:
        file_ids = set(data_file.fields)
        needed = {i: n for n, i in wanted.items() if i in file_ids}
        if not needed:
            continue
        source = ParquetSource(files, data_file, fragment)
        by_id = source.columns(needed)
        groups = list(range(source.metadata.num_row_groups))
        table = source.read(groups, list(by_id.values()))
        for i, name in needed.items():
            pieces[name] = table.column(by_id[i])
    return assemble_columns(pieces, schema, columns, fragment.physical_rows)


def assemble_columns(
    pieces: dict[str, pa.ChunkedArray], schema: DatasetSchema, columns: list[str], num_rows: int
) -> pa.Table:
    """A table of ``columns`` (in order) with the dataset's types, from the columns read
    (``pieces``, by name); a column no file held reads as ``num_rows`` nulls. With no
    columns, a table that still has ``num_rows`` rows."""
    if not columns:
        # A table with rows but no columns: keep the row count for count_rows callers.
        return pa.table({"_": pa.nulls(num_rows)}).select([])
    arrays = []
    out_fields = []
    for name in columns:
        field = schema.arrow.field(name)
        array = pieces.get(name)
        if array is None:
            array = pa.chunked_array([pa.nulls(num_rows, field.type)])
        elif not array.type.equals(field.type):
            array = array.cast(field.type)
        arrays.append(array)
        out_fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(out_fields))
