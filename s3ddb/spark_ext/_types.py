"""Between Spark schemas and dataset schemas."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from s3ddb.errors import SchemaMismatchError
from s3ddb.format.schema import conform

#: Spark's TimestampType travels as UTC microseconds.
SPARK_TIME_ZONE = "UTC"


def quoted_name(name: str) -> str:
    """``name`` as a Spark SQL identifier (backquoted, backquotes doubled), so that
    any column name (dots, spaces...) refers to that column."""
    return "`" + name.replace("`", "``") + "`"


def spark_schema_of(arrow: pa.Schema, where: str) -> Any:
    """The Spark StructType a dataset with ``arrow`` reads as.

    Raises:
        SchemaMismatchError: a column has a type Spark cannot represent.
    """
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    fields = []
    for field in arrow:
        try:
            spark_type = from_arrow_type(field.type, prefer_timestamp_ntz=True)
        except Exception as exc:
            raise SchemaMismatchError(
                f"column {field.name!r} of {where} is {field.type}, which Spark cannot read: {exc}"
            ) from None
        fields.append(StructField(field.name, spark_type, nullable=field.nullable))
    return StructType(fields)


def check_projection(spark_schema: Any, arrow: pa.Schema, where: str) -> None:
    """Check that each column of ``spark_schema`` (a user-given read schema) has the
    Spark type the dataset's column of that name reads as (nullability aside).

    Raises:
        SchemaMismatchError: a column's type differs (the message names both).
    """
    for field in spark_schema.fields:
        want = spark_schema_of(pa.schema([arrow.field(field.name)]), where).fields[0].dataType
        if field.dataType != want:
            raise SchemaMismatchError(
                f"column {field.name!r} of {where} reads as {want.simpleString()}, the "
                f"given schema says {field.dataType.simpleString()}"
            )


def arrow_schema_of(spark_schema: Any) -> pa.Schema:
    """The Arrow schema of the batches Spark exchanges for ``spark_schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone=SPARK_TIME_ZONE)


def _same_in_spark(a: pa.DataType, b: pa.DataType) -> bool:
    from pyspark.sql.pandas.types import from_arrow_type

    try:
        return bool(from_arrow_type(a) == from_arrow_type(b))
    except Exception:
        return False


def conform_to_dataset(table: pa.Table, target: pa.Schema, *, where: str) -> pa.Table:
    """``table`` (as Spark produced it) with the dataset's exact types.

    A column whose Arrow type differs from the dataset's but is the same Spark type
    (e.g. ``timestamp[us, UTC]`` for a ``timestamp[ns]`` column, ``int32`` for a
    ``date32``... whatever round-trips through Spark) is cast, refusing values that
    do not fit; anything else must match as :func:`s3ddb.format.schema.conform` says.

    Raises:
        SchemaMismatchError: columns or types differ, or a value does not fit.
    """
    names = set(target.names)
    columns, fields = [], []
    for field in table.schema:
        column = table.column(field.name)
        if field.name in names:
            want = target.field(field.name).type
            if not field.type.equals(want) and _same_in_spark(field.type, want):
                try:
                    column = column.cast(want, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaMismatchError(
                        f"column {field.name!r} of {where}: values do not fit {want}: {exc}"
                    ) from None
                field = field.with_type(want)
        columns.append(column)
        fields.append(field)
    return conform(pa.Table.from_arrays(columns, schema=pa.schema(fields)), target, where=where)


def cast_for_spark(table: pa.Table, target: pa.Schema) -> pa.Table:
    """``table`` cast to exactly ``target`` (types and nullability), as Spark checks.

    Raises:
        SchemaMismatchError: a value Spark's type cannot hold (a timestamp with
            nanoseconds, Spark's being microseconds), naming the column.
    """
    if table.schema.equals(target, check_metadata=False):
        return table
    columns = [table.column(f.name) for f in target]
    return pa.Table.from_arrays(
        [c if c.type.equals(f.type) else _cast(c, f) for c, f in zip(columns, target)],
        schema=target,
    )


def _cast(column: pa.ChunkedArray, field: pa.Field) -> pa.ChunkedArray:
    try:
        return column.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(
            f"column {field.name!r}: its {column.type} values cannot be read by Spark as "
            f"{field.type} without loss ({exc}); read it with s3ddb.dataset(...).to_table(), "
            "or store it in a type Spark has (for timestamps: microseconds)"
        ) from None
