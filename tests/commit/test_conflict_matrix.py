"""The conflict matrix, cell by cell: "mine" committed after "theirs", both read one version.

For every pair of operations s3ddb builds (and the data-dependent variants of the
pairs whose outcome depends on the rows involved), two Datasets are pinned at the same
version, theirs commits first, then mine with ``conflict_retries=0``. The test checks

  * the outcome: mine lands (compatible) or raises exactly the expected error class;
  * the table (and config) afterwards: what running the two operations' *logical*
    effects one after another gives (theirs then mine), or theirs alone when mine was
    refused. The expectation comes from a pure-Python oracle over lists of rows;
  * for retryable cells, that re-running mine with the default retries lands and
    gives the serial result.

A compaction (``optimize.compact_files``, committed as a Rewrite) is a row and a column
like the others; its oracle is "no logical change", and the cells it is part of also
check that the table's row order is unchanged by it. The pinned version is laid out so
that the compaction options pick specific fragments (see ``compact``): touching or not
the fragments the other side changed.

The operation kinds s3ddb does not build yet only ever appear as "theirs" (opaque
transactions); for those the registered rules are checked directly with
``conflicts.check``, against the explicit table ``OPAQUE_EXPECTED``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.commit import conflicts
from s3ddb.commit.conflicts import ConflictContext, Outcome
from s3ddb.errors import IncompatibleTransactionError, RetryableCommitConflictError
from s3ddb.format._proto import manifest_pb2 as mpb
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.operations import (
    OpaqueOperation,
    Operation,
    Restore,
    Transaction,
    UpdateConfig,
)

# C: compatible (mine lands), R: retryable, X: incompatible.
C, R, X = Outcome.COMPATIBLE, Outcome.RETRYABLE, Outcome.INCOMPATIBLE

# --- the oracle --------------------------------------------------------------------------

Row = tuple[int, int]  # (id, v)


@dataclass(frozen=True)
class State:
    """The logical content of a version: its rows (sorted) and its config."""

    rows: tuple[Row, ...]
    config: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def of(rows: list[Row], config: dict[str, str]) -> State:
        return State(tuple(sorted(rows)), dict(config))


#: Version 1: ids 0..19, v = 10 * id, written 5 rows per fragment (fragments 0..3).
V1 = State.of([(i, 10 * i) for i in range(20)], {})
#: Version 2 deletes id 19; version 3 appends two small fragments (4 and 5) of two rows
#: each, ids 50..53 with v = id (no default predicate on v matches them).
SMALL: list[Row] = [(i, i) for i in range(50, 54)]
#: Version 3 is the version both writers read.
PINNED = 3
PINNED_STATE = State.of([r for r in V1.rows if r[0] != 19] + SMALL, {})


def _table(rows: list[Row]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
        }
    )


def _content(uri: str) -> State:
    ds = s3ddb.dataset(uri)
    table = ds.to_table()
    rows = list(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))
    return State.of(rows, ds.manifest.config)


# --- operations: how to run them and what they mean ------------------------------------


@dataclass(frozen=True)
class Op:
    """An operation: ``run(ds, retries)`` performs it on a pinned Dataset (retries None:
    the default), ``apply(state)`` is its logical effect, ``run_theirs`` how it is
    committed when it goes first."""

    kind: str
    run: Callable[[s3ddb.Dataset, int | None], None]
    apply: Callable[[State], State]
    run_theirs: Callable[[s3ddb.Dataset], None] | None = None
    moves_dataset: bool = True  # False: committed by hand, the Dataset stays pinned
    rewrites: frozenset[int] = frozenset()  # Rewrite: the fragments it compacts (pinned)

    @property
    def versions(self) -> int:
        """Versions it commits: a compaction reserves its fragment ids first."""
        return 2 if self.kind == "Rewrite" else 1

    def commit_first(self, ds: s3ddb.Dataset) -> None:
        if self.run_theirs is not None:
            self.run_theirs(ds)
        else:
            self.run(ds, None)


def append(rows: list[Row]) -> Op:
    def run(ds: s3ddb.Dataset, retries: int | None) -> None:
        ds.insert(_table(rows), conflict_retries=retries)

    return Op("Append", run, lambda s: State.of([*s.rows, *rows], s.config))


def delete(sql: str, matches: Callable[[Row], bool]) -> Op:
    def run(ds: s3ddb.Dataset, retries: int | None) -> None:
        ds.delete(sql, conflict_retries=retries)

    return Op("Delete", run, lambda s: State.of([r for r in s.rows if not matches(r)], s.config))


def update(
    rewrite: str, add: int, where: str, matches: Callable[[Row], bool], column: str = "v"
) -> Op:
    """``column = column + add`` (column "v" or "id") on the rows matching ``where``."""

    def run(ds: s3ddb.Dataset, retries: int | None) -> None:
        values = {column: f"{column} + {add}"}
        ds.update(values, where, rewrite=rewrite, conflict_retries=retries)  # type: ignore[arg-type]

    def changed(row: Row) -> Row:
        return (row[0] + add, row[1]) if column == "id" else (row[0], row[1] + add)

    def apply(s: State) -> State:
        return State.of([changed(r) if matches(r) else r for r in s.rows], s.config)

    return Op(f"Update({rewrite})", run, apply)


def upsert(rows: list[Row], delete_unmatched: bool = False) -> Op:
    """Upsert by id; with ``delete_unmatched`` also delete target rows the source lacks."""

    def run(ds: s3ddb.Dataset, retries: int | None) -> None:
        builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
        if delete_unmatched:
            builder = builder.when_not_matched_by_source_delete()
        if retries is not None:
            builder = builder.conflict_retries(retries)
        builder.execute(_table(rows))

    def apply(s: State) -> State:
        by_id = {} if delete_unmatched else dict(s.rows)
        by_id.update(dict(rows))
        return State.of(list(by_id.items()), s.config)

    return Op("merge_insert", run, apply)


def overwrite(rows: list[Row]) -> Op:
    def run(ds: s3ddb.Dataset, retries: int | None) -> None:
        ds.insert(_table(rows), mode="overwrite", conflict_retries=retries)

    return Op("Overwrite", run, lambda s: State.of(rows, s.config))


def compact(target: int, materialize: bool, rewrites: tuple[int, ...]) -> Op:
    """``compact_files(target_rows_per_fragment=target, materialize_deletions=...)``,
    which on the pinned layout rewrites exactly the fragments ``rewrites`` (checked
    whenever it commits planned on the pinned version). It changes no row."""

    def run(ds: s3ddb.Dataset, retries: int | None) -> None:
        ds.optimize.compact_files(
            target_rows_per_fragment=target,
            materialize_deletions=materialize,
            conflict_retries=retries,
        )

    return Op("Rewrite", run, lambda s: s, rewrites=frozenset(rewrites))


# Compactions of the pinned layout [5, 5, 5, 5 (id 19 deleted: 20%), 2, 2]:
#: fragment 3 alone (deletion-heavy; the others are at or over the target of 2);
COMPACT_DELETED = compact(2, True, (3,))
#: fragments 4 and 5 (small neighbours; fragment 3 has 4 rows, not under 4);
COMPACT_SMALL = compact(4, False, (4, 5))
#: fragments 2 and 3 into one, and 4 and 5 into another.
COMPACT_TAIL = compact(9, False, (2, 3, 4, 5))


def _commit_built(ds: s3ddb.Dataset, operation: Operation, retries: int | None) -> None:
    """Commit an operation built by hand with ``ds``'s version as the read version; on a
    retryable conflict re-read the newest version and commit again (as the Dataset
    methods do), up to ``retries`` times (default 10)."""
    read_version = ds.version
    for attempt in range((10 if retries is None else retries) + 1):
        try:
            s3ddb.Dataset.commit(ds.uri, operation, read_version)
            return
        except RetryableCommitConflictError:
            if attempt == (10 if retries is None else retries):
                raise
            read_version = ds.latest_version


def restore_v1() -> Op:
    # Mine: a Restore transaction read at the pinned version (restore() itself reads
    # the newest version, so it could never conflict). Theirs: the public restore().
    def run(ds: s3ddb.Dataset, retries: int | None) -> None:
        _commit_built(ds, Restore(1), retries)

    def run_theirs(ds: s3ddb.Dataset) -> None:
        ds.checkout_version(1).restore()

    return Op("Restore", run, lambda s: V1, run_theirs, moves_dataset=False)


def update_config(upsert_values: dict[str, str]) -> Op:
    def run(ds: s3ddb.Dataset, retries: int | None) -> None:
        _commit_built(ds, UpdateConfig(config_upsert=dict(upsert_values)), retries)

    return Op(
        "UpdateConfig",
        run,
        lambda s: State.of(list(s.rows), {**s.config, **upsert_values}),
        moves_dataset=False,
    )


def _id_in(*ids: int) -> Callable[[Row], bool]:
    return lambda r: r[0] in ids


# Fragments of the pinned version: 0 = ids 0-4, 1 = ids 5-9, 2 = ids 10-14, 3 = ids 15-18,
# 4 = ids 50-51, 5 = ids 52-53.
# The default operations touch rows such that every data-dependent pair is in its
# "compatible" shape, except where the variants below say otherwise:
#  - theirs' appended / upserted rows have v < 250 (mine's update where clause misses
#    them) but v >= 200 (mine's delete predicate catches them: re-applied on rebase);
#  - mine's delete touches fragment 0 (id 2), theirs' delete fragment 0 too (id 3):
#    different rows of one fragment;
#  - mine's update changes id 7 and theirs' update id 6: different rows of fragment 1;
#  - mine's merge updates id 4 (fragment 0) and inserts 41; theirs' merge keys 11, 30;
#  - mine's compaction rewrites fragment 3, theirs fragments 4 and 5: no other default
#    operation changes either.
THEIRS: dict[str, Op] = {
    "Append": append([(20, 200), (21, 210)]),
    "Delete": delete("id = 3", _id_in(3)),
    "Update(rows)": update("rows", 1, "id = 6", _id_in(6)),
    "Update(columns)": update("columns", 1, "id = 6", _id_in(6)),
    "merge_insert": upsert([(11, 111), (30, 230)]),
    "Rewrite": COMPACT_SMALL,
    "Overwrite": overwrite([(100 + i, 100 * i) for i in range(4)]),
    "Restore": restore_v1(),
    "UpdateConfig": update_config({"owner": "theirs", "t": "1"}),
}

_MINE_DELETE = ("id = 2 OR v >= 200", lambda r: r[0] == 2 or r[1] >= 200)
_MINE_WHERE = ("id = 7 OR v >= 250", lambda r: r[0] == 7 or r[1] >= 250)
MINE: dict[str, Op] = {
    "Append": append([(40, 400)]),
    "Delete": delete(*_MINE_DELETE),
    "Update(rows)": update("rows", 1000, *_MINE_WHERE),
    "Update(columns)": update("columns", 1000, *_MINE_WHERE),
    "merge_insert": upsert([(4, 444), (41, 410)]),
    "Rewrite": COMPACT_DELETED,
    "Overwrite": overwrite([(500 + i, i) for i in range(3)]),
    "Restore": restore_v1(),
    "UpdateConfig": update_config({"owner": "mine", "m": "1"}),
}

KINDS = tuple(MINE)

# Expected outcome of mine (row) after theirs (column) with the default operations.
#                     Append Delete Upd(r) Upd(c) merge  Rewrite Overwr Restore UpdCfg
EXPECTED: dict[str, tuple[Outcome, ...]] = {
    "Append":          (C,     C,     C,     C,     C,     C,      R,     R,      C),
    "Delete":          (C,     C,     C,     C,     C,     C,      X,     X,      C),
    "Update(rows)":    (C,     C,     C,     C,     C,     C,      X,     X,      C),
    "Update(columns)": (C,     C,     C,     R,     C,     C,      X,     X,      C),
    "merge_insert":    (C,     C,     C,     C,     C,     C,      X,     X,      C),
    "Rewrite":         (C,     C,     C,     C,     C,     C,      R,     R,      C),
    "Overwrite":       (C,     C,     C,     C,     C,     C,      C,     C,      C),
    "Restore":         (C,     C,     C,     C,     C,     C,      C,     C,      C),
    "UpdateConfig":    (C,     C,     C,     C,     C,     C,      C,     C,      R),
}  # fmt: skip


@dataclass(frozen=True)
class Case:
    mine: Op
    theirs: Op
    expected: Outcome
    id: str
    #: Retryable cells: whether mine, re-executed, commits a version. None: exactly when
    #: it changes the table (a compaction that changes nothing may still commit).
    rerun_commits: bool | None = None


def _cases() -> list[Case]:
    out = []
    for mine_kind, row in EXPECTED.items():
        for theirs_kind, expected in zip(KINDS, row, strict=True):
            out.append(
                Case(
                    MINE[mine_kind],
                    THEIRS[theirs_kind],
                    expected,
                    f"{mine_kind}-after-{theirs_kind}",
                )
            )

    def variant(
        mine: str | Op,
        theirs: Op,
        expected: Outcome,
        tag: str,
        rerun_commits: bool | None = None,
    ) -> None:
        """A data variant of a cell; ``mine`` is a MINE key or an operation of its own
        (then ``tag`` describes both sides)."""
        op = MINE[mine] if isinstance(mine, str) else mine
        case_id = f"{op.kind}-after-{theirs.kind}[{tag}]"
        out.append(Case(op, theirs, expected, case_id, rerun_commits))

    # Delete: always compatible; deleted rows stay deleted and the predicate is
    # re-applied to the rows theirs added or changed.
    variant("Delete", append([(20, 150), (21, 160)]), C, "appended-rows-unmatched")
    variant("Delete", delete("id = 2 OR id = 3", _id_in(2, 3)), C, "overlapping-rows")
    for rewrite in ("rows", "columns"):
        variant("Delete", update(rewrite, 1, "id = 2", _id_in(2)), C, "same-row")
        variant("Delete", update(rewrite, 1000, "id = 6", _id_in(6)), C, "changed-row-now-matches")
    variant("Delete", upsert([(2, 22)]), C, "same-key")
    variant("Delete", delete("id <= 4", lambda r: r[0] <= 4), C, "theirs-deleted-whole-fragment")
    whole_fragment = delete("id <= 4 OR v >= 200", lambda r: r[0] <= 4 or r[1] >= 200)
    variant(whole_fragment, THEIRS["Delete"], C, "mine-deletes-whole-fragment")
    # Fragment 3 already has a deletion vector (id 19): both add to it.
    variant(
        delete("id = 18", _id_in(18)),
        delete("id = 17", _id_in(17)),
        C,
        "fragment-with-earlier-deletions",
    )
    variant("Delete", upsert([(3, 33)]), C, "same-fragment-other-key")
    by_value = delete("v = 20 OR v >= 200", lambda r: r[1] == 20 or r[1] >= 200)
    for rewrite in ("rows", "columns"):
        # Theirs changes v of id 2 from 20 to 21: run second, "v = 20" misses it.
        theirs = update(rewrite, 1, "id = 2", _id_in(2))
        variant(by_value, theirs, C, "changed-row-no-longer-matches")

    for mine_kind in ("Update(rows)", "Update(columns)"):
        # An update that moves rows absorbs matching rows added concurrently (it applies
        # its values to them, as running second would); one rewriting columns cannot.
        absorbs = C if mine_kind == "Update(rows)" else R
        variant(mine_kind, append([(20, 200), (21, 300)]), absorbs, "appended-row-matches")
        variant(mine_kind, delete("id = 8", _id_in(8)), C, "same-fragment-other-row")
        variant(mine_kind, delete("id = 7", _id_in(7)), R, "same-row")
        variant(
            mine_kind,
            delete("id >= 5 AND id <= 9", lambda r: 5 <= r[0] <= 9),
            R,
            "whole-fragment-deleted",
        )
        for rewrite in ("rows", "columns"):
            variant(mine_kind, update(rewrite, 1, "id = 7", _id_in(7)), R, "same-row")
            variant(mine_kind, update(rewrite, 1, "id = 12", _id_in(12)), C, "other-fragment")
            variant(
                mine_kind,
                update(rewrite, 1000, "id = 12", _id_in(12)),
                absorbs,
                "changed-row-now-matches",
            )
        variant(mine_kind, upsert([(7, 77)]), R, "same-row")
        variant(mine_kind, upsert([(8, 88)]), C, "same-fragment-other-row")
        variant(mine_kind, upsert([(30, 300)]), absorbs, "inserted-row-matches")

    variant("merge_insert", append([(41, 1)]), R, "same-key")
    variant("merge_insert", delete("id = 4", _id_in(4)), R, "matched-row-deleted")
    variant("merge_insert", delete("id <= 4", lambda r: r[0] <= 4), R, "matched-fragment-deleted")
    for rewrite in ("rows", "columns"):
        variant("merge_insert", update(rewrite, 1, "id = 4", _id_in(4)), R, "matched-row-updated")
        # Theirs turns id 12 into 41, a key of mine's source that mine would insert.
        renumber = update(rewrite, 29, "id = 12", _id_in(12), column="id")
        variant("merge_insert", renumber, R, "key-updated-into-source-key")
    # A merge that deletes the target rows its source lacks: retried whenever theirs
    # added rows (it would have deleted them); unaffected by a config change.
    sync = upsert([(4, 444), (41, 410)], delete_unmatched=True)
    variant(sync, THEIRS["Append"], R, "mine-deletes-unmatched-by-source")
    variant(sync, THEIRS["UpdateConfig"], C, "mine-deletes-unmatched-by-source")
    variant("merge_insert", upsert([(3, 33)]), C, "same-fragment-other-key")
    variant("merge_insert", upsert([(41, 1)]), R, "same-key-inserted")
    variant("merge_insert", upsert([(4, 1)]), R, "same-key-updated")

    # Rewrite (a compaction) after a change to a fragment it compacts: rebased when
    # theirs only deleted rows there (moving updated ones elsewhere): the fragment-reuse
    # mapping carries the deletions to the new fragments. Retried, and re-planned on
    # the newest version, when theirs rewrote columns there or removed every row it
    # copied. After changes elsewhere: rebased. Mine compacts fragment 3 unless said
    # otherwise.
    variant("Rewrite", delete("id = 17", _id_in(17)), C, "compacted-row-deleted")
    whole_3 = delete("id >= 15 AND id <= 18", lambda r: 15 <= r[0] <= 18)
    variant("Rewrite", whole_3, R, "compacted-fragment-deleted", False)
    variant("Rewrite", update("rows", 1, "id = 17", _id_in(17)), C, "compacted-row")
    variant("Rewrite", update("columns", 1, "id = 17", _id_in(17)), R, "compacted-row", True)
    for rewrite in ("rows", "columns"):
        variant("Rewrite", update(rewrite, 1, "id = 12", _id_in(12)), C, "other-fragment")
    variant("Rewrite", upsert([(17, 7)]), C, "compacted-row-upserted")
    variant("Rewrite", upsert([(42, 420)]), C, "inserted-only")
    variant("Rewrite", COMPACT_DELETED, R, "same-fragments", False)
    variant("Rewrite", COMPACT_TAIL, R, "overlapping-fragments", False)
    # Mine compacts fragments 4 and 5 together (theirs touches the second of them).
    variant(COMPACT_SMALL, delete("id = 53", _id_in(53)), C, "mine-4-5,theirs-row-of-5")
    upd_50 = update("columns", 1, "id = 50", _id_in(50))
    variant(COMPACT_SMALL, upd_50, R, "mine-4-5,theirs-row-of-4", True)
    variant(COMPACT_SMALL, delete("id = 17", _id_in(17)), C, "mine-4-5,theirs-row-of-3")
    variant(COMPACT_SMALL, COMPACT_DELETED, C, "mine-4-5,theirs-3")

    # Delete, Update, merge_insert after a compaction: their changes to rows it moved
    # follow the rows to the new fragments (rebased); only an update of columns in
    # place of a compacted fragment is retried.
    variant(delete("id = 51", _id_in(51)), COMPACT_SMALL, C, "theirs-4-5,mine-row-of-4")
    variant(delete("id = 17", _id_in(17)), COMPACT_DELETED, C, "theirs-3,mine-row-of-3")
    variant(delete("id = 17", _id_in(17)), COMPACT_SMALL, C, "theirs-4-5,mine-row-of-3")
    variant("Delete", COMPACT_TAIL, C, "theirs-2-5,mine-default")
    for rewrite, outcome in (("rows", C), ("columns", R)):
        mine_update = update(rewrite, 1000, "id = 52", _id_in(52))
        variant(mine_update, COMPACT_SMALL, outcome, "theirs-4-5,mine-row-of-5")
        mine_update = update(rewrite, 1000, "id = 16", _id_in(16))
        variant(mine_update, COMPACT_DELETED, outcome, "theirs-3,mine-row-of-3")
        variant(f"Update({rewrite})", COMPACT_TAIL, C, "theirs-2-5,mine-default")
    variant(upsert([(50, 5000)]), COMPACT_SMALL, C, "theirs-4-5,mine-matches-row-of-4")
    variant(upsert([(18, 5000), (42, 420)]), COMPACT_TAIL, C, "theirs-2-5,mine-matches-row-of-3")
    variant(upsert([(42, 420)]), COMPACT_SMALL, C, "theirs-4-5,mine-inserts-only")
    variant("merge_insert", COMPACT_TAIL, C, "theirs-2-5,mine-default")
    variant(sync, COMPACT_SMALL, C, "mine-deletes-unmatched-by-source")
    return out


CASES = _cases()


def _setup(uri: str) -> None:
    ds = s3ddb.write_dataset(_table(list(V1.rows)), uri, max_rows_per_file=5)
    ds.delete("id = 19")
    ds = s3ddb.write_dataset(_table(SMALL), uri, mode="append", max_rows_per_file=2)
    assert ds.version == PINNED
    fragments = ds.get_fragments()
    assert [f.id for f in fragments] == [0, 1, 2, 3, 4, 5]
    assert [f.physical_rows for f in fragments] == [5, 5, 5, 5, 2, 2]
    assert [f.num_deleted_rows for f in fragments] == [0, 0, 0, 1, 0, 0]
    assert _content(uri) == PINNED_STATE
    assert s3ddb.dataset(uri, version=1).to_table().num_rows == len(V1.rows)


def _ordered(uri: str) -> list[Row]:
    """The rows of the newest version in the dataset's order."""
    table = s3ddb.dataset(uri).to_table()
    return list(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))


