"""Stable row ids side by side with pylance 14: the same operations on a Lance dataset
and an s3ddb dataset give every row the same ``_rowid``, ``_row_created_at_version``
and ``_row_last_updated_at_version``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb

lance = pytest.importorskip("lance", reason="pylance (the bench extra) is not installed")

LINEAGE = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"]


def _rows(ids: list[int], value: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [value] * len(ids)})


def _by_key(table: pa.Table) -> dict[int, tuple[int, ...]]:
    return {r["id"]: tuple(r[c] for c in LINEAGE) for r in table.to_pylist()}


def _steps(uri: str, module: Any) -> list[dict[int, tuple[int, ...]]]:
    """Run the sequence with ``module`` (``lance`` or ``s3ddb``); each step's lineage."""
    seen = []

    def record() -> None:
        ds = module.dataset(uri)
        seen.append((ds.version, _by_key(ds.to_table(columns=["id", *LINEAGE]))))

    module.write_dataset(_rows([1, 2, 3], "a"), uri, enable_stable_row_ids=True)
    record()
    module.write_dataset(_rows([4, 5, 6], "b"), uri, mode="append")
    record()
    module.dataset(uri).delete("id = 2")
    record()
    module.dataset(uri).update({"v": "'u'"}, where="id = 3 OR id = 5")
    record()
    source = _rows([4, 7], "m")
    builder = module.dataset(uri).merge_insert("id")
    builder.when_matched_update_all().when_not_matched_insert_all().execute(source)
    record()
    module.dataset(uri).optimize.compact_files()
    record()
    module.write_dataset(_rows([8], "c"), uri, mode="append")
    record()
    return seen


def test_row_ids_and_versions_match_pylance(tmp_path: Path) -> None:
    theirs = _steps(str(tmp_path / "lance"), lance)
    ours = _steps(str(tmp_path / "s3ddb"), s3ddb)
    assert [v for v, _rows in ours] == [v for v, _rows in theirs]
    for (version, mine), (_v, expected) in zip(ours, theirs, strict=True):
        assert mine == expected, f"after version {version}"
    # The sequence did move rows: updated rows kept their ids under new versions.
    last = ours[-1][1]
    assert last[3][0] == 2 and last[3][2] > last[3][1]
    assert last[4][0] == 3 and last[4][2] > last[4][1]


def _delta_of(ds: Any, begin: int, end: int) -> dict[str, Any]:
    delta = ds.delta(begin_version=begin, end_version=end)
    return {
        "inserted": _by_key(delta.get_inserted_rows().read_all()),
        "updated": _by_key(delta.get_updated_rows().read_all()),
        "deleted": sorted(delta.get_deleted_row_ids().read_all()["_rowid"].to_pylist()),
        "transactions": len(delta.list_transactions()),
    }


def test_delta_matches_pylance_for_every_range(tmp_path: Path) -> None:
    theirs_uri, ours_uri = str(tmp_path / "lance"), str(tmp_path / "s3ddb")
    versions = [v for v, _rows in _steps(theirs_uri, lance)]
    assert [v for v, _rows in _steps(ours_uri, s3ddb)] == versions
    theirs, ours = lance.dataset(theirs_uri), s3ddb.dataset(ours_uri)
    changed = 0
    for end in versions:
        for begin in [v for v in versions if v < end]:
            expected = _delta_of(theirs, begin, end)
            assert _delta_of(ours, begin, end) == expected, (begin, end)
            changed += bool(expected["updated"]) + bool(expected["deleted"])
    assert changed > 5  # the ranges did hold updates and deletes
    # Rows come from the version the dataset object is pinned to, as pylance's do.
    assert _delta_of(s3ddb.dataset(ours_uri, 4), 1, 2) == _delta_of(
        lance.dataset(theirs_uri, version=4), 1, 2
    )
    # The shorthand: the pinned version against an older one.
    short = ours.delta(compared_against=2)
    assert (short.begin_version, short.end_version) == (2, ours.version)


def test_delta_needs_stable_row_ids_and_one_form_of_range(tmp_path: Path) -> None:
    uri = str(tmp_path / "plain")
    ds = s3ddb.write_dataset(_rows([1, 2], "a"), uri)
    ds.insert(_rows([3], "b"))
    with pytest.raises(s3ddb.InvalidInputError, match="needs stable row ids"):
        ds.delta(compared_against=1).get_inserted_rows()
    assert len(ds.delta(compared_against=1).list_transactions()) == 1
    with pytest.raises(s3ddb.InvalidInputError, match="not both"):
        ds.delta(1, begin_version=1, end_version=2)
    with pytest.raises(s3ddb.InvalidInputError, match="needs compared_against"):
        ds.delta(begin_version=1)
    with pytest.raises(s3ddb.InvalidInputError, match="after end_version"):
        ds.delta(begin_version=2, end_version=1)
