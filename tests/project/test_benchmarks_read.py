"""benchmarks/read_path.py (make bench-read) runs end to end and its systems agree.

The quick mode runs every section (local, endpoint, memory) on small data; the test
reads the raw numbers it wrote and checks them itself: every system returns the same
rows for each query, the full scan all rows, the point lookup exactly one, and the
endpoint's counts are real. Speed is never asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ["full scan", "projection x", "k < 10", "id = X"]


@pytest.mark.slow  # ~15-40 s: three libraries, two sections of data, a local endpoint
def test_quick_read_benchmark_is_consistent(tmp_path: Path) -> None:
    peers = [
        s
        for s, mod in (("lance", "lance"), ("delta", "deltalake"))
        if importlib.util.find_spec(mod)
    ]
    out = tmp_path / "read.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "read_path.py"), "--quick", "--json", str(out)]
    proc = subprocess.run(
        [*cmd, "--systems", ",".join(["s3ddb", *peers])],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "MISMATCH" not in proc.stdout
    res = json.loads(out.read_text())
    assert res["consistent"] is True

    local = res["local"]
    assert set(local["queries"]) == set(QUERIES)
    local_systems = {"s3ddb", "pyarrow", *({"lance"} & set(peers))}
    for query, per in local["queries"].items():
        assert set(per) == local_systems, query
        assert len({r["rows"] for r in per.values()}) == 1, (query, per)
        assert all(r["ms"] > 0 and r["read_mib"] > 0 for r in per.values()), (query, per)
    rows = local["rows"]
    assert local["queries"]["full scan"]["s3ddb"]["rows"] == rows
    assert local["queries"]["projection x"]["s3ddb"]["rows"] == rows
    assert 0 < local["queries"]["k < 10"]["s3ddb"]["rows"] < rows // 20
    assert local["queries"]["id = X"]["s3ddb"]["rows"] == 1
    assert len(local["targets"]) == 3 + ("lance" in peers)

    endpoint = res["endpoint"]
    for query, per in endpoint["queries"].items():
        assert set(per) == {"s3ddb", *peers}, query
        assert len({r["rows"] for r in per.values()}) == 1, (query, per)
        # Every system really read through the endpoint, and it counted what it sent.
        assert all(r["requests"] > 0 and r["get_mib"] > 0 for r in per.values()), (query, per)
        assert all(r["data_files"] >= 1 for r in per.values()), (query, per)
    assert endpoint["queries"]["id = X"]["s3ddb"]["rows"] == 1
    assert endpoint["queries"]["full scan"]["s3ddb"]["rows"] == endpoint["rows"]

    memory = res["memory"]
    assert memory["rows"] * memory["budget_bytes"] > 0
    assert memory["dataset_arrow_bytes"] >= 9 * memory["budget_bytes"]
    assert memory["peak_rss"] > memory["rss_before"] > 0
