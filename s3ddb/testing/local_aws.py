"""A local AWS endpoint (S3 + DynamoDB) on moto's server, for tests, the demo and users.

:class:`LocalAWS` serves moto's WSGI application over real HTTP on ``127.0.0.1`` and an
OS-chosen port, so boto3, s3fs/aiobotocore and child processes talk to it exactly as to
AWS. On top of moto it adds what commit-protocol tests need:

- **Atomic requests.** moto's own threaded server interleaves requests, and then two
  DynamoDB conditional ``PutItem`` calls on the same key can both succeed. Here every
  request runs inside moto under one process-wide lock, so conditional writes are as
  atomic as on AWS. Connections are still accepted and read by one thread each (see
  "Serving" below), so a slow or idle client never holds up the others.
- **Stores without conditional writes.** ``conditional_writes=False`` strips
  ``If-None-Match`` / ``If-Match`` from S3 write requests before moto sees them, so a
  put with ``If-None-Match: *`` silently overwrites, as on S3-compatible stores that
  lack the feature. DynamoDB is unaffected.
- **DynamoDB-compatible stores that return no old item.** ``condition_items=False``
  strips ``ReturnValuesOnConditionCheckFailure`` from DynamoDB requests before moto
  sees them, so a failed condition (``PutItem``, a cancelled ``TransactWriteItems``)
  comes back without the item that failed it, as on endpoints that lack the option.
- **Glue's optimistic locking.** An AWS Glue ``UpdateTable`` naming a ``VersionId``
  that is no longer the table's is refused with ``ConcurrentModificationException``,
  as Glue does (moto applies it), checked and applied under the same lock.
- **A request log** (:attr:`LocalAWS.requests`, :meth:`LocalAWS.count`) naming every
  request by service and AWS operation, to assert round-trip counts.
- **Fault injection** (:meth:`LocalAWS.inject_fault`) at the HTTP level: throttling,
  server errors, and "applied but the response was lost".

Serving: a werkzeug threaded WSGI server accepts each connection in its own daemon
thread; that thread reads the whole request body, then takes the process-wide moto
lock, runs moto and collects the complete response, releases the lock and writes the
response. werkzeug answers every request with ``Connection: close`` (its dev server does
not implement keep-alive), so boto3's and aiohttp's pooled connections are simply
re-opened per request and no idle keep-alive connection can occupy the server. Accepted
sockets have a timeout, so a client that connects and never sends cannot pin a thread.
Why not werkzeug's single-threaded server: it is as atomic, but one client stalled
mid-request (a slow upload, a connection opened and left idle) would stall everyone;
here it stalls only its own thread, and throughput is the same (moto is the bottleneck:
~2 ms of moto time per request; ~200-250 requests/s from 16 client processes on 2 CPUs).

Isolation: moto keeps its state in process-global backends. Each instance therefore
serves its own moto *account* (a random 12-digit id, sent to moto as the
``x-moto-account-id`` header on every request), which isolates DynamoDB tables and the
contents of S3 buckets between instances. Shared by all instances in a process: the S3
bucket *namespace* (bucket names are global, as on AWS: two instances cannot both
create bucket ``b``, and an instance can address another's bucket by name), the moto
lock (instances serve one request at a time between them), and :meth:`LocalAWS.reset_all`.
Setting ``MOTO_ACCOUNT_ID`` in the environment overrides the per-instance account and
so removes the isolation. For full isolation run the server in another process with
:func:`s3ddb.testing.serve_in_subprocess`.

moto and werkzeug come with the ``testing`` extra and are imported on :meth:`start`.
"""

from __future__ import annotations

import functools
import http
import io
import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from s3ddb.testing._endpoint import DEFAULT_REGION, EndpointClientMixin
from s3ddb.testing._faults import (
    APPLYING_KINDS,
    DROPPING_KINDS,
    Fault,
    FaultKind,
    fault_response,
    validate_fault,
)
from s3ddb.testing._moto_server import INSTALL_HINT, WSGIApp, server_machinery
from s3ddb.testing._moto_transactions import back_up_touched_items_only
from s3ddb.testing._requests import (
    RequestRecord,
    detect_operation,
    detect_service,
    request_path,
    signing_identity,
)

