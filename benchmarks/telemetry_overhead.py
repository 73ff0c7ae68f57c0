"""What OpenTelemetry costs a commit: the sequential append median, paired.

Three variants run in child processes, interleaved round by round so that the
machine's load moves all of them alike:

* ``absent``: ``opentelemetry`` cannot be imported (s3ddb without ``[otel]``);
* ``api``: ``opentelemetry-api`` installed, no SDK configured (its no-op objects);
* ``sdk``: the SDK with an in-memory span exporter and a metric reader.

Each round, each variant appends ``--appends`` one-row batches to its own local dataset
and reports the median append time. The result is the median over rounds of each
variant, and the ratios api/absent and sdk/absent.

Usage: ``python benchmarks/telemetry_overhead.py [--rounds 7] [--appends 200]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import sys, json, time, statistics
variant, uri, appends = sys.argv[1], sys.argv[2], int(sys.argv[3])
if variant == "absent":
    sys.modules["opentelemetry"] = None
elif variant == "sdk":
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
import pyarrow as pa
import s3ddb
from s3ddb.observe import telemetry
assert telemetry.available() == (variant != "absent")
s3ddb.write_dataset(pa.table({"id": [0]}), uri)
times = []
for i in range(appends):
    start = time.perf_counter()
    s3ddb.write_dataset(pa.table({"id": [i]}), uri, mode="append")
    times.append(time.perf_counter() - start)
print(json.dumps(statistics.median(times[appends // 10:])))
"""

VARIANTS = ("absent", "api", "sdk")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--appends", type=int, default=200)
    args = parser.parse_args()
    medians: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                uri = str(Path(tmp) / f"{variant}-{round_}")
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, variant, uri, str(args.appends)],
                    check=True, capture_output=True, text=True,
                )  # fmt: skip
                medians[variant].append(json.loads(out.stdout))
    result = {v: statistics.median(m) * 1000 for v, m in medians.items()}
    print("| variant | sequential append median |")
    print("|---|---:|")
    for variant in VARIANTS:
        print(f"| {variant} | {result[variant]:.2f} ms |")
    print(f"\napi / absent: {result['api'] / result['absent']:.3f}x")
    print(f"sdk / absent: {result['sdk'] / result['absent']:.3f}x")


if __name__ == "__main__":
    main()