def _assert_rewrote(ds: s3ddb.Dataset, op: Op) -> None:
    """``ds`` last committed the compaction ``op`` as planned on the pinned version."""
    assert ds.last_commit is not None
    rewrite = ds.last_commit.transaction.operation
    assert isinstance(rewrite, s3ddb.operations.Rewrite)
    assert {f.id for f in rewrite.old_fragments()} == op.rewrites


def _outcome_of(run: Callable[[], None]) -> Outcome:
    try:
        run()
    except RetryableCommitConflictError as exc:
        assert type(exc) is RetryableCommitConflictError, repr(exc)
        return R
    except IncompatibleTransactionError as exc:
        assert type(exc) is IncompatibleTransactionError, repr(exc)
        return X
    return C


def test_every_cell_is_covered() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    for mine in KINDS:
        for theirs in KINDS:
            assert f"{mine}-after-{theirs}" in ids


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cell(case: Case, memory_uri: str) -> None:
    _setup(memory_uri)
    theirs_ds = s3ddb.dataset(memory_uri, version=PINNED)
    mine_ds = s3ddb.dataset(memory_uri, version=PINNED)

    pinned_order = _ordered(memory_uri)
    case.theirs.commit_first(theirs_ds)
    after_theirs = case.theirs.apply(PINNED_STATE)
    serial = case.mine.apply(after_theirs)
    assert _content(memory_uri) == after_theirs
    theirs_version = PINNED + case.theirs.versions
    assert s3ddb.dataset(memory_uri).version == theirs_version
    if case.theirs.kind == "Rewrite":
        _assert_rewrote(theirs_ds, case.theirs)
        assert _ordered(memory_uri) == pinned_order
    order = _ordered(memory_uri)
    compaction = case.mine.kind == "Rewrite"

    got = _outcome_of(lambda: case.mine.run(mine_ds, 0))
    assert got is case.expected, f"{case.id}: expected {case.expected.value}, got {got.value}"

    if got is C:
        assert _content(memory_uri) == serial
        assert s3ddb.dataset(memory_uri).version == theirs_version + case.mine.versions
        if case.mine.moves_dataset:
            assert mine_ds.version == theirs_version + case.mine.versions
        if compaction:  # rebased as planned, and nothing moved
            _assert_rewrote(mine_ds, case.mine)
            assert _ordered(memory_uri) == order
        return
    # Refused: nothing of mine landed (but a compaction's reservation, which changes
    # no data).
    assert _content(memory_uri) == after_theirs
    refused_version = theirs_version + (1 if compaction else 0)
    assert s3ddb.dataset(memory_uri).version == refused_version
    if got is X:
        # The default retry budget does not re-execute it either: still refused.
        assert _outcome_of(lambda: case.mine.run(mine_ds, None)) is X
        assert _content(memory_uri) == after_theirs
        assert s3ddb.dataset(memory_uri).version == refused_version
    if got is R:
        # Re-executed on the newest version, it lands as if run second (a write that
        # then finds nothing to change commits nothing).
        case.mine.run(mine_ds, None)
        assert _content(memory_uri) == serial
        if compaction:  # re-planned, it reserves ids again: only the rows matter
            assert _ordered(memory_uri) == order
            return
        commits = serial != after_theirs if case.rerun_commits is None else case.rerun_commits
        landed = refused_version + 1 if commits else refused_version
        assert s3ddb.dataset(memory_uri).version == landed
        if case.mine.moves_dataset:
            assert mine_ds.version == landed


