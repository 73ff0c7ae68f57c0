"""A local AWS endpoint in its own process (``python -m s3ddb.testing``).

For when an in-process :class:`~s3ddb.testing.LocalAWS` will not do: complete isolation
of moto state (nothing shared with the test process, bucket names included), a server
that outlives or is independent of the test's own threads, or a test that kills the
server. The request log and fault injection exist only in-process; use ``LocalAWS``
for those (child processes can still connect to it over HTTP with ``env()``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import IO

from s3ddb.testing._endpoint import DEFAULT_REGION, EndpointClientMixin

_URL_LINE = re.compile(r"^(http://\S+:\d+)\s*$")


class LocalAWSProcess(EndpointClientMixin):
    """Handle on a local AWS server running in a child process.

    Created by :func:`serve_in_subprocess`. Same client helpers as ``LocalAWS``
    (``endpoint_url``, ``region``, ``env()``, ``storage_options()``,
    ``boto3_client()``, ``create_bucket()``, ``create_table()``); :meth:`stop` ends the
    child (SIGTERM, then SIGKILL).
    """

    def __init__(
        self,
        proc: subprocess.Popen[str],
        endpoint_url: str,
        region: str,
        stderr_file: IO[str],
        reader: threading.Thread,
    ) -> None:
        self._proc = proc
        self._reader = reader
        self._endpoint_url = endpoint_url
        self._region = region
        self._stderr_file = stderr_file

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the child's server."""
        return self._endpoint_url

    @property
    def region(self) -> str:
        """The region clients are configured for."""
        return self._region

    @property
    def pid(self) -> int:
        """Process id of the server."""
        return self._proc.pid

    @property
    def is_running(self) -> bool:
        """Whether the child is alive."""
        return self._proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the child (SIGTERM; SIGKILL after ``timeout`` s). Idempotent."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        # The child is gone, so its stdout hits EOF and the reader thread ends; join it
        # before closing the pipe under it.
        self._reader.join(timeout)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr_file.close()

    def __enter__(self) -> LocalAWSProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve_in_subprocess(
    *,
    conditional_writes: bool = True,
    region: str = DEFAULT_REGION,
    buckets: Iterable[str] = (),
    tables: Iterable[str] = (),
    startup_timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
) -> LocalAWSProcess:
    """Start ``python -m s3ddb.testing`` on ``127.0.0.1`` and an OS-chosen port.

    Args:
        conditional_writes: as for :class:`~s3ddb.testing.LocalAWS`.
        region: region of the buckets and tables, and of the client helpers.
        buckets: S3 buckets to create before the endpoint is announced.
        tables: DynamoDB tables to create, with the s3ddb commit-table key schema.
        startup_timeout: seconds to wait for the server to announce its endpoint.
        env: extra environment of the server process (e.g. moto's
            ``INITIAL_NO_AUTH_ACTION_COUNT``, which turns on IAM enforcement after that
            many requests).

    Returns:
        A running :class:`LocalAWSProcess` (a context manager that stops it).

    Raises:
        RuntimeError: the child exited or did not announce an endpoint in time; the
            message carries its stderr.
    """
    cmd = [sys.executable, "-m", "s3ddb.testing", "--port", "0", "--region", region]
    # Explicit flags: the command's defaults (no conditional writes, the docs' bucket and
    # table) serve people running the docs' examples, not this function's contract.
    cmd += ["--conditional-writes" if conditional_writes else "--no-conditional-writes"]
    cmd.append("--empty")
    for bucket in buckets:
        cmd += ["--bucket", bucket]
    for table in tables:
        cmd += ["--table", table]
    # stderr to a file, not a pipe: nobody drains it while the server runs, and a full
    # pipe would block the server. The returned handle owns (and closes) the file.
    stderr_file = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=stderr_file, text=True, env=child_env
    )
    assert proc.stdout is not None
    found: list[str] = []

    def read_first_line() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = _URL_LINE.match(line)
            if match and not found:
                found.append(match.group(1))
            # Keep draining: the child must never block on a full stdout pipe.

    reader = threading.Thread(target=read_first_line, name="s3ddb-local-aws-stdout", daemon=True)
    reader.start()
    deadline = time.monotonic() + startup_timeout
    while not found and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if not found:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        stderr_file.seek(0)
        detail = stderr_file.read()[-4000:]
        stderr_file.close()
        raise RuntimeError(
            f"local AWS server did not start (exit status {proc.returncode}): {detail}"
        )
    return LocalAWSProcess(proc, found[0], region, stderr_file, reader)


__all__ = ["LocalAWSProcess", "serve_in_subprocess"]
