"""Concurrent writer processes on one local dataset."""

from __future__ import annotations

from collections import Counter

import pytest

import s3ddb
from tests.support.proc import run_workers
from tests.support.workers import rows_for

pytestmark = pytest.mark.slow


def test_8_processes_append_5_times_each(local_uri: str) -> None:
    s3ddb.write_dataset(rows_for(999, 0, 1), local_uri)  # version 1
    results = run_workers([("append", local_uri, str(w), "5", "3") for w in range(8)])
    for r in results:
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.count("ok ") == 5, r.stdout
    ds = s3ddb.dataset(local_uri)
    assert ds.version == 41
    assert [v.version for v in ds.versions()] == list(range(1, 42))
    committed = sorted(int(line.split()[3]) for r in results for line in r.stdout.splitlines())
    assert committed == list(range(2, 42)), "each acknowledged append owns one distinct version"
    ids = ds.to_table(columns=["id"]).column("id").to_pylist()
    counts = Counter(ids)
    assert all(c == 1 for c in counts.values()), "a row appears twice"
    expected = {999_000_000} | {
        w * 1_000_000 + i * 1000 + k for w in range(8) for i in range(5) for k in range(3)
    }
    assert set(counts) == expected