# --- kinds s3ddb does not build yet, as "theirs" ------------------------------------------

OPAQUE_KINDS = (
    "CreateIndex",
    "DataReplacement",
    "UpdateMemWalState",
    "Clone",
    "UpdateBases",
)

# DataReplacement names a fragment: (outcome when it names a fragment mine touched,
# outcome when it names another fragment).
# (Merge and Project are built: tests/commit/test_schema_change_conflicts.py checks them as theirs.)
#                   CreateIndex DataRepl MemWal Clone Bases
OPAQUE_EXPECTED: dict[str, tuple[Outcome | tuple[Outcome, Outcome], ...]] = {
    "Append":          (C,    (C, C),  C,     X,    C),
    "Delete":          (C,    (R, R),  C,     X,    C),
    "Update(rows)":    (C,    (R, R),  C,     X,    C),
    "Update(columns)": (C,    (R, R),  C,     X,    C),
    "merge_insert":    (C,    (R, R),  C,     X,    C),
    "Rewrite":         (C,    (R, R),  C,     X,    C),
    "Overwrite":       (C,    (C, C),  C,     C,    C),
    "Restore":         (C,    (C, C),  C,     C,    C),
    "UpdateConfig":    (C,    (C, C),  C,     C,    C),
}  # fmt: skip

