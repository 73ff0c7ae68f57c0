"""The executor side of Spark's merge (:mod:`s3ddb.spark_ext.merge`): reading the
target's candidate rows, applying the clauses to joined rows, writing deletion files.

Each task is a picklable callable for ``mapInArrow``. Tasks send on rows of
:data:`RESULT_DDL` (kind, fragment id, payload): never a row of the source or target,
only fragment metadata, Roaring bitmaps of row offsets, counts, or an error.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from s3ddb.errors import InvalidInputError, S3DDBError
from s3ddb.format.bases import FileResolver
from s3ddb.format.datafile import write_fragments_from_table
from s3ddb.format.deletion import deletion_path, read_deleted_rows, write_deletion_file
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_evaluation import within_key_bounds
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.written_files import delete_written_files
from s3ddb.scan import plan_fragment
from s3ddb.scan.visible_rows import read_with_positions
from s3ddb.spark_ext._types import arrow_schema_of, cast_for_spark, conform_to_dataset
from s3ddb.writes.merge_clauses import (
    DELETE,
    UPDATE,
    CompiledClauses,
    MergeClauses,
    check_unique_keys,
)
from s3ddb.writes.merge_insert import moved_lineage

__all__ = [
    "FRAGMENT",
    "FRAGMENTS_PER_DELETION_TASK",
    "IN_SOURCE",
    "REMOVED_BUCKET",
    "RESULT_DDL",
    "ROW",
    "ROWS_PER_TASK",
    "TARGET_PREFIX",
    "DeletionTask",
    "MergeTask",
    "TargetReader",
    "bucket_positions",
    "delete_change_files",
    "deletion_tasks",
    "removed_buckets",
    "result_batch",
    "source_schema",
]

#: About this many source (or, deleting by source, target) rows per merge task: each
#: task writes its updated and inserted rows as fragments of up to this size.
ROWS_PER_TASK = 1_000_000

#: Columns the merge adds: the target row's fragment id and offset, and a marker of
#: the source's side of a joined row.
FRAGMENT, ROW, IN_SOURCE = "__s3ddb_fragment", "__s3ddb_row", "__s3ddb_in_source"
#: Target columns are renamed with this prefix for the join.
TARGET_PREFIX = "__s3ddb_target_"
#: What tasks send on: (kind, fragment id, payload).
RESULT_DDL = "kind string, fid long, data binary"
_RESULT = pa.schema(
    [pa.field("kind", pa.string()), pa.field("fid", pa.int64()), pa.field("data", pa.binary())]
)


def source_schema(target: pa.Schema, extras: pa.Schema) -> pa.Schema:
    """The schema conditions see as ``source``: the target's columns, then the
    source's columns the target lacks."""
    return pa.schema([*target, *extras])


@dataclass(frozen=True)
class TargetReader:
    """Reads the candidate fragments' rows: the columns the merge needs (renamed with
    :data:`TARGET_PREFIX`), each row's fragment id and offset. Pickles to executors."""

    store: ObjectStore
    manifest: Manifest
    columns: list[str]
    pruner: Any
    bounds: tuple[tuple[str, Any, Any], ...]
    spark_schema: Any

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = self.manifest.schema
        files = FileResolver.for_manifest(self.store, self.manifest)
        fragments = {f.id: f for f in self.manifest.fragments}
        out_schema = arrow_schema_of(self.spark_schema)
        for batch in batches:
            for fid in batch.column(0).to_pylist():
                fragment = fragments[fid]
                plan = plan_fragment(files, fragment, schema, self.pruner)
                if plan is None:
                    continue
                table, positions = read_with_positions(plan, schema, self.columns)
                table = table.rename_columns([TARGET_PREFIX + c for c in self.columns])
                table = table.append_column(
                    FRAGMENT, pa.array(np.full(len(positions), fid, dtype=np.int64))
                )
                table = table.append_column(ROW, pa.array(positions.astype(np.int64)))
                inside = within_key_bounds(table, self.bounds, prefix=TARGET_PREFIX)
                if inside is not None:
                    table = table.filter(inside)
                if table.num_rows:
                    yield from cast_for_spark(table, out_schema).to_batches()


@dataclass
class _TaskState:
    """What one merge task gathers besides the rows it writes."""

    removed: dict[int, BitMap] = field(default_factory=dict)
    matched: dict[int, BitMap] = field(default_factory=dict)
    keys: list[pa.Table] = field(default_factory=list)
    counts: dict[str, int] = field(
        default_factory=lambda: {
            "num_inserted_rows": 0,
            "num_updated_rows": 0,
            "num_deleted_rows": 0,
        }
    )
    buffered: list[pa.Table] = field(default_factory=list)
    #: Where each buffered row was in the target (fragment id, offset; -1: inserted),
    #: kept on datasets with stable row ids: an updated row keeps its id.
    addresses: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    buffered_rows: int = 0
    written: list[FragmentMetadata] = field(default_factory=list)


