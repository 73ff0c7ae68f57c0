"""Hostile or damaged storage under a dataset root: neighbouring datasets whose names
extend this one's, names longer than the local filesystem allows, base paths that
leave the dataset's kind of store, symlinks and special files under a local root,
and missing or corrupt data files."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.cli.main import main
from s3ddb.commit.manifest_cache import MANIFESTS
from s3ddb.errors import PathOutsideDatasetError, S3DDBError
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.framing import frame
from s3ddb.format.manifest import MANIFEST_MAGIC
from s3ddb.health import verify
from s3ddb.io import ObjectStore, local_files
from tests import storage
from tests.conftest import TEST_BUCKET, TEST_TABLE, make_table

# --- neighbours: a dataset whose name extends another's ------------------------------


@pytest.fixture(params=["local", "memory", "s3+ddb"])
def neighbours(
    request: pytest.FixtureRequest, tmp_path: Path, memory_uri: str
) -> tuple[str, str, dict[str, str] | None]:
    """(``.../ds``, its neighbour ``.../ds2`` written by this process, options)."""
    if request.param == "local":
        return str(tmp_path / "ds"), str(tmp_path / "ds2"), None
    if request.param == "memory":
        return f"{memory_uri}/ds", f"{memory_uri}/ds2", None
    aws = request.getfixturevalue("moto_aws")
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


def _plant(uri: str, edit: Any, storage_options: dict[str, str] | None = None) -> str:
    """Rewrite the newest manifest in place with ``edit`` applied to its protobuf (as
    someone with write access to the root could); returns its path."""
    ds = s3ddb.dataset(uri, storage_options=storage_options)
    location = ds.handler.latest_location()
    assert location is not None
    message = ds.manifest.to_pb()
    edit(message)
    ds.handler.store.put(location.path, frame(message.SerializeToString(), MANIFEST_MAGIC))
    MANIFESTS.clear()  # this process would otherwise not read it again
    return location.path


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

    manifest = _plant(uri, data_file)
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

    _plant(uri, deletion_file)
    with pytest.raises(PathOutsideDatasetError, match="bytes"):
        s3ddb.dataset(uri).to_table()
    s3ddb.dataset(uri, 1).restore()

    def transaction_file(m: pb.Manifest) -> None:
        m.transaction_file = "0-" + "é" * 130 + ".txn"

    _plant(uri, transaction_file)
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
