"""Compaction: rewrite small or deletion-heavy fragments into fewer, cleaner ones.

Deletes, updates and upserts leave behind small fragments, deletion files and (for
in-place column updates) several data files per fragment; every one costs a request
when the dataset is read. ``ds.optimize.compact_files()`` rewrites runs of adjacent
such fragments into new fragments of up to ``target_rows_per_fragment`` rows, keeping
every visible row and the dataset's row order, and commits them as a ``Rewrite``.

A compaction never changes what a reader sees, so it races safely with everything:
it rebases over appends and over changes to fragments it does not touch, and is
re-executed on the newest version when a concurrent commit changed a fragment it was
compacting (see docs/conflicts.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from s3ddb.commit.row_operations import Rewrite, RewriteGroup
from s3ddb.errors import InvalidInputError
from s3ddb.format.datafile import read_fragment, write_fragments_from_table
from s3ddb.format.deletion import read_deletion_mask
from s3ddb.format.fragment import FragmentMetadata, data_file_paths
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectStore
from s3ddb.row_changes import FileTracker, distributed, parallel_map

if TYPE_CHECKING:
    from s3ddb.dataset import Dataset

DEFAULT_TARGET_ROWS_PER_FRAGMENT = 1024 * 1024


@dataclass(frozen=True)
class CompactionMetrics:
    """What a compaction did (all zero if it found nothing worth rewriting)."""

    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0


@dataclass(frozen=True)
class CompactionOptions:
    """Which fragments a compaction rewrites, and into what.

    Attributes:
        target_rows_per_fragment: rows per new fragment; fragments with fewer rows
            are candidates.
        materialize_deletions: rewrite fragments whose deleted share is at least
            ``materialize_deletions_threshold``, dropping their deleted rows.
    """

    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS_PER_FRAGMENT
    materialize_deletions: bool = True
    materialize_deletions_threshold: float = 0.1

    def __post_init__(self) -> None:
        target = self.target_rows_per_fragment
        if not isinstance(target, int) or isinstance(target, bool) or target < 1:
            raise InvalidInputError(f"target_rows_per_fragment must be an int >= 1, got {target!r}")
        if not isinstance(self.materialize_deletions, bool):
            raise InvalidInputError(
                f"materialize_deletions must be True or False, got {self.materialize_deletions!r}"
            )
        threshold = self.materialize_deletions_threshold
        if (
            not isinstance(threshold, (int, float))
            or isinstance(threshold, bool)
            or not 0 < threshold <= 1
        ):
            raise InvalidInputError(
                f"materialize_deletions_threshold must be in (0, 1], got {threshold!r}"
            )

    def needs_rewrite(self, fragment: FragmentMetadata) -> bool:
        """Whether ``fragment`` is worth rewriting even on its own."""
        deleted = (
            fragment.num_deleted_rows / fragment.physical_rows if fragment.physical_rows else 0
        )
        return len(fragment.files) > 1 or (
            self.materialize_deletions
            and fragment.num_deleted_rows > 0
            and deleted >= self.materialize_deletions_threshold
        )

    def is_candidate(self, fragment: FragmentMetadata) -> bool:
        return fragment.num_rows < self.target_rows_per_fragment or self.needs_rewrite(fragment)


def plan_groups(manifest: Manifest, options: CompactionOptions) -> list[list[FragmentMetadata]]:
    """Runs of adjacent candidate fragments, each of at most the target row count
    (a fragment over the target forms a group of its own). A group of one fragment
    that only is small is dropped: rewriting it alone gains nothing."""
    groups: list[list[FragmentMetadata]] = []
    current: list[FragmentMetadata] = []
    rows = 0

    def close() -> None:
        nonlocal current, rows
        if len(current) > 1 or (current and options.needs_rewrite(current[0])):
            groups.append(current)
        current, rows = [], 0

    for fragment in manifest.fragments:
        if not options.is_candidate(fragment):
            close()
            continue
        if current and rows + fragment.num_rows > options.target_rows_per_fragment:
            close()
        current.append(fragment)
        rows += fragment.num_rows
    close()
    return groups


def plan_compaction(
    store: ObjectStore, manifest: Manifest, options: CompactionOptions
) -> tuple[Rewrite | None, CompactionMetrics]:
    """The Rewrite that compacts ``manifest``'s version (None if nothing is worth it)."""
    groups = plan_groups(manifest, options)
    if not groups:
        return None, CompactionMetrics()
    schema = manifest.schema
    names = list(schema.arrow.names)

    def visible_rows(fragment: FragmentMetadata) -> pa.Table:
        table = read_fragment(store, fragment, schema, names)
        if fragment.deletion_file is not None:
            table = table.filter(read_deletion_mask(store, fragment))
        return table

    def rewrite(old: list[FragmentMetadata], rows: list[pa.Table]) -> RewriteGroup:
        table = pa.concat_tables(rows)
        limit = options.target_rows_per_fragment
        new = write_fragments_from_table(store, table, schema, max_rows_per_file=limit)
        return RewriteGroup(tuple(old), tuple(new))

    files = FileTracker(store)
    out = []
    with files.cleanup_on_error():
        if distributed():
            # One task per group reads and writes it; only metadata comes back.
            out = parallel_map(lambda old: rewrite(old, [visible_rows(f) for f in old]), groups)
            for group in out:
                files.add(*data_file_paths(group.new_fragments))
        else:
            for old in groups:
                out.append(rewrite(old, parallel_map(visible_rows, old)))
                files.add(*data_file_paths(out[-1].new_fragments))
        op = Rewrite(tuple(out))
    return op, CompactionMetrics(
        fragments_removed=sum(len(g.old_fragments) for g in out),
        fragments_added=sum(len(g.new_fragments) for g in out),
        files_removed=sum(len(f.files) for g in out for f in g.old_fragments),
        files_added=sum(len(f.files) for g in out for f in g.new_fragments),
    )


class DatasetOptimizer:
    """``ds.optimize``: maintenance operations on a dataset."""

    def __init__(self, dataset: Dataset) -> None:
        self._dataset = dataset

    def compact_files(
        self,
        *,
        target_rows_per_fragment: int = DEFAULT_TARGET_ROWS_PER_FRAGMENT,
        materialize_deletions: bool = True,
        materialize_deletions_threshold: float = 0.1,
        conflict_retries: int | None = None,
        retry_timeout: float | None = None,
    ) -> CompactionMetrics:
        """Rewrite small fragments, fragments with many deleted rows and fragments with
        several data files into fragments of up to ``target_rows_per_fragment`` rows.

        Reads the pinned version and commits a ``Rewrite`` (nothing if no fragment is
        worth rewriting); the Dataset moves to the version committed. The table's
        rows and their order are unchanged. Old versions keep their files.

        Raises:
            InvalidInputError: bad options.
            RetryableCommitConflictError, TooMuchWriteContentionError: see
                :meth:`s3ddb.Dataset.update`.
        """
        options = CompactionOptions(
            target_rows_per_fragment, materialize_deletions, materialize_deletions_threshold
        )
        ds = self._dataset
        return ds._run_planned(
            "compact_files",
            lambda manifest: plan_compaction(ds.handler.store, manifest, options),
            conflict_retries,
            retry_timeout,
        )
