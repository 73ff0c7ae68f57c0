"""Hostile or damaged storage under a dataset root: neighbouring datasets whose names
extend this one's, names longer than the local filesystem allows, base paths that
leave the dataset's kind of store, symlinks and special files under a local root,
and missing or corrupt data files."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3ddb
from s3ddb.cli.main import main
from s3ddb.errors import (
    DataFileError,
    DataFileMissingError,
    PathOutsideDatasetError,
    S3DDBError,
)
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.io import ObjectStore, local_files
from s3ddb.io.paths import check_name, name_problem
from s3ddb.maintenance.verify import verify
from tests.conftest import TEST_BUCKET, TEST_TABLE, make_table
from tests.support import storage

# --- neighbours: a dataset whose name extends another's ------------------------------


@pytest.fixture(params=["local", "memory", "s3+ddb", "seaweedfs"])
def neighbours(
    request: pytest.FixtureRequest, tmp_path: Path, memory_uri: str
) -> tuple[str, str, dict[str, str] | None]:
    """(``.../ds``, its neighbour ``.../ds2`` written by this process, options); the
    last on SeaweedFS's S3 (a real store's listings) with moto's DynamoDB."""
    if request.param == "local":
        return str(tmp_path / "ds"), str(tmp_path / "ds2"), None
    if request.param == "memory":
        return f"{memory_uri}/ds", f"{memory_uri}/ds2", None
    aws = request.getfixturevalue("moto_aws" if request.param == "s3+ddb" else "seaweedfs_split")
    prefix = f"{TEST_BUCKET}/n-{uuid.uuid4().hex[:10]}"
    uri = f"s3+ddb://{prefix}/ds?ddbTableName={TEST_TABLE}"
    neighbour = f"s3+ddb://{prefix}/ds2?ddbTableName={TEST_TABLE}"
    return uri, neighbour, aws.storage_options()


def _two_datasets(uri: str, neighbour: str, so: dict[str, str] | None) -> set[str]:
    s3ddb.write_dataset(make_table(0, 3), uri, storage_options=so)
    s3ddb.write_dataset(make_table(3, 3), uri, mode="append", storage_options=so)
    s3ddb.write_dataset(make_table(100, 2), neighbour, storage_options=so)
    s3ddb.write_dataset(make_table(102, 2), neighbour, mode="append", storage_options=so)
    return storage.objects(neighbour, so)


def test_listing_a_root_never_returns_a_neighbours_objects(neighbours: Any) -> None:
    uri, neighbour, so = neighbours
    theirs = _two_datasets(uri, neighbour, so)
    store = ObjectStore(uri, so)
    listed = [m.path for m in store.list("")]
    assert listed and all(not p.startswith("/") for p in listed), listed
    assert len(listed) == len(set(listed))
    mine = storage.objects(uri, so)
    assert set(listed) == mine and mine.isdisjoint({p for p in theirs if "/" not in p})
    assert store.first_listed("") is not None and not store.first_listed("").path.startswith("/")