_log = logging.getLogger(__name__)

# moto's backends are process-global and not safe under concurrent requests, so every
# LocalAWS in the process runs moto under this one lock.
_MOTO_LOCK = threading.Lock()

# On stop(), how long to wait for in-flight requests to finish writing.
_STOP_GRACE = 5.0

# Response headers that describe the connection rather than the response; the server
# sets its own (moto's Flask app should not send any, but never forward them).
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade"})

# HTTP methods that write; conditional headers are stripped only on these, because
# stores without conditional *writes* still honour conditional GET/HEAD (RFC 7232 reads
# are a far older and universal feature).
_WRITE_METHODS = frozenset({"PUT", "POST", "DELETE", "PATCH"})


class _DropConnection(ConnectionAbortedError):
    """Raised inside the WSGI app to close the connection without a response.

    werkzeug treats ``ConnectionError`` from the application as "client went away":
    it writes nothing, and our handler then closes the socket.
    """


def _new_account_id() -> str:
    # 12 digits like an AWS account id, never moto's default 123456789012.
    while True:
        account = f"{secrets.randbelow(10**12):012d}"
        if account != "123456789012":
            return account


def _read_body(environ: dict[str, Any]) -> bytes:
    """Read the whole request body and put it back as an in-memory stream.

    Done before taking the moto lock, so a slow upload never holds up other clients,
    and so a fault that answers without applying still consumes the body (the client
    then reads the error instead of failing on a reset connection).
    """
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        # Chunked request: werkzeug's DechunkedInput ends at the terminating chunk.
        body = stream.read()
    else:
        try:
            remaining = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            remaining = 0
        parts: list[bytes] = []
        while remaining > 0:
            chunk = stream.read(remaining)
            if not chunk:
                break
            parts.append(chunk)
            remaining -= len(chunk)
        body = b"".join(parts)
    environ["wsgi.input"] = io.BytesIO(body)
    return body


_OLD_ITEM_OPTION = "ReturnValuesOnConditionCheckFailure"


def _without_old_items(body: bytes) -> bytes:
    """A DynamoDB request body without ``ReturnValuesOnConditionCheckFailure``
    anywhere in it (``body`` as it was if it has none or is not JSON)."""
    if _OLD_ITEM_OPTION.encode() not in body:
        return body
    try:
        request = json.loads(body)
    except ValueError:
        return body

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != _OLD_ITEM_OPTION}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(request)).encode()