def _add(bitmaps: dict[int, BitMap], fids: np.ndarray, rows: np.ndarray) -> None:
    for fid in np.unique(fids):
        bitmaps.setdefault(int(fid), BitMap()).update(rows[fids == fid].astype(np.uint32))


@dataclass(frozen=True)
class MergeTask:
    """Stage one: applies the clauses to one partition of the joined rows (all rows of
    its keys), writes the rows to insert or update, and sends on bitmaps, fragment
    metadata, counts, or the error that refuses the merge. Pickles to executors."""

    store: ObjectStore
    manifest: Manifest
    clauses: MergeClauses
    extras: pa.Schema
    bounds: tuple[tuple[str, Any, Any], ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        state = _TaskState()
        schema = self.manifest.schema.arrow
        compiled = self.clauses.compile(schema, source_schema(schema, self.extras))
        try:
            for batch in batches:
                if batch.num_rows:
                    self._apply(pa.Table.from_batches([batch]), compiled, state)
            self._flush(state, final=True)
            keys = pa.concat_tables(state.keys) if state.keys else None
            if keys is not None:
                check_unique_keys(keys, self.clauses.on)
        except S3DDBError as exc:
            # A refusal (a duplicate key, a matched row, a value that does not fit...):
            # reported as a result, so that the driver deletes every task's files and
            # raises the same error.
            yield from self._error(exc, state)
            return
        except BaseException:
            delete_written_files(self.store, data_file_paths(state.written))
            raise
        rows = [("counts", -1, json.dumps(state.counts).encode())]
        if state.written:
            rows.append(("fragments", -1, pickle.dumps(tuple(state.written))))
        rows += [("removed", fid, b.serialize()) for fid, b in state.removed.items()]
        rows += [("matched", fid, b.serialize()) for fid, b in state.matched.items()]
        yield result_batch(rows)

    def _error(self, exc: Exception, state: _TaskState) -> Iterator[pa.RecordBatch]:
        delete_written_files(self.store, data_file_paths(state.written))
        message = json.dumps({"type": type(exc).__name__, "message": str(exc)}).encode()
        yield result_batch([("error", -1, message)])

    def _apply(self, table: pa.Table, compiled: CompiledClauses, state: _TaskState) -> None:
        schema = self.manifest.schema.arrow
        clauses = self.clauses
        in_source = pc.fill_null(table.column(IN_SOURCE), False)
        in_target = pc.is_valid(table.column(FRAGMENT))
        where = f"merge_insert source ({self.store.url})"
        own = [f.name for f in schema]
        source_part = table.filter(in_source)
        if source_part.num_rows:
            inside = within_key_bounds(source_part, self.bounds)
            keys = source_part.select(list(clauses.on))
            if inside is not None and not pc.all(pc.or_(inside, _has_null(keys))).as_py():
                raise InvalidInputError(
                    "the merge source gave other keys than when its key range was computed "
                    "(a nondeterministic DataFrame): persist() it before merging; nothing "
                    "was committed"
                )
            state.keys.append(keys)
        both = table.filter(pc.and_(in_source, in_target))
        if both.num_rows and clauses.reads_matched:
            source_rows = _source_rows(both, own, self.extras, schema, where)
            target_rows = _target_rows(both, compiled, schema, where)
            outcome = compiled.matched(source_rows, target_rows)
            fids = both.column(FRAGMENT).to_numpy()
            offsets = both.column(ROW).to_numpy()
            _add(state.matched, fids, offsets)
            taken = (outcome == UPDATE) | (outcome == DELETE)
            _add(state.removed, fids[taken], offsets[taken])
            state.counts["num_updated_rows"] += int((outcome == UPDATE).sum())
            state.counts["num_deleted_rows"] += int((outcome == DELETE).sum())
            updated = outcome == UPDATE
            self._write(
                source_rows.select(own).filter(pa.array(updated)),
                state,
                (fids[updated], offsets[updated]),
            )
        elif both.num_rows:
            _add(state.matched, both.column(FRAGMENT).to_numpy(), both.column(ROW).to_numpy())
        only_source = table.filter(pc.and_(in_source, pc.invert(in_target)))
        if only_source.num_rows and clauses.insert:
            source_rows = _source_rows(only_source, own, self.extras, schema, where)
            keep = compiled.inserted(source_rows)
            state.counts["num_inserted_rows"] += int(keep.sum())
            self._write(source_rows.select(own).filter(pa.array(keep)), state, None)
        only_target = table.filter(pc.and_(pc.invert(in_source), in_target))
        if only_target.num_rows and clauses.delete_by_source:
            target_rows = _target_rows(only_target, compiled, schema, where)
            gone = compiled.deleted_by_source(target_rows)
            state.counts["num_deleted_rows"] += int(gone.sum())
            _add(
                state.removed,
                only_target.column(FRAGMENT).to_numpy()[gone],
                only_target.column(ROW).to_numpy()[gone],
            )

    def _write(
        self, rows: pa.Table, state: _TaskState, moved: tuple[np.ndarray, np.ndarray] | None
    ) -> None:
        """Buffer ``rows`` to write: updated rows, whose target addresses are
        ``moved``, or inserted ones (None)."""
        if not rows.num_rows:
            return
        state.buffered.append(rows)
        state.buffered_rows += rows.num_rows
        if self.manifest.stable_row_ids:
            none = np.full(rows.num_rows, -1, dtype=np.int64)
            state.addresses.append(moved if moved is not None else (none, none))
        self._flush(state, final=False)

    def _flush(self, state: _TaskState, *, final: bool) -> None:
        if state.buffered_rows and (final or state.buffered_rows >= ROWS_PER_TASK):
            table = pa.concat_tables(state.buffered)
            addresses = state.addresses
            state.buffered, state.buffered_rows, state.addresses = [], 0, []
            written = write_fragments_from_table(self.store, table, self.manifest.schema)
            state.written += written  # tracked at once: deleted if what follows fails
            if addresses:
                # Updated rows keep their ids and creation versions; inserted rows
                # get theirs at commit (as the local merge_insert does).
                lineage = moved_lineage(
                    self.manifest,
                    np.concatenate([a[0] for a in addresses]),
                    np.concatenate([a[1] for a in addresses]),
                )
                state.written[-len(written) :] = lineage.spread(written)


def _has_null(keys: pa.Table) -> pa.ChunkedArray:
    out = None
    for column in keys.columns:
        part = pc.is_null(column)
        out = part if out is None else pc.or_(out, part)
    assert out is not None
    return out


def _target_rows(
    table: pa.Table, compiled: CompiledClauses, schema: pa.Schema, where: str
) -> pa.Table:
    """The target's side of joined rows: the columns the clauses read, in the
    dataset's types and names."""
    names = compiled.target_columns
    rows = table.select([TARGET_PREFIX + c for c in names]).rename_columns(names)
    return conform_to_dataset(rows, pa.schema([schema.field(c) for c in names]), where=where)


def _source_rows(
    table: pa.Table, own: list[str], extras: pa.Schema, schema: pa.Schema, where: str
) -> pa.Table:
    """The source's side of joined rows: the dataset's columns in its types, then the
    columns the dataset lacks as Spark gave them."""
    rows = conform_to_dataset(table.select(own), schema, where=where)
    for f in extras:
        rows = rows.append_column(f, table.column(f.name))
    return rows


def result_batch(rows: list[tuple[str, int, bytes]]) -> pa.RecordBatch:
    kinds, fids, data = zip(*rows) if rows else ((), (), ())
    return pa.RecordBatch.from_arrays(
        [pa.array(kinds, pa.string()), pa.array(fids, pa.int64()), pa.array(data, pa.binary())],
        schema=_RESULT,
    )


def delete_change_files(
    store: ObjectStore, written: list[FragmentMetadata], results: list[Any]
) -> None:
    """Delete the data files ``written`` and the deletion files the deletion tasks'
    ``results`` (:data:`RESULT_DDL` rows) name: the change they belong to (a merge,
    an update) is not committed."""
    deletions = [pickle.loads(d) for kind, _f, d in results if kind == "deletion"]
    delete_written_files(store, [*data_file_paths(written), *(deletion_path(f) for f in deletions)])


def deletion_tasks(fragments: int, cores: int) -> int:
    """How many :class:`DeletionTask` tasks write the deletion files of ``fragments``
    fragments on ``cores`` cores: one per core while each writes at most
    :data:`FRAGMENTS_PER_DELETION_TASK` (a task's set-up costs more than a few small
    files: eight tasks for twenty fragments took 0.35 s, 0.07 s of it work), four
    per core beyond (so that uneven fragments even out)."""
    if fragments <= cores * FRAGMENTS_PER_DELETION_TASK:
        return max(1, min(fragments, cores))
    return cores * 4


def removed_buckets(rows: Any) -> Any:
    """``rows`` (a DataFrame of :data:`FRAGMENT` and :data:`ROW`, each row removed)
    as results of kind :data:`REMOVED_BUCKET` for :class:`DeletionTask`: Spark gathers
    each fragment's positions into bitmaps of 32,768 rows in the JVM
    (``bitmap_construct_agg``, aggregated in each task before the shuffle), so that a
    few kilobytes per 32,768 rows reach Python rather than every position (an update
    of every 20th row of 20,000,000 sends 610 buckets of 4 KiB instead of 2,000,000
    positions, and its addresses' stage took 0.68 s instead of 0.85 s). ``data`` is
    the bucket's number (8 bytes, big-endian) and its 4,096-byte bitmap (bit
    ``i % 8`` of byte ``i // 8``)."""
    from pyspark.sql import functions as F

    bucket = F.shiftright(F.col(ROW), _BUCKET_BITS)
    offset = F.col(ROW).bitwiseAND((1 << _BUCKET_BITS) - 1)
    number = F.unhex(F.lpad(F.hex(F.col(_BUCKET)), 16, "0"))
    return (
        rows.select(FRAGMENT, bucket.alias(_BUCKET), offset.alias(_OFFSET))
        .groupBy(FRAGMENT, _BUCKET)
        .agg(F.bitmap_construct_agg(_OFFSET).alias(_BITS))
        .select(
            F.lit(REMOVED_BUCKET).alias("kind"),
            F.col(FRAGMENT).alias("fid"),
            F.concat(number, F.col(_BITS)).alias("data"),
        )
    )


#: The result kind of :func:`removed_buckets`.
REMOVED_BUCKET = "removed_bucket"
_BUCKET_BITS = 15
_BUCKET, _OFFSET, _BITS = "__s3ddb_bucket", "__s3ddb_offset", "__s3ddb_bits"


def bucket_positions(data: bytes) -> np.ndarray:
    """The positions a :data:`REMOVED_BUCKET` result's ``data`` holds.

    Raises:
        ValueError: ``data`` is not a bucket number and a 4,096-byte bitmap.
    """
    if len(data) != 8 + (1 << _BUCKET_BITS) // 8:
        raise ValueError(f"a removed rows' bucket of {len(data)} bytes")
    base = int.from_bytes(data[:8], "big") << _BUCKET_BITS
    bits = np.unpackbits(np.frombuffer(data, np.uint8, offset=8), bitorder="little")
    return np.flatnonzero(bits).astype(np.uint64) + base


#: Fragments a :class:`DeletionTask` takes before the tasks are four per core.
FRAGMENTS_PER_DELETION_TASK = 64


@dataclass(frozen=True)
class DeletionTask:
    """Stage two (partitioned by fragment id): one deletion file per fragment whose
    rows the merge removed; every other result passes through. Pickles to executors."""

    store: ObjectStore
    manifest: Manifest
    fragments: dict[int, FragmentMetadata]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        removed: dict[int, BitMap] = {}
        matched: dict[int, BitMap] = {}
        passed: list[tuple[str, int, bytes]] = []
        for batch in batches:
            for kind, fid, data in zip(*(c.to_pylist() for c in batch.columns)):
                if kind == "removed":
                    removed.setdefault(fid, BitMap()).update(BitMap.deserialize(data))
                elif kind == REMOVED_BUCKET:
                    positions = bucket_positions(data).astype(np.uint32)
                    removed.setdefault(fid, BitMap()).update(positions)
                elif kind == "matched":
                    matched.setdefault(fid, BitMap()).update(BitMap.deserialize(data))
                else:
                    passed.append((kind, fid, data))
        files = FileResolver.for_manifest(self.store, self.manifest)
        written: list[str] = []
        out = list(passed)
        try:
            for fid, rows in removed.items():
                fragment = self.fragments[fid]
                total = read_deleted_rows(files, fragment) | rows
                out.append(("affected", fid, rows.serialize()))
                if len(total) >= fragment.physical_rows:
                    out.append(("gone", fid, b""))
                    continue
                deletion = write_deletion_file(self.store, fid, self.manifest.version, total)
                new = fragment.with_deletion_file(deletion)
                written.append(deletion_path(new))
                out.append(("deletion", fid, pickle.dumps(new)))
        except BaseException:
            delete_written_files(self.store, written)
            raise
        out += [("matched", fid, b.serialize()) for fid, b in matched.items()]
        if out:
            yield result_batch(out)
