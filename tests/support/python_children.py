"""Python child processes forked from a pre-imported interpreter (a fork server).

The concurrency, crash and torture tests start hundreds of ``python -m MODULE`` and
``python -c CODE`` children; a fresh interpreter spends over a second of CPU importing
pyarrow (which brings pandas), boto3 and s3ddb before it runs a line of the test's code.
:func:`start_python` gives the same child without that cost: a fork server, started once
per test process, has imported those modules and nothing else (it has run nothing of the
package, opened no connection and started no Python thread; the native threads those
imports start, OpenBLAS's and jemalloc's, are left to those libraries' fork handlers, as in
any forked child of a Python program), and forks one child per request.
The child then becomes what ``python ARGS`` would be:

- its stdin is ``/dev/null``, its stdout and stderr are pipes to the test (as
  ``subprocess.PIPE``), its working directory and whole environment are the caller's;
- it runs the module (``runpy``, as ``-m``) or the code (as ``-c``) as ``__main__`` with
  the ``sys.argv`` the interpreter would set, then what an interpreter runs at exit
  (threading's exit hooks, where s3ddb drains its background finalizer, and atexit's
  handlers), and exits with the status the interpreter would have (``sys.exit``'s code;
  1 and the traceback on stderr for an uncaught exception); ``os._exit`` (failpoints)
  and signals (SIGKILL) end it as they end any process;
- ``random`` is reseeded in every forked child (the module does so at fork), so
  retry jitter differs between children as between fresh interpreters.

The test drives it through :class:`PythonChild`, which has the parts of
``subprocess.Popen`` (text mode, both pipes) the tests use: ``pid``, ``returncode``,
``poll``, ``wait``, ``communicate``, ``send_signal``, ``kill`` and ``terminate``.
``S3DDB_TEST_FRESH_PYTHON=1`` starts real ``python`` processes instead (to check that a
test shows the same either way).

    python -m tests.support.python_children SOCKET   (the server; started by this module)
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
FRESH_ENV = "S3DDB_TEST_FRESH_PYTHON"

#: What every child gets already imported: the package and what its import brings, the
#: CLI, and the readers the tests' children use. Nothing that starts threads at import
#: (polars) or connects (duckdb).
PRELOAD = ("numpy", "pyarrow", "pyarrow.dataset", "pyarrow.parquet", "boto3", "s3ddb",
           "s3ddb.cli.main")  # fmt: skip

_HEADER = struct.Struct("!Q")  # the length of the JSON request that follows


# --- the test's side ---------------------------------------------------------------------


class PythonChild:
    """A child started by :func:`start_python`: the parts of ``subprocess.Popen`` (text
    mode, stdout and stderr piped) the tests use."""

    def __init__(
        self, args: list[str], pid: int, status: socket.socket, out: int, err: int, text: bool
    ):
        self.args = args
        self.text = text
        self.pid = pid
        self.returncode: int | None = None
        self._status = status  # the server writes the wait status here when the child ends
        self._pipes = {out: bytearray(), err: bytearray()}
        self._open = [out, err]
        self._streams: dict[int, IO[Any]] = {}

    def poll(self) -> int | None:
        """The exit status if the child has ended (as ``Popen.returncode``), else None."""
        if self.returncode is None:
            self._read_status(timeout=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to end; its exit status.

        Raises:
            subprocess.TimeoutExpired: it still runs after ``timeout`` seconds.
        """
        if self.returncode is None and not self._read_status(timeout=timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr to their end and wait for the child (as
        ``Popen.communicate``, text or bytes as started; a later call after a timeout
        goes on where it stopped).

        Raises:
            subprocess.TimeoutExpired: the pipes are still open, or the child still
                runs, after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for fd in self._open:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in selector.select(left):
                    fd = int(key.fd)
                    data = os.read(fd, 65536)
                    if data:
                        self._pipes[fd] += data
                    else:
                        selector.unregister(fd)
                        os.close(fd)
                        self._open.remove(fd)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out, err = (bytes(buf) for buf in self._pipes.values())
        if not self.text:
            return out, err
        return tuple(data.decode("utf-8", "replace").replace("\r\n", "\n") for data in (out, err))

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the child unless it has already ended."""
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it ended meanwhile (the server has not reaped it)
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def _read_status(self, timeout: float | None) -> bool:
        """Whether the child's wait status came within ``timeout`` seconds (0: at
        once, None: however long)."""
        self._status.settimeout(timeout)
        try:
            line = _read_line(self._status)
        except (BlockingIOError, TimeoutError):
            return False
        self.returncode = os.waitstatus_to_exitcode(int(line.split()[1]))
        self._status.close()
        return True

    @property
    def stdout(self) -> IO[Any]:
        """The child's stdout as a file (text or bytes as started), to read as it writes;
        :meth:`communicate` reads the pipe itself, so use one or the other."""
        return self._stream(0)

    @property
    def stderr(self) -> IO[Any]:
        """The child's stderr as a file (see :attr:`stdout`)."""
        return self._stream(1)

    def _stream(self, which: int) -> IO[Any]:
        fd = list(self._pipes)[which]
        if fd not in self._streams:
            mode = "r" if self.text else "rb"
            self._streams[fd] = open(fd, mode, closefd=False)  # noqa: SIM115 (closed with the pipe)
        return self._streams[fd]

    def __del__(self) -> None:
        for fd in self._open:
            try:
                os.close(fd)
            except OSError:
                pass
        self._open = []


