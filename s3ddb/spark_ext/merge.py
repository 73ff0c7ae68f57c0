"""Upserts and change feeds on Spark, with the source and the matched rows kept on the
executors: the driver plans and commits with metadata only.

    s3ddb.spark_ext.merge_insert(spark, uri, changes_df, "id",
                                 when_matched_delete="source.op = 'D'")
    stream.writeStream.foreachBatch(merge_batches(uri, "id", "orders-cdc")).start()

One merge is two Spark stages and one commit:

1. *The driver plans* on the pinned version: Spark aggregates the source's row count
   and each key column's range (one row reaches the driver, never the keys), and the
   fragments whose statistics rule that range out are left alone.
2. *Stage one* joins the source with the target's keys: the candidate fragments' key
   columns (and what the conditions read), with each row's fragment id and offset,
   read by Spark's own Parquet reader where the JVM reaches the files and by Python
   tasks otherwise (:mod:`s3ddb.spark_ext.merge_target`); the join's output is
   repartitioned by key, so each task
   sees every row of its keys. A task checks that no key is in the source twice,
   applies the clauses (:mod:`s3ddb.writes.merge_clauses`, the same rules as
   ``Dataset.merge_insert``), writes the updated and inserted rows as new fragments,
   and sends on, per target fragment, a Roaring bitmap of the rows removed and of
   the rows matched.
3. *Stage two*, partitioned by fragment id, merges those bitmaps and writes one new
   deletion file per touched fragment.
4. *The driver* collects fragment metadata, deletion-file descriptors, bitmaps and
   counts (nothing per row) and commits one Update through the commit loop: rebased
   over concurrent commits, or planned again on the newest version. A refused
   merge (a duplicate key, ``when_matched_fail``) deletes every file it wrote and
   commits nothing.
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

import s3ddb
from s3ddb.errors import (
    InvalidInputError,
    S3DDBError,
    SchemaMismatchError,
)
from s3ddb.format import layout
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectStore
from s3ddb.observe.commit_metrics import add_operation_metrics
from s3ddb.operations import RowChangePlan, Update
from s3ddb.scan.visible_rows import fragment_may_match
from s3ddb.spark_ext._types import arrow_schema_of, conform_to_dataset, quoted_name
from s3ddb.spark_ext._types import spark_schema_of as _spark_schema_of
from s3ddb.spark_ext.atomic import APP_TRANSACTION_PREFIX, commit_batch_once
from s3ddb.spark_ext.merge_jvm import (
    INSERT,
    OUTCOME,
    AddressTask,
    WriterChoice,
    address_rows,
    check_writer,
    decided_frame,
    evaluation_errors,
    source_is_deterministic,
    writer_choice,
)
from s3ddb.spark_ext.merge_target import target_frame
from s3ddb.spark_ext.merge_tasks import (
    FRAGMENT,
    IN_SOURCE,
    RESULT_DDL,
    ROW,
    ROWS_PER_TASK,
    TARGET_PREFIX,
    DeletionTask,
    MergeTask,
    delete_change_files,
    deletion_tasks,
    source_schema,
)
from s3ddb.spark_ext.native_write import jvm_root_of, observed_value, write_staged
from s3ddb.spark_ext.session_settings import session_settings
from s3ddb.versions.pinned import plan_and_commit
from s3ddb.writes.merge_clauses import (
    UPDATE,
    Condition,
    MergeClauses,
    check_clauses,
    key_range_pruner,
)
from s3ddb.writes.user_data import to_arrow_table

__all__ = ["explain_merge_insert", "merge_batches", "merge_insert"]

log = logging.getLogger(__name__)

#: Rows of the source and the target joined per partition of the join, beyond the
#: four partitions per core it always has (:func:`_join_partitions`).
JOIN_ROWS_PER_PARTITION = 5_000_000


def _clause(value: bool | Condition, name: str) -> tuple[bool, Condition]:
    if value is True or value is False:
        return bool(value), None
    if value is None:
        return False, None
    if isinstance(value, (str, pc.Expression)):
        return True, value
    raise InvalidInputError(f"{name} takes True, False or a condition (SQL text); got {value!r}")


def merge_insert(
    spark: Any,
    uri: str,
    source: Any,
    on: str | list[str],
    *,
    when_matched_update_all: bool | Condition = True,
    when_matched_delete: bool | Condition = False,
    when_matched_fail: bool = False,
    when_not_matched_insert_all: bool | Condition = True,
    when_not_matched_by_source_delete: bool | Condition = False,
    storage_options: dict[str, Any] | None = None,
    conflict_retries: int | None = None,
    retry_timeout: float | None = None,
    transaction_properties: dict[str, str] | None = None,
    jvm_scheme: str | None = None,
    writer: str = "auto",
) -> dict[str, int]:
    """Merge ``source`` (a Spark DataFrame) into the dataset at ``uri`` by the key
    columns ``on``, as ``Dataset.merge_insert`` with the same clauses would, without
    bringing the source or the matched rows to the driver (see the module doc).

    Each clause takes True, False or a condition (SQL over ``source.<col>`` and
    ``target.<col>``; the by-source delete's over the target's columns). Source
    columns the dataset lacks may be read by conditions; they are never written.
    ``source`` may also be anything ``Dataset.merge_insert`` takes (a pyarrow
    Table...): it becomes a DataFrame and merges the same way.
    ``transaction_properties`` are stored with the commit (an application
    transaction number commits at most once: :func:`merge_batches`).
    ``jvm_scheme`` is the scheme Spark's JVM reads the dataset's ``s3://`` objects by
    (``"s3a"`` with hadoop-aws, ``"s3"`` on EMR): then Spark's own Parquet reader
    reads the target's keys, as it always does for a local path; without it, Python
    tasks read them.
    ``writer`` says who writes the updated and inserted rows where the JVM reaches
    the files: ``"auto"`` (Spark's Parquet writer, or Python tasks for a source of
    fewer than :data:`JVM_ROWS_PER_CORE` rows per core, which they write faster,
    unless an upsert of at least :data:`UPSERT_JVM_ROWS_PER_CORE` rows per core
    has at least as many rows as the target rows its keys can match),
    ``"jvm"`` (Spark's writer whenever it can) or ``"python"`` (always Python
    tasks). Where the JVM cannot reach the files, Python tasks write them.

    Returns ``{"num_inserted_rows", "num_updated_rows", "num_deleted_rows"}``.

    Raises:
        SchemaMismatchError: the source lacks a dataset column or has another type,
            or has a column the dataset lacks that no condition reads.
        DuplicateKeyError: a key is in the source twice (nothing committed, no file
            left).
        MatchedRowError: ``when_matched_fail`` and a source key is in the target.
        ColumnNotFoundError, InvalidExpressionError: a condition does not compile.
        TransactionAlreadyCommittedError: an application transaction number in
            ``transaction_properties`` is committed already.
        RetryableCommitConflictError, TooMuchWriteContentionError: as
            ``Dataset.merge_insert``.
        InvalidInputError: ``writer`` is not one of :data:`~s3ddb.spark_ext.merge_jvm.WRITERS`.
    """
    check_writer(writer, "merge_insert")
    clauses = _merge_clauses(
        on,
        when_matched_update_all,
        when_matched_delete,
        when_matched_fail,
        when_not_matched_insert_all,
        when_not_matched_by_source_delete,
    )
    ds = s3ddb.dataset(uri, storage_options=storage_options)
    if getattr(source, "sparkSession", None) is None:
        # Rows already in the driver's memory still merge on the executors: the
        # matched target rows never come back.
        source = spark.createDataFrame(to_arrow_table(source))
    merge = _DistributedMerge.prepare(spark, ds, source, clauses, jvm_scheme, writer)
    return plan_and_commit(
        ds,
        "merge_insert",
        merge.plan,
        conflict_retries,
        retry_timeout,
        properties=dict(transaction_properties or {}),
    )


def _merge_clauses(
    on: str | list[str],
    when_matched_update_all: bool | Condition,
    when_matched_delete: bool | Condition,
    when_matched_fail: bool,
    when_not_matched_insert_all: bool | Condition,
    when_not_matched_by_source_delete: bool | Condition,
) -> MergeClauses:
    """:func:`merge_insert`'s clause arguments, checked.

    Raises:
        InvalidInputError: no key, a key twice, or a clause neither a bool nor a
            condition.
    """
    keys = [on] if isinstance(on, str) else list(on)
    update, update_if = _clause(when_matched_update_all, "when_matched_update_all")
    delete, delete_if = _clause(when_matched_delete, "when_matched_delete")
    insert, insert_if = _clause(when_not_matched_insert_all, "when_not_matched_insert_all")
    by_source, by_source_if = _clause(
        when_not_matched_by_source_delete, "when_not_matched_by_source_delete"
    )
    clauses = MergeClauses(
        tuple(keys),
        update=update,
        update_condition=update_if,
        delete=delete,
        delete_condition=delete_if,
        fail=bool(when_matched_fail),
        insert=insert,
        insert_condition=insert_if,
        delete_by_source=by_source,
        by_source_condition=by_source_if,
    )
    check_clauses(clauses)
    return clauses


def explain_merge_insert(
    spark: Any,
    uri: str,
    source: Any,
    on: str | list[str],
    *,
    when_matched_update_all: bool | Condition = True,
    when_matched_delete: bool | Condition = False,
    when_matched_fail: bool = False,
    when_not_matched_insert_all: bool | Condition = True,
    when_not_matched_by_source_delete: bool | Condition = False,
    storage_options: dict[str, Any] | None = None,
    jvm_scheme: str | None = None,
    writer: str = "auto",
) -> str:
    """What :func:`merge_insert` with these arguments would do, as text: the clauses,
    the target version, and who writes the rows: Spark's Parquet writer (the clauses
    evaluated as Spark SQL) or, where the JVM cannot reach the files, Python tasks,
    with the reason; with ``writer="auto"``, the rule by which the source's size
    chooses (the source's row count needs a Spark job, so the choice itself is
    logged by the merge). Runs no Spark job; writes nothing.

    Raises:
        What :func:`merge_insert` raises before its first Spark job (a bad clause, a
        source whose schema does not fit, an unknown ``writer``).
    """
    check_writer(writer, "merge_insert")
    clauses = _merge_clauses(
        on,
        when_matched_update_all,
        when_matched_delete,
        when_matched_fail,
        when_not_matched_insert_all,
        when_not_matched_by_source_delete,
    )
    ds = s3ddb.dataset(uri, storage_options=storage_options)
    if getattr(source, "sparkSession", None) is None:
        source = spark.createDataFrame(to_arrow_table(source))
    extras = _checked_extras(ds, source, clauses)
    local = ds.handler.store.protocol == "file"
    reader = (
        "Spark's Parquet reader (JVM), Python tasks for fragments it cannot read as planned"
        if jvm_scheme or local
        else "Python tasks"
    )
    merge = _DistributedMerge(spark, ds, source, clauses, (), 0, extras, None, jvm_scheme, writer)
    choice = merge.writer_on(ds.schema, ds.has_stable_row_ids)
    if choice.jvm and writer == "python":
        choice = WriterChoice(choice.root, refused='writer="python" was asked for')
    who = choice.describe()
    if choice.jvm and writer == "auto":
        cores = spark.sparkContext.defaultParallelism
        who += (
            f"; Python tasks (pyarrow) instead when the source has fewer than "
            f"{JVM_ROWS_PER_CORE:,} rows per core ({JVM_ROWS_PER_CORE * cores:,} rows "
            f"on {cores} cores): they then write faster (one job, nothing persisted)"
        )
        if clauses.writes_every_source_row:
            who += (
                f", unless it has at least {UPSERT_JVM_ROWS_PER_CORE:,} rows per core and "
                "at least as many as the target rows its keys can match"
            )
    lines = [
        clauses.describe(),
        f"target: {ds.uri} version {ds.version}, {len(ds.manifest.fragments)} fragment(s)",
        f"target keys read by: {reader}",
        who,
    ]
    if choice.jvm and clauses.writes_every_source_row:
        lines.append(
            "an upsert (every source row updated or inserted): Spark writes the source "
            "first, reading it once, then joins the keys of the files written with the "
            "target's"
        )
    return "\n".join(lines)


#: With ``writer="auto"``, Spark's writer writes a merge's rows when the source has at
#: least this many rows per core (Spark's default parallelism); Python tasks below.
#: The JVM path costs a second job (the join persisted, or an upsert's source read
#: again; Spark's write committed, its files moved and their footers read) that only
#: its faster writing per row repays;
#: measured (docs/performance.md, "Spark upserts"), the two paths take about as long
#: at 1,000,000 source rows per core, and the JVM's is the faster one at 10,000,000.
JVM_ROWS_PER_CORE = 2_000_000
#: With ``writer="auto"``, an upsert (every source row updated or inserted) of at
#: least this many rows per core, and at least as many as the target rows its keys
#: can match, is written by Spark's writer too: its join reads the source's keys only
#: and nothing is persisted, so the JVM path wins once the rows it writes outnumber
#: the target keys joined (measured, docs/performance.md: a 2,000,000-row upsert into
#: 20,000,000 rows took 5.9 s through Spark's writer against 8.6 s through Python
#: tasks with its keys in one fragment, but 27.4 s against 19.2 s with them in all 20).
UPSERT_JVM_ROWS_PER_CORE = 500_000


def merge_batches(
    uri: str,
    on: str | list[str],
    application: str,
    *,
    storage_options: dict[str, Any] | None = None,
    **clauses: Any,
) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function merging each micro-batch into ``uri`` exactly once::

        query = (changes.writeStream
                 .foreachBatch(merge_batches(uri, "id", "orders-cdc",
                                             when_matched_delete="source.op = 'D'"))
                 .option("checkpointLocation", checkpoint).start())

    ``clauses`` are :func:`merge_insert`'s (``when_matched_update_all=`` ...,
    ``writer=``). Each merge records ``application`` = the batch id with its commit;
    a batch whose id (or a later one) is recorded already, as when a restarted query
    replays the batch its checkpoint missed, commits nothing. ``application`` names
    the stream: keep it across restarts.

    Raises:
        InvalidInputError: ``application`` is empty, or a clause is unknown.
    """
    if not application:
        raise InvalidInputError("merge_batches needs an application name")
    known = {
        "when_matched_update_all",
        "when_matched_delete",
        "when_matched_fail",
        "when_not_matched_insert_all",
        "when_not_matched_by_source_delete",
        "conflict_retries",
        "retry_timeout",
        "writer",
    }
    unknown = sorted(set(clauses) - known)
    if unknown:
        raise InvalidInputError(
            f"merge_batches: unknown arguments {unknown}; known: {sorted(known)}"
        )
    key = f"{APP_TRANSACTION_PREFIX}{application}"

    def each(batch_df: Any, batch_id: int) -> None:
        recorded = s3ddb.dataset(uri, storage_options=storage_options).manifest.table_metadata
        done = recorded.get(key)
        if done is not None and done.isascii() and done.isdigit() and int(done) >= batch_id:
            log.info("s3ddb: batch %d of %s is merged already (%s)", batch_id, application, done)
            return
        # The batch is read more than once: the key ranges, then the merge (an
        # upsert reads it again to write it).
        commit_batch_once(
            batch_df,
            batch_id,
            application,
            lambda properties: merge_insert(
                batch_df.sparkSession,
                uri,
                batch_df,
                on,
                storage_options=storage_options,
                transaction_properties=properties,
                **clauses,
            ),
        )

    return each


