"""Planning delete and update: from a pinned manifest and a predicate to an operation.

A plan reads the version it is given, writes the files the change needs (deletion
files, data files) and returns the operation to commit. It commits nothing: the
caller commits with the manifest's version as the read version, and on a retryable
conflict plans again on the newest version. Files of a plan that fails are deleted
before the error propagates, so nothing half-written is left behind.

Each file is written by the per-fragment task that computed its content (deletion
files, rewritten rows or columns), wherever the tasks run (:mod:`s3ddb.tasks.fragment_map`):
on Spark executors, only metadata and the affected rows' bitmaps come back to the
driver. Tasks report every path they write, so a plan's files are deleted whichever
task failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from s3ddb.errors import (
    ColumnNotFoundError,
    InvalidExpressionError,
    InvalidInputError,
    OpenFormatError,
    SchemaMismatchError,
)
from s3ddb.expressions import parse_value_expression, referenced_columns
from s3ddb.expressions.compiled import compile_filter
from s3ddb.format import layout
from s3ddb.format.bases import FileResolver
from s3ddb.format.datafile import read_fragment, write_data_file, write_fragments_from_table
from s3ddb.format.deletion import deletion_path, read_deleted_rows, write_deletion_file
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_evaluation import all_rows, apply_values, evaluate, take_rows
from s3ddb.format.row_lineage import PENDING_VERSION, RowLineage, encode_versions
from s3ddb.format.stats import compute_file_statistics, live_statistics
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites
from s3ddb.io.written_files import FileTracker
from s3ddb.open_formats.publisher import enabled_formats
from s3ddb.operations import TOMBSTONE_FIELD_ID, Delete, RowChangePlan, Update, UpdateMode
from s3ddb.scan import RowGroupPredicate, plan_fragment
from s3ddb.scan.visible_rows import candidate_fragments, read_with_positions
from s3ddb.tasks.fragment_map import distributed, map_writing, parallel_map

__all__ = [
    "DeletionPlan",
    "RewriteMode",
    "RowDeletions",
    "choose_mode",
    "compile_values",
    "delete_rows",
    "find_rows",
    "plan_delete",
    "plan_update",
    "predicate_text",
    "write_deletions",
]

RewriteMode = Literal["auto", "rows", "columns"]


@dataclass(frozen=True)
class DeletionPlan:
    """Rows to delete per fragment, and the fragments' current deletion state."""

    deleted_before: dict[int, BitMap]
    rows: dict[int, BitMap]

    @property
    def num_rows(self) -> int:
        return sum(len(r) for r in self.rows.values())


@dataclass(frozen=True)
class RowDeletions:
    """Rows deleted, with the deletion files already written for them: the matched
    rows per fragment (only fragments with some), the fragments with their new
    deletion file, and the ids of fragments now wholly deleted (both in the
    manifest's order)."""

    rows: dict[int, BitMap]
    updated: tuple[FragmentMetadata, ...]
    removed: tuple[int, ...]


def _row_finder(
    store: ObjectStore,
    manifest: Manifest,
    predicate: pc.Expression | None,
    may_match: RowGroupPredicate | None,
    sources: FileResolver | None = None,
) -> Callable[[FragmentMetadata], tuple[BitMap, BitMap]]:
    """A per-fragment search: (rows deleted before, visible rows matching ``predicate``),
    reading through ``sources`` (default: the manifest's resolver). It captures no
    manifest, so it ships to executors small."""
    schema = manifest.schema
    if sources is None:
        sources = FileResolver.for_manifest(store, manifest)

    def scan(fragment: FragmentMetadata) -> tuple[BitMap, BitMap]:
        if predicate is None:
            deleted = read_deleted_rows(sources, fragment)
            return deleted, all_rows(fragment.physical_rows) - deleted
        plan = plan_fragment(sources, fragment, schema, may_match)
        if plan is None:
            # No row can match: its deletions are never needed (nothing is added).
            return BitMap(), BitMap()
        _rows, positions = read_with_positions(plan, schema, [], predicate)
        deleted = (
            BitMap() if plan.keep is None else BitMap(np.flatnonzero(~plan.keep).astype(np.uint32))
        )
        return deleted, BitMap(positions.astype(np.uint32))

    return scan


