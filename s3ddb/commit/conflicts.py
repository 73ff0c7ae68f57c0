"""Conflict resolution: may my transaction land on top of one committed since I read?

For each transaction committed after my ``read_version`` the resolver answers:

  * compatible (rebasable): my operation applies unchanged, or rebased, to the new
    base; the commit loop retries it at the next version by itself;
  * retryable: my reads are stale; re-executing the operation on the newest version
    may succeed (``RetryableCommitConflictError``). The transaction is never retried
    against its stale base;
  * incompatible: my operation cannot happen any more (``IncompatibleTransactionError``).

The goal is a serializable history: the table after every version equals the result
of running the committed operations one after another, in version order. Rules are
registered per (my kind, their kind). Most are decided by the kinds alone; those of
the row-changing operations (Delete, Update, merge_insert) look at the rows both sides
touched and at the data the other side added, through a :class:`ConflictContext`
(see :mod:`s3ddb.commit.rebase`). docs/conflicts.md has the full matrix.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from s3ddb.commit.transaction import OPERATION_KINDS, MapUpdate, Transaction, UpdateConfig
from s3ddb.errors import IncompatibleTransactionError, RetryableCommitConflictError
from s3ddb.format.bases import FileResolver
from s3ddb.format.fragment_list import FragmentsById
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectStore


class Outcome(enum.Enum):
    COMPATIBLE = "compatible"
    RETRYABLE = "retryable"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str
    rebased: Transaction | None = None  # set when rebasing changed my transaction


@dataclass
class ConflictContext:
    """What a data-aware rule may look at: the versions just before and at theirs.

    Attributes:
        store: the dataset's object store (rules read data and deletion files).
        before: the manifest my transaction currently applies to (the version just
            before theirs).
        after: the manifest theirs produced.
        written: paths (relative to the dataset root) of files a rebase wrote; the
            commit loop deletes them if the commit definitely fails.
    """

    store: ObjectStore
    before: Manifest
    after: Manifest
    written: list[str] = field(default_factory=list)

    @functools.cached_property
    def files(self) -> FileResolver:
        """Where both versions' files are (for reads; writes go to ``store``)."""
        return FileResolver.for_manifest(self.store, self.before, self.after)

    @functools.cached_property
    def before_fragments(self) -> FragmentsById:
        """``before``'s fragments by id (each decoded when looked up)."""
        return self.before.fragments.by_id()

    @functools.cached_property
    def after_fragments(self) -> FragmentsById:
        """``after``'s fragments by id (each decoded when looked up)."""
        return self.after.fragments.by_id()

    @functools.cached_property
    def fragment_diff(self) -> tuple[set[int], list[int], set[int]]:
        """(fragment ids theirs removed, ids it added, ids whose fragment it changed):
        only fragments that differ are decoded."""
        return self.before_fragments.diff(self.after_fragments)


Rule = Callable[[Transaction, Transaction, "ConflictContext | None"], Verdict]

_RULES: dict[tuple[str, str], Rule] = {}


def register_rule(mine: str, theirs: str, rule: Rule) -> None:
    _RULES[(mine, theirs)] = rule


def fixed(outcome: Outcome, reason: str) -> Rule:
    """A rule decided by the two operation kinds alone."""

    def rule(mine: Transaction, theirs: Transaction, ctx: ConflictContext | None) -> Verdict:
        return Verdict(outcome, reason)

    rule.kind_only = True  # type: ignore[attr-defined]
    rule.outcome = outcome  # type: ignore[attr-defined]
    rule.reason = reason  # type: ignore[attr-defined]
    return rule


def rule_for(mine_kind: str, theirs_kind: str) -> Rule | None:
    return _RULES.get((mine_kind, theirs_kind))


def decided_by_kind(mine_kind: str, theirs_kind: str) -> bool:
    """Whether the rule for this pair needs only the kinds (not the transactions).

    The commit loop then skips reading the other transaction: under contention this
    saves two reads per version committed in between.
    """
    rule = _RULES.get((mine_kind, theirs_kind))
    return bool(getattr(rule, "kind_only", False))


def check(mine: Transaction, theirs: Transaction, ctx: ConflictContext | None = None) -> Verdict:
    """Decide how ``mine`` relates to ``theirs`` (committed after my read version).

    ``ctx`` is needed by the data-aware rules; without it they answer RETRYABLE.
    """
    rule = _RULES.get((mine.kind, theirs.kind))
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
    verdict = _RULES[(mine.kind, theirs_kind)](mine, mine, None)  # kind-only: ignored
    _raise_unless_compatible(verdict, mine, theirs_kind, their_version)


