"""Reading a pinned version: the rows of ``to_table``, ``to_batches`` and
``count_rows`` (:mod:`.rows`) and pylance-shaped scanners (:mod:`.scanner`), built on
:mod:`s3ddb.scan` and :mod:`s3ddb.index`."""

__all__: list[str] = []
