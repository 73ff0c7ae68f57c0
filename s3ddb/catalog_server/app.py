"""The Iceberg REST catalog as an ASGI application (Starlette), read-only.

Routes follow the Iceberg REST OpenAPI specification (``/v1``, no prefix):

==========================================================  ==============================
``GET /v1/config``                                          defaults, overrides, endpoints
``GET /v1/namespaces``                                      the registry's namespaces
``GET``/``HEAD /v1/namespaces/{ns}``                        load / exists
``GET /v1/namespaces/{ns}/tables``                          the namespace's tables
``GET``/``HEAD /v1/namespaces/{ns}/tables/{table}``         loadTable (ETag, 304) / exists
``POST /v1/namespaces/{ns}/tables/{table}/metrics``         accepted and dropped (204)
any other ``POST``/``PUT``/``DELETE``/``PATCH``             403: s3ddb is the writer
==========================================================  ==============================

``GET /v1/config?warehouse=cut`` reads every registered table together and answers
the prefix ``cuts/<id>``: the same routes under ``/v1/cuts/<id>`` serve the versions
that cut read (:mod:`s3ddb.catalog_server.cuts`).

Before any route, :class:`Guard` (the outermost layer) opens a span
``s3ddb.catalog.request`` and bounds the client's request rate (429), checks the
bearer token in constant time (401; unless the app was built without one, which
:func:`s3ddb.catalog_server.server.check_bind` allows on loopback only) and refuses a
body over :attr:`Limits.max_body_bytes` (413). Tokens, headers and bodies are never
logged. Handlers that read storage are plain functions, which Starlette runs on its
thread pool.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from s3ddb.catalog_server.cuts import CUT_WAREHOUSE, Cuts
from s3ddb.catalog_server.registry import NAME_PATTERN, CatalogRegistry, EntryCache, TableName
from s3ddb.catalog_server.responses import (
    READ_ONLY_MESSAGE,
    error_for_exception,
    error_response,
)
from s3ddb.catalog_server.table_loading import load_served_table
from s3ddb.errors import AtomicGroupError
from s3ddb.observe import telemetry

__all__ = ["Guard", "Limits", "catalog_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The endpoints ``/v1/config`` announces (the specification's names for them).
ENDPOINTS = (
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
)

_WRITE_METHODS = frozenset({"POST", "PUT", "DELETE", "PATCH"})


@dataclass(frozen=True)
class Limits:
    """What one server accepts.

    Attributes:
        max_body_bytes: the largest request body (only metrics reports carry one).
        requests_per_second: each client's sustained request rate (by address).
        burst: how many requests a client may send at once above that rate.
        max_clients: client addresses whose rate is tracked (the oldest are
            forgotten beyond it, so the table stays bounded).
        entry_seconds: how long a registry entry read is used before it is read
            again (a table unregistered or registered anew is served from its old
            entry at most this long; at once not, if its dataset cannot be opened).
        max_cached_entries: how many registry entries the server keeps.
    """

    max_body_bytes: int = 64 * 1024
    requests_per_second: float = 50.0
    burst: int = 200
    max_clients: int = 10_000
    entry_seconds: float = 5.0
    max_cached_entries: int = 1000


class _RateLimiter:
    """A token bucket per client address, in a bounded table."""

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        now = time.monotonic()
        rate, burst = self._limits.requests_per_second, float(self._limits.burst)
        with self._lock:
            tokens, last = self._buckets.pop(client, (burst, now))
            tokens = min(burst, tokens + (now - last) * rate)
            allowed = tokens >= 1.0
            self._buckets[client] = (tokens - 1.0 if allowed else tokens, now)
            while len(self._buckets) > self._limits.max_clients:
                self._buckets.popitem(last=False)
        return allowed


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class Guard:
    """The ASGI layer in front of the routes: span, rate, token, body size (see the
    module docstring). ``token`` None serves without authentication."""

    def __init__(self, app: ASGIApp, token: str | None, limits: Limits) -> None:
        self._app = app
        # Kept as its digest: requests are compared digest to digest, equal lengths,
        # so the comparison's time tells nothing of the token, its length included.
        self._token = _digest(token.encode("utf-8")) if token is not None else None
        self._limits = limits
        self._rates = _RateLimiter(limits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        method = scope.get("method", "")
        attributes = {"http.request.method": method, "url.path": scope.get("path", "")}
        with telemetry.span("s3ddb.catalog.request", attributes) as span:
            status: list[int] = []

            async def recording_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status.append(int(message["status"]))
                await send(message)

            await self._guarded(scope, receive, recording_send)
            code = status[0] if status else 500
            span.set_attribute("http.response.status_code", code)
            span.set_attribute("s3ddb.outcome", "ok" if code < 400 else "error")

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        address = str(client[0]) if client else "-"
        if not self._rates.allow(address):
            response = error_response(
                429,
                "TooManyRequestsException",
                "request rate over the catalog's limit: retry later",
                {"Retry-After": "1"},
            )
            await response(scope, receive, send)
            return
        if self._token is not None and not self._authorized(scope):
            response = error_response(
                401,
                "NotAuthorizedException",
                "missing or invalid bearer token (Authorization: Bearer <token>)",
                {"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        body = await self._bounded_body(scope, receive)
        if body is None:
            response = error_response(
                413,
                "BadRequestException",
                f"request body larger than {self._limits.max_body_bytes} bytes",
            )
            await response(scope, receive, send)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        await self._app(scope, replay, send)

    def _authorized(self, scope: Scope) -> bool:
        assert self._token is not None
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
                break
        scheme, _, credential = given.partition(b" ")
        if scheme.lower() != b"bearer":
            credential = b""
        return hmac.compare_digest(_digest(credential.strip()), self._token)

    async def _bounded_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The request body, or None once it is over the limit (declared or sent)."""
        limit = self._limits.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    if int(value) > limit:
                        return None
                except ValueError:
                    return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


