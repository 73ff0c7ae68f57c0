"""Independent AWS emulators that run on Node.js, for tests against a second
implementation: dynalite (DynamoDB) and s3rver (S3).

moto is one implementation of DynamoDB; a protocol proved against one emulator may
lean on its quirks. :class:`Dynalite` runs dynalite (the npm package ``dynalite``, on
LevelDB's in-memory backend) as a child process on ``127.0.0.1`` and an OS-chosen port::

    with Dynalite() as ddb:
        ddb.create_table("commits")
        so = {**moto_aws.storage_options(), "dynamodb_endpoint": ddb.endpoint_url}

:class:`S3rver` runs s3rver (npm ``s3rver``) the same way: an S3 that ignores
``If-None-Match`` (a store without conditional writes), accepts only the access keys it
is given, and logs every request with the access key that signed it
(:attr:`S3rver.requests`)::

    with S3rver(access_keys={"s3-key": "s3-secret"}, buckets=["data"]) as s3:
        so = {"s3_endpoint": s3.endpoint_url, "s3_access_key_id": "s3-key", ...}

The packages are looked up under ``$S3DDB_NODE_MODULES`` or ``<venv>/node/node_modules``
(``make test`` installs it there from ``tests/node/package.json``). Test-only: this
module is part of the test suite, not of the package.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, TypeVar
from urllib.parse import parse_qs

from s3ddb.testing._endpoint import (
    DEFAULT_REGION,
    TEST_ACCESS_KEY_ID,
    TEST_SECRET_ACCESS_KEY,
    EndpointClientMixin,
)
from s3ddb.testing._requests import RequestRecord, s3_operation

__all__ = ["Dynalite", "S3rver", "missing", "node_modules"]

#: Listens on 127.0.0.1, port 0 (the dynalite command line cannot: it treats port 0 as
#: "use the default 4567"), with tables ACTIVE at once, and prints the port as JSON.
_LAUNCH_DYNALITE = """
// dynalite rethrows a request stream's error (its index.js: req.on('error', ...
// throw err)), so a client that dies mid-request - the torture tests SIGKILL
// writers - would take the whole server down. Such a request is simply gone.
process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    process.stderr.write('a client aborted its request: ' + err.message + '\\n');
    return;
  }
  process.stderr.write((err && err.stack || String(err)) + '\\n');
  process.exit(1);
});
const dynalite = require('dynalite');
const server = dynalite({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({port: server.address().port}) + '\\n');
});
"""


def node_modules() -> Path:
    """Where the Node.js test servers are installed."""
    configured = os.environ.get("S3DDB_NODE_MODULES")
    if configured:
        return Path(configured)
    return Path(sys.prefix) / "node" / "node_modules"


def missing(package: str) -> str | None:
    """Why ``package`` cannot run here (a sentence), or None if it can."""
    if shutil.which("node") is None:
        return "Node.js (`node`) is not on PATH"
    if not (node_modules() / package / "package.json").is_file():
        return (
            f"the npm package {package!r} is not installed under {node_modules()} "
            "(`make test` installs it; or set S3DDB_NODE_MODULES)"
        )
    return None


_Server = TypeVar("_Server", bound="_NodeServer")


@functools.lru_cache(maxsize=1)
def _node_major() -> int:
    """The major version of ``node`` (0 if it cannot be told)."""
    try:
        text = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30)
        return int(text.stdout.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


class _NodeServer(EndpointClientMixin):
    """A Node.js server in a child process that prints ``{"port": N}`` once listening;
    its stderr goes to a file (a pipe nobody reads could fill up and stall it)."""

    package = ""
    node_flags: tuple[str, ...] = ()

    def __init__(self, region: str = DEFAULT_REGION, start_timeout: float = 30.0) -> None:
        self._region = region
        self._start_timeout = start_timeout
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None
        self._endpoint_url = ""

    @property
    def endpoint_url(self) -> str:
        return self._endpoint_url

    @property
    def region(self) -> str:
        return self._region

    def _script(self) -> tuple[str, list[str]]:  # pragma: no cover - overridden
        raise NotImplementedError

    def start(self: _Server) -> _Server:
        """Start the server; returns ``self``.

        Raises:
            RuntimeError: node or the package is missing, or the server did not start.
        """
        reason = missing(self.package)
        if reason:
            raise RuntimeError(f"cannot start {self.package}: {reason}")
        env = {**os.environ, "NODE_PATH": str(node_modules())}
        self._log = tempfile.NamedTemporaryFile("w+", prefix=f"{self.package}-", suffix=".log")  # noqa: SIM115 (lives as long as the server)
        script, args = self._script()
        proc = subprocess.Popen(
            ["node", *(self.node_flags if _node_major() >= 17 else ()), "-e", script, *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        self._proc = proc
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(self._start_timeout)
        if not line or not line[0].strip():
            err = self.log()
            self.stop()
            raise RuntimeError(
                f"{self.package} did not start within {self._start_timeout:g} s: {err}"
            )
        port = json.loads(line[0])["port"]
        self._endpoint_url = f"http://127.0.0.1:{port}"
        return self

    def log(self) -> str:
        """What the server wrote to stderr so far (e.g. why it stopped)."""
        if self._log is None:
            return ""
        with open(self._log.name) as f:
            return f.read()

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Stop the server, after this process's background commit work (steps 3-4,
        batched deletes; :mod:`s3ddb.commit.finalizer`) has finished while it answers.
        Idempotent."""
        if self._proc is None:
            return
        from s3ddb.commit import finalizer

        finalizer.drain(timeout=30)
        proc, self._proc = self._proc, None
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self: _Server) -> _Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class Dynalite(_NodeServer):
    """A dynalite server in a child process; same client helpers as ``LocalAWS``
    (``endpoint_url``, ``env()``, ``storage_options()``, ``boto3_client()``,
    ``create_table()``), for DynamoDB only.

    Raises (on start):
        RuntimeError: node or the package is missing, or the server did not start.
    """

    package = "dynalite"

    def _script(self) -> tuple[str, list[str]]:
        return _LAUNCH_DYNALITE, []