class _FreshChild(PythonChild):
    """A real ``python`` process (``S3DDB_TEST_FRESH_PYTHON=1``)."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: str, text: bool):
        self._popen = subprocess.Popen(
            [sys.executable, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text,
        )  # fmt: skip
        self.args = args
        self.text = text
        self.pid = self._popen.pid
        self._open = []

    @property  # type: ignore[override]
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._popen.wait(timeout)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        return self._popen.communicate(timeout=timeout)

    def send_signal(self, sig: int) -> None:
        self._popen.send_signal(sig)

    @property
    def stdout(self) -> IO[Any]:
        assert self._popen.stdout is not None
        return self._popen.stdout

    @property
    def stderr(self) -> IO[Any]:
        assert self._popen.stderr is not None
        return self._popen.stderr


def _read_line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("the fork server closed the connection")
        data += chunk
    return data.decode()


_server_lock = threading.Lock()
#: (the pid of the process it serves, its socket, the server process)
_server: tuple[int, str, subprocess.Popen[bytes]] | None = None


def _server_socket() -> str:
    """The socket of this process's fork server, started on first use (a forked
    pytest worker starts its own)."""
    global _server
    with _server_lock:
        if _server is not None and _server[0] == os.getpid() and _server[2].poll() is None:
            return _server[1]
        path = os.path.join(tempfile.mkdtemp(prefix="s3ddb-forks-"), "socket")
        env = {k: v for k, v in os.environ.items() if k != FRESH_ENV}
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        # Its stdin is a pipe nobody writes: it reads EOF, and exits, when this process ends.
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.support.python_children", path],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert server.stdout is not None
        ready = server.stdout.readline()
        if ready != b"ready\n":
            raise RuntimeError(f"the fork server did not start (it said {ready!r})")
        _server = (os.getpid(), path, server)
        atexit.register(_stop_server, server, path)
        return path


def _stop_server(server: subprocess.Popen[bytes], path: str) -> None:
    """End the fork server and wait for it (so that its CPU time, and its children's,
    count in this process's)."""
    assert server.stdin is not None
    server.stdin.close()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def start_python(
    args: list[str],
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    text: bool = True,
) -> PythonChild:
    """``python *args`` (``["-m", MODULE, ...]`` or ``["-c", CODE, ...]``) as a child of
    the fork server, with ``env`` as its whole environment (default: this process's) and
    ``cwd`` as its working directory (default: the repository); its output is read as
    text (UTF-8) or, ``text=False``, as bytes.

    Raises:
        ValueError: ``args`` is neither ``-m`` nor ``-c`` form.
    """
    if len(args) < 2 or args[0] not in ("-m", "-c"):
        raise ValueError(f"start_python runs '-m MODULE ...' or '-c CODE ...', not {args[:1]}")
    env = dict(os.environ if env is None else env)
    directory = str(ROOT if cwd is None else cwd)
    if os.environ.get(FRESH_ENV) == "1":
        return _FreshChild(list(args), env, directory, text)
    request = json.dumps({"args": list(args), "env": env, "cwd": directory}).encode()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_server_socket())
        with open(os.devnull, "rb") as null:
            stdio = [null.fileno(), out_write, err_write]
            socket.send_fds(conn, [_HEADER.pack(len(request))], stdio)
        conn.sendall(request)
        pid = int(_read_line(conn).split()[1])
    except BaseException:
        conn.close()
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    return PythonChild(list(args), pid, conn, out_read, err_read, text)


