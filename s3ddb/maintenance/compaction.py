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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyroaring import BitMap

from s3ddb.arguments import check_int
from s3ddb.commit.committer import CommitConfig, commit_transaction
from s3ddb.commit.handlers import CommitHandler
from s3ddb.errors import InvalidInputError, UnsupportedOperationError
from s3ddb.format.bases import FileResolver
from s3ddb.format.datafile import read_fragment, write_fragments_from_table
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.format.manifest import Manifest
from s3ddb.format.row_evaluation import all_rows, take_rows
from s3ddb.format.row_lineage import RowLineage
from s3ddb.index.api import optimize_indices
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.written_files import FileTracker
from s3ddb.operations import ReserveFragments, Rewrite, RewriteGroup, Transaction
from s3ddb.tasks.fragment_map import distributed, parallel_map
from s3ddb.versions.pinned import plan_and_commit

if TYPE_CHECKING:
    from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "DEFAULT_TARGET_ROWS_PER_FRAGMENT",
    "CompactionMetrics",
    "CompactionOptions",
    "DatasetOptimizer",
    "ReserveIds",
    "plan_compaction",
    "plan_groups",
    "reserve_fragment_ids",
]

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
        check_int("target_rows_per_fragment", self.target_rows_per_fragment, minimum=1)
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


#: Reserves ``n`` fragment ids in the dataset, returning the first.
ReserveIds = Callable[[int], int]


def plan_compaction(
    store: ObjectStore, manifest: Manifest, options: CompactionOptions, reserve: ReserveIds
) -> tuple[Rewrite | None, CompactionMetrics]:
    """The Rewrite that compacts ``manifest``'s version (None if nothing is worth it).

    The new fragments' ids come from ``reserve`` (a ReserveFragments commit), and each
    group records the rows it copied: together they let a delete committed during the
    compaction follow its rows (see :mod:`s3ddb.commit.fragment_reuse`).
    """
    groups = plan_groups(manifest, options)
    if not groups:
        return None, CompactionMetrics()
    schema = manifest.schema
    names = list(schema.arrow.names)

    sources = FileResolver.for_manifest(store, manifest)

    def visible_rows(fragment: FragmentMetadata) -> tuple[pa.Table, BitMap]:
        table = read_fragment(sources, fragment, schema, names)
        copied = all_rows(fragment.physical_rows)
        if fragment.deletion_file is not None:
            copied -= read_deleted_rows(sources, fragment)
            table = take_rows(table, copied)
        return table, copied

    def rewrite(old: list[FragmentMetadata], rows: list[tuple[pa.Table, BitMap]]) -> _Unnumbered:
        table = pa.concat_tables([t for t, _copied in rows])
        limit = options.target_rows_per_fragment
        new = write_fragments_from_table(store, table, schema, max_rows_per_file=limit)
        copied = tuple((f.id, c) for f, (_t, c) in zip(old, rows))
        if manifest.stable_row_ids:
            # Compaction changes no row: each keeps its id and versions.
            lineage = RowLineage.concat([RowLineage.of_rows(f, c) for f, (_t, c) in zip(old, rows)])
            new = lineage.spread(new)
        return _Unnumbered(tuple(old), tuple(new), copied)

    files = FileTracker(store)
    out: list[_Unnumbered] = []
    with files.cleanup_on_error():
        if distributed():
            # One task per group reads and writes it; only metadata comes back.
            out = parallel_map(lambda old: rewrite(old, [visible_rows(f) for f in old]), groups)
            for group in out:
                files.add(*data_file_paths(group.new))
        else:
            for old in groups:
                out.append(rewrite(old, parallel_map(visible_rows, old)))
                files.add(*data_file_paths(out[-1].new))
        next_id = reserve(sum(len(g.new) for g in out))
        numbered = []
        for group in out:
            new = tuple(f.with_id(next_id + i) for i, f in enumerate(group.new))
            next_id += len(new)
            numbered.append(RewriteGroup(group.old, new, group.copied))
        op = Rewrite(tuple(numbered))
    return op, _metrics(numbered)