#: s3rver on 127.0.0.1 and port 0 (``run()`` resolves to the bound address, which
#: carries the OS-chosen port), with extra access keys, buckets created before it
#: listens, and a JSON-lines request log written by a middleware put first in Koa's
#: chain (so it sees every request, failed ones included). Arguments: directory, log
#: path, {key id: secret}, [bucket names].
_LAUNCH_S3RVER = """
const fs = require('fs');
const S3rver = require('s3rver');
const AWSAccount = require('s3rver/lib/models/account');
const [directory, logPath, keysJson, bucketsJson] = process.argv.slice(1);
for (const [id, secret] of Object.entries(JSON.parse(keysJson))) {
  AWSAccount.DUMMY_ACCOUNT.createKeyPair(id, secret);
}
const server = new S3rver({
  address: '127.0.0.1', port: 0, silent: true, directory,
  configureBuckets: JSON.parse(bucketsJson).map(name => ({name})),
});
const log = fs.openSync(logPath, 'a');
const scope = /Credential=([^/,\\s]+)\\/\\d{8}\\/([^/]+)\\/([^/]+)\\/aws4_request/;
server.middleware.unshift(async (ctx, next) => {
  const m = scope.exec(ctx.get('authorization') || '');
  let status = 0;
  try {
    await next();
    status = ctx.status;
  } catch (err) {
    status = err.status || 500;
    throw err;
  } finally {
    fs.writeSync(log, JSON.stringify({
      method: ctx.method, path: decodeURIComponent(ctx.path), query: ctx.querystring,
      copy: !!ctx.get('x-amz-copy-source'), status,
      access_key_id: m ? m[1] : null, region: m ? m[2] : null, service: m ? m[3] : 's3',
    }) + '\\n');
  }
});
server.run().then(address => {
  process.stdout.write(JSON.stringify({port: address.port}) + '\\n');
});
"""


class S3rver(_NodeServer):
    """An s3rver server in a child process: S3 only, path-style, objects in a
    temporary directory, no conditional writes (``If-None-Match`` on PUT is ignored).

    Same client helpers as ``LocalAWS`` (``endpoint_url``, ``env()``,
    ``storage_options()``, ``boto3_client()``, ``create_bucket()``), plus the request
    log (:attr:`requests`, :meth:`count`, :meth:`clear_requests`) with the access key
    of each request.

    Args:
        access_keys: key id -> secret accepted besides the ``"testing"`` dummy pair
            (s3rver refuses other key ids with ``InvalidAccessKeyId``; it does not check
            SigV4 signatures themselves).
        buckets: buckets created before the server listens.
        region: the region clients are configured for (s3rver ignores it).

    Raises (on start):
        RuntimeError: node or the package is missing, or the server did not start.
    """

    package = "s3rver"
    # s3rver encrypts ListObjectsV2 continuation tokens with DES, which OpenSSL 3 (Node
    # 17+) only offers through its legacy provider: without it every truncated listing
    # (more than MaxKeys objects) is a 500.
    node_flags = ("--openssl-legacy-provider",)

    def __init__(
        self,
        *,
        access_keys: dict[str, str] | None = None,
        buckets: list[str] | None = None,
        region: str = DEFAULT_REGION,
        start_timeout: float = 30.0,
    ) -> None:
        super().__init__(region, start_timeout)
        self._keys = {TEST_ACCESS_KEY_ID: TEST_SECRET_ACCESS_KEY, **(access_keys or {})}
        self._buckets = list(buckets or [])
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._log_offset = 0

    def _script(self) -> tuple[str, list[str]]:
        self._dir = tempfile.TemporaryDirectory(prefix="s3rver-")
        data = os.path.join(self._dir.name, "data")
        return _LAUNCH_S3RVER, [
            data,
            self._request_log_path,
            json.dumps(self._keys),
            json.dumps(self._buckets),
        ]

    @property
    def _request_log_path(self) -> str:
        assert self._dir is not None
        return os.path.join(self._dir.name, "requests.jsonl")

    def stop(self) -> None:
        super().stop()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request served since start (or :meth:`clear_requests`), in order,
        named as AWS names them, with the access key id and region that signed it."""
        if self._dir is None:
            return []
        with open(self._request_log_path) as f:
            f.seek(self._log_offset)
            lines = f.read().splitlines()
        records = []
        for line in lines:
            entry = json.loads(line)
            query = parse_qs(entry["query"], keep_blank_values=True)
            records.append(
                RequestRecord(
                    service=entry["service"],
                    operation=s3_operation(entry["method"], entry["path"], query, entry["copy"]),
                    method=entry["method"],
                    path=entry["path"],
                    status=int(entry["status"]),
                    access_key_id=entry["access_key_id"],
                    region=entry["region"],
                )
            )
        return records

    def clear_requests(self) -> None:
        """Forget the requests logged so far."""
        if self._dir is not None:
            self._log_offset = os.path.getsize(self._request_log_path)

    def count(self, service: str | None = None, operation: str | None = None) -> int:
        """How many logged requests match ``service`` and ``operation`` (None: any)."""
        return sum(
            1
            for r in self.requests
            if (service is None or r.service == service)
            and (operation is None or r.operation == operation)
        )
