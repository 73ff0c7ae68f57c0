"""Readers of the open formats that s3ddb did not write: DuckDB with its iceberg,
delta, avro and httpfs extensions loaded from their PyPI packages (no download at run
time), pyiceberg and deltalake."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import duckdb
import pyarrow as pa

from tests.support.python_children import run_python

__all__ = [
    "deltalake_read",
    "duckdb_connection",
    "duckdb_read",
    "extension_file",
    "pyiceberg_read",
    "rows_of",
    "same_rows",
]

# avro before iceberg: iceberg would otherwise try to download it.
_EXTENSIONS = ("avro", "httpfs", "iceberg", "delta")


def extension_file(name: str) -> Path:
    """The ``.duckdb_extension`` file of package ``duckdb-extension-<name>``."""
    package = importlib.import_module(f"duckdb_extension_{name}")
    return next(Path(str(package.__file__)).parent.rglob(f"{name}.duckdb_extension"))


def duckdb_connection(
    *, endpoint_url: str | None = None, region: str = "us-east-1"
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the extensions loaded; with ``endpoint_url``, S3 reads
    go to that (HTTP, path-style) endpoint with the test credentials."""
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    for name in _EXTENSIONS:
        con.execute(f"LOAD '{extension_file(name)}'")
    if endpoint_url is not None:
        host = endpoint_url.split("://", 1)[1].rstrip("/")
        con.execute(
            "CREATE SECRET s3test (TYPE s3, KEY_ID 'testing', SECRET 'testing', "
            f"REGION '{region}', ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)"
        )
    return con


# --- reading a published table with each reader, as an Arrow table ------------------------


def _s3(options: dict[str, str] | None) -> dict[str, str]:
    return dict(options or {})


def pyiceberg_read(metadata: str, options: dict[str, str] | None = None) -> pa.Table:
    """The rows pyiceberg's ``StaticTable`` reads from Iceberg metadata file
    ``metadata`` (``options``: s3ddb storage options of an S3 endpoint)."""
    from pyiceberg.table import StaticTable

    so = _s3(options)
    properties = {}
    if so:
        properties = {
            "s3.endpoint": so["endpoint_url"],
            "s3.access-key-id": so["aws_access_key_id"],
            "s3.secret-access-key": so["aws_secret_access_key"],
            "s3.region": so["region"],
        }
    return StaticTable.from_metadata(metadata, properties=properties).scan().to_arrow()


_DELTALAKE_CHILD = """
import json, sys
import pyarrow as pa
from tests.open_formats.readers import deltalake_read
table = deltalake_read(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), child=True)
with pa.ipc.new_stream(sys.stdout.buffer, table.schema) as out:
    out.write_table(table)
"""


def deltalake_read(
    root: str, version: int, options: dict[str, str] | None = None, *, child: bool = False
) -> pa.Table:
    """The rows deltalake reads of Delta ``version`` at ``root`` (its QueryBuilder,
    which applies deletion vectors).

    On an S3 endpoint served by this process the read runs in a child process: the
    QueryBuilder holds the GIL while it waits for the endpoint's (Python) answer."""
    from deltalake import DeltaTable, QueryBuilder

    so = _s3(options)
    if so and not child:
        repo = str(Path(__file__).resolve().parents[2])
        done = run_python(
            ["-c", _DELTALAKE_CHILD, root, str(version), json.dumps(so)],
            env={**os.environ, "PYTHONPATH": repo}, cwd=repo, timeout=300, text=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        return pa.ipc.open_stream(done.stdout).read_all()
    storage = None
    if so:
        storage = {
            "AWS_ENDPOINT_URL": so["endpoint_url"],
            "AWS_ACCESS_KEY_ID": so["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": so["aws_secret_access_key"],
            "AWS_REGION": so["region"],
            "AWS_ALLOW_HTTP": "true",
        }
    table = DeltaTable(root, version=version, storage_options=storage)
    reader = QueryBuilder().register("t", table).execute("select * from t")
    return pa.table(reader.read_all()) if not isinstance(reader, pa.Table) else reader


def duckdb_read(sql: str, options: dict[str, str] | None = None) -> pa.Table:
    """The rows of ``sql`` (an ``iceberg_scan`` or ``delta_scan``) in DuckDB."""
    so = _s3(options)
    con = duckdb_connection(
        endpoint_url=so.get("endpoint_url"), region=so.get("region", "us-east-1")
    )
    try:
        return con.execute(sql).to_arrow_table()
    finally:
        con.close()


def same_rows(got: pa.Table, expected: pa.Table, key: str = "id") -> list[dict[str, object]]:
    """``got``'s rows as dicts of ``expected``'s columns, sorted by ``key``; asserts
    both have the same columns."""
    assert sorted(got.column_names) == sorted(expected.column_names), (
        got.column_names,
        expected.column_names,
    )
    rows = got.select(expected.column_names).to_pylist()
    return sorted(rows, key=lambda r: r[key])  # type: ignore[no-any-return]


def rows_of(table: pa.Table, key: str = "id") -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda r: r[key])
