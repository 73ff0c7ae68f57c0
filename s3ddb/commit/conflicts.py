"""Conflict resolution: may my transaction land on top of one committed since I read?

For each transaction committed after my ``read_version`` the resolver answers:

  * compatible (rebasable): my operation applies unchanged, or rebased, to the new
    base; the commit loop retries it at the next version by itself;
  * retryable: my reads are stale; re-executing the operation on the newest version
    may succeed (``RetryableCommitConflictError``). The transaction is never retried
    against its stale base;
  * incompatible: my operation cannot happen any more (``IncompatibleTransactionError``).

The goal is a serializable history: the table after every version equals the result
of running the committed operations one after another, in version order. The rules
are one table, :data:`CONFLICT_MATRIX` (my kind x their kind -> rule). Most cells are
:class:`Fixed`, decided by the kinds alone; the others look at the transactions and,
through a :class:`ConflictContext`, at the rows both sides touched and the data the
other side added (:mod:`s3ddb.commit.rebase`, :mod:`s3ddb.commit.schema_rules`,
:mod:`s3ddb.commit.data_file_rules`). docs/conflicts.md states the same matrix (a test
compares them).
"""

from __future__ import annotations

from s3ddb.commit.data_file_rules import (
    index_vs_index,
    index_vs_rewritten_columns,
    replacement_vs_fragments,
)
from s3ddb.commit.rebase import rebase_delete, rebase_over_compaction, rebase_rewrite, rebase_update
from s3ddb.commit.schema_rules import (
    config_after_config,
    unless_nullability_tightened,
    unless_schema_metadata_changed,
)
from s3ddb.commit.verdicts import ConflictContext, Fixed, Outcome, Rule, Verdict
from s3ddb.errors import IncompatibleTransactionError, RetryableCommitConflictError
from s3ddb.operations import Transaction, Update

__all__ = [
    "CONFLICT_MATRIX",
    "ConflictContext",
    "Fixed",
    "Outcome",
    "Rule",
    "Verdict",
    "check",
    "decided_by_kind",
    "resolve",
    "resolve_kinds",
    "rule_for",
]

# The words docs/conflicts.md uses for the three outcomes.
REBASE, RETRY, REFUSE = Outcome.COMPATIBLE, Outcome.RETRYABLE, Outcome.INCOMPATIBLE

