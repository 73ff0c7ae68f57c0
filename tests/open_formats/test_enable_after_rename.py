"""Delta readers find a column in a data file by its name; s3ddb's by field id, so a
rename of a dataset that does not publish Delta leaves the files with the old name.
Enabling Delta writes those files again under the current names before anything is
published, and a commit that would publish such files as Delta otherwise is refused
before it is committed, saying which columns and what fixes it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import OpenFormatError
from s3ddb.format.bases import FileResolver
from tests.open_formats.readers import deltalake_read, pyiceberg_read, rows_of, same_rows

FORMATS = ["iceberg", "delta"]


def _check_published(uri: str, ds: s3ddb.Dataset) -> None:
    """Version ``ds.version`` reads in deltalake and pyiceberg as in s3ddb."""
    expected = ds.to_table()
    want = rows_of(expected)
    assert same_rows(deltalake_read(uri, ds.version), expected) == want
    metadata = str(Path(uri, "metadata", f"v{ds.version}.metadata.json"))
    assert same_rows(pyiceberg_read(metadata), expected) == want


def _published_files(uri: str) -> set[str]:
    return {str(p) for p in Path(uri).glob("metadata/*")} | {
        str(p) for p in Path(uri).glob("_delta_log/*")
    }


def test_enabling_delta_after_a_rename_publishes_the_renamed_column(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(
        pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "v": ["a", "b", "c", "d"]}),
        uri,
        max_rows_per_file=2,
    )
    ds = s3ddb.dataset(uri)
    ds.delete("id = 2")
    ds.alter_columns({"path": "v", "name": "label"})
    ds.enable_open_formats(FORMATS)
    ds = s3ddb.dataset(uri)
    assert ds.open_formats == ("iceberg", "delta")
    assert rows_of(ds.to_table()) == [
        {"id": 1, "label": "a"},
        {"id": 3, "label": "c"},
        {"id": 4, "label": "d"},
    ]
    _check_published(uri, ds)
    # Every file the published version lists names its columns as the schema does.
    from s3ddb.open_formats.column_names import misnamed_columns

    files = FileResolver.for_manifest(ds.handler.store, ds.manifest)
    assert misnamed_columns(files, ds.manifest.fragments, ds.manifest.schema) == []


def test_a_renamed_column_taking_a_dropped_columns_name(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}), uri)
    ds = s3ddb.dataset(uri)
    ds.drop_columns(["v"])  # the file keeps its column "v", unread
    ds.alter_columns({"path": "id", "name": "v"})  # Delta would read the dropped one
    ds.enable_open_formats(["delta"])
    ds = s3ddb.dataset(uri)
    expected = ds.to_table()
    assert expected.column_names == ["v"] and sorted(expected.column("v").to_pylist()) == [1, 2]
    assert same_rows(deltalake_read(uri, ds.version), expected, key="v") == rows_of(
        expected, key="v"
    )


def test_enabling_iceberg_alone_rewrites_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}), uri)
    ds = s3ddb.dataset(uri)
    ds.alter_columns({"path": "v", "name": "label"})
    files = {f.files[0].path for f in ds.manifest.fragments}
    ds.enable_open_formats(["iceberg"])  # Iceberg readers find columns by field id
    ds = s3ddb.dataset(uri)
    assert ds.version == 3 and {f.files[0].path for f in ds.manifest.fragments} == files
    metadata = str(Path(uri, "metadata", f"v{ds.version}.metadata.json"))
    assert rows_of(pyiceberg_read(metadata)) == rows_of(ds.to_table())


def test_turning_delta_on_through_the_config_is_refused_before_anything_is_published(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}), uri)
    ds = s3ddb.dataset(uri)
    ds.alter_columns({"path": "v", "name": "label"})
    with pytest.raises(OpenFormatError) as refused:
        ds.update_config({"s3ddb.open_formats": "iceberg,delta"})
    message = str(refused.value)
    assert "'v'" in message and "'label'" in message and "enable_open_formats" in message
    assert s3ddb.dataset(uri).version == 2 and not _published_files(uri)
    # The fix the message names.
    s3ddb.dataset(uri).enable_open_formats(FORMATS)
    _check_published(uri, s3ddb.dataset(uri))


def test_enabling_on_a_version_renamed_meanwhile_is_refused_then_works(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}), uri)
    stale = s3ddb.dataset(uri)  # plans on version 1: nothing to rewrite there
    s3ddb.dataset(uri).alter_columns({"path": "v", "name": "label"})
    with pytest.raises(OpenFormatError, match="enable_open_formats"):
        stale.enable_open_formats(FORMATS)  # rebased over the rename
    assert s3ddb.dataset(uri).version == 2 and not _published_files(uri)
    s3ddb.dataset(uri).enable_open_formats(FORMATS)
    _check_published(uri, s3ddb.dataset(uri))


def test_a_rename_planned_before_delta_was_enabled_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}), uri)
    stale = s3ddb.dataset(uri)  # plans a schema-only rename on version 1
    s3ddb.dataset(uri).enable_open_formats(FORMATS)
    with pytest.raises(OpenFormatError, match="alter_columns"):
        stale.alter_columns({"path": "v", "name": "label"})
    assert s3ddb.dataset(uri).version == 2
    # Run again on the newest version, the rename writes the files under the new name.
    s3ddb.dataset(uri).alter_columns({"path": "v", "name": "label"})
    _check_published(uri, s3ddb.dataset(uri))
