"""The BTREE scalar index: one Parquet file of (key, fragment_id, row_offset) rows.

Rows are sorted by key and written in small row groups, each with min/max statistics,
so the row groups are the pages of a one-level B-tree: a lookup reads the file footer
(the "inner node"), keeps the row groups whose key range can hold a wanted key, and
reads only those. NULL keys are not stored: no equality, IN or range condition matches
NULL. Deleted rows are stored too; readers apply deletion files (deleting rows never
has to touch the index).
"""

from __future__ import annotations

import bisect
import functools
import io
import uuid as uuid_mod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3ddb.errors import StoredMetadataError, UnsupportedIndexError
from s3ddb.format.bases import FileResolver
from s3ddb.format.datafile import read_fragment
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.index import FILES_KEY, FORMAT_KEY, IndexMetadata
from s3ddb.format.layout import index_file_path
from s3ddb.format.manifest import Manifest
from s3ddb.format.parquet_source import arrow_input
from s3ddb.io.object_store import ObjectStore
from s3ddb.tasks.fragment_map import parallel_map

__all__ = [
    "BTREE_FILE",
    "BTREE_FORMAT",
    "INDEX_ROW_GROUP_SIZE",
    "Condition",
    "KeyRange",
    "KeySet",
    "build_btree",
    "check_keys_at",
    "index_file_name",
    "indexed_column",
    "is_btree",
    "lookup",
    "supports_type",
]

#: The value of ``details[FORMAT_KEY]`` for this layout.
BTREE_FORMAT = "btree-parquet-v1"
BTREE_FILE = "btree.parquet"
#: Index rows per row group: a point lookup reads one group of this many keys.
INDEX_ROW_GROUP_SIZE = 8 * 1024
KEY, FRAGMENT, OFFSET = "key", "fragment_id", "row_offset"


def supports_type(data_type: pa.DataType) -> bool:
    """Whether a column of this type can have a BTREE index (ordered scalars)."""
    t = pa.types
    return bool(
        t.is_integer(data_type)
        or t.is_floating(data_type)
        or t.is_string(data_type)
        or t.is_large_string(data_type)
        or t.is_date(data_type)
        or t.is_timestamp(data_type)
        or t.is_decimal(data_type)
    )


def build_btree(store: ObjectStore, manifest: Manifest, column: str, name: str) -> IndexMetadata:
    """Index ``column`` over every fragment of ``manifest`` and write the index file.

    Raises:
        UnsupportedIndexError: the column's type cannot be indexed.
    """
    schema = manifest.schema
    data_type = schema.arrow.field(column).type
    if not supports_type(data_type):
        raise UnsupportedIndexError(
            f"cannot build a BTREE index on column {column!r} of type {data_type}: "
            "only integer, floating point, decimal, string, date and timestamp "
            "columns can be indexed"
        )

    files = FileResolver.for_manifest(store, manifest)  # a clone reads through bases

    def keys_of(fragment: FragmentMetadata) -> pa.Table:
        keys = read_fragment(files, fragment, schema, [column]).column(0)
        offsets = pa.array(np.arange(fragment.physical_rows, dtype=np.uint32))
        table = pa.table(
            {
                KEY: keys,
                FRAGMENT: pa.array(np.full(fragment.physical_rows, fragment.id, np.uint32)),
                OFFSET: offsets,
            }
        )
        return table.filter(pc.is_valid(table.column(KEY)))

    fragments = list(manifest.fragments)
    pieces = parallel_map(keys_of, fragments)
    empty = pa.schema(
        [pa.field(KEY, data_type), pa.field(FRAGMENT, pa.uint32()), pa.field(OFFSET, pa.uint32())]
    ).empty_table()
    table = pa.concat_tables([empty, *pieces]) if pieces else empty
    table = table.sort_by([(KEY, "ascending"), (FRAGMENT, "ascending"), (OFFSET, "ascending")])
    buffer = io.BytesIO()
    pq.write_table(
        table, buffer, row_group_size=INDEX_ROW_GROUP_SIZE, compression="zstd",
        write_statistics=[KEY],
    )  # fmt: skip
    index_uuid = uuid_mod.uuid4().hex
    store.put(index_file_path(index_uuid, BTREE_FILE), buffer.getvalue())
    return IndexMetadata(
        uuid=index_uuid,
        name=name,
        fields=(schema.field_id(column),),
        dataset_version=manifest.version,
        fragment_ids=frozenset(f.id for f in fragments),
        index_type="BTREE",
        details={FILES_KEY: BTREE_FILE, FORMAT_KEY: BTREE_FORMAT, "rows": str(table.num_rows)},
    )


