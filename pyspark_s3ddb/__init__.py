"""Lets PySpark find the ``s3ddb`` data source by itself.

PySpark (>= 4.0) registers, in every session, the ``DefaultSource`` of each importable
top-level module named ``pyspark_*``; this module exists only for that.
"""

from s3ddb.spark_ext.source import S3DDBDataSource as DefaultSource

__all__ = ["DefaultSource"]