def run_python(
    args: list[str],
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([python, *args], capture_output=True, text=text)`` through
    :func:`start_python`; a child still running after ``timeout`` is killed.

    Raises:
        subprocess.TimeoutExpired: the child ran longer than ``timeout`` seconds.
    """
    child = start_python(args, env=env, cwd=cwd, text=text)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise
    return subprocess.CompletedProcess(args, child.wait(), out, err)


# --- the server --------------------------------------------------------------------------


def _recv_exact(conn: socket.socket, size: int, start: bytes = b"") -> bytes:
    data = bytearray(start)
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the request ended early")
        data += chunk
    return bytes(data)


def _become_child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take the request's stdio, directory and environment, run its
    ``-m``/``-c`` as the interpreter would, and leave as it leaves. Never returns."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    status = 0
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        mode, what, *rest = request["args"]
        if mode == "-m":
            import runpy

            sys.path[0] = os.getcwd()
            sys.argv = [what, *rest]  # runpy sets argv[0] to the module's file
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = ""
            sys.argv = ["-c", *rest]
            exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:  # as the interpreter reports it
        status = _exit_status(exc)
    except BaseException as exc:
        import traceback

        # As the interpreter prints it: from the code's frames (not this function's).
        frames = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        traceback.print_exception(type(exc), exc, frames)
        status = 1
    # What the interpreter runs at exit, in its order, whatever ended the code: threading's
    # exit hooks (s3ddb drains its background finalizer there) and the joins of
    # non-daemon threads, then atexit's handlers.
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)


def _exit_status(exc: SystemExit) -> int:
    """The exit status the interpreter gives ``sys.exit(code)`` (a message is printed)."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def serve(path: str) -> int:
    """Fork one child per request on the socket at ``path`` and report its pid and,
    when it ends, its wait status on the request's connection; return when stdin ends."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    while True:
        for key, _ in selector.select():
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 1024):
                    return 0
            elif key.data == "accept":
                conn, _addr = listener.accept()
                fds = []
                try:
                    header, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
                    header = _recv_exact(conn, _HEADER.size, header)
                    request = json.loads(_recv_exact(conn, _HEADER.unpack(header)[0]))
                    if len(fds) != 3:
                        raise ValueError(f"a request came with {len(fds)} descriptors, not 3")
                except (OSError, ValueError) as exc:  # that test's start fails, not the server
                    print(f"fork server: bad request: {exc}", file=sys.stderr)
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other_pidfd, (_pid, other) in waiting.items():
                        os.close(other_pidfd)
                        other.close()
                    conn.close()
                    _become_child(request, fds)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"pid {pid}\n".encode())
                pidfd = os.pidfd_open(pid)
                waiting[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ, "child")
            else:
                pidfd = int(key.fd)
                pid, conn = waiting.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _pid, status = os.waitpid(pid, 0)
                try:
                    conn.sendall(f"exit {status}\n".encode())
                except OSError:  # the test no longer listens
                    pass
                conn.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