# --- planning on the driver ------------------------------------------------------------


def _checked_extras(ds: s3ddb.Dataset, source: Any, clauses: MergeClauses) -> pa.Schema:
    """The source's columns the dataset lacks, after checking that the source holds
    every dataset column in a type that fits and that the clauses compile.

    Raises:
        SchemaMismatchError, ColumnNotFoundError, InvalidExpressionError: see
            :func:`merge_insert`.
    """
    arrow = arrow_schema_of(source.schema)
    target = ds.schema
    names = set(target.names)
    missing = [n for n in target.names if n not in arrow.names]
    if missing:
        raise SchemaMismatchError(
            f"merge_insert source lacks the dataset's columns {missing} ({ds.uri})"
        )
    extras = pa.schema([f for f in arrow if f.name not in names])
    own = pa.schema([arrow.field(n) for n in target.names])
    conform_to_dataset(own.empty_table(), target, where=f"merge_insert source ({ds.uri})")
    clauses.compile(target, source_schema(target, extras))
    return extras


#: Key types whose range Spark's min/max gives as a value s3ddb's statistics compare
#: exactly (other key types are not used to prune).
def _bounded(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date32(t)
    )


@dataclass(frozen=True)
class _DistributedMerge:
    """A merge of one Spark DataFrame, prepared on the driver; :meth:`plan` runs it
    on a version (again after a conflict)."""

    spark: Any
    dataset: s3ddb.Dataset
    source: Any
    clauses: MergeClauses
    #: (key column, min, max) of the source's keys, for key types :func:`_bounded`.
    bounds: tuple[tuple[str, Any, Any], ...]
    source_rows: int
    #: The source's columns the dataset lacks, with their Arrow types.
    extras: pa.Schema
    #: How the JVM reads the dataset's files (None: Python tasks read the target).
    scheme_map: dict[str, str] | None
    #: The scheme the JVM writes ``s3://`` objects by (None: it cannot).
    jvm_scheme: str | None = None
    #: Who writes the rows where the JVM can (:data:`~s3ddb.spark_ext.merge_jvm.WRITERS`).
    writer: str = "auto"

    @property
    def uri(self) -> str:
        return self.dataset.uri

    @property
    def store(self) -> ObjectStore:
        return self.dataset.handler.store

    @classmethod
    def prepare(
        cls,
        spark: Any,
        ds: s3ddb.Dataset,
        source: Any,
        clauses: MergeClauses,
        jvm_scheme: str | None = None,
        writer: str = "auto",
    ) -> _DistributedMerge:
        """Check the source's schema and the clauses; one Spark aggregate gives the
        source's row count and key ranges.

        Raises:
            SchemaMismatchError, ColumnNotFoundError, InvalidExpressionError: see
                :func:`merge_insert`.
        """
        target = ds.schema
        extras = _checked_extras(ds, source, clauses)
        from pyspark.sql import functions as F

        if not source_is_deterministic(source):
            # Read several times (key ranges, then each job), a source giving other
            # rows each time would merge rows no job saw whole: materialized once.
            log.info("s3ddb merge: the source is nondeterministic; checkpointing it")
            source = source.localCheckpoint(eager=True)
        aggregates = [F.count(F.lit(1))]
        bounded = [k for k in clauses.on if _bounded(target.field(k).type)]
        for k in bounded:
            aggregates += [F.min(F.col(quoted_name(k))), F.max(F.col(quoted_name(k)))]
        row = source.agg(*aggregates).collect()[0]
        bounds = []
        for i, k in enumerate(bounded):
            low, high = row[1 + 2 * i], row[2 + 2 * i]
            if low is not None and high is not None:
                bounds.append((k, low, high))
        local = ds.handler.store.protocol == "file"
        scheme_map = {"s3": jvm_scheme} if jvm_scheme else ({} if local else None)
        return cls(
            spark,
            ds,
            source,
            clauses,
            tuple(bounds),
            int(row[0]),
            extras,
            scheme_map,
            jvm_scheme,
            writer,
        )

    def writer_on(self, schema: pa.Schema, stable_row_ids: bool) -> WriterChoice:
        """Who writes this merge's rows on a version of Arrow schema ``schema`` (of a
        dataset with stable row ids or not)."""
        if stable_row_ids:
            # Spark's writer cannot carry each updated row's id and creation version
            # to the file it lands in; Python tasks keep them.
            root = jvm_root_of(self.uri, self.jvm_scheme)
            return WriterChoice(root, refused="the dataset has stable row ids")
        compiled = self.clauses.compile(schema, source_schema(schema, self.extras))
        return writer_choice(
            self.spark,
            self.uri,
            self.jvm_scheme,
            self.source.schema,
            schema,
            self.clauses,
            compiled,
        )

    def _tasks(self, candidates: list[FragmentMetadata]) -> int:
        """How many tasks take the join's rows: at least one per core, and one per
        :data:`ROWS_PER_TASK` rows it can hold (the source's; every candidate row's
        when deleting by source)."""
        rows = self.source_rows
        if self.clauses.delete_by_source:
            rows = max(rows, sum(f.physical_rows for f in candidates))
        parallelism = self.spark.sparkContext.defaultParallelism
        return max(parallelism, math.ceil(rows / ROWS_PER_TASK))

    def _by_cost(self, choice: WriterChoice, candidate_rows: int) -> WriterChoice:
        """``choice`` (where the JVM can write), kept or turned to Python tasks by
        :attr:`writer`: always for ``"python"``; for ``"auto"`` when the source has
        fewer than :data:`JVM_ROWS_PER_CORE` rows per core, unless it is an upsert
        of at least :data:`UPSERT_JVM_ROWS_PER_CORE` rows per core and at least the
        ``candidate_rows`` target rows its keys can match."""
        if not choice.jvm or self.writer == "jvm":
            return choice
        if self.writer == "python":
            return WriterChoice(choice.root, refused='writer="python" was asked for')
        cores = self.spark.sparkContext.defaultParallelism
        rows = self.source_rows
        if rows >= JVM_ROWS_PER_CORE * cores:
            return choice
        if (
            self.clauses.writes_every_source_row
            and rows >= UPSERT_JVM_ROWS_PER_CORE * cores
            and rows >= candidate_rows
        ):
            return choice
        return WriterChoice(
            choice.root,
            refused=f"the source's {rows:,} rows are fewer than {JVM_ROWS_PER_CORE:,} per "
            f"core ({cores} cores; writer='auto'), and it is not an upsert of at least "
            f"{UPSERT_JVM_ROWS_PER_CORE:,} rows per core and the {candidate_rows:,} target "
            "rows its keys can match",
        )

    def plan(self, manifest: Manifest) -> tuple[Update | None, dict[str, int]]:
        """Run the merge's two stages on ``manifest``'s version: the Update to commit
        (None if it changes nothing) and the counts.

        Raises:
            DuplicateKeyError, MatchedRowError, S3DDBError: a task refused the merge;
                every file the merge wrote is deleted first.
        """
        from pyspark.sql import functions as F

        schema = manifest.schema
        clauses = self.clauses
        compiled = clauses.compile(schema.arrow, source_schema(schema.arrow, self.extras))
        pruner = None if clauses.delete_by_source else key_range_pruner(self.bounds)
        candidates = [f for f in manifest.fragments if fragment_may_match(f, schema, pruner)]
        target_fields = [schema.arrow.field(c) for c in compiled.target_columns]
        target_spark = _spark_schema_of(
            pa.schema([f.with_name(TARGET_PREFIX + f.name) for f in target_fields]), self.uri
        )
        from pyspark.sql.types import LongType, StructField, StructType

        read_schema = StructType(
            [*target_spark.fields, StructField(FRAGMENT, LongType()), StructField(ROW, LongType())]
        )
        # Deleting by source, every target row is needed; otherwise only those whose
        # keys lie within the source's ranges can match.
        target_df = target_frame(
            self.spark,
            self.dataset.checkout_version(manifest.version),
            self.store,
            manifest,
            candidates,
            compiled.target_columns,
            pruner,
            () if clauses.delete_by_source else self.bounds,
            read_schema,
            self.scheme_map,
        )
        parallelism = self.spark.sparkContext.defaultParallelism
        metrics = {
            "source_rows": self.source_rows,
            "fragments_scanned": len(candidates),
            "fragments_skipped": len(manifest.fragments) - len(candidates),
        }
        choice = self._by_cost(
            self.writer_on(schema.arrow, manifest.stable_row_ids),
            sum(f.physical_rows for f in candidates),
        )
        if choice.jvm:
            return self._plan_jvm(manifest, compiled, candidates, target_df, choice, metrics)
        log.info("s3ddb merge: %s", choice.describe())
        src = self.source.withColumn(IN_SOURCE, F.lit(True))
        condition = None
        for k in clauses.on:
            eq = src[quoted_name(k)] == target_df[quoted_name(TARGET_PREFIX + k)]
            condition = eq if condition is None else condition & eq
        how = "full_outer" if clauses.delete_by_source else "left_outer"
        joined = src.join(target_df, on=condition, how=how)
        tasks = self._tasks(candidates)
        spread = [
            F.coalesce(
                F.col(quoted_name(k)),
                F.col(quoted_name(TARGET_PREFIX + k)).cast(src.schema[k].dataType),
            )
            for k in clauses.on
        ]
        worker = MergeTask(self.store, manifest, clauses, self.extras, self.bounds)
        decided = joined.repartition(tasks, *spread).mapInArrow(worker, RESULT_DDL)
        fragments = {f.id: f for f in candidates}
        deleter = DeletionTask(self.store, manifest, fragments)
        touched = deletion_tasks(len(candidates), parallelism)
        results = decided.repartition(touched, "fid").mapInArrow(deleter, RESULT_DDL).collect()
        op, counts = _outcome(self.store, clauses, self.bounds, results)
        add_operation_metrics(
            source_rows=self.source_rows,
            matched_rows=_matched_rows(results),
            inserted_rows=counts["num_inserted_rows"],
            updated_rows=counts["num_updated_rows"],
            deleted_rows=counts["num_deleted_rows"],
            fragments_scanned=len(candidates),
            fragments_skipped=len(manifest.fragments) - len(candidates),
            merge_writer="python",
        )
        return op, counts

    def _plan_jvm(
        self,
        manifest: Manifest,
        compiled: Any,
        candidates: list[FragmentMetadata],
        target_df: Any,
        choice: WriterChoice,
        metrics: dict[str, int],
    ) -> tuple[Update | None, dict[str, int]]:
        """:meth:`plan` with the clauses in Spark SQL and the rows written by Spark's
        Parquet writer (:mod:`s3ddb.spark_ext.merge_jvm`): the address job (bitmaps,
        deletion files, refusals), then the row job; for an upsert, the source's rows
        first, then the address job over the keys written (:meth:`_upsert_jobs`).

        Raises:
            DuplicateKeyError, MatchedRowError, InvalidInputError, S3DDBError: the
                merge is refused (every file the merge wrote is deleted first).
            SchemaMismatchError: a value does not fit its column (no file is left).
        """
        from pyspark import StorageLevel

        clauses = self.clauses
        log.info("s3ddb merge: %s", choice.describe())
        fragments = {f.id: f for f in candidates}
        tasks = self._tasks(candidates)
        if clauses.writes_every_source_row:
            results, written, updated = self._upsert_jobs(
                manifest, compiled, target_df, fragments, choice, tasks
            )
        else:
            # Both jobs read this one join: persisted by the first, so the target's
            # keys are read and joined once (a source read again would also give rows
            # the address job never saw). Spark keeps a cached join's shuffle
            # partitions (spark.sql.shuffle.partitions, not coalesced): as many Python
            # tasks and written files as the rows need instead.
            decided = decided_frame(self.source, target_df, clauses, compiled, self.bounds)
            # Cached as Spark's compressed column batches, not serialized again.
            decided = decided.coalesce(tasks).persist(StorageLevel.MEMORY_AND_DISK_DESER)
            try:
                results, written, updated = self._jvm_jobs(
                    manifest, decided, fragments, choice, tasks
                )
            finally:
                decided.unpersist(blocking=False)
        inserted = sum(f.physical_rows for f in written) - updated
        results.append(("fragments", -1, pickle.dumps(tuple(written))))
        results.append(("counts", -1, json.dumps({"num_inserted_rows": inserted}).encode()))
        op, counts = _outcome(self.store, clauses, self.bounds, results)
        add_operation_metrics(
            matched_rows=_matched_rows(results),
            inserted_rows=counts["num_inserted_rows"],
            updated_rows=counts["num_updated_rows"],
            deleted_rows=counts["num_deleted_rows"],
            merge_writer="jvm",
            **metrics,
        )
        return op, counts

    def _address_job(
        self,
        manifest: Manifest,
        decided: Any,
        fragments: dict[int, FragmentMetadata],
    ) -> list[Any]:
        """The address job over ``decided``
        (:func:`~s3ddb.spark_ext.merge_jvm.decided_frame`): the tasks' results
        (bitmaps, deletion files written, counts, or a refusal), unchecked."""
        clauses = self.clauses
        parallelism = self.spark.sparkContext.defaultParallelism
        touched = deletion_tasks(len(fragments), parallelism)
        join_rows = self.source_rows + sum(f.physical_rows for f in fragments.values())
        with (
            evaluation_errors(f"merge_insert into {self.uri}"),
            session_settings(self.spark, _join_partitions(join_rows, parallelism)),
        ):
            results: list[Any] = (
                address_rows(decided, clauses.on)
                .mapInArrow(AddressTask(clauses.on), RESULT_DDL)
                .repartition(touched, "fid")
                .mapInArrow(DeletionTask(self.store, manifest, fragments), RESULT_DDL)
                .collect()
            )
        return results

    def _upsert_jobs(
        self,
        manifest: Manifest,
        compiled: Any,
        target_df: Any,
        fragments: dict[int, FragmentMetadata],
        choice: WriterChoice,
        tasks: int,
    ) -> tuple[list[Any], list[FragmentMetadata], int]:
        """:meth:`_plan_jvm`'s jobs for an upsert (every source row is written unless
        the merge is refused): Spark writes the source as it is first, then the
        address job joins the keys of the files written with the target's. The source
        is read once, so whatever it gives (a DataFrame Spark believes deterministic
        over files replaced meanwhile) is merged as one consistent set of rows; its
        keys are still checked against the ranges that chose the candidate fragments
        (a key outside them refuses the merge). The tasks' results, the fragments
        written and the rows updated.

        Raises:
            As :meth:`_plan_jvm`; every file written is deleted first.
        """
        from pyspark.sql import functions as F

        names = [F.col(quoted_name(n)) for n in manifest.schema.arrow.names]
        assert choice.root is not None
        written: list[FragmentMetadata] = []
        results: list[Any] = []
        try:
            written = self._write_rows(self.source.coalesce(tasks).select(*names), manifest, choice)
            keys = self._written_keys(written, choice.root)
            decided = decided_frame(keys, target_df, self.clauses, compiled, self.bounds)
            results = self._address_job(manifest, decided, fragments)
            _raise_refusal(self.store, results)
        except BaseException:
            delete_change_files(self.store, written, results)
            raise
        return results, written, _updated_rows(results)

    def _write_rows(
        self, rows: Any, manifest: Manifest, choice: WriterChoice
    ) -> list[FragmentMetadata]:
        """``rows`` (the dataset's columns) written by Spark's Parquet writer into
        ``data/`` as fragments of at most :data:`ROWS_PER_TASK` rows, not committed.

        Raises:
            SchemaMismatchError, DataFileError: see
                :func:`~s3ddb.spark_ext.native_write.write_staged`.
            InvalidExpressionError: Spark could not evaluate a value.
        """
        assert choice.root is not None
        with evaluation_errors(f"merge_insert into {self.uri}"):
            return write_staged(
                rows,
                self.store,
                choice.root,
                manifest.schema,
                uuid.uuid4().hex,
                choice.checks,
                max_rows_per_file=ROWS_PER_TASK,
            )

    def _written_keys(self, written: list[FragmentMetadata], root: str) -> Any:
        """The key columns of the data files ``written`` (in ``data/`` of the dataset
        whose root the JVM names ``root``), read by Spark's Parquet reader, in the
        source's types (the join compares them as it would the source's)."""
        from pyspark.sql import functions as F

        keys = [quoted_name(k) for k in self.clauses.on]
        if not written:
            return self.source.select(*keys).limit(0)
        paths = [f"{root.rstrip('/')}/{layout.data_file_path(f.files[0].path)}" for f in written]
        return self.spark.read.parquet(*paths).select(
            *[
                F.col(q).cast(self.source.schema[k].dataType).alias(k)
                for q, k in zip(keys, self.clauses.on)
            ]
        )

    def _jvm_jobs(
        self,
        manifest: Manifest,
        decided: Any,
        fragments: dict[int, FragmentMetadata],
        choice: WriterChoice,
        tasks: int,
    ) -> tuple[list[Any], list[FragmentMetadata], int]:
        """The address job then the row job of :meth:`_plan_jvm` over ``decided``
        (:func:`~s3ddb.spark_ext.merge_jvm.decided_frame`, persisted): the tasks'
        results, the fragments Spark wrote (the updated and inserted rows), and the
        rows updated.

        Raises:
            As :meth:`_plan_jvm`; InvalidInputError: the row job read other rows than
                the address job (a lost part of the persisted join computed again
                from a source that changed meanwhile).
        """
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        results = self._address_job(manifest, decided, fragments)
        _raise_refusal(self.store, results)
        updated = _updated_rows(results)
        written: list[FragmentMetadata] = []
        names = [F.col(quoted_name(n)) for n in manifest.schema.arrow.names]
        try:
            if not (self.clauses.insert or updated):
                return results, written, updated
            observation = Observation(f"s3ddb_merge_{uuid.uuid4().hex}")
            is_update = F.when(F.col(OUTCOME) == UPDATE, 1).otherwise(0)
            chosen = (
                decided.observe(observation, F.sum(is_update).alias("updated"))
                .where(F.col(OUTCOME).isin(UPDATE, INSERT))
                .select(*names)
            )
            written = self._write_rows(chosen, manifest, choice)
            # The persisted join gives both jobs the same rows, unless Spark computed
            # a lost or evicted part of it again from a source that changed since.
            seen = observed_value(observation, "updated")
            if seen is not None and seen != updated:
                raise InvalidInputError(_SOURCE_CHANGED)
        except BaseException:
            delete_change_files(self.store, written, results)
            raise
        return results, written, updated