# --- routes ------------------------------------------------------------------------------


def _namespace_of(request: Request) -> str | None:
    """The path's namespace when it is one level the registry can hold, else None
    (a multi-level namespace, joined by the unit separator, or a bad name)."""
    namespace = str(request.path_params.get("namespace", ""))
    return namespace if NAME_PATTERN.fullmatch(namespace) else None


def _no_namespace(request: Request) -> Response:
    shown = str(request.path_params.get("namespace", ""))[:200]
    return error_response(404, "NoSuchNamespaceException", f"namespace {shown!r} does not exist")


def _no_table(namespace: str, table: str) -> Response:
    shown = f"{namespace}.{table[:200]}"
    return error_response(404, "NoSuchTableException", f"table {shown!r} does not exist")


class _View:
    """What one request sees of the catalog: the registry's tables at their newest
    versions, or a cut's tables at the versions it read together."""

    def __init__(
        self,
        registry: CatalogRegistry,
        entries: EntryCache,
        cut: dict[TableName, tuple[str, int]] | None,
    ) -> None:
        self._registry = registry
        self._entries = entries
        self._cut = cut

    def names(self) -> list[TableName]:
        return sorted(self._cut) if self._cut is not None else self._registry.names()

    def tables(self, namespace: str) -> list[TableName]:
        return [n for n in self.names() if n.namespace == namespace]

    def lookup(self, name: TableName) -> tuple[str, int | None, bool] | None:
        """The dataset URI of ``name``, the version to serve (None: the newest) and
        whether the URI is a cached entry's; None when there is no such table."""
        if self._cut is not None:
            found = self._cut.get(name)
            return (*found, False) if found is not None else None
        uri, cached = self._entries.dataset_uri(name)
        return (uri, None, cached) if uri is not None else None

    def forget(self, name: TableName) -> None:
        """Read ``name``'s registry entry again at its next lookup."""
        self._entries.forget(name)


