"""Every version records its commit's metrics; commits log and trace themselves."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import StoredMetadataError
from s3ddb.format.version_metrics import parse_metrics
from tests.support.python_children import run_python

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "format1_dataset"


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids]})


def _metrics(uri: str) -> dict[str, Any]:
    return s3ddb.dataset(uri).versions()[-1].metrics


def test_every_operation_records_what_it_changed(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 10), uri)
    first = _metrics(uri)
    assert first["attempts"] == 1 and first["rebased_over"] == []
    assert (first["num_added_rows"], first["num_deleted_rows"]) == (10, 0)
    assert first["num_added_files"] == 1 and first["bytes_added"] > 0
    assert first["duration_ms"] >= 0 and "prepare" in first["phases_ms"]

    s3ddb.write_dataset(_rows(10, 5), uri, mode="append", max_rows_per_file=2)
    appended = _metrics(uri)
    assert (appended["num_added_rows"], appended["num_added_files"]) == (5, 3)
    assert appended["num_removed_files"] == 0

    ds = s3ddb.dataset(uri)
    ds.delete("id < 3")
    deleted = _metrics(uri)
    assert (deleted["num_deleted_rows"], deleted["num_added_rows"]) == (3, 0)
    assert deleted["fragments_touched"] == 1

    ds.update({"v": "'x'"}, where="id >= 10")
    updated = _metrics(uri)
    assert updated["num_updated_rows"] == 5
    assert (updated["num_added_rows"], updated["num_deleted_rows"]) == (0, 0)

    source = _rows(13, 4)  # ids 13-14 match, 15-16 are new
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
    merged = _metrics(uri)
    assert (merged["num_updated_rows"], merged["num_added_rows"]) == (2, 2)
    assert (merged["source_rows"], merged["matched_rows"]) == (4, 2)
    assert (merged["inserted_rows"], merged["updated_rows"]) == (2, 2)

    before = len(s3ddb.dataset(uri).get_fragments())
    s3ddb.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    compacted = _metrics(uri)
    assert compacted["fragments_in"] == before and compacted["fragments_out"] == 1
    assert (compacted["num_added_rows"], compacted["num_deleted_rows"]) == (0, 0)
    assert compacted["num_removed_files"] >= before
    # Metrics are kept in history: each version's are its own.
    history = s3ddb.dataset(uri).versions()
    assert [v.metrics["num_added_rows"] for v in history[:2]] == [10, 5]


def test_values_added_around_an_operation_are_recorded_by_its_commit_only(
    tmp_path: Path,
) -> None:
    """``adding_operation_metrics`` reaches the block an operation opens itself
    (``Dataset.update`` here), and nothing after the caller's block ends."""
    from s3ddb.observe.commit_metrics import adding_operation_metrics

    uri = str(tmp_path / "t")
    ds = s3ddb.write_dataset(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), uri)
    with adding_operation_metrics(update_writer="python"):
        ds.update({"v": "upper(v)"}, where="id > 1")
    ds.update({"v": "lower(v)"}, where="id > 2")
    first, second = s3ddb.dataset(uri).versions()[-2:]
    assert first.metrics["update_writer"] == "python"
    assert first.metrics["api_operation"] == "update"
    assert "update_writer" not in second.metrics
    assert second.metrics["api_operation"] == "update"


def test_versions_written_before_metrics_have_none(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    shutil.copytree(FIXTURE, uri)
    assert all(v.metrics == {} for v in s3ddb.dataset(uri).versions())
    s3ddb.write_dataset(pa.table({"id": [100], "name": ["x"]}), uri, mode="append")
    assert _metrics(uri)["num_added_rows"] == 1


def test_a_commit_that_lost_a_race_records_its_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3ddb.versions.pinned

    # The stale handle stays "fresh" however slow the child: it claims version 2 first.
    monkeypatch.setattr(s3ddb.versions.pinned, "FRESH_BASE_SECONDS", 3600.0)
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 2), uri)
    stale = s3ddb.dataset(uri)  # pinned at version 1
    code = (
        "import sys, s3ddb, pyarrow as pa\n"
        "s3ddb.write_dataset(pa.table({'id': pa.array([50], pa.int64()), 'v': ['c']}),"
        " sys.argv[1], mode='append')\n"
    )
    other = run_python(["-c", code, uri], cwd=ROOT, timeout=120)  # another process
    assert other.returncode == 0, other.stderr[-2000:]
    stale.insert(_rows(2, 2))
    mine = _metrics(uri)
    assert mine["attempts"] == 2
    assert mine["rebased_over"] == [2] and mine["rebased_over_count"] == 1
    assert mine["num_added_rows"] == 2