def _updated_rows(results: list[Any]) -> int:
    """The rows the address job's tasks counted updated."""
    return sum(
        json.loads(data).get("num_updated_rows", 0)
        for kind, _fid, data in results
        if kind == "counts"
    )


#: A source whose jobs read other rows than its aggregate counted.
_SOURCE_CHANGED = (
    "the merge source gave other rows to one of the merge's jobs than to another "
    "(a nondeterministic DataFrame, or files that changed while it ran): persist() it "
    "before merging; nothing was committed"
)


def _matched_rows(results: list[Any]) -> int:
    """How many target rows the tasks reported matched."""
    return sum(len(BitMap.deserialize(data)) for kind, _fid, data in results if kind == "matched")


def _error_class(name: str) -> type[S3DDBError]:
    """The public error class a task reported by name (S3DDBError if unknown)."""
    cls = getattr(s3ddb.errors, name, None) if name in s3ddb.errors.__all__ else None
    return cls if isinstance(cls, type) and issubclass(cls, S3DDBError) else S3DDBError


def _raise_refusal(store: ObjectStore, results: list[Any]) -> None:
    """Raise the refusal a task reported, if any (a duplicate key first, as the
    library checks it before anything else), after deleting every file the results
    name: nothing was committed.

    Raises:
        DuplicateKeyError, MatchedRowError, S3DDBError: the refusal.
    """
    errors = [json.loads(data) for kind, _fid, data in results if kind == "error"]
    if not errors:
        return
    new = [f for kind, _fid, data in results if kind == "fragments" for f in pickle.loads(data)]
    delete_change_files(store, new, results)
    errors.sort(key=lambda e: e["type"] != "DuplicateKeyError")
    raise _error_class(errors[0]["type"])(errors[0]["message"])


