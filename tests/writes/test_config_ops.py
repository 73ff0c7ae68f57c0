"""Configuration and metadata changes (UpdateConfig) and moving tags, on a local path
and on the local endpoint (DynamoDB)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import s3ddb


@pytest.fixture
def target(location: tuple[str, dict[str, Any] | None]) -> tuple[str, dict[str, Any] | None]:
    uri, so = location
    s3ddb.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), uri, storage_options=so)
    return uri, so


def test_config_and_metadata_change_as_new_versions(target: tuple[str, Any]) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.update_config({"owner": "team-a", "tier": "gold"}, metadata_upsert={"source": "crm"})
    assert (ds.version, ds.config, ds.metadata) == (
        2, {"owner": "team-a", "tier": "gold"}, {"source": "crm"}
    )  # fmt: skip
    ds.delete_config_keys(["tier"])
    ds.update_config(metadata_delete=["source"], metadata_upsert={"team": "a"})
    latest = s3ddb.dataset(uri, storage_options=so)
    state = (latest.version, latest.config, latest.metadata)
    assert state == (4, {"owner": "team-a"}, {"team": "a"})
    assert [v.operation for v in latest.versions()][1:] == ["UpdateConfig"] * 3
    # Time travel: each version keeps its own values; the data never changed.
    assert s3ddb.dataset(uri, 1, storage_options=so).config == {}
    assert s3ddb.dataset(uri, 2, storage_options=so).config["tier"] == "gold"
    assert latest.to_table() == s3ddb.dataset(uri, 1, storage_options=so).to_table()


def test_config_change_rebases_over_an_append_and_reapplies_over_a_config_change(
    target: tuple[str, Any],
) -> None:
    uri, so = target
    stale = s3ddb.dataset(uri, storage_options=so)
    s3ddb.write_dataset(pa.table({"id": pa.array([3], pa.int64())}), uri, mode="append",
                        storage_options=so)  # fmt: skip
    s3ddb.dataset(uri, storage_options=so).update_config({"a": "theirs", "b": "theirs"})
    stale.update_config({"a": "mine"})  # read at version 1: conflicts, re-applied on top
    latest = s3ddb.dataset(uri, storage_options=so)
    assert latest.config == {"a": "mine", "b": "theirs"}
    assert latest.count_rows() == 3 and latest.version == 4


def test_bad_config_changes_write_nothing(target: tuple[str, Any]) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    with pytest.raises(s3ddb.InvalidInputError, match="reserved"):
        ds.update_config(metadata_upsert={"s3ddb.app_txn.stream": "99"})
    with pytest.raises(s3ddb.InvalidInputError, match="at least one key"):
        ds.update_config()
    with pytest.raises(s3ddb.InvalidInputError, match="strings"):
        ds.update_config({"n": 1})  # type: ignore[dict-item]
    assert s3ddb.dataset(uri, storage_options=so).version == 1


def test_tags_move(target: tuple[str, Any]) -> None:
    uri, so = target
    ds = s3ddb.dataset(uri, storage_options=so)
    ds.update_config({"x": "1"})
    ds.tags.create("stable", 1)
    ds.tags.update("stable", 2)
    assert ds.tags.list() == {"stable": 2}
    assert s3ddb.dataset(uri, "stable", storage_options=so).config == {"x": "1"}
    with pytest.raises(s3ddb.VersionNotFoundError):
        ds.tags.update("stable", 9)
    with pytest.raises(s3ddb.VersionNotFoundError):
        ds.tags.update("missing", 1)
    assert ds.tags.list() == {"stable": 2}


def test_config_changes_of_different_keys_rebase_and_of_one_key_reapply(
    target: tuple[str, Any],
) -> None:
    uri, so = target
    first, second, third = (s3ddb.dataset(uri, storage_options=so) for _ in range(3))
    first.update_config({"a": "1"}, metadata_upsert={"m": "x"})
    second.update_config({"b": "2"})  # other keys: rebased, not re-executed
    assert second.last_conflict_retries == 0 and second.version == 3
    third.update_config({"a": "3"})  # the same key: re-read and re-applied on top
    assert third.last_conflict_retries == 1
    latest = s3ddb.dataset(uri, storage_options=so)
    assert (latest.config, latest.metadata) == ({"a": "3", "b": "2"}, {"m": "x"})
    # Replacing the schema's metadata touches all of it: a concurrent edit of one key
    # of it is re-applied on top.
    one, other = (s3ddb.dataset(uri, storage_options=so) for _ in range(2))
    one.replace_schema_metadata({"owner": "a"})
    other.replace_schema_metadata({"owner": "b"})
    assert other.last_conflict_retries == 1
    assert s3ddb.dataset(uri, storage_options=so).schema.metadata == {b"owner": b"b"}
