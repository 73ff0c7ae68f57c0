"""Schema evolution: add, drop and alter columns; replace schema and field metadata.

Each change is one new version; older versions keep reading with their own schema.

* ``add_columns`` writes, for every fragment, one new data file holding the new
  columns (values computed from SQL expressions, or taken from a table aligned with
  the visible rows) and commits a **Merge**.
* ``drop_columns`` and the rename / nullability parts of ``alter_columns`` change
  only the schema (a **Project**); data files keep the dropped columns, unread.
* a safe type change in ``alter_columns`` rewrites that column in every fragment
  under a new field id (same name) and commits a **Merge**; old files keep the old
  id, which only older versions read.
* ``replace_schema_metadata`` / ``replace_field_metadata`` commit an
  **UpdateConfig**.

Deleted rows get NULLs in the new files: they are never read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.errors import (
    ColumnExistsError,
    ColumnNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    UnsafeCastError,
)
from s3ddb.format import layout
from s3ddb.format.bases import FileResolver
from s3ddb.format.datafile import read_fragment, write_data_file
from s3ddb.format.deletion import read_deletion_mask
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_evaluation import evaluate
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.stats import compute_file_statistics
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites
from s3ddb.io.written_files import FileTracker
from s3ddb.open_formats.publisher import by_name_formats, enabled_formats
from s3ddb.operations import MapUpdate, Merge, Operation, Project, UpdateConfig, next_field_id
from s3ddb.scan import read_visible_rows
from s3ddb.versions.pinned import plan_and_commit
from s3ddb.writes.user_data import to_arrow_table

if TYPE_CHECKING:
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "add_columns",
    "alter_columns",
    "drop_columns",
    "is_safe_cast",
    "plan_add_columns",
    "plan_alter_columns",
    "plan_drop_columns",
    "plan_field_metadata",
    "plan_rewrite_under_current_names",
    "plan_schema_metadata",
    "replace_field_metadata",
    "replace_schema_metadata",
]

_ALTER_KEYS = frozenset({"path", "name", "nullable", "data_type"})


# --- shared ------------------------------------------------------------------------------


def _top_level(schema: DatasetSchema, name: Any, what: str) -> str:
    """``name`` if it is a top-level column of ``schema``.

    Raises:
        InvalidInputError: not a string, or a nested field path (not supported).
        ColumnNotFoundError: no such column.
    """
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{what}: column names must be non-empty strings, got {name!r}")
    if name in schema.arrow.names:
        return name
    if "." in name and name.split(".", 1)[0] in schema.arrow.names:
        raise InvalidInputError(
            f"{what}: {name!r} is a nested field; only top-level columns can be changed "
            "(rewrite the struct column with update() instead)"
        )
    raise ColumnNotFoundError(f"{what}: no column {name!r}; columns are {schema.arrow.names}")


def _scatter(values: pa.Table, keep: pa.Array | None, physical_rows: int) -> pa.Table:
    """``values`` (one row per kept row) spread over ``physical_rows`` rows, NULL
    where ``keep`` is False (deleted rows)."""
    if keep is None:
        return values
    mask = keep.to_numpy(zero_copy_only=False)
    positions = np.cumsum(mask) - 1
    return values.take(pa.array(positions, mask=~mask))


def _file_table(columns: pa.Table) -> pa.Table:
    """``columns`` with every field nullable: the file also holds deleted rows' NULLs."""
    fields = [f.with_nullable(True) for f in columns.schema]
    return columns.cast(pa.schema(fields))