def test_drop_through_the_cli_leaves_the_neighbour_alone(
    neighbours: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, neighbour, so = neighbours
    theirs = _two_datasets(uri, neighbour, so)
    flags = [f"--storage-option={k}={v}" for k, v in (so or {}).items()]
    code = main(["drop", uri, "--yes", "--json", *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["objects"] > 0
    assert storage.objects(uri, so) == set()
    assert storage.objects(neighbour, so) == theirs
    assert s3ddb.dataset(neighbour, storage_options=so).to_table() == pa.concat_tables(
        [make_table(100, 2), make_table(102, 2)]
    )


@pytest.mark.usefixtures("instant_cleanup")
def test_cleanup_and_verify_see_only_their_dataset(neighbours: Any) -> None:
    uri, neighbour, so = neighbours
    theirs = _two_datasets(uri, neighbour, so)
    report = verify(uri, so, grace_seconds=0)
    assert report.healthy, report.problems
    assert report.objects == len(storage.objects(uri, so))
    ds = s3ddb.dataset(uri, storage_options=so)
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    assert stats.versions_removed == [1]
    assert storage.objects(neighbour, so) == theirs
    assert s3ddb.dataset(neighbour, storage_options=so).count_rows() == 4
    assert s3ddb.dataset(uri, storage_options=so).count_rows() == 6


# --- shared: planting in the newest manifest ------------------------------------------


def _data_paths(uri: str) -> list[Path]:
    return sorted((Path(uri) / "data").glob("*.parquet"))


# --- names longer than the local filesystem allows -----------------------------------

LONG = "é" * 150 + ".parquet"  # 158 characters, 308 bytes: over NAME_MAX in bytes only


def test_a_local_name_is_checked_in_bytes_against_name_max(tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path / "root"))
    with pytest.raises(PathOutsideDatasetError, match="308 bytes, longer than the 255"):
        store.put(f"data/{LONG}", b"x")
    with pytest.raises(PathOutsideDatasetError, match="bytes"):
        store.get(f"data/{LONG}")
    store.put("data/" + "é" * 127, b"x")  # 254 bytes fits
    assert store.get("data/" + "é" * 127) == b"x"


def test_a_local_path_longer_than_path_max_is_refused(tmp_path: Path) -> None:
    root = tmp_path
    while len(os.fsencode(root)) < local_files.PATH_MAX - 120:
        root = root / ("d" * min(200, local_files.PATH_MAX - 110 - len(os.fsencode(root))))
    root.mkdir(parents=True)
    store = ObjectStore(str(root))
    with pytest.raises(PathOutsideDatasetError, match=r"full path is \d+ bytes"):
        store.put("data/" + "x" * 200, b"x")
    with pytest.raises(PathOutsideDatasetError, match="full path"):
        s3ddb.write_dataset(make_table(0, 2), str(root / ("y" * 150)))


def test_a_stored_name_too_long_for_the_filesystem_is_a_typed_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(make_table(0, 4), uri)
    s3ddb.write_dataset(make_table(4, 2), uri, mode="append")

    def data_file(m: pb.Manifest) -> None:
        m.fragments[0].files[0].path = LONG

    manifest = storage.plant_manifest(uri, data_file)
    with pytest.raises(PathOutsideDatasetError, match="308 bytes") as raised:
        s3ddb.dataset(uri).to_table()
    assert "data/" in str(raised.value)
    s3ddb.dataset(uri, 1).restore()

    def deletion_file(m: pb.Manifest) -> None:
        fragment = m.fragments[0]
        fragment.deletion_file.kind = pb.DeletionFile.ROARING_BITMAP
        fragment.deletion_file.read_version = 1
        fragment.deletion_file.id = "é" * 130
        fragment.deletion_file.num_deleted_rows = 1
        m.visible_rows -= 1

    storage.plant_manifest(uri, deletion_file)
    with pytest.raises(PathOutsideDatasetError, match="bytes"):
        s3ddb.dataset(uri).to_table()
    s3ddb.dataset(uri, 1).restore()

    def transaction_file(m: pb.Manifest) -> None:
        m.transaction_file = "0-" + "é" * 130 + ".txn"

    storage.plant_manifest(uri, transaction_file)
    # A writer that read an older version checks the newer one's transaction.
    with pytest.raises(PathOutsideDatasetError, match="bytes"):
        s3ddb.dataset(uri, 1).delete("id = 0")
    assert manifest


def test_a_tag_name_is_refused_before_it_reaches_the_filesystem(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(make_table(0, 2), uri)
    with pytest.raises(S3DDBError):
        ds.tags.create("t" + "é" * 130, 1)
    with pytest.raises(S3DDBError):
        s3ddb.dataset(uri, version="t" * 300)
    assert ds.tags.list() == {}


# --- symlinks and special files under a local root -----------------------------------


def _outside_copy(tmp_path: Path) -> Path:
    """A Parquet file outside the dataset, with other rows of the same schema."""
    other = str(tmp_path / "private")
    s3ddb.write_dataset(make_table(1000, 2), other)
    return _data_paths(other)[0]


def test_a_data_file_symlinked_outside_the_root_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(make_table(0, 2), uri)
    [mine] = _data_paths(uri)
    mine.unlink()
    mine.symlink_to(_outside_copy(tmp_path))
    for read in (
        lambda ds: ds.to_table(),
        lambda ds: ds.count_rows("id >= 0"),
        lambda ds: ds.head(1),
        lambda ds: list(ds.to_batches()),
        lambda ds: ds.delete("id = 0"),
    ):
        with pytest.raises(PathOutsideDatasetError, match="symlink") as raised:
            read(s3ddb.dataset(uri))
        assert mine.name in str(raised.value)


def test_a_data_directory_symlinked_outside_the_root_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(make_table(0, 2), uri)
    outside = tmp_path / "elsewhere"
    (Path(uri) / "data").rename(outside)
    (Path(uri) / "data").symlink_to(outside)
    with pytest.raises(PathOutsideDatasetError, match="'data' is a symlink"):
        s3ddb.dataset(uri).to_table()
    # Writes and deletes never go through it either.
    with pytest.raises(PathOutsideDatasetError, match="symlink"):
        s3ddb.write_dataset(make_table(2, 1), uri, mode="append")
    before = sorted(p.name for p in outside.iterdir())
    with pytest.raises(PathOutsideDatasetError, match="symlink"):
        ObjectStore(uri).delete(f"data/{before[0]}")
    assert sorted(p.name for p in outside.iterdir()) == before


def test_the_root_itself_may_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    s3ddb.write_dataset(make_table(0, 3), str(real))
    link = tmp_path / "link"
    link.symlink_to(real)
    ds = s3ddb.write_dataset(make_table(3, 1), str(link), mode="append")
    assert ds.to_table() == make_table(0, 4)
    assert verify(str(link), grace_seconds=0).healthy


@contextlib.contextmanager
def _no_hang(seconds: int = 60) -> Iterator[None]:
    """Fail instead of hanging for ever (a blocked open is interrupted by SIGALRM)."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_fifo_planted_as_the_newest_manifest_never_blocks(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(make_table(0, 2), uri)
    name = layout.manifest_path(2, s3ddb.dataset(uri).handler.latest_location().naming)
    os.mkfifo(Path(uri) / name)
    with _no_hang():
        with pytest.raises(PathOutsideDatasetError, match="FIFO") as raised:
            s3ddb.dataset(uri)
        assert name in str(raised.value)
        # Listing it (versions, verify) opens nothing; verify reports it.
        assert any(m.path == name for m in ObjectStore(uri).list("_versions/"))
        report = verify(uri, grace_seconds=0)
        assert not report.healthy and any(p.version == 2 for p in report.problems)
        assert s3ddb.dataset(uri, 1).to_table() == make_table(0, 2)


def test_special_files_are_refused_by_every_local_read(tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path / "root"))
    store.put("a/file", b"x")
    os.mkfifo(tmp_path / "root" / "a" / "fifo")
    (tmp_path / "root" / "a" / "link").symlink_to(tmp_path / "root" / "a" / "file")
    (tmp_path / "root" / "a" / "dir").mkdir()
    with _no_hang():
        for name in ("fifo", "link", "dir"):
            for read in (
                lambda p: store.get(p),
                lambda p: store.get_range(p, 0, 1),
                lambda p: store.get_prefix(p, 1),
                lambda p: store.head(p),
                lambda p: store.open_input(p),
                lambda p: store.copy(p, "a/copy"),
            ):
                with pytest.raises(PathOutsideDatasetError, match=f"a/{name}"):
                    read(f"a/{name}")
        # Deleting a symlink removes the link, not its target.
        store.delete("a/link")
        assert store.get("a/file") == b"x"


# --- damaged data files --------------------------------------------------------------


@pytest.fixture(params=["local", "memory", "s3+ddb"])
def damaged(
    request: pytest.FixtureRequest, tmp_path: Path, memory_uri: str
) -> tuple[str, dict[str, str] | None]:
    """A dataset of two fragments (versions 1 and 2), and its storage options."""
    so = None
    if request.param == "local":
        uri = str(tmp_path / "ds")
    elif request.param == "memory":
        uri = f"{memory_uri}/ds"
    else:
        so = request.getfixturevalue("moto_aws").storage_options()
        uri = f"s3+ddb://{TEST_BUCKET}/d-{uuid.uuid4().hex[:10]}/ds?ddbTableName={TEST_TABLE}"
    s3ddb.write_dataset(make_table(0, 4), uri, storage_options=so)
    s3ddb.write_dataset(make_table(4, 3), uri, mode="append", storage_options=so)
    return uri, so


def _second_file(uri: str, so: dict[str, str] | None) -> tuple[int, str]:
    """(fragment id, path under the root) of the second fragment's data file."""
    fragment = s3ddb.dataset(uri, storage_options=so).manifest.fragments[1]
    return fragment.id, layout.data_file_path(fragment.files[0].path)


def _parquet(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


READS: dict[str, Any] = {
    "to_table": lambda ds: ds.to_table(),
    "count_rows with a filter": lambda ds: ds.count_rows("id >= 0"),
    "to_batches": lambda ds: list(ds.to_batches()),
    "scanner": lambda ds: ds.scanner(columns=["name"], filter="id > 1").to_table(),
    "arrow reader": lambda ds: ds.scanner().to_reader().read_all(),
    "head": lambda ds: ds.head(7),
    "take": lambda ds: ds.take([5]),
    "delete": lambda ds: ds.delete("id = 5"),
    "update": lambda ds: ds.update({"name": "'x'"}, where="id > 0"),
}


def _other_rows(data: bytes) -> bytes:
    """A planted stand-in for ``data``: the same columns (field ids too) and row count,
    other values, written otherwise (so of another size): nothing but its size tells
    it from the committed file."""
    table = pq.read_table(io.BytesIO(data))
    other = make_table(1000, table.num_rows).cast(table.schema)
    buffer = io.BytesIO()
    pq.write_table(other, buffer, compression="none")
    assert len(buffer.getvalue()) != len(data)
    return buffer.getvalue()


DAMAGES: dict[str, Any] = {
    "missing": None,
    "not parquet": b"this is not a parquet file at all",
    "truncated": lambda data: data[: len(data) // 2],
    "other row count": _parquet(make_table(50, 5)),
    "other columns": _parquet(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]})),
    "other rows of the same count": _other_rows,
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_data_file_is_a_typed_error_naming_it(damaged: Any, damage: str) -> None:
    uri, so = damaged
    fragment_id, path = _second_file(uri, so)
    store = ObjectStore(uri, so)
    how = DAMAGES[damage]
    if how is None:
        store.delete(path)
    else:
        store.put(path, how(store.get(path)) if callable(how) else how)
    expected = DataFileMissingError if damage == "missing" else DataFileError
    for name, read in READS.items():
        with pytest.raises(expected) as raised:
            read(s3ddb.dataset(uri, storage_options=so))
        message = str(raised.value)
        assert path in message and f"fragment {fragment_id}" in message, (name, message)
        assert "version 2" in message, (name, message)
    # Through the Arrow C stream interface (DuckDB, polars) only an error's text
    # passes: it is the typed error's.
    with pytest.raises(
        (OSError, pa.ArrowException), match=f"fragment {fragment_id} \\(version 2\\)"
    ) as raised:
        stream = s3ddb.dataset(uri, storage_options=so).scanner()
        pa.RecordBatchReader.from_stream(stream).read_all()
    assert path in str(raised.value)
    assert s3ddb.dataset(uri, storage_options=so).version == 2  # nothing was committed
    # The undamaged fragment still reads, and an earlier version does too.
    assert s3ddb.dataset(uri, 1, storage_options=so).to_table() == make_table(0, 4)
    report = verify(uri, so, grace_seconds=0)
    assert not report.healthy
    [problem] = [p for p in report.problems if path in p.path]
    assert problem.version == 2 and f"fragment {fragment_id}" in problem.meaning, problem


def test_verify_reads_footers_not_whole_files(moto_aws: Any) -> None:
    so = moto_aws.storage_options()
    uri = f"s3+ddb://{TEST_BUCKET}/f-{uuid.uuid4().hex[:10]}/ds?ddbTableName={TEST_TABLE}"
    big = pa.table({"id": pa.array(range(300_000), pa.int64()),
                    "r": pa.array(np.random.default_rng(1).random(300_000))})  # fmt: skip
    s3ddb.write_dataset(big, uri, storage_options=so)
    storage.objects(uri, so)
    [data] = ObjectStore(uri, so).list("data/")
    moto_aws.clear_requests()
    report = verify(uri, so, grace_seconds=0)
    assert report.healthy, report.problems
    gets = [r for r in moto_aws.requests if r.operation == "GetObject" and "/data/" in r.path]
    assert len(gets) == 1 and gets[0].response_bytes < data.size // 8, (data.size, gets)


# --- base paths stay on the dataset's own kind of store ------------------------------

ALLOW = {"allow_cross_store_base_paths": "true"}


def test_a_local_dataset_is_not_sent_to_another_kind_of_store(
    tmp_path: Path, memory_uri: str
) -> None:
    src = s3ddb.write_dataset(make_table(0, 3), f"{memory_uri}/src")
    target = str(tmp_path / "clone")
    src.shallow_clone(target)
    with pytest.raises(PathOutsideDatasetError) as raised:
        s3ddb.dataset(target).to_table()
    message = str(raised.value)
    assert f"{memory_uri}/src" in message and str(tmp_path / "clone") in message, message
    assert "version 1" in message or "_versions/" in message, message
    assert "allow_cross_store_base_paths" in message
    # Allowed explicitly by whoever opens it.
    assert s3ddb.dataset(target, storage_options=ALLOW).to_table() == make_table(0, 3)


def test_a_bucket_dataset_never_makes_readers_read_their_own_disk(
    moto_aws: Any, tmp_path: Path
) -> None:
    so = moto_aws.storage_options()
    src = s3ddb.write_dataset(make_table(0, 3), str(tmp_path / "private"))
    uri = f"s3+ddb://{TEST_BUCKET}/b-{uuid.uuid4().hex[:10]}/ds?ddbTableName={TEST_TABLE}"
    src.shallow_clone(uri, storage_options=so)
    storage.objects(uri, so)
    reads: list[str] = []
    real_read = local_files.open_regular

    def spy(root: str, path: str) -> int:
        reads.append(f"{root}/{path}")
        return real_read(root, path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(local_files, "open_regular", spy)
        for read in (lambda ds: ds.to_table(), lambda ds: ds.count_rows("id > 0")):
            with pytest.raises(PathOutsideDatasetError, match="file://") as raised:
                read(s3ddb.dataset(uri, storage_options=so))
            message = str(raised.value)
            assert "version 1" in message or "_versions/" in message, message
        report = verify(uri, so, grace_seconds=0)
    assert reads == [], "nothing on the reader's disk was opened"
    assert not report.healthy and any("file://" in p.meaning for p in report.problems)
    allowed = s3ddb.dataset(uri, storage_options={**so, **ALLOW})
    assert allowed.to_table() == make_table(0, 3)


def test_the_option_must_be_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(S3DDBError, match=r"allow_cross_store_base_paths.*true or false"):
        s3ddb.write_dataset(
            make_table(0, 1),
            str(tmp_path / "ds"),
            storage_options={"allow_cross_store_base_paths": "perhaps"},
        )


def test_stored_names_are_limited_in_utf8_bytes() -> None:
    assert name_problem("é" * 512) is None  # 1,024 bytes
    assert "1026 bytes" in (name_problem("é" * 513) or "")
    assert "surrogate" in (name_problem("a\ud800b") or "")
    with pytest.raises(PathOutsideDatasetError, match="bytes"):
        check_name("€" * 400, "data file", "manifest m")
