"""AWS Glue kept at the newest published version (s3ddb.catalogs.glue), on the local
endpoint's Glue (moto, which the endpoint makes refuse a stale VersionId as Glue does).

Read back with pyiceberg's own GlueCatalog, as an engine finds the table by name."""

from __future__ import annotations

import json
import logging
import socket
import uuid
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.catalogs import sync_glue_table
from s3ddb.cli.main import main
from s3ddb.commit import finalizer
from s3ddb.maintenance.verify import verify
from tests.support.proc import run_workers

DATABASE = "s3ddb_catalog_tests"


@pytest.fixture(scope="module")
def glue(moto_aws: Any) -> Any:
    client = moto_aws.boto3_client("glue")
    try:
        client.create_database(DatabaseInput={"Name": DATABASE})
    except client.exceptions.AlreadyExistsException:
        pass
    return client


@pytest.fixture
def table() -> str:
    return f"{DATABASE}.t_{uuid.uuid4().hex[:10]}"


def _options(aws: Any) -> list[str]:
    """The CLI flags that address the local endpoint."""
    flags = []
    for key, value in aws.storage_options().items():
        flags += ["--storage-option", f"{key}={value}"]
    return flags


def _catalog(aws: Any) -> Any:
    from pyiceberg.catalog.glue import GlueCatalog

    return GlueCatalog(
        "glue",
        **{
            "glue.endpoint": aws.endpoint_url,
            "glue.region": aws.region,
            "glue.access-key-id": "testing",
            "glue.secret-access-key": "testing",
            "s3.endpoint": aws.endpoint_url,
            "s3.region": aws.region,
            "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing",
        },
    )


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = sorted(table.column_names)
    return sorted(zip(*(table.column(c).to_pylist() for c in columns)))


def _parameters(glue: Any, name: str) -> dict[str, str]:
    database, table = name.split(".")
    return glue.get_table(DatabaseName=database, Name=table)["Table"]["Parameters"]


def _register(uri: str, name: str, aws: Any, *extra: str) -> int:
    return main(["catalog", "register", uri, "--glue", name, *extra, *_options(aws)])


def test_pyiceberg_glue_catalog_reads_the_newest_version_after_every_commit(
    aws: Any, glue: Any, ddb_uri: str, table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    so = aws.storage_options()
    ds = s3ddb.write_dataset(
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "kind": ["a", "b", "c"]}),
        ddb_uri,
        open_formats=["iceberg"],
        storage_options=so,
    )
    assert _register(ddb_uri, table, aws, "--json") == 0
    registered = json.loads(capsys.readouterr().out)
    assert registered["table"] == table and registered["version"] == 2
    catalog = _catalog(aws)

    changes = [
        lambda d: d.insert(pa.table({"id": pa.array([4, 5], pa.int64()), "kind": ["d", "e"]})),
        lambda d: d.delete("kind = 'b'"),
        lambda d: d.update({"kind": "'z'"}, where="id = 4"),
        lambda d: d.insert(pa.table({"id": pa.array([6], pa.int64()), "kind": ["f"]})),
    ]
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    for change in changes:
        change(ds)
        finalizer.drain()  # publication and the catalog move run on the finalizer
        loaded = catalog.load_table(table)
        assert loaded.metadata.current_snapshot_id == ds.version
        assert _rows(loaded.scan().to_arrow()) == _rows(ds.to_table())
    parameters = _parameters(glue, table)
    assert parameters["table_type"] == "ICEBERG"
    assert parameters["s3ddb.version"] == str(ds.version)
    assert parameters["previous_metadata_location"].endswith(
        f"/metadata/v{ds.version - 1}.metadata.json"
    )