def is_btree(index: IndexMetadata) -> bool:
    """Whether s3ddb can read ``index`` (an index of its own BTREE layout)."""
    return index.index_type == "BTREE" and index.details.get(FORMAT_KEY) == BTREE_FORMAT


def indexed_column(manifest: Manifest, index: IndexMetadata) -> str | None:
    """The top-level column of ``manifest`` that ``index`` indexes, if it is one s3ddb
    reads and builds: its own BTREE of one field that is a top-level column there.
    None for anything else (another writer's index type, Lance's system indices, a
    field nested or gone)."""
    if not (is_btree(index) and len(index.fields) == 1):
        return None
    found = manifest.schema.names_for_ids([index.fields[0]])
    return found[0] if found and found[0] in manifest.schema.arrow.names else None


@dataclass(frozen=True)
class KeyRange:
    """Keys ``lo``..``hi`` (None: unbounded), each end inclusive or not."""

    lo: Any = None
    hi: Any = None
    lo_inclusive: bool = True
    hi_inclusive: bool = True

    def overlaps(self, low: Any, high: Any) -> bool:
        """Whether a key in [low, high] may lie in this range (True if unsure)."""
        try:
            lo, hi = self.lo, self.hi
            if lo is not None and (high < lo or (high == lo and not self.lo_inclusive)):
                return False
            if hi is not None and (low > hi or (low == hi and not self.hi_inclusive)):
                return False
        except (TypeError, ArithmeticError):  # keys of another type (a Decimal and NaN)
            return True
        return True


@dataclass(frozen=True)
class KeySet:
    """Exactly these keys (sorted, comparable values)."""

    values: tuple[Any, ...]

    def overlaps(self, low: Any, high: Any) -> bool:
        try:
            at = bisect.bisect_left(self.values, low)
            return at < len(self.values) and self.values[at] <= high
        except (TypeError, ArithmeticError):
            return True


Condition = KeyRange | KeySet


def lookup(
    store: ObjectStore,
    index: IndexMetadata,
    conditions: Sequence[Condition],
    exact: pc.Expression | None,
    column: str,
    rows_of: Callable[[set[int]], Mapping[int, int]],
    key_type: pa.DataType,
) -> dict[int, np.ndarray]:
    """Row offsets, per covered fragment of the version, whose key may satisfy every
    condition: index row groups no condition can match are never read, and the rows
    read are filtered with ``exact`` (the conditions' predicate over ``column``).
    ``rows_of(ids)`` gives the physical rows of the fragments among ``ids`` that the
    version lists (asked only for the fragments the index names: a version whose
    fragment list is in chunks fetches only theirs).

    Offsets are sorted. Fragments without a match are absent.

    ``key_type`` is the indexed column's type: the file's keys must be of it.

    The offsets are the index's word: a caller reading rows at them checks that each
    holds a key the conditions match (:func:`check_keys_at`), so that an index file
    pointing keys at other rows is refused where it is used.

    Raises:
        StoredMetadataError: the index file is not a BTREE file of this layout (its
            columns, key type, or row count other than its manifest entry records,
            told by its footer before a row is read), or points at a row beyond its
            fragment's physical rows or at one row twice (the message names the file
            and the fragment).
    """
    if not index.fragment_ids:
        return {}
    path = index_file_path(index.uuid, BTREE_FILE)
    where = index_file_name(store, index)
    try:
        table = _read_groups(store, path, conditions, where, index, key_type)
        if table is None:
            return {}
        if exact is not None:
            table = _matching(table, exact, column)
    except (pa.ArrowException, OSError, ValueError, MemoryError) as exc:
        if isinstance(exc, FileNotFoundError | StoredMetadataError):
            raise
        raise StoredMetadataError(f"{where} is corrupt: {str(exc)[:300]}") from None
    fragments = table.column(FRAGMENT).to_numpy()
    offsets = table.column(OFFSET).to_numpy()
    named = {int(fid) for fid in np.unique(fragments)} & index.fragment_ids
    fragment_rows = rows_of(named) if named else {}
    out: dict[int, np.ndarray] = {}
    for fid in np.unique(fragments):
        if int(fid) in fragment_rows:
            found = np.sort(offsets[fragments == fid])
            rows = fragment_rows[int(fid)]
            if found.size and int(found[-1]) >= rows:
                raise StoredMetadataError(
                    f"{where}: row offset {int(found[-1])} of fragment {int(fid)} is beyond "
                    f"its {rows} physical rows"
                )
            if found.size > 1 and not (found[1:] != found[:-1]).all():
                # A row found twice would be read (and returned) twice.
                raise StoredMetadataError(
                    f"{where}: lists a row of fragment {int(fid)} twice for one key range"
                )
            out[int(fid)] = found
    return out