def _outcome(
    store: ObjectStore,
    clauses: MergeClauses,
    bounds: tuple[tuple[str, Any, Any], ...],
    results: list[Any],
) -> tuple[Update | None, dict[str, int]]:
    """The Update the tasks' results describe, or the error a task reported (after
    deleting every file the merge wrote)."""
    new: list[FragmentMetadata] = []
    updated: list[FragmentMetadata] = []
    gone: list[int] = []
    affected: dict[int, BitMap] = {}
    matched: dict[int, BitMap] = {}
    counts = {"num_inserted_rows": 0, "num_updated_rows": 0, "num_deleted_rows": 0}
    for kind, fid, data in results:
        if kind == "fragments":
            new.extend(pickle.loads(data))
        elif kind == "deletion":
            updated.append(pickle.loads(data))
        elif kind == "gone":
            gone.append(fid)
        elif kind == "affected":
            affected[fid] = BitMap.deserialize(data)
        elif kind == "matched":
            matched[fid] = BitMap.deserialize(data)
        elif kind == "counts":
            for name, value in json.loads(data).items():
                counts[name] += int(value)
    _raise_refusal(store, results)
    if not (new or updated or gone):
        return None, counts
    op = Update(
        removed_fragment_ids=tuple(sorted(gone)),
        updated_fragments=tuple(sorted(updated, key=lambda f: f.id)),
        new_fragments=tuple(new),
        predicate=clauses.describe(),
        affected_rows=affected,
        plan=RowChangePlan(
            merge_keys=clauses.on,
            source_key_bounds=bounds,
            deletes_unmatched=clauses.delete_by_source,
            matched_rows=matched,
        ),
    )
    return op, counts


def _join_partitions(rows: int, cores: int) -> dict[str, str]:
    """Session settings for the job that joins the source with the target (``rows``:
    the source's and the candidate target rows): its shuffles in a multiple of
    ``cores`` partitions, at least 4 per core and one per :data:`JOIN_ROWS_PER_PARTITION`
    rows, not coalesced by adaptive execution. Coalesced to what the data's size
    suggested, the join of the benchmark's 20,000,000 source and target rows ran as 5
    tasks on 2 cores, the fifth alone while a core idled (10.8 s against 8.3-9.0 s in
    8 tasks; in 20, its 64-row address groups made 20 Python tasks and the merge as a
    whole was slower again). Only how the work is cut changes, never what it
    computes."""
    per_core = max(4, math.ceil(rows / JOIN_ROWS_PER_PARTITION / cores))
    return {
        "spark.sql.shuffle.partitions": str(per_core * cores),
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
    }
