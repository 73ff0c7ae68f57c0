"""One Parquet data file opened for a scan: its footer read once, then the column
chunks of chosen row groups read as few, coalesced requests.

Local files are read natively. From an object store, a file up to
:data:`WHOLE_READ_MAX_BYTES` is fetched with one GET; a larger one has its footer
fetched with one ranged GET, and each read fetches exactly the byte ranges of the
column chunks it needs, merging ranges less than :data:`HOLE_BYTES` apart into one
request and sending the requests in parallel.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3ddb.errors import ManifestCorruptError
from s3ddb.format.bases import Files, as_resolver
from s3ddb.format.fragment import DataFile
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import process_pool

#: Data files up to this size are read with one GET rather than ranged reads.
WHOLE_READ_MAX_BYTES = 8 * 1024 * 1024
#: Footer bytes fetched blind with the first ranged read (most footers fit).
FOOTER_GUESS_BYTES = 64 * 1024
#: Column chunks closer than this are fetched in one request (the gap is read too).
HOLE_BYTES = 1024 * 1024
#: No single coalesced request grows beyond this.
MAX_REQUEST_BYTES = 64 * 1024 * 1024


def _executor() -> ThreadPoolExecutor:
    # Per process (rebuilt after fork); separate from the write pool so a read never
    # waits behind uploads.
    return process_pool("read")


def coalesce(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(start, end)`` ranges merged where less than :data:`HOLE_BYTES` apart
    (each merged range at most :data:`MAX_REQUEST_BYTES`, unless one range is)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start - out[-1][1] <= HOLE_BYTES and end - out[-1][0] <= MAX_REQUEST_BYTES:
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
        merged = coalesce([(s, e) for s, e in ranges if not self._held(s, e)])
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


def _footer(store: ObjectStore, path: str, size: int) -> pq.FileMetaData:
    """The footer of a Parquet file of ``size`` bytes: one ranged GET (two if the
    footer is larger than :data:`FOOTER_GUESS_BYTES`)."""
    tail = store.get_range(path, max(0, size - FOOTER_GUESS_BYTES), size)
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise ManifestCorruptError(f"data file {store.url}/{path} is not a Parquet file")
    length = struct.unpack("<I", tail[-8:-4])[0]
    if length + 8 > len(tail):
        tail = store.get_range(path, max(0, size - length - 8), size)
    return pq.read_metadata(pa.BufferReader(tail[-(length + 8) :]))


def file_columns_by_id(schema: pa.Schema) -> dict[int, str]:
    """Field id -> column name in one Parquet data file (its ``PARQUET:field_id``s)."""
    by_id = {}
    for file_field in schema:
        raw = (file_field.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None:
            by_id[int(raw)] = file_field.name
    return by_id


class ParquetSource:
    """A data file opened for a scan. The footer is read at most once; reads of any
    row groups and columns follow (from any thread, each read independent)."""

    def __init__(self, files: Files, data_file: DataFile) -> None:
        store, path = as_resolver(files).data_file(data_file)
        self._store, self._path = store, path
        size = data_file.file_size_bytes
        self._whole: bytes | None = None
        self._local: str | None = None
        self._size = 0
        if store.protocol == "file":
            self._local = store.full_path(path)
            with pa.OSFile(self._local) as f:
                metadata = pq.ParquetFile(f).metadata
        else:
            if size <= 0:
                size = store.head(path).size  # not recorded (an older or foreign writer)
            if size <= WHOLE_READ_MAX_BYTES:
                # One request instead of a footer read and column reads.
                self._whole = store.get(path)
                metadata = pq.ParquetFile(pa.BufferReader(self._whole)).metadata
            else:
                self._size = size
                metadata = _footer(store, path, size)
        self.metadata = metadata
        self.arrow_schema = metadata.schema.to_arrow_schema()
        self.by_id = file_columns_by_id(self.arrow_schema)
        sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        self.group_rows = sizes
        self.group_starts = [sum(sizes[:g]) for g in range(len(sizes))]

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
    ) -> pa.Table:
        """Columns ``names`` (file column names) of row groups ``groups``, in order.

        ``fetched`` (remote files read by ranges): byte ranges already fetched, used
        instead of fetching them again; the ranges this read fetches are added to it.
        """
        if not names:
            rows = sum(self.group_rows[g] for g in groups)
            return pa.table({"_": pa.nulls(rows)}).select([])
        whole = len(groups) == self.metadata.num_row_groups
        source: Any
        if self._local is not None:
            source = pa.OSFile(self._local)
        elif self._whole is not None:
            source = pa.BufferReader(self._whole)
        else:
            source = RangeFile(self._store, self._path, self._size, fetched or ())
            new = source.prefetch(self._chunk_ranges(groups, names))
            if fetched is not None:
                fetched.extend(new)
        try:
            parquet = pq.ParquetFile(source, metadata=self.metadata)
            if whole:
                return parquet.read(columns=names)
            return parquet.read_row_groups(groups, columns=names)
        finally:
            if isinstance(source, RangeFile):
                source.release()
            else:
                source.close()
