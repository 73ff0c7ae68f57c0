"""The merge's clauses as Spark SQL and its rows written by Spark's Parquet writer.

Where the JVM reaches the dataset's files (:func:`writer_choice`), a merge of
:mod:`s3ddb.spark_ext.merge` runs as two Spark jobs over one join of the source
with the target's key columns (and the columns the conditions read), whose clauses
are one Spark SQL ``CASE`` per joined row (:func:`decided_frame`). The join is
persisted by the first job and read from there by the second: the target's keys are
read and joined once.

1. *Addresses.* The rows whose outcome touches the target (matched pairs, rows deleted
   by source) and the refusals (a key twice in the source, ``when_matched_fail``, a
   key outside the ranges planned) go to Python tasks as (outcome, fragment, row),
   grouped in the JVM into one 64-bit mask per 64-row word (:func:`address_words`):
   they gather Roaring bitmaps per fragment (:class:`AddressTask`), and tasks
   partitioned by fragment write the deletion files
   (:class:`~s3ddb.spark_ext.merge_tasks.DeletionTask`). A refusal stops the merge
   here, before any row is written.
2. *Rows.* The updated and inserted source rows are written by Spark's Parquet writer
   (:func:`~s3ddb.spark_ext.native_write.write_staged`): the dataset's columns with
   its field ids, each value checked where the dataset's column is stricter than
   Spark's. No row passes through Python.

An upsert (every source row updated or inserted unless the merge is refused:
:attr:`~s3ddb.writes.merge_clauses.MergeClauses.writes_every_source_row`) needs no
column of the join but the outcome: the row job runs first and writes the source
itself, read once, and the address job joins the keys of the files written (Spark's
Parquet reader, in the source's key types) with the target's; nothing is persisted.
A refusal then deletes the rows written too.

The driver holds what the tasks send and the written files' metadata; it commits as
the Python path does. Conditions keep the library's rules: NULL is false, delete wins
over update, ``source.<col>`` and ``target.<col>`` (or bare target columns for the
by-source delete) name the sides; they were compiled by s3ddb first (typed errors),
and one Spark cannot analyze sends the merge through Python tasks instead.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from s3ddb.errors import DataFileError, InvalidExpressionError, InvalidInputError, S3DDBError
from s3ddb.spark_ext._types import quoted_name
from s3ddb.spark_ext.merge_target import CHANGED_FILE_MARK
from s3ddb.spark_ext.merge_tasks import (
    FRAGMENT,
    IN_SOURCE,
    ROW,
    TARGET_PREFIX,
    result_batch,
)
from s3ddb.spark_ext.native_write import jvm_root_of, raised_message, value_checks
from s3ddb.writes.merge_clauses import (
    DELETE,
    KEEP,
    UPDATE,
    CompiledClauses,
    MergeClauses,
    duplicate_key_error,
    matched_row_error,
)

__all__ = [
    "BY_SOURCE",
    "INSERT",
    "OUTCOME",
    "TARGET_KEEP",
    "WRITERS",
    "AddressTask",
    "WriterChoice",
    "address_rows",
    "address_words",
    "check_writer",
    "decided_frame",
    "evaluation_errors",
    "source_is_deterministic",
    "writer_choice",
]

#: ``writer=`` of ``merge_insert`` and ``update``: who writes the rows where the JVM
#: reaches the files (the library's choice, Spark's writer, Python tasks).
WRITERS = ("auto", "jvm", "python")


def check_writer(writer: str, what: str) -> None:
    """Raises:
    InvalidInputError: ``writer`` is not one of :data:`WRITERS` (``what``, the
    function, is named)."""
    if writer not in WRITERS:
        raise InvalidInputError(f"{what} writer takes one of {WRITERS}; got {writer!r}")


#: Outcomes of a joined row beyond a matched pair's (:data:`KEEP`, :data:`UPDATE`,
#: :data:`DELETE`): an unmatched source row inserted or skipped, an unmatched target
#: row deleted by source or kept; and the refusals.
INSERT, SKIP, BY_SOURCE, TARGET_KEEP = 3, 4, 5, 6
DUPLICATE, OUT_OF_RANGE, MATCHED_FAIL = 7, 8, 9
#: Outcomes the address job sends to Python (the others are only counted by Spark).
ADDRESSED = (KEEP, UPDATE, DELETE, BY_SOURCE, DUPLICATE, OUT_OF_RANGE, MATCHED_FAIL)

#: Columns the decided frame adds.
OUTCOME = "__s3ddb_outcome"
_COUNT = "__s3ddb_source_count"
_KEY = "__s3ddb_key_"
_SIDES = ("source", "target")


@dataclass(frozen=True)
class WriterChoice:
    """Who writes a merge's rows: Spark's Parquet writer into ``root`` (the dataset
    root as the JVM names it) with ``checks`` on values, or, when ``refused`` says
    why not, Python tasks."""

    root: str | None
    checks: dict[str, list[Any]] = field(default_factory=dict)
    refused: str | None = None

    @property
    def jvm(self) -> bool:
        return self.refused is None

    def describe(self) -> str:
        """One line for ``explain``."""
        if self.refused is None:
            return f"rows written by: Spark's Parquet writer (JVM) into {self.root}/data"
        return f"rows written by: Python tasks (pyarrow), because {self.refused}"


def writer_choice(
    spark: Any,
    uri: str,
    jvm_scheme: str | None,
    source_schema: Any,
    target: pa.Schema,
    clauses: MergeClauses,
    compiled: CompiledClauses,
) -> WriterChoice:
    """Whether Spark's JVM can write a merge of a source of Spark schema
    ``source_schema`` into the dataset at ``uri`` (of Arrow schema ``target``) and
    evaluate its clauses, and if not, why. Runs no Spark job (conditions are only
    analyzed)."""
    root = jvm_root_of(uri, jvm_scheme)
    if root is None:
        return WriterChoice(
            None,
            refused="the JVM cannot reach the dataset's files (a local path, or an S3 "
            "dataset with jvm_scheme naming the cluster's S3 connector, can be)",
        )
    conditions = [
        clauses.update_condition,
        clauses.delete_condition,
        clauses.insert_condition,
        clauses.by_source_condition,
    ]
    if any(c is not None and not isinstance(c, str) for c in conditions):
        return WriterChoice(root, refused="a condition is a pyarrow Expression, not SQL")
    names = [*source_schema.names, *target.names]
    lowered = {n.lower() for n in source_schema.names}
    if len(lowered) != len(source_schema.names) or len({n.lower() for n in target.names}) != len(
        target.names
    ):
        return WriterChoice(root, refused="column names differ only in case")
    if any(n.startswith("__s3ddb_") for n in names):
        return WriterChoice(root, refused="a column name starts with __s3ddb_")
    if compiled.by_source_bare and any(n.lower() in _SIDES for n in target.names):
        return WriterChoice(root, refused="a column is named source or target")
    from pyspark.sql.types import StructType

    own = StructType([source_schema[n] for n in target.names])
    checks = value_checks(own, target, uri)
    if checks is None:
        return WriterChoice(
            root, refused="a source column's type differs from the dataset's beyond Spark's checks"
        )
    problem = _condition_problem(spark, source_schema, target, clauses, compiled)
    if problem is not None:
        return WriterChoice(root, refused=problem)
    return WriterChoice(root, checks)


def _condition_problem(
    spark: Any,
    source_schema: Any,
    target: pa.Schema,
    clauses: MergeClauses,
    compiled: CompiledClauses,
) -> str | None:
    """Why Spark cannot analyze a condition over empty sides, or None."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    from s3ddb.spark_ext._types import spark_schema_of

    target_spark = spark_schema_of(target, "merge target")
    sides = StructType(
        [
            StructField("source", source_schema),
            StructField("target", target_spark),
            *target_spark.fields,
        ]
    )
    empty = spark.createDataFrame([], sides)
    for name, condition in (
        ("when_matched_update_all", clauses.update_condition),
        ("when_matched_delete", clauses.delete_condition),
        ("when_not_matched_insert_all", clauses.insert_condition),
        ("when_not_matched_by_source_delete", clauses.by_source_condition),
    ):
        if condition is None:
            continue
        try:
            _ = empty.select(F.expr(str(condition)).cast("boolean")).schema
        except PySparkException as exc:
            first = str(exc).splitlines()[0][:200]
            return f"Spark SQL cannot evaluate the {name} condition ({first})"
    return None


