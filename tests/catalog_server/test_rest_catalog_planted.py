"""Planted Iceberg metadata is never served. Whoever can write the bucket can write
``metadata/``: a ``vN.metadata.json`` with its column names swapped (field ids
unchanged), a statistics file in another bucket, an extra property, a rewritten
manifest list, or a whole version planted where s3ddb publishes no Iceberg. The
catalog serves only what s3ddb publishes for the version: it publishes a damaged
file again from the manifest and serves that (the rows are s3ddb's), refuses it
naming the file when it cannot, and never serves a version that does not publish
Iceberg."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.exceptions import NoSuchTableError

import s3ddb
from s3ddb.catalog_server import CatalogRegistry
from s3ddb.catalog_server.table_loading import load_served_table, publish_pinned
from s3ddb.errors import OpenFormatError, PublishedStateError
from tests.catalog_server.support import TOKEN, rest_catalog, running, with_dataset

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROWS = {"a": [1, 2, 3], "b": [100, 200, 300]}


def _table(rows: dict[str, list[int]]) -> pa.Table:
    return pa.table({name: pa.array(values, pa.int64()) for name, values in rows.items()})


def _two_columns(tmp_path: Path) -> tuple[CatalogRegistry, Any, Path]:
    """A registry with ``sales.events``: columns ``a`` and ``b`` (int64), version 1.
    Returns the registry, the dataset and its metadata folder."""
    registry = CatalogRegistry(str(tmp_path))
    ds = with_dataset(registry, "sales.events", str(tmp_path / "events"), _table(ROWS))
    return registry, ds, tmp_path / "events/metadata"


def _swapped_names(doc: dict[str, Any]) -> None:
    for schema in doc["schemas"]:
        for field in schema["fields"]:
            field["name"] = {"a": "b", "b": "a"}[field["name"]]


def _statistics_elsewhere(doc: dict[str, Any]) -> None:
    doc["statistics"] = [
        {
            "snapshot-id": doc["current-snapshot-id"],
            "statistics-path": "s3://attacker-bucket/evil.puffin",
            "file-size-in-bytes": 10,
            "file-footer-size-in-bytes": 5,
            "blob-metadata": [],
        }
    ]


def _extra_property(doc: dict[str, Any]) -> None:
    doc["properties"]["planted"] = "yes"


def _all_three(doc: dict[str, Any]) -> None:
    for plant in (_swapped_names, _statistics_elsewhere, _extra_property):
        plant(doc)


def _planted(good: bytes, plant: Callable[[dict[str, Any]], None]) -> bytes:
    doc = json.loads(good)
    plant(doc)
    return json.dumps(doc).encode()


def test_a_planted_metadata_file_is_published_again_and_reads_s3ddbs_rows(
    tmp_path: Path, caplog: Any
) -> None:
    registry, ds, metadata = _two_columns(tmp_path)
    current = metadata / "v1.metadata.json"
    good = current.read_bytes()
    caplog.set_level(logging.WARNING, "s3ddb.catalog_server")
    with running(registry) as url:
        catalog = rest_catalog(url)
        # Loaded once first: the server's memory of a checked file must not cover a
        # file planted afterwards.
        assert catalog.load_table("sales.events").scan().to_arrow().to_pydict() == ROWS
        for plant in (_swapped_names, _statistics_elsewhere, _extra_property, _all_three):
            caplog.clear()
            current.write_bytes(_planted(good, plant))
            table = catalog.load_table("sales.events")
            assert table.metadata.statistics == [], plant.__name__
            assert "planted" not in table.metadata.properties, plant.__name__
            assert table.scan().to_arrow().sort_by("a").to_pydict() == ROWS, plant.__name__
            assert current.read_bytes() == good, plant.__name__  # published again
            assert any("metadata/v1.metadata.json" in r.getMessage() for r in caplog.records)
        # A version whose manifest list was rewritten before the server read it:
        # checked with its metadata file, and published again.
        ds.insert(_table({"a": [4], "b": [400]}))
        good = (metadata / "v2.metadata.json").read_bytes()
        good_list = (metadata / "snap-2.avro").read_bytes()
        (metadata / "snap-2.avro").write_bytes(good_list[:-1] + bytes([good_list[-1] ^ 1]))
        served = requests.get(f"{url}/v1/namespaces/sales/tables/events", headers=AUTH, timeout=30)
        assert served.status_code == 200, served.text
        assert served.json()["metadata"] == json.loads(good)
        assert (metadata / "snap-2.avro").read_bytes() == good_list
        rows = catalog.load_table("sales.events").scan().to_arrow().sort_by("a").to_pydict()
        assert rows == {"a": [1, 2, 3, 4], "b": [100, 200, 300, 400]}


def test_a_planted_file_that_cannot_be_published_again_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that cannot write the dataset (read-only credentials) refuses the
    damaged file instead of serving it."""
    registry, _, metadata = _two_columns(tmp_path)
    current = metadata / "v1.metadata.json"
    planted = _planted(current.read_bytes(), _all_three)
    current.write_bytes(planted)

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError("write refused")

    monkeypatch.setattr("s3ddb.catalog_server.table_loading.publish_version", refused)
    with running(registry) as url:
        response = requests.get(
            f"{url}/v1/namespaces/sales/tables/events", headers=AUTH, timeout=30
        )
        assert response.status_code == 500, response.text
        error = response.json()["error"]
        assert error["type"] == "ServerErrorException"
        assert "metadata/v1.metadata.json" in error["message"]
        assert "--rebuild" in error["message"]
        assert "attacker-bucket" not in response.text
    assert current.read_bytes() == planted


