"""The Delta Lake log s3ddb publishes (s3ddb.open_formats.delta), read back by
deltalake and DuckDB's delta extension, version by version."""

from __future__ import annotations

import decimal
import json
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError

from s3ddb.errors import InvalidInputError, PublishedStateError, StoredMetadataError
from s3ddb.io.object_store import ObjectStore
from s3ddb.open_formats.deletion_vectors import (
    DV_FILE_VERSION,
    PORTABLE_MAGIC,
    deletion_vector_uuid,
    deserialize_positions,
    dv_file_bytes,
    parse_u_descriptor,
    serialize_positions,
    z85_decode,
    z85_encode,
)
from s3ddb.open_formats.delta import DeltaWriter
from s3ddb.open_formats.delta_log import expire_log, foreign_problems
from s3ddb.open_formats.delta_state import (
    LAST_CHECKPOINT,
    LOG_DIR,
    DeltaState,
    Protocol,
    checkpoint_bytes,
    checkpoint_path,
    commit_path,
    deletion_files,
    version_files,
)
from s3ddb.open_formats.model import (
    DeletedPositions,
    FileGroup,
    Publication,
    PublishedFile,
    TableVersion,
)
from tests.open_formats.readers import duckdb_connection

TABLE_UUID = "6f1c1a52-6d0e-4f43-9b54-3f2a4c1d9e01"
WRITER = DeltaWriter()


def fid(name: str, type_: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable, metadata={b"PARQUET:field_id": str(field_id).encode()})


@dataclass(frozen=True)
class DataFile:
    """A Parquet data file of the scenario and its rows by field id."""

    published: PublishedFile
    columns: dict[int, list[Any]]
    deleted: tuple[int, ...] = ()

    def with_deleted(self, positions: Sequence[int], key: str) -> DataFile:
        published = replace(self.published, deletion_key=key, deleted_rows=len(positions))
        return DataFile(published, self.columns, tuple(positions))


def write_file(
    directory: Path, name: str, schema: pa.Schema, rows: dict[str, list[Any]]
) -> DataFile:
    """A Parquet file like s3ddb writes (every column with its field id), under
    ``directory``; its PublishedFile path is relative when ``directory`` is the root's
    ``data``, else absolute."""
    table = pa.Table.from_pydict(rows, schema=schema)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    pq.write_table(table, path)
    relative = directory.name == "data" and (directory.parent / "_root").exists()
    published = PublishedFile(
        f"data/{name}" if relative else str(path),
        path.stat().st_size,
        table.num_rows,
    )
    columns = {
        int(f.metadata[b"PARQUET:field_id"]): table.column(f.name).to_pylist() for f in schema
    }
    return DataFile(published, columns)


def rewrite(f: DataFile, directory: Path, name: str, schema: pa.Schema) -> DataFile:
    """``f``'s live rows rewritten under ``schema``'s names (as s3ddb rewrites every
    file of a Delta-publishing dataset when a column is renamed): columns by field id,
    null where ``f`` lacks one, deleted rows dropped."""
    live = [i for i in range(f.published.physical_rows) if i not in f.deleted]
    data = {}
    for c in schema:
        values = f.columns.get(int(c.metadata[b"PARQUET:field_id"]))
        data[c.name] = [values[i] if values is not None else None for i in live]
    return write_file(directory, name, schema, data)


def deleted_positions(files: Iterable[DataFile]) -> DeletedPositions:
    """The ``deleted`` callback of a version listing ``files``."""
    by_key = {f.published.deletion_key: f.deleted for f in files if f.published.deletion_key}

    def deleted(f: PublishedFile) -> Sequence[int]:
        assert f.deletion_key is not None
        return by_key[f.deletion_key]

    return deleted


