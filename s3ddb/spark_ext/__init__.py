"""s3ddb for PySpark (>= 4.1): a Python data source, SQL functions, distributed changes.

    import s3ddb.spark_ext
    spark = s3ddb.spark_ext.configure(SparkSession.builder).getOrCreate()
    df.write.format("s3ddb").mode("append").save(uri)
    spark.read.format("s3ddb").option("version", 3).load(uri)
    spark.sql("SELECT * FROM s3ddb_versions('<uri>')")
    s3ddb.spark_ext.delete(spark, uri, "id < 10")
    s3ddb.spark_ext.merge_insert(spark, uri, changes_df, "id")   # upsert on executors
    s3ddb.spark_ext.write(df, uri, mode="append")   # Spark's own Parquet writer
    s3ddb.spark_ext.read(spark, uri, version=3)      # Spark's own Parquet reader

Everything is pure Python: no jars, no ``spark.sql.extensions`` class. The data
source also registers itself in every session (PySpark discovers the top-level
``pyspark_s3ddb`` module this package installs); :func:`register` adds the SQL
functions. Install with ``pip install "s3ddb[spark]"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from s3ddb.errors import S3DDBError

if TYPE_CHECKING:
    from s3ddb.spark_ext.atomic import atomic_batches, write_atomic
    from s3ddb.spark_ext.distributed import compact, delete, update
    from s3ddb.spark_ext.merge import explain_merge_insert, merge_batches, merge_insert
    from s3ddb.spark_ext.native_read import create_temp_view, read
    from s3ddb.spark_ext.native_write import write

__all__ = [
    "atomic_batches",
    "compact",
    "configure",
    "create_temp_view",
    "delete",
    "explain_merge_insert",
    "merge_batches",
    "merge_insert",
    "read",
    "register",
    "update",
    "write",
    "write_atomic",
]

#: Session settings s3ddb relies on: Spark hands filters to the data source.
SESSION_CONF = {"spark.sql.python.filterPushdown.enabled": "true"}


def _require_pyspark() -> None:
    try:
        import pyspark
    except ImportError:
        raise S3DDBError(
            'the s3ddb Spark integration needs PySpark: pip install "s3ddb[spark]"'
        ) from None
    major, minor = (int(p) for p in pyspark.__version__.split(".")[:2])
    if (major, minor) < (4, 1):
        raise S3DDBError(f"s3ddb needs PySpark >= 4.1, found {pyspark.__version__}")


def register(spark: Any) -> None:
    """Register the ``s3ddb`` data source and the SQL table functions
    (``s3ddb_versions``) in ``spark``, and set :data:`SESSION_CONF`. Idempotent.

    Raises:
        S3DDBError: PySpark is missing or older than 4.1.
    """
    _require_pyspark()
    from s3ddb.spark_ext.source import S3DDBFilteringDataSource
    from s3ddb.spark_ext.sql import register_functions

    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)
    spark.dataSource.register(S3DDBFilteringDataSource)
    register_functions(spark)


class _RegisteringBuilder:
    """A SparkSession builder that registers s3ddb in the session it creates."""

    def __init__(self, builder: Any) -> None:
        self._builder = builder

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._builder, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            return _RegisteringBuilder(result) if result is self._builder else result

        return call

    def getOrCreate(self) -> Any:
        spark = self._builder.getOrCreate()
        register(spark)
        return spark

    def create(self) -> Any:
        spark = self._builder.create()
        register(spark)
        return spark


def configure(builder: Any) -> Any:
    """``builder`` with what s3ddb needs set; the session it creates has s3ddb
    registered (see :func:`register`). Chain further ``.config(...)`` as usual.

    Raises:
        S3DDBError: PySpark is missing or older than 4.1.
    """
    _require_pyspark()
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    return _RegisteringBuilder(builder)


def __getattr__(name: str) -> Any:
    if name in ("merge_insert", "merge_batches", "explain_merge_insert"):
        _require_pyspark()
        from s3ddb.spark_ext import merge

        return getattr(merge, name)
    if name in ("delete", "update", "compact"):
        _require_pyspark()
        from s3ddb.spark_ext import distributed

        return getattr(distributed, name)
    if name in ("write_atomic", "atomic_batches"):
        _require_pyspark()
        from s3ddb.spark_ext import atomic

        return getattr(atomic, name)
    if name == "write":
        _require_pyspark()
        from s3ddb.spark_ext import native_write

        return native_write.write
    if name in ("read", "create_temp_view"):
        _require_pyspark()
        from s3ddb.spark_ext import native_read

        return getattr(native_read, name)
    raise AttributeError(f"module 's3ddb.spark_ext' has no attribute {name!r}")
