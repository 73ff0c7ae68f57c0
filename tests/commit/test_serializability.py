"""Property: concurrent appends, deletes, updates, upserts and compactions are serializable.

Hypothesis generates histories over an in-memory dataset with columns ``id`` and ``v``
(int64). Concurrency is simulated in one process: several :class:`s3ddb.Dataset`
handles are pinned at a (soon stale) version and later commit through the conflict
resolver in a random order. Every operation that committed is recorded with the
version it created; the oracle, a plain list of ``(id, v)`` rows, applies each one's
*logical* effect (predicate delete, expression update, keyed upsert, append) in
version order; a compaction (``ds.optimize.compact_files``) changes nothing logical. The
table at every version, the counts the operations returned and the history's operation
kinds must all agree with it. A compaction's version is also checked physically: it
replaced exactly the fragments its metrics report, by clean fragments within its target.

Predicates and value expressions are described once (small dataclasses) and rendered
both as SQL text for s3ddb and as a Python function for the oracle.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

import s3ddb
from s3ddb.errors import RetryableCommitConflictError
from s3ddb.format.fragment_metadata import FragmentMetadata

Row = tuple[int, int]  # (id, v)
State = list[Row]  # a multiset of rows: ids may repeat after colliding appends

MAX_ROWS_PER_FILE = 3
# No backoff between commit attempts: one process, nobody to back off from.
NO_BACKOFF = s3ddb.CommitConfig(backoff_base=0.0, backoff_max=0.0)


# --- predicates: one description, rendered as SQL and as a Python function ----------------


@dataclass(frozen=True)
class Cmp:
    column: str
    op: str
    value: int

    def sql(self) -> str:
        return f"{self.column} {self.op} {self.value}"

    def __call__(self, row: Row) -> bool:
        x = _column(row, self.column)
        return {
            "<": x < self.value,
            "<=": x <= self.value,
            "=": x == self.value,
            "<>": x != self.value,
            ">": x > self.value,
            ">=": x >= self.value,
        }[self.op]


@dataclass(frozen=True)
class Mod:
    column: str
    divisor: int
    remainder: int

    def sql(self) -> str:
        return f"{self.column} % {self.divisor} = {self.remainder}"

    def __call__(self, row: Row) -> bool:
        # SQL's % truncates (the result has the dividend's sign), like math.fmod.
        return int(math.fmod(_column(row, self.column), self.divisor)) == self.remainder


@dataclass(frozen=True)
class Between:
    column: str
    low: int
    high: int

    def sql(self) -> str:
        return f"{self.column} BETWEEN {self.low} AND {self.high}"

    def __call__(self, row: Row) -> bool:
        return self.low <= _column(row, self.column) <= self.high


@dataclass(frozen=True)
class In:
    column: str
    values: tuple[int, ...]

    def sql(self) -> str:
        return f"{self.column} IN ({', '.join(map(str, self.values))})"

    def __call__(self, row: Row) -> bool:
        return _column(row, self.column) in self.values


@dataclass(frozen=True)
class Not:
    inner: Pred

    def sql(self) -> str:
        return f"NOT ({self.inner.sql()})"

    def __call__(self, row: Row) -> bool:
        return not self.inner(row)


@dataclass(frozen=True)
class And:
    left: Pred
    right: Pred

    def sql(self) -> str:
        return f"({self.left.sql()}) AND ({self.right.sql()})"

    def __call__(self, row: Row) -> bool:
        return self.left(row) and self.right(row)


@dataclass(frozen=True)
class Or:
    left: Pred
    right: Pred

    def sql(self) -> str:
        return f"({self.left.sql()}) OR ({self.right.sql()})"

    def __call__(self, row: Row) -> bool:
        return self.left(row) or self.right(row)


Pred = Cmp | Mod | Between | In | Not | And | Or


def _column(row: Row, name: str) -> int:
    return row[0] if name == "id" else row[1]


# --- value expressions for ``update`` (they set v) --------------------------------------


@dataclass(frozen=True)
class Value:
    kind: str  # "add": v + c, "mul": v * c, "const": c, "id": id + c
    c: int

    def sql(self) -> str:
        c = f"({self.c})" if self.c < 0 else str(self.c)
        return {"add": f"v + {c}", "mul": f"v * {c}", "const": c, "id": f"id + {c}"}[self.kind]

    def __call__(self, row: Row) -> int:
        i, v = row
        return {"add": v + self.c, "mul": v * self.c, "const": self.c, "id": i + self.c}[self.kind]


# --- operations ------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendOp:
    rows: tuple[Row, ...]
    kind = "Append"

    def apply(self, state: State) -> tuple[State, dict[str, int]]:
        return [*state, *self.rows], {}

    def matches_nothing(self, state: State) -> bool:
        return not self.rows


@dataclass(frozen=True)
class DeleteOp:
    where: Pred
    kind = "Delete"

    def apply(self, state: State) -> tuple[State, dict[str, int]]:
        kept = [r for r in state if not self.where(r)]
        return kept, {"num_deleted_rows": len(state) - len(kept)}

    def matches_nothing(self, state: State) -> bool:
        return not any(self.where(r) for r in state)


@dataclass(frozen=True)
class UpdateOp:
    value: Value
    where: Pred | None
    rewrite: str
    kind = "Update"

    def _hit(self, row: Row) -> bool:
        return self.where is None or self.where(row)

    def apply(self, state: State) -> tuple[State, dict[str, int]]:
        out = [(r[0], self.value(r)) if self._hit(r) else r for r in state]
        return out, {"num_rows_updated": sum(map(self._hit, state))}

    def matches_nothing(self, state: State) -> bool:
        return not any(map(self._hit, state))


@dataclass(frozen=True)
class UpsertOp:
    rows: tuple[Row, ...]  # unique ids
    kind = "Update"

    def apply(self, state: State) -> tuple[State, dict[str, int]]:
        source = dict(self.rows)
        present = {i for i, _v in state}
        # Every target row with a source key is replaced (duplicated keys included: a
        # MERGE updates each matched target row), the other source rows are inserted.
        out = [(i, source[i]) if i in source else (i, v) for i, v in state]
        inserted = [(i, v) for i, v in self.rows if i not in present]
        counts = {
            "num_inserted_rows": len(inserted),
            "num_updated_rows": sum(i in source for i, _v in state),
            "num_deleted_rows": 0,
        }
        return out + inserted, counts

    def matches_nothing(self, state: State) -> bool:
        return not self.rows


@dataclass(frozen=True)
class CompactOp:
    """``compact_files``: rewrites fragments, changes no row."""

    target_rows: int
    materialize_deletions: bool
    threshold: float
    kind = "Rewrite"

    def apply(self, state: State) -> tuple[State, dict[str, int]]:
        return list(state), {}

    def needs_rewrite(self, fragment: FragmentMetadata) -> bool:
        """Worth rewriting on its own: several data files, or (if materializing) a
        deleted share of at least the threshold."""
        deleted = fragment.num_deleted_rows
        return len(fragment.files) > 1 or (
            self.materialize_deletions
            and deleted > 0
            and deleted / fragment.physical_rows >= self.threshold
        )

    def has_work(self, fragments: list[FragmentMetadata]) -> bool:
        """Whether compacting ``fragments`` (in manifest order) rewrites anything: a
        fragment needs rewriting on its own, or two adjacent small fragments (under the
        target) fit together in one. A small fragment alone is not worth rewriting."""
        if any(map(self.needs_rewrite, fragments)):
            return True

        def small(f: FragmentMetadata) -> bool:
            return f.num_rows < self.target_rows

        return any(
            small(a) and small(b) and a.num_rows + b.num_rows <= self.target_rows
            for a, b in itertools.pairwise(fragments)
        )


Op = AppendOp | DeleteOp | UpdateOp | UpsertOp | CompactOp


@dataclass(frozen=True)
class Open:
    """Open one more handle, pinned at the latest version."""


@dataclass(frozen=True)
class Run:
    """Run ``op`` through handle ``handle`` (modulo the number of handles)."""

    handle: int
    op: Op
    no_retries: bool  # conflict_retries=0 instead of the default


Step = Open | Run


def _table(rows: State) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
        }
    )


def _rows(table: pa.Table) -> State:
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))


def _execute(ds: s3ddb.Dataset, op: Op, no_retries: bool) -> dict[str, int]:
    retries = 0 if no_retries else None
    if isinstance(op, AppendOp):
        ds.insert(_table(list(op.rows)), conflict_retries=retries)
        return {}
    if isinstance(op, DeleteOp):
        return ds.delete(op.where.sql(), conflict_retries=retries)
    if isinstance(op, UpdateOp):
        where = op.where.sql() if op.where is not None else None
        return ds.update(
            {"v": op.value.sql()},
            where,
            rewrite=op.rewrite,  # type: ignore[arg-type]
            conflict_retries=retries,
        )
    if isinstance(op, CompactOp):
        metrics = ds.optimize.compact_files(
            target_rows_per_fragment=op.target_rows,
            materialize_deletions=op.materialize_deletions,
            materialize_deletions_threshold=op.threshold,
            conflict_retries=retries,
        )
        return asdict(metrics)
    builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    if no_retries:
        builder = builder.conflict_retries(0)
    return builder.execute(_table(list(op.rows)))


# --- running a history and checking it ------------------------------------------------


@contextmanager
def _fresh_memory_uri() -> Iterator[str]:
    """Like the ``memory_uri`` fixture, per hypothesis example."""
    name = f"memory://serializability-{uuid.uuid4().hex}"
    try:
        yield name
    finally:
        import fsspec

        fs = fsspec.filesystem("memory")
        root = "/" + name.split("://", 1)[1]
        if fs.exists(root):
            fs.rm(root, recursive=True)


@dataclass
class Committed:
    version: int
    op: Op
    counts: dict[str, int]


@dataclass
class Outcome:
    """What a checked history did: per step ("open", "v<n>" committed, "nothing"
    committed, "conflict" raised), the final table and its fragments' layout
    (physical rows, deleted rows, data files)."""

    steps: list[str]
    final: State
    layout: list[tuple[int, int, int]]


def check_history(initial: State, start_handles: int, steps: list[Step]) -> Outcome:
    """Run ``steps`` on a fresh dataset holding ``initial`` (``start_handles``
    handles pinned at version 1) and check every version against the serial oracle."""
    with _fresh_memory_uri() as uri:
        return _check_history(uri, initial, start_handles, steps)


def _check_history(uri: str, initial: State, start_handles: int, steps: list[Step]) -> Outcome:
    first = s3ddb.write_dataset(_table(initial), uri, max_rows_per_file=MAX_ROWS_PER_FILE)
    assert first.version == 1
    handles = [s3ddb.dataset(uri, commit_config=NO_BACKOFF) for _ in range(start_handles)]
    log: list[str] = []  # what happened, for the failure message
    outcomes: list[str] = []
    committed: list[Committed] = []
    # The oracle, advanced as commits happen: commits land in version order here (one
    # process), so states[n] is the expected table of version n.
    states: dict[int, State] = {1: sorted(initial)}

    def latest() -> int:
        return s3ddb.dataset(uri).version

    for step in steps:
        if isinstance(step, Open):
            handles.append(s3ddb.dataset(uri, commit_config=NO_BACKOFF))
            log.append(f"open h{len(handles) - 1} at v{handles[-1].version}")
            outcomes.append("open")
            continue
        k = step.handle % len(handles)
        ds = handles[k]
        pinned, before, prior_commit = ds.version, latest(), ds.last_commit
        label = f"h{k}@v{pinned} {step.op}{' retries=0' if step.no_retries else ''}"
        try:
            counts = _execute(ds, step.op, step.no_retries)
        except RetryableCommitConflictError:
            log.append(f"{label} -> RetryableCommitConflictError")
            outcomes.append("conflict")
            _event(f"{type(step.op).__name__} raised a retryable conflict")
            assert step.no_retries, _fmt(log)
            before = _reservations(uri, before, latest() + 1, states, log)
            assert latest() == before, f"a failed commit changed the dataset\n{_fmt(log)}"
            assert ds.version == pinned, f"a failed commit moved the handle\n{_fmt(log)}"
            continue
        after = latest()
        if isinstance(step.op, CompactOp):
            # A compaction reserves its fragment ids first: versions that change no data.
            reserved = _reservations(uri, before, after + 1, states, log)
            before = (
                reserved if reserved == after else _reservations(uri, before, after, states, log)
            )
        if after == before:
            log.append(f"{label} -> nothing committed (handle at v{ds.version})")
            outcomes.append("nothing")
            _event(f"{type(step.op).__name__} had nothing to commit")
            assert ds.last_commit is prior_commit, _fmt(log)
            assert pinned <= ds.version <= after, _fmt(log)
            # It planned on the version the handle is now at and found nothing to do.
            if isinstance(step.op, CompactOp):
                fragments = ds.get_fragments()
                assert not step.op.has_work(fragments), (
                    f"{step.op} committed nothing although v{ds.version} has fragments "
                    f"worth compacting: {_fmt_fragments(fragments)}\n{_fmt(log)}"
                )
            else:
                assert step.op.matches_nothing(states[ds.version]), (
                    f"{step.op} committed nothing although it has rows to change at "
                    f"v{ds.version}\n{_fmt(log)}"
                )
            assert all(n == 0 for n in counts.values()), f"{counts}\n{_fmt(log)}"
            continue
        log.append(f"{label} -> v{after} {counts}")
        outcomes.append(f"v{after}")
        if pinned < before:  # for --hypothesis-show-statistics: how it got there
            rebased = ds.last_commit is not None and ds.last_commit.attempts > 1
            how = "rebased over" if rebased else "re-executed after"
            raced = {type(c.op).__name__ for c in committed if c.version > pinned}
            _event(f"{type(step.op).__name__} {how} concurrent commits")
            if "CompactOp" in raced:
                _event(f"{type(step.op).__name__} {how} a concurrent compaction")
        assert after == before + 1, f"one call committed {after - before} versions\n{_fmt(log)}"
        assert ds.version == after, f"the handle is at v{ds.version}, not v{after}\n{_fmt(log)}"
        assert ds.last_commit is not prior_commit, _fmt(log)
        state, expected_counts = step.op.apply(states[before])
        states[after] = sorted(state)
        committed.append(Committed(after, step.op, counts))
        if isinstance(step.op, CompactOp):
            _check_compaction(uri, step.op, before, after, counts, log)
            continue
        assert counts == expected_counts, (
            f"{step.op} at v{after} returned {counts}, serially {expected_counts}\n{_fmt(log)}"
        )

    final = latest()
    history = s3ddb.dataset(uri).versions()
    assert [h.version for h in history] == list(range(1, final + 1)), _fmt(log)
    # Every version is one committed call's, or a compaction's reservation.
    reserved = [h.version for h in history if h.operation == "ReserveFragments"]
    assert sorted([c.version for c in committed] + reserved) == list(range(2, final + 1))
    kinds = [h.operation for h in history if h.operation != "ReserveFragments"]
    assert kinds == ["Overwrite"] + [c.op.kind for c in committed], f"{kinds}\n{_fmt(log)}"
    for n in range(1, final + 1):
        actual = _rows(s3ddb.dataset(uri, version=n).to_table())
        assert actual == states[n], (
            f"version {n} differs from the serial execution\n"
            f"  actual:   {actual}\n  expected: {states[n]}\n{_fmt(log)}"
        )
    for k, ds in enumerate(handles):  # pinned reads see exactly their version
        assert _rows(ds.to_table()) == states[ds.version], f"h{k}\n{_fmt(log)}"
    layout = [
        (f.physical_rows, f.num_deleted_rows, len(f.files))
        for f in s3ddb.dataset(uri).get_fragments()
    ]
    return Outcome(outcomes, states[final], layout)


def _reservations(uri: str, before: int, end: int, states: dict[int, State], log: list[str]) -> int:
    """Versions ``before + 1`` .. up to ``end - 1`` that are ReserveFragments (changing no
    data) get ``before``'s state; returns the last of them (``before`` if none)."""
    ds = s3ddb.dataset(uri)
    version = before
    while version + 1 < end and ds.checkout_version(version + 1).manifest.operation == (
        "ReserveFragments"
    ):
        version += 1
        states[version] = states[before]
        assert ds.checkout_version(version).to_table().num_rows == len(states[before]), log
    return version