def test_a_version_without_iceberg_is_not_served_from_a_planted_file(tmp_path: Path) -> None:
    registry = CatalogRegistry(str(tmp_path))
    uri = str(tmp_path / "events")
    ds = with_dataset(registry, "sales.events", uri, [1, 2, 3])
    ds.disable_open_formats()  # version 2: Iceberg off
    ds.delete("id = 1")  # version 3: not published
    metadata = tmp_path / "events/metadata"
    # Version 3 planted: version 1's metadata relabelled, over version 1's manifest list.
    doc = json.loads((metadata / "v1.metadata.json").read_text())
    snapshot = {**doc["snapshots"][0], "snapshot-id": 3}
    snapshot["manifest-list"] = f"{uri}/metadata/snap-3.avro"
    doc.update(snapshots=[snapshot], **{"current-snapshot-id": 3})
    doc["refs"] = {"main": {"snapshot-id": 3, "type": "branch"}}
    doc["snapshot-log"] = [{"snapshot-id": 3, "timestamp-ms": snapshot["timestamp-ms"]}]
    (metadata / "v3.metadata.json").write_text(json.dumps(doc))
    shutil.copy(metadata / "snap-1.avro", metadata / "snap-3.avro")
    with running(registry) as url:
        response = requests.get(
            f"{url}/v1/namespaces/sales/tables/events", headers=AUTH, timeout=30
        )
        assert response.status_code == 404, response.text
        error = response.json()["error"]
        assert error["type"] == "NoSuchTableException"
        assert "version 3 does not publish Iceberg" in error["message"]
        with pytest.raises(NoSuchTableError):
            rest_catalog(url).load_table("sales.events")
    with pytest.raises(OpenFormatError, match="version 3 does not publish Iceberg"):
        load_served_table(uri, {}, version=3)  # a cut's version: the same check


def test_a_cuts_version_is_refused_when_planted_and_mended_when_the_cut_is_made(
    tmp_path: Path,
) -> None:
    """A load under a cut never writes (its version may be older than the newest):
    a planted file is refused, naming it. Making a cut (publish_pinned) publishes
    the version again, as loading the newest does."""
    _, _, metadata = _two_columns(tmp_path)
    uri = str(tmp_path / "events")
    current = metadata / "v1.metadata.json"
    good = current.read_bytes()
    assert load_served_table(uri, {}, version=1).metadata == json.loads(good)
    planted = _planted(good, _swapped_names)
    current.write_bytes(planted)
    with pytest.raises(PublishedStateError, match=r"metadata/v1\.metadata\.json") as refused:
        load_served_table(uri, {}, version=1)
    assert refused.value.path == "metadata/v1.metadata.json"
    assert current.read_bytes() == planted  # not written
    publish_pinned(s3ddb.dataset(uri, 1))
    assert current.read_bytes() == good
    served = load_served_table(uri, {}, version=1)
    assert served.metadata == json.loads(good)
    # Nothing at all published for a cut's version: published when the cut is made.
    current.unlink()
    with pytest.raises(PublishedStateError, match="missing"):
        load_served_table(uri, {}, version=1)
    publish_pinned(s3ddb.dataset(uri, 1))
    assert current.read_bytes() == good
