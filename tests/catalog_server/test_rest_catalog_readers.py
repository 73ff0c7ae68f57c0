"""The REST catalog read by clients nobody here wrote: pyiceberg's RestCatalog and
DuckDB's ``ATTACH ... (TYPE iceberg)``, each reading exactly s3ddb's rows of the newest
committed version, also while writer processes commit and after a writer died between
its commit and its publication."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
import requests

import s3ddb
import s3ddb.commit.finalizer
from s3ddb.catalog_server import CatalogRegistry, Limits, parse_table_name
from tests.catalog_server.support import (
    TOKEN,
    duckdb_attached,
    rest_catalog,
    running,
    s3ddb_ids,
    sorted_ids,
    with_dataset,
)
from tests.support.proc import start_worker
from tests.support.workers import rows_for


def test_pyiceberg_lists_loads_and_scans_the_newest_version(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path))
    events = with_dataset(registry, "sales.events", str(tmp_path / "events"), [1, 2, 3, 4])
    with_dataset(registry, "sales.orders", str(tmp_path / "orders"), [7])
    with_dataset(registry, "web.clicks", str(tmp_path / "clicks"), [9, 10])
    events.delete("id = 2")
    events.insert(pa.table({"id": pa.array([5], pa.int64())}))
    with running(registry) as url:
        catalog = rest_catalog(url)
        assert catalog.list_namespaces() == [("sales",), ("web",)]
        assert catalog.list_tables("sales") == [("sales", "events"), ("sales", "orders")]
        assert catalog.namespace_exists("web") and not catalog.namespace_exists("nope")
        assert catalog.table_exists("sales.events") and not catalog.table_exists("sales.nope")
        table = catalog.load_table("sales.events")
        assert table.metadata.current_snapshot_id == events.version == 3
        assert sorted_ids(table.scan().to_arrow()) == s3ddb_ids(events.uri) == [1, 3, 4, 5]
        # Time travel within the served metadata: version 1, before the delete.
        assert sorted_ids(table.scan(snapshot_id=1).to_arrow()) == [1, 2, 3, 4]
        # A commit is seen by the next load.
        events.delete("id = 1")
        again = catalog.load_table("sales.events")
        assert again.metadata.current_snapshot_id == 4
        assert sorted_ids(again.scan().to_arrow()) == s3ddb_ids(events.uri) == [3, 4, 5]


def test_a_load_is_answered_304_while_the_version_is_unchanged(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path))
    events = with_dataset(registry, "sales.events", str(tmp_path / "events"), [1, 2])
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with running(registry) as url:
        table_url = f"{url}/v1/namespaces/sales/tables/events"
        first = requests.get(table_url, headers=auth, timeout=30)
        assert first.status_code == 200
        etag = first.headers["ETag"]
        location = first.json()["metadata-location"]
        assert location == str(tmp_path / "events/metadata/v1.metadata.json")
        same = requests.get(table_url, headers={**auth, "If-None-Match": etag}, timeout=30)
        assert (same.status_code, same.content, same.headers["ETag"]) == (304, b"", etag)
        events.insert(pa.table({"id": pa.array([3], pa.int64())}))
        newer = requests.get(table_url, headers={**auth, "If-None-Match": etag}, timeout=30)
        assert newer.status_code == 200 and newer.headers["ETag"] != etag
        assert newer.json()["metadata"]["current-snapshot-id"] == 2


def test_an_unregistered_or_moved_table_stops_being_served(tmp_path: Path) -> None:
    """The server keeps registry entries it read for Limits.entry_seconds: an
    unregistered table is not served after that; a dataset that cannot be opened at
    its cached entry's location has its entry read again at once."""
    registry = CatalogRegistry(str(tmp_path))
    with_dataset(registry, "sales.events", str(tmp_path / "events"), [1, 2])
    with_dataset(registry, "sales.orders", str(tmp_path / "orders"), [7])
    auth = {"Authorization": f"Bearer {TOKEN}"}
    seconds = 0.5
    with running(registry, Limits(entry_seconds=seconds)) as url:
        events_url = f"{url}/v1/namespaces/sales/tables/events"
        orders_url = f"{url}/v1/namespaces/sales/tables/orders"
        assert requests.get(events_url, headers=auth, timeout=30).status_code == 200
        registry.unregister(parse_table_name("sales.events"))
        time.sleep(seconds * 2)
        gone = requests.get(events_url, headers=auth, timeout=30)
        assert gone.status_code == 404, gone.text
        assert gone.json()["error"]["type"] == "NoSuchTableException"

        assert requests.get(orders_url, headers=auth, timeout=30).status_code == 200
        shutil.rmtree(tmp_path / "orders")
        registry.unregister(parse_table_name("sales.orders"))
        with_dataset(registry, "sales.orders", str(tmp_path / "orders2"), [8, 9])
        moved = requests.get(orders_url, headers=auth, timeout=30)
        assert moved.status_code == 200, moved.text
        assert moved.json()["metadata-location"].startswith(str(tmp_path / "orders2") + "/")
        assert sorted_ids(rest_catalog(url).load_table("sales.orders").scan().to_arrow()) == [8, 9]