def _status_line(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


_Response = tuple[int, list[tuple[str, str]], bytes]


def _stale_glue_update(account_id: str, region: str | None, body: bytes) -> _Response | None:
    """Glue's answer to an ``UpdateTable`` whose ``VersionId`` is not the table's
    current one (None: moto answers the request). Called under the moto lock."""
    from moto.glue.models import glue_backends

    try:
        request = json.loads(body)
        version_id = request.get("VersionId")
        database, name = request["DatabaseName"], request["TableInput"]["Name"]
        if version_id is None:
            return None
        table = glue_backends[account_id][region or DEFAULT_REGION].get_table(database, name)
        current = table.as_dict().get("VersionId")
    except Exception:  # a malformed request or a missing table: moto's own answer
        return None
    if str(version_id) == str(current):
        return None
    payload = json.dumps(
        {
            "__type": "ConcurrentModificationException",
            "message": f"Table {database}.{name} version {version_id} is not the current "
            f"version {current}",
        }
    ).encode()
    return 400, [("Content-Type", "application/x-amz-json-1.1")], payload


class _Gateway:
    """The WSGI app in front of moto: names, logs, rewrites and faults requests."""

    def __init__(self, owner: LocalAWS, moto_app: WSGIApp) -> None:
        self._owner = owner
        self._moto_app = moto_app

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        owner = self._owner
        body = _read_body(environ)
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        service = detect_service(environ)
        operation = detect_operation(environ, service, body)
        path = request_path(environ)
        access_key_id, region = signing_identity(environ)

        if service == "s3" and not owner.conditional_writes and method in _WRITE_METHODS:
            environ.pop("HTTP_IF_NONE_MATCH", None)
            environ.pop("HTTP_IF_MATCH", None)
        if service == "dynamodb" and not owner.condition_items:
            body = _without_old_items(body)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        # Route moto to this instance's account (isolation; see the module docstring).
        environ["HTTP_X_MOTO_ACCOUNT_ID"] = owner.account_id

        def record(status: int, fault: Fault | None, applied: bool, sent: int = 0) -> None:
            owner._record(
                RequestRecord(
                    service=service,
                    operation=operation,
                    method=method,
                    path=path,
                    status=status,
                    fault=fault.kind if fault else None,
                    applied=applied,
                    access_key_id=access_key_id,
                    region=region,
                    response_bytes=sent,
                )
            )

        fault = owner._claim_fault(service, operation, path)
        if fault is not None and fault.kind not in APPLYING_KINDS:
            if fault.kind in DROPPING_KINDS:
                record(0, fault, applied=False)
                raise _DropConnection(f"injected fault {fault.kind}")
            status, headers, payload = fault_response(fault.kind, service, method)
            record(status, fault, applied=False, sent=len(payload))
        else:
            refuse = None
            if service == "glue" and operation == "UpdateTable":
                refuse = functools.partial(_stale_glue_update, owner.account_id, region, body)
            try:
                status, headers, payload = self._apply(environ, refuse)
            except Exception:
                record(500, fault, applied=True)
                raise
            if fault is not None:
                if fault.kind in DROPPING_KINDS:
                    record(0, fault, applied=True)
                    raise _DropConnection(f"injected fault {fault.kind}")
                status, headers, payload = fault_response(fault.kind, service, method)
            record(status, fault, applied=True, sent=len(payload))

        start_response(_status_line(status), headers)
        return [payload]

    def _apply(
        self, environ: dict[str, Any], refuse: Callable[[], _Response | None] | None = None
    ) -> _Response:
        """Run one request through moto, atomically with respect to all others; first,
        under the same lock, ``refuse`` may answer it instead (Glue's VersionId)."""
        captured: list[Any] = []
        chunks: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            captured[:] = [status, headers]
            return chunks.append

        # The whole exchange, including iterating the body, happens under the lock:
        # moto may build the response lazily from its (shared) state.
        with _MOTO_LOCK:
            refused = refuse() if refuse is not None else None
            if refused is not None:
                return refused
            result = self._moto_app(environ, start_response)
            try:
                chunks.extend(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        status = int(str(captured[0]).split(None, 1)[0])
        headers = [(k, v) for k, v in captured[1] if k.lower() not in _HOP_BY_HOP]
        return status, headers, b"".join(chunks)


class LocalAWS(EndpointClientMixin):
    """A local S3 + DynamoDB endpoint on moto, served over HTTP from this process.

    Use as a context manager (``with LocalAWS() as aws: ...``) or call :meth:`start`
    and :meth:`stop`. Clients in this process use :meth:`boto3_client` or
    :meth:`storage_options`; child processes get :meth:`env` and connect over HTTP.
    An instance serves once: after :meth:`stop` create a new one.

    Args:
        conditional_writes: when false, S3 write requests lose their ``If-None-Match``
            and ``If-Match`` headers before moto sees them, modelling a store without
            conditional writes. Can also be changed while running.
        condition_items: when false, DynamoDB requests lose
            ``ReturnValuesOnConditionCheckFailure`` before moto sees them, modelling a
            DynamoDB-compatible store whose failed conditions return no old item. Can
            also be changed while running.
        region: the region clients are configured for.
        host: address to bind; keep the default ``127.0.0.1`` unless other machines
            (containers) must connect.
        port: port to bind; ``0`` (default) lets the OS pick a free one.
        account_id: the moto account this instance serves; default a fresh random one,
            which isolates this instance's tables and objects from others.
    """

    def __init__(
        self,
        *,
        conditional_writes: bool = True,
        condition_items: bool = True,
        region: str = DEFAULT_REGION,
        host: str = "127.0.0.1",
        port: int = 0,
        account_id: str | None = None,
    ) -> None:
        self.conditional_writes = conditional_writes
        self.condition_items = condition_items
        self._region = region
        self._host = host
        self._requested_port = port
        self._account_id = account_id or _new_account_id()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._stopped = False
        self._records: list[RequestRecord] = []
        self._faults: list[Fault] = []
        self._state_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> LocalAWS:
        """Bind the port and serve in a daemon thread; returns ``self``.

        Raises:
            ImportError: moto's server or werkzeug is missing (``pip install
                's3ddb[testing]'``).
            OSError: the address cannot be bound (e.g. a fixed ``port`` in use).
            RuntimeError: the instance is running or was stopped.
        """
        if self._server is not None:
            raise RuntimeError("LocalAWS is already running")
        if self._stopped:
            raise RuntimeError("LocalAWS cannot be restarted; create a new instance")
        new_app, server_cls = server_machinery()
        # Every request runs under _MOTO_LOCK, as the cheaper transaction backup needs.
        back_up_touched_items_only()
        if "MOTO_ACCOUNT_ID" in os.environ:
            _log.warning(
                "MOTO_ACCOUNT_ID is set: moto ignores LocalAWS's per-instance account, so "
                "instances in this process share tables and objects"
            )
        sock = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._requested_port))
            sock.listen(128)
            server = server_cls(sock, _Gateway(self, new_app()))
        finally:
            # The server holds its own duplicate of the descriptor.
            sock.close()
        self._server = server
        self._port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"s3ddb-local-aws:{self._port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: close the listening socket and cut open connections.

        This process's background commit work (steps 3-4 of its own commits, batched
        deletes; see :mod:`s3ddb.commit.finalizer`) is finished first, while the
        endpoint still answers. Requests in flight get a closed connection.
        Idempotent. moto state of this instance's account stays in the process until
        :meth:`reset` (or the process ends); call ``reset()`` before ``stop()`` to
        free it.
        """
        if self._server is None:
            return
        from s3ddb.commit import finalizer

        finalizer.drain(timeout=30)
        server, self._server = self._server, None
        if server is None:
            return
        self._stopped = True
        server.shutdown()
        server.server_close()
        server.connections.cut(_STOP_GRACE)
        if self._thread is not None:
            self._thread.join(_STOP_GRACE)
            self._thread = None

    def __enter__(self) -> LocalAWS:
        if self._server is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def is_running(self) -> bool:
        """Whether the server is accepting requests."""
        return self._server is not None

    # -- addressing ------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """``http://<host>:<port>``, the endpoint for every service.

        Raises:
            RuntimeError: the server has not been started.
        """
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (chosen by the OS when ``port=0``).

        Raises:
            RuntimeError: the server has not been started.
        """
        if self._port is None:
            raise RuntimeError("LocalAWS is not started; call start() or use 'with'")
        return self._port

    @property
    def host(self) -> str:
        """The bound address."""
        return self._host

    @property
    def region(self) -> str:
        """The region clients are configured for (default ``us-east-1``)."""
        return self._region

    @property
    def account_id(self) -> str:
        """The moto account this instance's state lives in."""
        return self._account_id

    # -- request log -----------------------------------------------------------------

    def _record(self, record: RequestRecord) -> None:
        with self._state_lock:
            self._records.append(record)

    @property
    def requests(self) -> list[RequestRecord]:
        """A copy of the request log, oldest first."""
        with self._state_lock:
            return list(self._records)

    def clear_requests(self) -> None:
        """Empty the request log."""
        with self._state_lock:
            self._records.clear()

    def count(self, service: str | None = None, operation: str | None = None) -> int:
        """How many logged requests match ``service`` and ``operation`` (``None``: any)."""
        with self._state_lock:
            return sum(
                1
                for r in self._records
                if (service is None or r.service == service)
                and (operation is None or r.operation == operation)
            )

    # -- faults ----------------------------------------------------------------------

    def inject_fault(
        self,
        service: str,
        operation: str,
        kind: FaultKind,
        times: int = 1,
        *,
        after: Fault | None = None,
        path: str = "",
    ) -> Fault:
        """Arm a fault for the next ``times`` requests to ``service``/``operation``.

        Args:
            service: ``"s3"``, ``"dynamodb"``, ... or ``"*"`` for any.
            operation: AWS operation name as in :class:`RequestRecord` (``"PutItem"``,
                ``"PutObject"``, ``"CopyObject"``...) or ``"*"`` for any.
            kind: ``"throttle"`` / ``"provisioned_throughput"`` / ``"server_error"`` /
                ``"expired_token"`` / ``"drop"`` answer (or hang up) without applying
                the request;
                ``"apply_then_server_error"`` / ``"apply_then_drop"`` let moto apply it
                and then answer HTTP 500 / close the connection with no response.
            times: how many matching requests to affect.
            after: another armed fault; this one affects only requests made after
                that one has fired (e.g. lose a PutItem's response, then fail the
                reads that would learn its outcome).
            path: affect only requests whose path contains this text, e.g. one S3
                key (for ``CopyObject``, the destination's); default: any.

        Returns:
            The armed :class:`Fault`; its ``triggered`` counts affected requests.
            Faults are matched in the order they were armed.

        Raises:
            ValueError: unknown ``kind``, ``times < 1``, or ``provisioned_throughput``
                for S3.
        """
        validate_fault(service, kind, times)
        fault = Fault(
            service=service, operation=operation, kind=kind, times=times, after=after, path=path
        )
        with self._state_lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        """Disarm every fault."""
        with self._state_lock:
            self._faults.clear()

    @property
    def faults(self) -> list[Fault]:
        """The faults still armed (a copy)."""
        with self._state_lock:
            return [f for f in self._faults if f.remaining > 0]

    def _claim_fault(self, service: str, operation: str, path: str) -> Fault | None:
        with self._state_lock:
            for fault in self._faults:
                if fault.matches(service, operation, path) and fault.take():
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    # -- state -----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything of this instance: its moto account's buckets, objects and
        tables, the request log and the armed faults. Other instances are untouched.

        Waits for any request in flight (takes the moto lock).

        Raises:
            ImportError: moto is not installed.
        """
        try:
            from moto.core.base_backend import BackendDict, backend_lock
            from moto.s3.models import s3_backends
        except ImportError as exc:
            raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
        account = self._account_id
        with _MOTO_LOCK, backend_lock:
            # S3 first: free the objects' spooled buffers and release the bucket names
            # from moto's global namespace (S3Backend.reset would dispose every
            # account's objects, so do just ours).
            accounts: Any = s3_backends
            if dict.__contains__(accounts, account):
                for backend in dict.values(dict.__getitem__(accounts, account)):
                    for bucket in list(getattr(backend, "buckets", {}).values()):
                        # The raw dict values are the lists of every version of a key.
                        for versions in list(dict.values(bucket.keys)):
                            for key in versions if isinstance(versions, list) else [versions]:
                                dispose = getattr(key, "dispose", None)
                                if dispose is not None:
                                    dispose()
                        for part in list(bucket.multiparts.values()):
                            part.dispose()
                        s3_backends.bucket_accounts.pop(bucket.name, None)
            # Then drop the account from every service; moto recreates it empty on the
            # next request.
            all_backends: Any = BackendDict
            for backend_dict in list(all_backends._instances):
                if dict.__contains__(backend_dict, account):
                    dict.__delitem__(backend_dict, account)
        with self._state_lock:
            self._records.clear()
            self._faults.clear()

    def reset_all(self) -> None:
        """Reset all moto state in this process through moto's reset API (every
        account: all LocalAWS instances and any ``mock_aws``), plus this instance's
        request log and faults.

        Raises:
            ImportError: moto is not installed.
        """
        try:
            from moto.moto_api import _internal
        except ImportError as exc:
            raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
        with _MOTO_LOCK:
            _internal.moto_api_backend.reset()
        with self._state_lock:
            self._records.clear()
            self._faults.clear()

    def __repr__(self) -> str:
        where = self.endpoint_url if self._port is not None else "not started"
        return (
            f"LocalAWS({where}, region={self._region!r}, "
            f"conditional_writes={self.conditional_writes}, running={self.is_running})"
        )


__all__ = ["INSTALL_HINT", "LocalAWS"]