def _extend_fragments(
    store: ObjectStore,
    manifest: Manifest,
    columns_of: Callable[[FragmentMetadata], pa.Table],
    schema: DatasetSchema,
    pending: PendingWrites | None = None,
) -> Merge:
    """The Merge giving every fragment one new data file of ``columns_of(fragment)``
    (all its physical rows). Fragments are read, computed and written in parallel
    (object stores reward it; with ``pending`` the uploads go beside the commit's
    own); if any fails, every file written is deleted.

    A dataset that publishes open formats (Iceberg, Delta list whole files, never a
    row split over several) instead gets one new file per fragment holding every
    column of ``schema``: the columns it had, read back (deleted rows too, so its
    deletion file still applies), and the new ones."""
    whole = bool(enabled_formats(manifest))
    files = FileResolver.for_manifest(store, manifest)

    def whole_file(fragment: FragmentMetadata, new: pa.Table) -> pa.Table:
        old_names = dict(zip(manifest.schema.top_level_ids(), manifest.schema.arrow.names))
        kept = [
            (f, old_names[i])
            for f, i in zip(schema.arrow, schema.top_level_ids())
            if f.name not in new.column_names and i in old_names
        ]
        old = read_fragment(files, fragment, manifest.schema, [n for _f, n in kept])
        columns = {f.name: old.column(n).cast(f.type) for f, n in kept}
        columns.update({n: new.column(n) for n in new.column_names})
        fields = [f if f.name in new.column_names else f.with_nullable(True) for f in schema.arrow]
        fields = [new.schema.field(f.name) if f.name in new.column_names else f for f in fields]
        return pa.Table.from_arrays([columns[f.name] for f in fields], schema=pa.schema(fields))

    def extend(fragment: FragmentMetadata, write: _WriteFile) -> FragmentMetadata:
        table = _file_table(columns_of(fragment))
        if whole:
            table = whole_file(fragment, table)
        data_file, stats = write(table)
        if whole:
            return replace(fragment, files=(data_file,), stats=(stats,))
        return replace(fragment, files=(*fragment.files, data_file), stats=(*fragment.stats, stats))

    fragments = list(manifest.fragments)
    return _merge_writing(store, schema, fragments, extend, len(fragments), pending)


#: Writes one data file of a table with the schema being planned; gives it and its
#: statistics (see :func:`_merge_writing`).
_WriteFile = Callable[[pa.Table], tuple[Any, Any]]


def _merge_writing(
    store: ObjectStore,
    schema: DatasetSchema,
    fragments: list[FragmentMetadata],
    change: Callable[[FragmentMetadata, _WriteFile], FragmentMetadata],
    parallel: int,
    pending: PendingWrites | None = None,
) -> Merge:
    """The Merge of ``change(fragment, write)`` for every fragment of ``fragments``,
    run side by side (at most ``parallel``, and 8, at once); ``write(table)`` writes a
    data file of ``schema`` (with ``pending``: starts its upload, which the commit
    waits for) and gives it with its statistics. If any change fails, every file
    written is deleted (silently: that failure is what matters) and it is raised."""
    files = FileTracker(store, pending)
    lock = threading.Lock()

    def write(table: pa.Table) -> tuple[Any, Any]:
        data_file = write_data_file(store, table, schema, pending)
        with lock:
            files.add(layout.data_file_path(data_file.path))
        return data_file, compute_file_statistics(table, schema, data_file)

    # Leaving the pool (before the tracker's clean-up) waits for every started write,
    # so none lands after cleanup; the tracker waits for uploads still in flight.
    pool = ThreadPoolExecutor(max_workers=max(1, min(8, parallel)))
    with files.cleanup_on_error(), pool:
        changed = list(pool.map(lambda f: change(f, write), fragments))
    return Merge(tuple(changed), schema, tuple(files.paths))


def _check_new_names(schema: DatasetSchema, names: list[str], what: str) -> None:
    if not names:
        raise InvalidInputError(f"{what}: no columns given")
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"{what}: column names must be non-empty strings: {name!r}")
    clash = [n for n in names if n in schema.arrow.names]
    if clash:
        raise ColumnExistsError(
            f"{what}: columns {clash} already exist; columns are {schema.arrow.names}"
        )
    if len(set(names)) != len(names):
        raise InvalidInputError(f"{what}: a column name is given twice: {names}")


# --- add_columns ---------------------------------------------------------------------------