def test_duckdb_attach_reads_the_newest_version(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path))
    events = with_dataset(registry, "sales.events", str(tmp_path / "events"), [1, 2, 3])
    events.delete("id = 2")
    with running(registry) as url:
        con = duckdb_attached(url)
        tables = con.execute("select schema_name, table_name from duckdb_tables()").fetchall()
        assert ("sales", "events") in tables
        rows = con.execute("select id from cat.sales.events order by id").fetchall()
        assert [r[0] for r in rows] == s3ddb_ids(events.uri) == [1, 3]
        events.insert(pa.table({"id": pa.array([4], pa.int64())}))
        rows = con.execute("select id from cat.sales.events order by id").fetchall()
        assert [r[0] for r in rows] == s3ddb_ids(events.uri) == [1, 3, 4]


def test_a_version_a_crash_left_unpublished_is_published_then_served(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path))
    uri = str(tmp_path / "events")
    with_dataset(registry, "sales.events", uri, rows_for(0, 0, 1))
    child = start_worker(
        "append", uri, "3", "1", "2", env={"S3DDB_FAILPOINTS": "commit.before_publication=exit"}
    )
    child.communicate(timeout=120)
    assert child.returncode == 86  # the failpoint's crash: committed, not published
    assert s3ddb.dataset(uri).version == 2
    assert not (tmp_path / "events/metadata/v2.metadata.json").exists()
    assert (tmp_path / "events/metadata/version-hint.text").read_text().strip() == "1"
    with running(registry) as url:
        table = rest_catalog(url).load_table("sales.events")
        assert table.metadata.current_snapshot_id == 2
        assert sorted_ids(table.scan().to_arrow()) == s3ddb_ids(uri) == [0, 3_000_000, 3_000_001]
    assert (tmp_path / "events/metadata/v2.metadata.json").exists()


@pytest.mark.slow
def test_every_load_is_a_committed_version_while_writers_commit(tmp_path: Path) -> None:
    """Two writer processes append while pyiceberg and DuckDB load the table over and
    over: each load is a committed version (no newer than the newest committed after
    it, no older than the newest before it) and holds exactly that version's rows."""
    registry = CatalogRegistry(str(tmp_path))
    uri = str(tmp_path / "events")
    with_dataset(registry, "sales.events", uri, rows_for(0, 0, 1))
    commits = 5
    with running(registry) as url:
        catalog = rest_catalog(url)
        con = duckdb_attached(url)
        writers = [start_worker("append", uri, str(w), str(commits), "3") for w in (1, 2)]
        loads, duck_reads, last = 0, 0, 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            running_writers = any(w.poll() is None for w in writers)
            before = s3ddb.dataset(uri).version
            table = catalog.load_table("sales.events")
            version = table.metadata.current_snapshot_id
            after = s3ddb.dataset(uri).version
            assert before <= version <= after and version >= last
            assert sorted_ids(table.scan().to_arrow()) == s3ddb_ids(uri, version)
            last, loads = version, loads + 1
            before = s3ddb.dataset(uri).version
            ids = [r[0] for r in con.execute("select id from cat.sales.events").fetchall()]
            after = s3ddb.dataset(uri).version
            candidates = {v: s3ddb_ids(uri, v) for v in range(before, after + 1)}
            assert sorted(ids) in candidates.values(), (before, after)
            duck_reads += 1
            if not running_writers:
                break
        for w in writers:
            _, err = w.communicate(timeout=60)
            assert w.returncode == 0, err
        newest = s3ddb.dataset(uri).version
        assert newest == 1 + 2 * commits
        final = catalog.load_table("sales.events")
        assert final.metadata.current_snapshot_id == newest
        assert sorted_ids(final.scan().to_arrow()) == s3ddb_ids(uri)
        duck = [r[0] for r in con.execute("select id from cat.sales.events").fetchall()]
        assert sorted(duck) == s3ddb_ids(uri)
        assert loads >= 2 and duck_reads >= 2


