"""The conflict-matrix cells of Merge and Project (docs/conflicts.md), with real
operations: two Datasets pinned at one version, theirs commits first, then mine with
``conflict_retries=0``; the outcome must be the documented one, and a retryable one
must land when re-executed (a refused one must stay refused)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit.builders import build_project
from s3ddb.commit.conflicts import Outcome
from s3ddb.format.index import IndexMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.schema import DatasetSchema
from s3ddb.operations import Project

C, R, X = Outcome.COMPATIBLE, Outcome.RETRYABLE, Outcome.INCOMPATIBLE
Run = Callable[[s3ddb.Dataset, "int | None"], None]


def _rows(ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"n{i}" for i in ids]),
            "extra": pa.array([i * 10 for i in ids], pa.int64()),
        }
    )


def _restore_v1(ds: s3ddb.Dataset, retries: int | None) -> None:
    ds.checkout_version(1).restore()


#: How each kind runs (``retries``: conflict_retries; None is the default).
OPS: dict[str, Run] = {
    "Append": lambda ds, r: ds.insert(_rows([9]), conflict_retries=r),
    "Delete": lambda ds, r: ds.delete("id = 1", conflict_retries=r),
    "Update": lambda ds, r: ds.update({"name": "'x'"}, "id = 2", conflict_retries=r),
    "merge_insert": lambda ds, r: (
        (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all())
        .conflict_retries(0 if r == 0 else 10)
        .execute(_rows([3, 8]))
    ),
    "Rewrite": lambda ds, r: ds.optimize.compact_files(
        target_rows_per_fragment=100, conflict_retries=r
    ),
    "Overwrite": lambda ds, r: ds.insert(_rows([1, 2]), mode="overwrite", conflict_retries=r),
    "Restore": _restore_v1,
    "UpdateConfig": lambda ds, r: ds.update_config({"k": "v"}),
    "UpdateConfig(schema metadata)": lambda ds, r: ds.replace_schema_metadata({"o": "t"}),
    "Merge": lambda ds, r: ds.add_columns({"t": "id + 1"}, conflict_retries=r),
    "Project": lambda ds, r: ds.drop_columns(["extra"], conflict_retries=r),
}

MINE: dict[str, Run] = {
    "Merge": lambda ds, r: ds.add_columns({"m": "id * 2"}, conflict_retries=r),
    "Project(rename)": lambda ds, r: ds.alter_columns(
        {"path": "name", "name": "label"}, conflict_retries=r
    ),
    "Project(not null)": lambda ds, r: ds.alter_columns(
        {"path": "id", "nullable": False}, conflict_retries=r
    ),
}

THEIRS_ORDER = (
    "Append", "Delete", "Update", "merge_insert", "Rewrite", "Overwrite", "Restore",
    "UpdateConfig", "UpdateConfig(schema metadata)", "Merge", "Project",
)  # fmt: skip
#                      App Del Upd mrg Rwr Ovw Rst Cfg CfgS Mrg Prj
EXPECTED_MINE = {
    "Merge":             (R,  R,  R,  R,  R,  X,  X,  C,  R,   R,  R),
    "Project(rename)":   (C,  C,  C,  C,  C,  X,  X,  C,  R,   R,  R),
    "Project(not null)": (R,  C,  R,  R,  C,  X,  X,  C,  R,   R,  R),
}  # fmt: skip
#: The existing kinds as mine, after a Merge and after a Project as theirs.
EXPECTED_THEIRS = {
    "Append": (R, R),
    "Delete": (R, R),
    "Update": (R, R),
    "merge_insert": (R, R),
    "Rewrite": (R, R),
    "Overwrite": (C, C),
    "UpdateConfig": (C, C),
    "UpdateConfig(schema metadata)": (C, C),
}

CASES = [
    (mine, theirs, expected)
    for mine, row in EXPECTED_MINE.items()
    for theirs, expected in zip(THEIRS_ORDER, row, strict=True)
] + [
    (mine, theirs, expected)
    for mine, row in EXPECTED_THEIRS.items()
    for theirs, expected in zip(("Merge", "Project"), row, strict=True)
]


def _outcome(run: Callable[[], None]) -> Outcome:
    try:
        run()
    except s3ddb.IncompatibleTransactionError:
        return X
    except s3ddb.RetryableCommitConflictError:
        return R
    return C


@pytest.mark.parametrize("case", CASES, ids=[f"{m}-after-{t}" for m, t, _e in CASES])
def test_cell(case: tuple[str, str, Outcome], tmp_path: Path) -> None:
    mine, theirs, expected = case
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows([1, 2, 3, 4, 5, 6]), uri, max_rows_per_file=2)
    s3ddb.dataset(uri).update_config({"base": "1"})  # so that Restore(1) changes things
    theirs_ds, mine_ds = s3ddb.dataset(uri), s3ddb.dataset(uri)
    OPS[theirs](theirs_ds, None)
    after_theirs = s3ddb.dataset(uri).version
    run = MINE.get(mine) or OPS[mine]
    got = _outcome(lambda: run(mine_ds, 0))
    assert got is expected, f"{mine} after {theirs}: expected {expected.value}, got {got.value}"
    latest = s3ddb.dataset(uri)
    # A compaction reserves its fragment ids first (a version that changes no data).
    reserved = 1 if mine == "Rewrite" else 0
    if got is C:
        assert latest.version == after_theirs + 1 + reserved
        return
    assert latest.version == after_theirs + reserved  # nothing of mine landed
    if got is X:
        assert _outcome(lambda: run(mine_ds, None)) is X
        assert s3ddb.dataset(uri).version == after_theirs
        return
    if mine in ("Append", "merge_insert") and theirs in ("Merge", "Project"):
        # Re-executed, the written rows lack the added column (or hold the dropped
        # one), as they would if run after the schema change: a clear error.
        message = "missing columns" if theirs == "Merge" else "unexpected columns"
        with pytest.raises(s3ddb.SchemaMismatchError, match=message):
            run(mine_ds, None)
        assert s3ddb.dataset(uri).version == after_theirs
        return
    run(mine_ds, None)  # re-executed on the newest version: lands
    assert s3ddb.dataset(uri).version == after_theirs + 1 + (3 if reserved else 0)


@pytest.mark.parametrize("theirs", ["Merge", "Project", "UpdateConfig(schema metadata)"])
def test_both_schema_changes_survive(theirs: str, tmp_path: Path) -> None:
    """Beyond the outcome: after the retry, theirs and mine are both in the schema."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows([1, 2, 3]), uri)
    stale = s3ddb.dataset(uri)
    OPS[theirs](s3ddb.dataset(uri), None)
    MINE["Merge"](stale, None)
    MINE["Project(rename)"](stale, None)
    latest = s3ddb.dataset(uri)
    assert {"m", "label"} <= set(latest.schema.names)
    if theirs == "Merge":
        assert latest.to_table(columns=["t", "m"]).to_pydict() == {"t": [2, 3, 4], "m": [2, 4, 6]}
    elif theirs == "Project":
        assert "extra" not in latest.schema.names
    else:
        assert latest.schema.metadata == {b"o": b"t"}