def plan_add_columns(
    store: ObjectStore,
    manifest: Manifest,
    transforms: Any,
    read_columns: list[str] | None,
    pending: PendingWrites | None = None,
) -> Merge:
    """The Merge adding ``transforms`` (``{name: SQL expression}``, or a table aligned
    with the visible rows in scan order) to ``manifest``'s version; with ``pending``,
    its files upload beside the commit's own.

    Raises:
        ColumnExistsError: a new column's name is taken.
        ColumnNotFoundError, InvalidExpressionError: a bad expression or read column.
        InvalidInputError: no columns, or a table whose length is not the row count.
    """
    if isinstance(transforms, Mapping):
        return _add_from_expressions(store, manifest, dict(transforms), read_columns, pending)
    if read_columns is not None:
        raise InvalidInputError("add_columns: read_columns applies to SQL expressions only")
    return _add_from_table(store, manifest, to_arrow_table(transforms), pending)


def _add_from_expressions(
    store: ObjectStore,
    manifest: Manifest,
    transforms: dict[str, Any],
    read_columns: list[str] | None,
    pending: PendingWrites | None,
) -> Merge:
    from s3ddb.expressions import parse_value_expression, referenced_columns

    schema = manifest.schema
    _check_new_names(schema, list(transforms), "add_columns")
    if read_columns is None:
        readable = list(schema.arrow.names)
    elif isinstance(read_columns, str):
        raise InvalidInputError("add_columns: read_columns must be a list of names")
    else:
        readable = [_top_level(schema, c, "add_columns read_columns") for c in read_columns]
    source = pa.schema([schema.arrow.field(n) for n in readable])
    exprs = {}
    for name, text in transforms.items():
        if not isinstance(text, (str, pc.Expression)):
            raise InvalidInputError(
                f"add_columns: the value of {name!r} must be SQL text or a pyarrow "
                f"Expression, got {type(text).__name__}"
            )
        exprs[name] = parse_value_expression(text, source)
    needed = set().union(*(referenced_columns(e, source) for e in exprs.values()))
    # A column is read even for constant expressions: evaluation needs the row count.
    columns = [n for n in readable if n in needed] or readable[:1]
    types = evaluate(source.empty_table(), exprs).schema
    untyped = [f.name for f in types if pa.types.is_null(f.type)]
    if untyped:
        raise InvalidInputError(
            f"add_columns: the type of {untyped} is unknown (NULL); write CAST(NULL AS type)"
        )
    new_fields = [pa.field(f.name, f.type) for f in types]
    new_schema = schema.extended(new_fields, next_field_id(manifest))
    target = pa.schema(new_fields)
    files = FileResolver.for_manifest(store, manifest)  # a clone reads through bases

    def compute(fragment: FragmentMetadata) -> pa.Table:
        table = read_fragment(files, fragment, schema, columns)
        keep = read_deletion_mask(files, fragment) if fragment.deletion_file else None
        visible = table.filter(keep) if keep is not None else table
        values = evaluate(visible, exprs).cast(target)
        return _scatter(values, keep, fragment.physical_rows)

    return _extend_fragments(store, manifest, compute, new_schema, pending)


def _add_from_table(
    store: ObjectStore, manifest: Manifest, data: pa.Table, pending: PendingWrites | None
) -> Merge:
    schema = manifest.schema
    _check_new_names(schema, data.column_names, "add_columns")
    if data.num_rows != manifest.num_rows:
        raise InvalidInputError(
            f"add_columns: the data has {data.num_rows} rows but version {manifest.version} "
            f"has {manifest.num_rows} visible rows; it must have one row per visible row, "
            "in scan order"
        )
    new_schema = schema.extended(list(data.schema), next_field_id(manifest))
    starts = np.cumsum([0] + [f.num_rows for f in manifest.fragments])
    offsets = {f.id: int(start) for f, start in zip(manifest.fragments, starts)}
    files = FileResolver.for_manifest(store, manifest)

    def piece(fragment: FragmentMetadata) -> pa.Table:
        rows = data.slice(offsets[fragment.id], fragment.num_rows)
        keep = read_deletion_mask(files, fragment) if fragment.deletion_file else None
        return _scatter(rows, keep, fragment.physical_rows)

    return _extend_fragments(store, manifest, piece, new_schema, pending)


