"""Shallow and deep clones, base paths and UpdateBases, on local paths and on the
local endpoint (S3 without conditional writes + DynamoDB)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit import finalizer
from s3ddb.format.bases import BasePath
from s3ddb.format.manifest import MANIFEST_MAGIC, Manifest
from s3ddb.io.object_store import ObjectStore
from s3ddb.maintenance.drop import drop
from s3ddb.maintenance.verify import verify
from s3ddb.operations import Clone, UpdateBases
from tests.conftest import TEST_BUCKET, TEST_TABLE

Place = Callable[[str], str]
ZERO = dt.timedelta(0)


@pytest.fixture(params=["local", "ddb"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Place, dict[str, Any] | None]:
    """A function naming a fresh dataset location, and the storage options."""
    if request.param == "local":
        return (lambda name: str(tmp_path / name)), None
    aws = request.getfixturevalue("aws")
    run = uuid.uuid4().hex[:10]

    def ddb(name: str) -> str:
        return f"s3+ddb://{TEST_BUCKET}/clones-{run}-{name}?ddbTableName={TEST_TABLE}"

    return ddb, aws.storage_options()


def rows(ids: list[int], tag: str = "src") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}-{i}" for i in ids]})


def ids(ds: s3ddb.Dataset) -> list[int]:
    return sorted(ds.to_table(["id"])["id"].to_pylist())


def snapshot(uri: str, so: dict[str, Any] | None) -> dict[str, bytes]:
    """Every object under the dataset root, with its bytes, once this process's
    background finishing of s3+ddb commits (final manifest copies, staged objects'
    deletion) is done: only then is the listing stable."""
    finalizer.drain()
    store = ObjectStore(uri, so)
    return {m.path: store.get(m.path) for m in store.list("")}


def make_source(uri: str, so: dict[str, Any] | None) -> s3ddb.Dataset:
    """v1: ids 0..9 in two fragments; v2: ids 0, 1 deleted (a deletion file)."""
    ds = s3ddb.write_dataset(rows(list(range(10))), uri, storage_options=so, max_rows_per_file=5)
    ds.delete("id < 2")
    return ds


@pytest.mark.usefixtures("instant_cleanup")
def test_shallow_clone_reads_the_source_and_writes_never_touch_it(
    place: tuple[Place, Any],
) -> None:
    name, so = place
    src = make_source(name("src"), so)
    src.tags.create("snap", 2)
    src.insert(rows([50]))  # v3: not in the clone
    clone = src.shallow_clone(name("clone"), version="snap")
    before = snapshot(src.uri, so)
    assert (clone.version, ids(clone)) == (1, list(range(2, 10)))
    assert clone.manifest.cloned_from_version == 2
    (base,) = clone.manifest.base_paths
    assert base.path == ObjectStore(src.uri, so).url and base.name == "snap"
    assert all(d.base_id == base.id for f in clone.manifest.fragments for d in f.files)
    assert clone.versions()[0].operation == "Clone"

    # Writes on the clone: append, delete in a cloned fragment that already has a
    # deletion file in the source (merged into a new one in the clone's root), update,
    # compaction, cleanup.
    clone.insert(rows([100, 101], "clone"))
    clone.delete("id = 3 OR id = 100")
    deleted = [f.deletion_file for f in clone.manifest.fragments if f.deletion_file]
    assert deleted and all(d.base_id is None for d in deleted)
    clone.update({"v": "'changed'"}, where="id = 7")
    upsert = clone.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    upsert.execute(rows([5, 300], "upsert"))
    clone.optimize.compact_files(target_rows_per_fragment=100)
    own = snapshot(clone.uri, so)
    stats = clone.cleanup_old_versions(older_than=ZERO, delete_unverified=True)
    assert stats.versions_removed  # the clone's own old versions
    # Every file it counts is one of the clone's own that is now gone.
    gone = set(own) - set(snapshot(clone.uri, so))
    assert sum(stats.files.values()) == len(gone)
    assert stats.bytes_removed == sum(len(own[p]) for p in gone)
    latest = s3ddb.dataset(clone.uri, storage_options=so)
    assert ids(latest) == [2, 4, 5, 6, 7, 8, 9, 101, 300]
    assert latest.to_table(filter="id = 7")["v"].to_pylist() == ["changed"]
    assert latest.to_table(filter="id = 5")["v"].to_pylist() == ["upsert-5"]
    assert snapshot(src.uri, so) == before  # byte-identical: nothing written or deleted

    # The source is unchanged and still reads every version.
    assert ids(s3ddb.dataset(src.uri, 2, storage_options=so)) == list(range(2, 10))
    assert ids(s3ddb.dataset(src.uri, storage_options=so)) == [*range(2, 10), 50]


def test_schema_changes_and_an_index_on_a_shallow_clone_read_through_its_base(
    place: tuple[Place, Any],
) -> None:
    name, so = place
    src = make_source(name("src"), so)
    src.create_scalar_index("id")
    clone = src.shallow_clone(name("clone"))
    before = snapshot(src.uri, so)
    # An index is the source's: a clone starts without one (create it on the clone).
    assert clone.list_indices() == []
    clone.add_columns({"w": "CAST(id * 10 AS INT)"})
    assert clone.schema.field("w").type == pa.int32()
    clone.alter_columns({"path": "w", "data_type": pa.int64()})  # rewrites the column
    clone.alter_columns({"path": "v", "nullable": False})  # checks every visible row
    clone.create_scalar_index("w")
    got = clone.to_table(filter="w = 70").to_pylist()
    assert got == [{"id": 7, "v": "src-7", "w": 70}]
    assert clone.count_rows("w >= 50") == 5
    assert snapshot(src.uri, so) == before
    assert ids(s3ddb.dataset(src.uri, storage_options=so)) == list(range(2, 10))


def test_shallow_clone_time_travel_and_chains(place: tuple[Place, Any]) -> None:
    name, so = place
    src = make_source(name("src"), so)
    clone = src.shallow_clone(name("clone"), version=1)  # a version number
    assert ids(clone) == list(range(10))
    clone.delete("id >= 8")
    # A clone of the clone carries its bases over and adds the clone's root.
    chain = clone.shallow_clone(name("chain"))
    assert ids(chain) == list(range(8))
    assert [b.path for b in chain.manifest.base_paths] == [
        ObjectStore(src.uri, so).url,
        ObjectStore(clone.uri, so).url,
    ]
    chain.insert(rows([200]))
    assert ids(s3ddb.dataset(chain.uri, 1, storage_options=so)) == list(range(8))
    assert ids(s3ddb.dataset(clone.uri, 1, storage_options=so)) == list(range(10))
    assert ids(s3ddb.dataset(clone.uri, storage_options=so)) == list(range(8))
    assert ids(s3ddb.dataset(chain.uri, storage_options=so)) == [*range(8), 200]
    assert verify(chain.uri, so).healthy
    # A deep clone of the chain copies from every base it reads.
    deep = s3ddb.dataset(chain.uri, storage_options=so).deep_clone(name("deep"))
    assert deep.manifest.base_paths == () and ids(deep) == [*range(8), 200]


def test_clone_conflicts_with_concurrent_append_delete_and_restore(
    place: tuple[Place, Any],
) -> None:
    name, so = place
    clone = make_source(name("src"), so).shallow_clone(name("clone"))
    stale = s3ddb.dataset(clone.uri, storage_options=so)  # pinned at version 1
    s3ddb.dataset(clone.uri, storage_options=so).insert(rows([20, 21]))
    s3ddb.dataset(clone.uri, storage_options=so).delete("id = 4")  # merges base deletions
    stale.delete("id >= 9", conflict_retries=0)  # rebases: reads appended rows and bases
    assert ids(s3ddb.dataset(clone.uri, storage_options=so)) == [2, 3, 5, 6, 7, 8]
    pinned = s3ddb.dataset(clone.uri, storage_options=so)
    s3ddb.dataset(clone.uri, 1, storage_options=so).restore()
    with pytest.raises(s3ddb.IncompatibleTransactionError):
        pinned.delete("id = 2")
    assert ids(s3ddb.dataset(clone.uri, storage_options=so)) == list(range(2, 10))


def test_deep_clone_copies_and_outlives_the_source(place: tuple[Place, Any]) -> None:
    name, so = place
    src = make_source(name("src"), so)
    deep = src.deep_clone(name("deep"), version=2)
    assert deep.manifest.base_paths == ()
    assert all(d.base_id is None for f in deep.manifest.fragments for d in f.files)
    assert ids(deep) == list(range(2, 10))
    source_files = {p for p in snapshot(src.uri, so) if p.startswith(("data/", "_deletions/"))}
    copied = {p for p in snapshot(deep.uri, so) if p.startswith(("data/", "_deletions/"))}
    assert len(copied) == len(source_files) and not copied & source_files  # new names

    drop(src.uri, so)
    assert snapshot(src.uri, so) == {}
    assert ids(s3ddb.dataset(deep.uri, storage_options=so)) == list(range(2, 10))
    deep.delete("id = 2")
    assert ids(s3ddb.dataset(deep.uri, storage_options=so)) == list(range(3, 10))
    assert verify(deep.uri, so).healthy


def test_deep_clone_deletes_its_copies_when_the_commit_fails(
    place: tuple[Place, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, so = place
    src = make_source(name("src"), so)
    monkeypatch.setenv("S3DDB_FAILPOINTS", "commit.after_transaction_file=raise")
    with pytest.raises(s3ddb.S3DDBError):
        src.deep_clone(name("deep"))
    monkeypatch.delenv("S3DDB_FAILPOINTS")
    assert snapshot(name("deep"), so) == {}
    assert ids(src.deep_clone(name("deep"))) == list(range(2, 10))


def test_clone_onto_an_existing_dataset_is_refused(place: tuple[Place, Any]) -> None:
    name, so = place
    src = make_source(name("src"), so)
    other = s3ddb.write_dataset(rows([1]), name("other"), storage_options=so)
    before = snapshot(other.uri, so)
    with pytest.raises(s3ddb.DatasetAlreadyExistsError):
        src.shallow_clone(other.uri)
    with pytest.raises(s3ddb.DatasetAlreadyExistsError):
        src.deep_clone(other.uri)
    with pytest.raises(s3ddb.InvalidInputError, match="onto itself"):
        src.shallow_clone(src.uri)
    with pytest.raises(s3ddb.VersionNotFoundError):
        src.shallow_clone(name("nope"), version="no-such-tag")
    assert snapshot(other.uri, so) == before
    # A Clone is only a first commit.
    op = Clone(True, "", 1, "s3://b/x", template=src.manifest)
    with pytest.raises(s3ddb.InvalidInputError, match="first commit"):
        s3ddb.Dataset.commit(other.uri, op, 1, storage_options=so)
    assert snapshot(other.uri, so) == before


@pytest.mark.usefixtures("instant_cleanup")
def test_cleanup_of_the_source_keeps_a_tagged_clone_source(place: tuple[Place, Any]) -> None:
    name, so = place
    src = make_source(name("src"), so)
    src.tags.create("clone-base", 1)  # what docs/clones.md tells users to do
    tagged = src.shallow_clone(name("tagged"), version="clone-base")
    untagged = src.shallow_clone(name("untagged"), version=2)
    src.insert(rows([30]), mode="overwrite")  # v3: no file of v1 or v2 is used now
    stats = s3ddb.dataset(src.uri, storage_options=so).cleanup_old_versions(older_than=ZERO)
    assert stats.versions_removed == [2]
    assert ids(s3ddb.dataset(tagged.uri, storage_options=so)) == list(range(10))
    assert verify(tagged.uri, so).healthy
    # Version 2's deletion file is gone with it: the untagged clone cannot read, and
    # verify names the base the file is missing from.
    with pytest.raises(s3ddb.ManifestCorruptError):
        s3ddb.dataset(untagged.uri, storage_options=so).to_table()
    problems = verify(untagged.uri, so).problems
    assert [p.kind for p in problems] == ["missing_base_file"]
    assert ObjectStore(src.uri, so).url in problems[0].meaning


def test_update_bases(place: tuple[Place, Any]) -> None:
    name, so = place
    ds = s3ddb.write_dataset(rows([1]), name("ds"), storage_options=so)
    stale = ds.version
    base = BasePath(7, "s3://other-bucket/shared", name="shared")
    ds = s3ddb.Dataset.commit(ds.uri, UpdateBases((base,)), ds.version, storage_options=so)
    assert ds.manifest.base_paths == (base,) and ds.version == 2
    assert s3ddb.dataset(ds.uri, 1, storage_options=so).manifest.base_paths == ()
    # Rebases over an append; a concurrent UpdateBases makes it re-read.
    ds.insert(rows([2]))
    other = UpdateBases((BasePath(8, "s3://other-bucket/more"),))
    with pytest.raises(s3ddb.RetryableCommitConflictError):
        s3ddb.Dataset.commit(ds.uri, other, stale, storage_options=so)
    done = s3ddb.Dataset.commit(ds.uri, other, ds.version, storage_options=so)
    assert [b.id for b in done.manifest.base_paths] == [7, 8] and ids(done) == [1, 2]
    # Ids, roots and names are never reused; nothing is committed.
    for bad in (BasePath(7, "s3://xbucket/y"), BasePath(9, "s3://other-bucket/shared")):
        with pytest.raises(s3ddb.PathOutsideDatasetError):
            s3ddb.Dataset.commit(ds.uri, UpdateBases((bad,)), done.version, storage_options=so)
    assert s3ddb.dataset(ds.uri, storage_options=so).version == done.version
    # Rebases over a concurrent delete and restore too (it touches no data).
    s3ddb.dataset(ds.uri, storage_options=so).delete("id = 2")
    s3ddb.dataset(ds.uri, 1, storage_options=so).restore()
    third = BasePath(9, "s3://other-bucket/third")
    last = s3ddb.Dataset.commit(ds.uri, UpdateBases((third,)), done.version, storage_options=so)
    assert last.manifest.base_paths == (third,)  # on top of version 1's (none)
    assert ids(last) == [1] and [v.operation for v in last.versions()][-1] == "UpdateBases"


@pytest.mark.parametrize(
    "path",
    [
        "relative/dir",
        "/abs/but/no/scheme",
        "file://relative",
        "file:///a/../etc",
        "s3://bucket/a/./b",
        "s3://bucket/a//b",
        "s3://bucket/p?x=1",
        "http://example.com/x",
        "s3+ddb://bucket/p?ddbTableName=t",
        "s3://bucket",
        "",
    ],
)
def test_bad_base_paths_are_refused(path: str) -> None:
    with pytest.raises(s3ddb.PathOutsideDatasetError):
        BasePath(1, path)


def test_bad_base_path_ids_are_refused() -> None:
    with pytest.raises(s3ddb.PathOutsideDatasetError):
        BasePath(0, "s3://bkt/p")
    with pytest.raises(s3ddb.PathOutsideDatasetError, match="twice"):
        UpdateBases((BasePath(1, "s3://bkt/p"), BasePath(1, "s3://bkt/q")))
    with pytest.raises(s3ddb.InvalidInputError):
        UpdateBases(())


def test_a_planted_manifest_with_a_bad_base_is_refused(tmp_path: Path) -> None:
    src = make_source(str(tmp_path / "src"), None)
    clone = src.shallow_clone(str(tmp_path / "clone"))
    (path,) = (tmp_path / "clone" / "_versions").iterdir()
    good = Manifest.from_bytes(path.read_bytes(), str(path))
    from s3ddb.format.framing import frame

    for bad_path in ("file:///tmp/../etc", "file:///tmp/x/../../etc"):
        message = good.to_pb()
        message.base_paths[0].path = bad_path
        path.write_bytes(frame(message.SerializeToString(), MANIFEST_MAGIC))
        with pytest.raises(s3ddb.PathOutsideDatasetError, match="manifest"):
            s3ddb.dataset(clone.uri).to_table()
    # A file of a base the manifest does not declare.
    message = good.to_pb()
    del message.base_paths[:]
    path.write_bytes(frame(message.SerializeToString(), MANIFEST_MAGIC))
    with pytest.raises(s3ddb.PathOutsideDatasetError, match="declares no such base"):
        s3ddb.dataset(clone.uri).to_table()  # fragments are checked when decoded


def test_deep_clone_from_a_local_path_to_s3ddb(aws: Any, tmp_path: Path) -> None:
    """Across stores the bytes go through this process (no server-side copy)."""
    src = make_source(str(tmp_path / "src"), None)
    target = f"s3+ddb://{TEST_BUCKET}/clones-x-{uuid.uuid4().hex[:8]}?ddbTableName={TEST_TABLE}"
    deep = src.deep_clone(target, storage_options=aws.storage_options())
    assert ids(s3ddb.dataset(target, storage_options=aws.storage_options())) == list(range(2, 10))
    assert deep.storage_options == aws.storage_options()


def test_deep_clone_on_s3_copies_server_side(aws: Any) -> None:
    so = aws.storage_options()
    run = uuid.uuid4().hex[:8]
    src = make_source(f"s3+ddb://{TEST_BUCKET}/clones-{run}-src?ddbTableName={TEST_TABLE}", so)
    files = sum(len(f.files) + (f.deletion_file is not None) for f in src.manifest.fragments)
    aws.clear_requests()
    # (This endpoint's S3 ignores If-None-Match; the clone has one writer.)
    trusted = {**so, "s3_conditional_writes": "trusted"}
    src.deep_clone(f"s3://{TEST_BUCKET}/clones-{run}-deep", storage_options=trusted)
    copies = [
        r.path
        for r in aws.requests
        if r.operation == "CopyObject" and f"{run}-deep/" in r.path and "/_versions/" not in r.path
    ]
    assert files == 3 and len(copies) == files, copies