@functools.lru_cache(maxsize=64)
def _as_stored(data_type: pa.DataType) -> pa.DataType:
    """``data_type`` as a Parquet file written by pyarrow gives it back (``date64`` is
    stored as ``date32``, ``timestamp[s]`` as ``timestamp[ms]``): an index file's keys
    are of the column's type or of this one."""
    buffer = io.BytesIO()
    pq.write_table(pa.schema([pa.field(KEY, data_type)]).empty_table(), buffer)
    return pq.read_schema(pa.BufferReader(buffer.getvalue())).field(KEY).type


def index_file_name(store: ObjectStore, index: IndexMetadata) -> str:
    """``index``'s BTREE file, for messages."""
    path = index_file_path(index.uuid, BTREE_FILE)
    return f"index file {store.url}/{path} of index {index.name!r}"


def check_keys_at(
    keys: pa.ChunkedArray | pa.Array, exact: pc.Expression, column: str, where: str, fragment: int
) -> None:
    """Check that the keys read at the offsets the index gave for ``fragment`` (the
    ``column`` values of those rows) satisfy ``exact``, the conditions they were
    looked up with: an index file that points a key at another row is refused where
    it is used, instead of the row being dropped (and the row that holds the key never
    read).

    Raises:
        StoredMetadataError: a row does not hold a key the conditions match, naming
            ``where`` (the index file) and the fragment.
    """
    if not len(keys):
        return
    matched = pa.table({column: keys}).filter(exact).num_rows
    if matched != len(keys):
        raise StoredMetadataError(
            f"{where}: {len(keys) - matched} of the rows it gives in fragment {fragment} "
            "do not hold the keys it lists them under (the file does not describe the "
            "data: drop and create the index again)"
        )


def _matching(table: pa.Table, exact: pc.Expression, column: str) -> pa.Table:
    """The index rows whose key satisfies ``exact`` (a predicate over ``column``).

    The predicate is evaluated over the key alone, named ``column``, beside a row
    position whose name differs from it: renaming the stored (key, fragment_id,
    row_offset) table would give two columns one name when the indexed column is
    itself called ``fragment_id`` or ``row_offset``.
    """
    position = "position" if column != "position" else "position_"
    keys = pa.table(
        {column: table.column(0), position: pa.array(np.arange(table.num_rows, dtype=np.int64))}
    )
    return table.take(keys.filter(exact).column(position))


def _read_groups(
    store: ObjectStore,
    path: str,
    conditions: Sequence[Condition],
    where: str,
    index: IndexMetadata,
    key_type: pa.DataType,
) -> pa.Table | None:
    """The rows of the index file's row groups some condition may match (None: no
    group can), after checking the file's footer: its columns, its key type, and its
    rows (as many as ``index`` records, in row groups of at most
    :data:`INDEX_ROW_GROUP_SIZE`), so that nothing is decoded in proportion to a
    count the footer merely claims.

    Raises:
        StoredMetadataError: the file holds other columns than (key, fragment_id,
            row_offset) with keys of ``key_type`` and uint32 ids and offsets, or other
            rows than recorded.
    """
    recorded = index.details.get("rows", "")
    if not (recorded.isascii() and recorded.isdigit()):
        raise StoredMetadataError(f"{where}: its manifest entry records {recorded!r} rows")
    source, threads = arrow_input(store, path)
    with source as f:
        parquet = pq.ParquetFile(f)
        schema = parquet.schema_arrow
        if schema.names != [KEY, FRAGMENT, OFFSET] or any(
            schema.field(n).type != pa.uint32() for n in (FRAGMENT, OFFSET)
        ):
            raise StoredMetadataError(
                f"{where}: holds columns {schema.names[:5]!r}, not ({KEY}, {FRAGMENT}, "
                f"{OFFSET}) with uint32 ids and offsets"
            )
        if schema.field(KEY).type not in (key_type, _as_stored(key_type)):
            raise StoredMetadataError(
                f"{where}: holds keys of type {schema.field(KEY).type}, its column is {key_type}"
            )
        metadata = parquet.metadata
        groups = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        if (
            metadata.num_rows != int(recorded)
            or sum(groups) != metadata.num_rows
            or any(not 0 <= n <= INDEX_ROW_GROUP_SIZE for n in groups)
        ):
            raise StoredMetadataError(
                f"{where}: its footer gives {metadata.num_rows} rows in {len(groups)} row "
                f"groups; the index records {recorded} (row groups of at most "
                f"{INDEX_ROW_GROUP_SIZE})"
            )
        keep = []
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(0).statistics
            unknown = stats is None or not stats.has_min_max
            if unknown or all(c.overlaps(stats.min, stats.max) for c in conditions):
                keep.append(group)
        if not keep:
            return None
        return parquet.read_row_groups(keep, use_threads=threads)
