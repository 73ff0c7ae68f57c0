"""Opening a stored Parquet file whose declared sizes are checked before anything is
decoded (:func:`open_bounded`).

pyarrow allocates what a file declares: a footer's row counts, a page header's
uncompressed size (the buffer the page decompresses into) and its value count (the
levels and values it decodes, which RLE runs declare in a few bytes). So a file of a
few kilobytes can declare gibibytes. :func:`open_bounded` reads the footer under
Thrift limits, checks its row groups and column chunks against :class:`ParquetBounds`,
then walks each column chunk's page headers (Thrift compact protocol) and checks that
they stay inside the chunk, that their value counts add up to the footer's, and that
their sizes add up to no more than the footer's. pyarrow stops reading a column
chunk once it has seen the values its footer declares, so after the walk the values
decoded per column and the bytes decompressed are within the bounds. String values
that repeat a dictionary entry are not bounded by bytes: read them as dictionaries
(``read_dictionary``) and check the dictionaries before expanding anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from s3ddb.errors import PublishedStateError

__all__ = ["MAX_PAGE_HEADER_BYTES", "ParquetBounds", "open_bounded"]

#: The largest page header read (its statistics included).
MAX_PAGE_HEADER_BYTES = 1 << 20

_MAGIC = b"PAR1"
# Parquet page types (parquet.thrift PageType).
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
# Thrift compact protocol types.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = 1, 2, 3, 4, 5, 6, 7, 8
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12
_MAX_NESTING = 16


@dataclass(frozen=True)
class ParquetBounds:
    """What a file may declare.

    Attributes:
        max_rows: rows in the file.
        max_values: values (nulls and list entries included) of one column.
        max_page_bytes: uncompressed bytes of one page.
        max_decoded_bytes: uncompressed bytes of every page of the file together.
        max_row_groups: row groups.
        max_footer_bytes: bytes of the footer.
    """

    max_rows: int
    max_values: int
    max_page_bytes: int
    max_decoded_bytes: int
    max_row_groups: int = 64
    max_footer_bytes: int = 16 << 20


class _Refused(Exception):
    """A page header that cannot be read within its bounds (the walker's signal)."""


class _Compact:
    """Reads the Thrift compact protocol from ``data[pos:end]``."""

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end
        self._last = 0  # the id of the struct field read last (ids are delta-coded)

    def byte(self) -> int:
        if self.pos >= self.end:
            raise _Refused("a page header runs past its column chunk")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        value = 0
        for shift in range(0, 70, 7):
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
        raise _Refused("a varint longer than 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip_bytes(self, count: int) -> None:
        if count < 0 or self.pos + count > self.end:
            raise _Refused("a page header runs past its column chunk")
        self.pos += count

    def fields(self) -> tuple[int, int] | None:
        """The next field of the struct being read (id, type), None at its end."""
        header = self.byte()
        if header == 0:
            return None
        kind, delta = header & 0x0F, header >> 4
        field_id = self._last + delta if delta else self.zigzag()
        self._last = field_id
        return field_id, kind

    def struct_start(self) -> int:
        saved, self._last = self._last, 0
        return saved

    def struct_end(self, saved: int) -> None:
        self._last = saved

    def skip(self, kind: int, depth: int) -> None:
        if depth > _MAX_NESTING:
            raise _Refused("a page header nested too deeply")
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.skip_bytes(1)
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.skip_bytes(8)
        elif kind == _BINARY:
            self.skip_bytes(self.varint())
        elif kind in (_LIST, _SET):
            header = self.byte()
            count, element = header >> 4, header & 0x0F
            if count == 15:
                count = self.varint()
            self._skip_elements(count, (element,), depth)
        elif kind == _MAP:
            count = self.varint()
            if count:
                types = self.byte()
                self._skip_elements(count, (types >> 4, types & 0x0F), depth)
        elif kind == _STRUCT:
            saved = self.struct_start()
            while (field := self.fields()) is not None:
                self.skip(field[1], depth + 1)
            self.struct_end(saved)
        else:
            raise _Refused(f"Thrift type {kind} in a page header")

    def _skip_elements(self, count: int, kinds: tuple[int, ...], depth: int) -> None:
        # Every element takes at least one byte: a count beyond the bytes left is a lie.
        if count > self.end - self.pos:
            raise _Refused("a page header declares more elements than it holds")
        for _ in range(count):
            for kind in kinds:
                if kind in (_TRUE, _FALSE):
                    self.skip_bytes(1)  # booleans in containers take a byte each
                else:
                    self.skip(kind, depth + 1)

    def first_i32(self, depth: int) -> int | None:
        """Field 1 (an i32) of the struct starting here; the rest is skipped."""
        saved = self.struct_start()
        found = None
        while (field := self.fields()) is not None:
            field_id, kind = field
            if field_id == 1 and kind == _I32:
                found = self.zigzag()
            else:
                self.skip(kind, depth + 1)
        self.struct_end(saved)
        return found


@dataclass(frozen=True)
class _Page:
    kind: int
    header_bytes: int
    uncompressed: int
    compressed: int
    values: int


def _page_header(data: bytes, pos: int, end: int) -> _Page:
    reader = _Compact(data, pos, min(end, pos + MAX_PAGE_HEADER_BYTES))
    kind = uncompressed = compressed = None
    values = 0
    reader.struct_start()
    while (field := reader.fields()) is not None:
        field_id, type_ = field
        if field_id in (1, 2, 3) and type_ == _I32:
            value = reader.zigzag()
            if field_id == 1:
                kind = value
            elif field_id == 2:
                uncompressed = value
            else:
                compressed = value
        elif field_id in (5, 7, 8) and type_ == _STRUCT:
            found = reader.first_i32(1)
            if found is None:
                raise _Refused("a page header without its number of values")
            values = found
        else:
            reader.skip(type_, 1)
    if kind is None or uncompressed is None or compressed is None:
        raise _Refused("a page header without its type or sizes")
    return _Page(kind, reader.pos - pos, uncompressed, compressed, values)


def _walk_chunk(data: bytes, start: int, end: int, bounds: ParquetBounds) -> tuple[int, int]:
    """The values and uncompressed bytes (page headers included) of the pages of the
    column chunk at ``data[start:end]``."""
    values = decoded = 0
    pos = start
    while pos < end:
        page = _page_header(data, pos, end)
        if page.kind not in (_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2):
            raise _Refused(f"a page of type {page.kind}")
        if page.compressed < 0 or page.uncompressed < 0 or page.values < 0:
            raise _Refused("a page header with a negative size or count")
        if page.uncompressed > bounds.max_page_bytes:
            raise _Refused(f"a page of {page.uncompressed} bytes (at most {bounds.max_page_bytes})")
        pos += page.header_bytes + page.compressed
        if pos > end:
            raise _Refused("a page runs past its column chunk")
        if page.kind != _DICTIONARY_PAGE:
            values += page.values
        decoded += page.header_bytes + page.uncompressed
    return values, decoded


def open_bounded(
    data: bytes,
    path: str,
    bounds: ParquetBounds,
    read_dictionary: list[str] | None = None,
) -> pq.ParquetFile:
    """``data`` (the whole file ``path``) as a ParquetFile, once what it declares is
    within ``bounds`` (see the module docstring).

    Raises:
        PublishedStateError: not a Parquet file, or a footer, row group, column chunk
            or page that declares more than ``bounds`` or disagrees with another
            (naming ``path``).
    """

    def refuse(why: str) -> PublishedStateError:
        return PublishedStateError(f"{path}: {why}", path=path)

    if len(data) < 12 or data[:4] != _MAGIC or data[-4:] != _MAGIC:
        raise refuse("not a Parquet file")
    footer = int.from_bytes(data[-8:-4], "little")
    body_end = len(data) - 8 - footer
    if footer > bounds.max_footer_bytes or body_end < 4:
        raise refuse(f"a Parquet footer of {footer} bytes in a file of {len(data)}")
    limits = {
        "thrift_string_size_limit": footer,
        "thrift_container_size_limit": max(1024, footer // 2),
    }
    try:
        meta = pq.ParquetFile(pa.BufferReader(data), **limits).metadata
    except (pa.ArrowException, OSError, ValueError) as e:
        raise refuse(f"not a readable Parquet file ({e})") from e
    if not 0 <= meta.num_rows <= bounds.max_rows:
        raise refuse(f"declares {meta.num_rows} rows (at most {bounds.max_rows} are read)")
    if meta.num_row_groups > bounds.max_row_groups:
        raise refuse(f"{meta.num_row_groups} row groups (at most {bounds.max_row_groups})")
    per_column: dict[int, int] = {}
    decoded = rows = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows < 0:
            raise refuse(f"row group {g} declares {group.num_rows} rows")
        rows += group.num_rows
        for c in range(group.num_columns):
            chunk = group.column(c)
            where = f"row group {g}, column {chunk.path_in_schema}"
            declared = chunk.num_values
            per_column[c] = per_column.get(c, 0) + declared
            if declared < 0 or per_column[c] > bounds.max_values:
                raise refuse(f"{where}: {declared} values (at most {bounds.max_values})")
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and chunk.dictionary_page_offset:
                start = min(start, chunk.dictionary_page_offset)
            end = start + chunk.total_compressed_size
            if start < 4 or chunk.total_compressed_size < 0 or end > body_end:
                raise refuse(f"{where}: its pages lie outside the file's data")
            try:
                values, unpacked = _walk_chunk(data, start, end, bounds)
            except _Refused as e:
                raise refuse(f"{where}: {e}") from e
            if values != declared:
                raise refuse(f"{where}: its pages hold {values} values, its footer says {declared}")
            if unpacked > chunk.total_uncompressed_size:
                raise refuse(
                    f"{where}: its pages decompress to {unpacked} bytes, its footer says "
                    f"{chunk.total_uncompressed_size}"
                )
            decoded += unpacked
            if decoded > bounds.max_decoded_bytes:
                raise refuse(f"decompresses to more than {bounds.max_decoded_bytes} bytes")
    if rows != meta.num_rows:
        raise refuse(f"its row groups hold {rows} rows, its footer says {meta.num_rows}")
    try:
        return pq.ParquetFile(pa.BufferReader(data), read_dictionary=read_dictionary, **limits)
    except KeyError as e:  # a column to read as a dictionary is not in the file
        raise refuse(f"has no column {e}") from e
    except (pa.ArrowException, OSError, ValueError) as e:
        raise refuse(f"not a readable Parquet file ({e})") from e