def _holds(condition: Any) -> Any:
    """A condition as a Spark column that is never NULL (NULL counts as false), as
    the library's rules say; True when there is none."""
    from pyspark.sql import functions as F

    if condition is None:
        return F.lit(True)
    return F.coalesce(F.expr(str(condition)).cast("boolean"), F.lit(False))


def decided_frame(
    source: Any,
    target_df: Any,
    clauses: MergeClauses,
    compiled: CompiledClauses,
    bounds: tuple[tuple[str, Any, Any], ...],
) -> Any:
    """The join of ``source`` with ``target_df`` (the target's rows as
    :func:`~s3ddb.spark_ext.merge_target.target_frame` gives them), each row with its
    :data:`OUTCOME`: one frame both jobs read (:func:`address_rows`; the row job
    its :data:`UPDATE` and :data:`INSERT` rows), so that the caller can persist it
    and the target's keys are read and joined once.

    A full outer join when deleting by source, else a left join (the source's rows);
    refusals are decided too (the source's keys counted per key, and checked against
    ``bounds``). Its columns are :data:`OUTCOME`, the fragment and row, and the
    source's columns by their names (NULL on rows only the target holds).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = list(clauses.on)
    # A window partitioned by the keys the join shuffles by: no shuffle of its own.
    by_key = Window.partitionBy(*[F.col(quoted_name(k)) for k in keys])
    src = source.withColumn(IN_SOURCE, F.lit(True)).withColumn(
        _COUNT, F.count(F.lit(1)).over(by_key)
    )
    condition = None
    for k in keys:
        eq = src[quoted_name(k)] == target_df[quoted_name(TARGET_PREFIX + k)]
        condition = eq if condition is None else condition & eq
    how = "full_outer" if clauses.delete_by_source else "left_outer"
    joined = src.join(target_df, on=condition, how=how)
    source_names = [n for n in source.columns]
    sides = [
        F.struct(*[F.col(quoted_name(n)).alias(n) for n in source_names]).alias("source"),
        F.struct(
            *[F.col(quoted_name(TARGET_PREFIX + n)).alias(n) for n in compiled.target_columns]
        ).alias("target"),
    ]
    internal = [F.col(IN_SOURCE), F.col(FRAGMENT), F.col(ROW), F.col(_COUNT)]
    bare = []
    if compiled.by_source_bare and clauses.by_source_condition is not None:
        bare = [F.col(quoted_name(TARGET_PREFIX + n)).alias(n) for n in compiled.target_columns]
    sided = joined.select(*sides, *internal, *bare)
    in_source = F.col(IN_SOURCE).isNotNull()
    in_target = F.col(FRAGMENT).isNotNull()
    matched = in_source & in_target
    outcome: Any = None

    def when(test: Any, value: int) -> None:
        nonlocal outcome
        outcome = F.when(test, F.lit(value)) if outcome is None else outcome.when(test, value)

    has_key = F.lit(True)
    for k in keys:
        has_key = has_key & F.col("source").getField(k).isNotNull()
    when(in_source & has_key & (F.col(_COUNT) > 1), DUPLICATE)
    inside = F.lit(True)
    for name, low, high in bounds:
        inside = inside & F.col("source").getField(name).between(low, high)
    if bounds:
        when(in_source & has_key & ~inside, OUT_OF_RANGE)
    if clauses.fail:
        when(matched, MATCHED_FAIL)
    if clauses.delete:
        when(matched & _holds(clauses.delete_condition), DELETE)
    if clauses.update:
        when(matched & _holds(clauses.update_condition), UPDATE)
    when(matched, KEEP)
    if clauses.insert:
        when(in_source & _holds(clauses.insert_condition), INSERT)
    when(in_source, SKIP)
    if clauses.delete_by_source:
        # A bare condition reads the target's columns selected bare above.
        when(_holds(clauses.by_source_condition), BY_SOURCE)
    decided = sided.withColumn(OUTCOME, outcome.otherwise(TARGET_KEEP).cast("byte"))
    return decided.select(
        OUTCOME,
        FRAGMENT,
        ROW,
        *[F.col("source").getField(n).alias(n) for n in source_names],
    )


def address_rows(decided: Any, on: tuple[str, ...]) -> Any:
    """The address job's rows of ``decided`` (:func:`decided_frame`): those whose
    outcome touches the target and the refusals, as :data:`OUTCOME`, the fragment and
    row, and the source's key columns on refusal rows (``__s3ddb_key_<i>``), grouped
    as :func:`address_words` gives them to :class:`AddressTask`."""
    from pyspark.sql import functions as F

    refusal = F.col(OUTCOME) >= DUPLICATE
    per_row = decided.where(F.col(OUTCOME).isin(*ADDRESSED)).select(
        OUTCOME,
        FRAGMENT,
        ROW,
        *[F.when(refusal, F.col(quoted_name(k))).alias(f"{_KEY}{i}") for i, k in enumerate(on)],
    )
    return address_words(per_row, len(on))


def address_words(per_row: Any, keys: int) -> Any:
    """``per_row`` (:data:`OUTCOME`, the fragment, the row, then ``keys`` key columns
    set on refusal rows only) grouped in the JVM by outcome, fragment and 64-row word:
    each group's rows as one 64-bit mask and a count. Far fewer rows cross to Python
    than one per address (Spark's conversion of rows to Arrow batches costs more per
    row than anything the tasks do with them); a refusal's group keeps its key."""
    from pyspark.sql import functions as F

    row = F.col(ROW)
    word = F.shiftright(row, _WORD_BITS)
    bit = F.expr(f"shiftleft(1L, cast({ROW} % {1 << _WORD_BITS} AS INT))")
    return per_row.groupBy(
        OUTCOME, FRAGMENT, word.alias(_WORD), *[f"{_KEY}{i}" for i in range(keys)]
    ).agg(F.bit_or(bit).alias(_MASK), F.count(F.lit(1)).alias(_ROWS))