# --- indices on dropped columns -----------------------------------------------------------


def _index_fields(uri: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(i.name, i.fields) for i in s3ddb.dataset(uri).manifest.indices]


def _reindex_and_filter(uri: str) -> None:
    """A column re-added under the dropped name is indexed afresh and read right."""
    s3ddb.dataset(uri).add_columns({"extra": "id * 100"})
    s3ddb.dataset(uri).create_scalar_index("extra", "BTREE", replace=False)
    ds = s3ddb.dataset(uri)
    assert ds.to_table(filter="extra = 200").column("id").to_pylist() == [2]


def test_dropping_an_indexed_column_drops_its_index(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows([1, 2, 3]), uri)
    s3ddb.dataset(uri).create_scalar_index("extra", "BTREE")
    s3ddb.dataset(uri).create_scalar_index("id", "BTREE")
    s3ddb.dataset(uri).drop_columns(["extra"])
    assert _index_fields(uri) == [("id_idx", (0,))]
    _reindex_and_filter(uri)


def test_a_drop_rebased_over_a_concurrent_index_on_the_column_drops_that_index(
    tmp_path: Path,
) -> None:
    """Project over CreateIndex rebases; the index built meanwhile on the dropped
    column must not survive it."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows([1, 2, 3]), uri)
    stale = s3ddb.dataset(uri)
    s3ddb.dataset(uri).create_scalar_index("extra", "BTREE")
    stale.drop_columns(["extra"], conflict_retries=0)  # a rebase, not a retry
    assert s3ddb.dataset(uri).version == 3
    assert _index_fields(uri) == []
    _reindex_and_filter(uri)


def test_an_index_built_over_a_concurrent_drop_of_its_column_is_not_committed(
    tmp_path: Path,
) -> None:
    """CreateIndex over Project retries; re-planned, the column is gone, and the error
    names it."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_rows([1, 2, 3]), uri)
    stale = s3ddb.dataset(uri)
    s3ddb.dataset(uri).drop_columns(["extra"])
    with pytest.raises(s3ddb.ColumnNotFoundError, match="extra"):
        stale.create_scalar_index("extra", "BTREE")
    assert s3ddb.dataset(uri).version == 2
    assert _index_fields(uri) == []


def test_an_index_on_several_fields_goes_when_one_of_them_is_dropped() -> None:
    schema = DatasetSchema.assign(_rows([1]).schema)  # id 0, name 1, extra 2
    base = Manifest(
        version=1,
        schema=schema,
        fragments=(),
        indices=(
            IndexMetadata(uuid=str(uuid.uuid4()), name="pair", fields=(0, 2),
                          dataset_version=1, fragment_ids=frozenset()),
            IndexMetadata(uuid=str(uuid.uuid4()), name="one", fields=(1,),
                          dataset_version=1, fragment_ids=frozenset()),
            IndexMetadata(uuid=str(uuid.uuid4()), name="", fields=(),
                          dataset_version=1, fragment_ids=frozenset()),
        ),
    )  # fmt: skip
    kept = DatasetSchema(schema.arrow.remove(2), tuple((p, i) for p, i in schema.ids if i != 2))
    built = build_project(base, Project(kept), 2, lambda v: base)
    assert [(i.name, i.fields) for i in built.indices] == [("one", (1,)), ("", ())]
