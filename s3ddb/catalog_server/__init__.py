"""An Iceberg REST catalog served by s3ddb (``s3ddb catalog serve``): engines find
registered datasets by ``namespace.table`` and load the newest committed version's
Iceberg metadata. Read-only: s3ddb is the writer. docs/catalogs.md describes it.

The registry of names (:mod:`~s3ddb.catalog_server.registry`), what ``loadTable``
serves (:mod:`~s3ddb.catalog_server.table_loading`), every table as of one instant
(:mod:`~s3ddb.catalog_server.cuts`), the error model
(:mod:`~s3ddb.catalog_server.responses`), the ASGI application
(:mod:`~s3ddb.catalog_server.app`) and running it (:mod:`~s3ddb.catalog_server.server`).
"""

from s3ddb.catalog_server.app import Limits, catalog_app
from s3ddb.catalog_server.registry import CatalogRegistry, TableName, parse_table_name
from s3ddb.catalog_server.server import CatalogServer, serve

__all__ = [
    "CatalogRegistry",
    "CatalogServer",
    "Limits",
    "TableName",
    "catalog_app",
    "parse_table_name",
    "serve",
]