def _candidates(manifest: Manifest, may_match: RowGroupPredicate | None) -> list[FragmentMetadata]:
    # Fragments whose statistics rule the filter out cost no task (a point lookup in
    # 10,000 fragments starts one or two).
    return candidate_fragments(manifest.fragments, manifest.schema, may_match)


def find_rows(
    store: ObjectStore,
    manifest: Manifest,
    predicate: pc.Expression | None,
    may_match: RowGroupPredicate | None = None,
    sources: FileResolver | None = None,
) -> DeletionPlan:
    """The visible rows matching ``predicate`` (None: every visible row), per fragment,
    read through ``sources`` (default: the manifest's resolver).

    ``may_match`` (implied by ``predicate``, see :mod:`s3ddb.expressions.pruning`) skips fragments
    and row groups whose statistics rule it out; only the filter's columns are read.
    """
    scan = _row_finder(store, manifest, predicate, may_match, sources)
    candidates = _candidates(manifest, may_match)
    before: dict[int, BitMap] = {f.id: BitMap() for f in candidates}
    rows: dict[int, BitMap] = {}
    for fragment, (deleted, matched) in zip(candidates, parallel_map(scan, candidates)):
        before[fragment.id] = deleted
        if matched:
            rows[fragment.id] = matched
    return DeletionPlan(before, rows)


def _with_deletions(
    store: ObjectStore,
    read_version: int,
    fragment: FragmentMetadata,
    total: BitMap,
    pending: PendingWrites | None = None,
) -> FragmentMetadata | None:
    """``fragment`` with a new deletion file of the offsets ``total`` (named after
    ``read_version``; with ``pending`` its upload only started), or None, writing
    nothing, where ``total`` deletes every row."""
    if len(total) >= fragment.physical_rows:
        return None
    deletion = write_deletion_file(store, fragment.id, read_version, total, pending)
    return fragment.with_deletion_file(deletion)


def delete_rows(
    store: ObjectStore,
    manifest: Manifest,
    predicate: pc.Expression,
    may_match: RowGroupPredicate | None,
    files: FileTracker,
) -> RowDeletions:
    """:func:`find_rows` and the deletion files of what it finds, in one task per
    fragment: each task writes its fragment's deletion file, so where tasks run on
    executors only metadata and bitmaps come back; where they run here, the uploads
    go beside the commit's own (``files.pending``). Every file written is in
    ``files``, also when this raises."""
    scan = _row_finder(store, manifest, predicate, may_match)
    version = manifest.version
    pending = None if distributed() else files.pending

    def delete_in(
        fragment: FragmentMetadata, written: list[str]
    ) -> tuple[BitMap, FragmentMetadata | None]:
        deleted, matched = scan(fragment)
        if not matched:
            return matched, None
        new = _with_deletions(store, version, fragment, deleted | matched, pending)
        if new is not None:
            written.append(deletion_path(new))
        return matched, new

    candidates = _candidates(manifest, may_match)
    rows: dict[int, BitMap] = {}
    updated, removed = [], []
    for fragment, (matched, new) in zip(candidates, map_writing(delete_in, candidates, files)):
        if not matched:
            continue
        rows[fragment.id] = matched
        if new is None:
            removed.append(fragment.id)
        else:
            updated.append(new)
    return RowDeletions(rows, tuple(updated), tuple(removed))


def write_deletions(
    store: ObjectStore, manifest: Manifest, plan: DeletionPlan, files: FileTracker
) -> tuple[list[FragmentMetadata], list[int]]:
    """Deletion files for ``plan``, written here (their uploads only started where
    ``files`` has pending writes): (fragments with a new deletion file, ids of
    fragments now wholly deleted)."""
    updated, removed = [], []
    for fragment in manifest.fragments.select(plan.rows).values():
        rows = plan.rows.get(fragment.id)
        if not rows:
            continue
        total = plan.deleted_before[fragment.id] | rows
        new = _with_deletions(store, manifest.version, fragment, total, files.pending)
        if new is None:
            removed.append(fragment.id)
            continue
        files.add(deletion_path(new))
        updated.append(new)
    return updated, removed