@dataclass
class Scenario:
    """Versions built by hand, published and written to a local root."""

    root: Path
    store: ObjectStore = field(init=False)
    states: dict[int, DeltaState] = field(default_factory=dict)
    publications: dict[int, Publication] = field(default_factory=dict)
    tables: dict[int, TableVersion] = field(default_factory=dict)
    live: dict[int, dict[str, DataFile]] = field(default_factory=dict)
    schemas: dict[int, pa.Schema] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "_root").touch()
        self.store = ObjectStore(str(self.root))

    def table_version(
        self, version: int, schema: pa.Schema, files: Sequence[DataFile], previous: int | None
    ) -> TableVersion:
        published = tuple(f.published for f in files)
        added: tuple[PublishedFile, ...] = ()
        removed: tuple[PublishedFile, ...] = ()
        if previous is not None:
            before = {f.published for f in self.live[previous].values()}
            now = set(published)
            added = tuple(sorted(now - before, key=lambda f: f.path))
            removed = tuple(sorted(before - now, key=lambda f: f.path))
        return TableVersion(
            version=version,
            timestamp_ms=1_700_000_000_000 + version * 1000,
            root=str(self.root),
            table_uuid=TABLE_UUID,
            schema=schema,
            groups=(FileGroup("t0", len(published), lambda: published),),
            operation="Append",
            previous=previous,
            added=added,
            removed=removed,
        )

    def publish(self, version: int, schema: pa.Schema, files: Sequence[DataFile]) -> Publication:
        previous = version - 1 if version - 1 in self.states else None
        table = self.table_version(version, schema, files, previous)
        publication, state = WRITER.publish(
            table, self.states.get(version - 1), deleted_positions(files)
        )
        for path, data in publication.content + publication.then:
            self.store.put(path, data)
        self.states[version] = state
        self.publications[version] = publication
        self.tables[version] = table
        self.live[version] = {f.published.path: f for f in files}
        self.schemas[version] = schema
        return publication

    def expected(self, version: int) -> list[dict[str, Any]]:
        """The rows of ``version``, columns resolved by field id."""
        schema = self.schemas[version]
        rows = []
        for f in self.live[version].values():
            count = f.published.physical_rows
            for i in range(count):
                if i in f.deleted:
                    continue
                rows.append(
                    {
                        c.name: f.columns[int(c.metadata[b"PARQUET:field_id"])][i]
                        if int(c.metadata[b"PARQUET:field_id"]) in f.columns
                        else None
                        for c in schema
                    }
                )
        return sorted(rows, key=lambda r: r["id"])


def read_deltalake(root: Path, version: int | None = None) -> list[dict[str, Any]]:
    dt = DeltaTable(str(root), version=version)
    data = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def read_duckdb(root: Path, version: int | None = None) -> list[dict[str, Any]]:
    con = duckdb_connection()
    try:
        args = f"'{root}'" + (f", version => {version}" if version is not None else "")
        data = con.execute(f"select * from delta_scan({args})").to_arrow_table()
    finally:
        con.close()
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def assert_readers_see(scenario: Scenario, version: int, *, latest: bool = False) -> None:
    expected = scenario.expected(version)
    assert read_deltalake(scenario.root, version) == expected, f"deltalake, version {version}"
    assert read_duckdb(scenario.root, version) == expected, f"duckdb, version {version}"
    if latest:
        assert read_deltalake(scenario.root) == expected
        assert read_duckdb(scenario.root) == expected
        assert DeltaTable(str(scenario.root)).version() == version


def commit_actions(store: ObjectStore, version: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in store.get(commit_path(version)).decode().splitlines()]


# --- the scenario ---------------------------------------------------------------------

SCHEMA_1 = pa.schema([fid("id", pa.int64(), 1), fid("v", pa.string(), 2)])
SCHEMA_2 = pa.schema([*SCHEMA_1, fid("c", pa.int32(), 3)])
# id 2 renamed from v to w.
SCHEMA_3 = pa.schema([SCHEMA_1.field(0), fid("w", pa.string(), 2), SCHEMA_2.field(2)])


def read_dv_file(data: bytes, offset: int, size: int) -> list[int]:
    """The positions of the DV at ``offset`` of a DV file, as a Delta reader finds
    them: the version byte, then at ``offset`` the size (``size``, as the descriptor
    says), the bitmap and its CRC-32, each checked."""
    if not data or data[0] != DV_FILE_VERSION:
        raise StoredMetadataError("not a version 1 deletion vector file")
    (stored_size,) = struct.unpack_from(">I", data, offset)
    if stored_size != size:
        raise StoredMetadataError(f"deletion vector size {stored_size}, expected {size}")
    end = offset + 4 + stored_size
    bitmap = data[offset + 4 : end]
    if len(bitmap) != stored_size or struct.unpack_from(">I", data, end)[0] != zlib.crc32(bitmap):
        raise StoredMetadataError("deletion vector checksum does not match")
    return deserialize_positions(bitmap)


