"""Arguments of the native Spark read and write of the wrong kind are refused with
InvalidInputError saying what was expected, before anything is read or written (found
in review: ``columns="id,kind"`` was read as the columns "i", "d", ",", ...;
``max_rows_per_file=-1`` was taken as no limit; a view name that is not a string
was Py4J's error). On real local Spark with a dataset on a local path."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import InvalidInputError

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _dataset(local_uri: str) -> str:
    s3ddb.write_dataset(
        pa.table({"id": pa.array([1, 2], pa.int64()), "kind": ["a", "b"]}), local_uri
    )
    return local_uri


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"columns": "id,kind"}, r"columns must be a list of column names.*\['id', 'kind'\]"),
        ({"columns": ["id", 3]}, "columns must be a list of column names"),
        ({"native": "yes"}, "native must be None, True or False"),
        ({"scheme_map": "s3a"}, "scheme_map must map store schemes"),
    ],
)
def test_read_refuses_arguments_of_the_wrong_kind(
    spark: Any, local_uri: str, arguments: dict[str, Any], message: str
) -> None:
    import s3ddb.spark_ext

    uri = _dataset(local_uri)
    with pytest.raises(InvalidInputError, match=message):
        s3ddb.spark_ext.read(spark, uri, **arguments)
    assert s3ddb.spark_ext.read(spark, uri, columns=["kind"]).columns == ["kind"]


@pytest.mark.parametrize("native", [None, True, False])
def test_read_refuses_an_empty_column_list_on_every_path(
    spark: Any, local_uri: str, native: bool | None
) -> None:
    """``columns=[]`` read a frame of no column natively while the Python data source
    failed on it: both refuse it, before reading."""
    import s3ddb.spark_ext

    uri = _dataset(local_uri)
    with pytest.raises(InvalidInputError, match="at least one column"):
        s3ddb.spark_ext.read(spark, uri, columns=[], native=native)


def test_a_view_name_must_be_a_string(spark: Any, local_uri: str) -> None:
    import s3ddb.spark_ext

    uri = _dataset(local_uri)
    with pytest.raises(InvalidInputError, match="view name must be a non-empty string"):
        s3ddb.spark_ext.create_temp_view(spark, 5, uri)  # type: ignore[arg-type]
    s3ddb.spark_ext.create_temp_view(spark, "native_arguments_view", uri)
    assert spark.sql("SELECT COUNT(*) AS n FROM native_arguments_view").first().n == 2


@pytest.mark.parametrize("bad", [0, -1, "100", 2.5])
def test_write_refuses_a_bad_max_rows_per_file(spark: Any, local_uri: str, bad: Any) -> None:
    import s3ddb.spark_ext

    uri = _dataset(local_uri)
    df = spark.createDataFrame([(3, "c")], "id long, kind string")
    with pytest.raises(InvalidInputError, match="max_rows_per_file must be an int >= 1"):
        s3ddb.spark_ext.write(df, uri, max_rows_per_file=bad)
    assert s3ddb.dataset(uri).version == 1
    assert s3ddb.spark_ext.write(df, uri, max_rows_per_file=1).version == 2
