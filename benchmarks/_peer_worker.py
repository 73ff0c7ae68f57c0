"""The systems under test, and the child process that drives one of them for peers.py.

Each system (s3ddb, pylance, deltalake) is reached only through a :class:`System` of
:data:`SYSTEMS`, which calls the library's top-level functions as a user would, so the
parent's in-process measurements and the children's run the same code.

As a script (``python benchmarks/_peer_worker.py ROLE SPEC_JSON``) it is a child that
talks to the parent's local endpoint over HTTP; SPEC_JSON holds ``system`` and
``options`` (the library's storage options), for writers also ``uri``, ``appends`` and
``first_id``. Roles:

``writer``  imports the library, builds its tables and opens the dataset once (so that
    clients exist and the table was checked: a long-running writer's state; the first
    commit of a cold process is not what contention measures), lets the garbage
    collector make the full pass the imports left it, prints a ready line,
    blocks until the parent writes a line to stdin (the common start moment), then
    appends back to back, printing one JSON line per commit: wall-clock start and end
    (``time.time()``, comparable across processes), latency (``perf_counter``), success
    or the exception's type and message, s3ddb's attempts; then finishes its background
    work and prints when that was done.
``probe``   imports the library, prints a ready line, then answers commands from stdin,
    ``{"op": "open" | "versions" | "rows", "uri": ...}``, one JSON line each
    (``{"seconds": ..., "value": ...}`` or ``{"error": ...}``). Dataset state cached in
    the process is dropped before each command (clients stay warm). peers.py opens and
    lists versions here, not in its own process, because deltalake 1.6.0's
    ``DeltaTable.history()`` holds the GIL during its I/O, starving the parent's
    in-process endpoint: the call times out after three minutes of retries.
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
import time
from typing import Any

import pyarrow as pa

Options = dict[str, str]


def make_table(first_id: int) -> pa.Table:
    """Three rows with ids ``first_id .. first_id + 2``; the same schema for every system."""
    ids = pa.array(range(first_id, first_id + 3), pa.int64())
    return pa.table({"id": ids, "kind": pa.array(["a", "b", "c"])})


class System:
    """How the benchmark drives one library (its first module is the library)."""

    label = ""
    modules: tuple[str, ...] = ()  # imported before a child's start moment

    @property
    def lib(self) -> Any:
        return importlib.import_module(self.modules[0])

    def import_modules(self) -> None:
        for module in self.modules:
            importlib.import_module(module)

    def append(self, uri: str, options: Options, table: pa.Table) -> int | None:
        """Append ``table``; return the commit's attempts where the library tells them."""
        raise NotImplementedError

    def open(self, uri: str, options: Options) -> int:
        """Open the latest version; return its number."""
        raise NotImplementedError

    def versions(self, uri: str, options: Options) -> int:
        """List the history; return its length."""
        raise NotImplementedError

    def ids(self, uri: str, options: Options) -> pa.ChunkedArray:
        """The id column of the latest version."""
        raise NotImplementedError

    def settle(self, flush: bool = True) -> None:
        """Finish work this process left running after a commit returned (peers: none);
        ``flush=False`` leaves batched deletes batched."""

    def forget(self) -> None:
        """Drop dataset state this process cached (peers: none across top-level calls)."""


class S3ddb(System):
    label = "s3ddb"
    # s3ddb imports boto3 and s3fs on first use: ~0.5 s that would land in a child's
    # first commit. Importing them first keeps process start-up out of the timings.
    modules = ("s3ddb", "boto3", "botocore.config", "s3fs", "s3transfer", "multiprocessing.util")

    def append(self, uri: str, options: Options, table: pa.Table) -> int | None:
        ds = self.lib.write_dataset(table, uri, mode="append", storage_options=options)
        return ds.last_commit.attempts if ds.last_commit is not None else None

    def open(self, uri: str, options: Options) -> int:
        return int(self.lib.dataset(uri, storage_options=options).version)

    def versions(self, uri: str, options: Options) -> int:
        return len(self.lib.dataset(uri, storage_options=options).versions())

    def ids(self, uri: str, options: Options) -> pa.ChunkedArray:
        return self.lib.dataset(uri, storage_options=options).to_table(columns=["id"])["id"]

    def settle(self, flush: bool = True) -> None:
        # A commit returns once decided (its DynamoDB row written); copying the staged
        # manifest to its final name, repointing the row and batched deletes run on a
        # per-process thread. Guarded: the module is internal.
        try:
            from s3ddb.commit.finalizer import drain
        except ImportError:
            return
        drain(flush=flush)

    def forget(self) -> None:
        # The per-process manifest cache: an open would not read the manifest otherwise.
        try:
            from s3ddb.commit.manifest_cache import MANIFESTS
        except ImportError:
            return
        MANIFESTS.clear()