#: The fragment each mine operation changes (its "overlapping" fragment; for Rewrite the
#: one it compacts); fragment 2 is changed by none of them. Operations that change no
#: existing fragment use 0.
TOUCHED = {"Delete": 0, "Update(rows)": 1, "Update(columns)": 1, "merge_insert": 0, "Rewrite": 3}
UNTOUCHED = 2


def _opaque_message(kind: str, fragment_id: int) -> object:
    if kind == "CreateIndex":
        return tpb.CreateIndex(new_indices=[mpb.IndexMetadata(uuid="idx-1")])
    if kind == "DataReplacement":
        return tpb.DataReplacement(
            replacements=[
                tpb.DataReplacementGroup(
                    fragment_id=fragment_id, new_file=mpb.DataFile(path="replaced.parquet")
                )
            ]
        )
    if kind == "UpdateMemWalState":
        return tpb.UpdateMemWalState(added=[tpb.MemWal(region="r", generation=1)])
    if kind == "Clone":
        return tpb.Clone(is_shallow=True, ref_name="main", ref_version=1, ref_path="elsewhere")
    assert kind == "UpdateBases"
    return tpb.UpdateBases(new_bases=[mpb.BasePath(id=1, path="s3://other/base")])


def _opaque_cases() -> list[tuple[str, str, str | None, Outcome]]:
    out = []
    for mine, row in OPAQUE_EXPECTED.items():
        for theirs, expected in zip(OPAQUE_KINDS, row, strict=True):
            if isinstance(expected, tuple):
                out.append((mine, theirs, "overlapping-fragment", expected[0]))
                out.append((mine, theirs, "other-fragment", expected[1]))
            else:
                out.append((mine, theirs, None, expected))
    return out


