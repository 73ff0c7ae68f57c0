"""Delta Lake ``_delta_log`` for s3ddb versions (:class:`DeltaWriter`).

Delta version N is s3ddb version N. What each version writes:

* ``_delta_log/<N>.json``: ``commitInfo`` (``s3ddb.version`` = N, the operation, the
  s3ddb commit time as ``timestamp``), ``protocol`` and ``metaData`` when they change,
  then ``remove`` for the files the version no longer lists and ``add`` for the files
  it lists anew (a file whose deleted rows changed is removed with its old deletion
  vector and added with its new one). Paths are sorted; JSON keys are in a fixed order.
* at the first published version and every version N with N % 10 == 0, a classic
  single-file checkpoint ``_delta_log/<N>.checkpoint.parquet`` with the whole state,
  then ``_delta_log/_last_checkpoint``;
* deletion vector files ``dv/deletion_vector_<uuid>.bin``
  (:mod:`s3ddb.open_formats.deletion_vectors`), named from the s3ddb deletion key.

Publication may start at any version N (``TableVersion.previous`` is None): commit N
then holds ``protocol``, ``metaData`` and an ``add`` for every file, and a checkpoint
at N is written. Both readers tested (deltalake 1.6 and DuckDB's delta extension
1.5.5, latest and time travel to N) read a log whose first commit is N > 0 with no
``00000000000000000000.json``: they list the log and start from the checkpoint (or
from the first commit, which carries ``protocol`` and ``metaData``), so nothing more
is needed. Time travel to a version before N fails in both, as it should. The same
holds after cleanup, which writes a checkpoint at the oldest version it keeps and
deletes the log before it (:func:`~s3ddb.open_formats.delta_log.expire_log`).

Everything written is a function of the :class:`~s3ddb.open_formats.model.TableVersion`
and the state after the version before: no wall-clock time, no random ids; the
checkpoint is written by pyarrow without its Arrow schema, and is byte-identical for
one pyarrow version (its footer names the pyarrow version that wrote it). The state
comes from this process's last publication, or from the log, read within bounds and
checked against the manifests (:mod:`s3ddb.open_formats.delta_log`): nothing in the
log that the manifests do not give is ever written again.

Protocol: (1, 2) while the table needs nothing more. Deletion vectors (and
``timestampNtz``) need reader 3 / writer 7 with those table features. The protocol is
part of the state and never lowered.

``dataChange`` is true on every action: always correct (false only lets streaming
readers skip rearrangements, and which s3ddb operations only rearrange is not this
module's to decide).

Schema types (:meth:`DeltaWriter.type_problem`): see
:func:`~s3ddb.open_formats.delta_schema.delta_type_problem`.

This module writes the log, and is the Delta plug-in
(:class:`~s3ddb.open_formats.model.OpenFormat`). The names of its files, its state and
its actions are :mod:`s3ddb.open_formats.delta_state`'s; reading the log back,
checking it against the manifests, what another engine wrote in it and its expiry
at cleanup are :mod:`s3ddb.open_formats.delta_log`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from s3ddb.errors import InvalidInputError
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.open_formats.deletion_vectors import DV_PREFIX, dv_file_bytes
from s3ddb.open_formats.delta_log import (
    KeptLogCheck,
    expire_log,
    foreign_problems,
    load_checked_state,
    log_problems,
)
from s3ddb.open_formats.delta_schema import delta_schema, delta_type_problem
from s3ddb.open_formats.delta_state import (
    CHECKPOINT_INTERVAL,
    ENABLE_DV,
    LAST_CHECKPOINT,
    LOG_DIR,
    VERSION_KEY,
    DeltaAdd,
    DeltaMetadata,
    DeltaState,
    checkpoint_bytes,
    checkpoint_path,
    commit_path,
    deletion_files,
    dumps,
    dv_descriptor,
    log_path,
    needed_protocol,
    required_features,
    version_files,
)
from s3ddb.open_formats.model import (
    CUT_KEY,
    DeletedPositions,
    Publication,
    PublishedFile,
    Retention,
    TableVersion,
)

__all__ = ["DeltaWriter"]


class DeltaWriter:
    """The Delta Lake plug-in, :class:`~s3ddb.open_formats.model.OpenFormat` (see the
    module docstring). Stateless: its state is a
    :class:`~s3ddb.open_formats.delta_state.DeltaState`."""

    name = "delta"
    title = "Delta"
    publishes_apart = False
    prefixes: tuple[str, ...] = (f"{LOG_DIR}/", f"{DV_PREFIX}/")
    #: deltalake and DuckDB find a file's column by the name it was written with.
    reads_columns_by_name = True

    def published_paths(self, version: int) -> list[str]:
        """``version``'s commit (see :func:`~s3ddb.open_formats.delta_state.version_files`)."""
        return version_files(version)

    def reader_location(self, root: str, version: int) -> str:
        """The table root and the log version (Delta readers open the root)."""
        return f"{root} ({LOG_DIR} version {version})"

    def foreign_problems(self, store: ObjectStore, newest_version: int) -> list[tuple[str, str]]:
        """See :func:`~s3ddb.open_formats.delta_log.foreign_problems`."""
        return foreign_problems(store, newest_version)

    def retire(self, store: ObjectStore, retention: Retention) -> list[ObjectMeta]:
        """The deletion vector files only removed versions stood for, and the log
        before the version it starts at once cleanup is done, checkpointed there (see
        :func:`~s3ddb.open_formats.delta_log.expire_log`).

        Raises:
            What ``retention.expected`` or the store raises.
        """
        kept = {p for key in retention.keep.deletion_keys for p in deletion_files(key)}
        gone = {p for key in retention.gone.deletion_keys for p in deletion_files(key)} - kept
        doomed = [meta for meta in retention.listed if meta.path in gone]
        return doomed + expire_log(store, retention.listed, retention.kept, retention.expected)

    def type_problem(self, schema: pa.Schema) -> str | None:
        """See :func:`~s3ddb.open_formats.delta_schema.delta_type_problem`."""
        return delta_type_problem(schema)

    def refresh_state(
        self, store: ObjectStore, state: DeltaState, now_ms: int, kept: Callable[[int], bool]
    ) -> DeltaState:
        """``state`` as it is: cleanup changes no Delta commit a later one builds on
        (it only writes a checkpoint of a kept version and deletes the log before)."""
        return state

    def load_state(self, store: ObjectStore, expected: TableVersion) -> DeltaState | None:
        """The state after ``expected.version`` from ``_delta_log/`` (``store`` rooted at
        the dataset), checked against ``expected``
        (:func:`~s3ddb.open_formats.delta_log.load_checked_state`); None when
        ``_delta_log/<version>.json`` does not exist.

        Raises:
            PublishedStateError: a log file beyond its bounds, malformed, not as s3ddb
                writes it, or a state that disagrees with ``expected`` (naming the file).
        """
        return load_checked_state(store, expected)

    def state_problems(self, store: ObjectStore, expected: TableVersion) -> list[str]:
        """What is wrong with the log of ``expected.version`` and the versions before it
        (:func:`~s3ddb.open_formats.delta_log.log_problems`), a sentence per file."""
        return log_problems(store, expected)

    def kept_checker(
        self, store: ObjectStore, listed: Iterable[ObjectMeta]
    ) -> Callable[[TableVersion], list[str]]:
        """What is wrong with the log of each older kept version, which Delta readers
        reach by time travel, a sentence per file: a
        :class:`~s3ddb.open_formats.delta_log.KeptLogCheck` (its commits and
        checkpoints and the sizes of the deletion vector files from ``listed``)."""
        return KeptLogCheck(store, listed)

    def publish(
        self, table: TableVersion, previous: Any | None, deleted: DeletedPositions
    ) -> tuple[Publication, DeltaState]:
        """The files of ``table`` and the state after it (see the module docstring).

        ``previous`` is the :class:`DeltaState` after ``table.previous`` (None when it is
        None: publication starts at this version).

        Raises:
            InvalidInputError: ``table.schema`` has a problem (:meth:`type_problem`),
                ``previous`` is missing or not a DeltaState while ``table.previous`` is
                set, or a deletion key's positions are not valid row positions.
        """
        problem = delta_type_problem(table.schema)
        if problem is not None:
            raise InvalidInputError(f"cannot publish version {table.version} as Delta: {problem}")
        state: DeltaState | None
        if table.previous is None:
            state = None
        elif isinstance(previous, DeltaState):
            state = previous
        else:
            raise InvalidInputError(
                f"publishing Delta version {table.version} needs the state after {table.previous}"
            )
        publication = Publication()
        version = table.version

        # Files: the whole list when publication starts, else the change.
        if state is None:
            removed: list[PublishedFile] = []
            added = list(table.all_files())
            adds: dict[str, DeltaAdd] = {}
        else:
            removed = list(table.removed)
            added = list(table.added)
            adds = dict(state.adds)
        remove_actions: list[dict[str, Any]] = []
        for f in sorted(removed, key=log_path):
            path = log_path(f)
            old = adds.pop(path, None)
            action: dict[str, Any] = {
                "path": path,
                "deletionTimestamp": table.timestamp_ms,
                "dataChange": True,
                "extendedFileMetadata": True,
                "partitionValues": {},
                "size": old.size if old is not None else f.size,
            }
            if old is not None and old.deletion_vector is not None:
                action["deletionVector"] = old.deletion_vector.to_json()
            remove_actions.append({"remove": action})
        add_actions: list[dict[str, Any]] = []
        dv_files: dict[str, bytes] = {}
        for f in sorted(added, key=log_path):
            descriptor = None
            if f.deletion_key is not None:
                try:
                    data, size, cardinality = dv_file_bytes(deleted(f))
                except ValueError as e:
                    raise InvalidInputError(f"{f.path}: deleted rows: {e}") from e
                dv_files[deletion_files(f.deletion_key)[0]] = data
                descriptor = dv_descriptor(f.deletion_key, size, cardinality)
            add = DeltaAdd(
                log_path(f),
                f.size,
                table.timestamp_ms,
                dumps({"numRecords": f.physical_rows}),
                descriptor,
            )
            adds[add.path] = add
            add_actions.append({"add": add.to_json()})
        publication.content.extend(sorted(dv_files.items()))

        # Schema, configuration and protocol.
        schema_string = delta_schema(table.schema)
        config = dict(state.metadata.configuration) if state else {}
        if any(a.deletion_vector is not None for a in adds.values()):
            config[ENABLE_DV] = "true"
        features = required_features(config, table.schema)
        protocol = needed_protocol(state.protocol if state else None, features)
        metadata = DeltaMetadata(
            state.metadata.table_id if state else table.table_uuid,
            schema_string,
            tuple(sorted(config.items())),
            state.metadata.created_time if state else table.timestamp_ms,
        )

        # The commit.
        commit_info: dict[str, Any] = {
            "timestamp": table.timestamp_ms,
            "operation": table.operation,
            "operationParameters": {},
            VERSION_KEY: version,
            "engineInfo": "s3ddb",
        }
        if table.cut is not None:
            commit_info[CUT_KEY] = table.cut
        actions: list[dict[str, Any]] = [{"commitInfo": commit_info}]
        if state is None or protocol != state.protocol:
            actions.append({"protocol": protocol.to_json()})
        if state is None or metadata != state.metadata:
            actions.append({"metaData": metadata.to_json()})
        actions += remove_actions + add_actions
        publication.then.append(
            (commit_path(version), ("\n".join(dumps(a) for a in actions) + "\n").encode())
        )
        new_state = DeltaState(version, protocol, metadata, adds)
        if state is None or version % CHECKPOINT_INTERVAL == 0:
            checkpoint, rows = checkpoint_bytes(new_state)
            publication.then.append((checkpoint_path(version), checkpoint))
            last = {
                "version": version,
                "size": rows,
                "sizeInBytes": len(checkpoint),
                "numOfAddFiles": len(adds),
            }
            publication.then.append((LAST_CHECKPOINT, dumps(last).encode()))
        return publication, new_state