def predicate_text(predicate: str | pc.Expression) -> str:
    return predicate if isinstance(predicate, str) else str(predicate)


def plan_delete(
    store: ObjectStore,
    manifest: Manifest,
    predicate: str | pc.Expression,
    pending: PendingWrites | None = None,
) -> Delete | None:
    """A Delete of the rows matching ``predicate`` (None if no row matches). With
    ``pending``, deletion files written here upload beside the commit's own.

    Raises:
        ColumnNotFoundError, InvalidExpressionError: a bad predicate.
    """
    if isinstance(predicate, str) and not predicate.strip():
        raise InvalidExpressionError("delete needs a predicate; to delete every row use 'true'")
    compiled = compile_filter(predicate, manifest.schema.arrow)
    expr = compiled.predicate
    files = FileTracker(store, pending)
    with files.cleanup_on_error():
        found = delete_rows(store, manifest, expr, compiled.may_match, files)
        if not found.rows:
            return None
        op = Delete(
            found.updated,
            found.removed,
            predicate_text(predicate),
            found.rows,
            plan=RowChangePlan(predicate_expr=expr),
        )
    return op


# --- update ------------------------------------------------------------------------------


def _type_family(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return "datetime"
    return str(t)


def compile_values(
    values: Mapping[str, str | pc.Expression], schema: pa.Schema
) -> dict[str, pc.Expression]:
    """Value expressions, each cast to its column's type.

    Raises:
        InvalidInputError: ``values`` is empty or not a mapping of column names.
        ColumnNotFoundError: a column to update does not exist.
        SchemaMismatchError: a value's type would change the column's type (``id`` set
            to text, a date set to a number): cast it explicitly.
        InvalidExpressionError: a value does not parse or cannot be converted.
    """
    if not isinstance(values, Mapping) or not values:
        raise InvalidInputError("update needs a non-empty mapping {column: SQL expression}")
    out = {}
    probe = schema.empty_table()
    for column, value in values.items():
        if column not in schema.names:
            raise ColumnNotFoundError(
                f"cannot update column {column!r}: no such column; columns are {schema.names}"
            )
        target = schema.field(column).type
        raw = parse_value_expression(value, schema)
        source = evaluate(probe, {"v": raw}).schema.field("v").type
        if not pa.types.is_null(source) and _type_family(source) != _type_family(target):
            raise SchemaMismatchError(
                f"update of column {column!r} would change its type from {target} to "
                f"{source} ({value!r}); an update keeps column types: CAST the value "
                "explicitly if that is what you mean"
            )
        out[column] = parse_value_expression(value, schema, target_type=target)
    return out


def choose_mode(
    rewrite: RewriteMode, plan: DeletionPlan, manifest: Manifest, n_values: int
) -> UpdateMode:
    """REWRITE_COLUMNS when most rows of the touched fragments change but few columns
    do: writing those columns whole is then cheaper than moving the rows. Never on a
    dataset that publishes open formats: a fragment there is one file (Iceberg and
    Delta list whole files).

    Raises:
        OpenFormatError: ``rewrite="columns"`` on a dataset publishing open formats.
    """
    if rewrite == "rows":
        return UpdateMode.REWRITE_ROWS
    publishing = enabled_formats(manifest)
    if rewrite == "columns":
        if publishing:
            raise OpenFormatError(
                "update(rewrite='columns') writes a second data file per fragment, which "
                f"the open formats this dataset publishes ({', '.join(publishing)}) cannot "
                "list; use rewrite='rows' or 'auto'"
            )
        return UpdateMode.REWRITE_COLUMNS
    if rewrite != "auto":
        raise InvalidInputError(f"rewrite must be 'auto', 'rows' or 'columns', got {rewrite!r}")
    if publishing:
        return UpdateMode.REWRITE_ROWS
    by_id = manifest.fragments.select(plan.rows)
    visible = sum(by_id[fid].num_rows for fid in plan.rows)
    few_columns = n_values * 2 <= len(manifest.schema.arrow.names)
    return (
        UpdateMode.REWRITE_COLUMNS
        if few_columns and plan.num_rows * 2 >= visible
        else UpdateMode.REWRITE_ROWS
    )


def plan_update(
    store: ObjectStore,
    manifest: Manifest,
    values: Mapping[str, str | pc.Expression],
    where: str | pc.Expression | None,
    *,
    rewrite: RewriteMode = "auto",
    uri: str = "",
    pending: PendingWrites | None = None,
) -> Update | None:
    """An Update setting ``values`` on the rows matching ``where`` (all rows if None),
    or None if no row matches. With ``pending``, files written here (not on a
    :class:`~s3ddb.tasks.fragment_map.FragmentMapper`'s tasks) upload beside the
    commit's own.

    Raises:
        ColumnNotFoundError, InvalidExpressionError, SchemaMismatchError: bad values or
            predicate; nothing is written.
    """
    schema = manifest.schema
    exprs = compile_values(values, schema.arrow)
    compiled = compile_filter(where, schema.arrow) if where is not None else None
    predicate = compiled.predicate if compiled is not None else None
    # Small files are read whole, once to find the rows and once to rewrite them:
    # the second read comes from memory (here; tasks elsewhere read afresh).
    sources = FileResolver.for_manifest(store, manifest).remembering()
    may_match = compiled.may_match if compiled else None
    plan = find_rows(store, manifest, predicate, may_match, sources)
    if not plan.rows:
        return None
    mode = choose_mode(rewrite, plan, manifest, len(exprs))
    files = FileTracker(store, pending)
    text = predicate_text(where) if where is not None else ""
    with files.cleanup_on_error():
        if mode is UpdateMode.REWRITE_COLUMNS:
            updated = _rewrite_columns(store, manifest, plan, exprs, files, uri, sources)
            op = Update(
                updated_fragments=updated,
                fields_modified=tuple(schema.top_level_ids(list(exprs))),
                mode=mode,
                predicate=text,
                affected_rows=plan.rows,
                plan=RowChangePlan(
                    predicate_expr=predicate if predicate is not None else pc.scalar(True)
                ),
            )
        else:
            new, changed, removed = _rewrite_rows(store, manifest, plan, exprs, files, uri, sources)
            op = Update(
                removed_fragment_ids=tuple(removed),
                updated_fragments=tuple(changed),
                new_fragments=tuple(new),
                mode=mode,
                predicate=text,
                affected_rows=plan.rows,
                plan=RowChangePlan(
                    predicate_expr=predicate if predicate is not None else pc.scalar(True),
                    value_exprs=exprs,
                ),
            )
    return op


def _rewrite_rows(
    store: ObjectStore,
    manifest: Manifest,
    plan: DeletionPlan,
    values: dict[str, pc.Expression],
    files: FileTracker,
    uri: str,
    sources: FileResolver,
) -> tuple[list[FragmentMetadata], list[FragmentMetadata], list[int]]:
    """The changed rows of ``plan`` (read through ``sources``) written as new
    fragments, and the old rows deleted: (new fragments, fragments with a new
    deletion file, ids of fragments now wholly deleted)."""
    schema = manifest.schema
    names = list(schema.arrow.names)
    touched = list(manifest.fragments.select(plan.rows).values())

    def changed_rows(fragment: FragmentMetadata, rows: BitMap) -> pa.Table:
        table = read_fragment(sources, fragment, schema, names)
        return apply_values(take_rows(table, rows), values, schema.arrow, uri)

    if not distributed():
        # One table of every changed row, written here: fewer, fuller files.
        pieces = parallel_map(lambda f: changed_rows(f, plan.rows[f.id]), touched)
        table = pa.concat_tables(pieces) if pieces else schema.arrow.empty_table()
        new = write_fragments_from_table(store, table, schema, pending=files.pending)
        files.add(*data_file_paths(new))
        if manifest.stable_row_ids:
            # The rows moved keep their ids and creation; this version updates them.
            lineage = RowLineage.concat([RowLineage.of_rows(f, plan.rows[f.id]) for f in touched])
            new = lineage.touched().spread(new)
        changed, removed = write_deletions(store, manifest, plan, files)
        return new, changed, removed

    version = manifest.version
    stable = manifest.stable_row_ids

    # Each task writes the rows it changed and its fragment's deletion file: only
    # metadata travels back. Each carries its own bitmaps, not every fragment's.
    def write_changed(
        item: tuple[FragmentMetadata, BitMap, BitMap], written: list[str]
    ) -> tuple[list[FragmentMetadata], FragmentMetadata | None]:
        fragment, rows, before = item
        new = write_fragments_from_table(store, changed_rows(fragment, rows), schema)
        written.extend(data_file_paths(new))
        if stable:
            new = RowLineage.of_rows(fragment, rows).touched().spread(new)
        kept = _with_deletions(store, version, fragment, before | rows)
        if kept is not None:
            written.append(deletion_path(kept))
        return new, kept

    items = [(f, plan.rows[f.id], plan.deleted_before[f.id]) for f in touched]
    done = map_writing(write_changed, items, files)
    new = [f for written_new, _kept in done for f in written_new]
    changed = [kept for _new, kept in done if kept is not None]
    removed = [f.id for f, (_new, kept) in zip(touched, done) if kept is None]
    return new, changed, removed


def _rewrite_columns(
    store: ObjectStore,
    manifest: Manifest,
    plan: DeletionPlan,
    values: dict[str, pc.Expression],
    files: FileTracker,
    uri: str,
    sources: FileResolver,
) -> tuple[FragmentMetadata, ...]:
    schema = manifest.schema
    updated_names = list(values)
    needed = set(updated_names)
    for expr in values.values():
        needed |= referenced_columns(expr, schema.arrow)
    needed_names = [n for n in schema.arrow.names if n in needed]
    modified = set(schema.top_level_ids(updated_names))
    stable = manifest.stable_row_ids
    pending = None if distributed() else files.pending

    def rewrite(item: tuple[FragmentMetadata, BitMap], written: list[str]) -> FragmentMetadata:
        fragment, rows = item
        table = read_fragment(sources, fragment, schema, needed_names)
        # Values are computed for the matched rows only (an expression may fail, or
        # yield NULL for a NOT NULL column, on rows the update does not touch).
        new_values = apply_values(take_rows(table, rows), values, schema.arrow, uri)
        mask = np.zeros(fragment.physical_rows, dtype=bool)
        mask[np.fromiter(rows, dtype=np.int64, count=len(rows))] = True
        condition = pa.array(mask)
        columns = [
            pc.replace_with_mask(
                table.column(n).combine_chunks(),
                condition,
                new_values.column(n).combine_chunks(),
            )
            for n in updated_names
        ]
        target = pa.schema([schema.arrow.field(n) for n in updated_names])
        rewritten = pa.Table.from_arrays(columns, schema=target)
        data_file = write_data_file(store, rewritten, schema, pending)
        written.append(layout.data_file_path(data_file.path))
        kept = tuple(
            replace(d, fields=tuple(TOMBSTONE_FIELD_ID if i in modified else i for i in d.fields))
            for d in fragment.files
        )
        # Bounds of the rewritten columns now come from the new file (the old file's
        # no longer hold those fields, so theirs are no longer trusted).
        stats = compute_file_statistics(rewritten, schema, data_file)
        updated_at = b""
        if stable:
            # The rows it rewrote keep their ids; the commit stamps their version.
            lineage = RowLineage.of(fragment)
            updated_at = encode_versions(np.where(mask, PENDING_VERSION, lineage.updated))
        return FragmentMetadata(
            fragment.id,
            (*kept, data_file),
            fragment.physical_rows,
            fragment.deletion_file,
            stats=live_statistics((*kept, data_file), (*fragment.stats, stats)),
            updated_at=updated_at,
        )

    # Each task carries its own fragment's rows, not every fragment's.
    items = [(f, plan.rows[f.id]) for f in manifest.fragments.select(plan.rows).values()]
    return tuple(map_writing(rewrite, items, files))