class Lance(System):
    label = "pylance"
    modules = ("lance",)

    def append(self, uri: str, options: Options, table: pa.Table) -> int | None:
        self.lib.write_dataset(table, uri, mode="append", storage_options=options)
        return None

    def open(self, uri: str, options: Options) -> int:
        return int(self.lib.dataset(uri, storage_options=options).version)

    def versions(self, uri: str, options: Options) -> int:
        return len(self.lib.dataset(uri, storage_options=options).versions())

    def ids(self, uri: str, options: Options) -> pa.ChunkedArray:
        return self.lib.dataset(uri, storage_options=options).to_table(columns=["id"])["id"]


class Delta(System):
    label = "deltalake"
    modules = ("deltalake",)

    def append(self, uri: str, options: Options, table: pa.Table) -> int | None:
        self.lib.write_deltalake(uri, table, mode="append", storage_options=options)
        return None

    def open(self, uri: str, options: Options) -> int:
        return int(self.lib.DeltaTable(uri, storage_options=options).version())

    def versions(self, uri: str, options: Options) -> int:
        return len(self.lib.DeltaTable(uri, storage_options=options).history())

    def ids(self, uri: str, options: Options) -> pa.ChunkedArray:
        table = self.lib.DeltaTable(uri, storage_options=options)
        return table.to_pyarrow_table(columns=["id"])["id"]


SYSTEMS: dict[str, System] = {"s3ddb": S3ddb(), "lance": Lance(), "delta": Delta()}


def _error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _writer(system: System, spec: dict[str, Any]) -> None:
    tables = [make_table(spec["first_id"] + 3 * i) for i in range(spec["appends"])]
    system.open(spec["uri"], spec["options"])
    system.forget()
    # Imports leave the cyclic garbage collector a first full pass over every object
    # they created (about 70 ms for s3ddb's, with boto3's models): a long-running
    # writer has made it long ago, a fresh one would make it inside its first commit.
    gc.collect()
    _emit({"ready": True})
    if not sys.stdin.readline():  # the start moment; EOF: the parent gave up
        return
    for seq, table in enumerate(tables):
        started, t0 = time.time(), time.perf_counter()
        record: dict[str, Any] = {"seq": seq, "ok": True, "attempts": None, "error": None}
        try:
            record["attempts"] = system.append(spec["uri"], spec["options"], table)
        except Exception as exc:
            record.update(ok=False, error=_error(exc))
        record.update(latency=time.perf_counter() - t0, start=started, end=time.time())
        _emit(record)
    system.settle()
    _emit({"settled": time.time()})


def _probe(system: System, spec: dict[str, Any]) -> None:
    _emit({"ready": True})
    for line in sys.stdin:
        command = json.loads(line)
        system.forget()
        t0 = time.perf_counter()
        try:
            if command["op"] == "rows":
                ids = system.ids(command["uri"], spec["options"])
                value: Any = [len(ids), len(ids.unique())]
            else:
                value = getattr(system, command["op"])(command["uri"], spec["options"])
        except Exception as exc:
            _emit({"error": _error(exc)})
            continue
        _emit({"seconds": time.perf_counter() - t0, "value": value})


def main(argv: list[str]) -> int:
    role, spec = argv[1], json.loads(argv[2])
    system = SYSTEMS[spec["system"]]
    system.import_modules()
    {"writer": _writer, "probe": _probe}[role](system, spec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
