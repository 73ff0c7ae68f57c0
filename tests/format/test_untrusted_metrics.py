"""Stored commit metrics are untrusted: nesting is bounded before they are parsed, and
a version whose metrics are malformed still opens, its history entry saying what is
wrong, while every other version's history is untouched."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.errors import StoredMetadataError
from s3ddb.external_store.manifest_store import MANIFEST_SHA256_ATTRIBUTE
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.framing import frame, unframe
from s3ddb.format.manifest import manifest_sha256
from s3ddb.format.version_metrics import MAX_METRICS_BYTES, parse_metrics
from tests.conftest import TEST_TABLE
from tests.support.cli_runner import run_cli

#: Under the 16 KiB limit, and deep enough to exhaust json's recursion.
NESTED = "[" * 8000 + "]" * 8000
NOT_JSON = '{"attempts": 1,'


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _plant(uri: str, so: dict[str, Any] | None, version: int, text: str) -> None:
    """Store ``text`` as ``version``'s commit metrics: in its manifest's header and,
    on the DynamoDB path, in its row (with the manifest's new size and digest), as an attacker
    with write access to both would."""
    finalizer.drain()
    ds = s3ddb.dataset(uri, storage_options=so)
    store, path = ds.handler.store, ds.handler.location_of(version).path
    data = store.get(path)
    magic = data[:8]
    message = pb.Manifest.FromString(unframe(data, magic, path))
    # Without the header's offset and checksum the whole message is read as one.
    message.ClearField("fragments_offset")
    message.ClearField("header_crc")
    message.commit_metrics = text
    planted = frame(message.SerializeToString(), magic)
    store.put(path, planted)
    manifest_store = ds.handler.manifest_store()
    if manifest_store is not None:
        from s3ddb.external_store.ddb_items import item_key

        client = manifest_store[0].client()  # type: ignore[attr-defined]
        key = item_key(manifest_store[1], version)
        item = client.get_item(TableName=TEST_TABLE, Key=key, ConsistentRead=True)["Item"]
        item["metrics"] = {"S": text}
        item["size"] = {"N": str(len(planted))}
        item[MANIFEST_SHA256_ATTRIBUTE] = {"S": manifest_sha256(planted)}
        client.put_item(TableName=TEST_TABLE, Item=item)
    MANIFESTS.clear()


def test_nesting_is_refused_before_parsing() -> None:
    from s3ddb.format.version_metrics import read_metrics

    assert len(NESTED) < MAX_METRICS_BYTES
    with pytest.raises(StoredMetadataError, match="here: commit metrics nest 8000 levels"):
        parse_metrics(NESTED, "here")
    # Brackets inside strings are text, not nesting; escaped quotes stay in the string.
    assert parse_metrics('{"a": "[[[[\\"[[[[", "b": [1, 2], "c": {"d": 3}}', "x") == {
        "a": '[[[["[[[[',
        "b": [1, 2],
        "c": {"d": 3},
    }
    assert read_metrics(NESTED, "here") == (
        {},
        "here: commit metrics nest 8000 levels deep (at most 2)",
    )
    assert read_metrics('{"a": 1}', "here") == ({"a": 1}, None)


def test_malformed_metrics_never_keep_a_version_or_history_from_being_read(
    location: tuple[str, dict[str, Any] | None],
) -> None:
    uri, so = location
    s3ddb.write_dataset(_rows(0, 5), uri, storage_options=so)
    s3ddb.dataset(uri, storage_options=so).delete("id = 1")
    s3ddb.write_dataset(_rows(5, 2), uri, mode="append", storage_options=so)
    s3ddb.write_dataset(_rows(7, 1), uri, mode="append", storage_options=so)
    _plant(uri, so, 2, NESTED)
    _plant(uri, so, 3, NOT_JSON)
    _plant(uri, so, 4, NESTED)  # the newest

    # The newest opens and reads; so do the others.
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.version == 4 and sorted(ds.to_table().column("id").to_pylist()) == [
        0,
        2,
        3,
        4,
        5,
        6,
        7,
    ]
    assert s3ddb.dataset(uri, version=2, storage_options=so).count_rows() == 4
    assert s3ddb.dataset(uri, version=3, storage_options=so).count_rows() == 6

    history = ds.versions()
    assert [v.version for v in history] == [1, 2, 3, 4]
    assert history[0].metrics["num_added_rows"] == 5 and history[0].metrics_problem is None
    for entry, what in [
        (history[1], "nest 8000 levels"),
        (history[2], "not JSON"),
        (history[3], "nest"),
    ]:
        assert entry.metrics == {}
        assert entry.metrics_problem is not None and what in entry.metrics_problem
        assert f"version {entry.version}" in entry.metrics_problem
    assert [v["version"] for v in ds.versions()] == [1, 2, 3, 4]
    assert (
        s3ddb.dataset(uri, storage_options=so, asof=dt.datetime.now(dt.timezone.utc)).version == 4
    )


def test_history_on_the_command_line_marks_malformed_metrics(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows(0, 3), uri)
    s3ddb.write_dataset(_rows(3, 3), uri, mode="append")
    _plant(uri, None, 1, NESTED)
    code, out, err = run_cli(capsys, "history", uri, "--json")
    assert code == 0, err
    entries = {e["version"]: e for e in json.loads(out)}
    assert entries[1]["metrics"] == {} and "nest 8000 levels" in entries[1]["problem"]
    assert entries[2]["problem"] is None and entries[2]["metrics"]["num_added_rows"] == 3
    code, out, err = run_cli(capsys, "history", uri)
    assert code == 0, err
    assert "version 1: " in out and "nest 8000 levels" in out