OPAQUE_CASES = _opaque_cases()


def _opaque_id(case: tuple[str, str, str | None, Outcome]) -> str:
    mine, theirs, tag, _ = case
    return f"{mine}-after-{theirs}" + (f"[{tag}]" if tag else "")


def _mine_transaction(uri: str, mine: str) -> Transaction:
    """Mine as the commit loop would hold it: planned and committed on the pinned
    version (nothing concurrent), read back from the commit."""
    ds = s3ddb.dataset(uri, version=PINNED)
    if mine in ("Restore", "UpdateConfig"):
        operation = Restore(1) if mine == "Restore" else UpdateConfig(config_upsert={"m": "1"})
        committed = s3ddb.Dataset.commit(uri, operation, PINNED)
    else:
        MINE[mine].run(ds, 0)
        committed = ds
    assert committed.last_commit is not None
    txn = committed.last_commit.transaction
    assert txn.read_version == PINNED
    if mine == "Rewrite":
        assert isinstance(txn.operation, s3ddb.operations.Rewrite)
        touched = {f.id for f in txn.operation.old_fragments()}
        assert touched == {TOUCHED[mine]}, touched
    elif mine in TOUCHED:  # the premise of the overlap variants
        touched = set(txn.operation.affected_rows)  # type: ignore[attr-defined]
        assert touched == {TOUCHED[mine]}, touched
    return txn