def test_an_s3ddb_dataset_on_the_local_endpoint(aws: object, tmp_path: Path) -> None:
    """A registry on S3 beside ``s3+ddb://`` datasets: loadTable resolves the version
    through the DynamoDB table and answers with the S3 metadata location, and no
    response carries the server's credentials."""
    from tests.conftest import TEST_BUCKET, TEST_TABLE

    options = aws.storage_options()  # type: ignore[attr-defined]
    root = f"s3://{TEST_BUCKET}/wh-{os.urandom(6).hex()}"
    registry = CatalogRegistry(root, options)
    uri = f"s3+ddb://{root.removeprefix('s3://')}/events?ddbTableName={TEST_TABLE}"
    events = with_dataset(registry, "sales.events", uri, [1, 2, 3])
    events.delete("id = 3")
    s3ddb.commit.finalizer.drain()
    with running(registry) as url:
        catalog = rest_catalog(
            url,
            **{
                "s3.endpoint": options["endpoint_url"],
                "s3.region": options["region"],
                "s3.access-key-id": options["aws_access_key_id"],
                "s3.secret-access-key": options["aws_secret_access_key"],
            },
        )
        table = catalog.load_table("sales.events")
        assert table.metadata_location == f"{root}/events/metadata/v2.metadata.json"
        assert sorted_ids(table.scan().to_arrow()) == s3ddb_ids(uri, storage_options=options)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        bodies = [
            requests.get(f"{url}/v1/{path}", headers=auth, timeout=30).text
            for path in ("config", "namespaces", "namespaces/sales/tables",
                         "namespaces/sales/tables/events")
        ]  # fmt: skip
        for body in bodies:
            assert options["aws_secret_access_key"] not in body
            assert options["aws_access_key_id"] not in body
        # On a warm server (the loads above read the registry entry), a load of a
        # published version costs two requests: the DynamoDB query of the newest
        # version and the metadata file.
        table_url = f"{url}/v1/namespaces/sales/tables/events"
        aws.clear_requests()  # type: ignore[attr-defined]
        assert requests.get(table_url, headers=auth, timeout=30).status_code == 200
        made = [(r.service, r.operation, r.path) for r in aws.requests]  # type: ignore[attr-defined]
        assert made == [
            ("dynamodb", "Query", "/"),
            ("s3", "GetObject", f"/{root.removeprefix('s3://')}/events/metadata/v2.metadata.json"),
        ], made


def test_a_version_left_staged_on_s3ddb_is_finished_then_served(
    aws: object, tmp_path: Path
) -> None:
    """A writer dies right after its DynamoDB claim: the row stays staged and nothing
    is published. loadTable finishes the version through the commit protocol
    (copy, publish, repoint) and serves it."""
    from tests.conftest import TEST_BUCKET, TEST_TABLE

    options = aws.storage_options()  # type: ignore[attr-defined]
    root = f"s3://{TEST_BUCKET}/wh-{os.urandom(6).hex()}"
    registry = CatalogRegistry(root, options)
    uri = f"s3+ddb://{root.removeprefix('s3://')}/events?ddbTableName={TEST_TABLE}"
    with_dataset(registry, "sales.events", uri, rows_for(0, 0, 1))
    s3ddb.commit.finalizer.drain()
    env = {**aws.env(), "S3DDB_FAILPOINTS": "commit.after_external_put=exit"}  # type: ignore[attr-defined]
    child = start_worker("append", uri, "4", "1", "2", env=env)
    child.communicate(timeout=120)
    assert child.returncode == 86  # claimed in DynamoDB, then the crash
    metadata = f"{root.removeprefix('s3://').split('/', 1)[1]}/events/metadata/v2.metadata.json"
    s3 = aws.boto3_client("s3")  # type: ignore[attr-defined]
    assert "Contents" not in s3.list_objects_v2(Bucket=TEST_BUCKET, Prefix=metadata)
    with running(registry) as url:
        response = requests.get(
            f"{url}/v1/namespaces/sales/tables/events",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert response.json()["metadata"]["current-snapshot-id"] == 2
    assert "Contents" in s3.list_objects_v2(Bucket=TEST_BUCKET, Prefix=metadata)
    assert s3ddb_ids(uri, 2, storage_options=options) == [0, 4_000_000, 4_000_001]
