"""A TCP link with a network's delay, for benchmarks: every byte arrives ``one_way``
seconds after it was sent, in each direction, as over a link whose round trip is twice
that (bandwidth is not limited).

The in-process endpoint answers in about a millisecond, so round trips a protocol
makes one after the other cost it almost nothing there; through a :class:`DelayedLink`
they cost what they cost against S3 and DynamoDB from another host or region.

    with DelayedLink(("127.0.0.1", port), one_way=0.005) as link:
        endpoint = link.url       # http://127.0.0.1:<link's port>
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Any

_CHUNK = 1 << 16


class DelayedLink:
    """Forwards each connection made to :attr:`url` to ``upstream``, delaying data.

    Each direction of each connection has a reader thread, which stamps every chunk
    with its due time, and a writer thread, which sends it then (order kept: chunks
    sent together arrive together, not one delay apart).
    """

    def __init__(self, upstream: tuple[str, int], one_way: float) -> None:
        self.upstream = upstream
        self.one_way = one_way
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="delayed-link", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> DelayedLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.close()
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            self._pump(client, server)
            self._pump(server, client)

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        due: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def read() -> None:
            while True:
                try:
                    data = source.recv(_CHUNK)
                except OSError:
                    data = b""
                due.put((time.monotonic() + self.one_way, data))
                if not data:
                    return

        def write() -> None:
            while True:
                at, data = due.get()
                wait = at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        target.shutdown(socket.SHUT_WR)
                        return
                    target.sendall(data)
                except OSError:
                    return

        for fn in (read, write):
            threading.Thread(target=fn, name="delayed-link", daemon=True).start()


def delayed_options(options: dict[str, Any], endpoint: str, link: str) -> dict[str, Any]:
    """``options`` with every value that is ``endpoint``'s URL replaced by ``link``."""
    return {k: link if v == endpoint else v for k, v in options.items()}
