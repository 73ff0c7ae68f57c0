"""Operator verbs (verify, sync, versions, cleanup, drop), --json, --storage-option and
exit codes, on the local endpoint (S3 without conditional writes + DynamoDB)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.external_store import create_table
from s3ddb.format import layout
from s3ddb.io import AwsConfig, ObjectStore
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support import storage
from tests.support.cli_runner import run_cli as run
from tests.support.proc import append_and_die_after_claim


def _table(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "k": [i % 3 for i in range(n)]})


@pytest.fixture
def flags(aws: Any) -> list[str]:
    """The endpoint as --storage-option flags (the environment does not name it)."""
    return [f"--storage-option={k}={v}" for k, v in aws.storage_options().items()]


def _uri(table: str = TEST_TABLE) -> str:
    return f"s3+ddb://{TEST_BUCKET}/ops-{uuid.uuid4().hex[:12]}?ddbTableName={table}"


@pytest.fixture
def uri(aws: Any) -> str:
    uri = _uri()
    so = aws.storage_options()
    s3ddb.write_dataset(_table(0, 10), uri, storage_options=so)
    s3ddb.write_dataset(_table(10, 5), uri, mode="append", storage_options=so)
    storage.objects(uri, so)  # this process's background finalizer has settled
    return uri


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert code in (0, 1), err
    return code, json.loads(out)


def _crash_after_claim(aws: Any, uri: str) -> None:
    """Commit one more version from a child that dies right after DynamoDB decided it."""
    append_and_die_after_claim(
        aws.env(), uri, "pa.table({'id': pa.array([99], pa.int64()), 'k': [0]})"
    )


def _kinds(report: dict[str, Any]) -> set[str]:
    return {p["kind"] for p in report["problems"]}


def _row(aws: Any, uri: str, version: int) -> Any:
    from s3ddb.io import parse_uri
    from s3ddb.versions.connect import external_store_for

    parsed = parse_uri(uri)
    store = external_store_for(parsed, ObjectStore(parsed, aws.storage_options()))
    return store.get(parsed.base_uri, version)


# --- verify and sync ------------------------------------------------------------------


def test_verify_passes_on_a_healthy_dataset(capsys: Any, uri: str, flags: list[str]) -> None:
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 0 and report["healthy"] and report["problems"] == []
    assert (report["versions"], report["latest_version"]) == (2, 2)
    code, out, _ = run(capsys, "verify", uri, *flags)
    assert code == 0 and out.rstrip().endswith("healthy")


def test_verify_fails_on_a_staged_row_and_passes_after_sync(
    capsys: Any, aws: Any, uri: str, flags: list[str]
) -> None:
    _crash_after_claim(aws, uri)
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 1 and _kinds(report) == {"staged_row"}
    [problem] = report["problems"]
    assert problem["version"] == 3 and "sync" in problem["fix"]
    assert _row(aws, uri, 3).is_staged, "verify changed nothing"
    code, out, _ = run(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 1 and "[staged_row] version 3" in out and "means:" in out and "fix:" in out

    code, synced = run_json(capsys, "sync", uri, "--grace", "0", *flags)
    assert code == 0 and synced["finalized"] == [3]
    assert not _row(aws, uri, 3).is_staged
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 0, report["problems"]
    code, again = run_json(capsys, "sync", uri, "--grace", "0", *flags)
    assert code == 0 and again["finalized"] == [] and again["deleted_staged"] == []


def test_verify_fails_on_a_missing_final_manifest_and_sync_restores_it(
    capsys: Any, aws: Any, uri: str, flags: list[str]
) -> None:
    from s3ddb.external_store.identity import CLAIM_ATTRIBUTE

    store = ObjectStore(uri, aws.storage_options())
    storage.objects(uri, aws.storage_options())  # let this process's finalizer settle
    row = _row(aws, uri, 2)
    final = row.path
    # The staged manifest the claim recorded survived (its delete failed); then the
    # final object was lost. Another staged manifest of the version, of the same size
    # (a writer's that lost the claim, or one planted), is never taken instead.
    store.copy(final, row.extra[CLAIM_ATTRIBUTE])
    store.put(f"{final}-{uuid.uuid4().hex}", b"\0" * row.size)
    store.delete(final)
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 1 and "missing_final_manifest" in _kinds(report)
    code, synced = run_json(capsys, "sync", uri, "--grace", "0", *flags)
    assert code == 0 and synced["restored"] == [2] and len(synced["deleted_staged"]) == 1
    assert store.get(final) == store.get(row.extra[CLAIM_ATTRIBUTE])
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 1 and _kinds(report) == {"orphaned_staged_manifest"}, "the copy is left"
    run_json(capsys, "sync", uri, "--grace", "0", *flags)
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 0, report["problems"]
    assert s3ddb.dataset(uri, storage_options=aws.storage_options()).count_rows() == 15


def test_final_manifest_lost_for_good_is_reported_and_sync_fails(
    capsys: Any, aws: Any, uri: str, flags: list[str]
) -> None:
    storage.objects(uri, aws.storage_options())
    ObjectStore(uri, aws.storage_options()).delete(_row(aws, uri, 1).path)
    code, synced = run_json(capsys, "sync", uri, "--grace", "0", *flags)
    assert code == 1 and "restore it from a backup" in synced["failed"][0]
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 1 and "missing_final_manifest" in _kinds(report)


def test_verify_fails_on_an_orphaned_staged_manifest_and_passes_after_sync(
    capsys: Any, aws: Any, uri: str, flags: list[str]
) -> None:
    store = ObjectStore(uri, aws.storage_options())
    orphan = layout.staged_manifest_path(7, _scheme(), uuid.uuid4().hex)
    store.put(orphan, b"a writer lost before claiming")
    code, report = run_json(capsys, "verify", uri, *flags)
    assert code == 0, "a young staged manifest may be a commit in progress"
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 1 and _kinds(report) == {"orphaned_staged_manifest"}
    assert report["problems"][0]["path"] == orphan
    code, synced = run_json(capsys, "sync", uri, *flags)
    assert synced["deleted_staged"] == [], "the default grace keeps young ones"
    code, synced = run_json(capsys, "sync", uri, "--grace", "0", *flags)
    assert code == 0 and synced["deleted_staged"] == [orphan]
    assert run_json(capsys, "verify", uri, "--grace", "0", *flags)[0] == 0


def _scheme() -> Any:
    from s3ddb.format.naming import NamingScheme

    return NamingScheme.V2


def test_verify_reports_files_and_manifests_out_of_place(
    capsys: Any, aws: Any, uri: str, flags: list[str]
) -> None:
    so = aws.storage_options()
    store = ObjectStore(uri, so)
    storage.objects(uri, so)
    ds = s3ddb.dataset(uri, storage_options=so)
    data = layout.data_file_path(ds.get_fragments()[0].files[0].path)
    store.delete(data)
    store.put(layout.data_file_path("leftover.parquet"), b"crashed writer")
    store.copy(_row(aws, uri, 2).path, layout.manifest_path(5, _scheme()))
    code, report = run_json(capsys, "verify", uri, "--grace", "0", *flags)
    assert code == 1
    by_kind = {p["kind"]: p for p in report["problems"]}
    assert by_kind["missing_data_file"]["path"] == data
    assert by_kind["unreferenced_file"]["path"] == "data/leftover.parquet"
    assert by_kind["manifest_without_row"]["version"] == 5
    assert "version_gap" not in by_kind, "a manifest without a row is no version"


def test_sync_all_finalizes_every_dataset_of_a_table(
    capsys: Any, aws: Any, flags: list[str]
) -> None:
    table = f"ops_all_{uuid.uuid4().hex[:8]}"
    so = aws.storage_options()
    create_table(table, AwsConfig.from_storage_options(so))
    uris = [_uri(table) for _ in range(3)]
    for uri in uris:
        s3ddb.write_dataset(_table(0, 3), uri, storage_options=so)
        storage.objects(uri, so)
    for uri in uris[:2]:
        _crash_after_claim(aws, uri)
    code, reports = run_json(capsys, "sync", "--all", "--table", table, "--grace", "0", *flags)
    assert code == 0
    assert sorted(r["uri"] for r in reports) == sorted(uris)
    assert sorted(len(r["finalized"]) for r in reports) == [0, 1, 1]
    for uri in uris:
        assert run_json(capsys, "verify", uri, "--grace", "0", *flags)[0] == 0
    code, out, _ = run(capsys, "sync", "--all", "--table", table, *flags)
    assert code == 0 and "3 dataset(s), 0 version(s) finalized" in out
    assert run(capsys, "sync", "--all", *flags)[0] == 2, "--all needs --table"


# --- the other verbs ------------------------------------------------------------------


def test_versions_lists_rows_added_and_removed_and_the_committer(
    capsys: Any, uri: str, flags: list[str]
) -> None:
    assert run(capsys, "delete", uri, "k = 0", *flags)[0] == 0
    code, history = run_json(capsys, "versions", uri, *flags)
    assert code == 0
    changes = [(e["version"], e["operation"], e["rows_added"], e["rows_removed"]) for e in history]
    assert changes == [
        (3, "Delete", 0, 6),
        (2, "Append", 5, 0),
        (1, "Overwrite", 10, 0),
    ]
    assert all(e["committer"].startswith("s3ddb/") for e in history)
    code, out, _ = run(capsys, "history", uri, *flags)
    assert code == 0 and out.splitlines()[0].split() == [
        "version", "timestamp", "operation", "call", "added", "removed", "attempts",
        "committer",
    ]  # fmt: skip


def test_every_reporting_verb_speaks_json(
    capsys: Any, uri: str, flags: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_json(capsys, "info", uri, *flags)[1]["rows"] == 15
    assert run_json(capsys, "delete", uri, "id < 2", *flags)[1] == {
        "num_deleted_rows": 2, "version": 3, "committed": True,
    }  # fmt: skip
    assert (
        run_json(capsys, "update", uri, "--set", "k=7", "--where", "id = 5", *flags)[1][
            "num_rows_updated"
        ]
        == 1
    )
    compacted = run_json(capsys, "compact", uri, *flags)[1]
    # Version 5 reserves the compaction's fragment ids; 6 is the compaction.
    assert compacted["read_version"] == 4 and compacted["version"] == 6
    assert run_json(capsys, "restore", uri, "1", *flags)[1] == {"restored": 1, "version": 7}
    assert run(capsys, "tags", uri, "create", "first", "1", *flags)[0] == 0
    assert run_json(capsys, "tags", uri, "list", *flags)[1] == {"first": 1}
    table = f"ops_json_{uuid.uuid4().hex[:8]}"
    endpoint = flags[0].split("=", 2)[2]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    create = ("create-table", table, "--endpoint-url", endpoint, "--region", "us-east-1")
    created = run_json(capsys, *create)[1]
    assert created["created"] is True and created["table"] == table
    assert run_json(capsys, *create)[1]["created"] is False
    code, out, _ = run(capsys, "show", uri, "--json", "--limit", "2", *flags)
    assert code == 0 and [json.loads(line)["id"] for line in out.splitlines()] == [0, 1]


def test_drop_refuses_without_confirmation_then_deletes_everything(
    capsys: Any, aws: Any, uri: str, flags: list[str]
) -> None:
    so = aws.storage_options()
    code, _, err = run(capsys, "drop", uri, *flags)
    assert code == 2 and "without confirmation: pass --yes" in err and err.count("\n") == 1
    assert s3ddb.dataset(uri, storage_options=so).version == 2
    code, report = run_json(capsys, "drop", uri, "--yes", *flags)
    assert code == 0 and report["rows"] == 2 and report["objects"] > 0
    assert storage.objects(uri, so) == set()
    code, _, err = run(capsys, "info", uri, *flags)
    assert code == 2 and "DatasetNotFoundError" in err


@pytest.mark.usefixtures("instant_cleanup")
def test_cleanup_removes_old_versions(capsys: Any, uri: str, flags: list[str]) -> None:
    keep_one = ("--older-than", "0", "--retain-versions", "1")
    code, stats = run_json(capsys, "cleanup", uri, *keep_one, *flags)
    assert code == 0 and stats["versions_removed"] == [1] and stats["rows_removed"] == 1
    assert stats["files"]["manifests"] == 1
    code, out, _ = run(capsys, "cleanup", uri, "--older-than", "7d", *flags)
    assert code == 0 and out.startswith("removed 0 version(s)")
    assert run(capsys, "cleanup", uri, "--older-than", "soon", *flags)[0] == 2
    assert run_json(capsys, "verify", uri, "--grace", "0", *flags)[0] == 0


def test_exit_codes_and_debug(capsys: Any, uri: str, flags: list[str]) -> None:
    assert run(capsys, "info", uri, "--storage-option", "nonsense", *flags)[0] == 2
    code, _, err = run(capsys, "info", uri, "--storage-option=regoin=x", *flags)
    # A long message is wrapped: lines of at most 100 characters, the rest indented.
    lines = err.splitlines()
    assert code == 2 and "regoin" in lines[0] and all(len(line) <= 100 for line in lines)
    assert all(line.startswith("  ") for line in lines[1:])
    missing = uri.replace("/ops-", "/missing-")
    assert run(capsys, "verify", missing, *flags)[0] == 2
    # --debug adds the traceback and keeps the exit status.
    for argv in (["--debug", "verify", missing], ["verify", missing, "--debug"]):
        code, _, err = run(capsys, *argv, *flags)
        assert code == 2 and err.startswith("Traceback") and "DatasetNotFoundError" in err
