"""History at scale: time travel by timestamp bisects, history reads manifest headers.

Commit times never decrease from one version to the next (a writer whose clock is
behind takes its base's time), so opening a dataset as of a time looks at about
log2(versions) versions; history reads only the first bytes of each manifest.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import ManifestCorruptError, VersionNotFoundError
from s3ddb.format.manifest import HEADER_READ_BYTES, read_manifest_header
from s3ddb.io.object_store import ObjectStore


def _wide(ids: range) -> pa.Table:
    """Rows of ``id`` and 39 more int64 columns."""
    columns = {"id": pa.array(ids, pa.int64())}
    for c in range(39):
        columns[f"c{c:02d}"] = pa.array([i * 7 + c for i in ids], pa.int64())
    return pa.table(columns)


def _one(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64())})


def _create(uri: str, so: Any, versions: int) -> list[dt.datetime]:
    s3ddb.write_dataset(_one(0), uri, storage_options=so)
    for i in range(1, versions):
        s3ddb.write_dataset(_one(i), uri, mode="append", storage_options=so)
    return [v.timestamp for v in s3ddb.dataset(uri, storage_options=so).versions()]


def test_as_of_every_commit_time_opens_that_version(location: tuple[str, Any]) -> None:
    uri, so = location
    times = _create(uri, so, 13)
    assert times == sorted(times)
    for when in times:
        # The newest version committed at or before `when` (equal times: the newest).
        expected = max(v for v, t in enumerate(times, start=1) if t <= when)
        assert s3ddb.dataset(uri, storage_options=so, asof=when).version == expected
        later = when + dt.timedelta(microseconds=500)
        newest = max(v for v, t in enumerate(times, start=1) if t <= later)
        assert s3ddb.dataset(uri, storage_options=so, asof=later).version == newest
    with pytest.raises(VersionNotFoundError, match="at or before"):
        s3ddb.dataset(uri, storage_options=so, asof=times[0] - dt.timedelta(seconds=1))
    text = (times[5] + dt.timedelta(microseconds=100)).isoformat()
    assert s3ddb.dataset(uri, storage_options=so, asof=text).version >= 6


def test_a_writer_with_a_clock_behind_never_goes_back_in_time(
    location: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, so = location
    _create(uri, so, 3)
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() - 3600 * 10**9)  # an hour behind
    s3ddb.write_dataset(_one(9), uri, mode="append", storage_options=so)
    monkeypatch.setattr(time, "time_ns", real)
    versions = s3ddb.dataset(uri, storage_options=so).versions()
    times = [v.timestamp for v in versions]
    assert times == sorted(times) and len(times) == 4
    assert s3ddb.dataset(uri, storage_options=so, asof=times[3]).version == 4
    assert s3ddb.dataset(uri, storage_options=so, asof=times[2]).version in (3, 4)


def test_as_of_after_cleanup_removed_versions_in_between(
    tmp_path: Path, instant_cleanup: Any
) -> None:
    uri = str(tmp_path / "ds")
    times = _create(uri, None, 8)
    ds = s3ddb.dataset(uri)
    ds.tags.create("keep", 2)
    ds.cleanup_old_versions(older_than=dt.timedelta(0))
    left = [v.version for v in s3ddb.dataset(uri).versions()]
    assert 2 in left and 3 not in left and 8 in left
    assert s3ddb.dataset(uri, asof=times[1]).version == 2
    assert s3ddb.dataset(uri, asof=times[4]).version == 2  # 3..5 are gone
    assert s3ddb.dataset(uri, asof=times[7]).version == 8


def test_a_manifest_header_is_read_from_its_first_bytes(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    n = 3000  # a manifest larger than the first read
    s3ddb.write_dataset(pa.table({"id": pa.array(range(n), pa.int64())}), uri,
                        max_rows_per_file=1)  # fmt: skip
    ds = s3ddb.dataset(uri)
    # Every fragment inline (format 1): a manifest larger than the first read.
    ds.update_config({"k": "v", "s3ddb.inline_fragments": "65536"})
    store = ObjectStore(uri)
    [path] = [
        p for p in (tmp_path / "ds" / "_versions").iterdir()
        if read_manifest_header(store, f"_versions/{p.name}", p.name).version == 2
    ]  # fmt: skip
    assert path.stat().st_size > 2 * HEADER_READ_BYTES
    rel = f"_versions/{path.name}"
    header = read_manifest_header(store, rel, rel)
    assert (header.version, header.operation) == (2, "UpdateConfig")
    # A flipped byte among the fragments is not the header's business (the full read
    # catches it); a flipped byte in the header is.
    data = bytearray(path.read_bytes())
    data[-1000] ^= 0xFF
    path.write_bytes(bytes(data))
    assert read_manifest_header(store, rel, rel).version == 2
    with pytest.raises(ManifestCorruptError, match="checksum"):
        s3ddb.dataset(uri)
    data[-1000] ^= 0xFF
    data[30] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestCorruptError, match=rel):
        read_manifest_header(store, rel, rel)


def test_history_reads_only_headers_on_s3(aws: Any) -> None:
    from tests.conftest import TEST_BUCKET

    uri = f"s3://{TEST_BUCKET}/hist-{time.time_ns()}/ds"
    # The endpoint honours If-None-Match for this test only: a writer that asked it
    # before in this process would not ask again, so it trusts it.
    so = {**aws.storage_options(), "s3_conditional_writes": "trusted"}
    aws.conditional_writes, honoured = True, aws.conditional_writes
    try:
        # 300 one-row files of 40 columns (each fragment's entry carries every column's
        # statistics): from version 2 on, every fragment inline (format 1), manifests
        # of well over twice the first read.
        s3ddb.write_dataset(_wide(range(300)), uri, storage_options=so, max_rows_per_file=1)
        opened = s3ddb.dataset(uri, storage_options=so)
        opened.update_config({"s3ddb.inline_fragments": "65536"})
        for i in range(3):
            s3ddb.write_dataset(_wide(range(i, i + 1)), uri, mode="append", storage_options=so)
        # Flip a byte among version 3's fragments, far past the first read: history
        # never sees it, opening version 3 does.
        store = ObjectStore(uri, so)
        [meta] = [m for m in store.list("_versions/") if m.size > 2 * HEADER_READ_BYTES
                  and read_manifest_header(store, m.path, m.path).version == 3]  # fmt: skip
        data = bytearray(store.get(meta.path))
        data[-1000] ^= 0xFF
        store.put(meta.path, bytes(data))
        aws.clear_requests()
        versions = s3ddb.dataset(uri, storage_options=so).versions()
        assert [v.version for v in versions] == [1, 2, 3, 4, 5]
        assert [v.operation for v in versions] == [
            "Overwrite", "UpdateConfig", "Append", "Append", "Append"
        ]  # fmt: skip
        # The open reads the newest manifest whole (one GET, its range bounded by the
        # manifest size limit); history, the first bytes of each (version 1's root,
        # with chunks, is smaller than the first read).
        gets = [r for r in aws.requests if r.operation == "GetObject"]
        assert [r.status for r in gets] == [206] * 6
        newest = max(store.list("_versions/"), key=lambda m: m.size)
        assert newest.size in {r.response_bytes for r in gets}
        with pytest.raises(ManifestCorruptError, match="checksum"):
            s3ddb.dataset(uri, 3, storage_options=so)
    finally:
        aws.conditional_writes = honoured