def _check_compaction(
    uri: str, op: CompactOp, before: int, after: int, metrics: dict[str, int], log: list[str]
) -> None:
    """Version ``after`` (a compaction) keeps ``before``'s other fragments as they were
    and replaced exactly the fragments (and files) its metrics count by new fragments
    of one data file, no deleted rows and at most the target's rows."""
    old = {f.id: f for f in s3ddb.dataset(uri, version=before).get_fragments()}
    new = {f.id: f for f in s3ddb.dataset(uri, version=after).get_fragments()}
    removed = [old[i] for i in old.keys() - new.keys()]
    added = [new[i] for i in new.keys() - old.keys()]
    where = (
        f"{op} at v{after}: {metrics}\n  before: {_fmt_fragments(list(old.values()))}\n"
        f"  after:  {_fmt_fragments(list(new.values()))}\n{_fmt(log)}"
    )
    assert removed, f"a committed compaction removed no fragment\n{where}"
    assert all(old[i] == new[i] for i in old.keys() & new.keys()), where
    assert metrics == {
        "fragments_removed": len(removed),
        "fragments_added": len(added),
        "files_removed": sum(len(f.files) for f in removed),
        "files_added": sum(len(f.files) for f in added),
    }, where
    # New fragments may carry deletions committed while the compaction ran.
    assert all(len(f.files) == 1 and 0 < f.physical_rows <= op.target_rows for f in added), where