def _raise_unless_compatible(
    verdict: Verdict, mine: Transaction, theirs_kind: str, their_version: int
) -> None:
    if verdict.outcome is Outcome.COMPATIBLE:
        return
    label = "merge_insert (Update)" if getattr(mine.operation, "is_merge", False) else mine.kind
    message = (
        f"{label} (read version {mine.read_version}) conflicts with {theirs_kind} "
        f"committed as version {their_version}: {verdict.reason}"
    )
    if verdict.outcome is Outcome.RETRYABLE:
        raise RetryableCommitConflictError(message)
    raise IncompatibleTransactionError(message)


_C, _R, _I = Outcome.COMPATIBLE, Outcome.RETRYABLE, Outcome.INCOMPATIBLE

# Append adds fragments and touches nothing existing: it rebases over anything that
# keeps the schema and the fragment list's identity. (Serially, an append after a
# delete or update is not affected by it, so this is exact.)
for _theirs in OPERATION_KINDS:
    register_rule("Append", _theirs, fixed(_C, "appends touch no existing fragment"))
register_rule(
    "Append", "Overwrite", fixed(_R, "the dataset was overwritten; append to the new data")
)
register_rule("Append", "Restore", fixed(_R, "the dataset was restored to another version"))
register_rule("Append", "Merge", fixed(_R, "columns were added; appended files lack them"))
register_rule("Append", "Project", fixed(_R, "the schema changed"))
register_rule("Append", "Clone", fixed(_I, "clone is only valid as a dataset's first commit"))

# Overwrite and Restore replace everything: whatever happened in between is replaced,
# which is what the caller asked for.
for _theirs in OPERATION_KINDS:
    register_rule("Overwrite", _theirs, fixed(_C, "overwrite replaces every earlier change"))
    register_rule("Restore", _theirs, fixed(_C, "restore replaces every earlier change"))
    register_rule("UpdateConfig", _theirs, fixed(_C, "config changes touch no data"))
    # The ids reserved are the highest of the version it commits, whatever came before.
    register_rule("ReserveFragments", _theirs, fixed(_C, "reserving ids touches no data"))


def _touched_keys(op: object) -> set[tuple[object, ...]] | None:
    """The keys an UpdateConfig sets or deletes, per map; ``*`` for a map it replaces
    whole. None for an operation whose keys are unknown."""
    if not isinstance(op, UpdateConfig):
        return None
    keys: set[tuple[object, ...]] = {("config", k) for k in (*op.config_upsert, *op.config_delete)}
    keys |= {("metadata", k) for k in (*op.metadata_upsert, *op.metadata_delete)}
    maps: dict[tuple[object, ...], MapUpdate] = {
        ("field", f): c for f, c in op.field_metadata.items()
    }
    if op.schema_metadata is not None:
        maps[("schema",)] = op.schema_metadata
    for where, change in maps.items():
        if change.replace:
            keys.add((*where, "*"))
        keys |= {(*where, k) for k in (*change.upsert, *change.delete)}
    return keys


def _config_after_config(
    mine: Transaction, theirs: Transaction, ctx: ConflictContext | None
) -> Verdict:
    """Config changes of different keys commute; of a shared key, mine is re-applied on
    top (it then wins, as a later call would)."""
    a, b = _touched_keys(mine.operation), _touched_keys(theirs.operation)
    if a is None or b is None:
        return Verdict(Outcome.RETRYABLE, "concurrent config change: re-read and re-apply")

    def overlap(x: set[tuple[object, ...]], y: set[tuple[object, ...]]) -> bool:
        return any(k in y or (k[-1] == "*" and any(j[:-1] == k[:-1] for j in y)) for k in x)

    if overlap(a, b) or overlap(b, a):
        return Verdict(
            Outcome.RETRYABLE, "a concurrent config change set the same keys: re-read and re-apply"
        )
    return Verdict(Outcome.COMPATIBLE, "the two config changes touch different keys")


register_rule("UpdateConfig", "UpdateConfig", _config_after_config)

# The row-changing operations' rules live with their rebase logic.
from s3ddb.commit import rebase as _rebase  # noqa: E402  (registers its rules)

_rebase.register_rules(register_rule, fixed)

from s3ddb.commit import schema_rules as _schema_rules  # noqa: E402  (Merge, Project)

_schema_rules.register_rules(register_rule, fixed)

from s3ddb.commit import base_operations as _base_operations  # noqa: E402

_base_operations.register_rules(register_rule, fixed)
