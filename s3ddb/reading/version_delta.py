"""pylance's ``LanceDataset.delta()``: what changed between two versions of a dataset
with stable row ids, by row id and row version.

    delta = ds.delta(compared_against=3)            # versions 3 (excluded) .. ds.version
    delta = ds.delta(begin_version=3, end_version=7)
    delta.get_inserted_rows()     # rows created after begin_version, up to end_version
    delta.get_updated_rows()      # rows created before, last changed within the range
    delta.get_deleted_row_ids()   # _rowid of rows begin_version shows and end_version not
    delta.list_transactions()     # the transactions of versions begin+1 .. end

As pylance does, inserted and updated rows are the rows of the version ``ds`` is
pinned to (usually the newest), with its columns and ``_rowid``,
``_row_created_at_version`` and ``_row_last_updated_at_version``, chosen by their row
versions: inserted, ``begin < _row_created_at_version <= end``; updated,
``_row_created_at_version <= begin < _row_last_updated_at_version <= end``. So a row
inserted within the range is an inserted row whatever happened to it since, a row
deleted since is in neither, and a row updated again after ``end_version`` is not an
updated row of the range. Deleted row ids compare the two versions' row ids, which
come from the manifests (no data file is read for them).

A dataset without stable row ids has no row versions: every method but
``list_transactions`` raises (pylance gives empty inserted and updated rows there);
its changes are in :meth:`s3ddb.Dataset.changes`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.arguments import check_int
from s3ddb.commit.committer import load_transaction
from s3ddb.errors import InvalidInputError
from s3ddb.operations.transaction import Transaction

if TYPE_CHECKING:
    from s3ddb.dataset import Dataset

__all__ = ["ROW_COLUMNS", "DatasetDelta", "dataset_delta"]

#: The row columns the rows of a delta carry, after the dataset's (pylance's names).
ROW_COLUMNS = ("_rowid", "_row_created_at_version", "_row_last_updated_at_version")


def dataset_delta(
    ds: Dataset,
    compared_against: int | None = None,
    *,
    begin_version: int | None = None,
    end_version: int | None = None,
) -> DatasetDelta:
    """The delta of ``ds``'s dataset between two versions (module docstring):
    ``compared_against`` (``begin_version``, with ``end_version`` ``ds.version``), or
    both of ``begin_version`` (excluded) and ``end_version`` (included).

    Raises:
        InvalidInputError: both forms given, or neither, or only one end of a range;
            a version not an int >= 0 (the end: >= 1), or the begin after the end.
        VersionNotFoundError: the end version does not exist.
    """
    ranged = begin_version is not None or end_version is not None
    if compared_against is not None and ranged:
        raise InvalidInputError("give compared_against, or begin_version and end_version, not both")
    if compared_against is not None:
        begin, end = compared_against, ds.version
    elif begin_version is not None and end_version is not None:
        begin, end = begin_version, end_version
    else:
        raise InvalidInputError(
            "delta needs compared_against, or both begin_version and end_version"
        )
    check_int("begin_version", begin, minimum=0)
    check_int("end_version", end, minimum=1)
    if begin > end:
        raise InvalidInputError(f"delta: begin_version {begin} is after end_version {end}")
    ds.checkout_version(end)  # it exists
    return DatasetDelta(ds, begin, end)


class DatasetDelta:
    """The differences between versions ``begin`` (excluded) and ``end`` (included),
    with rows as ``ds``'s pinned version shows them; see the module docstring. Made by
    :meth:`s3ddb.Dataset.delta`."""

    def __init__(self, ds: Dataset, begin: int, end: int) -> None:
        self._ds = ds
        self._begin = begin
        self._end = end

    @property
    def begin_version(self) -> int:
        return self._begin

    @property
    def end_version(self) -> int:
        return self._end

    def _require_row_ids(self, what: str) -> None:
        if not self._ds.manifest.stable_row_ids:
            raise InvalidInputError(
                f"{what} of {self._ds.uri} needs stable row ids, which version "
                f"{self._ds.version} does not use (write_dataset(..., "
                "enable_stable_row_ids=True)); Dataset.changes lists its changes"
            )

    def _rows(self, keep: str) -> pa.RecordBatchReader:
        columns = [*self._ds.schema.names, *ROW_COLUMNS]
        schema = self._ds.schema
        for name in ROW_COLUMNS:
            schema = schema.append(pa.field(name, pa.uint64()))
        begin = pa.scalar(self._begin, pa.uint64())
        end = pa.scalar(self._end, pa.uint64())

        def chosen() -> Iterator[pa.RecordBatch]:
            for batch in self._ds.to_batches(columns=columns):
                created = batch.column("_row_created_at_version")
                updated = batch.column("_row_last_updated_at_version")
                if keep == "inserted":
                    mask = pc.and_(pc.greater(created, begin), pc.less_equal(created, end))
                else:
                    mask = pc.and_(
                        pc.and_(pc.less_equal(created, begin), pc.greater(updated, begin)),
                        pc.less_equal(updated, end),
                    )
                picked = batch.filter(mask)
                if picked.num_rows:
                    yield picked

        return pa.RecordBatchReader.from_batches(schema, chosen())

    def get_inserted_rows(self) -> pa.RecordBatchReader:
        """The rows (of the pinned version) created after the begin version, up to
        the end version.

        Raises:
            InvalidInputError: the dataset has no stable row ids.
        """
        self._require_row_ids("inserted rows")
        return self._rows("inserted")

    def get_updated_rows(self) -> pa.RecordBatchReader:
        """The rows (of the pinned version) created up to the begin version whose
        last change is after it, up to the end version.

        Raises:
            InvalidInputError: the dataset has no stable row ids.
        """
        self._require_row_ids("updated rows")
        return self._rows("updated")

    def get_deleted_row_ids(self) -> pa.RecordBatchReader:
        """The ``_rowid`` of every row the begin version shows and the end version
        does not (a row created and deleted within the range is not one), ascending.

        Raises:
            InvalidInputError: the dataset has no stable row ids (at either version).
        """
        self._require_row_ids("deleted row ids")
        schema = pa.schema([pa.field("_rowid", pa.uint64())])
        if self._begin == 0:
            return pa.RecordBatchReader.from_batches(schema, [])
        before = self._ds.checkout_version(self._begin)
        after = self._ds.checkout_version(self._end)
        for version in (before, after):
            if not version.manifest.stable_row_ids:
                raise InvalidInputError(
                    f"deleted row ids of {self._ds.uri} need stable row ids, which "
                    f"version {version.version} does not use"
                )
        old = _row_ids(before)
        new = _row_ids(after)
        gone = np.setdiff1d(old, new, assume_unique=True)
        return pa.RecordBatchReader.from_batches(
            schema, [pa.record_batch([pa.array(gone, pa.uint64())], schema=schema)]
        )

    def list_transactions(self) -> list[Transaction]:
        """The transactions of the versions after the begin version up to the end
        version, in order (one whose file cleanup removed is left out)."""
        handler = self._ds.handler
        found = []
        for location in handler.list_locations(max(self._begin + 1, 1), self._end):
            transaction = load_transaction(handler, handler.load_manifest(location))
            if transaction is not None:
                found.append(transaction)
        return found


def _row_ids(ds: Dataset) -> np.ndarray:
    table = ds.to_table(columns=["_rowid"])
    return np.asarray(table.column("_rowid").to_numpy(), dtype=np.uint64)
