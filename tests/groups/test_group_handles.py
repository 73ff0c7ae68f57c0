"""Every writing member of a Dataset reached through a group's handle
(``tx.dataset(uri)`` in ``s3ddb.atomic``) is either held until the group commits or
refused with ``AtomicGroupError``: never committed at once, outside the group. The
walk covers every public member of ``Dataset``; a new member must be classified here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import AtomicGroupError, DatasetNotFoundError
from s3ddb.operations import Append
from tests.conftest import TEST_BUCKET, TEST_TABLE

Call = Callable[[s3ddb.Dataset, str], Any]


def _table(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "tag": [f"t{i}" for i in ids]})


def _merge(ds: s3ddb.Dataset, _target: str) -> Any:
    builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    return builder.execute(_table(1, 9))


#: Held in the group: nothing is committed until the block ends, then all is.
HELD: dict[str, Call] = {
    "insert": lambda ds, _: ds.insert(_table(9)),
    "delete": lambda ds, _: ds.delete("id = 1"),
    "update": lambda ds, _: ds.update({"tag": "'x'"}, where="id = 1"),
    "merge_insert": _merge,
    "update_config": lambda ds, _: ds.update_config({"k2": "v"}),
    "delete_config_keys": lambda ds, _: ds.delete_config_keys(["k"]),
    "add_columns": lambda ds, _: ds.add_columns({"two": "id * 2"}),
    "drop_columns": lambda ds, _: ds.drop_columns(["tag"]),
    "alter_columns": lambda ds, _: ds.alter_columns({"path": "tag", "name": "label"}),
    "replace_schema_metadata": lambda ds, _: ds.replace_schema_metadata({"a": "b"}),
    "replace_field_metadata": lambda ds, _: ds.replace_field_metadata("tag", {"a": "b"}),
    "update_metadata": lambda ds, _: ds.update_metadata({"a": "b"}),
    "update_schema_metadata": lambda ds, _: ds.update_schema_metadata({"a": "b"}),
    "update_field_metadata": lambda ds, _: ds.update_field_metadata({"tag": {"a": "b"}}),
    "truncate_table": lambda ds, _: ds.truncate_table(),
    "create_scalar_index": lambda ds, _: ds.create_scalar_index("id"),
    "restore": lambda ds, _: ds.restore(),
    "checkout_version": lambda ds, _: ds.checkout_version(1).restore(),
    "at": lambda ds, _: ds.at(ds.manifest).restore(),
}

#: Refused: each would act at once.
REFUSED: dict[str, Call] = {
    "tags": lambda ds, _: ds.tags.create("new", 1),
    "tags.update": lambda ds, _: ds.tags.update("old", 2),
    "tags.delete": lambda ds, _: ds.tags.delete("old"),
    "cleanup_old_versions": lambda ds, _: ds.cleanup_old_versions(),
    "shallow_clone": lambda ds, target: ds.shallow_clone(target),
    "deep_clone": lambda ds, target: ds.deep_clone(target),
    "optimize": lambda ds, _: ds.optimize.compact_files(),
    "commit": lambda ds, _: s3ddb.Dataset.commit(ds, Append(ds.get_fragments()), ds.version),
    "checkout_latest": lambda ds, _: ds.checkout_latest(),
    "checkout_version.delete": lambda ds, _: ds.checkout_version(1).delete("id = 1"),
    # Turning publication on or off, and publishing again, act at once.
    "enable_open_formats": lambda ds, _: ds.enable_open_formats(),
    "disable_open_formats": lambda ds, _: ds.disable_open_formats(),
    "publish_open_formats": lambda ds, _: ds.publish_open_formats(),
    "rebuild_open_formats": lambda ds, _: ds.rebuild_open_formats(),
}

#: Static: takes a URI, not the handle (``Dataset.drop(uri)``).
STATIC = {"drop"}

#: Reads: nothing is written.
READS = {
    "base_is_fresh", "change_batches", "changes", "commit_config", "config", "count_rows",
    "delta",
    "data_storage_version",
    "describe_indices", "files", "fragment_ids", "get_fragment", "get_fragments",
    "get_version", "group_id", "handler", "has_index", "has_stable_row_ids", "head",
    "index_statistics", "initial_storage_options", "last_commit", "last_conflict_retries",
    "latest_storage_options", "latest_version", "list_indices", "manifest",
    "max_field_id", "metadata", "open_formats", "refuse_in_group", "scanner", "schema",
    "schema_metadata", "slice", "stats", "storage_options", "take", "to_batches",
    "to_pandas", "to_table", "uri", "validate", "version", "version_refs", "versions",
}  # fmt: skip

#: The handle's own state, which s3ddb's groups and openers set (where it is pinned,
#: whether that was seen as the newest, its group, its last commit): nothing is written.
HANDLE = {"enter_group", "forget_newest_seen", "leave_group", "move_to", "record_commit"}


def test_every_public_member_of_dataset_is_classified() -> None:
    members = {n for n in dir(s3ddb.Dataset) if not n.startswith("_")}
    classified = READS | HANDLE | STATIC | {n.split(".")[0] for n in [*HELD, *REFUSED]}
    assert members - classified == set(), "classify these members for groups"
    assert classified - members == set()


@pytest.fixture
def pair() -> Iterator[tuple[str, str]]:
    """Two memory:// datasets, each with versions 1 and 2 (a config key ``k`` and a
    tag ``old`` on version 1)."""
    root = f"memory://handles-{uuid.uuid4().hex}"
    a, b = f"{root}/a", f"{root}/b"
    for uri in (a, b):
        s3ddb.write_dataset(_table(1, 2, 3), uri)
        s3ddb.dataset(uri).update_config({"k": "v"})
    s3ddb.dataset(a).tags.create("old", 1)
    yield a, b
    import fsspec

    fsspec.filesystem("memory").rm("/" + root.split("://", 1)[1], recursive=True)


@pytest.mark.parametrize("name", sorted(HELD))
def test_a_change_through_a_group_handle_is_held(pair: tuple[str, str], name: str) -> None:
    a, b = pair
    with s3ddb.atomic() as tx:
        HELD[name](tx.dataset(a), f"{a}-clone")
        tx.dataset(b).insert(_table(7))
        # Nothing is committed before the group decides.
        assert s3ddb.dataset(a).version == 2
        assert s3ddb.dataset(b).version == 2
    assert s3ddb.dataset(a).version == 3
    assert s3ddb.dataset(b).version == 3


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_immediate_change_through_a_group_handle_is_refused(
    pair: tuple[str, str], name: str
) -> None:
    a, b = pair
    target = f"{a}-clone"
    with s3ddb.atomic() as tx:
        handle = tx.dataset(a)
        tx.dataset(b).insert(_table(7))
        with pytest.raises(AtomicGroupError, match=f"group {tx.group_id}"):
            REFUSED[name](handle, target)
        assert s3ddb.dataset(a).version == 2  # nothing committed at once
        assert s3ddb.dataset(a).tags.list() == {"old": 1}
        with pytest.raises(DatasetNotFoundError):
            s3ddb.dataset(target)
        assert handle.version == 2 and handle.to_table().num_rows == 3
    # The group is unharmed by the refusal: it commits the rest.
    assert [s3ddb.dataset(u).version for u in (a, b)] == [2, 3]


def test_a_checked_out_version_is_restored_in_the_group_and_released_after(
    pair: tuple[str, str],
) -> None:
    a, b = pair
    with s3ddb.atomic() as tx:
        orders = tx.dataset(a)
        orders.delete("id = 1")
        old = orders.checkout_version(1)
        assert old.to_table().num_rows == 3  # reads the old version
        old.restore()  # on top of the group's delete
        assert orders.version == 4 and orders.to_table().num_rows == 3
        tx.dataset(b).delete("id = 2")
        assert s3ddb.dataset(a).version == 2
    assert [s3ddb.dataset(u).version for u in (a, b)] == [4, 3]
    assert sorted(s3ddb.dataset(a).to_table()["id"].to_pylist()) == [1, 2, 3]
    assert s3ddb.dataset(a).config.get("k") is None  # version 1 had no config
    # After the group, the checked-out handle is an ordinary dataset again.
    old.tags.create("after", 1)
    assert s3ddb.dataset(a).tags.get("after") == 1


def test_compaction_in_a_group_is_refused_before_anything_is_written(aws: Any) -> None:
    so = aws.storage_options()
    prefix = f"handles-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    for uri in (a, b):
        s3ddb.write_dataset(_table(1), uri, storage_options=so)
        s3ddb.dataset(uri, storage_options=so).insert(_table(2))
    files = {m.path for m in s3ddb.dataset(a, storage_options=so).handler.store.list("")}
    with s3ddb.atomic(storage_options=so) as tx:
        tx.dataset(b).insert(_table(3))
        with pytest.raises(AtomicGroupError, match="compact before or after the group"):
            tx.dataset(a).optimize.compact_files()
    after = {m.path for m in s3ddb.dataset(a, storage_options=so).handler.store.list("")}
    assert after == files  # no ReserveFragments version, no rewritten file
    assert [s3ddb.dataset(u, storage_options=so).version for u in (a, b)] == [2, 3]


def test_two_datasets_rolled_back_together_on_dynamodb(aws: Any) -> None:
    """Restoring an old version of two s3+ddb:// datasets in one group: both rows
    are claimed in one transaction, each on top of its newest version."""
    so = aws.storage_options()
    prefix = f"handles-{uuid.uuid4().hex[:10]}"
    a, b = (f"s3+ddb://{TEST_BUCKET}/{prefix}/{n}?ddbTableName={TEST_TABLE}" for n in "ab")
    for uri in (a, b):
        s3ddb.write_dataset(_table(1), uri, storage_options=so)
        s3ddb.dataset(uri, storage_options=so).insert(_table(2))
    with s3ddb.atomic(storage_options=so) as tx:
        for uri in (a, b):
            tx.dataset(uri).checkout_version(1).restore()
            with pytest.raises(AtomicGroupError, match="checked out"):
                tx.dataset(uri).checkout_version(1).insert(_table(5))
    for uri in (a, b):
        ds = s3ddb.dataset(uri, storage_options=so)
        assert ds.version == 3 and ds.to_table()["id"].to_pylist() == [1]
        assert ds.versions()[-1].group_id == tx.group_id