#: mine -> theirs -> rule: how my transaction (row) relates to one of theirs (column)
#: committed after my read version. Every kind s3ddb commits has a row, every kind of
#: the Lance specification a column (:data:`s3ddb.operations.OPERATION_KINDS`, in its
#: order). Why each row is as it is:
#:
#: * Append adds fragments and touches nothing existing: it rebases over anything that
#:   keeps the schema and the fragment list's identity (serially, an append after a
#:   delete or update is not affected by it, so this is exact).
#: * Overwrite and Restore replace everything: whatever happened in between is
#:   replaced, which is what the caller asked for. UpdateConfig touches no data, and
#:   the ids ReserveFragments reserves are the highest of the version it commits.
#: * Delete and Update (merge_insert) look at the rows both sides touched
#:   (:mod:`s3ddb.commit.rebase`). Over an Overwrite or Restore they are refused: the
#:   specification's own example (a Restore); re-running on the replaced data would
#:   delete (or change) nothing, or other rows than the ones chosen (Lance refuses
#:   both). Replaced data files may hold other values, in any fragment: a predicate
#:   or keys may now match rows they did not.
#: * Merge and Project: :mod:`s3ddb.commit.schema_rules`.
#: * Clone is only valid as a dataset's first commit.
CONFLICT_MATRIX: dict[str, dict[str, Rule]] = {
    "Append": {
        "Append": Fixed(REBASE, "appends touch no existing fragment"),
        "Delete": Fixed(REBASE, "appends touch no existing fragment"),
        "Overwrite": Fixed(RETRY, "the dataset was overwritten; append to the new data"),
        "CreateIndex": Fixed(REBASE, "appends touch no existing fragment"),
        "Rewrite": Fixed(REBASE, "appends touch no existing fragment"),
        "Merge": Fixed(RETRY, "columns were added; appended files lack them"),
        "Restore": Fixed(RETRY, "the dataset was restored to another version"),
        "ReserveFragments": Fixed(REBASE, "appends touch no existing fragment"),
        "Update": Fixed(REBASE, "appends touch no existing fragment"),
        "Project": Fixed(RETRY, "the schema changed"),
        "UpdateConfig": Fixed(REBASE, "appends touch no existing fragment"),
        "DataReplacement": Fixed(REBASE, "appends touch no existing fragment"),
        "UpdateMemWalState": Fixed(REBASE, "appends touch no existing fragment"),
        "Clone": Fixed(REFUSE, "clone is only valid as a dataset's first commit"),
        "UpdateBases": Fixed(REBASE, "appends touch no existing fragment"),
    },
    "Overwrite": {
        "Append": Fixed(REBASE, "overwrite replaces every earlier change"),
        "Delete": Fixed(REBASE, "overwrite replaces every earlier change"),
        "Overwrite": Fixed(REBASE, "overwrite replaces every earlier change"),
        "CreateIndex": Fixed(REBASE, "overwrite replaces every earlier change"),
        "Rewrite": Fixed(REBASE, "overwrite replaces every earlier change"),
        "Merge": Fixed(REBASE, "overwrite replaces every earlier change"),
        "Restore": Fixed(REBASE, "overwrite replaces every earlier change"),
        "ReserveFragments": Fixed(REBASE, "overwrite replaces every earlier change"),
        "Update": Fixed(REBASE, "overwrite replaces every earlier change"),
        "Project": Fixed(REBASE, "overwrite replaces every earlier change"),
        "UpdateConfig": Fixed(REBASE, "overwrite replaces every earlier change"),
        "DataReplacement": Fixed(REBASE, "overwrite replaces every earlier change"),
        "UpdateMemWalState": Fixed(REBASE, "overwrite replaces every earlier change"),
        "Clone": Fixed(REBASE, "overwrite replaces every earlier change"),
        "UpdateBases": Fixed(REBASE, "overwrite replaces every earlier change"),
    },
    "Restore": {
        "Append": Fixed(REBASE, "restore replaces every earlier change"),
        "Delete": Fixed(REBASE, "restore replaces every earlier change"),
        "Overwrite": Fixed(REBASE, "restore replaces every earlier change"),
        "CreateIndex": Fixed(REBASE, "restore replaces every earlier change"),
        "Rewrite": Fixed(REBASE, "restore replaces every earlier change"),
        "Merge": Fixed(REBASE, "restore replaces every earlier change"),
        "Restore": Fixed(REBASE, "restore replaces every earlier change"),
        "ReserveFragments": Fixed(REBASE, "restore replaces every earlier change"),
        "Update": Fixed(REBASE, "restore replaces every earlier change"),
        "Project": Fixed(REBASE, "restore replaces every earlier change"),
        "UpdateConfig": Fixed(REBASE, "restore replaces every earlier change"),
        "DataReplacement": Fixed(REBASE, "restore replaces every earlier change"),
        "UpdateMemWalState": Fixed(REBASE, "restore replaces every earlier change"),
        "Clone": Fixed(REBASE, "restore replaces every earlier change"),
        "UpdateBases": Fixed(REBASE, "restore replaces every earlier change"),
    },
    "UpdateConfig": {
        "Append": Fixed(REBASE, "config changes touch no data"),
        "Delete": Fixed(REBASE, "config changes touch no data"),
        "Overwrite": Fixed(REBASE, "config changes touch no data"),
        "CreateIndex": Fixed(REBASE, "config changes touch no data"),
        "Rewrite": Fixed(REBASE, "config changes touch no data"),
        "Merge": Fixed(REBASE, "config changes touch no data"),
        "Restore": Fixed(REBASE, "config changes touch no data"),
        "ReserveFragments": Fixed(REBASE, "config changes touch no data"),
        "Update": Fixed(REBASE, "config changes touch no data"),
        "Project": Fixed(REBASE, "config changes touch no data"),
        "UpdateConfig": config_after_config,
        "DataReplacement": Fixed(REBASE, "config changes touch no data"),
        "UpdateMemWalState": Fixed(REBASE, "config changes touch no data"),
        "Clone": Fixed(REBASE, "config changes touch no data"),
        "UpdateBases": Fixed(REBASE, "config changes touch no data"),
    },
    "ReserveFragments": {
        "Append": Fixed(REBASE, "reserving ids touches no data"),
        "Delete": Fixed(REBASE, "reserving ids touches no data"),
        "Overwrite": Fixed(REBASE, "reserving ids touches no data"),
        "CreateIndex": Fixed(REBASE, "reserving ids touches no data"),
        "Rewrite": Fixed(REBASE, "reserving ids touches no data"),
        "Merge": Fixed(REBASE, "reserving ids touches no data"),
        "Restore": Fixed(REBASE, "reserving ids touches no data"),
        "ReserveFragments": Fixed(REBASE, "reserving ids touches no data"),
        "Update": Fixed(REBASE, "reserving ids touches no data"),
        "Project": Fixed(REBASE, "reserving ids touches no data"),
        "UpdateConfig": Fixed(REBASE, "reserving ids touches no data"),
        "DataReplacement": Fixed(REBASE, "reserving ids touches no data"),
        "UpdateMemWalState": Fixed(REBASE, "reserving ids touches no data"),
        "Clone": Fixed(REBASE, "reserving ids touches no data"),
        "UpdateBases": Fixed(REBASE, "reserving ids touches no data"),
    },
    "Delete": {
        "Append": rebase_delete,
        "Delete": rebase_delete,
        "Overwrite": Fixed(REFUSE, "the dataset was overwritten: the rows it chose are gone"),
        "CreateIndex": Fixed(REBASE, "touches no rows or schema"),
        "Rewrite": rebase_over_compaction,
        "Merge": Fixed(RETRY, "columns were added"),
        "Restore": Fixed(
            REFUSE, "the dataset was restored to another version: the rows it chose are gone"
        ),
        "ReserveFragments": Fixed(REBASE, "touches no rows or schema"),
        "Update": rebase_delete,
        "Project": Fixed(RETRY, "the schema changed"),
        "UpdateConfig": Fixed(REBASE, "touches no rows or schema"),
        "DataReplacement": Fixed(RETRY, "data files were replaced; values may differ"),
        "UpdateMemWalState": Fixed(REBASE, "touches no rows or schema"),
        "Clone": Fixed(REFUSE, "clone is only valid as a dataset's first commit"),
        "UpdateBases": Fixed(REBASE, "touches no rows or schema"),
    },
    "Update": {
        "Append": rebase_update,
        "Delete": rebase_update,
        "Overwrite": Fixed(REFUSE, "the dataset was overwritten: the rows it chose are gone"),
        "CreateIndex": Fixed(REBASE, "touches no rows or schema"),
        "Rewrite": rebase_over_compaction,
        "Merge": Fixed(RETRY, "columns were added"),
        "Restore": Fixed(
            REFUSE, "the dataset was restored to another version: the rows it chose are gone"
        ),
        "ReserveFragments": Fixed(REBASE, "touches no rows or schema"),
        "Update": rebase_update,
        "Project": Fixed(RETRY, "the schema changed"),
        "UpdateConfig": Fixed(REBASE, "touches no rows or schema"),
        "DataReplacement": Fixed(RETRY, "data files were replaced; values may differ"),
        "UpdateMemWalState": Fixed(REBASE, "touches no rows or schema"),
        "Clone": Fixed(REFUSE, "clone is only valid as a dataset's first commit"),
        "UpdateBases": Fixed(REBASE, "touches no rows or schema"),
    },
    "Rewrite": {
        "Append": Fixed(REBASE, "appends touch no existing fragment"),
        "Delete": rebase_rewrite,
        "Overwrite": Fixed(RETRY, "the dataset was overwritten"),
        "CreateIndex": Fixed(REBASE, "touches no rows or schema"),
        "Rewrite": rebase_rewrite,
        "Merge": Fixed(RETRY, "columns were added; the copies lack them"),
        "Restore": Fixed(RETRY, "the dataset was restored to another version"),
        "ReserveFragments": Fixed(REBASE, "touches no rows or schema"),
        "Update": rebase_rewrite,
        "Project": Fixed(RETRY, "the schema changed"),
        "UpdateConfig": Fixed(REBASE, "touches no rows or schema"),
        "DataReplacement": Fixed(RETRY, "data files were replaced"),
        "UpdateMemWalState": Fixed(REBASE, "touches no rows or schema"),
        "Clone": Fixed(REFUSE, "clone is only valid as a dataset's first commit"),
        "UpdateBases": Fixed(REBASE, "touches no rows or schema"),
    },
    "Merge": {
        "Append": Fixed(RETRY, "rows or schema changed; recompute the columns"),
        "Delete": Fixed(RETRY, "rows or schema changed; recompute the columns"),
        "Overwrite": Fixed(
            REFUSE, "the dataset was overwritten: the columns this changed are gone"
        ),
        "CreateIndex": Fixed(REBASE, "touches no rows and no schema"),
        "Rewrite": Fixed(RETRY, "rows or schema changed; recompute the columns"),
        "Merge": Fixed(RETRY, "the schema changed; re-apply on the new one"),
        "Restore": Fixed(
            REFUSE, "the dataset was restored to another version: the schema it changed is gone"
        ),
        "ReserveFragments": Fixed(REBASE, "touches no rows and no schema"),
        "Update": Fixed(RETRY, "rows or schema changed; recompute the columns"),
        "Project": Fixed(RETRY, "the schema changed; re-apply on the new one"),
        "UpdateConfig": unless_schema_metadata_changed,
        "DataReplacement": Fixed(RETRY, "rows or schema changed; recompute the columns"),
        "UpdateMemWalState": Fixed(REBASE, "touches no rows and no schema"),
        "Clone": Fixed(REFUSE, "clone is only valid as a dataset's first commit"),
        "UpdateBases": Fixed(REBASE, "touches no rows and no schema"),
    },
    "Project": {
        "Append": unless_nullability_tightened,
        "Delete": Fixed(REBASE, "a schema-only change keeps every row"),
        "Overwrite": Fixed(
            REFUSE, "the dataset was overwritten: the columns this changed are gone"
        ),
        "CreateIndex": Fixed(REBASE, "touches no rows and no schema"),
        "Rewrite": Fixed(REBASE, "a schema-only change keeps every row"),
        "Merge": Fixed(RETRY, "the schema changed; re-apply on the new one"),
        "Restore": Fixed(
            REFUSE, "the dataset was restored to another version: the schema it changed is gone"
        ),
        "ReserveFragments": Fixed(REBASE, "touches no rows and no schema"),
        "Update": unless_nullability_tightened,
        "Project": Fixed(RETRY, "the schema changed; re-apply on the new one"),
        "UpdateConfig": unless_schema_metadata_changed,
        "DataReplacement": unless_nullability_tightened,
        "UpdateMemWalState": Fixed(REBASE, "touches no rows and no schema"),
        "Clone": Fixed(REFUSE, "clone is only valid as a dataset's first commit"),
        "UpdateBases": Fixed(REBASE, "touches no rows and no schema"),
    },
    "Clone": {
        "Append": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "Delete": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "Overwrite": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "CreateIndex": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "Rewrite": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "Merge": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "Restore": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "ReserveFragments": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "Update": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "Project": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "UpdateConfig": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "DataReplacement": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "UpdateMemWalState": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "Clone": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
        "UpdateBases": Fixed(REFUSE, "a clone is only valid as a dataset's first commit"),
    },
    "UpdateBases": {
        "Append": Fixed(REBASE, "bases touch no data"),
        "Delete": Fixed(REBASE, "bases touch no data"),
        "Overwrite": Fixed(REBASE, "bases touch no data"),
        "CreateIndex": Fixed(REBASE, "bases touch no data"),
        "Rewrite": Fixed(REBASE, "bases touch no data"),
        "Merge": Fixed(REBASE, "bases touch no data"),
        "Restore": Fixed(REBASE, "bases touch no data"),
        "ReserveFragments": Fixed(REBASE, "bases touch no data"),
        "Update": Fixed(REBASE, "bases touch no data"),
        "Project": Fixed(REBASE, "bases touch no data"),
        "UpdateConfig": Fixed(REBASE, "bases touch no data"),
        "DataReplacement": Fixed(REBASE, "bases touch no data"),
        "UpdateMemWalState": Fixed(REBASE, "bases touch no data"),
        "Clone": Fixed(REFUSE, "clone is only valid as a dataset's first commit"),
        "UpdateBases": Fixed(RETRY, "concurrent base change: ids or roots may collide; re-read"),
    },
    "DataReplacement": {
        "Append": Fixed(REBASE, "touches no fragment it replaces"),
        "Delete": replacement_vs_fragments,
        "Overwrite": Fixed(RETRY, "the fragments it replaced are gone"),
        "CreateIndex": Fixed(REBASE, "touches no fragment it replaces"),
        "Rewrite": replacement_vs_fragments,
        "Merge": Fixed(RETRY, "the schema changed"),
        "Restore": Fixed(RETRY, "the fragments it replaced are gone"),
        "ReserveFragments": Fixed(REBASE, "touches no fragment it replaces"),
        "Update": replacement_vs_fragments,
        "Project": Fixed(RETRY, "the schema changed"),
        "UpdateConfig": Fixed(REBASE, "touches no fragment it replaces"),
        "DataReplacement": replacement_vs_fragments,
        "UpdateMemWalState": Fixed(REBASE, "touches no fragment it replaces"),
        "Clone": Fixed(REFUSE, "clone is only valid as a first commit"),
        "UpdateBases": Fixed(REBASE, "touches no fragment it replaces"),
    },
    "CreateIndex": {
        "Append": Fixed(REBASE, "leaves the indexed data as it was"),
        "Delete": Fixed(REBASE, "leaves the indexed data as it was"),
        "Overwrite": Fixed(RETRY, "the dataset was overwritten"),
        "CreateIndex": index_vs_index,
        "Rewrite": Fixed(REBASE, "leaves the indexed data as it was"),
        "Merge": Fixed(RETRY, "columns were added; fragments rewritten"),
        "Restore": Fixed(RETRY, "the dataset was restored"),
        "ReserveFragments": Fixed(REBASE, "leaves the indexed data as it was"),
        "Update": index_vs_rewritten_columns,
        "Project": Fixed(RETRY, "the schema changed"),
        "UpdateConfig": Fixed(REBASE, "leaves the indexed data as it was"),
        "DataReplacement": index_vs_rewritten_columns,
        "UpdateMemWalState": Fixed(REBASE, "leaves the indexed data as it was"),
        "Clone": Fixed(REFUSE, "clone is only valid as a first commit"),
        "UpdateBases": Fixed(REBASE, "leaves the indexed data as it was"),
    },
}