def rows(start: int, count: int, *, with_c: bool = False) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {
        "id": list(range(start, start + count)),
        "v": [f"v{i}" for i in range(start, start + count)],
    }
    if with_c:
        out["c"] = [i * 10 for i in range(start, start + count)]
    return out


def build_scenario(root: Path) -> Scenario:
    """13 versions: appends, a file gaining deleted rows then more, a removed file, a
    column added, a rename with every file rewritten under the new name, a checkpoint
    at 1 and at 10."""
    s = Scenario(root)
    data = root / "data"
    f1 = write_file(data, "f1.parquet", SCHEMA_1, rows(0, 10))
    f2 = write_file(data, "f2 with space.parquet", SCHEMA_1, rows(10, 10))
    f3 = write_file(data, "f3.parquet", SCHEMA_1, rows(20, 10))
    s.publish(1, SCHEMA_1, [f1])
    s.publish(2, SCHEMA_1, [f1, f2])
    s.publish(3, SCHEMA_1, [f1, f2, f3])
    f1a = f1.with_deleted([1, 3], "1-3-a")
    s.publish(4, SCHEMA_1, [f1a, f2, f3])
    f1b = f1.with_deleted([1, 3, 5, 8], "1-5-b")
    s.publish(5, SCHEMA_1, [f1b, f2, f3])
    s.publish(6, SCHEMA_1, [f1b, f3])
    f4 = write_file(data, "f4.parquet", SCHEMA_2, rows(40, 5, with_c=True))
    s.publish(7, SCHEMA_2, [f1b, f3, f4])
    f5 = write_file(data, "f5.parquet", SCHEMA_2, rows(50, 5, with_c=True))
    s.publish(8, SCHEMA_2, [f1b, f3, f4, f5])
    f3a = f3.with_deleted([0], "3-9-a")
    s.publish(9, SCHEMA_2, [f1b, f3a, f4, f5])
    f6 = write_file(data, "f6.parquet", SCHEMA_2, rows(60, 3, with_c=True))
    s.publish(10, SCHEMA_2, [f1b, f3a, f4, f5, f6])
    g1, g3, g4, g5, g6 = (
        rewrite(f, data, f"g{i}.parquet", SCHEMA_3)
        for i, f in ((1, f1b), (3, f3a), (4, f4), (5, f5), (6, f6))
    )
    s.publish(11, SCHEMA_3, [g1, g3, g4, g5, g6])
    g4a = g4.with_deleted([2], "4-12-a")
    s.publish(12, SCHEMA_3, [g1, g3, g4a, g5, g6])
    s.publish(13, SCHEMA_3, [g1, g4a, g5, g6])
    return s


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return build_scenario(tmp_path_factory.mktemp("delta") / "ds")


def test_every_version_reads_the_expected_rows(scenario: Scenario) -> None:
    for version in range(1, 14):
        assert_readers_see(scenario, version, latest=version == 13)
    # The expectations are not vacuous: deleted rows, a removed file, a new column.
    assert [r["id"] for r in scenario.expected(5)][:8] == [0, 2, 4, 6, 7, 9, 10, 11]
    assert scenario.expected(13)[-1] == {"id": 62, "w": "v62", "c": 620}
    assert {r["c"] for r in scenario.expected(8) if r["id"] < 40} == {None}