def _metrics(groups: Sequence[RewriteGroup]) -> CompactionMetrics:
    return CompactionMetrics(
        fragments_removed=sum(len(g.old_fragments) for g in groups),
        fragments_added=sum(len(g.new_fragments) for g in groups),
        files_removed=sum(len(f.files) for g in groups for f in g.old_fragments),
        files_added=sum(len(f.files) for g in groups for f in g.new_fragments),
    )


@dataclass(frozen=True)
class _Unnumbered:
    """A rewrite group before its new fragments have ids."""

    old: tuple[FragmentMetadata, ...]
    new: tuple[FragmentMetadata, ...]
    copied: tuple[tuple[int, BitMap], ...]


def reserve_fragment_ids(
    handler: CommitHandler, manifest: Manifest, config: CommitConfig
) -> ReserveIds:
    """A :data:`ReserveIds` committing ReserveFragments on top of ``manifest``."""

    def reserve(n: int) -> int:
        txn = Transaction(manifest.version, ReserveFragments(n))
        result = commit_transaction(handler, txn, manifest, config=config)
        highest = result.manifest.max_fragment_id
        assert highest is not None
        return highest - n + 1

    return reserve


class DatasetOptimizer:
    """``ds.optimize``: maintenance operations on a dataset."""

    def __init__(self, dataset: PinnedVersion) -> None:
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
            AtomicGroupError: the Dataset is a handle of an atomic group.
        """
        ds = self._dataset
        # Compaction reserves its new fragments' ids with a commit of its own
        # (ReserveFragments), which cannot wait for a group's decision.
        ds.refuse_in_group(
            "optimize.compact_files()",
            "Compaction reserves fragment ids with a commit of its own: compact before "
            "or after the group, on s3ddb.dataset(uri).",
        )
        options = CompactionOptions(
            target_rows_per_fragment, materialize_deletions, materialize_deletions_threshold
        )
        before = ds.last_commit
        planned = plan_and_commit(
            ds,
            "compact_files",
            lambda manifest: plan_compaction(
                ds.handler.store,
                manifest,
                options,
                reserve_fragment_ids(ds.handler, manifest, ds.commit_config),
            ),
            conflict_retries,
            retry_timeout,
        )
        committed = ds.last_commit
        if committed is None or committed is before:
            return planned
        # A rebase may have dropped groups whose rows were all deleted meanwhile: report
        # what was committed.
        op = committed.transaction.operation
        assert isinstance(op, Rewrite)
        return _metrics(op.groups)

    def optimize_indices(
        self,
        *,
        index_names: Sequence[str] | None = None,
        num_indices_to_merge: int = 1,
        retrain: bool = False,
    ) -> None:
        """Cover every fragment again: each index (or those in ``index_names``) that
        misses fragments (appended, compacted or rewritten since it was built) is
        rebuilt over the pinned version, all in one commit; the Dataset moves to the
        version committed. Nothing is committed when every index covers every fragment.

        pylance merges new data into an index's segments; an s3ddb index is one
        segment and is rebuilt whole, so ``num_indices_to_merge`` and ``retrain`` are
        accepted (pylance's arguments) and change nothing.

        Raises:
            InvalidInputError: bad arguments, or ``index_names`` names no index of the
                version.
            RetryableCommitConflictError, TooMuchWriteContentionError: see
                :meth:`s3ddb.Dataset.update`.
        """
        check_int("num_indices_to_merge", num_indices_to_merge, minimum=0)
        if not isinstance(retrain, bool):
            raise InvalidInputError(f"retrain must be True or False, got {retrain!r}")
        optimize_indices(self._dataset, index_names)

    def enable_auto_cleanup(self, config: object = None) -> None:
        """Raises UnsupportedOperationError: s3ddb never removes versions on its own."""
        raise _no_auto_cleanup("enable_auto_cleanup()")

    def disable_auto_cleanup(self) -> None:
        """Raises UnsupportedOperationError: s3ddb never removes versions on its own."""
        raise _no_auto_cleanup("disable_auto_cleanup()")


def _no_auto_cleanup(call: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"optimize.{call} is not supported by s3ddb: it never removes versions on its own; "
        "run ds.cleanup_old_versions(...) or `s3ddb cleanup` when you choose "
        "(docs/operations.md)"
    )
