"""Cuts: pyiceberg asks for the warehouse ``cut`` and reads two tables as they were
at one instant, never half of a group commit, while a writer process keeps
committing groups to both."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

import s3ddb
import s3ddb.commit.finalizer
from s3ddb.catalog_server import CatalogRegistry
from tests.catalog_server.support import TOKEN, rest_catalog, running, s3ddb_ids, with_dataset
from tests.support.group_workers import row

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_tables_at_one_cut_while_groups_commit(aws: object) -> None:
    from tests.conftest import TEST_BUCKET, TEST_TABLE

    options = aws.storage_options()  # type: ignore[attr-defined]
    root = f"s3://{TEST_BUCKET}/wh-{os.urandom(6).hex()}"
    registry = CatalogRegistry(root, options)
    uris = [f"s3+ddb://{root.removeprefix('s3://')}/{n}?ddbTableName={TEST_TABLE}" for n in "ab"]
    for name, uri in zip(("sales.a", "sales.b"), uris):
        with_dataset(registry, name, uri, row(0))
    s3ddb.commit.finalizer.drain()
    groups = 6
    env = {**aws.env(inherit=True), "PYTHONPATH": str(ROOT)}  # type: ignore[attr-defined]
    s3 = {
        "s3.endpoint": options["endpoint_url"],
        "s3.region": options["region"],
        "s3.access-key-id": options["aws_access_key_id"],
        "s3.secret-access-key": options["aws_secret_access_key"],
    }
    seen: list[int] = []
    with running(registry) as url:
        before = rest_catalog(url, warehouse="cut", **s3)  # a cut of version 1 of both
        before.load_table("sales.a")
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.support.group_workers", "group", *uris, "1",
             str(groups)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = writer.poll() is not None
            cut = rest_catalog(url, warehouse="cut", **s3)
            a = cut.load_table("sales.a")
            time.sleep(0.05)  # a group may commit in between: the cut still holds
            b = cut.load_table("sales.b")
            version = a.metadata.current_snapshot_id
            assert b.metadata.current_snapshot_id == version  # one group per version
            ids_a = sorted(a.scan().to_arrow().column("id").to_pylist())
            ids_b = sorted(b.scan().to_arrow().column("id").to_pylist())
            assert ids_a == ids_b == list(range(version))
            assert ids_a == s3ddb_ids(uris[0], version, storage_options=options)
            seen.append(version)
            if done:
                break
        _, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err
        assert seen[-1] == groups + 1 and seen == sorted(seen), seen
        # A cut stays where it was read, whatever was committed since.
        for name in ("sales.a", "sales.b"):
            first = before.load_table(name)
            assert first.metadata.current_snapshot_id == 1
            assert first.scan().to_arrow().column("id").to_pylist() == [0]
        # An unknown cut, and a cut of datasets that cannot be read at one instant.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        response = requests.get(f"{url}/v1/cuts/nope/namespaces", headers=auth, timeout=30)
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "NoSuchCutException"


def test_a_cut_of_local_datasets_is_refused(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path))
    with_dataset(registry, "sales.events", str(tmp_path / "events"), [1])
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with running(registry) as url:
        response = requests.get(f"{url}/v1/config?warehouse=cut", headers=auth, timeout=30)
        error = response.json()["error"]
        assert (response.status_code, error["type"]) == (400, "BadRequestException")
        assert "no cut of these datasets" in error["message"] and "s3+ddb://" in error["message"]
        response = requests.get(f"{url}/v1/config?warehouse=other", headers=auth, timeout=30)
        assert response.status_code == 400
