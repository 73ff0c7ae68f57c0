"""The REST catalog's refusals, each with the Iceberg REST error model: a missing or
wrong token (401), a write (403, s3ddb is the writer), an oversize body (413), a
client over its request rate (429), a registry entry pointing outside the root or at
garbage, a damaged metadata file it cannot publish again (5xx naming the file):
never a stack trace, never the token in a log, no-auth only on loopback."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from s3ddb.catalog_server import CatalogRegistry, CatalogServer, Limits, parse_table_name
from s3ddb.catalog_server.registry import MAX_ENTRY_BYTES, REGISTRY_DIR
from s3ddb.catalog_server.server import check_bind, read_token
from s3ddb.errors import InvalidInputError, PathOutsideDatasetError
from tests.catalog_server.support import TOKEN, rest_catalog, running, with_dataset

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _error(response: requests.Response, status: int) -> dict[str, Any]:
    """The error model's ``error`` object of ``response``, checked."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code"}
    assert body["error"]["code"] == status
    assert "Traceback" not in response.text and 'File "' not in response.text
    return dict(body["error"])


@pytest.fixture
def catalog(tmp_path: Path) -> Any:
    registry = CatalogRegistry(str(tmp_path))
    with_dataset(registry, "sales.events", str(tmp_path / "events"), [1, 2])
    with running(registry) as url:
        yield registry, url