def _fmt_fragments(fragments: list[FragmentMetadata]) -> str:
    """``id:rows-deleted/files`` per fragment."""
    return " ".join(
        f"{f.id}:{f.physical_rows}-{f.num_deleted_rows}/{len(f.files)}" for f in fragments
    )


def _event(text: str) -> None:
    """Count ``text`` in --hypothesis-show-statistics (a no-op outside hypothesis)."""
    if currently_in_test_context():
        event(text)


def _fmt(log: list[str]) -> str:
    return "history:\n  " + "\n  ".join(log)


# --- strategies ------------------------------------------------------------------------

IDS = st.integers(0, 14)
VALUES = st.integers(-20, 20)
COLUMNS = st.sampled_from(["id", "v"])

leaf_predicates = st.one_of(
    st.builds(Cmp, COLUMNS, st.sampled_from(["<", "<=", "=", "<>", ">", ">="]), VALUES),
    st.integers(2, 4).flatmap(
        lambda m: st.builds(Mod, COLUMNS, st.just(m), st.integers(-(m - 1), m - 1))
    ),
    st.builds(Between, COLUMNS, VALUES, VALUES),
    st.builds(In, COLUMNS, st.lists(VALUES, min_size=1, max_size=3).map(tuple)),
)
predicates: st.SearchStrategy[Pred] = st.recursive(
    leaf_predicates,
    lambda inner: st.one_of(
        st.builds(Not, inner), st.builds(And, inner, inner), st.builds(Or, inner, inner)
    ),
    max_leaves=3,
)
# Narrow where clauses, so that concurrent operations often touch disjoint rows (and
# rebase) rather than always overlapping (and retry).
narrow_predicates = st.one_of(
    st.builds(Cmp, st.just("id"), st.just("="), IDS),
    st.builds(In, st.just("id"), st.lists(IDS, min_size=1, max_size=3).map(tuple)),
)
values = st.one_of(
    st.builds(Value, st.just("add"), st.integers(-5, 5)),
    st.builds(Value, st.just("mul"), st.integers(-2, 3)),
    st.builds(Value, st.just("const"), VALUES),
    st.builds(Value, st.just("id"), st.integers(-3, 3)),
)
id_value_pairs = st.tuples(IDS, VALUES)
operations: st.SearchStrategy[Op] = st.one_of(
    st.builds(AppendOp, st.lists(id_value_pairs, min_size=1, max_size=4).map(tuple)),
    st.builds(DeleteOp, st.one_of(predicates, narrow_predicates)),
    st.builds(
        UpdateOp,
        values,
        st.one_of(narrow_predicates, predicates, st.none()),
        st.sampled_from(["auto", "rows", "columns"]),
    ),
    st.builds(
        UpsertOp,
        st.lists(id_value_pairs, min_size=1, max_size=4, unique_by=lambda r: r[0]).map(tuple),
    ),
    st.builds(
        CompactOp,
        st.integers(2, 8),
        st.booleans(),
        st.sampled_from([0.1, 0.25, 1 / 3, 0.5, 1.0]),
    ),
)
initial_tables = st.lists(VALUES, min_size=1, max_size=9).map(
    lambda vs: [(i, v) for i, v in enumerate(vs)]
)


