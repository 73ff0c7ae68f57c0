"""Distributed writes: workers write data files, one driver commits.

    fragments = s3ddb.fragment.write_fragments(table, uri, schema=...)   # on workers
    s3ddb.Dataset.commit(uri, s3ddb.Append(all_fragments), read_version) # on the driver

:class:`FragmentMetadata` pickles and converts to JSON, so it can travel between
processes and machines.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

from s3ddb.format.datafile import DEFAULT_MAX_ROWS_PER_FILE, write_fragments_from_table
from s3ddb.format.fragment import DataFile, DeletionFile, FragmentMetadata
from s3ddb.format.schema import DatasetSchema, conform
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.uri import parse_uri
from s3ddb.writes.user_data import to_arrow_table

__all__ = ["DataFile", "DeletionFile", "FragmentMetadata", "write_fragments"]


def write_fragments(
    data: Any,
    uri: str | os.PathLike[str],
    *,
    schema: pa.Schema | DatasetSchema | None = None,
    storage_options: dict[str, Any] | None = None,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
) -> list[FragmentMetadata]:
    """Write ``data`` as data files of the dataset at ``uri``; commit nothing.

    ``schema`` must be the dataset's schema (``ds.manifest.schema`` keeps its field
    ids; an Arrow schema gets ids assigned as for a new dataset). The returned
    fragments go into an Append or Overwrite passed to :meth:`Dataset.commit`.

    Raises:
        SchemaMismatchError: ``data`` does not match ``schema``.
    """
    table = to_arrow_table(data)
    if schema is None:
        ds_schema = DatasetSchema.assign(table.schema)
    elif isinstance(schema, DatasetSchema):
        ds_schema = schema
    else:
        ds_schema = DatasetSchema.assign(schema)
    table = conform(table, ds_schema.arrow, where=os.fspath(uri))
    store = ObjectStore(parse_uri(uri), storage_options)
    return write_fragments_from_table(store, table, ds_schema, max_rows_per_file=max_rows_per_file)
