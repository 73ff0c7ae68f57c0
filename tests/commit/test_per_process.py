"""The per-process registry: one object per key and process, none inherited by fork."""

from __future__ import annotations

import os
import select
import signal
import sys
import threading

import pytest

from s3ddb.io.parallel import process_pool
from s3ddb.io.per_process import PerProcess


def test_one_object_per_key_created_once() -> None:
    cache: PerProcess[str, object] = PerProcess("test: once")
    made: list[object] = []

    def create() -> object:
        made.append(object())
        return made[-1]

    threads = [threading.Thread(target=cache.get, args=("k", create)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and cache.get("k", create) is made[0]
    assert cache.peek("other") is None
    cache.forget("k")
    assert cache.peek("k") is None
    assert cache.get("k", create) is made[1]


def test_a_failed_creation_stores_nothing() -> None:
    cache: PerProcess[str, int] = PerProcess("test: failing")

    def fail() -> int:
        raise ValueError("no")

    with pytest.raises(ValueError):
        cache.get("k", fail)
    assert cache.peek("k") is None and cache.get("k", lambda: 3) == 3


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32", reason="no fork")
def test_a_forked_child_starts_empty() -> None:
    cache: PerProcess[str, object] = PerProcess("test: fork")
    parent_object = cache.get("k", object)
    parent_pool = process_pool("test-fork")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's atexit
        try:
            fresh = cache.peek("k") is None and cache.get("k", object) is not parent_object
            pool = process_pool("test-fork")
            works = pool is not parent_pool and pool.submit(lambda: 7).result(10) == 7
            os.write(write, b"ok" if fresh and works else b"no")
        finally:
            os._exit(0)
    os.close(write)
    # A child stuck on a lock a parent thread held at fork would answer never: fail
    # after a minute instead of waiting for the test's timeout.
    ready, _, _ = select.select([read], [], [], 60)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    answer = os.read(read, 2) if ready else b"(no answer in 60 s)"
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"ok"
    assert cache.peek("k") is parent_object and process_pool("test-fork") is parent_pool
