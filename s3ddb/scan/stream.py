"""Streaming a version's matching rows in order with bounded memory.

Fragments are planned (statistics, footer, deletion file) a few ahead on worker
threads; each plan is cut into reads of consecutive row groups, and reads are started
in order while the decoded bytes they will hold, running or done and not yet
consumed, stay within half the read-ahead budget (the other half is for what the
consumer holds and for the allocator's slack; one read is always allowed, so a row
group larger than the budget still reads), at most ``workers`` plans and reads
running at a time (none ahead with ``workers=0``): a read that finishes ahead of its
turn frees its thread for the next one at once. The reads of one stream share a
:class:`~s3ddb.scan.visible_rows.MatchHistory` (late materialization or one pass).
Results come out in fragment and row-group order.

A local scan (its plans and reads are CPU work, not requests) plans its first fragment
in the consumer's thread, and reads its last fragment in a piece per CPU, so that the
cores start together and end together.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.format.bases import Files, as_resolver
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.parquet_source import WHOLE_READ_MAX_BYTES
from s3ddb.format.rowgroups import MatchShare, RowGroupPredicate
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.parallel import process_pool, run_here
from s3ddb.scan.visible_rows import (
    FragmentPlan,
    MatchHistory,
    filter_columns,
    fragment_may_match,
    plan_fragment,
    read_planned,
)

__all__ = [
    "Read",
    "split_reads",
    "stream_tables",
]

Read = tuple[FragmentPlan, list[int] | None, int]

#: Reads the last fragment of a scan is split into: one per CPU Arrow decodes on.
_TAIL_PIECES = max(1, pa.cpu_count())


def _executor() -> ThreadPoolExecutor:
    """The process's scan pool (rebuilt after fork), shared by every scan: starting
    threads per scan would cost more than a point lookup. Scan tasks never wait for
    other tasks of this pool, so sharing it cannot deadlock."""
    return process_pool("scan")


def split_reads(plan: FragmentPlan, names: list[str], budget: int, pieces: int = 1) -> list[Read]:
    """``plan`` as reads of consecutive row groups, each estimated at about an eighth
    of ``budget`` (or one row group), with their estimated decoded bytes; with
    ``pieces`` > 1, also at most about 1/``pieces`` of the plan each (so in as many
    reads where it has as many row groups)."""
    if plan.source is None:
        return [(plan, None, plan.estimated_bytes([], names))]
    target = max(1, budget // 8)
    if pieces > 1:
        whole = sum(plan.estimated_bytes([g], names) for g in plan.groups)
        target = max(1, min(target, -(-whole // pieces)))
    reads: list[Read] = []
    current: list[int] = []
    size = 0
    for g in plan.groups:
        est = plan.estimated_bytes([g], names)
        if current and size + est > target:
            reads.append((plan, current, size))
            current, size = [], 0
        current.append(g)
        size += est
    if current:
        reads.append((plan, current, size))
    return reads


def stream_tables(
    files: Files,
    fragments: Iterable[FragmentMetadata],
    schema: DatasetSchema,
    columns: list[str],
    predicate: pc.Expression | None,
    may_match: RowGroupPredicate | None,
    *,
    workers: int,
    budget: int,
    match_share: MatchShare | None = None,
) -> Iterator[pa.Table]:
    """The visible rows of ``fragments`` matching ``predicate``, ``columns`` in order,
    as tables of consecutive row groups, in order (see the module docstring).
    ``match_share``: the filter's estimate of its matches, if it has one (the first
    reads take every column in one pass where the statistics promise matches).

    Raises:
        ManifestCorruptError: a deletion file is missing or corrupt.
        InvalidExpressionError: evaluating the predicate failed.
    """
    names = list(columns) + [c for c in filter_columns(predicate, schema) if c not in columns]
    # Fragments the manifest's statistics rule out are dropped here, without a task.
    pending_fragments = (f for f in fragments if fragment_may_match(f, schema, may_match))
    scan = _Scan(files, schema, columns, names, predicate, may_match, budget, match_share)
    if workers < 1:
        # Nothing ahead: each read runs in the consumer's thread when it asks.
        for fragment in pending_fragments:
            plan = plan_fragment(files, fragment, schema, may_match, match_share=match_share)
            for planned, groups, _est in scan.reads_of(plan):
                table = read_planned(planned, schema, columns, predicate, groups, scan.history)
                if table.num_rows:
                    yield table
                del table  # not held while the next one is read
        return
    ahead = _ReadAhead(scan, pending_fragments, workers)
    try:
        while (table := ahead.next_table()) is not None:
            if table.num_rows:
                yield table
            del table  # not held while the next one is read
    finally:
        ahead.close()


@dataclass(frozen=True)
class _Scan:
    """What one stream reads: from where, which columns, filtered how, within what
    read-ahead budget (bytes)."""

    files: Files
    schema: DatasetSchema
    columns: list[str]
    #: ``columns`` and the columns the predicate reads.
    names: list[str]
    predicate: pc.Expression | None
    may_match: RowGroupPredicate | None
    budget: int
    match_share: MatchShare | None = None
    #: Which row groups held a match so far: whether reads still filter first.
    history: MatchHistory = field(default_factory=MatchHistory)

    def reads_of(self, plan: FragmentPlan | None, pieces: int = 1) -> list[Read]:
        """The reads of a fragment's plan (none when the fragment cannot match), in at
        least ``pieces`` where it has as many row groups (:func:`split_reads`)."""
        if plan is None:
            return []
        return split_reads(plan, self.names, self.budget, pieces)


class _ReadAhead:
    """The work of a stream with ``workers`` threads: fragments being planned, reads
    waiting for budget, and reads running, each queue in fragment and row-group order.
    """

    def __init__(
        self, scan: _Scan, pending_fragments: Iterator[FragmentMetadata], workers: int
    ) -> None:
        self._scan = scan
        self._pending_fragments = pending_fragments
        self._workers = workers
        self._pool = _executor()
        self._plans: deque[Future[FragmentPlan | None]] = deque()
        self._waiting: deque[Read] = deque()
        self._reading: deque[tuple[Future[pa.Table], int]] = deque()
        self._in_flight = 0
        # Estimates come from the footers' uncompressed sizes; decoded Arrow data can be
        # larger (dictionary-encoded strings): corrected by what reads actually held.
        self._scale, self._estimated, self._actual = 1.0, 0.0, 0
        # Small files are fetched whole when planned: with a small budget, plan fewer ahead.
        self._plans_ahead = max(1, min(workers, scan.budget // WHOLE_READ_MAX_BYTES))
        self._all_planned = False
        # A local scan's plans and reads are CPU work (a remote one's wait on requests,
        # which cost per call): it plans its first fragment in this thread (see
        # plan_ahead) and reads its last in a piece per CPU (see _start_reads).
        local = not as_resolver(scan.files).store.is_remote
        self._plan_first_here = local
        self._tail_pieces = _TAIL_PIECES if local else 1

    def plan_ahead(self) -> None:
        """Start planning fragments until ``plans_ahead`` plans are pending.

        A local scan plans its first fragment in this thread and returns: planning a
        local file is CPU work only (its footer), the consumer waits for that plan
        anyway, and the first read then starts before other plans, made on pool
        threads holding the GIL, can delay it (by milliseconds, with two cores). A
        remote scan plans ahead from the start, as its plans wait on requests."""
        scan = self._scan
        while len(self._plans) < self._plans_ahead:
            fragment = next(self._pending_fragments, None)
            if fragment is None:
                self._all_planned = True
                return
            args = (scan.files, fragment, scan.schema, scan.may_match)
            if self._plan_first_here:
                self._plan_first_here = False
                self._plans.append(run_here(plan_fragment, *args, match_share=scan.match_share))
                return
            self._plans.append(
                self._pool.submit(plan_fragment, *args, match_share=scan.match_share)
            )

    def next_table(self) -> pa.Table | None:
        """The result of the next read in order (waiting for it), None after the last.

        Raises:
            ManifestCorruptError, InvalidExpressionError: as :func:`stream_tables`.
        """
        while True:
            self._start_reads()
            if not self._reading:
                return None
            if self._reading[0][0].done():
                break
            # Any read finishing frees a thread for the next one (its result waits its
            # turn in the budget), and a plan completing gives reads to start: waiting
            # on the next result alone would leave threads idle behind it.
            running = [f for f, _est in self._reading if not f.done()]
            if self._plans and not self._waiting:
                running.append(self._plans[0])
            wait(running, return_when=FIRST_COMPLETED)
        future, est = self._reading.popleft()
        table = future.result()
        self._in_flight -= est
        if self._scan.predicate is None and est:
            # Without a filter the result is what the read decoded.
            self._estimated += est / self._scale
            self._actual += table.nbytes
            self._scale = max(1.0, self._actual / self._estimated)
        return table

    def close(self) -> None:
        """Drop queued work and wait for the reads already running, so that no read
        outlives its stream (abandoned early: a limit, an error)."""
        running = [f for f in [*self._plans, *(f for f, _est in self._reading)] if not f.cancel()]
        wait(running)

    def _start_reads(self) -> None:
        """Start every waiting read the budget allows, taking the next plan's reads
        once it is ready, or when nothing else can run."""
        scan = self._scan
        while True:
            while self._waiting and self._may_start(int(self._waiting[0][2] * self._scale)):
                plan, groups, est = self._waiting.popleft()
                future = self._pool.submit(
                    read_planned,
                    plan,
                    scan.schema,
                    scan.columns,
                    scan.predicate,
                    groups,
                    scan.history,
                )
                self._reading.append((future, int(est * self._scale)))
                self._in_flight += int(est * self._scale)
            # (After the reads are started: their decoding begins before new plans.)
            self.plan_ahead()
            if self._waiting or not self._plans:
                return
            if not (self._plans[0].done() or not self._reading):
                return
            plan_or_none = self._plans.popleft().result()
            # A local scan reads its last fragment in a piece per CPU: one read of a
            # whole file decodes each column on one thread, and its longest column
            # alone would end the scan with the other cores idle (about a tenth of a
            # 10-file scan on two cores). Earlier fragments overlap each other.
            last = self._all_planned and not self._plans
            self._waiting.extend(scan.reads_of(plan_or_none, self._tail_pieces if last else 1))

    def _may_start(self, est: int) -> bool:
        if not self._reading:
            return True  # one read always runs, however large
        # Half the budget in flight: measured peak RSS then stays within about twice
        # the budget (allocators keep freed memory for a while).
        running = sum(1 for f, _est in self._reading if not f.done())
        return running < self._workers and self._in_flight + est <= self._scan.budget // 2