def test_a_missing_or_wrong_token_is_refused(catalog: Any, caplog: Any) -> None:
    _, url = catalog
    caplog.set_level(logging.DEBUG)
    wrong = "Bearer " + TOKEN[:-1] + ("x" if TOKEN[-1] != "x" else "y")
    for headers in (
        {},
        {"Authorization": wrong},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {TOKEN}{TOKEN}"},
    ):
        for path in ("/v1/config", "/v1/namespaces", "/v1/namespaces/sales/tables/events"):
            error = _error(requests.get(url + path, headers=headers, timeout=30), 401)
            assert error["type"] == "NotAuthorizedException"
    # pyiceberg with a wrong token is refused too.
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import UnauthorizedError

    with pytest.raises(UnauthorizedError):
        RestCatalog("s3ddb", uri=url, token="not-the-token-at-all")
    # The right one is accepted, and neither is ever logged.
    assert requests.get(url + "/v1/config", headers=AUTH, timeout=30).status_code == 200
    assert all(TOKEN not in r.getMessage() and TOKEN[:12] not in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_writes_are_refused_saying_s3ddb_is_the_writer(catalog: Any) -> None:
    _, url = catalog
    writes = [
        ("POST", "/v1/namespaces", {"namespace": ["x"]}),
        ("DELETE", "/v1/namespaces/sales", None),
        ("POST", "/v1/namespaces/sales/properties", {"updates": {"a": "b"}}),
        ("POST", "/v1/namespaces/sales/tables", {"name": "t", "schema": {}}),
        ("POST", "/v1/namespaces/sales/register", {"name": "t", "metadata-location": "/x"}),
        ("POST", "/v1/namespaces/sales/tables/events", {"updates": [], "requirements": []}),
        ("DELETE", "/v1/namespaces/sales/tables/events", None),
        ("POST", "/v1/tables/rename", {}),
        ("POST", "/v1/transactions/commit", {"table-changes": []}),
        ("PUT", "/v1/namespaces/sales/tables/events", {}),
    ]
    for method, path, body in writes:
        response = requests.request(method, url + path, json=body, headers=AUTH, timeout=30)
        error = _error(response, 403)
        assert "s3ddb is the writer" in error["message"], (method, path)
    # pyiceberg does not even send them: /v1/config announces the read endpoints only.
    catalog_client = rest_catalog(url)
    with pytest.raises(NotImplementedError, match="does not support endpoint"):
        catalog_client.create_namespace("new")
    with pytest.raises(NotImplementedError, match="does not support endpoint"):
        catalog_client.drop_table("sales.events")
    # The table is still there, unchanged.
    assert catalog_client.load_table("sales.events").metadata.current_snapshot_id == 1


def test_an_oversize_body_is_refused(catalog: Any) -> None:
    _, url = catalog
    limit = Limits().max_body_bytes
    path = url + "/v1/namespaces/sales/tables/events/metrics"
    assert requests.post(path, data=b"{}", headers=AUTH, timeout=30).status_code == 204
    _error(requests.post(path, data=b"x" * (limit + 1), headers=AUTH, timeout=30), 413)

    def chunks() -> Any:  # no Content-Length: the body is counted as it comes
        for _ in range(limit // 1000 + 2):
            yield b"y" * 1000

    _error(requests.post(path, data=chunks(), headers=AUTH, timeout=30), 413)


def test_a_client_over_its_request_rate_is_refused(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path))
    with running(registry, Limits(requests_per_second=0.01, burst=3)) as url:
        statuses = [
            requests.get(url + "/v1/config", headers=AUTH, timeout=30).status_code for _ in range(5)
        ]
        assert statuses[:3] == [200, 200, 200]
        response = requests.get(url + "/v1/config", headers=AUTH, timeout=30)
        assert _error(response, 429)["type"] == "TooManyRequestsException"
        # Unauthenticated requests count too (a token cannot be guessed at any rate).
        _error(requests.get(url + "/v1/config", timeout=30), 429)


def _plant(tmp_path: Path, namespace: str, table: str, data: bytes) -> None:
    entry = tmp_path / REGISTRY_DIR / namespace / f"{table}.json"
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(data)


def test_bad_registry_entries_get_the_error_model(catalog: Any, tmp_path: Path) -> None:
    _, url = catalog
    (tmp_path / "outside").mkdir()
    planted = {
        "etc": b'{"uri": "/etc"}',
        "sibling": b'{"uri": "%s"}' % str(tmp_path.parent / "elsewhere").encode(),
        "root": b'{"uri": "%s"}' % str(tmp_path).encode(),
        "bucket": b'{"uri": "s3://other-bucket/events"}',
        "garbage": b"\x00\xff not json",
        "list": b'["/etc"]',
        "deep": b"[" * 100_000,
        "huge": b'{"uri": "' + b"a" * MAX_ENTRY_BYTES + b'"}',
        "scheme": b'{"uri": "http://example.com/x"}',
        "empty": b"",
    }
    for table, data in planted.items():
        _plant(tmp_path, "bad", table, data)
    listed = requests.get(url + "/v1/namespaces/bad/tables", headers=AUTH, timeout=30)
    assert {t["name"] for t in listed.json()["identifiers"]} == set(planted)
    for table in planted:
        response = requests.get(f"{url}/v1/namespaces/bad/tables/{table}", headers=AUTH, timeout=30)
        error = _error(response, 500)
        assert f"{REGISTRY_DIR}/bad/{table}.json" in error["message"], table
    # An entry that names a dataset with nothing committed: 404.
    _plant(tmp_path, "bad", "nothing", b'{"uri": "%s"}' % str(tmp_path / "outside").encode())
    response = requests.get(f"{url}/v1/namespaces/bad/tables/nothing", headers=AUTH, timeout=30)
    assert _error(response, 404)["type"] == "NoSuchTableException"


def test_a_damaged_metadata_file_is_refused_naming_it(
    catalog: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused while the server cannot publish it again (read-only credentials, say);
    published again from the manifest, then served, once it can."""
    _, url = catalog
    table_url = f"{url}/v1/namespaces/sales/tables/events"
    metadata = tmp_path / "events/metadata/v1.metadata.json"
    good = metadata.read_bytes()
    doc = json.loads(good)
    wrong_types = [  # equal in Python (2.0 == 2, True == 1), not to a client
        json.dumps({**doc, "format-version": 2.0}).encode(),
        json.dumps({**doc, "current-snapshot-id": float(doc["current-snapshot-id"])}).encode(),
    ]
    if doc["current-snapshot-id"] == 1:
        wrong_types.append(json.dumps({**doc, "current-snapshot-id": True}).encode())
    damaged_files = (b"not json", b"[]", good.replace(str(tmp_path).encode(), b"/etc"),
                     b"[" * 10_000 + b"]" * 10_000, *wrong_types)  # fmt: skip

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError("write refused")

    with monkeypatch.context() as patched:
        patched.setattr("s3ddb.catalog_server.table_loading.publish_version", refused)
        for damaged in damaged_files:
            metadata.write_bytes(damaged)
            error = _error(requests.get(table_url, headers=AUTH, timeout=30), 500)
            assert "metadata/v1.metadata.json" in error["message"]
    for damaged in damaged_files:
        metadata.write_bytes(damaged)
        served = requests.get(table_url, headers=AUTH, timeout=30)
        assert served.status_code == 200, served.text
        assert served.json()["metadata"] == doc
        assert metadata.read_bytes() == good


def test_unknown_routes_and_names_get_the_error_model(catalog: Any) -> None:
    _, url = catalog
    for path, kind in (
        ("/v1/namespaces/nope", "NoSuchNamespaceException"),
        ("/v1/namespaces/nope/tables", "NoSuchNamespaceException"),
        ("/v1/namespaces/sales/tables/nope", "NoSuchTableException"),
        ("/v1/namespaces/sales%1Fsub/tables/events", "NoSuchTableException"),
        ("/v1/namespaces/..%2F..%2Fetc/tables/events", None),
        ("/v1/namespaces/sales/tables/..", None),
        ("/v1/nothing/here", None),
        ("/", None),
    ):
        error = _error(requests.get(url + path, headers=AUTH, timeout=30), 404)
        assert kind is None or error["type"] == kind, path


def test_no_auth_only_on_loopback(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path))
    for host in ("0.0.0.0", "192.168.1.10", "example.com", "::"):
        with pytest.raises(InvalidInputError, match="loopback"):
            CatalogServer(registry, token=None, no_auth=True, host=host)
    with pytest.raises(InvalidInputError, match="S3DDB_CATALOG_TOKEN"):
        CatalogServer(registry, token=None)
    with pytest.raises(InvalidInputError, match="at least 16"):
        check_bind("127.0.0.1", "short", no_auth=False)
    with CatalogServer(registry, token=None, no_auth=True) as server:
        assert requests.get(server.url + "/v1/config", timeout=30).status_code == 200
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}\n")
    assert read_token(str(token_file), {}) == TOKEN
    assert read_token(None, {"S3DDB_CATALOG_TOKEN": TOKEN}) == TOKEN
    assert read_token(None, {}) is None


def test_registration_checks_names_and_locations(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path / "wh"))
    for bad in ("events", "a.b.c", ".t", "ns.", "n s.t", "ns.t/../x", "-ns.t"):
        with pytest.raises(InvalidInputError):
            parse_table_name(bad)
    name = parse_table_name("sales.events")
    with pytest.raises(PathOutsideDatasetError):
        registry.register(name, str(tmp_path / "elsewhere"))
    with pytest.raises(PathOutsideDatasetError):
        registry.register(name, str(tmp_path / "wh"))
    assert registry.register(name, str(tmp_path / "wh/events")) is True
    assert registry.register(name, str(tmp_path / "wh/events")) is False  # the same again
    with pytest.raises(InvalidInputError, match="registered already"):
        registry.register(name, str(tmp_path / "wh/other"))
    assert registry.names() == [name]
    registry.unregister(name)
    assert registry.names() == []


def test_each_request_is_a_span(catalog: Any) -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is a dev dependency")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # another test may have set one already
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _, url = catalog
    requests.get(url + "/v1/namespaces/sales/tables/events", headers=AUTH, timeout=30)
    requests.get(url + "/v1/config", timeout=30)
    # A request's span ends on the server's thread once the answer is sent: the client
    # may have it first.
    deadline = time.monotonic() + 30
    while True:
        spans = [s for s in exporter.get_finished_spans() if s.name == "s3ddb.catalog.request"]
        by_path = {s.attributes["url.path"]: s.attributes for s in spans}
        if len(by_path) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    loaded = by_path["/v1/namespaces/sales/tables/events"]
    assert loaded["http.response.status_code"] == 200 and loaded["s3ddb.outcome"] == "ok"
    refused = by_path["/v1/config"]
    assert refused["http.response.status_code"] == 401 and refused["s3ddb.outcome"] == "error"
    assert all(TOKEN not in str(dict(s.attributes)) for s in spans)
    # loadTable's own span, with the version served, is the request's child.
    [request_span] = [s for s in spans if s.attributes["url.path"].endswith("/events")]
    [loaded_span] = [s for s in exporter.get_finished_spans()
                     if s.name == "s3ddb.catalog.load_table"]  # fmt: skip
    assert loaded_span.parent is not None
    assert loaded_span.parent.span_id == request_span.context.span_id
    assert loaded_span.attributes["s3ddb.version"] == 1
