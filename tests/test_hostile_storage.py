"""Hostile or damaged storage under a dataset root: neighbouring datasets whose names
extend this one's, names longer than the local filesystem allows, base paths that
leave the dataset's kind of store, symlinks and special files under a local root,
and missing or corrupt data files."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.cli.main import main
from s3ddb.health import verify
from s3ddb.io import ObjectStore
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
