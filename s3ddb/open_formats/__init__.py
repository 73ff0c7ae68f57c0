"""The dataset as Iceberg and Delta tables: every version published, as part of
finishing it, as metadata over the same Parquet files (docs/open-formats.md).

Each format is a plug-in (:class:`.model.OpenFormat`), listed in the literal tuple
:data:`.plugins.FORMATS`: :mod:`.iceberg` (with its Avro files, :mod:`.avro`) and
:mod:`.delta` (with :mod:`.deletion_vectors`). :mod:`.model` is also what a format's
writer sees of a version; :mod:`.publisher` publishes a finished version and catches
up with the ones before it; :mod:`.retention` is what cleanup deletes.
"""

__all__: list[str] = []