def test_log_files_and_protocol(scenario: Scenario) -> None:
    store = scenario.store
    assert store.exists(checkpoint_path(1)) and store.exists(checkpoint_path(10))
    assert not any(store.exists(checkpoint_path(v)) for v in range(2, 10))
    assert json.loads(store.get(LAST_CHECKPOINT)) == {
        "version": 10,
        "size": 2 + 5,
        "sizeInBytes": store.head(checkpoint_path(10)).size,
        "numOfAddFiles": 5,
    }
    # Publication order: the commit, its checkpoint, then the pointer.
    assert [p for p, _ in scenario.publications[10].then] == [
        commit_path(10),
        checkpoint_path(10),
        LAST_CHECKPOINT,
    ]
    assert [p for p, _ in scenario.publications[9].then] == version_files(9)
    # (1, 2) until deleted rows; then deletion vectors, and nothing more (the rename
    # included).
    assert scenario.states[3].protocol == Protocol(1, 2)
    dv = Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))
    assert all(scenario.states[v].protocol == dv for v in range(4, 14))

    commit4 = commit_actions(store, 4)
    assert commit4[0]["commitInfo"]["s3ddb.version"] == 4
    assert commit4[0]["commitInfo"]["timestamp"] == 1_700_000_004_000
    kinds = [next(iter(a)) for a in commit4]
    assert kinds == ["commitInfo", "protocol", "metaData", "remove", "add"]
    remove, add = commit4[3]["remove"], commit4[4]["add"]
    assert remove["path"] == add["path"] == "data/f1.parquet"
    assert "deletionVector" not in remove and add["deletionVector"]["cardinality"] == 2
    assert json.loads(add["stats"]) == {"numRecords": 10}
    # 5 replaces f1's deletion vector: the remove names the old one.
    commit5 = commit_actions(store, 5)
    assert [next(iter(a)) for a in commit5] == ["commitInfo", "remove", "add"]
    assert commit5[1]["remove"]["deletionVector"] == add["deletionVector"]
    assert commit5[2]["add"]["deletionVector"]["cardinality"] == 4
    # URL-encoded relative paths.
    assert commit_actions(store, 2)[1]["add"]["path"] == "data/f2%20with%20space.parquet"
    # The rename's metaData: the schema by name, no column mapping.
    commit11 = commit_actions(store, 11)
    assert [next(iter(a)) for a in commit11] == ["commitInfo", "metaData"] + ["remove"] * 5 + [
        "add"
    ] * 5
    metadata = commit11[1]["metaData"]
    assert metadata["configuration"] == {"delta.enableDeletionVectors": "true"}
    fields = json.loads(metadata["schemaString"])["fields"]
    assert [(f["name"], f["metadata"]) for f in fields] == [("id", {}), ("w", {}), ("c", {})]


def test_deletion_vector_files_hold_the_deleted_positions(scenario: Scenario) -> None:
    import pyroaring

    commit5 = commit_actions(scenario.store, 5)
    descriptor = commit5[2]["add"]["deletionVector"]
    prefix, dv_uuid = parse_u_descriptor(descriptor["pathOrInlineDv"])
    assert dv_uuid == deletion_vector_uuid("1-5-b")
    path = deletion_files("1-5-b")[0]
    assert path == f"{prefix}/deletion_vector_{dv_uuid}.bin"
    data = scenario.store.get(path)
    assert read_dv_file(data, descriptor["offset"], descriptor["sizeInBytes"]) == [1, 3, 5, 8]
    bitmap = data[5 : 5 + descriptor["sizeInBytes"]]
    assert struct.unpack("<I", bitmap[:4])[0] == PORTABLE_MAGIC
    assert set(pyroaring.BitMap64.deserialize(bitmap[4:])) == {1, 3, 5, 8}
    assert struct.unpack(">I", data[-4:])[0] == zlib.crc32(bitmap)
    assert dict(scenario.publications[5].content) == {path: data}


def test_load_state_rebuilds_each_version_and_the_next_publication(scenario: Scenario) -> None:
    for version in range(1, 13):
        loaded = WRITER.load_state(scenario.store, scenario.tables[version])
        assert loaded == scenario.states[version], version
        table = scenario.tables[version + 1]
        deleted = deleted_positions(scenario.live[version + 1].values())
        again, state = WRITER.publish(table, loaded, deleted)
        assert again == scenario.publications[version + 1], version
        assert state == scenario.states[version + 1]
    unpublished = replace(scenario.tables[13], version=14, previous=13)
    assert WRITER.load_state(scenario.store, unpublished) is None


def test_publication_is_deterministic(scenario: Scenario) -> None:
    for version in (1, 5, 10, 11):
        table = scenario.tables[version]
        deleted = deleted_positions(scenario.live[version].values())
        again, _ = WRITER.publish(table, scenario.states.get(version - 1), deleted)
        assert again == scenario.publications[version]  # byte-identical, checkpoint too