#: Columns :func:`address_words` adds: a group's 64-row word, its mask, its rows.
_WORD, _MASK, _ROWS = "__s3ddb_word", "__s3ddb_mask", "__s3ddb_rows"
_WORD_BITS = 6
#: The column of :func:`address_words`'s rows where the key columns start.
_FIRST_KEY = 3


@dataclass(frozen=True)
class AddressTask:
    """Gathers one partition of the address job's groups (:func:`address_words`) into
    bitmaps per fragment (rows removed, rows matched) and counts, or the refusal a
    group holds, as results (:data:`~s3ddb.spark_ext.merge_tasks.RESULT_DDL`).
    Pickles to executors."""

    on: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        removed: dict[int, BitMap] = {}
        matched: dict[int, BitMap] = {}
        counts = {"num_updated_rows": 0, "num_deleted_rows": 0}
        refusal: pa.RecordBatch | None = None
        for batch in batches:
            if not batch.num_rows:
                continue
            keys = [f"{_KEY}{i}" for i in range(len(self.on))]
            batch = batch.select([OUTCOME, FRAGMENT, _WORD, *keys, _MASK, _ROWS])
            outcome = batch.column(0).to_numpy(zero_copy_only=False)
            duplicates = np.flatnonzero(outcome == DUPLICATE)
            if len(duplicates):
                # The library refuses a duplicate key before anything else.
                yield _refusal(batch, int(duplicates[0]), self.on)
                return
            refused = np.flatnonzero(outcome > DUPLICATE)
            if len(refused) and refusal is None:
                refusal = _refusal(batch, int(refused[0]), self.on)
            if refusal is not None:
                continue  # only a duplicate key can still change the answer
            rows = batch.column(_ROWS).to_numpy(zero_copy_only=False)
            deleted = (outcome == DELETE) | (outcome == BY_SOURCE)
            counts["num_updated_rows"] += int(rows[outcome == UPDATE].sum())
            counts["num_deleted_rows"] += int(rows[deleted].sum())
            gone = (outcome == UPDATE) | deleted
            fids = batch.column(1).to_numpy(zero_copy_only=False).astype(np.int64)
            words = batch.column(2).to_numpy(zero_copy_only=False).astype(np.int64)
            masks = batch.column(_MASK).to_numpy(zero_copy_only=False).astype(np.int64)
            pair = outcome <= DELETE
            _add(matched, *_positions(fids[pair], words[pair], masks[pair]))
            _add(removed, *_positions(fids[gone], words[gone], masks[gone]))
        if refusal is not None:
            yield refusal
            return
        out = [("counts", -1, json.dumps(counts).encode())]
        out += [("removed", fid, b.serialize()) for fid, b in removed.items()]
        out += [("matched", fid, b.serialize()) for fid, b in matched.items()]
        yield result_batch(out)


