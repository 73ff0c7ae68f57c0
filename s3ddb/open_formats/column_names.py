"""Whether data files name their columns as the dataset's schema does, which Delta
needs: its readers find a column in a file by name (Iceberg's by field id).

s3ddb finds a file's columns by field id, so renaming a column of a dataset that does
not publish Delta changes only the schema, and the files written before keep the old
name; a dropped column stays in its files, unread, and its name may be taken again.
A dataset publishing Delta writes its files again on a rename
(:mod:`s3ddb.writes.schema_evolution`); files from before Delta was enabled are
checked here, by their Parquet footers, before they are published as Delta.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from s3ddb.format.bases import FileResolver
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.parquet_source import ParquetSource
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.parallel import process_pool

__all__ = ["MisnamedColumn", "describe_misnamed", "misnamed_columns"]

#: Footers read at once on remote stores.
_READ_THREADS = 16


@dataclass(frozen=True)
class MisnamedColumn:
    """A column of the schema that a data file holds under another name (``held``
    is that name), or, when ``held`` is None, a column of another field (a dropped
    one) that a file holds under the schema column's name: Delta would read it as
    ``name``'s values."""

    fragment_id: int
    path: str
    name: str
    held: str | None


def _file_problems(
    files: FileResolver, fragment: FragmentMetadata, schema: DatasetSchema
) -> list[MisnamedColumn]:
    """What is misnamed in ``fragment``'s data files (one footer read each).

    Raises:
        DataFileMissingError, DataFileError: a data file is missing or unreadable.
    """
    top = list(zip(schema.arrow.names, schema.top_level_ids(), strict=True))
    out = []
    for data_file in fragment.files:
        source = ParquetSource(files, data_file, fragment)
        file_names = set(source.arrow_schema.names)
        declared = set(data_file.fields)
        for name, field_id in top:
            if field_id in declared:
                held = source.by_id.get(field_id)
                if held is not None and held != name:
                    out.append(MisnamedColumn(fragment.id, data_file.path, name, held))
            elif name in file_names:
                out.append(MisnamedColumn(fragment.id, data_file.path, name, None))
    return out


def misnamed_columns(
    files: FileResolver, fragments: Iterable[FragmentMetadata], schema: DatasetSchema
) -> list[MisnamedColumn]:
    """Every column of ``schema`` that a data file of ``fragments`` holds under
    another name, or whose name a file gives another field's column (see
    :class:`MisnamedColumn`), in fragment order. Reads each file's footer, in
    parallel on remote stores.

    Raises:
        DataFileMissingError, DataFileError: a data file is missing or unreadable.
    """
    listed = list(fragments)
    if not listed:
        return []
    store = files.store
    if store.is_remote and len(listed) > 1:
        pool = process_pool("column-names", _READ_THREADS)
        found = list(pool.map(lambda f: _file_problems(files, f, schema), listed))
    else:
        found = [_file_problems(files, f, schema) for f in listed]
    return [problem for problems in found for problem in problems]


def describe_misnamed(misnamed: list[MisnamedColumn], limit: int = 5) -> str:
    """The first ``limit`` of ``misnamed`` as text, for an error message."""
    parts = []
    for m in misnamed[:limit]:
        if m.held is not None:
            parts.append(f"fragment {m.fragment_id} holds column {m.name!r} as {m.held!r}")
        else:
            parts.append(
                f"fragment {m.fragment_id} holds another (dropped) field's column as {m.name!r}"
            )
    more = len(misnamed) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
