"""Planning a native Spark read of one pinned version, on the driver, without Spark.

The plan says which Parquet files Spark's own reader reads, under which column names
and types, which rows of each are deleted, and how fragments stored in several data
files are put back together. Everything in it comes from the pinned manifest and the
data files' footers, both checked as untrusted input here: a footer that does not
match its fragment fails the plan with a typed error before Spark reads anything.

Fragments are grouped by *shape*: the files that serve the requested columns (one
*slot* per file, in the fragment's file order) and, per slot, each column's name and
type inside that file (its *layout*). Columns are found in a file by field id, so a
file written before a rename still reads; a column no file of a fragment holds reads
as nulls. No two files of a fragment hold the same field (a column rewritten into a
new file leaves a tombstone in the old one; a manifest saying otherwise is refused
when its fragments are decoded).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from s3ddb.errors import DataFileError
from s3ddb.format.bases import FileResolver
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
from s3ddb.format.parquet_source import (
    ParquetSource,
    data_file_errors,
    file_columns_by_id,
    read_footer,
)
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.object_store import ObjectStore

__all__ = [
    "DEFAULT_SCHEME_MAP",
    "FOOTER_THREADS",
    "Column",
    "FilePart",
    "Layout",
    "NativePlan",
    "Shape",
    "jvm_path",
    "native_type_problem",
    "plan_native_read",
]

#: How object store URLs map to URLs the JVM's Hadoop connector reads: ``s3://``
#: objects through the S3A connector by default (EMRFS users map ``s3`` to ``s3``).
DEFAULT_SCHEME_MAP: Mapping[str, str] = {"s3": "s3a"}

#: Footers and deletion files of remote datasets are fetched this many at a time.
FOOTER_THREADS = 16

# Characters Hadoop treats as a glob in a path given to spark.read: escaped.
_GLOB = re.compile(r"([\\{}\[\]*?])")
# Data file names Spark reports (``_metadata.file_name``) exactly as stored: the rows of
# files are told apart by name, so any other name is not read natively.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _hidden_by_spark(name: str) -> bool:
    """Whether Spark's file listing leaves out a file of this name (it takes names
    starting with ``_`` or ``.``, and ones ending with ``._COPYING_``, for metadata or
    files being copied), even when the path is given explicitly."""
    return name.startswith(("_", ".")) or name.endswith("._COPYING_")


@dataclass(frozen=True)
class Column:
    """One requested column inside one data file: the dataset's name for it, the
    file's own name for it (differs after a rename) and the file's Arrow type
    (differs after a widening)."""

    name: str
    physical: str
    physical_type: pa.DataType


#: The requested columns one data file serves, in the dataset's column order.
Layout = tuple[Column, ...]


@dataclass(frozen=True)
class FilePart:
    """One data file as Spark reads it: its path for the JVM, its file name (as
    Spark's ``_metadata.file_name`` gives it), its fragment, and its size in bytes
    when planned (as Spark's ``_metadata.file_size`` gives it; 0 if not known)."""

    path: str
    name: str
    fragment_id: int
    size: int = 0


@dataclass
class Shape:
    """Fragments read alike: ``slots[i]`` is the layout of their i-th serving file,
    ``fragments`` holds each fragment's files (one per slot), ``deleted`` the deleted
    row positions by the file name of slot 0 (only fragments with deletions)."""

    slots: tuple[Layout, ...]
    fragments: list[tuple[FilePart, ...]] = field(default_factory=list)
    deleted: dict[str, np.ndarray] = field(default_factory=dict)
    #: Whether its fragments have deletion files (planned with or without positions).
    with_deletions: bool = False

    @property
    def num_deleted(self) -> int:
        return sum(len(v) for v in self.deleted.values())


@dataclass
class NativePlan:
    """A native read of ``version``: ``columns`` (the dataset's Arrow fields, in the
    order read) from the fragments of each shape. ``refused`` says why the JVM cannot
    read this version natively (then nothing else is set)."""

    version: int
    columns: list[pa.Field]
    shapes: list[Shape] = field(default_factory=list)
    refused: str | None = None


def native_type_problem(t: pa.DataType) -> str | None:
    """Why Spark's Parquet reader would not read a column of Arrow type ``t`` as the
    Python data source does, or None if it does."""
    if pa.types.is_timestamp(t):
        return None if t.unit in ("ms", "us") else f"{t.unit} timestamps"
    if (
        pa.types.is_boolean(t)
        or pa.types.is_signed_integer(t)
        or (pa.types.is_floating(t) and not pa.types.is_float16(t))
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date32(t)
        or pa.types.is_decimal128(t)
    ):
        return None
    return f"type {t}"


def jvm_path(store: ObjectStore, path: str, scheme_map: Mapping[str, str]) -> str | None:
    """The URL at which Spark's JVM reads ``path`` of ``store`` (a local file as
    ``file://``; an ``s3://`` object through ``scheme_map``, default ``s3a://``),
    escaped so Hadoop takes it literally; None for a store the JVM cannot read
    (``memory://``)."""
    full = store.full_path(path)
    if store.protocol == "file":
        url = f"file://{full}"
    elif store.protocol == "s3":
        url = f"{scheme_map.get('s3', 's3a')}://{full}"
    else:
        return None
    return _GLOB.sub(r"\\\1", url)


@dataclass(frozen=True)
class _Footer:
    by_id: dict[int, str]
    types: dict[str, pa.DataType]
    names: tuple[str, ...]


def _footer(files: FileResolver, fragment: FragmentMetadata, data_file: DataFile) -> _Footer:
    """The field ids, names and types of one data file, checked against its fragment.

    Raises:
        DataFileMissingError: the file does not exist.
        DataFileError: it is not Parquet, holds another number of rows than the
            fragment, or lacks a column the fragment says it holds.
    """
    store, path = files.data_file(data_file)
    if store.is_local or data_file.file_size_bytes <= 0:
        source = ParquetSource(files, data_file, fragment)
        # Every declared field must be there (negative ids are tombstones of
        # superseded columns).
        source.columns([i for i in data_file.fields if i >= 0])
        schema = source.arrow_schema
    else:
        where = f"data file {store.url}/{path} of fragment {fragment.id}"
        with data_file_errors(where):
            metadata = read_footer(store, path, data_file.file_size_bytes)
            schema = metadata.schema.to_arrow_schema()
        if metadata.num_rows != fragment.physical_rows:
            raise DataFileError(
                f"{where} holds {metadata.num_rows} rows, its fragment records "
                f"{fragment.physical_rows}: the file was replaced or does not belong to it"
            )
        by_id = file_columns_by_id(schema)
        missing = sorted({i for i in data_file.fields if i >= 0} - set(by_id))
        if missing:
            raise DataFileError(f"{where}: no column with field id(s) {missing}")
    return _Footer(
        file_columns_by_id(schema), {f.name: f.type for f in schema}, tuple(schema.names)
    )


def _layout_problem(layout: Layout, footer: _Footer) -> str | None:
    """Why Spark's reader would not read ``layout`` from the file of ``footer`` as
    planned, or None."""
    file_names = [n.lower() for n in footer.names]
    for c in layout:
        problem = native_type_problem(c.physical_type)
        if problem is not None:
            return f"a data file stores column {c.name!r} with {problem}"
        if file_names.count(c.physical.lower()) > 1:
            # Spark matches a file's columns by name without case: ambiguous.
            return f"a data file has several columns named {c.physical!r} but for case"
    return None


def _serving(fragment: FragmentMetadata, ids: dict[int, str]) -> dict[int, int]:
    """Requested field id -> index of the data file of ``fragment`` that holds it
    (the last file declaring it)."""
    out: dict[int, int] = {}
    for index, data_file in enumerate(fragment.files):
        for i in data_file.fields:
            if i in ids:
                out[i] = index
    return out


def plan_native_read(
    ds: Any,
    columns: list[str] | None = None,
    scheme_map: Mapping[str, str] = DEFAULT_SCHEME_MAP,
    *,
    fragments: list[FragmentMetadata] | None = None,
    deleted_positions: bool = True,
    file_sizes: bool = False,
) -> NativePlan:
    """Plan a native read of the pinned version of ``ds`` (an :class:`s3ddb.Dataset`):
    of ``fragments`` only, if given (fragments of that version). Without
    ``deleted_positions`` the shapes' ``deleted`` stay empty (the caller removes
    deleted rows itself, e.g. on the executors): fragments with a deletion file are
    still in shapes of their own. With ``file_sizes`` each :class:`FilePart` has its
    size (a ``stat`` of each local file); else 0.

    Raises:
        ColumnNotFoundError: an unknown column in ``columns``.
        DataFileMissingError, DataFileError: a data file is missing or does not
            match its fragment.
        ManifestCorruptError, StoredMetadataError: a deletion file is missing or bad.
    """
    schema: DatasetSchema = ds.manifest.schema
    names = list(ds.schema.names) if columns is None else list(columns)
    if columns is not None:
        from s3ddb.reading.version_reader import resolve_columns

        resolve_columns(ds, names)
    fields = [ds.schema.field(n) for n in names]
    plan = NativePlan(ds.version, fields)
    for f in fields:
        problem = native_type_problem(f.type)
        if problem is not None:
            plan.refused = f"column {f.name!r} has {problem}"
            return plan
    lowered = [n.lower() for n in names]
    if len(set(lowered)) != len(lowered):
        plan.refused = "column names differ only in case (Spark resolves names without case)"
        return plan
    ids = dict(zip(schema.top_level_ids(names), names))
    files: FileResolver = ds.files()
    if fragments is None:
        fragments = ds.get_fragments()
    seen: set[str] = set()
    jobs: list[tuple[FragmentMetadata, list[int], list[str]]] = []
    for fragment in fragments:
        serving = _serving(fragment, ids)
        # The files serving columns; with none (only columns no file holds, or no
        # column at all), the first file still gives the fragment's rows.
        slots = sorted(set(serving.values())) or [0]
        paths = []
        for index in slots:
            data_file = fragment.files[index]
            store, path = files.data_file(data_file)
            url = jvm_path(store, path, scheme_map)
            if url is None:
                plan.refused = f"the JVM cannot read {store.protocol}:// files"
                return plan
            if not _PLAIN_NAME.fullmatch(data_file.path):
                plan.refused = f"data file name {data_file.path!r} has characters Spark may encode"
                return plan
            if _hidden_by_spark(data_file.path):
                # Spark's file listing skips such names even when given one by one:
                # read natively, the fragment's rows would be silently missing.
                plan.refused = f"data file name {data_file.path!r} is one Spark skips"
                return plan
            if data_file.path in seen:
                # Spark tells rows of files apart by name only.
                plan.refused = f"data file name {data_file.path!r} is used twice"
                return plan
            seen.add(data_file.path)
            paths.append(url)
        jobs.append((fragment, slots, paths))
    footers = _footers(files, [(fr, fr.files[i]) for fr, slots, _ in jobs for i in slots])
    shapes: dict[tuple[tuple[Layout, ...], bool], Shape] = {}
    with_deletions: list[tuple[Shape, str, FragmentMetadata]] = []
    for fragment, slots, paths in jobs:
        serving = _serving(fragment, ids)
        layouts = []
        for index in slots:
            footer = footers[fragment.files[index].path]
            served = []
            for i, name in ids.items():
                if serving.get(i) == index:
                    physical = footer.by_id[i]
                    served.append(Column(name, physical, footer.types[physical]))
            layouts.append(tuple(sorted(served, key=lambda c: names.index(c.name))))
        for index, layout in zip(slots, layouts):
            problem = _layout_problem(layout, footers[fragment.files[index].path])
            if problem is not None:
                plan.refused = problem
                return plan
        key = (tuple(layouts), fragment.deletion_file is not None)
        shape = shapes.setdefault(key, Shape(tuple(layouts), with_deletions=key[1]))
        parts = tuple(
            FilePart(
                url,
                data_file.path,
                fragment.id,
                _planned_size(files, data_file) if file_sizes else 0,
            )
            for data_file, url in zip((fragment.files[i] for i in slots), paths)
        )
        shape.fragments.append(parts)
        if fragment.deletion_file is not None:
            with_deletions.append((shape, parts[0].name, fragment))
    if not deleted_positions:
        with_deletions = []
    positions = _side_by_side(
        files, [fr for _, _, fr in with_deletions], lambda fr: _deleted(files, fr)
    )
    for (shape, name, _), deleted in zip(with_deletions, positions):
        shape.deleted[name] = deleted
    plan.shapes = list(shapes.values())
    return plan


def _planned_size(files: FileResolver, data_file: DataFile) -> int:
    """The size of ``data_file`` now: what the manifest records where the footer was
    read at that size (a remote file), what the file system says otherwise (a local
    file, whose footer is found from its end); 0 if it cannot be known."""
    store, path = files.data_file(data_file)
    if not store.is_local:
        return max(0, data_file.file_size_bytes)
    try:
        return store.head(path).size
    except (FileNotFoundError, OSError):
        return 0


def _deleted(files: FileResolver, fragment: FragmentMetadata) -> np.ndarray:
    deleted = read_deleted_rows(files, fragment)
    return np.fromiter(deleted, np.int64, len(deleted))


def _side_by_side(files: FileResolver, items: list[Any], fn: Any) -> list[Any]:
    """``fn`` over ``items`` in order: in threads when the dataset's store is remote
    (each call is a request), one after another otherwise."""
    if len(items) < 2 or not files.store.is_remote:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(FOOTER_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


def _footers(
    files: FileResolver, wanted: list[tuple[FragmentMetadata, DataFile]]
) -> dict[str, _Footer]:
    """The footers of ``wanted``, by data file path (unique in a plan)."""
    footers = _side_by_side(files, wanted, lambda item: _footer(files, *item))
    return {d.path: footer for (_, d), footer in zip(wanted, footers)}
