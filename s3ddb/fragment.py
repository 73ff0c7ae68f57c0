"""Distributed writes: workers write data files, one driver commits.

    fragments = s3ddb.fragment.write_fragments(table, uri, schema=...)   # on workers
    s3ddb.Dataset.commit(uri, s3ddb.operations.Append(all_fragments), read_version) # on the driver

:class:`FragmentMetadata` pickles and converts to JSON, so it can travel between
processes and machines.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import pyarrow as pa

from s3ddb.errors import InvalidInputError
from s3ddb.format.datafile import (
    DEFAULT_MAX_ROWS_PER_FILE,
    FileLayout,
    WriteProgress,
)
from s3ddb.format.fragment_metadata import DataFile, DeletionFile, FragmentMetadata
from s3ddb.format.schema import DatasetSchema, conform
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.uri import parse_uri
from s3ddb.operations import Append, Operation, Overwrite, Transaction
from s3ddb.pylance_compat import LanceFragment, check_write_options
from s3ddb.versions.opening import open_validated
from s3ddb.versions.pinned import PinnedVersion
from s3ddb.writes.user_data import to_arrow_table

__all__ = [
    "DataFile",
    "DeletionFile",
    "FragmentMetadata",
    "LanceFragment",
    "write_fragments",
]


def write_fragments(
    data: Any,
    dataset_uri: str | os.PathLike[str] | PinnedVersion,
    schema: pa.Schema | DatasetSchema | None = None,
    *,
    return_transaction: bool = False,
    mode: Literal["append", "overwrite"] = "append",
    storage_options: dict[str, Any] | None = None,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int | None = None,
    progress: WriteProgress | None = None,
    data_storage_version: str | None = None,
    **pylance_options: Any,
) -> list[FragmentMetadata] | Transaction:
    """Write ``data`` as data files of the dataset at ``dataset_uri``; commit nothing.

    ``schema`` must be the dataset's schema (``ds.manifest.schema`` keeps its field
    ids; an Arrow schema gets ids assigned as for a new dataset). The returned
    fragments go into an Append or Overwrite passed to :meth:`Dataset.commit`; with
    ``return_transaction`` (as in pylance) the result is that transaction instead: an
    Append (``mode="append"``, on an existing dataset) or an Overwrite, read at the
    newest version, for :meth:`Dataset.commit`. ``dataset_uri`` may be a Dataset (its
    URI and storage options). The file arguments are as :func:`s3ddb.write_dataset`'s.

    Raises:
        SchemaMismatchError: ``data`` does not match ``schema``.
        InvalidInputError: a bad ``mode`` or row limit.
        UnsupportedOperationError: a pylance argument s3ddb has no such thing for.
    """
    check_write_options("write_fragments", data_storage_version, pylance_options)
    if mode not in ("append", "overwrite"):
        raise InvalidInputError(f"mode must be 'append' or 'overwrite', got {mode!r}")
    layout = FileLayout.checked(max_rows_per_file, max_rows_per_group, progress)
    if isinstance(dataset_uri, PinnedVersion):
        storage_options = storage_options or dataset_uri.storage_options
        dataset_uri = dataset_uri.uri
    uri = os.fspath(dataset_uri)
    table = to_arrow_table(data)
    if schema is None:
        ds_schema = DatasetSchema.assign(table.schema)
    elif isinstance(schema, DatasetSchema):
        ds_schema = schema
    else:
        ds_schema = DatasetSchema.assign(schema)
    table = conform(table, ds_schema.arrow, where=uri)
    if not return_transaction:
        return layout.write(ObjectStore(parse_uri(uri), storage_options), table, ds_schema)
    handler = open_validated(uri, storage_options)
    fragments = tuple(layout.write(handler.store, table, ds_schema))
    latest = handler.latest_location()
    operation: Operation = Overwrite(fragments, ds_schema)
    if mode == "append" and latest is not None:
        operation = Append(fragments)
    return Transaction(latest.version if latest is not None else 0, operation)
