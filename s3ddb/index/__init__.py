"""Scalar indices: a BTREE index of one column, used by filters and merge_insert.

``s3ddb.index.btree`` is the file layout, ``s3ddb.index.query`` how reads use it,
``s3ddb.index.api`` how a dataset creates one. The CreateIndex transaction is
``s3ddb.operations.create_index``; how commits keep an index's fragment coverage true is
``s3ddb.commit.index_coverage``. Importing this package imports none of them.
"""

__all__ = []
