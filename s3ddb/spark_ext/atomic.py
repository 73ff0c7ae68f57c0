"""Several DataFrames committed as one group (``s3ddb.atomic``) from Spark.

:func:`write_atomic` writes each DataFrame's rows as data files on the executors (one
task per partition, through :func:`s3ddb.fragment.write_fragments`), then commits one
``Append`` per dataset from the driver, all in one group: every dataset gets its rows,
or none does. :func:`atomic_batches` makes a ``foreachBatch`` function that does the
same for each micro-batch of a stream and records the batch id (an application
transaction) in every member that gets rows; a batch that any member records, or a
later batch of the same stream, commits nothing: exactly once across all the sinks,
however a replayed batch is routed. Only the public API is used, with the Spark type
conversions the data source shares (``_types``).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

import s3ddb
from s3ddb.errors import InvalidInputError, TransactionAlreadyCommittedError
from s3ddb.groups import AtomicGroup
from s3ddb.operations import Append
from s3ddb.spark_ext._types import arrow_schema_of, conform_to_dataset

__all__ = ["APP_TRANSACTION_PREFIX", "atomic_batches", "commit_batch_once", "write_atomic"]

log = logging.getLogger(__name__)

#: Transaction property prefix of application transactions (as the streaming sink's).
APP_TRANSACTION_PREFIX = "s3ddb.app_txn."


def _fragments_task(
    uri: str, schema: Any, storage_options: dict[str, Any] | None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor side: one partition's rows as data files of ``uri``; yields the
    fragments' metadata, pickled, one per row."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import s3ddb as lib

        collected = [b for b in batches if b.num_rows]
        if not collected:
            return
        # Spark's Arrow types (timestamps in microseconds and UTC...) cast to the
        # dataset's, as the data source's appends do.
        table = conform_to_dataset(pa.Table.from_batches(collected), schema.arrow, where=uri)
        fragments = lib.fragment.write_fragments(
            table, uri, schema, storage_options=storage_options
        )
        assert isinstance(fragments, list)  # no return_transaction
        yield pa.record_batch(
            [pa.array([pickle.dumps(f) for f in fragments], pa.binary())], names=["fragment"]
        )

    return task


def _write_fragments(
    df: Any, uri: str, schema: Any, storage_options: dict[str, Any] | None
) -> tuple[s3ddb.FragmentMetadata, ...]:
    rows = df.mapInArrow(_fragments_task(uri, schema, storage_options), "fragment binary")
    return tuple(pickle.loads(row.fragment) for row in rows.collect())


def write_atomic(
    spark: Any,
    frames: Mapping[str, Any],
    *,
    storage_options: dict[str, Any] | None = None,
    transaction_properties: dict[str, str] | None = None,
) -> dict[str, s3ddb.Dataset]:
    """Append each DataFrame of ``frames`` (``{uri: df}``) to its dataset, all in one
    group: every dataset commits its rows or none does. Returns ``{uri: Dataset}`` at
    the versions committed.

    The datasets must exist and be group members (``s3+ddb://`` with tables behind one
    endpoint, region and credentials); each DataFrame must match its dataset's
    schema. ``spark`` is the session the DataFrames belong to (kept for symmetry with
    the other helpers). If a Spark job fails, the files its finished tasks wrote are
    left unreferenced (``s3ddb cleanup`` removes them); nothing is committed.

    Raises:
        InvalidInputError: ``frames`` is not a non-empty mapping.
        AtomicGroupError: the datasets cannot form a group.
        SchemaMismatchError: a DataFrame does not match its dataset (checked before
            any Spark job runs).
        CommitConflictError, CommitStateUnknownError: as ``s3ddb.atomic`` raises.
        TransactionAlreadyCommittedError: ``transaction_properties`` hold an
            application transaction (``s3ddb.app_txn.<application>``) whose number,
            or a newer one, some member records already: checked on every member
            before any Spark job runs (a member whose DataFrame is empty records
            nothing of this write), so nothing is written or committed.
    """
    del spark  # the DataFrames carry their session
    if not isinstance(frames, Mapping):
        raise InvalidInputError(
            f"write_atomic takes a mapping {{uri: DataFrame}}, got {type(frames).__name__}"
        )
    if not frames:
        raise InvalidInputError("write_atomic needs at least one {uri: DataFrame}")
    group = AtomicGroup(storage_options)
    handles: dict[str, s3ddb.Dataset] = {}
    try:
        # Every member opened and every DataFrame's schema checked on the driver
        # before any Spark job writes a file: a mismatch is SchemaMismatchError here,
        # not an executor's error after other members' rows were written.
        for uri, df in frames.items():
            ds = handles[uri] = group.dataset(uri)
            arrow = arrow_schema_of(df.schema)
            conform_to_dataset(arrow.empty_table(), ds.manifest.schema.arrow, where=uri)
        _refuse_committed(handles, transaction_properties or {})
        for uri, df in frames.items():
            ds = handles[uri]
            fragments = _write_fragments(df, uri, ds.manifest.schema, storage_options)
            if fragments:
                group.add_operation(uri, Append(fragments), transaction_properties)
    except BaseException:
        group.abort()
        raise
    group.commit()
    return handles


def _refuse_committed(handles: Mapping[str, s3ddb.Dataset], properties: Mapping[str, str]) -> None:
    """Raises TransactionAlreadyCommittedError if a member of ``handles`` records an
    application transaction of ``properties`` with an equal or newer number. A group
    commits all or nothing, so one member recording it means the whole write
    committed; members that got no rows in it record nothing, hence every member is
    asked."""
    for key, value in properties.items():
        if not key.startswith(APP_TRANSACTION_PREFIX):
            continue
        for uri, ds in handles.items():
            recorded = ds.manifest.table_metadata.get(key)
            if recorded is None:
                continue
            try:
                done = int(value) <= int(recorded)
            except ValueError:
                continue  # the commit says what is wrong with a number that is not one
            if done:
                raise TransactionAlreadyCommittedError(
                    f"application transaction {key[len(APP_TRANSACTION_PREFIX) :]!r} "
                    f"{value} is already committed ({uri} version {ds.version} records "
                    f"{recorded})"
                )


def atomic_batches(
    route: Callable[[Any], Mapping[str, Any]],
    application: str,
    *,
    storage_options: dict[str, Any] | None = None,
) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function committing each micro-batch to several datasets
    in one group, exactly once::

        route = lambda batch: {orders_uri: batch.where("kind = 'order'"),
                               audit_uri: batch.select("id", "kind")}
        stream.writeStream.foreachBatch(atomic_batches(route, "orders-job")).start()

    ``route(batch_df)`` maps the batch to ``{uri: DataFrame}``. Every member that
    gets rows records ``application`` = the batch id (an application transaction; a
    member whose DataFrame is empty in a batch gets no version). A batch whose id, or
    a later one, any member records is skipped, so a batch that a restarted query
    replays (its checkpoint did not record it, but the group committed) commits
    nothing, even if it routes its rows to other members this time. ``application``
    names the stream; keep it across restarts.

    Raises:
        InvalidInputError: ``application`` is empty, or ``route`` is not callable.
    """
    if not application:
        raise InvalidInputError("atomic_batches needs an application name")
    if not callable(route):
        raise InvalidInputError(
            f"atomic_batches needs route, a function batch -> {{uri: DataFrame}}; "
            f"got {type(route).__name__}"
        )

    def each(batch_df: Any, batch_id: int) -> None:
        # route() may read the batch once per dataset.
        commit_batch_once(
            batch_df,
            batch_id,
            application,
            lambda properties: write_atomic(
                batch_df.sparkSession,
                route(batch_df),
                storage_options=storage_options,
                transaction_properties=properties,
            ),
        )

    return each


def commit_batch_once(
    batch_df: Any, batch_id: int, application: str, commit: Callable[[dict[str, str]], Any]
) -> None:
    """``commit(properties)`` for one micro-batch, ``properties`` recording
    ``application`` = ``batch_id`` (an application transaction), with the batch
    persisted meanwhile (the commit may read it more than once). A batch whose id, or a
    later one, is committed already commits nothing (logged)."""
    batch_df.persist()
    try:
        commit({f"{APP_TRANSACTION_PREFIX}{application}": str(batch_id)})
    except TransactionAlreadyCommittedError as exc:
        log.info("s3ddb: batch %d of %s is committed already: %s", batch_id, application, exc)
    finally:
        batch_df.unpersist()
