"""The vocabulary of conflict rules: outcomes, verdicts, and what a rule may look at.

A *rule* answers, for my transaction and one committed since my read version, how
mine relates to theirs (:class:`Verdict`). A :class:`Fixed` rule is decided by the two
operation kinds alone; the others are functions that look at both transactions and,
through a :class:`ConflictContext`, at the data. The table of rules is
:data:`s3ddb.commit.conflicts.CONFLICT_MATRIX`.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from s3ddb.format.bases import FileResolver
from s3ddb.format.fragment_list import FragmentsById
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectStore
from s3ddb.operations import Transaction

__all__ = ["ConflictContext", "DataRule", "Fixed", "Outcome", "Rule", "Verdict"]


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
        only fragments that differ are decoded, and chunks both versions list are
        not read."""
        return self.before.fragments.diff(self.after.fragments)


@dataclass(frozen=True)
class Fixed:
    """A rule decided by the two operation kinds alone: the same verdict for every pair
    of transactions of those kinds (the commit loop then need not read theirs)."""

    outcome: Outcome
    reason: str

    def __call__(
        self, mine: Transaction, theirs: Transaction, ctx: ConflictContext | None
    ) -> Verdict:
        return Verdict(self.outcome, self.reason)


#: A rule that looks at the transactions (and, given a context, at the data).
DataRule = Callable[[Transaction, Transaction, "ConflictContext | None"], Verdict]

#: A cell of the conflict matrix.
Rule = Fixed | DataRule
