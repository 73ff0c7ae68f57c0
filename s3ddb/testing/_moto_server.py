"""moto's server parts for :class:`~s3ddb.testing.LocalAWS`: the threaded WSGI server,
its request handler and moto's dispatcher, as classes built on first use.

They derive from moto's and werkzeug's classes, which come with the ``testing`` extra
and are imported only when a server starts; so the classes are built then, once per
process (:func:`server_machinery`).
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["INSTALL_HINT", "OpenConnections", "WSGIApp", "server_machinery"]

# The server's messages come under LocalAWS's logger, where they always were.
_log = logging.getLogger("s3ddb.testing.local_aws")

INSTALL_HINT = "s3ddb.testing needs moto's server and werkzeug: pip install 's3ddb[testing]'"

# How long an accepted connection may sit idle (no request bytes) before its thread
# gives up on it. Long enough for a busy test machine, short enough that abandoned
# sockets do not accumulate threads.
_SOCKET_TIMEOUT = 60.0

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class OpenConnections:
    """The connections a server has accepted and not yet closed, so that stopping it
    can cut them."""

    def __init__(self) -> None:
        self._active: set[socket.socket] = set()
        self._lock = threading.Condition()
        self._closing = False

    def track(self, conn: socket.socket) -> None:
        with self._lock:
            if self._closing:
                # Accepted just before cut(): cut it like the rest.
                _shut(conn)
            self._active.add(conn)

    def untrack(self, conn: socket.socket) -> None:
        with self._lock:
            self._active.discard(conn)
            self._lock.notify_all()

    def cut(self, grace: float) -> None:
        """Shut every open connection, then wait up to ``grace`` s for their handlers."""
        with self._lock:
            self._closing = True
            for conn in list(self._active):
                _shut(conn)
            deadline = time.monotonic() + grace
            while self._active and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)


def _shut(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer or by us


@functools.lru_cache(maxsize=1)
def server_machinery() -> tuple[Callable[[], WSGIApp], type[Any]]:
    """Import moto's server parts and build the server class (once per process).

    The classes derive from moto's and werkzeug's, which are imported only here, so
    they are built here too.

    Returns:
        (factory of a fresh moto dispatcher WSGI app, server class).

    Raises:
        ImportError: moto's server extra or werkzeug is not installed.
    """
    try:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import ThreadedWSGIServer
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    server = _server_class(ThreadedWSGIServer, _handler_class(MotoRequestHandler))
    return _dispatcher_class(DomainDispatcherApplication, create_backend_app), server


def _server_class(threaded_wsgi_server: type[Any], handler: type[Any]) -> type[Any]:
    """werkzeug's threaded server on a socket we bound ourselves, tracking open
    connections (``connections``) so stop() can cut them."""

    class Server(threaded_wsgi_server):  # type: ignore[misc,valid-type]
        daemon_threads = True

        def __init__(self, sock: socket.socket, app: WSGIApp) -> None:
            self.connections = OpenConnections()
            # Passing fd= makes werkzeug use our bound, listening socket: werkzeug
            # would otherwise print and sys.exit() when binding fails.
            host, port = sock.getsockname()[:2]
            super().__init__(host, port, app, handler=handler, fd=sock.fileno())

    return Server


def _handler_class(moto_request_handler: type[Any]) -> type[Any]:
    """moto's request handler (keeps underscored S3 metadata headers), plus: a socket
    timeout, connection tracking for stop(), quiet logging, and closing the connection
    when the app drops it."""

    class Handler(moto_request_handler):  # type: ignore[misc,valid-type]
        timeout = _SOCKET_TIMEOUT

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes; with Nagle's algorithm the second
            # waits for the client's delayed ACK of the first (~40 ms) on a kept-alive
            # connection.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.server.connections.track(self.connection)

        def finish(self) -> None:
            try:
                super().finish()
            except OSError:
                # The peer is gone or stop() shut the socket; nothing left to flush.
                pass
            finally:
                self.server.connections.untrack(self.connection)

        def connection_dropped(
            self, error: BaseException, environ: dict[str, Any] | None = None
        ) -> None:
            # Either the client went away or the app asked to drop the connection:
            # in both cases read no further request from this socket.
            self.close_connection = True

        def run_wsgi(self) -> None:
            """Answer one request and keep the connection for the client's next one
            (HTTP/1.1 keep-alive, as S3 and DynamoDB endpoints do).

            werkzeug's own run_wsgi closes every connection: http.server cannot tell
            where an unread request body ends. Our app (LocalAWS's gateway) reads
            every body whole before it answers, and answers with one payload, so the
            next request starts where this one ended. A chunked request body, or an
            app error, still goes through werkzeug's path, which closes."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                super().run_wsgi()
                return
            if self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.environ = environ = self.make_environ()
            answer: list[Any] = []

            def start_response(
                status: str, headers: list[tuple[str, str]], exc_info: Any = None
            ) -> Callable[[bytes], None]:
                answer[:] = [status, headers]
                return _no_write

            try:
                result = self.server.app(environ, start_response)
                try:
                    payload = b"".join(result)
                finally:
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()
            except (TimeoutError, ConnectionError) as exc:
                self.connection_dropped(exc, environ)
                return
            except Exception as exc:
                _log.debug("local AWS server: error on a request: %r", exc)
                self.close_connection = True
                self.send_error(500)
                return
            status, headers = answer
            code_text, _, reason = str(status).partition(" ")
            code = int(code_text)
            head = environ.get("REQUEST_METHOD") == "HEAD"
            self.send_response(code, reason)
            framed = head or code < 200 or code in (204, 304)
            for key, value in headers:
                if key.lower() in ("connection", "transfer-encoding"):
                    continue
                if key.lower() == "content-length" and not framed:
                    continue  # the payload's own length frames it
                self.send_header(key, value)
            if not framed:
                self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if not head and payload:
                self.wfile.write(payload)
            self.wfile.flush()

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            # The request log replaces werkzeug's per-request stderr line.
            pass

        def log_error(self, format: str, *args: Any) -> None:
            _log.debug("local AWS server: " + format, *args)

    return Handler


def _dispatcher_class(
    domain_dispatcher: type[Any], create_backend_app: Callable[..., Any]
) -> Callable[[], WSGIApp]:
    """moto's dispatcher with host -> backend lookups memoized.

    moto answers each lookup by stat()ing every moto service package (~1 ms, twice per
    request, under our lock); the answer depends on the host alone.
    """

    class Dispatcher(domain_dispatcher):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__(create_backend_app)
            self._backend_for_host: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:
            try:
                return self._backend_for_host[host]
            except KeyError:
                backend = super().get_backend_for_host(host)
                self._backend_for_host[host] = backend
                return backend

    return Dispatcher


def _no_write(data: bytes) -> None:
    """The WSGI ``write`` callable of the keep-alive handler: LocalAWS's gateway
    returns its payload instead of writing it."""
    raise RuntimeError("the local AWS server's app must return its payload, not write it")
