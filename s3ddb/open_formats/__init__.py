"""The dataset as Iceberg and Delta tables: every version published, as part of
finishing it, as metadata over the same Parquet files (docs/open-formats.md).

:mod:`.model` is what a format's writer sees of a version; :mod:`.iceberg` (with its
Avro files, :mod:`.avro`) and :mod:`.delta` (with :mod:`.deletion_vectors`) write the
formats; :mod:`.publisher` publishes a finished version and catches up with the ones
before it; :mod:`.retention` is what cleanup deletes and verify reports.
"""

__all__: list[str] = []