def test_expire_log_checkpoints_the_oldest_kept_version_and_drops_the_rest(
    tmp_path: Path,
) -> None:
    s = build_scenario(tmp_path / "ds")
    listed = list(s.store.iter_list(LOG_DIR + "/"))
    doomed = expire_log(s.store, listed, [12, 13], s.tables.get)
    assert sorted(m.path for m in doomed) == sorted(
        [commit_path(v) for v in range(1, 12)] + [checkpoint_path(1), checkpoint_path(10)]
    )
    # The checkpoint at 12 is the state publication would have written there, and
    # _last_checkpoint names it (the one at 10 goes).
    written = s.store.get(checkpoint_path(12))
    assert written == checkpoint_bytes(s.states[12])[0]
    assert json.loads(s.store.get(LAST_CHECKPOINT))["version"] == 12
    for meta in doomed:
        s.store.delete(meta.path)
    for version in (12, 13):
        assert_readers_see(s, version, latest=version == 13)
    with pytest.raises(DeltaError):
        read_deltalake(s.root, 11)
    assert DeltaTable(str(s.root)).history()[-1]["version"] == 12
    assert WRITER.load_state(s.store, s.tables[13]) == s.states[13]
    assert WRITER.state_problems(s.store, s.tables[13]) == []


def test_expire_log_keeps_a_newer_checkpoint_and_pointer(tmp_path: Path) -> None:
    s = build_scenario(tmp_path / "ds")
    pointer = s.store.get(LAST_CHECKPOINT)
    listed = list(s.store.iter_list(LOG_DIR + "/"))
    doomed = expire_log(s.store, listed, range(7, 14), s.tables.get)
    assert sorted(m.path for m in doomed) == sorted(
        [commit_path(v) for v in range(1, 7)] + [checkpoint_path(1)]
    )
    assert s.store.get(LAST_CHECKPOINT) == pointer  # still the checkpoint at 10
    assert s.store.get(checkpoint_path(7)) == checkpoint_bytes(s.states[7])[0]


def test_foreign_problems(tmp_path: Path) -> None:
    s = Scenario(tmp_path / "ds")
    f1 = write_file(s.root / "data", "f1.parquet", SCHEMA_1, rows(0, 3))
    s.publish(1, SCHEMA_1, [f1])
    s.publish(2, SCHEMA_1, [f1])
    assert foreign_problems(s.store, 2) == []
    # A writer other than s3ddb commits version 3.
    s.store.put(commit_path(3), b'{"commitInfo":{"timestamp":1,"operation":"WRITE"}}\n')
    assert foreign_problems(s.store, 2) == [
        (commit_path(3), "Delta commit 3 is newer than s3ddb version 2")
    ]
    s.store.put("_delta_log/00000000000000000002.crc", b"{}")
    assert (
        "_delta_log/00000000000000000002.crc",
        "not a file s3ddb writes in _delta_log/",
    ) in foreign_problems(s.store, 3)


def test_load_state_refuses_garbage(tmp_path: Path) -> None:
    s = Scenario(tmp_path / "ds")
    f1 = write_file(s.root / "data", "f1.parquet", SCHEMA_1, rows(0, 3))
    s.publish(1, SCHEMA_1, [f1])
    s.publish(2, SCHEMA_1, [f1])
    good = s.store.get(commit_path(2))
    add = b'{"add":{"path":"x","partitionValues":{},"size":1,"modificationTime":1700000002000,'
    for garbage, message in [
        (b"not json\n", "not JSON"),
        (b'{"commitInfo":{"s3ddb.version":3}}\n', "not a commit s3ddb wrote"),
        (good + b'{"add":{"path":"x","size":"big"}}\n', "add size is not an integer"),
        (
            good + add + b'"dataChange":true,"stats":"{}","deletionVector":'
            b'{"storageType":"u","pathOrInlineDv":"short"}}}\n',
            "short",
        ),
        (good + b"[1]\n", "not one action"),
        (b"\xff\n", "not JSON"),
        (good + b'{"txn":{"appId":"a","version":1}}\n', "'txn' action"),
        (good.replace(b'"engineInfo":"s3ddb"', b'"engineInfo":"spark"'), "not one s3ddb writes"),
        (good + b"{" * 100 + b"}" * 100 + b"\n", "nested deeper"),
        (good + b'{"add":', "not terminated"),
    ]:
        s.store.put(commit_path(2), garbage)
        with pytest.raises(PublishedStateError, match=message) as info:
            WRITER.load_state(s.store, s.tables[2])
        assert info.value.path == commit_path(2) and commit_path(2) in str(info.value)
    s.store.put(commit_path(2), good)
    s.store.put(checkpoint_path(1), b"PAR1 garbage")
    with pytest.raises(PublishedStateError, match="checkpoint"):
        WRITER.load_state(s.store, s.tables[2])


