"""Streaming a version's matching rows in order with bounded memory.

Fragments are planned (statistics, footer, deletion file) a few ahead on worker
threads; each plan is cut into reads of consecutive row groups, and reads are started
in order while the decoded bytes they will hold stay within half the read-ahead
budget (the other half is for what the consumer holds and for the allocator's slack;
one read is always allowed, so a row group larger than the budget still reads), at
most ``workers`` plans and reads at a time (none ahead with ``workers=0``).
Results come out in fragment and row-group order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.format.bases import Files
from s3ddb.format.fragment import FragmentMetadata
from s3ddb.format.parquet_source import WHOLE_READ_MAX_BYTES
from s3ddb.format.rowgroups import RowGroupPredicate
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.parallel import process_pool
from s3ddb.scan.fragment import (
    FragmentPlan,
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


def _executor() -> ThreadPoolExecutor:
    """The process's scan pool (rebuilt after fork), shared by every scan: starting
    threads per scan would cost more than a point lookup. Scan tasks never wait for
    other tasks of this pool, so sharing it cannot deadlock."""
    return process_pool("scan")


def split_reads(plan: FragmentPlan, names: list[str], budget: int) -> list[Read]:
    """``plan`` as reads of consecutive row groups, each estimated at about an eighth
    of ``budget`` (or one row group), with their estimated decoded bytes."""
    if plan.source is None:
        return [(plan, None, plan.estimated_bytes([], names))]
    target = max(1, budget // 8)
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
) -> Iterator[pa.Table]:
    """The visible rows of ``fragments`` matching ``predicate``, ``columns`` in order,
    as tables of consecutive row groups, in order (see the module docstring).

    Raises:
        ManifestCorruptError: a deletion file is missing or corrupt.
        InvalidExpressionError: evaluating the predicate failed.
    """
    names = list(columns) + [c for c in filter_columns(predicate, schema) if c not in columns]
    # Fragments the manifest's statistics rule out are dropped here, without a task.
    pending_fragments = (f for f in fragments if fragment_may_match(f, schema, may_match))
    if workers < 1:
        # Nothing ahead: each read runs in the consumer's thread when it asks.
        for fragment in pending_fragments:
            plan = plan_fragment(files, fragment, schema, may_match)
            for planned, groups, _est in split_reads(plan, names, budget) if plan else []:
                table = read_planned(planned, schema, columns, predicate, groups)
                if table.num_rows:
                    yield table
                del table  # not held while the next one is read
        return
    pool = _executor()
    plans: deque[Future[FragmentPlan | None]] = deque()
    waiting: deque[Read] = deque()
    reading: deque[tuple[Future[pa.Table], int]] = deque()
    in_flight = 0
    # Estimates come from the footers' uncompressed sizes; decoded Arrow data can be
    # larger (dictionary-encoded strings): corrected by what reads actually held.
    scale, estimated, actual = 1.0, 0.0, 0
    # Small files are fetched whole when planned: with a small budget, plan fewer ahead.
    plans_ahead = max(1, min(workers, budget // WHOLE_READ_MAX_BYTES))

    def plan_ahead() -> None:
        while len(plans) < plans_ahead:
            fragment = next(pending_fragments, None)
            if fragment is None:
                return
            plans.append(pool.submit(plan_fragment, files, fragment, schema, may_match))

    def may_start(est: int) -> bool:
        if not reading:
            return True  # one read always runs, however large
        # Half the budget in flight: measured peak RSS then stays within about twice
        # the budget (allocators keep freed memory for a while).
        return len(reading) < workers and in_flight + est <= budget // 2

    try:
        plan_ahead()
        while True:
            while True:
                while waiting and may_start(int(waiting[0][2] * scale)):
                    plan, groups, est = waiting.popleft()
                    future = pool.submit(read_planned, plan, schema, columns, predicate, groups)
                    reading.append((future, int(est * scale)))
                    in_flight += int(est * scale)
                # Take the next plan once it is ready, or when nothing else can run.
                if not waiting and plans and (plans[0].done() or not reading):
                    plan_or_none = plans.popleft().result()
                    plan_ahead()
                    if plan_or_none is not None:
                        waiting.extend(split_reads(plan_or_none, names, budget))
                    continue
                break
            if not reading:
                return
            future, est = reading.popleft()
            table = future.result()
            in_flight -= est
            if predicate is None and est:
                # Without a filter the result is what the read decoded.
                estimated, actual = estimated + est / scale, actual + table.nbytes
                scale = max(1.0, actual / estimated)
            if table.num_rows:
                yield table
            del table
    finally:
        # Abandoned early (a limit, an error): queued work is dropped, and reads
        # already running are waited for, so that no read outlives its stream.
        started = [f for f in [*plans, *(f for f, _est in reading)] if not f.cancel()]
        wait(started)