# --- drop_columns --------------------------------------------------------------------------


def plan_drop_columns(manifest: Manifest, columns: Any) -> Project:
    """The Project removing ``columns`` from ``manifest``'s schema.

    Raises:
        ColumnNotFoundError: a column does not exist.
        InvalidInputError: no columns, a nested field, or every column.
    """
    schema = manifest.schema
    if isinstance(columns, str) or not isinstance(columns, (list, tuple)):
        raise InvalidInputError(f"drop_columns takes a list of column names, got {columns!r}")
    if not columns:
        raise InvalidInputError("drop_columns: no columns given")
    dropped = {_top_level(schema, c, "drop_columns") for c in columns}
    if dropped >= set(schema.arrow.names):
        raise InvalidInputError(
            "drop_columns: cannot drop every column; to empty the dataset, delete its rows "
            "or overwrite it"
        )
    arrow = pa.schema([f for f in schema.arrow if f.name not in dropped], schema.arrow.metadata)
    ids = tuple((p, i) for p, i in schema.ids if p[0] not in dropped)
    return Project(DatasetSchema(arrow, ids))


# --- alter_columns -------------------------------------------------------------------------


def _int_bits(t: pa.DataType) -> tuple[bool, int] | None:
    if pa.types.is_integer(t):
        return pa.types.is_signed_integer(t), t.bit_width
    return None


