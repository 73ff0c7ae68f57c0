"""Writing from Spark: tasks write fragments, the driver commits one transaction.

A write is planned once (the read version and the dataset schema are pinned then),
executed by tasks that each write Parquet fragments straight into the dataset and
send back picklable :class:`FragmentMetadata`, and committed by the driver through
the normal commit loop, so concurrent Spark jobs and Python writers rebase on each
other like any writers.

Spark runs ``commit()`` and ``abort()`` in Python workers on the driver, not
necessarily the same one, and calls ``abort()`` when ``commit()`` raises. The commit
records its outcome in a small file on the driver's local disk, keyed by the write's
id, so that ``abort()`` deletes the written files only if the commit definitely
failed (or never ran): never after an unknown outcome, a commit that died midway, or
one interrupted (KeyboardInterrupt...), which may have come after the claim.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from s3ddb.commit import finalizer as finalizers
from s3ddb.dataset import Dataset, dataset
from s3ddb.errors import (
    CommitStateUnknownError,
    DatasetNotFoundError,
    TransactionAlreadyCommittedError,
)
from s3ddb.format.datafile import write_fragments_from_table
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.format.manifest import referenced_paths
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.written_files import delete_written_files
from s3ddb.operations import Append, Operation, Overwrite
from s3ddb.spark_ext._options import SourceOptions
from s3ddb.spark_ext._types import arrow_schema_of, conform_to_dataset
from s3ddb.versions.connect import open_handler

log = logging.getLogger(__name__)

Outcome = Literal["started", "failed", "unknown"]
#: What an operation read at no version does if the dataset was created meanwhile
#: (see :meth:`s3ddb.Dataset.commit`).
OnExisting = Literal["rebase", "append"]


@dataclass(frozen=True)
class WritePlan:
    """What every task and the commit need to know; pickles to executors."""

    options: SourceOptions
    write_id: str
    read_version: int  # 0: no dataset when planned
    schema: DatasetSchema
    overwrite: bool

    @classmethod
    def make(cls, options: SourceOptions, spark_schema: Any, overwrite: bool) -> WritePlan:
        """Pin the newest version and the schema the written files will carry.

        Raises:
            SchemaMismatchError: an append whose columns do not match the dataset.
            ExternalStoreTableError, EndpointUnreachableError...: the dataset cannot
                be reached; nothing has been written.
        """
        handler = open_handler(options.uri, options.storage_options)
        handler.validate()
        latest = handler.latest_location(finalize=False)
        base = handler.load_manifest(latest) if latest is not None else None
        arrow = arrow_schema_of(spark_schema)
        if base is None:
            schema = DatasetSchema.assign(arrow)
        elif overwrite:
            schema = base.schema.with_arrow(arrow)
        else:
            schema = base.schema
            conform_to_dataset(arrow.empty_table(), schema.arrow, where=options.uri)
        return cls(options, uuid.uuid4().hex, base.version if base else 0, schema, overwrite)

    def store(self) -> ObjectStore:
        return ObjectStore(self.options.uri, self.options.storage_options)


@dataclass(frozen=True)
class FragmentsWritten(WriterCommitMessage):
    """One task's commit message: the fragments it wrote (ids assigned at commit)."""

    fragments: tuple[FragmentMetadata, ...]


def write_task(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> FragmentsWritten:
    """Write ``batches`` as fragments of at most ``maxRowsPerFile`` rows.

    If the task fails, the files it wrote are deleted before the error propagates.

    Raises:
        SchemaMismatchError: a batch does not fit the dataset's schema.
    """
    store = plan.store()
    limit = plan.options.max_rows_per_file
    written: list[FragmentMetadata] = []
    buffered: list[pa.Table] = []
    rows = 0

    def flush() -> None:
        nonlocal buffered, rows
        if rows:
            table = pa.concat_tables(buffered)
            written.extend(
                write_fragments_from_table(store, table, plan.schema, max_rows_per_file=limit)
            )
        buffered, rows = [], 0

    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = conform_to_dataset(
                pa.Table.from_batches([batch]), plan.schema.arrow, where=plan.options.uri
            )
            buffered.append(table)
            rows += table.num_rows
            if rows >= limit:
                flush()
        flush()
    except BaseException:
        delete_files(store, written)
        raise
    return FragmentsWritten(tuple(written))


def fragments_of(messages: Iterable[Any]) -> tuple[FragmentMetadata, ...]:
    return tuple(f for m in messages if isinstance(m, FragmentsWritten) for f in m.fragments)


def delete_files(store: ObjectStore, fragments: Iterable[FragmentMetadata]) -> None:
    """Delete the fragments' data files, best effort (a failure is logged)."""

    def warn(path: str, exc: Exception) -> None:
        log.warning("could not delete %s/%s: %s", store.url, path, exc)

    delete_written_files(store, data_file_paths(list(fragments)), on_failure=warn)


# --- outcomes, shared between the driver's commit and abort workers -----------------


def _outcome_file(write_id: str) -> str:
    folder = os.path.join(tempfile.gettempdir(), "s3ddb-spark-writes")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, write_id)


def record_outcome(write_id: str, outcome: Outcome) -> None:
    path = _outcome_file(write_id)
    with open(path + ".tmp", "w") as f:
        f.write(outcome)
    os.replace(path + ".tmp", path)


def read_outcome(write_id: str) -> Outcome | None:
    try:
        with open(_outcome_file(write_id)) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    return text if text in ("started", "failed") else "unknown"  # type: ignore[return-value]


