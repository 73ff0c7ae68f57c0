"""benchmarks/changes.py (make bench-changes) runs end to end on small data, and each
feed it times equals the reference diff of the two versions. Speed is never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_change_feed_benchmark_runs_and_each_feed_equals_the_diff(tmp_path: Path) -> None:
    out = tmp_path / "changes.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "changes.py"), "--rows", "30000",
         "--fragments", "3", "--k", "1,50", "--runs", "1", "--json", str(out)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["consistent"] is True
    assert [(r["k"], r["feed_rows"]) for r in data["results"]] == [(1, 2), (50, 100)]
    # Only what changed is read: one row's feed reads less than the full scan does.
    one = data["results"][0]
    assert 0 < one["feed_mib"] < one["scan_mib"], one
