"""The change feed on stored state that lies or surprises: a version relabelled as one
that changes no row, a version under two names, a version number far past the rest,
NaN values left as they were, and a column named as the feed's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import InvalidInputError, StoredMetadataError
from s3ddb.format import layout
from s3ddb.format.naming import NamingScheme
from tests.support.storage import plant_manifest


def test_a_version_relabelled_as_changing_no_row_is_refused(tmp_path: Path) -> None:
    """A delete whose manifest says ``Rewrite`` (compaction, which the feed does not
    read) would vanish from the feed: its row count shows it is not one."""
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(pa.table({"id": list(range(10))}), uri)
    ds.delete("id < 4")

    def relabel(message: Any) -> None:
        message.operation = "Rewrite"

    plant_manifest(uri, relabel)
    with pytest.raises(StoredMetadataError, match="changes no row"):
        s3ddb.dataset(uri).changes(1)


@pytest.mark.parametrize("stable", [False, True], ids=["plain", "stable row ids"])
def test_nan_values_an_update_left_alone_are_no_change(tmp_path: Path, stable: bool) -> None:
    uri = str(tmp_path / "ds")
    table = pa.table(
        {
            "id": [1, 2, 3, 4],
            "n": [10, 20, 30, 40],
            "f": [0.5, float("nan"), float("nan"), 1.5],
            "l": [[0.5], [float("nan")], [float("nan")], [1.5]],
        }
    )
    ds = s3ddb.write_dataset(table, uri, enable_stable_row_ids=stable)
    ds.update({"n": "n + 1"}, where="id = 1", rewrite="columns")
    feed = s3ddb.dataset(uri).changes(1)
    assert sorted(set(feed["id"].to_pylist())) == [1]


def test_a_version_under_two_names_is_refused(tmp_path: Path) -> None:
    """A copy of version 2's manifest under the other naming scheme's name would list
    version 2 twice (history) and replay it twice (the feed)."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1, 2, 3]}), uri)
    s3ddb.write_dataset(pa.table({"id": [7, 8]}), uri, mode="overwrite")
    location = s3ddb.dataset(uri).handler.location_of(2)
    other = NamingScheme.V1 if location.naming is NamingScheme.V2 else NamingScheme.V2
    root = Path(uri)
    (root / layout.manifest_path(2, other)).write_bytes((root / location.path).read_bytes())
    for call in (lambda: s3ddb.dataset(uri).versions(), lambda: s3ddb.dataset(uri).changes(1)):
        with pytest.raises(StoredMetadataError, match="version 2 has two manifests"):
            call()


def test_the_versions_a_feed_misses_are_found_without_walking_the_gap(tmp_path: Path) -> None:
    """The newest manifest names a version far past the others (planted): the feed's
    range check names the first missing ones without a list of every number between."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1, 2, 3]}), uri)
    s3ddb.write_dataset(pa.table({"id": [4]}), uri, mode="append")
    far = 2**62

    def move(message: Any) -> None:
        message.version = far

    root = Path(uri)
    path = plant_manifest(uri, move)
    (root / path).rename(root / layout.manifest_path(far, NamingScheme.V2))
    ds = s3ddb.dataset(uri)
    assert ds.version == far
    with pytest.raises(InvalidInputError, match=r"need version\(s\) 2, 3, 4, 5, 6, \.\.\."):
        ds.changes(1)


def test_a_column_named_as_the_feeds_row_id_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    table = pa.table({"id": [1, 2], "__s3ddb_change_rowid": [0, 0]})
    ds = s3ddb.write_dataset(table, uri, enable_stable_row_ids=True)
    ds.update({"id": "id + 10"}, where="id = 1")
    with pytest.raises(InvalidInputError, match="__s3ddb_change_rowid"):
        s3ddb.dataset(uri).changes(1)