def forget_outcome(write_id: str) -> None:
    try:
        os.remove(_outcome_file(write_id))
    except FileNotFoundError:
        pass


# --- the driver's commit -------------------------------------------------------------


def _operation(
    plan: WritePlan, read_version: int, fragments: tuple[FragmentMetadata, ...]
) -> tuple[Operation | None, OnExisting]:
    if plan.overwrite:
        return Overwrite(fragments, plan.schema), "rebase"
    if not read_version:
        # Append to a missing dataset creates it; if another writer creates it first,
        # the commit turns this into an Append of the same fragments.
        return Overwrite(fragments, plan.schema), "append"
    if not fragments:
        return None, "rebase"
    return Append(fragments), "rebase"


def _latest_version(options: SourceOptions) -> int:
    """The newest version at ``options.uri`` (0: no dataset)."""
    try:
        return dataset(options.uri, storage_options=options.storage_options).version
    except DatasetNotFoundError:
        return 0


def commit_write(
    plan: WritePlan,
    messages: Iterable[Any],
    *,
    read_latest: bool = False,
    properties: dict[str, str] | None = None,
) -> Dataset | None:
    """Commit the tasks' fragments as one transaction read at ``plan.read_version``
    (``read_latest``: at the newest version, as a streaming micro-batch does).

    Returns the dataset at the committed version, or None when there was nothing to
    commit (an empty append).

    Raises:
        CommitConflictError and subclasses: definitely not committed; the commit loop
            deleted the files.
        CommitStateUnknownError: the outcome is unknown; every file is kept.
    """
    fragments = fragments_of(messages)
    record_outcome(plan.write_id, "started")
    try:
        read_version = _latest_version(plan.options) if read_latest else plan.read_version
        operation, on_existing = _operation(plan, read_version, fragments)
        if operation is None:
            forget_outcome(plan.write_id)
            return None
        committed = Dataset.commit(
            plan.options.uri,
            operation,
            read_version or None,
            plan.options.storage_options,
            transaction_properties=properties,
            on_existing=on_existing,
        )
    except CommitStateUnknownError:
        record_outcome(plan.write_id, "unknown")
        raise
    except Exception:
        record_outcome(plan.write_id, "failed")
        raise
    except BaseException:
        # An interrupt (KeyboardInterrupt, SystemExit...) may have come mid-claim:
        # the version may have landed, so the files are kept, as the committer does.
        record_outcome(plan.write_id, "unknown")
        raise
    forget_outcome(plan.write_id)  # no abort follows a commit that returned
    # The worker may exit without running exit handlers: finish steps 3-4 now.
    if finalizers.enabled() and not finalizers.drain(timeout=60.0):
        log.warning("s3ddb: version %d is committed but not yet finalized", committed.version)
    return committed


def abort_write(plan: WritePlan, messages: Iterable[Any]) -> None:
    """Delete the tasks' files unless the commit may have landed."""
    outcome = read_outcome(plan.write_id)
    fragments = fragments_of(messages)
    if outcome in ("unknown", "started"):
        log.warning(
            "s3ddb: the commit of write %s to %s may have landed; keeping its %d fragment(s)",
            plan.write_id,
            plan.options.uri,
            len(fragments),
        )
        return
    delete_files(plan.store(), fragments)
    forget_outcome(plan.write_id)


def commit_stream_batch(plan: WritePlan, messages: Iterable[Any], batch_id: int) -> bool:
    """Commit one micro-batch exactly once; False if this stream already committed
    ``batch_id`` (a replay after a restart), in which case its files are deleted.

    Raises:
        InvalidInputError: no stream id (``checkpointLocation`` or ``streamId``).
        CommitConflictError, CommitStateUnknownError: as :func:`commit_write`.
    """
    from s3ddb.commit.build import APP_TRANSACTION_PREFIX
    from s3ddb.errors import InvalidInputError

    stream_id = plan.options.stream_id
    if not stream_id:
        raise InvalidInputError(
            "an s3ddb streaming sink needs option checkpointLocation (or streamId)"
        )
    properties = {f"{APP_TRANSACTION_PREFIX}{stream_id}": str(batch_id)}
    messages = list(messages)
    try:
        commit_write(batch_plan(plan, batch_id), messages, read_latest=True, properties=properties)
    except TransactionAlreadyCommittedError as exc:
        log.info("s3ddb: %s; nothing committed", exc)
        # The replay wrote the batch's rows again, to files of its own: they go (a
        # failed Dataset.commit keeps the files its operation lists; these are ours).
        # Any the newest version lists stay, whoever committed them.
        fragments = fragments_of(messages)
        try:
            newest = dataset(plan.options.uri, storage_options=plan.options.storage_options)
            listed = set(referenced_paths(newest.manifest, transaction=False))
        except Exception as read_exc:  # best effort: the replay is decided, files or not
            log.warning(
                "s3ddb: keeping the %d fragment(s) of replayed batch %d: the newest "
                "version of %s could not be read (%s)",
                len(fragments), batch_id, plan.options.uri, read_exc,
            )  # fmt: skip
        else:
            replayed = [f for f in fragments if not listed.intersection(data_file_paths([f]))]
            delete_files(plan.store(), replayed)
        forget_outcome(batch_plan(plan, batch_id).write_id)
        return False
    return True


def batch_plan(plan: WritePlan, batch_id: int) -> WritePlan:
    """The plan of one micro-batch: its own write id, so outcomes never mix."""
    return replace(plan, write_id=f"{plan.write_id}-batch-{batch_id}")
