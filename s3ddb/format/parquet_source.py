"""One Parquet data file opened for a scan: its footer read once, then the column
chunks of chosen row groups read as few, coalesced requests.

Local files are read natively. From an object store, a file up to
:data:`WHOLE_READ_MAX_BYTES` is fetched with one GET; a larger one has its footer
fetched with one ranged GET, and each read fetches exactly the byte ranges of the
column chunks it needs, merging ranges less than :data:`HOLE_BYTES` apart into one
request and sending the requests in parallel.

Arrow's thread pool decodes only from Arrow's own files (see :func:`arrow_input`):
a pool thread that drops the last reference to a Python object needs the GIL, and
one that asks for it while the interpreter is exiting aborts the process.
"""

from __future__ import annotations

import io
import itertools
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3ddb.errors import DataFileError, DataFileMissingError, InvalidInputError, S3DDBError
from s3ddb.format.bases import FileResolver, Files, as_resolver
from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import process_pool

__all__ = [
    "FOOTER_GUESS_BYTES",
    "HOLE_BYTES",
    "MAX_REQUEST_BYTES",
    "THREADED_ROWS",
    "WHOLE_READ_MAX_BYTES",
    "ParquetSource",
    "RangeFile",
    "arrow_input",
    "check_data_file",
    "coalesce",
    "data_file_errors",
    "file_columns_by_id",
    "read_footer",
]

#: Data files up to this size are read with one GET rather than ranged reads.
WHOLE_READ_MAX_BYTES = 8 * 1024 * 1024
#: Footer bytes fetched blind with the first ranged read (most footers fit).
FOOTER_GUESS_BYTES = 64 * 1024
#: Column chunks closer than this are fetched in one request (the gap is read too).
HOLE_BYTES = 1024 * 1024
#: No single coalesced request grows beyond this.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: Reads of row groups holding fewer rows than this decode in the calling thread.
THREADED_ROWS = 1024


def _executor() -> ThreadPoolExecutor:
    # Per process (rebuilt after fork); separate from the write pool so a read never
    # waits behind uploads.
    return process_pool("read")


#: Where the system shows a process's open descriptors as files to open again.
_DESCRIPTOR_FOLDERS = ("/proc/self/fd", "/dev/fd")


def arrow_input(store: ObjectStore, path: str) -> tuple[Any, bool]:
    """``path`` opened for pyarrow's Parquet reader, and whether that reader may
    decode on Arrow's thread pool (its ``use_threads``).

    Threads only with Arrow's own file: a Python file (or bytes) wrapped for Arrow is
    released by whichever thread drops its last reference, and an Arrow pool thread
    that takes the GIL while the interpreter is exiting aborts the process
    ("terminate called without an active exception", now and then, after all the work
    is done). A local file is opened and checked as :meth:`ObjectStore.open_input`
    does (a regular file, no symlink), then opened again as Arrow's file through that
    descriptor (the same file, whatever happens to the path meanwhile); elsewhere,
    or where the system cannot reopen a descriptor, the file is Python's and decoding
    stays in the calling thread. The caller closes the file.

    Raises:
        FileNotFoundError, PathOutsideDatasetError: as ``store.open_input``.
    """
    checked = store.open_input(path)
    if not store.is_local:
        return checked, False
    native = _reopened(checked.fileno())
    if native is None:
        return checked, False
    checked.close()
    return native, True


def _reopened(fd: int) -> pa.NativeFile | None:
    for folder in _DESCRIPTOR_FOLDERS:
        try:
            return pa.OSFile(f"{folder}/{fd}")
        except (OSError, pa.ArrowException):
            continue
    return None


