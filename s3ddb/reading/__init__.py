"""Reading a pinned version: the rows of ``to_table``, ``to_batches`` and
``count_rows`` (:mod:`.rows`), pylance-shaped scanners (:mod:`.scanner`) and the
change feed of a range of versions (:mod:`.changes`), built on :mod:`s3ddb.scan` and
:mod:`s3ddb.index`."""

__all__: list[str] = []