def rule_for(mine_kind: str, theirs_kind: str) -> Rule | None:
    """The cell of :data:`CONFLICT_MATRIX` (None: a kind s3ddb does not commit)."""
    return CONFLICT_MATRIX.get(mine_kind, {}).get(theirs_kind)


def decided_by_kind(mine_kind: str, theirs_kind: str) -> bool:
    """Whether the rule for this pair needs only the kinds (not the transactions).

    The commit loop then skips reading the other transaction: under contention this
    saves two reads per version committed in between.
    """
    return isinstance(rule_for(mine_kind, theirs_kind), Fixed)


def check(mine: Transaction, theirs: Transaction, ctx: ConflictContext | None = None) -> Verdict:
    """Decide how ``mine`` relates to ``theirs`` (committed after my read version).

    ``ctx`` is needed by the data-aware rules; without it they answer RETRYABLE.
    """
    rule = rule_for(mine.kind, theirs.kind)
    if rule is None:
        # Unknown pairs are treated as stale reads: re-executing is always safe.
        return Verdict(Outcome.RETRYABLE, f"no rule for {mine.kind} after {theirs.kind}")
    return rule(mine, theirs, ctx)


def resolve(
    mine: Transaction,
    theirs: Transaction,
    their_version: int,
    ctx: ConflictContext | None = None,
) -> Transaction:
    """``mine`` rebased over ``theirs``, or raise.

    Raises:
        RetryableCommitConflictError: re-execute the operation on the newest version.
        IncompatibleTransactionError: the operation can no longer be done.
    """
    verdict = check(mine, theirs, ctx)
    _raise_unless_compatible(verdict, mine, theirs.kind, their_version)
    return verdict.rebased or mine


def resolve_kinds(mine: Transaction, theirs_kind: str, their_version: int) -> None:
    """Like :func:`resolve` for a pair :func:`decided_by_kind` says needs no details.

    Raises:
        RetryableCommitConflictError, IncompatibleTransactionError: as resolve.
    """
    rule = rule_for(mine.kind, theirs_kind)
    assert isinstance(rule, Fixed), f"{mine.kind} after {theirs_kind} needs the transactions"
    verdict = rule(mine, mine, None)  # a fixed rule ignores the transactions
    _raise_unless_compatible(verdict, mine, theirs_kind, their_version)


def _raise_unless_compatible(
    verdict: Verdict, mine: Transaction, theirs_kind: str, their_version: int
) -> None:
    if verdict.outcome is Outcome.COMPATIBLE:
        return
    is_merge = isinstance(mine.operation, Update) and mine.operation.is_merge
    label = "merge_insert (Update)" if is_merge else mine.kind
    message = (
        f"{label} (read version {mine.read_version}) conflicts with {theirs_kind} "
        f"committed as version {their_version}: {verdict.reason}"
    )
    if verdict.outcome is Outcome.RETRYABLE:
        raise RetryableCommitConflictError(message)
    raise IncompatibleTransactionError(message)