def coalesce(
    ranges: list[tuple[int, int]], held: Sequence[tuple[int, int]] = ()
) -> list[tuple[int, int]]:
    """``(start, end)`` ranges merged where less than :data:`HOLE_BYTES` apart
    (each merged range at most :data:`MAX_REQUEST_BYTES`, unless one range is), but
    never across a gap that overlaps a range of ``held`` (bytes already fetched: a
    request spanning them would fetch them again)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if (
            out
            and start - out[-1][1] <= HOLE_BYTES
            and end - out[-1][0] <= MAX_REQUEST_BYTES
            and not any(first < start and out[-1][1] < last for first, last in held)
        ):
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class RangeFile(io.RawIOBase):
    """A read-only file of ``size`` bytes served from prefetched ranges; a read
    outside them fetches just the bytes asked for (never wrong, only slower)."""

    def __init__(
        self,
        store: ObjectStore,
        path: str,
        size: int,
        fetched: Iterable[tuple[int, bytes]] = (),
    ) -> None:
        super().__init__()
        self._store, self._path, self._size = store, path, size
        self._pos = 0
        self._ranges: list[tuple[int, bytes]] = list(fetched)

    def _held(self, start: int, end: int) -> bool:
        return any(first <= start and end <= first + len(data) for first, data in self._ranges)

    def prefetch(self, ranges: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
        """Fetch ``ranges`` (coalesced, in parallel) for the reads that follow, except
        those already held; returns what was fetched."""
        held = [(first, first + len(data)) for first, data in self._ranges]
        merged = coalesce([(s, e) for s, e in ranges if not self._held(s, e)], held)
        if len(merged) == 1:
            start, end = merged[0]
            new = [(start, self._store.get_range(self._path, start, end))]
        else:
            pool = _executor()
            futures = [(s, pool.submit(self._store.get_range, self._path, s, e)) for s, e in merged]
            new = [(s, f.result()) for s, f in futures]
        self._ranges.extend(new)
        return new

    def release(self) -> None:
        self._ranges = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        start = self._pos
        end = self._size if n is None or n < 0 else min(self._size, start + n)
        if end <= start:
            return b""
        self._pos = end
        for first, data in self._ranges:
            if first <= start and end <= first + len(data):
                return data[start - first : end - first]
        return self._store.get_range(self._path, start, end)

    def readall(self) -> bytes:
        return self.read(-1)


def read_footer(store: ObjectStore, path: str, size: int) -> pq.FileMetaData:
    """The footer of a Parquet file of ``size`` bytes: one ranged GET (two if the
    footer is larger than :data:`FOOTER_GUESS_BYTES`). Reads at most the file's
    ``size`` bytes, whatever the footer claims.

    Raises:
        FileNotFoundError: the file does not exist.
        DataFileError: it is not a Parquet file (no magic, a footer length beyond the
            file, a footer that does not decode).
    """
    tail = store.get_range(path, max(0, size - FOOTER_GUESS_BYTES), size)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise DataFileError(f"data file {store.url}/{path} is not a Parquet file (no footer magic)")
    length = struct.unpack("<I", tail[-8:-4])[0]
    if length + 12 > size:
        raise DataFileError(
            f"data file {store.url}/{path} is not a Parquet file: its footer claims "
            f"{length} bytes, the file has {size}"
        )
    if length + 8 > len(tail):
        tail = store.get_range(path, max(0, size - length - 8), size)
    return pq.read_metadata(pa.BufferReader(tail[-(length + 8) :]))


def _refuse_resized(where: str, recorded: int, actual: int) -> None:
    """Refuse the data file ``where`` (its description) of ``actual`` bytes if its
    version recorded another size (``recorded``; 0: none was).

    Raises:
        DataFileError: the sizes differ.
    """
    if 0 < recorded != actual:
        raise DataFileError(
            f"{where} has {actual} bytes where its version records {recorded}: it was "
            "changed or replaced after it was committed"
        )


def _size_of(f: Any) -> int:
    """The size in bytes of an open file: Arrow's (``size()``) or Python's (its
    descriptor's)."""
    size = getattr(f, "size", None)
    if callable(size):
        return int(size())
    return os.fstat(f.fileno()).st_size


def file_columns_by_id(schema: pa.Schema) -> dict[int, str]:
    """Field id -> column name in one Parquet data file (its ``PARQUET:field_id``s)."""
    by_id = {}
    for file_field in schema:
        raw = (file_field.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None:
            by_id[int(raw)] = file_field.name
    return by_id


#: Errors that mean the data file itself is unusable (missing ones are told apart);
#: permission, connection and s3ddb's own typed errors pass through unchanged.
_PASS_THROUGH = (S3DDBError, PermissionError, ConnectionError, TimeoutError)


@contextmanager
def data_file_errors(where: str) -> Iterator[None]:
    """Turn what reading a data file raises into :class:`DataFileError` (or
    :class:`DataFileMissingError`) naming ``where`` (its fragment, path, version).

    Raises:
        DataFileMissingError: the file does not exist.
        DataFileError: it is not readable Parquet (truncated, corrupt, not Parquet).
    """
    try:
        yield
    except DataFileError as exc:
        if where in str(exc):
            raise
        raise type(exc)(f"{where}: {exc}") from exc
    except _PASS_THROUGH:
        raise
    except FileNotFoundError as exc:
        raise DataFileMissingError(
            f"{where} does not exist ({exc}): restore it from a backup, or restore the "
            "dataset to a version that does not use it"
        ) from exc
    except (OSError, ValueError, pa.ArrowException, IndexError, struct.error) as exc:
        raise DataFileError(f"{where} is not a readable Parquet file: {exc}") from exc


class ParquetSource:
    """A data file opened for a scan. The footer is read at most once; reads of any
    row groups and columns follow (from any thread, each read independent).

    The file must have the size its version records (where it records one): a file
    replaced or changed after its commit is refused, not read. With ``fragment``, the
    file is also checked against it: it must hold the fragment's ``physical_rows``
    rows, and each column the fragment says the file holds must be there
    (:meth:`columns`). Every failure names the fragment, the file and the version
    (see :func:`data_file_errors`).

    With ``keep_open``, a local file stays open from its footer's read (the same
    checked descriptor) for the reads that follow, until :meth:`close` (or the end
    of a ``with`` block): for reads right after opening (a point read, one small
    fragment), which then open and parse nothing again. Without it (sources planned
    ahead, many at once) each read opens the file anew.

    Raises:
        DataFileMissingError: the file does not exist.
        DataFileError: it is not readable Parquet, not of its recorded size, or does
            not match its fragment.
        PathOutsideDatasetError: locally, it (or a directory on the way) is a symlink
            or another non-regular file.
    """

    def __init__(
        self,
        files: Files,
        data_file: DataFile,
        fragment: FragmentMetadata | None = None,
        *,
        keep_open: bool = False,
    ) -> None:
        resolver = as_resolver(files)
        store, path = resolver.data_file(data_file)
        self._store, self._path = store, path
        self.data_file = data_file
        self.where = _describe(store, path, fragment, resolver.version)
        size = data_file.file_size_bytes
        self._whole: bytes | None = None
        self._local = store.is_local
        self._size = 0
        self._held: tuple[pq.ParquetFile, Any, bool] | None = None  # file, source, threads
        try:
            sizes = self._read_footer(resolver, size, fragment, keep_open)
        except BaseException:
            self.close()  # a file kept open for a footer that fails its checks
            raise
        self.group_rows = sizes
        self.group_starts = list(itertools.accumulate(sizes, initial=0))[:-1]

    def _read_footer(
        self,
        resolver: FileResolver,
        size: int,
        fragment: FragmentMetadata | None,
        keep_open: bool,
    ) -> list[int]:
        """Read and check the footer and the size (see the class); the row groups' row
        counts."""
        store, path = self._store, self._path
        actual = size  # a file read by ranges is found by its footer at this size
        with data_file_errors(self.where):
            if self._local and keep_open:
                metadata, actual = self._hold(store, path)
            elif self._local:
                # Opened once, checked (no symlink, a regular file) on the descriptor
                # pyarrow then reads: no window between the check and the read.
                with store.open_input(path) as f:
                    actual = _size_of(f)
                    metadata = pq.ParquetFile(f).metadata
            else:
                if size <= 0:
                    size = store.head(path).size  # not recorded (an older or foreign writer)
                if size <= WHOLE_READ_MAX_BYTES:
                    # One request instead of a footer read and column reads.
                    self._whole = resolver.read_whole(store, path)
                    actual = len(self._whole)
                    metadata = pq.ParquetFile(pa.BufferReader(self._whole)).metadata
                else:
                    self._size = size
                    metadata = read_footer(store, path, size)
            self.metadata = metadata
            self.arrow_schema = metadata.schema.to_arrow_schema()
            self.by_id = file_columns_by_id(self.arrow_schema)
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        _check_rows(self.where, metadata.num_rows, sizes, fragment)
        recorded = self.data_file.file_size_bytes
        if 0 < recorded != actual:
            # Another file than the one committed. Its clearest fault first: a declared
            # column it lacks (the row count was checked above), else its size, which
            # alone tells apart a stand-in of the same columns and row count.
            self.columns(i for i in self.data_file.fields if i >= 0)
            _refuse_resized(self.where, recorded, actual)
        return sizes

    def _hold(self, store: ObjectStore, path: str) -> tuple[pq.FileMetaData, int]:
        """Open the local file (checked, as :func:`arrow_input`) and keep it open;
        its footer and its size."""
        source, threads = arrow_input(store, path)
        try:
            size = _size_of(source)
            parquet = pq.ParquetFile(source)
            metadata = parquet.metadata
        except BaseException:
            source.close()
            raise
        self._held = (parquet, source, threads)
        return metadata, size

    def close(self) -> None:
        """Close the file kept open (``keep_open``); reads after this open it anew."""
        held, self._held = self._held, None
        if held is not None:
            held[1].close()

    def __enter__(self) -> ParquetSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def columns(self, ids: Iterable[int]) -> dict[int, str]:
        """File column names of the field ``ids`` this file holds: those its
        fragment declares (``DataFile.fields``); an id it does not declare is not
        read from it (a column added later reads as nulls).

        Raises:
            DataFileError: the fragment declares an id the file has no column for
                (reading on would return nulls instead of the column's values).
        """
        declared = set(self.data_file.fields)
        out = {}
        for i in ids:
            if i not in declared:
                continue
            name = self.by_id.get(i)
            if name is None:
                raise DataFileError(
                    f"{self.where}: its fragment says it holds field id {i}, the file has "
                    f"no column with that id (it has {sorted(self.by_id) or 'none'})"
                )
            out[i] = name
        return out

    def _chunk_ranges(self, groups: list[int], names: list[str]) -> list[tuple[int, int]]:
        wanted = set(names)
        out = []
        for g in groups:
            group = self.metadata.row_group(g)
            for c in range(group.num_columns):
                chunk = group.column(c)
                if chunk.path_in_schema.split(".", 1)[0] not in wanted and (
                    chunk.path_in_schema not in wanted
                ):
                    continue
                start = chunk.data_page_offset
                if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                    start = chunk.dictionary_page_offset
                out.append((start, start + chunk.total_compressed_size))
        return out

    def group_bytes(self, group: int, names: list[str]) -> int:
        """Decoded size estimate of ``names``' chunks in row group ``group``."""
        wanted = set(names)
        rg = self.metadata.row_group(group)
        total = 0
        for c in range(rg.num_columns):
            chunk = rg.column(c)
            if chunk.path_in_schema.split(".", 1)[0] in wanted or chunk.path_in_schema in wanted:
                total += chunk.total_uncompressed_size
        return total

    def read(
        self,
        groups: list[int],
        names: list[str],
        fetched: list[tuple[int, bytes]] | None = None,
        heads: list[int] | None = None,
    ) -> pa.Table:
        """Columns ``names`` (file column names) of row groups ``groups``, in order.

        ``fetched`` (remote files read by ranges): byte ranges already fetched, used
        instead of fetching them again; the ranges this read fetches are added to it.

        ``heads`` (one count per group of ``groups``, each from 1 to the group's rows):
        only the first ``heads[i]`` rows of group ``groups[i]`` are read, for point
        reads. A group's pages are still fetched and decompressed whole, but values
        are decoded only as far as the rows asked for (about half a row group's cost
        for its first rows).

        Raises:
            DataFileError: the file is not readable Parquet, or a row group holds fewer
                rows than its footer says.
            InvalidInputError: ``heads`` does not match ``groups``.
        """
        if heads is not None and (
            len(heads) != len(groups)
            or any(not 0 < n <= self.group_rows[g] for g, n in zip(groups, heads))
        ):
            raise InvalidInputError(
                f"{self.where}: row counts {heads} for row groups {groups} (of "
                f"{[self.group_rows[g] for g in groups]} rows)"
            )
        if not names:
            rows = sum(heads if heads is not None else (self.group_rows[g] for g in groups))
            return pa.table({"_": pa.nulls(rows)}).select([])
        with data_file_errors(self.where):
            return self._read(groups, names, fetched, heads)

    def _read(
        self,
        groups: list[int],
        names: list[str],
        fetched: list[tuple[int, bytes]] | None,
        heads: list[int] | None,
    ) -> pa.Table:
        whole = len(groups) == self.metadata.num_row_groups
        source: Any
        threads = False  # Python's memory: decoded in this thread (see arrow_input)
        held = self._held
        if held is not None:
            source, threads = None, held[2]  # kept open: not closed here
        elif self._local:
            source, threads = arrow_input(self._store, self._path)
        elif self._whole is not None:
            source = pa.BufferReader(self._whole)
        else:
            source = RangeFile(self._store, self._path, self._size, fetched or ())
            new = source.prefetch(self._chunk_ranges(groups, names))
            if fetched is not None:
                fetched.extend(new)
        # A few rows decode faster here than handed to Arrow's pool and awaited.
        threads = threads and sum(self.group_rows[g] for g in groups) >= THREADED_ROWS
        try:
            parquet = held[0] if held else pq.ParquetFile(source, metadata=self.metadata)
            if heads is not None and any(n < self.group_rows[g] for g, n in zip(groups, heads)):
                return self._read_heads(parquet, groups, heads, names, threads)
            if whole:
                return parquet.read(columns=names, use_threads=threads)
            return parquet.read_row_groups(groups, columns=names, use_threads=threads)
        finally:
            if isinstance(source, RangeFile):
                source.release()
            elif source is not None:
                source.close()

    def _read_heads(
        self,
        parquet: pq.ParquetFile,
        groups: list[int],
        heads: list[int],
        names: list[str],
        threads: bool,
    ) -> pa.Table:
        """The first ``heads[i]`` rows of each group ``groups[i]``: one batch of that
        many rows per group (a reader's batches never stop short inside a group, but
        a short one is read on from, and a group that ends early is an error)."""
        tables = []
        for group, rows in zip(groups, heads):
            batches, read = [], 0
            for batch in parquet.iter_batches(
                batch_size=rows, row_groups=[group], columns=names, use_threads=threads
            ):
                batches.append(batch.slice(0, rows - read))
                read += batches[-1].num_rows
                if read == rows:
                    break
            if read < rows:
                raise DataFileError(
                    f"{self.where}: row group {group} holds {read} rows, its footer says "
                    f"{self.group_rows[group]}"
                )
            tables.append(pa.Table.from_batches(batches))
        return pa.concat_tables(tables)


def check_data_file(
    files: Files,
    data_file: DataFile,
    fragment: FragmentMetadata,
    size: int,
    field_ids: Iterable[int],
) -> None:
    """Check ``data_file`` of ``fragment`` by its footer alone: one ranged read of at
    most :data:`FOOTER_GUESS_BYTES` (two for a larger footer), never the whole file.
    ``size`` is the file's size (from a listing); ``field_ids`` the columns to
    look for (the version's top-level field ids). What ``verify`` runs per file.

    Raises:
        DataFileMissingError: the file does not exist.
        DataFileError: it is not of the size its version records, has no valid
            Parquet footer, holds another number of rows than the fragment, or lacks a
            column the fragment says it holds.
    """
    resolver = as_resolver(files)
    store, path = resolver.data_file(data_file)
    where = _describe(store, path, fragment, resolver.version)
    with data_file_errors(where):
        metadata = read_footer(store, path, size)
        by_id = file_columns_by_id(metadata.schema.to_arrow_schema())
        sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    _check_rows(where, metadata.num_rows, sizes, fragment)
    declared = set(data_file.fields)
    missing = sorted(i for i in field_ids if i in declared and i not in by_id)
    if missing:
        raise DataFileError(
            f"{where}: its fragment says it holds field id(s) {missing}, the file has no "
            f"column with those ids (it has {sorted(by_id) or 'none'})"
        )
    _refuse_resized(where, data_file.file_size_bytes, size)


def _check_rows(
    where: str, num_rows: int, group_rows: list[int], fragment: FragmentMetadata | None
) -> None:
    if sum(group_rows) != num_rows or any(n < 0 for n in group_rows):
        raise DataFileError(
            f"{where}: its row groups hold {sum(group_rows)} rows, its footer says {num_rows}"
        )
    if fragment is not None and num_rows != fragment.physical_rows:
        raise DataFileError(
            f"{where} holds {num_rows} rows, its fragment records "
            f"{fragment.physical_rows}: the file was replaced or does not belong to it"
        )


def _describe(
    store: ObjectStore, path: str, fragment: FragmentMetadata | None, version: int | None
) -> str:
    """ "data file s3://b/ds/data/x.parquet of fragment 3 (version 7)" """
    out = f"data file {store.url}/{path}"
    if fragment is not None:
        out += f" of fragment {fragment.id}"
    if version is not None:
        out += f" (version {version})"
    return out
