"""A group commit (``s3ddb.atomic``) names its cut in every member's published
metadata: the Iceberg snapshot summary property and the Delta commitInfo field
``s3ddb.cut`` = the group's id, derived from the version's manifest. An outside
reader picks each table's snapshot naming one cut and reads the tables as s3ddb's
own group read gives them; a version committed alone names no cut."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
import s3ddb.commit.finalizer
from s3ddb.errors import PublishedStateError, StoredMetadataError
from s3ddb.open_formats.model import CUT_KEY, GROUP_METADATA_KEY
from s3ddb.open_formats.publisher import table_version


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def _static_table(metadata: str, options: dict[str, str]) -> Any:
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(
        metadata,
        properties={
            "s3.endpoint": options["endpoint_url"],
            "s3.access-key-id": options["aws_access_key_id"],
            "s3.secret-access-key": options["aws_secret_access_key"],
            "s3.region": options["region"],
        },
    )


def _delta_history(aws: Any, bucket: str, key_prefix: str, into: Path) -> list[dict[str, Any]]:
    """deltalake's history (each commit's commitInfo) of the Delta log under
    ``key_prefix``, copied to ``into`` first: deltalake's own S3 client would wait on
    the embedded endpoint, which serves from this process, while holding the GIL."""
    from deltalake import DeltaTable

    s3 = aws.boto3_client("s3")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{key_prefix}/_delta_log/")
    for item in listed["Contents"]:
        target = into / item["Key"][len(key_prefix) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
    return list(DeltaTable(str(into)).history())


def test_outside_readers_read_two_tables_at_one_group_cut(aws: Any, tmp_path: Path) -> None:
    from tests.conftest import TEST_BUCKET, TEST_TABLE

    options = aws.storage_options()
    folder = f"cuts-{os.urandom(6).hex()}"
    prefix = f"{TEST_BUCKET}/{folder}"
    uris = {
        name: f"s3+ddb://{prefix}/{name}?ddbTableName={TEST_TABLE}" for name in ("orders", "ledger")
    }
    for uri in uris.values():
        s3ddb.write_dataset(
            pa.table({"id": pa.array([0], pa.int64())}),
            uri,
            open_formats=["iceberg", "delta"],
            storage_options=options,
        )

    # Each cut: the group's id and the rows s3ddb's own group read gives of each table.
    cuts: dict[str, dict[str, list[int]]] = {}
    solo: dict[str, int] = {}
    for round_ in range(1, 4):
        with s3ddb.atomic() as tx:
            orders = tx.dataset(uris["orders"], storage_options=options)
            ledger = tx.dataset(uris["ledger"], storage_options=options)
            orders.insert(pa.table({"id": pa.array([round_ * 10], pa.int64())}))
            ledger.insert(pa.table({"id": pa.array([round_ * 100], pa.int64())}))
            if round_ == 2:  # two versions of one table in one group
                orders.delete(f"id = {10}")
        read = s3ddb.snapshot(list(uris.values()), storage_options=options)
        cuts[tx.group_id] = {name: _ids(read[uri].to_table()) for name, uri in uris.items()}
        # A commit outside any group, between groups: it names no cut.
        alone = s3ddb.dataset(uris["orders"], storage_options=options)
        alone.insert(pa.table({"id": pa.array([round_ * 10 + 1], pa.int64())}))
        solo["orders"] = alone.version
    s3ddb.commit.finalizer.drain()

    for name, uri in uris.items():
        ds = s3ddb.dataset(uri, storage_options=options)
        root = f"s3://{prefix}/{name}"
        table = _static_table(f"{root}/metadata/v{ds.version}.metadata.json", options)
        named: dict[str, list[int]] = {}
        for snapshot in table.metadata.snapshots:
            cut = snapshot.summary.additional_properties.get(CUT_KEY)
            if cut is not None:
                named.setdefault(cut, []).append(snapshot.snapshot_id)
        assert set(named) == set(cuts), name
        for cut, rows in cuts.items():
            # A table's state at a cut is its newest snapshot naming it, which the
            # cut's tag names too (engines read VERSION AS OF 's3ddb-cut-<id>').
            at_cut = table.scan(snapshot_id=max(named[cut])).to_arrow()
            assert _ids(at_cut) == rows[name], (name, cut)
            tagged = table.snapshot_by_name(f"s3ddb-cut-{cut}")
            assert tagged is not None and tagged.snapshot_id == max(named[cut]), (name, cut)
            assert table.metadata.refs[f"s3ddb-cut-{cut}"].snapshot_ref_type == "tag"
        assert {r for r in table.metadata.refs if r != "main"} == {
            f"s3ddb-cut-{cut}" for cut in cuts
        }
        unnamed = [
            s.snapshot_id
            for s in table.metadata.snapshots
            if CUT_KEY not in s.summary.additional_properties
        ]
        assert (solo["orders"] in unnamed) == (name == "orders")

        history = _delta_history(aws, TEST_BUCKET, f"{folder}/{name}", tmp_path / name)
        by_version = {entry["version"]: entry for entry in history}
        for cut in cuts:
            for version in named[cut]:  # Iceberg snapshot id == s3ddb version == Delta version
                assert by_version[version][CUT_KEY] == cut, (name, version)
        if name == "orders":
            assert CUT_KEY not in by_version[solo["orders"]]


def test_a_group_id_is_the_versions_own_and_checked(tmp_path: Path) -> None:
    """The group id is recorded in the manifest of the group's versions only (not
    carried to a later version, nor to a clone); a manifest recording something that
    is not a group id is refused by publication."""
    grouped = f"memory://cuts-{os.urandom(6).hex()}/events"
    s3ddb.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), grouped)
    with s3ddb.atomic() as tx:
        tx.dataset(grouped).insert(pa.table({"id": pa.array([2], pa.int64())}))
    member = s3ddb.dataset(grouped)
    assert member.manifest.table_metadata[GROUP_METADATA_KEY] == tx.group_id
    clone = member.shallow_clone(f"{grouped}-clone")
    assert GROUP_METADATA_KEY not in clone.manifest.table_metadata
    member.insert(pa.table({"id": pa.array([3], pa.int64())}))
    assert GROUP_METADATA_KEY not in member.manifest.table_metadata

    uri = str(tmp_path / "events")
    ds = s3ddb.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri)
    assert GROUP_METADATA_KEY not in ds.manifest.table_metadata
    # Set outside a group it is not recorded (only a group commit names its group).
    ds.update_metadata({GROUP_METADATA_KEY: "forged"})
    assert GROUP_METADATA_KEY not in ds.manifest.table_metadata
    store = ds.handler.store
    bad = ds.manifest.evolve(
        table_metadata={**ds.manifest.table_metadata, GROUP_METADATA_KEY: "../../etc\n"}
    )
    with pytest.raises(StoredMetadataError, match=GROUP_METADATA_KEY):
        table_version(store, bad, None)
    good = ds.manifest.evolve(
        table_metadata={**ds.manifest.table_metadata, GROUP_METADATA_KEY: "a-group-id"}
    )
    assert table_version(store, good, None).cut == "a-group-id"


def test_a_changed_or_removed_published_cut_is_refused_naming_the_file() -> None:
    """The published cut is output, the manifest the truth: metadata whose cut is not
    the version's (planted, or removed) is not built on."""
    from s3ddb.open_formats.delta import DeltaWriter
    from s3ddb.open_formats.delta_state import commit_path
    from s3ddb.open_formats.iceberg import IcebergWriter
    from s3ddb.open_formats.iceberg_state import version_files

    uri = f"memory://cuts-{os.urandom(6).hex()}/events"
    s3ddb.write_dataset(
        pa.table({"id": pa.array([1], pa.int64())}), uri, open_formats=["iceberg", "delta"]
    )
    with s3ddb.atomic() as tx:
        tx.dataset(uri).insert(pa.table({"id": pa.array([2], pa.int64())}))
    ds = s3ddb.dataset(uri)
    store = ds.handler.store
    expected = table_version(store, ds.manifest, None)
    assert (ds.version, expected.cut) == (2, tx.group_id)
    iceberg_path, delta_path = version_files(2)[0], commit_path(2)
    iceberg, delta = store.get(iceberg_path), store.get(delta_path)
    assert IcebergWriter().load_state(store, expected) is not None
    assert DeltaWriter().load_state(store, expected) is not None

    for planted in ("another-group", None):
        doc = json.loads(iceberg)
        summary = next(s for s in doc["snapshots"] if s["snapshot-id"] == 2)["summary"]
        if planted is None:
            del summary[CUT_KEY]
        else:
            summary[CUT_KEY] = planted
        store.put(iceberg_path, json.dumps(doc).encode())
        with pytest.raises(PublishedStateError, match=r"v2\.metadata\.json"):
            IcebergWriter().load_state(store, expected)

        first, rest = delta.split(b"\n", 1)
        info = json.loads(first)
        if planted is None:
            del info["commitInfo"][CUT_KEY]
        else:
            info["commitInfo"][CUT_KEY] = planted
        store.put(delta_path, json.dumps(info, separators=(",", ":")).encode() + b"\n" + rest)
        with pytest.raises(PublishedStateError, match=r"00000000000000000002\.json"):
            DeltaWriter().load_state(store, expected)
