"""Scalar indices: a BTREE index of one column, used by filters and merge_insert.

``s3ddb.index.btree`` is the file layout, ``s3ddb.index.query`` how reads use it,
``s3ddb.index.operations`` the CreateIndex transaction and ``s3ddb.index.maintenance``
how commits keep an index's fragment coverage true. Importing this package imports
none of them (the commit builder imports the maintenance module alone).
"""