def test_racing_writer_processes_leave_glue_at_the_newest_version_never_moved_back(
    aws: Any, glue: Any, ddb_uri: str, table: str
) -> None:
    so = aws.storage_options()
    first = pa.table(
        {
            "id": pa.array([-1], pa.int64()),
            "writer": pa.array([-1], pa.int32()),
            "seq": pa.array([-1], pa.int32()),
        }
    )
    s3ddb.write_dataset(first, ddb_uri, open_formats=["iceberg"], storage_options=so)
    assert _register(ddb_uri, table, aws) == 0
    writers, appends = 2, 3
    results = run_workers(
        [("append", ddb_uri, str(w), str(appends), "2") for w in range(writers)],
        env=aws.env(),
    )
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert ds.version == 2 + writers * appends

    database, name = table.split(".")
    history = glue.get_table_versions(DatabaseName=database, TableName=name)["TableVersions"]
    moves = [
        int(v["Table"]["Parameters"]["s3ddb.version"])
        for v in sorted(history, key=lambda v: int(v["VersionId"]))
    ]
    assert moves == sorted(set(moves)), f"the Glue table moved backwards: {moves}"
    assert moves[-1] == ds.version
    loaded = _catalog(aws).load_table(table)
    assert _rows(loaded.scan().to_arrow()) == _rows(ds.to_table())
    # Every state Glue went through named a committed version's own metadata file
    # (whose rows the open-format tests check), with the one before as previous.
    root = ddb_uri.replace("s3+ddb://", "s3://").split("?")[0]
    previous = None
    for entry in sorted(history, key=lambda v: int(v["VersionId"])):
        parameters = entry["Table"]["Parameters"]
        version = int(parameters["s3ddb.version"])
        assert parameters["metadata_location"] == f"{root}/metadata/v{version}.metadata.json"
        assert parameters.get("previous_metadata_location") == previous
        previous = parameters["metadata_location"]


@pytest.fixture(scope="module")
def spans() -> Any:
    """The spans this process finishes (an SDK tracer provider's: the one installed,
    or a new one)."""
    pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is a dev dependency")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def test_a_reader_finishing_a_crashed_writers_version_moves_glue_in_a_span(
    aws: Any, glue: Any, ddb_uri: str, table: str, spans: Any
) -> None:
    from s3ddb.commit.failpoints import EXIT_CODE
    from tests.support.workers import rows_for

    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, open_formats=["iceberg"], storage_options=so)
    assert _register(ddb_uri, table, aws) == 0
    [crashed] = run_workers(  # version 3 committed, neither finished nor published
        [("append", ddb_uri, "1", "1", "2")],
        env={**aws.env(), "S3DDB_FAILPOINTS": "commit.after_external_put=exit"},
    )
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-2000:]
    assert _parameters(glue, table)["s3ddb.version"] == "2"
    spans.clear()
    ds = s3ddb.dataset(ddb_uri, storage_options=so)  # finishes version 3
    finalizer.drain()
    assert ds.version == 3
    assert _parameters(glue, table)["s3ddb.version"] == "3"
    [update] = [s for s in spans.get_finished_spans() if s.name == "s3ddb.catalog.update"]
    assert update.attributes["s3ddb.version"] == 3
    assert update.attributes["s3ddb.catalog.table"] == table
    assert update.attributes["s3ddb.outcome"] == "updated"
    assert _rows(_catalog(aws).load_table(table).scan().to_arrow()) == _rows(ds.to_table())


def test_glue_moves_after_the_repoint_and_a_crash_between_is_caught_up(
    aws: Any, glue: Any, ddb_uri: str, table: str
) -> None:
    """On s3+ddb the Glue table moves after the DynamoDB repoint (Glue's latency
    does not delay it): a writer dying right after its repoint leaves its version
    final and published, and Glue behind it until a sync (or the next commit)."""
    from s3ddb.commit.failpoints import EXIT_CODE
    from tests.support.workers import rows_for

    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, open_formats=["iceberg"], storage_options=so)
    assert _register(ddb_uri, table, aws) == 0
    [crashed] = run_workers(  # version 3 committed, published, repointed; then the crash
        [("append", ddb_uri, "1", "1", "2")],
        env={**aws.env(), "S3DDB_FAILPOINTS": "commit.after_external_finalize=exit"},
    )
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-2000:]
    assert _parameters(glue, table)["s3ddb.version"] == "2"
    assert s3ddb.dataset(ddb_uri, storage_options=so).version == 3
    assert main(["catalog", "sync", ddb_uri, "--json", *_options(aws)]) == 0
    assert _parameters(glue, table)["s3ddb.version"] == "3"
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert _rows(_catalog(aws).load_table(table).scan().to_arrow()) == _rows(ds.to_table())