def is_safe_cast(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value of ``source`` converts to ``target`` exactly (and back)."""
    if source.equals(target):
        return True
    src, dst = _int_bits(source), _int_bits(target)
    if src and dst:
        (s_signed, s_bits), (d_signed, d_bits) = src, dst
        if s_signed:
            return d_signed and d_bits >= s_bits
        return d_bits > s_bits or (not d_signed and d_bits == s_bits)
    if src and pa.types.is_floating(target):
        # float32 holds integers exactly up to 2**24, float64 up to 2**53.
        return src[1] <= {16: 8, 32: 16, 64: 32}[target.bit_width]
    if pa.types.is_floating(source) and pa.types.is_floating(target):
        return target.bit_width >= source.bit_width
    if pa.types.is_decimal(source) and pa.types.is_decimal(target):
        return target.scale >= source.scale and (
            target.precision - target.scale >= source.precision - source.scale
        )
    for family in (
        (pa.string(), pa.large_string()),
        (pa.binary(), pa.large_binary()),
    ):
        if any(source.equals(t) for t in family) and any(target.equals(t) for t in family):
            return True
    return False


def _parse_alteration(schema: DatasetSchema, item: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(item, Mapping):
        raise InvalidInputError(
            f"alter_columns takes dicts such as {{'path': 'x', 'name': 'y'}}, got {item!r}"
        )
    unknown = set(item) - _ALTER_KEYS
    if unknown:
        raise InvalidInputError(
            f"alter_columns: unknown keys {sorted(unknown)}; known: {sorted(_ALTER_KEYS)}"
        )
    if "path" not in item:
        raise InvalidInputError(f"alter_columns: {dict(item)!r} has no 'path'")
    path = _top_level(schema, item["path"], "alter_columns")
    change = {k: v for k, v in item.items() if k != "path" and v is not None}
    if "name" in change and (not isinstance(change["name"], str) or not change["name"]):
        raise InvalidInputError(f"alter_columns: new name of {path!r} must be a non-empty string")
    if "nullable" in change and not isinstance(change["nullable"], bool):
        raise InvalidInputError(f"alter_columns: 'nullable' of {path!r} must be True or False")
    if "data_type" in change and not isinstance(change["data_type"], pa.DataType):
        raise InvalidInputError(
            f"alter_columns: 'data_type' of {path!r} must be a pyarrow DataType, "
            f"got {change['data_type']!r}"
        )
    return path, change


def plan_alter_columns(
    store: ObjectStore,
    manifest: Manifest,
    alterations: tuple[Any, ...],
    uri: str,
) -> Operation | None:
    """A Project (renames, nullability) or, if a type changes, a Merge rewriting those
    columns; None if nothing changes. A dataset publishing Delta rewrites its files
    on a rename too (see :func:`_extend_fragments`).

    Raises:
        ColumnNotFoundError: a path names no column.
        ColumnExistsError: a new name is taken (or given twice).
        UnsafeCastError: a type change could lose or alter values.
        SchemaMismatchError: a column made NOT NULL holds NULL in a visible row.
        InvalidInputError: malformed alterations, a nested path, a column altered twice.
    """
    schema = manifest.schema
    if not alterations:
        raise InvalidInputError("alter_columns: no alterations given")
    changes: dict[str, dict[str, Any]] = {}
    for item in alterations:
        path, change = _parse_alteration(schema, item)
        if path in changes:
            raise InvalidInputError(f"alter_columns: column {path!r} is altered twice")
        changes[path] = change
    renames = {p: c["name"] for p, c in changes.items() if c.get("name", p) != p}
    final = [renames.get(n, n) for n in schema.arrow.names]
    taken = sorted({n for n in final if final.count(n) > 1})
    if taken:
        raise ColumnExistsError(
            f"alter_columns: after renaming, columns {taken} would exist twice; columns are "
            f"{schema.arrow.names}"
        )
    casts: dict[str, pa.DataType] = {}
    for path, change in changes.items():
        old = schema.arrow.field(path).type
        new = change.get("data_type", old)
        if not new.equals(old):
            if not is_safe_cast(old, new):
                raise UnsafeCastError(
                    f"alter_columns: column {path!r} of {uri} cannot change from {old} to {new} "
                    "without risk of losing or altering values (allowed: wider integers, "
                    "integers to floats that hold them exactly, wider floats and decimals, "
                    "string <-> large_string, binary <-> large_binary)"
                )
            casts[path] = new
        if change.get("nullable") is False and schema.arrow.field(path).nullable:
            _check_no_nulls(store, manifest, path, uri)
    fields = []
    for f in schema.arrow:
        change = changes.get(f.name, {})
        new_field = f.with_name(renames.get(f.name, f.name))
        new_field = new_field.with_type(casts.get(f.name, f.type))
        fields.append(new_field.with_nullable(change.get("nullable", f.nullable)))
    arrow = pa.schema(fields, schema.arrow.metadata)
    if arrow.equals(schema.arrow, check_metadata=True):
        return None
    first = next_field_id(manifest)
    new_ids = {name: first + k for k, name in enumerate(casts)}
    ids = []
    for p, i in schema.ids:
        renamed = (renames.get(p[0], p[0]), *p[1:])
        ids.append((renamed, new_ids.get(p[0], i) if len(p) == 1 else i))
    new_schema = DatasetSchema(arrow, tuple(ids))
    if not casts and renames and by_name_formats(enabled_formats(manifest)):
        # Some formats' readers (Delta's: deltalake, DuckDB) find a column in a file by
        # the name it was written with, whatever the field id: a dataset publishing
        # one writes its files again, whole, under the new names.
        same = {p: schema.arrow.field(p).type for p in renames}
        return _rewrite_cast_columns(store, manifest, new_schema, same, renames)
    if not casts:
        return Project(new_schema)
    return _rewrite_cast_columns(store, manifest, new_schema, casts, renames)


def _check_no_nulls(store: ObjectStore, manifest: Manifest, column: str, uri: str) -> None:
    files = FileResolver.for_manifest(store, manifest)
    for fragment in manifest.fragments:
        values = read_visible_rows(files, fragment, manifest.schema, [column]).column(0)
        if values.null_count:
            raise SchemaMismatchError(
                f"alter_columns: column {column!r} of {uri} (version {manifest.version}) "
                f"holds NULL in {values.null_count} visible row(s) of fragment {fragment.id}; "
                "it cannot be made NOT NULL"
            )


def _rewrite_cast_columns(
    store: ObjectStore,
    manifest: Manifest,
    new_schema: DatasetSchema,
    casts: dict[str, pa.DataType],
    renames: dict[str, str],
) -> Merge:
    names = list(casts)
    target = pa.schema([new_schema.arrow.field(renames.get(n, n)) for n in names])
    files = FileResolver.for_manifest(store, manifest)

    def cast(fragment: FragmentMetadata) -> pa.Table:
        table = read_fragment(files, fragment, manifest.schema, names)
        arrays = [table.column(n).cast(casts[n]) for n in names]
        return pa.Table.from_arrays(arrays, schema=target)

    return _extend_fragments(store, manifest, cast, new_schema)


def plan_rewrite_under_current_names(
    store: ObjectStore, manifest: Manifest, fragment_ids: Collection[int]
) -> Merge:
    """The Merge writing each fragment of ``fragment_ids`` again as one data file of
    every column, named as the schema names it now (all its physical rows, so its
    deletion file still applies; dropped columns are left out), the other fragments
    as they are. What enabling Delta does to the files written before a rename:
    Delta readers find a file's columns by name. If a write fails, every file
    written is deleted.

    Raises:
        DataFileError: a fragment's data file is missing or unreadable.
    """
    schema = manifest.schema
    files = FileResolver.for_manifest(store, manifest)
    wanted = set(fragment_ids)
    names = list(schema.arrow.names)

    def rewrite(fragment: FragmentMetadata, write: _WriteFile) -> FragmentMetadata:
        if fragment.id not in wanted:
            return fragment
        data_file, stats = write(_file_table(read_fragment(files, fragment, schema, names)))
        return replace(fragment, files=(data_file,), stats=(stats,))

    return _merge_writing(store, schema, list(manifest.fragments), rewrite, len(wanted))


# --- metadata ------------------------------------------------------------------------------


def plan_field_metadata(manifest: Manifest, field: Any, metadata: Any) -> UpdateConfig:
    """The UpdateConfig replacing the metadata of top-level column ``field``.

    Raises:
        ColumnNotFoundError: no such column.
        InvalidInputError: a nested field, or metadata that is not a str -> str dict.
    """
    name = _top_level(manifest.schema, field, "replace_field_metadata")
    field_id = manifest.schema.field_id(name)
    return UpdateConfig(field_metadata={field_id: MapUpdate(_string_map(metadata), replace=True)})


def plan_schema_metadata(metadata: Any) -> UpdateConfig:
    """The UpdateConfig replacing the schema's metadata.

    Raises:
        InvalidInputError: metadata that is not a str -> str dict.
    """
    return UpdateConfig(schema_metadata=MapUpdate(_string_map(metadata), replace=True))


def _string_map(metadata: Any) -> dict[str, str]:
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(f"metadata must be a dict of strings, got {metadata!r}")
    return dict(metadata)


# --- the Dataset entry points ------------------------------------------------------------


def add_columns(
    ds: PinnedVersion,
    transforms: Any,
    read_columns: list[str] | None,
    conflict_retries: int | None,
    retry_timeout: float | None,
) -> None:
    """``ds.add_columns``: add columns as one new version (a Merge), moving ``ds`` there.

    ``transforms`` is ``{"name": "SQL expression over existing columns"}``
    (``read_columns`` limits what the expressions may read), or a pyarrow Table /
    RecordBatch / pandas DataFrame with exactly one row per visible row, in scan
    order. Every fragment gets one new data file with the new columns (new field ids;
    deleted rows hold NULL). SQL transforms are re-executed on the newest version
    after a retryable conflict (``conflict_retries``, ``retry_timeout`` as for
    ``update``); a table is never re-aligned with other rows.

    Raises:
        ColumnExistsError: a new column's name is taken.
        ColumnNotFoundError, InvalidExpressionError: a bad expression or read column,
            or an expression that fails on the data (nothing is left behind).
        InvalidInputError: no columns, a NULL-typed expression, or a table whose
            length is not the number of visible rows.
        RetryableCommitConflictError: a table was given and a concurrent commit
            changed the rows (or ``conflict_retries=0``).
        IncompatibleTransactionError: a restore or overwrite committed meanwhile.
        TooMuchWriteContentionError: the retries ran out.
    """
    store = ds.handler.store

    def plan(manifest: Manifest, pending: PendingWrites) -> tuple[Operation | None, None]:
        return plan_add_columns(store, manifest, transforms, read_columns, pending), None

    # Rows of a table are aligned with the visible rows the plan saw: after a
    # concurrent change, re-aligning them with other rows would be silently wrong.
    retries = conflict_retries if isinstance(transforms, Mapping) else 0
    plan_and_commit(ds, "add_columns", plan, retries, retry_timeout, uploads=True)


def drop_columns(
    ds: PinnedVersion, columns: Any, conflict_retries: int | None, retry_timeout: float | None
) -> None:
    """``ds.drop_columns``: remove top-level ``columns`` from the schema, as one new
    version (a Project); data files are untouched and earlier versions read them.

    Raises:
        ColumnNotFoundError: a column does not exist.
        InvalidInputError: not a list, no columns, a nested field, or every column.
        IncompatibleTransactionError: a restore or overwrite committed meanwhile.
        RetryableCommitConflictError, TooMuchWriteContentionError: as ``update``.
    """
    plan_and_commit(
        ds,
        "drop_columns",
        lambda manifest: (plan_drop_columns(manifest, columns), None),
        conflict_retries,
        retry_timeout,
    )


def alter_columns(
    ds: PinnedVersion,
    alterations: tuple[Any, ...],
    conflict_retries: int | None,
    retry_timeout: float | None,
) -> None:
    """``ds.alter_columns``: apply ``alterations`` (dicts with ``path`` and any of
    ``name``, ``nullable``, ``data_type``) as one new version: a Project for renames
    and nullability, a Merge rewriting the retyped columns (new field ids, same
    names) if a type changes; nothing if nothing changes.

    Raises:
        ColumnNotFoundError, ColumnExistsError: a missing path, a taken name.
        UnsafeCastError: a type change that could lose or alter values.
        SchemaMismatchError: NOT NULL over a column with NULL in a visible row.
        InvalidInputError: malformed alterations, a nested path, a column twice.
        IncompatibleTransactionError: a restore or overwrite committed meanwhile.
        RetryableCommitConflictError, TooMuchWriteContentionError: as ``update``.
    """
    store = ds.handler.store

    def plan(manifest: Manifest) -> tuple[Operation | None, None]:
        return plan_alter_columns(store, manifest, alterations, ds.uri), None

    plan_and_commit(ds, "alter_columns", plan, conflict_retries, retry_timeout)


def replace_schema_metadata(ds: PinnedVersion, metadata: Any) -> None:
    """``ds.replace_schema_metadata``: replace the schema's metadata (an
    UpdateConfig); earlier versions keep theirs.

    Raises:
        InvalidInputError: metadata that is not a dict of strings.
    """
    operation = plan_schema_metadata(metadata)
    plan_and_commit(ds, "replace_schema_metadata", lambda manifest: (operation, None), None, None)


def replace_field_metadata(ds: PinnedVersion, field: Any, metadata: Any) -> None:
    """``ds.replace_field_metadata``: replace the metadata of top-level column
    ``field`` (an UpdateConfig, by field id; re-resolved by name if the column was
    retyped or dropped concurrently).

    Raises:
        ColumnNotFoundError: no such column (also if dropped concurrently).
        InvalidInputError: a nested field, or metadata that is not a dict of strings.
    """
    plan_field_metadata(ds.manifest, field, metadata)  # bad input fails before any commit
    plan_and_commit(
        ds,
        "replace_field_metadata",
        lambda manifest: (plan_field_metadata(manifest, field, metadata), None),
        None,
        None,
    )