@pytest.mark.parametrize("case", OPAQUE_CASES, ids=[_opaque_id(c) for c in OPAQUE_CASES])
def test_opaque_theirs(case: tuple[str, str, str | None, Outcome], memory_uri: str) -> None:
    mine, theirs_kind, tag, expected = case
    _setup(memory_uri)
    pinned = s3ddb.dataset(memory_uri, version=PINNED)
    txn = _mine_transaction(memory_uri, mine)
    fragment = UNTOUCHED if tag == "other-fragment" else TOUCHED.get(mine, 0)
    theirs = Transaction(
        PINNED, OpaqueOperation(theirs_kind, _opaque_message(theirs_kind, fragment))
    )
    assert theirs.kind == theirs_kind
    ctx = ConflictContext(pinned.handler.store, pinned.manifest, pinned.manifest)
    verdict = conflicts.check(txn, theirs, ctx)
    assert verdict.outcome is expected, f"{_opaque_id(case)}: {verdict.reason}"
    # The commit loop turns the verdict into the matching error.
    if expected is C:
        # Compatible: mine lands, as it is or rebased (the same transaction).
        landed = conflicts.resolve(txn, theirs, PINNED + 1, ctx)
        assert (landed.uuid, landed.kind) == (txn.uuid, txn.kind), _opaque_id(case)
        if verdict.rebased is None:
            assert landed is txn, _opaque_id(case)
    else:
        error = RetryableCommitConflictError if expected is R else IncompatibleTransactionError
        with pytest.raises(error):
            conflicts.resolve(txn, theirs, PINNED + 1, ctx)