def _local_dataset(tmp_path: Any, aws: Any, name: str, table: str, versions: int = 1) -> Any:
    """A local dataset publishing Iceberg, naming Glue ``table`` from version 2."""
    uri = str(tmp_path / name)
    so = aws.storage_options()
    ds = s3ddb.write_dataset(
        pa.table({"id": pa.array([0], pa.int64())}),
        uri,
        open_formats=["iceberg"],
        storage_options=so,
    )
    assert _register(uri, table, aws) == 0
    for i in range(1, versions):
        ds = s3ddb.dataset(uri, storage_options=so)
        ds.insert(pa.table({"id": pa.array([i], pa.int64())}))
    return s3ddb.dataset(uri, storage_options=so)


def test_a_glue_failure_never_fails_a_commit_and_the_next_commit_catches_up(
    aws: Any, glue: Any, tmp_path: Any, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    ds = _local_dataset(tmp_path, aws, "failing", table)
    assert _parameters(glue, table)["s3ddb.version"] == "2"
    fault = aws.inject_fault("glue", "UpdateTable", "server_error", times=20)
    try:
        with caplog.at_level(logging.WARNING, logger="s3ddb.catalogs.glue"):
            ds.insert(pa.table({"id": pa.array([7], pa.int64())}))
    finally:
        aws.clear_faults()
    assert fault.triggered >= 1
    assert ds.version == 3 and sorted(ds.to_table()["id"].to_pylist()) == [0, 7]
    assert "could not move the AWS Glue table" in caplog.text
    assert _parameters(glue, table)["s3ddb.version"] == "2"  # behind, and said so:
    report = verify(ds.uri, aws.storage_options(), grace_seconds=0)
    assert [p.kind for p in report.problems] == ["catalog_behind"]

    ds.insert(pa.table({"id": pa.array([8], pa.int64())}))
    assert _parameters(glue, table)["s3ddb.version"] == "4"
    assert _parameters(glue, table)["previous_metadata_location"].endswith("/v2.metadata.json")
    assert verify(ds.uri, aws.storage_options(), grace_seconds=0).healthy


def test_catalog_sync_catches_up_after_glue_was_down_or_the_table_dropped(
    aws: Any, glue: Any, tmp_path: Any, table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = _local_dataset(tmp_path, aws, "down", table)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    down = {**aws.storage_options(), "glue_endpoint": closed}
    s3ddb.dataset(ds.uri, storage_options=down).insert(pa.table({"id": pa.array([1], pa.int64())}))
    assert s3ddb.dataset(ds.uri).version == 3  # committed
    assert _parameters(glue, table)["s3ddb.version"] == "2"
    report = verify(ds.uri, down, grace_seconds=0)
    assert [p.kind for p in report.problems] == ["catalog_unreachable"]
    assert main(["catalog", "sync", ds.uri, *_options(aws), "--glue-endpoint", closed]) == 2
    capsys.readouterr()

    assert main(["catalog", "sync", ds.uri, "--json", *_options(aws)]) == 0
    synced = json.loads(capsys.readouterr().out)
    assert (synced["action"], synced["catalog_version"], synced["version"]) == ("updated", 2, 3)

    database, name = table.split(".")
    glue.delete_table(DatabaseName=database, Name=name)
    assert [p.kind for p in verify(ds.uri, aws.storage_options(), grace_seconds=0).problems] == [
        "catalog_behind"
    ]
    assert main(["catalog", "sync", ds.uri, "--json", *_options(aws)]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "created"
    assert _parameters(glue, table)["s3ddb.version"] == "3"


def test_glue_failing_during_verify_is_unreachable_not_untrusted(
    aws: Any, glue: Any, tmp_path: Any, table: str
) -> None:
    # A server error from GetTable (every retry) says nothing of the table's entry.
    ds = _local_dataset(tmp_path, aws, "flaky", table)
    fault = aws.inject_fault("glue", "GetTable", "server_error", times=50)
    try:
        report = verify(ds.uri, aws.storage_options(), grace_seconds=0)
    finally:
        aws.clear_faults()
    assert fault.triggered >= 1
    assert [p.kind for p in report.problems] == ["catalog_unreachable"], report.problems
    assert "GetTable" in report.problems[0].meaning
    assert verify(ds.uri, aws.storage_options(), grace_seconds=0).healthy


@pytest.mark.parametrize(
    "planted",
    [
        {"metadata_location": "s3://elsewhere/evil/metadata/v9.metadata.json"},
        {"metadata_location": "{root}/../other/metadata/v9.metadata.json"},
        {"metadata_location": "{root}/metadata/v99.metadata.json", "s3ddb.version": "99"},
        {"s3ddb.version": "1e9"},
        {"table_type": "HIVE"},
        # Parameters that make engines read the table other than through its metadata.
        {"spark.sql.sources.provider": "parquet"},
        {"spark.sql.sources.schema.numParts": "1"},
        {"classification": "parquet"},
        {"Storage_Handler": "org.apache.hadoop.hive.ql.metadata.DefaultStorageHandler"},
    ],
)
def test_an_untrusted_glue_entry_is_refused_and_never_moved(
    aws: Any,
    glue: Any,
    tmp_path: Any,
    table: str,
    planted: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ds = _local_dataset(tmp_path, aws, "planted", table)
    root = str(tmp_path / "planted")
    database, name = table.split(".")
    current = glue.get_table(DatabaseName=database, Name=name)["Table"]
    parameters = {**current["Parameters"]}
    parameters.update({k: v.replace("{root}", root) for k, v in planted.items()})
    glue.update_table(
        DatabaseName=database,
        TableInput={"Name": name, "TableType": "EXTERNAL_TABLE", "Parameters": parameters},
    )
    ds.insert(pa.table({"id": pa.array([5], pa.int64())}))  # committed, Glue left alone
    assert ds.version == 3
    assert _parameters(glue, table) == parameters
    report = verify(ds.uri, aws.storage_options(), grace_seconds=0)
    assert [p.kind for p in report.problems] == ["catalog_untrusted"]
    assert main(["catalog", "sync", ds.uri, *_options(aws)]) == 1
    assert "CatalogError" in capsys.readouterr().err
    assert _parameters(glue, table) == parameters


def _plant_glue(glue: Any, name: str, **planted: str) -> dict[str, str]:
    """Set ``planted`` among the parameters of the Glue table ``name``, as anyone with
    glue:UpdateTable can; returns its parameters then."""
    database, table = name.split(".")
    parameters = {**_parameters(glue, name), **planted}
    glue.update_table(
        DatabaseName=database,
        TableInput={"Name": table, "TableType": "EXTERNAL_TABLE", "Parameters": parameters},
    )
    return parameters


@pytest.mark.parametrize("kind", ["local", "s3+ddb"])
def test_a_glue_entry_ahead_of_the_newest_committed_version_never_pins_the_table(
    aws: Any,
    glue: Any,
    tmp_path: Any,
    ddb_uri: str,
    table: str,
    kind: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Glue entry naming version 99, with a metadata file planted at that name, is
    not "ahead": version 99 is not committed. Commits say so (logged, Glue left
    alone), sync fails, verify reports it; dropping the table is the way back."""
    so = aws.storage_options()
    if kind == "local":
        ds = _local_dataset(tmp_path, aws, "pinned", table)
    else:
        s3ddb.write_dataset(
            pa.table({"id": pa.array([0], pa.int64())}),
            ddb_uri,
            open_formats=["iceberg"],
            storage_options=so,
        )
        assert _register(ddb_uri, table, aws) == 0
        ds = s3ddb.dataset(ddb_uri, storage_options=so)
    assert ds.version == 2
    store = ds.handler.store
    store.put("metadata/v99.metadata.json", store.get("metadata/v2.metadata.json"))
    location = _parameters(glue, table)["metadata_location"].replace("/v2.", "/v99.")
    planted = _plant_glue(glue, table, metadata_location=location, **{"s3ddb.version": "99"})

    with caplog.at_level(logging.WARNING, logger="s3ddb.catalogs.glue"):
        ds.insert(pa.table({"id": pa.array([5], pa.int64())}))
        finalizer.drain()
    assert ds.version == 3 and sorted(ds.to_table()["id"].to_pylist()) == [0, 5]  # committed
    assert "names version 99, newer than the newest committed, 3" in caplog.text
    assert "no commit moves it until the entry is mended or dropped" in caplog.text
    assert _parameters(glue, table) == planted  # never written beside it
    kinds = [p.kind for p in verify(ds.uri, so, grace_seconds=0).problems]
    assert "catalog_untrusted" in kinds
    assert main(["catalog", "sync", ds.uri, *_options(aws)]) == 1
    err = capsys.readouterr().err
    assert "UntrustedCatalogError" in err and "newer than the newest committed, 3" in err
    assert _parameters(glue, table) == planted

    database, name = table.split(".")
    glue.delete_table(DatabaseName=database, Name=name)
    assert main(["catalog", "sync", ds.uri, "--json", *_options(aws)]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "created"
    assert _parameters(glue, table)["s3ddb.version"] == "3"


def test_glue_keeps_users_parameters_and_refuses_those_that_change_how_it_is_read(
    aws: Any, glue: Any, tmp_path: Any, table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = _local_dataset(tmp_path, aws, "shared", table)
    theirs = {"comment": "orders, one row each", "owner.team": "sales-data"}
    planted = _plant_glue(
        glue,
        table,
        **theirs,
        **{"spark.sql.sources.provider": "parquet", "METADATA_LOCATION": "s3://elsewhere/x"},
    )
    ds.insert(pa.table({"id": pa.array([1], pa.int64())}))
    assert _parameters(glue, table) == planted  # refused: never carried forward
    [problem] = verify(ds.uri, aws.storage_options(), grace_seconds=0).problems
    assert problem.kind == "catalog_untrusted"
    assert "'spark.sql.sources.provider'" in problem.meaning
    assert main(["catalog", "sync", ds.uri, *_options(aws)]) == 1
    assert "spark.sql.sources.provider" in capsys.readouterr().err

    # The owner removes the refused parameter: the next sync moves the table, with
    # their own parameters, and s3ddb's set (a look-alike of one is not kept).
    database, name = table.split(".")
    mended = {k: v for k, v in planted.items() if k != "spark.sql.sources.provider"}
    glue.update_table(
        DatabaseName=database,
        TableInput={"Name": name, "TableType": "EXTERNAL_TABLE", "Parameters": mended},
    )
    assert main(["catalog", "sync", ds.uri, "--json", *_options(aws)]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "updated"
    parameters = _parameters(glue, table)
    assert {k: parameters[k] for k in theirs} == theirs
    assert "METADATA_LOCATION" not in parameters
    assert parameters["metadata_location"].endswith("/metadata/v3.metadata.json")
    assert parameters["previous_metadata_location"].endswith("/metadata/v2.metadata.json")
    assert parameters["s3ddb.version"] == "3"
    assert verify(ds.uri, aws.storage_options(), grace_seconds=0).healthy


class StaleUpdateClient:
    """A boto3 Glue client whose first ``update_table`` loses a race: another writer
    moves the table (to ``newer``'s version) between this client's read and its
    update, which then carries a stale VersionId. What the update raised is kept."""

    def __init__(self, client: Any, store: Any, newer: Any) -> None:
        self._client = client
        self._store = store
        self._newer = newer
        self.refused: list[Exception] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_table(self, **kwargs: Any) -> Any:
        if self._newer is not None:
            newer, self._newer = self._newer, None
            sync_glue_table(self._store, newer, newest=lambda: newer.version, client=self._client)
        try:
            return self._client.update_table(**kwargs)
        except Exception as exc:
            self.refused.append(exc)
            raise


def test_a_stale_version_id_is_refused_and_the_table_is_never_moved_back(
    aws: Any, glue: Any, tmp_path: Any, table: str
) -> None:
    ds = _local_dataset(tmp_path, aws, "racing", table, versions=4)  # Glue at 4
    store = ds.handler.store
    manifests = {v: ds.checkout_version(v).manifest for v in (2, 3, 4)}
    database, name = table.split(".")
    glue.delete_table(DatabaseName=database, Name=name)
    newest = ds.handler.newest_version
    assert sync_glue_table(store, manifests[2], newest=newest).action == "created"  # type: ignore[union-attr]

    racing = StaleUpdateClient(glue, store, manifests[4])
    result = sync_glue_table(store, manifests[3], newest=newest, client=racing)
    assert result is not None and (result.action, result.catalog_version) == ("ahead", 4)
    [refused] = racing.refused
    assert refused.response["Error"]["Code"] == "ConcurrentModificationException"  # type: ignore[attr-defined]
    parameters = _parameters(glue, table)
    assert parameters["s3ddb.version"] == "4"
    assert parameters["previous_metadata_location"].endswith("/v2.metadata.json")


def test_a_delta_table_is_registered_once_by_location(
    aws: Any, glue: Any, tmp_path: Any, table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "delta")
    so = aws.storage_options()
    ds = s3ddb.write_dataset(
        pa.table({"id": pa.array([1], pa.int64())}), uri, open_formats=["delta"], storage_options=so
    )
    assert _register(uri, table, aws, "--format", "delta", "--json") == 0
    assert json.loads(capsys.readouterr().out)["action"] in ("created", "registered")
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.insert(pa.table({"id": pa.array([2], pa.int64())}))
    database, name = table.split(".")
    found = glue.get_table(DatabaseName=database, Name=name)["Table"]
    assert found["Parameters"]["table_type"] == "DELTA"
    assert found["StorageDescriptor"]["Location"] == uri
    assert found["VersionId"] == "1"  # registered once; commits leave it alone
    assert verify(uri, so, grace_seconds=0).healthy


def test_register_refuses_bad_names_another_table_and_unpublished_formats(
    aws: Any, glue: Any, tmp_path: Any, table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "refused")
    so = aws.storage_options()
    s3ddb.write_dataset(pa.table({"id": [1]}), uri, open_formats=["iceberg"], storage_options=so)
    assert _register(uri, "NoDot", aws) == 2
    assert "expected DB.TABLE" in capsys.readouterr().err
    assert _register(uri, table, aws, "--format", "delta") == 2  # Delta is not published
    assert "does not publish delta" in capsys.readouterr().err
    database, name = table.split(".")
    glue.create_table(
        DatabaseName=database,
        TableInput={"Name": name, "Parameters": {"table_type": "HIVE"}},
    )
    assert _register(uri, table, aws) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "CatalogError" in line and "another table holds the name" in line
    assert s3ddb.dataset(uri).version == 1  # nothing committed
    assert main(["catalog", "sync", uri, *_options(aws)]) == 2  # no catalog named
    assert "names no catalog table" in capsys.readouterr().err


def test_a_clone_does_not_name_its_sources_glue_table(
    aws: Any, glue: Any, tmp_path: Any, table: str
) -> None:
    ds = _local_dataset(tmp_path, aws, "source", table)
    so = aws.storage_options()
    clone = ds.shallow_clone(str(tmp_path / "clone"), storage_options=so)
    assert "s3ddb.catalog.glue" not in clone.config
    clone.insert(pa.table({"id": pa.array([9], pa.int64())}))
    assert _parameters(glue, table)["metadata_location"].startswith(str(tmp_path / "source"))
    assert verify(clone.uri, so, grace_seconds=0).healthy