def test_publication_starting_at_a_later_version(tmp_path: Path) -> None:
    s = Scenario(tmp_path / "ds")
    f1 = write_file(s.root / "data", "f1.parquet", SCHEMA_1, rows(0, 6)).with_deleted(
        [0, 5], "1-7-x"
    )
    # A file of another base (a shallow clone's source): an absolute path.
    f2 = write_file(tmp_path / "source" / "data", "f2.parquet", SCHEMA_1, rows(10, 4))
    assert not f2.published.is_relative
    publication = s.publish(7, SCHEMA_1, [f1, f2])
    assert not s.store.exists(commit_path(0))
    assert [p for p, _ in publication.then] == [
        commit_path(7),
        checkpoint_path(7),
        LAST_CHECKPOINT,
    ]
    kinds = [next(iter(a)) for a in commit_actions(s.store, 7)]
    assert kinds == ["commitInfo", "protocol", "metaData", "add", "add"]
    assert_readers_see(s, 7, latest=True)
    f3 = write_file(s.root / "data", "f3.parquet", SCHEMA_1, rows(20, 2))
    s.publish(8, SCHEMA_1, [f1, f2, f3])
    assert_readers_see(s, 7)
    assert_readers_see(s, 8, latest=True)
    with pytest.raises(DeltaError):
        read_deltalake(s.root, 6)
    with pytest.raises(duckdb.Error):
        read_duckdb(s.root, 6)
    assert WRITER.load_state(s.store, s.tables[8]) == s.states[8]
    # Without deleted rows left, the protocol stays where it rose: never lowered.
    s.publish(9, SCHEMA_1, [f2, f3])
    assert not any(a.deletion_vector for a in s.states[9].adds.values())
    assert s.states[9].protocol == Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))
    assert_readers_see(s, 9, latest=True)


def test_nested_and_wide_types(tmp_path: Path) -> None:
    point = pa.struct([fid("x", pa.int32(), 11), fid("y", pa.float64(), 12)])
    schema = pa.schema(
        [
            fid("id", pa.int64(), 1),
            fid("p", point, 2),
            fid("tags", pa.list_(fid("element", pa.string(), 13)), 3),
            fid("m", pa.map_(fid("key", pa.string(), 14, False), fid("value", pa.int64(), 15)), 4),
            fid("big", pa.large_string(), 5),
            fid("ll", pa.large_list(fid("element", pa.int16(), 16)), 6),
            fid("d", pa.decimal128(10, 2), 7),
            fid("day", pa.date32(), 8),
            fid("ts", pa.timestamp("us", tz="UTC"), 9),
            fid("ms", pa.timestamp("ms", tz="UTC"), 10),
            fid("b", pa.binary(), 17),
            fid("i8", pa.int8(), 18),
            fid("f", pa.float32(), 19),
            fid("ok", pa.bool_(), 20),
        ]
    )
    moment = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)
    data: dict[str, list[Any]] = {
        "id": [1, 2],
        "p": [{"x": 1, "y": 2.5}, None],
        "tags": [["a", "b"], []],
        "m": [[("k", 1)], None],
        "big": ["large", None],
        "ll": [[1, 2], None],
        "d": [decimal.Decimal("12.34"), None],
        "day": [date(2024, 1, 2), None],
        "ts": [moment, None],
        "ms": [moment.replace(microsecond=123000), None],
        "b": [b"\x00\x01", None],
        "i8": [-3, None],
        "f": [1.5, None],
        "ok": [True, None],
    }
    s = Scenario(tmp_path / "ds")
    f1 = write_file(s.root / "data", "f1.parquet", schema, data)
    s.publish(1, schema, [f1])
    expected = [
        {**{k: v[i] for k, v in data.items()}, "m": dict(data["m"][i]) if data["m"][i] else None}
        for i in range(2)
    ]
    for got in (read_deltalake(s.root), read_duckdb(s.root)):
        for row in got:
            if isinstance(row["m"], list):
                row["m"] = dict(row["m"]) if row["m"] else None
            elif isinstance(row["m"], dict) and not row["m"]:
                row["m"] = None
        assert got == expected


