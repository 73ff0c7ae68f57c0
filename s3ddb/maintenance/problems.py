"""What ``s3ddb verify`` reports: the kinds of problem, in one literal table.

:data:`PROBLEM_KINDS` maps each kind to what it means and how to fix it, as
docs/operations.md's table "What it checks, by problem kind" states them (the text is
that table's cells; tests/maintenance/test_problem_kinds_docs.py checks both have the same rows,
in the same order). A :class:`Problem` is one problem found: its kind, where, and the
meaning and fix of that case (which version, which object). Its kind must be in the
table, so a check that reports a new kind cannot leave the table and the
documentation behind.

The checks report problems through a callable with :class:`Problem`'s fields
(:data:`ReportProblem`): :mod:`.verify` for rows, manifests and files,
:mod:`.group_check` for group members, :mod:`.staging` for native Spark writes'
leftovers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PROBLEM_KINDS", "Problem", "ProblemKind", "ReportProblem"]


@dataclass(frozen=True)
class ProblemKind:
    """What a kind of problem means and how to fix it, in general (Markdown, as
    docs/operations.md shows it)."""

    meaning: str
    fix: str


#: Every kind of problem verify reports, in docs/operations.md's order.
PROBLEM_KINDS: dict[str, ProblemKind] = {
    "staged_row": ProblemKind(
        meaning="committed, not finalized (a crashed writer, or one finishing now)",
        fix="`s3ddb sync`",
    ),
    "missing_final_manifest": ProblemKind(
        meaning="a finalized version's manifest is gone: that version cannot be read",
        fix="`s3ddb sync` if a staged copy is left, else restore from backup / bucket versioning",
    ),
    "manifest_size_mismatch": ProblemKind(
        meaning="the final manifest was overwritten or truncated",
        fix="restore from backup",
    ),
    "version_gap": ProblemKind(
        meaning="a version is missing between the first and the last",
        fix="restore the row or manifest",
    ),
    "manifest_without_row": ProblemKind(
        meaning=(
            "a manifest DynamoDB has no row for. Older than every row: a version from before the "
            "dataset used DynamoDB (readers see it). Between two rows: left whole by an "
            "interrupted cleanup (readable by number only). Newer than every row: a writer used "
            "`s3://`"
        ),
        fix=(
            "older or between: nothing, `s3ddb cleanup` removes it (between: at once while the "
            "interrupted cleanup's note is left, else once 7 days old; never while a tag names "
            "it); newer: find that writer"
        ),
    ),
    "row_outside_dataset": ProblemKind(
        meaning="a row's path points outside the dataset; it is refused",
        fix="delete the row",
    ),
    "malformed_row": ProblemKind(
        meaning=(
            "a row holds a value no commit writes (e.g. a manifest digest that is no SHA-256); "
            "it is refused, and its version cannot be read"
        ),
        fix="correct or delete the row (someone wrote it by hand or by mistake)",
    ),
    "orphaned_staged_manifest": ProblemKind(
        meaning="a staged manifest no row refers to (a writer lost or crashed before claiming)",
        fix="`s3ddb sync`",
    ),
    "missing_data_file": ProblemKind(
        meaning="a version refers to a data or deletion file that does not exist",
        fix="restore the file, or `s3ddb restore` an earlier version",
    ),
    "bad_chunk_file": ProblemKind(
        meaning=(
            "a fragment-list chunk (`_fragments/*.chunk`) a version lists is missing or not the "
            "size its manifest records: that version cannot be read"
        ),
        fix="restore the file from a backup, or `s3ddb restore` an earlier version",
    ),
    "corrupt_data_file": ProblemKind(
        meaning=(
            "a data file is not the file its fragment describes (another size than recorded, "
            "not Parquet, truncated, another row count, a declared column missing)"
        ),
        fix="restore the file, or `s3ddb restore` an earlier version",
    ),
    "missing_base_file": ProblemKind(
        meaning=(
            "a version of a shallow clone reads a file from its source (a base path) that the "
            "source no longer has, e.g. after cleanup of an untagged version"
        ),
        fix=(
            "restore the file in the source, or `s3ddb restore` a version that does not use it; "
            "tag cloned versions in the source (`docs/clones.md`)"
        ),
    ),
    "refused_base_path": ProblemKind(
        meaning=(
            "a version reads files through a base path that is refused: one its manifest does not "
            "declare, or on another kind of store than the dataset's (a bucket's clone reading a "
            "local disk)"
        ),
        fix=(
            "`s3ddb restore` a version that does not use it; or, if you trust the base, read with "
            "the storage option `allow_cross_store_base_paths=true` (`docs/clones.md`)"
        ),
    ),
    "missing_index_file": ProblemKind(
        meaning=(
            "a version's index (under `_indices/<uuid>/`) lost a file: filters that use it fail"
        ),
        fix="`create_scalar_index(..., replace=True)`, or restore the file",
    ),
    "unreadable_manifest": ProblemKind(
        meaning=(
            "a version's manifest cannot be decoded, or is not the one its row committed "
            "(another size or SHA-256 digest: replaced or damaged after the commit)"
        ),
        fix="restore from backup (bucket versioning), or `s3ddb restore` an earlier version",
    ),
    "foreign_version": ProblemKind(
        meaning=(
            "a version of another dataset identity than the newest (left from a dataset dropped "
            "and re-created here, or planted); also a manifest without a row whose identity is "
            "not the rows' (a dropped dataset's writer whose copy landed after the drop)"
        ),
        fix="delete its row and manifest, or drop and re-create",
    ),
    "unreferenced_file": ProblemKind(
        meaning=(
            "a data, deletion, transaction, index or chunk file no version refers to (a crashed "
            "writer)"
        ),
        fix="harmless; `s3ddb cleanup` deletes it after 7 days",
    ),
    "foreign_open_format_commit": ProblemKind(
        meaning=(
            "another engine committed to the Iceberg (`metadata/`) or Delta (`_delta_log/`) "
            "table s3ddb publishes, or left a Delta checkpoint (or a `_last_checkpoint` "
            "naming one) after s3ddb's newest version, which Delta readers take as the "
            "newest: s3ddb does not read it, and its next publication may overwrite it"
        ),
        fix=(
            "write through s3ddb only; delete the foreign files, then `s3ddb open-formats "
            "URI --publish`"
        ),
    ),
    "damaged_open_format_state": ProblemKind(
        meaning=(
            "a published Iceberg or Delta file of a kept version (its version is given) "
            "disagrees with the s3ddb manifests it was published from, or cannot be read: "
            "a path outside the dataset, a file or "
            "snapshot s3ddb did not write, a commit that is not JSON, a bomb; s3ddb never "
            "builds on it (its next publication starts afresh), but that format's readers "
            "may see wrong rows until it is rebuilt"
        ),
        fix="`s3ddb open-formats URI --rebuild`",
    ),
    "unpublished_version": ProblemKind(
        meaning=(
            "the newest version enables open formats (Iceberg, Delta) but is not published "
            "in one of them: a publication failed (it was logged) and no commit caught up "
            "since; that format's readers see an older version"
        ),
        fix="`s3ddb open-formats URI --publish`",
    ),
    "catalog_behind": ProblemKind(
        meaning=(
            "the catalog table the dataset names (AWS Glue, `s3ddb catalog register`) stands "
            "for an older version than the newest, or is missing: a catalog update failed "
            "(it was logged) and no commit caught up since; engines that find the table "
            "through the catalog read an older version"
        ),
        fix="`s3ddb catalog sync URI`",
    ),
    "catalog_untrusted": ProblemKind(
        meaning=(
            "the catalog table the dataset names holds what s3ddb does not trust: a table of "
            "another type under the name, a metadata location outside the dataset or of a "
            "version not published or not committed, a version parameter that disagrees, a "
            "parameter that makes engines read the table otherwise (docs/catalogs.md); s3ddb "
            "does not move it, and every commit logs it"
        ),
        fix=(
            "remove the refused parameter, or drop the catalog table (or register another "
            "name), then `s3ddb catalog sync URI`"
        ),
    ),
    "catalog_unreachable": ProblemKind(
        meaning=(
            "the catalog the dataset names (AWS Glue) cannot be reached or refuses the "
            "credentials: whether it is current is unknown"
        ),
        fix="check the Glue settings and policy (`docs/catalogs.md`), then `s3ddb verify` again",
    ),
    "spark_staging_leftover": ProblemKind(
        meaning=(
            "a `_spark_staging/<write id>/` folder whose newest file is older than `--grace`: a "
            "native Spark write (`s3ddb.spark_ext.write`) whose driver crashed or was killed "
            "before the end; no version refers to its files"
        ),
        fix="harmless; `s3ddb cleanup` deletes the folder once its newest file is 7 days old",
    ),
    "missing_group_member": ProblemKind(
        meaning=(
            "a version was committed in a group (`s3ddb.atomic`, `docs/atomic.md`) with a version "
            "of another dataset that has no row, or another commit's"
        ),
        fix="restore the member's row from a backup",
    ),
    "malformed_group": ProblemKind(
        meaning="a row's group attributes (`group_id`, `group_members`) cannot be read",
        fix="restore the row from a backup",
    ),
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset: a kind of :data:`PROBLEM_KINDS`, where it is
    (an object's path, or a version), and what it means and how to fix it here.

    Raises:
        ValueError: ``kind`` is not in :data:`PROBLEM_KINDS`.
    """

    kind: str
    path: str
    meaning: str
    fix: str
    version: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in PROBLEM_KINDS:
            raise ValueError(f"problem kind {self.kind!r} is not in PROBLEM_KINDS")


#: How a check reports a problem: called with :class:`Problem`'s fields
#: (kind, path, meaning, fix, version=None).
ReportProblem = Callable[..., None]