def _positions(
    fids: np.ndarray, words: np.ndarray, masks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each set bit of ``masks`` (64-row words of the fragments ``fids``) as a
    (fragment, row) pair."""
    if not len(fids):
        return fids, fids
    bits = np.unpackbits(
        masks.astype("<i8").view(np.uint8).reshape(-1, 8), axis=1, bitorder="little"
    )
    group, bit = np.nonzero(bits)
    return fids[group], words[group] * (1 << _WORD_BITS) + bit


def _add(bitmaps: dict[int, BitMap], fids: np.ndarray, rows: np.ndarray) -> None:
    if not len(fids):
        return
    order = np.argsort(fids, kind="stable")
    fids, rows = fids[order], rows[order]
    starts = np.flatnonzero(np.r_[True, fids[1:] != fids[:-1]])
    ends = np.r_[starts[1:], len(fids)]
    for start, end in zip(starts, ends):
        bitmaps.setdefault(int(fids[start]), BitMap()).update(rows[start:end].astype(np.uint32))


def _refusal(batch: pa.RecordBatch, index: int, on: tuple[str, ...]) -> pa.RecordBatch:
    """The result refusing the merge for the refusal at row ``index`` of ``batch``."""
    outcome = int(batch.column(0)[index].as_py())
    key = pa.table({k: batch.column(_FIRST_KEY + i).slice(index, 1) for i, k in enumerate(on)})
    error: S3DDBError
    if outcome == DUPLICATE:
        error = duplicate_key_error(key, on, 0)
    elif outcome == MATCHED_FAIL:
        error = matched_row_error(key, on, 0)
    else:
        error = InvalidInputError(
            "the merge source gave other keys than when its key range was computed "
            "(a nondeterministic DataFrame): persist() it before merging; nothing "
            "was committed"
        )
    message = json.dumps({"type": type(error).__name__, "message": str(error)}).encode()
    return result_batch([("error", -1, message)])


#: Spark's error classes of an expression that failed on a value (ANSI SQL).
_EVALUATION = re.compile(
    r"\[(DIVIDE_BY_ZERO|ARITHMETIC_OVERFLOW|CAST_INVALID_INPUT|CAST_OVERFLOW|"
    r"NUMERIC_VALUE_OUT_OF_RANGE|INVALID_ARRAY_INDEX\w*|DATETIME_\w+)\][^\n]*"
)


@contextlib.contextmanager
def evaluation_errors(what: str) -> Iterator[None]:
    """Turn a Spark job's failure to evaluate an expression on a value (a division by
    zero, an overflow, under Spark's ANSI SQL) into the library's typed error; and
    its finding a target data file other than planned
    (:data:`~s3ddb.spark_ext.merge_target.CHANGED_FILE_MARK`).

    Raises:
        InvalidExpressionError: such a failure, with Spark's message.
        DataFileError: a data file changed since the job was planned.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JJavaError) as exc:
        changed = raised_message(exc, CHANGED_FILE_MARK)
        if changed is not None:
            raise DataFileError(f"{what}: {changed[:500]}; nothing is committed") from None
        found = _EVALUATION.search(str(exc))
        if found is None:
            raise
        kind = found.group(1).lower().replace("_", " ")
        raise InvalidExpressionError(
            f"{what}: Spark could not evaluate it ({kind}): {found.group(0)[:300]}"
        ) from None


def source_is_deterministic(source: Any) -> bool:
    """Whether Spark's analyzed plan of ``source`` gives the same rows each time it
    runs (no ``rand()``, ``uuid()``...). True when Spark cannot say (Spark Connect)."""
    try:
        return bool(source._jdf.queryExecution().analyzed().deterministic())
    except Exception:  # no JVM handle (Spark Connect) or another Spark's API
        return True
