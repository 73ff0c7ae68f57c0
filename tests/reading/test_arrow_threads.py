"""Arrow's thread pool decodes only from Arrow's own files.

A Parquet read with ``use_threads=True`` hands the file to Arrow's pool threads. When
the file is Python's (a Python file object, or bytes wrapped by ``BufferReader``), the
pages it returns are Python objects too, and the pool thread that drops the last one
takes the GIL. If that happens while the interpreter is exiting, the thread cannot
take it and the process aborts with "terminate called without an active exception":
now and then, after all the work is done (a CLI run seen exiting with SIGABRT in CI).
These tests record every Parquet read s3ddb makes and check the rule on each, for each
kind of store and read.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb
import s3ddb.format.parquet_source as parquet_source
from s3ddb.errors import PathOutsideDatasetError
from s3ddb.io.object_store import LocalObjectStore
from tests.conftest import TEST_BUCKET, TEST_TABLE


class _Recorded(pq.ParquetFile):
    """A ParquetFile that records its source and every read's ``use_threads``."""

    reads: list[tuple[Any, bool]] = []

    def __init__(self, source: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(source, *args, **kwargs)
        self._source = source

    def read(self, *args: Any, use_threads: bool = True, **kwargs: Any) -> pa.Table:
        self.reads.append((self._source, use_threads))
        return super().read(*args, use_threads=use_threads, **kwargs)

    def read_row_groups(self, *args: Any, use_threads: bool = True, **kwargs: Any) -> pa.Table:
        self.reads.append((self._source, use_threads))
        return super().read_row_groups(*args, use_threads=use_threads, **kwargs)

    def iter_batches(self, *args: Any, use_threads: bool = True, **kwargs: Any) -> Any:
        self.reads.append((self._source, use_threads))
        return super().iter_batches(*args, use_threads=use_threads, **kwargs)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, bool]]:
    reads: list[tuple[Any, bool]] = []
    monkeypatch.setattr(_Recorded, "reads", reads)
    monkeypatch.setattr(pq, "ParquetFile", _Recorded)
    return reads


def _arrows_own(source: Any) -> bool:
    # BufferReader over bytes and PythonFile hold Python objects; OSFile does not.
    return isinstance(source, pa.OSFile)


def _read_everything(uri: str, so: dict[str, Any] | None = None) -> None:
    table = pa.table({"id": list(range(2000)), "s": [str(i) for i in range(2000)]})
    ds = s3ddb.write_dataset(table, uri, storage_options=so, max_rows_per_group=500)
    ds.create_scalar_index("id")
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.to_table().num_rows == 2000
    assert ds.to_table(filter="id = 7").column("s").to_pylist() == ["7"]  # the index
    assert ds.to_table(filter="id >= 1990", columns=["s"]).num_rows == 10  # row groups


def _check_rule(reads: list[tuple[Any, bool]], *, threaded: bool) -> None:
    assert len(reads) >= 3, reads  # the scan, a filtered scan, the index file
    for source, use_threads in reads:
        assert not use_threads or _arrows_own(source), (type(source), use_threads)
    # Local files keep Arrow's threads (reopened as Arrow's own file); other stores
    # decode in the calling thread.
    assert any(t for _, t in reads) == threaded


def test_local_reads_decode_on_arrows_threads_only_from_arrows_own_files(
    tmp_path: Path, recorded: list[tuple[Any, bool]]
) -> None:
    _read_everything(str(tmp_path / "ds"))
    _check_rule(recorded, threaded=True)


def test_in_memory_reads_stay_in_the_calling_thread(recorded: list[tuple[Any, bool]]) -> None:
    _read_everything(f"memory://arrow-threads-{uuid.uuid4().hex[:8]}")
    _check_rule(recorded, threaded=False)


@pytest.mark.parametrize("whole_read_max", [parquet_source.WHOLE_READ_MAX_BYTES, 0])
def test_object_store_reads_stay_in_the_calling_thread(
    aws: Any, monkeypatch: pytest.MonkeyPatch, recorded: list[tuple[Any, bool]],
    whole_read_max: int,
) -> None:  # fmt: skip
    """Whole-file GETs (bytes) and ranged reads (a Python file serving fetched ranges)."""
    monkeypatch.setattr(parquet_source, "WHOLE_READ_MAX_BYTES", whole_read_max)
    uri = f"s3+ddb://{TEST_BUCKET}/threads-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    _read_everything(uri, aws.storage_options())
    _check_rule(recorded, threaded=False)


def test_arrow_input_reopens_the_checked_file_and_still_refuses_a_symlink(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.bin").write_bytes(b"first")
    store = LocalObjectStore(str(root))
    source, threads = parquet_source.arrow_input(store, "a.bin")
    with source as f:
        # The file opened and checked, even once its path names another file.
        os.replace(root / "a.bin", root / "old.bin")
        (root / "a.bin").write_bytes(b"second, longer")
        assert threads and isinstance(f, pa.OSFile)
        assert f.read() == b"first"
    (tmp_path / "outside.bin").write_bytes(b"outside")
    os.symlink(tmp_path / "outside.bin", root / "link.bin")
    with pytest.raises(PathOutsideDatasetError):
        parquet_source.arrow_input(store, "link.bin")