@pytest.mark.parametrize(
    ("type_", "needle"),
    [
        (pa.uint32(), "uint32"),
        (pa.float16(), "halffloat"),
        (pa.timestamp("ns", tz="UTC"), "nanosecond"),
        (pa.duration("us"), "duration"),
        (pa.time64("us"), "time64"),
        (pa.decimal256(40, 2), "decimal256"),
        (pa.dictionary(pa.int32(), pa.string()), "dictionary"),
        (pa.null(), "null"),
        (pa.list_(fid("element", pa.uint8(), 9)), "uint8"),
    ],
)
def test_type_problem_names_the_column(type_: pa.DataType, needle: str) -> None:
    schema = pa.schema([fid("ok", pa.int64(), 1), fid("bad", type_, 2)])
    problem = WRITER.type_problem(schema)
    assert problem is not None and "'bad" in problem and needle in problem


def test_type_problem_accepts_and_refuses_shapes() -> None:
    ok = pa.schema(
        [
            fid("a", pa.timestamp("s"), 1),
            fid("s", pa.struct([fid("x", pa.large_binary(), 3)]), 2),
        ]
    )
    assert WRITER.type_problem(ok) is None
    assert "field_id" in (WRITER.type_problem(pa.schema([pa.field("a", pa.int64())])) or "")
    clash = pa.schema([fid("a", pa.int64(), 1), fid("A", pa.int64(), 2)])
    assert "case" in (WRITER.type_problem(clash) or "")
    nested = pa.schema([fid("s", pa.struct([fid("u", pa.uint16(), 3)]), 2)])
    assert "'s.u'" in (WRITER.type_problem(nested) or "")


def test_publish_refuses_a_missing_state(tmp_path: Path) -> None:
    s = Scenario(tmp_path / "ds")
    f1 = write_file(s.root / "data", "f1.parquet", SCHEMA_1, rows(0, 3))
    table = s.table_version(2, SCHEMA_1, [f1], None)
    table = replace(table, previous=1)
    with pytest.raises(InvalidInputError, match="needs the state"):
        WRITER.publish(table, None, lambda f: [])
    bad = pa.schema([fid("id", pa.uint64(), 1)])
    with pytest.raises(InvalidInputError, match="uint64"):
        WRITER.publish(replace(table, schema=bad, previous=None), None, lambda f: [])


def test_a_rename_with_every_file_rewritten_reads_at_both_versions(tmp_path: Path) -> None:
    s = Scenario(tmp_path / "ds")
    data = s.root / "data"
    f1 = write_file(data, "f1.parquet", SCHEMA_1, rows(0, 4)).with_deleted([1], "1-1-a")
    f2 = write_file(data, "f2.parquet", SCHEMA_1, rows(10, 3))
    s.publish(1, SCHEMA_1, [f1, f2])
    renamed = pa.schema([SCHEMA_1.field(0), fid("w", pa.string(), 2)])
    g1 = rewrite(f1, data, "g1.parquet", renamed)
    g2 = rewrite(f2, data, "g2.parquet", renamed)
    assert pq.read_schema(s.root / g1.published.path).names == ["id", "w"]
    s.publish(2, renamed, [g1, g2])
    kinds = [next(iter(a)) for a in commit_actions(s.store, 2)]
    assert kinds == ["commitInfo", "metaData", "remove", "remove", "add", "add"]
    assert s.states[2].protocol == s.states[1].protocol
    assert s.states[2].metadata.schema_string == (
        '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},'
        '{"name":"w","type":"string","nullable":true,"metadata":{}}]}'
    )
    assert [r["w"] for r in s.expected(2)] == ["v0", "v2", "v3", "v10", "v11", "v12"]
    assert_readers_see(s, 1)  # old files, old name
    assert_readers_see(s, 2, latest=True)  # rewritten files, new name
    assert WRITER.load_state(s.store, s.tables[2]) == s.states[2]
    # A file appended after the rename, under the new name.
    g3 = write_file(data, "g3.parquet", renamed, {"id": [20], "w": ["v20"]})
    s.publish(3, renamed, [g1, g2, g3])
    for version in (1, 2):
        assert_readers_see(s, version)
    assert_readers_see(s, 3, latest=True)


