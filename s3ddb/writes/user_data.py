"""Turning user data (pyarrow, pandas, Python) into Arrow tables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from s3ddb.errors import InvalidInputError, SchemaMismatchError
from s3ddb.format.datafile import check_has_columns

__all__ = [
    "to_arrow_table",
]


def to_arrow_table(data: Any, schema: pa.Schema | None = None) -> pa.Table:
    """``data`` as a pyarrow Table.

    Accepts a Table, RecordBatch, RecordBatchReader, an iterable of RecordBatches,
    a pandas DataFrame, a dict of columns, a list of row dicts, or any object
    exporting an Arrow stream (``__arrow_c_stream__``: polars, DuckDB, a Dataset).

    Raises:
        InvalidInputError: the data is of an unsupported type, holds text that is
            not valid Unicode (a lone surrogate in a column name or value), or rows
            without a column (no data file could hold them).
        SchemaMismatchError: ``schema`` is given and the data cannot be cast to it.
    """
    try:
        table = _to_arrow_table(data, schema)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("utf-8", "backslashreplace").decode()
        raise InvalidInputError(
            f"the data holds text that is not valid Unicode ({bad!r} at position {exc.start} "
            f"of {exc.object.encode('utf-8', 'backslashreplace').decode()!r}: {exc.reason}); "
            "column names and strings must be encodable as UTF-8"
        ) from None
    # Here too: conforming it to a schema drops the count of rows without a column.
    check_has_columns(table)
    return table


def _to_arrow_table(data: Any, schema: pa.Schema | None) -> pa.Table:
    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    elif isinstance(data, pa.RecordBatchReader):
        table = data.read_all()
    elif _is_pandas(data):
        table = pa.Table.from_pandas(data, preserve_index=False, schema=schema)
    elif isinstance(data, dict):
        table = pa.table(data, schema=schema)
    elif isinstance(data, list) and (not data or isinstance(data[0], dict)):
        table = pa.Table.from_pylist(data, schema=schema)
    elif hasattr(data, "__arrow_c_stream__"):
        # Any Arrow PyCapsule stream: polars and DuckDB results, an s3ddb Dataset.
        table = pa.RecordBatchReader.from_stream(data).read_all()
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes)):
        batches = list(data)
        if not all(isinstance(b, pa.RecordBatch) for b in batches):
            raise InvalidInputError("an iterable of data must yield pyarrow RecordBatches")
        if not batches and schema is None:
            raise InvalidInputError("cannot infer a schema from no batches; pass schema=")
        table = pa.Table.from_batches(batches, schema=schema)
    else:
        raise InvalidInputError(
            f"unsupported data type {type(data).__name__}: pass a pyarrow Table, "
            "RecordBatch, RecordBatchReader, pandas DataFrame, dict of columns or list of rows"
        )
    if table.schema.metadata and b"pandas" in table.schema.metadata:
        table = table.replace_schema_metadata(
            {k: v for k, v in table.schema.metadata.items() if k != b"pandas"} or None
        )
    if schema is not None and not table.schema.equals(schema, check_metadata=False):
        try:
            table = table.select(schema.names).cast(schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise SchemaMismatchError(f"data cannot be cast to the given schema: {exc}") from exc
    return table


def _is_pandas(data: Any) -> bool:
    module = type(data).__module__
    return module.startswith("pandas") and type(data).__name__ == "DataFrame"