@st.composite
def histories(draw: st.DrawFn, max_segments: int) -> list[Step]:
    """Segments of two kinds: a *round* opens 2-4 handles at the latest version and
    commits one operation through each, in a random order (all but the first commit
    from a stale version); a *free* step opens a handle or runs an operation through
    any handle (perhaps long stale, perhaps moved by its own commits)."""
    out: list[Step] = []
    n = 1  # handles: the test opens one before the history starts
    for _ in range(draw(st.integers(1, max_segments))):
        if draw(st.booleans()):
            r = draw(st.integers(2, 4))
            out += [Open()] * r
            for j in draw(st.permutations(range(r))):
                out.append(Run(n + j, draw(operations), draw(st.booleans())))
            n += r
        elif draw(st.integers(0, 3)) == 0:
            out.append(Open())
            n += 1
        else:
            out.append(Run(draw(st.integers(0, n - 1)), draw(operations), draw(st.booleans())))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=initial_tables, history=histories(max_segments=5))
def test_histories_are_serializable(initial: State, history: list[Step]) -> None:
    check_history(initial, 1, history)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=initial_tables, history=histories(max_segments=8))
def test_histories_are_serializable_many(initial: State, history: list[Step]) -> None:
    check_history(initial, 1, history)


# --- deterministic histories -------------------------------------------------------------