def catalog_app(
    registry: CatalogRegistry,
    *,
    token: str | None,
    limits: Limits | None = None,
) -> ASGIApp:
    """The read-only Iceberg REST catalog of ``registry``, behind :class:`Guard`.

    ``token`` is the bearer token every request must carry; None serves without one
    (only :func:`s3ddb.catalog_server.server.check_bind` decides whether that is
    allowed: on loopback only).
    """
    options = registry.storage_options
    cuts = Cuts(registry, options)
    limits = limits or Limits()
    # Registry entries are written once and removed only by unregister: a server
    # reads each at most once per entry_seconds, so a loadTable of a published
    # version costs the dataset's two requests only.
    entries = EntryCache(
        registry, max_entries=limits.max_cached_entries, max_age=limits.entry_seconds
    )

    def view_of(request: Request) -> _View | Response:
        cut = request.path_params.get("cut")
        if cut is None:
            return _View(registry, entries, None)
        tables = cuts.tables(str(cut))
        if tables is None:
            return error_response(
                404,
                "NoSuchCutException",
                f"cut {str(cut)[:64]!r} is not known (or forgotten): ask "
                f"/v1/config?warehouse={CUT_WAREHOUSE} for a new one",
            )
        return _View(registry, entries, tables)

    def config(request: Request) -> Response:
        warehouse = request.query_params.get("warehouse") or ""
        overrides: dict[str, str] = {}
        if warehouse == CUT_WAREHOUSE:
            try:
                overrides["prefix"] = f"cuts/{cuts.make()}"
            except AtomicGroupError as exc:
                return error_response(
                    400, "BadRequestException", f"no cut of these datasets: {exc}"
                )
            except Exception as exc:
                return error_for_exception(exc, "a cut of the catalog's tables")
        elif warehouse:
            return error_response(
                400,
                "BadRequestException",
                f"unknown warehouse {warehouse[:200]!r}: none, or {CUT_WAREHOUSE!r} for every "
                "table as of one instant",
            )
        return JSONResponse({"defaults": {}, "overrides": overrides, "endpoints": list(ENDPOINTS)})

    def list_namespaces(request: Request) -> Response:
        view = view_of(request)
        if isinstance(view, Response):
            return view
        try:
            namespaces = sorted({n.namespace for n in view.names()})
        except Exception as exc:
            return error_for_exception(exc, "the catalog's registry")
        parent = request.query_params.get("parent")
        if parent is not None:
            if parent not in namespaces:
                return error_response(
                    404, "NoSuchNamespaceException", f"namespace {parent[:200]!r} does not exist"
                )
            return JSONResponse({"namespaces": []})  # one level: no namespace has children
        return JSONResponse({"namespaces": [[n] for n in namespaces]})

    def tables_of(request: Request) -> list[TableName] | Response:
        """The tables of the path's namespace (a 404 when it has none)."""
        view = view_of(request)
        if isinstance(view, Response):
            return view
        name = _namespace_of(request)
        try:
            tables = view.tables(name) if name is not None else []
        except Exception as exc:
            return error_for_exception(exc, "the catalog's registry")
        return tables or _no_namespace(request)

    def namespace(request: Request) -> Response:
        tables = tables_of(request)
        if isinstance(tables, Response):
            return tables
        if request.method == "HEAD":
            return Response(status_code=204)
        return JSONResponse({"namespace": [tables[0].namespace], "properties": {}})

    def list_tables(request: Request) -> Response:
        tables = tables_of(request)
        if isinstance(tables, Response):
            return tables
        return JSONResponse(
            {"identifiers": [{"namespace": [t.namespace], "name": t.table} for t in tables]}
        )

    def list_views(request: Request) -> Response:
        tables = tables_of(request)
        if isinstance(tables, Response):
            return tables
        return JSONResponse({"identifiers": []})

    def table(request: Request) -> Response:
        view = view_of(request)
        if isinstance(view, Response):
            return view
        namespace_name = _namespace_of(request)
        table_name = str(request.path_params.get("table", ""))
        if namespace_name is None:
            return _no_table(str(request.path_params.get("namespace", ""))[:200], table_name)
        name = TableName(namespace_name, table_name)
        what = f"table {namespace_name}.{table_name[:200]}"
        try:
            found = view.lookup(name)
        except Exception as exc:
            return error_for_exception(exc, what)
        if found is None:
            return _no_table(namespace_name, table_name)
        if request.method == "HEAD":
            return Response(status_code=204)
        uri, version, cached = found
        if_none_match = request.headers.get("if-none-match")
        try:
            try:
                served = load_served_table(
                    uri, options, version=version, if_none_match=if_none_match
                )
            except Exception:
                if not cached:
                    raise
                # The dataset cannot be served at the cached entry's URI: the entry
                # may have been removed or registered anew. Read it again.
                view.forget(name)
                fresh = view.lookup(name)
                if fresh is None:
                    return _no_table(namespace_name, table_name)
                if fresh[0] == uri:
                    raise
                served = load_served_table(
                    fresh[0], options, version=fresh[1], if_none_match=if_none_match
                )
        except Exception as exc:
            return error_for_exception(exc, what)
        if served.metadata is None:
            return Response(status_code=304, headers={"ETag": served.etag})
        return JSONResponse(
            {
                "metadata-location": served.metadata_location,
                "metadata": served.metadata,
                "config": {},
            },
            headers={"ETag": served.etag},
        )

    def metrics(request: Request) -> Response:
        return Response(status_code=204)

    def refuse_write(request: Request) -> Response:
        return error_response(403, "ForbiddenException", READ_ONLY_MESSAGE)

    def not_found(request: Request) -> Response:
        if request.method in _WRITE_METHODS:
            return refuse_write(request)
        return error_response(404, "NotFoundException", "no such route in the Iceberg REST API")

    writes = sorted(_WRITE_METHODS)
    routes = [Route("/v1/config", config, methods=["GET"])]
    # The same routes without a prefix (the newest versions) and under a cut's.
    for base in ("/v1", "/v1/cuts/{cut}"):
        routes += [
            Route(f"{base}/namespaces", list_namespaces, methods=["GET"]),
            Route(f"{base}/namespaces/{{namespace}}", namespace, methods=["GET", "HEAD"]),
            Route(f"{base}/namespaces/{{namespace}}/tables", list_tables, methods=["GET"]),
            Route(f"{base}/namespaces/{{namespace}}/views", list_views, methods=["GET"]),
            Route(
                f"{base}/namespaces/{{namespace}}/tables/{{table}}/metrics",
                metrics,
                methods=["POST"],
            ),
            Route(
                f"{base}/namespaces/{{namespace}}/tables/{{table}}",
                table,
                methods=["GET", "HEAD"],
            ),
        ]
    routes.append(Route("/{path:path}", not_found, methods=["GET", "HEAD", *writes]))

    async def http_error(request: Request, exc: Exception) -> Response:
        status = int(getattr(exc, "status_code", 500))
        if request.method in _WRITE_METHODS and status == 405:
            return refuse_write(request)
        if status >= 500:
            return error_for_exception(exc, f"{request.method} {request.url.path[:200]}")
        return error_response(status, "BadRequestException", "bad request")

    async def unexpected(request: Request, exc: Exception) -> Response:
        return error_for_exception(exc, f"{request.method} {request.url.path[:200]}")

    app = Starlette(
        routes=routes,
        exception_handlers={404: http_error, 405: http_error, Exception: unexpected},
    )
    return Guard(app, token, limits)