def test_history_json_carries_the_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from s3ddb.cli.main import main

    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 4), uri)
    s3ddb.dataset(uri).delete("id = 1")
    assert main(["history", uri, "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["metrics"]["num_deleted_rows"] for e in entries] == [1, 0]
    assert entries[0]["metrics"]["attempts"] == 1
    assert main(["history", uri]) == 0
    text = capsys.readouterr().out
    assert "attempts" in text.splitlines()[0]


def test_each_commit_logs_one_info_record_with_its_metrics(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = str(tmp_path / "ds")
    with caplog.at_level(logging.DEBUG, logger="s3ddb"):
        s3ddb.write_dataset(_rows(0, 3), uri)
        s3ddb.write_dataset(_rows(3, 3), uri, mode="append")
    infos = [r for r in caplog.records if r.name == "s3ddb.commit" and r.levelno == logging.INFO]
    assert len(infos) == 2
    assert [r.s3ddb_version for r in infos] == [1, 2]  # type: ignore[attr-defined]
    assert infos[1].s3ddb_metrics["num_added_rows"] == 3  # type: ignore[attr-defined]
    assert infos[1].s3ddb_operation == "Append"  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(r.name == "s3ddb.commit" and r.levelno == logging.DEBUG for r in caplog.records)


@pytest.mark.parametrize(
    "text",
    ["[1]", "{", '{"a": {"b": {"c": {"d": 1}}}}', '{"a": NaN}', "x" * 20000],
)
def test_stored_metrics_are_checked(text: str) -> None:
    with pytest.raises(StoredMetadataError, match="here"):
        parse_metrics(text, "here")


def test_commits_work_and_record_metrics_without_opentelemetry(tmp_path: Path) -> None:
    # A child that cannot import opentelemetry at all.
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import s3ddb, pyarrow as pa\n"
        "from s3ddb.observe import telemetry\n"
        "assert not telemetry.available()\n"
        "ds = s3ddb.write_dataset(pa.table({'id': [1, 2]}), sys.argv[1])\n"
        "print(ds.versions()[-1].metrics['num_added_rows'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "ds")],
        check=True, cwd=ROOT, timeout=120, capture_output=True, text=True,
        env={**os.environ},
    )  # fmt: skip
    assert out.stdout.strip() == "2"


@pytest.fixture(scope="module")
def spans() -> Any:
    pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is a dev dependency")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    # OpenTelemetry takes one tracer provider per process: another test module may
    # have installed it (tests/catalogs, tests/catalog_server); add to it then.
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def test_a_commit_is_a_span_with_its_phases_as_children(tmp_path: Path, spans: Any) -> None:
    spans.clear()
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 3), uri)
    s3ddb.dataset(uri).to_table(filter="id = 1")
    finished = spans.get_finished_spans()
    [commit] = [s for s in finished if s.name == "s3ddb.commit"]
    assert commit.attributes["s3ddb.version"] == 1
    assert commit.attributes["s3ddb.operation"] == "Overwrite"
    assert commit.attributes["s3ddb.attempts"] == 1
    assert commit.attributes["s3ddb.outcome"] == "committed"
    assert uri in commit.attributes["s3ddb.dataset"]
    children = {s.name for s in finished if s.parent and s.parent.span_id == commit.context.span_id}
    assert {"s3ddb.commit.prepare", "s3ddb.commit.claim"} <= children
    assert any(s.name == "s3ddb.open" for s in finished)
    [scan] = [s for s in finished if s.name == "s3ddb.scan"]
    assert scan.attributes["s3ddb.fragments"] == 1


def test_a_redacted_dataset_attribute() -> None:
    from s3ddb.observe.telemetry import dataset_attribute

    shown = dataset_attribute("s3+ddb://b/p?ddbTableName=t&aws_secret_access_key=SECRET")
    assert "SECRET" not in shown and "ddbTableName=t" in shown


