"""Independent AWS emulators that run on Node.js, for tests against a second
implementation: dynalite (DynamoDB).

moto is one implementation of DynamoDB; a protocol proved against one emulator may
lean on its quirks. :class:`Dynalite` runs dynalite (the npm package ``dynalite``, on
LevelDB's in-memory backend) as a child process on ``127.0.0.1`` and an OS-chosen port::

    with Dynalite() as ddb:
        ddb.create_table("commits")
        so = {**moto_aws.storage_options(), "dynamodb_endpoint": ddb.endpoint_url}

The package is looked up under ``$S3DDB_NODE_MODULES`` or ``<venv>/node/node_modules``
(``make test`` installs it there from ``tests/node/package.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import IO

from s3ddb.testing._endpoint import DEFAULT_REGION, EndpointClientMixin

#: Listens on 127.0.0.1, port 0 (the dynalite command line cannot: it treats port 0 as
#: "use the default 4567"), with tables ACTIVE at once, and prints the port as JSON.
_LAUNCH_DYNALITE = """
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


class Dynalite(EndpointClientMixin):
    """A dynalite server in a child process; same client helpers as ``LocalAWS``
    (``endpoint_url``, ``env()``, ``storage_options()``, ``boto3_client()``,
    ``create_table()``), for DynamoDB only.

    Raises (on start):
        RuntimeError: node or the package is missing, or the server did not start.
    """

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

    def start(self) -> Dynalite:
        reason = missing("dynalite")
        if reason:
            raise RuntimeError(f"cannot start dynalite: {reason}")
        env = {**os.environ, "NODE_PATH": str(node_modules())}
        # The server's own errors go to a file (a pipe nobody reads could fill up and
        # stall it); :meth:`log` returns them.
        self._log = tempfile.NamedTemporaryFile("w+", prefix="dynalite-", suffix=".log")  # noqa: SIM115 (lives as long as the server)
        proc = subprocess.Popen(
            ["node", "-e", _LAUNCH_DYNALITE],
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
            raise RuntimeError(f"dynalite did not start within {self._start_timeout:g} s: {err}")
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
        proc, self._proc = self._proc, None
        if proc is None:
            return
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

    def __enter__(self) -> Dynalite:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
