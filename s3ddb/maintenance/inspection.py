"""What one pinned version holds, as pylance reports it: statistics of its fragments
and indices (``ds.stats``), and a check that its files exist (``ds.validate()``)."""

from __future__ import annotations

from typing import Any

from s3ddb.errors import DataFileError, DataFileMissingError, UnsupportedOperationError
from s3ddb.format.bases import FileResolver
from s3ddb.format.manifest import Manifest
from s3ddb.index.api import index_statistics

__all__ = ["DatasetStatistics", "check_files"]


def check_files(files: FileResolver, manifest: Manifest, uri: str) -> None:
    """Check that every data, deletion and index file of ``manifest`` exists, and
    data files with their recorded size.

    Raises:
        DataFileMissingError: a file is missing.
        DataFileError: a data file's size differs from the one recorded.
    """
    for fragment in manifest.fragments:
        for data_file in fragment.files:
            store, path = files.data_file(data_file)
            try:
                size = store.head(path).size
            except FileNotFoundError as e:
                raise DataFileMissingError(
                    f"data file {path} of fragment {fragment.id} (version {manifest.version} "
                    f"of {uri}) is missing"
                ) from e
            if data_file.file_size_bytes and size != data_file.file_size_bytes:
                raise DataFileError(
                    f"data file {path} of fragment {fragment.id} (version {manifest.version} "
                    f"of {uri}) has {size} bytes; the manifest records {data_file.file_size_bytes}"
                )
        if fragment.deletion_file is not None:
            store, path = files.deletion_file(fragment)
            if not store.exists(path):
                raise DataFileMissingError(
                    f"deletion file {path} of fragment {fragment.id} (version "
                    f"{manifest.version} of {uri}) is missing"
                )
    for index in manifest.indices:
        store = files.store_for(index.base_id)
        for path in index.file_paths:
            if not store.exists(path):
                raise DataFileMissingError(
                    f"file {path} of index {index.name!r} (version {manifest.version} of "
                    f"{uri}) is missing"
                )


class DatasetStatistics:
    """pylance's ``ds.stats``: statistics of the pinned version."""

    def __init__(self, manifest: Manifest, uri: str) -> None:
        self._manifest = manifest
        self._uri = uri

    def dataset_stats(self, max_rows_per_group: int = 1024) -> dict[str, int]:
        """Deleted rows, fragments, and fragments of fewer than ``max_rows_per_group``
        rows (pylance's "small files")."""
        fragments = list(self._manifest.fragments)
        return {
            "num_deleted_rows": sum(f.physical_rows - f.num_rows for f in fragments),
            "num_fragments": len(fragments),
            "num_small_files": sum(1 for f in fragments if f.physical_rows < max_rows_per_group),
        }

    def index_stats(self, index_name: str) -> dict[str, Any]:
        """As ``Dataset.index_statistics``."""
        return index_statistics(self._manifest, index_name, self._uri)

    def data_stats(self) -> Any:
        """Not supported: s3ddb's manifests do not record bytes per field.

        Raises:
            UnsupportedOperationError: always.
        """
        raise UnsupportedOperationError(
            "stats.data_stats() is not supported by s3ddb: its manifests do not record "
            "bytes per field (docs/pylance.md)"
        )