def test_racing_delete_update_upsert_append_from_one_version() -> None:
    """Four handles pinned at version 1 each commit one operation: the delete rebases
    (and deletes the appended row its predicate matches), the update and the upsert
    re-execute (the append added a row the update's where clause matches, and a key
    of the upsert's source)."""
    initial = [(i, 10 * i) for i in range(8)]
    history: list[Step] = [
        Run(0, AppendOp(((3, 99), (20, 7))), False),
        Run(1, DeleteOp(Cmp("v", ">", 50)), False),
        Run(2, UpdateOp(Value("add", 1), Mod("id", 2, 0), "columns"), False),
        Run(3, UpsertOp(((3, -1), (21, 5))), False),
    ]
    outcome = check_history(initial, 4, history)
    assert outcome.steps == ["v2", "v3", "v4", "v5"]
    assert outcome.final == [(0, 1), (1, 10), (2, 21), (3, -1), (4, 41), (5, 50), (20, 8), (21, 5)]


def test_stale_update_without_retries_raises_and_stays_put() -> None:
    """With conflict_retries=0 an update rewriting columns whose where clause matches a
    concurrently appended row raises and leaves the handle where it was (one rewriting
    rows would apply itself to that row instead); a delete through the same stale
    handle then rebases."""
    initial = [(0, 1), (1, 2), (2, 3)]
    history: list[Step] = [
        Run(0, AppendOp(((5, 4),)), False),
        Run(1, UpdateOp(Value("const", 0), Cmp("v", ">=", 3), "columns"), True),
        Run(1, DeleteOp(Cmp("id", "=", 0)), True),
    ]
    outcome = check_history(initial, 2, history)
    assert outcome.steps == ["v2", "conflict", "v3"]
    assert outcome.final == [(1, 2), (2, 3), (5, 4)]


