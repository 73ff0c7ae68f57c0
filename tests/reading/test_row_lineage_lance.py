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
