"""What the REST catalog tests share: a registry with datasets, a running server on
127.0.0.1 (port 0), clients nobody here wrote (pyiceberg's RestCatalog, DuckDB's
iceberg extension) and the rows s3ddb reads of a version."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.catalog_server import CatalogRegistry, CatalogServer, Limits, parse_table_name
from tests.open_formats.readers import duckdb_connection

__all__ = [
    "TOKEN",
    "duckdb_attached",
    "rest_catalog",
    "running",
    "s3ddb_ids",
    "sorted_ids",
    "with_dataset",
]

#: The bearer token the tests' servers require.
TOKEN = "test-token-0123456789abcdef"


def with_dataset(registry: CatalogRegistry, name: str, uri: str, rows: list[int] | pa.Table) -> Any:
    """A dataset at ``uri`` publishing Iceberg, with ``rows`` (a table, or ids),
    registered as ``name``."""
    ds = s3ddb.write_dataset(
        rows if isinstance(rows, pa.Table) else pa.table({"id": pa.array(rows, pa.int64())}),
        uri,
        open_formats=["iceberg"],
        storage_options=registry.storage_options or None,
    )
    registry.register(parse_table_name(name), uri)
    return ds


@contextmanager
def running(registry: CatalogRegistry, limits: Limits | None = None) -> Iterator[str]:
    """The registry's catalog on 127.0.0.1 and a free port; yields its URL."""
    with CatalogServer(registry, token=TOKEN, limits=limits) as server:
        yield server.url


def rest_catalog(url: str, **properties: str) -> Any:
    """pyiceberg's RestCatalog of the server at ``url``, with the token."""
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog("s3ddb", uri=url, token=TOKEN, **properties)


def duckdb_attached(url: str) -> Any:
    """A DuckDB connection (extensions loaded from their PyPI packages) with the
    catalog attached as ``cat``."""
    con = duckdb_connection()
    con.execute(f"CREATE SECRET catalog_token (TYPE iceberg, TOKEN '{TOKEN}')")
    con.execute(f"ATTACH '' AS cat (TYPE iceberg, ENDPOINT '{url}', SECRET catalog_token)")
    return con


def sorted_ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def s3ddb_ids(uri: str, version: int | None = None, storage_options: Any = None) -> list[int]:
    """The ids s3ddb reads of ``version`` (default: the newest)."""
    return sorted_ids(s3ddb.dataset(uri, version, storage_options=storage_options).to_table())