def test_load_state_refuses_metadata_s3ddb_does_not_write(tmp_path: Path) -> None:
    s = Scenario(tmp_path / "ds")
    f1 = write_file(s.root / "data", "f1.parquet", SCHEMA_1, rows(0, 3))
    s.publish(1, SCHEMA_1, [f1])
    s.store.delete(checkpoint_path(1))
    s.store.delete(LAST_CHECKPOINT)
    assert WRITER.load_state(s.store, s.tables[1]) == s.states[1]  # from the commit
    # Column mapping (as an earlier s3ddb wrote it), a key s3ddb does not write, a
    # schema that is not the version's: none is carried into the next version.
    actions = commit_actions(s.store, 1)
    for change, message in [
        (lambda m: m["configuration"].update({"delta.columnMapping.mode": "id"}), "configuration"),
        (lambda m: m.update({"unknown": {"x": 1}}), "metaData action that is not one"),
        (lambda m: m.update({"schemaString": '{"type":"struct","fields":[]}'}), "schemaString"),
        (lambda m: m.update({"id": "another-table"}), "metaData id"),
    ]:
        tampered = json.loads(json.dumps(actions))
        change(tampered[2]["metaData"])
        lines = "".join(
            json.dumps(a, separators=(",", ":"), ensure_ascii=False) + "\n" for a in tampered
        )
        s.store.put(commit_path(1), lines.encode())
        with pytest.raises(PublishedStateError, match=message):
            WRITER.load_state(s.store, s.tables[1])


# --- deletion vectors and Z85 ---------------------------------------------------------


def test_z85_matches_the_specification_vector() -> None:
    data = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(data) == "HelloWorld"
    assert z85_decode("HelloWorld") == data
    with pytest.raises(ValueError):
        z85_decode("Hello~orld")
    with pytest.raises(ValueError):
        z85_encode(b"abc")


@pytest.mark.parametrize(
    "positions",
    [
        [],
        [0],
        [3, 4, 7, 11, 18, 29],
        list(range(0, 200_000, 3)),  # bitmap containers
        list(range(5000)),  # one full-ish bitmap container
        [65535, 65536, (1 << 32) - 1, 1 << 32, (1 << 32) + 70_000, (1 << 40) + 1],
    ],
)
def test_deletion_vector_round_trip_against_pyroaring(positions: list[int]) -> None:
    import pyroaring

    data, cardinality = serialize_positions(positions)
    assert cardinality == len(positions)
    assert struct.unpack("<I", data[:4])[0] == PORTABLE_MAGIC
    # pyroaring writes the same portable bytes when it picks the same containers (it
    # turns a long consecutive range into a run container, which ours never write).
    theirs = pyroaring.BitMap64(positions).serialize()
    if len(positions) < 4096 or positions[1] - positions[0] > 1:
        assert data[4:] == theirs
    else:
        assert len(data[4:]) > len(theirs)
    assert list(pyroaring.BitMap64.deserialize(data[4:])) == positions
    assert deserialize_positions(data) == positions
    file_bytes, size, _ = dv_file_bytes(positions)
    assert file_bytes[0] == 1 and size == len(data)
    assert read_dv_file(file_bytes, 1, size) == positions


def test_deletion_vector_reader_reads_run_containers_and_refuses_garbage() -> None:
    import pyroaring

    bitmap = pyroaring.BitMap64(range(10, 100_000))  # ranges: run containers
    data = struct.pack("<I", PORTABLE_MAGIC) + bitmap.serialize()
    assert deserialize_positions(data) == list(range(10, 100_000))
    with pytest.raises(StoredMetadataError, match="magic"):
        deserialize_positions(b"\0" * 12)
    with pytest.raises(StoredMetadataError, match="truncated"):
        deserialize_positions(data[:-3])
    file_bytes, size, _ = dv_file_bytes([1, 2])
    with pytest.raises(StoredMetadataError, match="checksum"):
        read_dv_file(file_bytes[:-1] + bytes([file_bytes[-1] ^ 1]), 1, size)
    with pytest.raises(StoredMetadataError, match="size"):
        read_dv_file(file_bytes, 1, size + 1)
    with pytest.raises(ValueError):
        serialize_positions([-1])


def test_deletion_vector_names_are_deterministic() -> None:
    assert deletion_vector_uuid("7-3-abc") == deletion_vector_uuid("7-3-abc")
    assert deletion_vector_uuid("7-3-abc") != deletion_vector_uuid("7-4-abc")
    descriptor_path = "dv" + z85_encode(deletion_vector_uuid("7-3-abc").bytes)
    assert parse_u_descriptor(descriptor_path) == ("dv", deletion_vector_uuid("7-3-abc"))
    assert deletion_files("7-3-abc") == [
        f"dv/deletion_vector_{deletion_vector_uuid('7-3-abc')}.bin"
    ]
