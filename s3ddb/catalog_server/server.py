"""Running the catalog (uvicorn): in the foreground for ``s3ddb catalog serve``, or
on a thread of this process (:class:`CatalogServer`) for tests and notebooks."""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

import uvicorn

from s3ddb.catalog_server.app import Limits, catalog_app
from s3ddb.catalog_server.registry import CatalogRegistry
from s3ddb.errors import InvalidInputError

__all__ = [
    "MIN_TOKEN_LENGTH",
    "TOKEN_ENV",
    "CatalogServer",
    "check_bind",
    "read_token",
    "serve",
]

#: The environment variable holding the bearer token.
TOKEN_ENV = "S3DDB_CATALOG_TOKEN"
#: The shortest token accepted (a short one could be guessed).
MIN_TOKEN_LENGTH = 16
#: The largest token file read.
_MAX_TOKEN_FILE = 4096
#: How long stopping a server waits for its requests in flight.
_STOP_SECONDS = 10.0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, no_auth: bool) -> str | None:
    """The token a server on ``host`` runs with (None: no authentication).

    Raises:
        InvalidInputError: no token and not ``no_auth``; ``no_auth`` on an address
            that is not loopback (127.0.0.0/8, ::1, localhost) or together with a
            token; a token shorter than :data:`MIN_TOKEN_LENGTH`.
    """
    if no_auth:
        if token is not None:
            raise InvalidInputError("give a token or --no-auth, not both")
        if not _is_loopback(host):
            raise InvalidInputError(
                f"--no-auth serves without authentication, so only on loopback "
                f"(127.0.0.1, ::1, localhost), not on {host!r}"
            )
        return None
    if token is None:
        raise InvalidInputError(
            f"the catalog needs a bearer token: set {TOKEN_ENV} or give --token-file "
            "(or --no-auth, on loopback only)"
        )
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
        raise InvalidInputError(
            f"the bearer token must be at least {MIN_TOKEN_LENGTH} characters, with no whitespace"
        )
    return token


def read_token(token_file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The token from ``token_file`` (its text, surrounding whitespace removed) or else
    from :data:`TOKEN_ENV`; None when neither gives one.

    Raises:
        InvalidInputError: the file cannot be read, or holds more than 4 KiB.
    """
    if token_file is not None:
        try:
            with open(token_file, "rb") as f:
                data = f.read(_MAX_TOKEN_FILE + 1)
        except OSError as exc:
            raise InvalidInputError(
                f"cannot read the token file {token_file!r}: {exc.strerror}"
            ) from None
        if len(data) > _MAX_TOKEN_FILE:
            raise InvalidInputError(f"token file {token_file!r} holds more than 4 KiB")
        try:
            return data.decode("utf-8").strip() or None
        except UnicodeDecodeError:
            raise InvalidInputError(f"token file {token_file!r} is not UTF-8 text") from None
    value = (environ if environ is not None else os.environ).get(TOKEN_ENV, "").strip()
    return value or None


def _config(app: Any, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,  # one line per request would be the client's business
        server_header=False,
        proxy_headers=False,  # the rate limit goes by the peer's address
        limit_concurrency=256,
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=16 * 1024,  # request line and headers
    )


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def _url(host: str, sock: socket.socket) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}"


def serve(
    registry: CatalogRegistry,
    host: str,
    port: int,
    *,
    token: str | None,
    no_auth: bool = False,
    limits: Limits | None = None,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve ``registry``'s catalog on ``host:port`` (0: a free port) until
    interrupted (SIGINT or SIGTERM end it after the requests in flight).
    ``announce`` is called with the server's URL once it listens.

    Raises:
        InvalidInputError: see :func:`check_bind`.
        OSError: the address cannot be bound.
    """
    checked = check_bind(host, token, no_auth)
    app = catalog_app(registry, token=checked, limits=limits)
    sock = _bind(host, port)
    try:
        if announce is not None:
            announce(_url(host, sock))
        uvicorn.Server(_config(app, host, port)).run(sockets=[sock])
    finally:
        sock.close()


class CatalogServer:
    """``registry``'s catalog served by uvicorn on a thread of this process, on
    ``host`` and a free port (``port=0``) or the one given. Use as a context manager
    (or :meth:`start` and :meth:`stop`); :attr:`url` is where it listens.

    Raises:
        InvalidInputError: see :func:`check_bind`.
    """

    def __init__(
        self,
        registry: CatalogRegistry,
        *,
        token: str | None,
        no_auth: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: Limits | None = None,
    ) -> None:
        checked = check_bind(host, token, no_auth)
        self._host = host
        self._port = port
        self._app = catalog_app(registry, token=checked, limits=limits)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server.

        Raises:
            InvalidInputError: it is not running."""
        if self._socket is None:
            raise InvalidInputError("the catalog server is not running")
        return _url(self._host, self._socket)

    def start(self) -> CatalogServer:
        """Bind and start serving; returns once the server accepts requests.

        Raises:
            OSError: the address cannot be bound.
        """
        sock = _bind(self._host, self._port)
        self._socket = sock
        server = uvicorn.Server(_config(self._app, self._host, self._port))
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="s3ddb-catalog", daemon=True
        )
        self._thread.start()
        started = threading.Event()
        while not server.started and self._thread.is_alive():
            started.wait(0.01)
        if not server.started:
            self.stop()
            raise OSError(f"the catalog server on {self._host} did not start")
        return self

    def stop(self) -> None:
        """Stop serving (after the requests in flight) and release the port."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(_STOP_SECONDS)
        if self._socket is not None:
            self._socket.close()
        self._server, self._thread, self._socket = None, None, None

    def __enter__(self) -> CatalogServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