def test_every_span_names_a_dataset_by_its_root(aws: Any, ddb_uri: str, spans: Any) -> None:
    """Open, scan, commit, finish and publish spans of one s3+ddb:// dataset carry
    one ``s3ddb.dataset``: its root (the s3:// URL), however the dataset was named."""
    from s3ddb.commit.finalizer import drain
    from tests.conftest import make_table

    so = aws.storage_options()
    spans.clear()
    s3ddb.write_dataset(make_table(0, 4), ddb_uri, storage_options=so, open_formats="iceberg")
    ds = s3ddb.dataset(ddb_uri, storage_options=so)
    ds.delete("id = 1")
    ds.to_table(filter="id > 0")
    ds.publish_open_formats()
    assert drain(60)
    named = {}
    for span in spans.get_finished_spans():
        if span.attributes and "s3ddb.dataset" in span.attributes:
            named.setdefault(span.name, set()).add(span.attributes["s3ddb.dataset"])
    expected = {"s3ddb.open", "s3ddb.scan", "s3ddb.commit", "s3ddb.commit.finish"}
    assert expected | {"s3ddb.publish"} <= set(named), named
    root = ddb_uri.replace("s3+ddb://", "s3://").split("?")[0]
    assert set().union(*named.values()) == {root}, named


def test_a_reader_repairing_another_writers_commit_is_a_span(
    aws: Any, ddb_uri: str, spans: Any
) -> None:
    from s3ddb.commit.failpoints import EXIT_CODE
    from tests.support.proc import run_workers
    from tests.support.workers import rows_for

    so = aws.storage_options()
    s3ddb.write_dataset(rows_for(0, 0, 2), ddb_uri, storage_options=so)
    [crashed] = run_workers(
        [("append", ddb_uri, "1", "1", "2")],
        env={**aws.env(), "S3DDB_FAILPOINTS": "commit.after_external_put=exit"},
    )
    assert crashed.returncode == EXIT_CODE
    spans.clear()
    assert s3ddb.dataset(ddb_uri, storage_options=so).version == 2
    [repair] = [s for s in spans.get_finished_spans() if s.name == "s3ddb.repair"]
    assert repair.attributes["s3ddb.version"] == 2
    assert "SECRET" not in str(repair.attributes)
    # The repaired version's metrics were recorded by the writer that crashed.
    assert s3ddb.dataset(ddb_uri, storage_options=so).versions()[-1].metrics["attempts"] == 1


def test_commits_and_conflicts_are_counted_by_the_instruments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("opentelemetry.sdk.metrics", reason="opentelemetry-sdk is a dev dependency")
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import s3ddb.versions.pinned

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    def totals() -> dict[str, float]:
        data = reader.get_metrics_data()
        out: dict[str, float] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = point.count  # a histogram: how many recorded
                        out[metric.name] = out.get(metric.name, 0) + value
        return out

    before = totals()
    monkeypatch.setattr(s3ddb.versions.pinned, "FRESH_BASE_SECONDS", 3600.0)
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 2), uri)
    stale = s3ddb.dataset(uri)
    code = (
        "import sys, s3ddb, pyarrow as pa\n"
        "s3ddb.write_dataset(pa.table({'id': pa.array([50], pa.int64()), 'v': ['c']}),"
        " sys.argv[1], mode='append')\n"
    )
    other = run_python(["-c", code, uri], cwd=ROOT, timeout=120)  # another process
    assert other.returncode == 0, other.stderr[-2000:]
    stale.insert(_rows(2, 2))
    after = totals()

    def grew(name: str) -> float:
        return after.get(name, 0) - before.get(name, 0)

    assert grew("s3ddb.commits") == 2
    assert grew("s3ddb.conflicts") == 1 and grew("s3ddb.retries") == 1
    assert grew("s3ddb.claim.duration") == 2


def test_a_group_commit_records_and_logs_each_part(caplog: pytest.LogCaptureFixture) -> None:
    import uuid

    a, b = (f"memory://metrics-group-{uuid.uuid4().hex}/{n}" for n in "ab")
    s3ddb.write_dataset(_rows(0, 3), a)
    s3ddb.write_dataset(_rows(0, 3), b)
    with caplog.at_level(logging.INFO, logger="s3ddb.commit"), s3ddb.atomic() as tx:
        tx.dataset(a).delete("id = 1")
        tx.dataset(b).insert(_rows(3, 2))
    assert _metrics(a)["num_deleted_rows"] == 1
    assert _metrics(b)["num_added_rows"] == 2
    logged = [r for r in caplog.records if r.name == "s3ddb.commit" and r.levelno == logging.INFO]
    assert sorted(r.s3ddb_operation for r in logged) == ["Append", "Delete"]  # type: ignore[attr-defined]