def test_stale_row_update_applies_itself_to_matching_appended_rows() -> None:
    """An update rewriting rows whose where clause matches a concurrently appended row
    lands without retry and changes that row too, as running second would."""
    initial = [(0, 1), (1, 2), (2, 3)]
    history: list[Step] = [
        Run(0, AppendOp(((5, 4),)), False),
        Run(1, UpdateOp(Value("const", 0), Cmp("v", ">=", 3), "rows"), True),
    ]
    outcome = check_history(initial, 2, history)
    assert outcome.steps == ["v2", "v3"]
    assert outcome.final == [(0, 1), (1, 2), (2, 0), (5, 0)]


def test_disjoint_updates_of_one_fragment_rebase() -> None:
    """Updates of different rows of one fragment (rows, then columns, then rows) and a
    delete of a third row all land without re-executing."""
    initial = [(0, 0), (1, 1), (2, 2)]  # one fragment
    history: list[Step] = [
        Run(0, UpdateOp(Value("add", 10), Cmp("id", "=", 0), "rows"), True),
        Run(1, UpdateOp(Value("mul", 3), Cmp("id", "=", 1), "columns"), True),
        Run(2, DeleteOp(Cmp("id", "=", 2)), True),
    ]
    outcome = check_history(initial, 3, history)
    assert outcome.steps == ["v2", "v3", "v4"]
    assert outcome.final == [(0, 10), (1, 3)]