def test_opaque_table_covers_every_unbuilt_kind() -> None:
    from s3ddb.commit.build import BUILDERS
    from s3ddb.operations import OPERATION_KINDS

    built = {op.kind for op in BUILDERS}
    # Kinds built since (CreateIndex, DataReplacement, Clone, UpdateBases) stay here as
    # *theirs*: a stored transaction of theirs is what the cases plant.
    assert set(OPAQUE_KINDS) >= set(OPERATION_KINDS) - built
    assert set(OPAQUE_EXPECTED) == set(MINE)


def test_state_oracle_sanity() -> None:
    # The oracle itself, on one composed example: it must not be vacuous.
    s = MINE["Delete"].apply(THEIRS["Append"].apply(PINNED_STATE))
    assert (20, 200) not in s.rows and (2, 20) not in s.rows and (3, 30) in s.rows
    s = MINE["merge_insert"].apply(PINNED_STATE)
    assert (4, 444) in s.rows and (4, 40) not in s.rows and (41, 410) in s.rows
    s = replace(PINNED_STATE, config={"a": "1"})
    assert MINE["Restore"].apply(s) == V1
    assert MINE["Rewrite"].apply(s) == s  # a compaction changes nothing logical


@pytest.mark.parametrize(
    "op", [COMPACT_DELETED, COMPACT_SMALL, COMPACT_TAIL], ids=["deleted", "small", "tail"]
)
def test_compactions_rewrite_the_fragments_meant(op: Op, memory_uri: str) -> None:
    # The premise of the Rewrite variants, on the pinned layout with nothing concurrent.
    _setup(memory_uri)
    order = _ordered(memory_uri)
    ds = s3ddb.dataset(memory_uri, version=PINNED)
    op.run(ds, 0)
    assert ds.version == PINNED + 2  # ReserveFragments, then the Rewrite
    _assert_rewrote(ds, op)
    assert _ordered(memory_uri) == order
    kept = [f.id for f in ds.get_fragments() if f.id <= 5]
    assert kept == [i for i in range(6) if i not in op.rewrites]
    # Right after, the same compaction has nothing left to do.
    op.run(ds, 0)
    assert s3ddb.dataset(memory_uri).version == PINNED + 2