def test_predicates_render_sql_semantics() -> None:
    """The oracle's predicates agree with s3ddb's reading of their SQL text."""
    rows = [(i, v) for i in range(6) for v in (-7, -1, 0, 2, 5)]  # one fragment
    preds: list[Pred] = [
        Mod("v", 3, -1),
        Mod("v", 3, 2),
        Between("v", 2, -1),
        Not(Or(Cmp("id", "<>", 2), In("v", (0, 5)))),
        And(Between("id", 1, 4), Cmp("v", "<=", 0)),
    ]
    table = _table(rows)
    with _fresh_memory_uri() as uri:
        ds = s3ddb.write_dataset(table, uri)
        for pred in preds:
            assert _rows(ds.to_table(filter=pred.sql())) == sorted(filter(pred, rows)), pred
    for value in [Value("add", -3), Value("mul", -2), Value("id", 2), Value("const", -4)]:
        expected = sorted((i, value((i, v))) for i, v in rows)
        with _fresh_memory_uri() as uri:
            ds = s3ddb.write_dataset(table, uri)
            ds.update({"v": value.sql()})
            assert _rows(ds.to_table()) == expected, value


def test_compaction_races_row_changes() -> None:
    """A compaction pinned before a delete of a row in a fragment it compacts carries
    the delete over to its new fragment (rebases, retries=0). Operations through
    handles pinned before both rebase too, whether the compaction left their fragments
    alone (the delete, the upsert) or moved their rows (the update of rows follows its
    row); only an update of columns in place of a compacted fragment retries, and
    re-executes on the newest version."""
    initial = [(i, i) for i in range(9)]  # fragments of ids 0-2, 3-5, 6-8
    history: list[Step] = [
        Run(0, DeleteOp(Cmp("id", "=", 1)), True),
        # Planned on v1: fragments 0-2 and 3-5 fit in 6 rows; the delete changed 0-2.
        # v3 reserves the new fragment's id, v4 compacts with id 1 deleted in it.
        Run(1, CompactOp(6, True, 0.1), True),
        Run(2, DeleteOp(Cmp("id", "=", 7)), True),  # 6-8 was not compacted: rebases
        Run(3, UpdateOp(Value("add", 100), Cmp("id", "=", 4), "rows"), True),  # 3-5 was
        Run(4, UpsertOp(((8, -8), (30, 30))), True),  # matched 8 in 6-8: rebases
        # Pinned at v2, before the compaction of 3-5: columns cannot follow rows.
        Run(0, UpdateOp(Value("add", 100), Cmp("id", "=", 5), "columns"), True),
        Run(0, UpdateOp(Value("add", 100), Cmp("id", "=", 5), "columns"), False),
        # Everything into one fragment: planned on v4, its copy of the fragment whose
        # columns v8 rewrote is stale, so it re-plans (v9 and v10 are reservations).
        Run(1, CompactOp(9, True, 0.1), False),
    ]
    outcome = check_history(initial, 5, history)
    assert outcome.steps == ["v2", "v4", "v5", "v6", "v7", "conflict", "v8", "v11"]
    assert outcome.final == [
        (0, 0), (2, 2), (3, 3), (4, 104), (5, 105), (6, 6), (8, -8), (30, 30)
    ]  # fmt: skip
    assert outcome.layout == [(8, 0, 1)]  # v11 compacted everything into one fragment
