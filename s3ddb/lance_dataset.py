"""pylance's ``LanceDataset``, for code written against pylance (``import s3ddb as
lance``): it opens as pylance's does, ``LanceDataset(uri, version=None, ...,
storage_options=None)``, and its changing methods return what pylance's return (None,
or the new configuration) where :class:`s3ddb.Dataset`'s return the Dataset.

Everything else is :class:`s3ddb.Dataset`'s; docs/pylance.md lists every member.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any, Literal, cast

from s3ddb.commit.builders import STABLE_ROW_IDS_KEY
from s3ddb.commit.committer import CommitConfig
from s3ddb.dataset import Dataset, dataset
from s3ddb.errors import InvalidInputError
from s3ddb.operations import Operation, Overwrite, Transaction
from s3ddb.pylance_compat import (
    NO_LOCKS,
    NO_NAMESPACES,
    check_open_options,
    metadata_changes,
    refuse_options,
    unsupported,
)
from s3ddb.versions.pinned import PinnedVersion
from s3ddb.writes import version_writes as writes

__all__ = ["LanceDataset"]

#: pylance's ``LanceDataset.commit`` arguments s3ddb has no such thing for.
REFUSED_COMMIT_OPTIONS: dict[str, tuple[Any, str]] = {
    "commit_lock": (None, NO_LOCKS),
    "detached": (False, "s3ddb has no detached versions"),
    "commit_message": (None, "pass transaction_properties to s3ddb.Dataset.commit"),
    "namespace_client": (None, NO_NAMESPACES),
    "table_id": (None, NO_NAMESPACES),
    "namespace_client_managed_versioning": (False, NO_NAMESPACES),
    "base_store_params": (None, "a base path is read with the dataset's storage options"),
}

#: pylance's default commit retries and timeout: given so, s3ddb keeps its own.
PYLANCE_MAX_RETRIES = 20
PYLANCE_COMMIT_TIMEOUT = dt.timedelta(minutes=30)


def _as_lance_dataset(ds: PinnedVersion) -> LanceDataset:
    """A LanceDataset taking over ``ds``'s state (the same dataset and version)."""
    lance = LanceDataset.__new__(LanceDataset)
    vars(lance).update(vars(ds))
    return lance


class LanceDataset(Dataset):
    """A dataset pinned at one version, opened and answering as pylance's
    ``LanceDataset``. Cache sizes and ``block_size`` are accepted and ignored.

    Raises:
        UnsupportedOperationError: a pylance argument s3ddb has no such thing for
            (``commit_lock``, ``session``, namespaces...), named.
        DatasetNotFoundError, VersionNotFoundError: as :func:`s3ddb.dataset`.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        version: int | str | None = None,
        block_size: int | None = None,
        index_cache_size: int | None = None,
        metadata_cache_size: int | None = None,
        commit_lock: Any = None,
        storage_options: dict[str, Any] | None = None,
        serialized_manifest: bytes | None = None,
        default_scan_options: dict[str, Any] | None = None,
        metadata_cache_size_bytes: int | None = None,
        index_cache_size_bytes: int | None = None,
        read_params: dict[str, Any] | None = None,
        session: Any = None,
        namespace_client: Any = None,
        table_id: list[str] | None = None,
        namespace_client_managed_versioning: bool = False,
        base_store_params: dict[str, dict[str, str]] | None = None,
    ) -> None:
        refused = {
            "commit_lock": commit_lock,
            "serialized_manifest": serialized_manifest,
            "default_scan_options": default_scan_options,
            "read_params": read_params,
            "session": session,
            "namespace_client": namespace_client,
            "table_id": table_id,
            "namespace_client_managed_versioning": namespace_client_managed_versioning,
            "base_store_params": base_store_params,
        }
        check_open_options("LanceDataset", refused)
        # The state of the dataset as s3ddb.dataset opens it (checked, pinned).
        vars(self).update(vars(dataset(uri, version, storage_options)))

    # --- changes: pylance's return values ---

    def insert(  # type: ignore[override]
        self, data: Any, *, mode: Literal["append", "overwrite"] = "append", **options: Any
    ) -> None:
        """As :meth:`s3ddb.Dataset.insert` (``conflict_retries``, ``retry_timeout``)."""
        super().insert(data, mode, **options)

    def update_config(  # type: ignore[override]
        self, values: dict[str, str | None], *, replace: bool = False
    ) -> dict[str, str]:
        """Set (text) or delete (None) configuration keys, or with ``replace`` make
        ``values`` the whole configuration, as one new version; returns the
        configuration after it.

        Raises:
            InvalidInputError: keys or values that are not text (or None).
        """
        upsert, delete = metadata_changes(self._manifest.config, values, replace)
        writes.update_config(self, upsert, delete, None, ())
        return dict(self._manifest.config)

    def delete_config_keys(self, keys: list[str] | tuple[str, ...]) -> None:  # type: ignore[override]
        writes.update_config(self, None, tuple(keys), None, ())

    def restore(self) -> None:  # type: ignore[override]
        super().restore()

    def update(  # type: ignore[override]
        self,
        updates: dict[str, Any],
        where: Any = None,
        conflict_retries: int | None = None,
        retry_timeout: float | dt.timedelta | None = None,
        data_storage_version: str | None = None,
        **options: Any,
    ) -> dict[str, int]:
        """pylance's ``update(updates, where=None, ...)``: as :meth:`s3ddb.Dataset.update`.

        Raises:
            UnsupportedOperationError: a ``data_storage_version`` other than "stable"
                (s3ddb writes one Parquet format).
        """
        refuse_options(
            "update", {"data_storage_version": data_storage_version}, REFUSED_UPDATE_OPTIONS
        )
        return super().update(
            updates,
            where,
            conflict_retries=conflict_retries,
            retry_timeout=retry_timeout,
            **options,
        )

    def get_fragments(self, filter: Any = None) -> list[Any]:  # type: ignore[override]
        """The pinned version's fragments; pylance's ``filter`` is refused (pylance
        has not implemented it either).

        Raises:
            UnsupportedOperationError: a ``filter``.
        """
        refuse_options("get_fragments", {"filter": filter}, REFUSED_FRAGMENT_LIST_OPTIONS)
        return super().get_fragments()

    def shallow_clone(  # type: ignore[override]
        self,
        target_path: str | os.PathLike[str],
        reference: int | str | tuple[str | None, int | None] | None = None,
        storage_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> LanceDataset:
        """pylance's ``shallow_clone(target_path, reference)``: ``reference`` is a
        version number, a tag, or pylance's ``(branch, version)`` with no branch.

        Raises:
            UnsupportedOperationError: a branch in ``reference``, or a pylance option.
        """
        refuse_options("shallow_clone", options, REFUSED_CLONE_OPTIONS)
        # A clone's handle is of the caller's class: a LanceDataset.
        cloned = super().shallow_clone(target_path, _clone_version(reference), storage_options)
        return cast(LanceDataset, cloned)

    def deep_clone(  # type: ignore[override]
        self,
        target_path: str | os.PathLike[str],
        reference: int | str | tuple[str | None, int | None] | None = None,
        storage_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> LanceDataset:
        """pylance's ``deep_clone(target_path, reference)``; see :meth:`shallow_clone`.

        Raises:
            UnsupportedOperationError: a branch in ``reference``, or a pylance option.
        """
        refuse_options("deep_clone", options, REFUSED_CLONE_OPTIONS)
        # A clone's handle is of the caller's class: a LanceDataset.
        cloned = super().deep_clone(target_path, _clone_version(reference), storage_options)
        return cast(LanceDataset, cloned)

    def add_columns(  # type: ignore[override]
        self,
        transforms: Any,
        read_columns: list[str] | None = None,
        reader_schema: Any = None,
        batch_size: int | None = None,
        **options: Any,
    ) -> None:
        """As :meth:`s3ddb.Dataset.add_columns`; ``batch_size`` is accepted (s3ddb
        sizes its own batches).

        Raises:
            UnsupportedOperationError: ``reader_schema`` (s3ddb reads a reader's own
                schema).
        """
        refuse_options("add_columns", {"reader_schema": reader_schema}, REFUSED_ADD_COLUMNS_OPTIONS)
        super().add_columns(transforms, read_columns, **options)

    def drop_columns(self, columns: list[str], **options: Any) -> None:  # type: ignore[override]
        super().drop_columns(columns, **options)

    def alter_columns(self, *alterations: dict[str, Any], **options: Any) -> None:  # type: ignore[override]
        super().alter_columns(*alterations, **options)

    def replace_schema_metadata(self, new_metadata: dict[str, str]) -> None:  # type: ignore[override]
        super().replace_schema_metadata(new_metadata)

    def replace_field_metadata(self, field_name: str, new_metadata: dict[str, str]) -> None:  # type: ignore[override]
        super().replace_field_metadata(field_name, new_metadata)

    def create_scalar_index(  # type: ignore[override]
        self, column: str, index_type: str = "BTREE", name: str | None = None, *,
        replace: bool = True, train: bool = True, **options: Any,
    ) -> None:  # fmt: skip
        """As :meth:`s3ddb.Dataset.create_scalar_index`; ``train`` is accepted (s3ddb
        always builds the whole index).

        Raises:
            UnsupportedOperationError: ``fragment_ids``, ``index_uuid`` and pylance's
                other index options.
        """
        refuse_options("create_scalar_index", options, REFUSED_INDEX_OPTIONS)
        super().create_scalar_index(column, index_type, name, replace)

    @staticmethod
    def commit(  # type: ignore[override]
        base_uri: str | os.PathLike[str] | PinnedVersion,
        operation: Operation | Transaction,
        read_version: int | None = None,
        commit_lock: Any = None,
        storage_options: dict[str, Any] | None = None,
        enable_v2_manifest_paths: bool | None = None,
        detached: bool | None = False,
        max_retries: int = PYLANCE_MAX_RETRIES,
        **options: Any,
    ) -> LanceDataset:
        """pylance's ``LanceDataset.commit``: as :meth:`s3ddb.Dataset.commit`, in
        pylance's argument order. ``max_retries`` and ``commit_timeout`` apply when
        they differ from pylance's defaults (otherwise s3ddb's, made for many
        writers, do); ``enable_v2_manifest_paths`` is accepted (a dataset keeps its
        naming); ``enable_stable_row_ids=True`` gives the dataset an Overwrite creates
        or replaces stable row ids.

        Raises:
            UnsupportedOperationError: ``enable_stable_row_ids=True`` with another
                operation than an Overwrite; ``commit_lock``, ``detached=True``,
                ``commit_message``, namespaces and other pylance arguments s3ddb has
                no such thing for.
        """
        timeout = options.pop("commit_timeout", PYLANCE_COMMIT_TIMEOUT)
        if not isinstance(timeout, dt.timedelta):
            raise InvalidInputError(
                f"commit_timeout must be a datetime.timedelta, got {type(timeout).__name__}"
            )
        if options.pop("enable_stable_row_ids", False):
            if not isinstance(operation, Overwrite):
                raise unsupported(
                    "LanceDataset.commit(enable_stable_row_ids=True)",
                    "a dataset gets stable row ids when created or overwritten: pass a "
                    "LanceOperation.Overwrite",
                )
            upsert = {**operation.config_upsert_values, STABLE_ROW_IDS_KEY: "true"}
            operation = Overwrite(operation.fragments, operation.schema, upsert)
        refused = {"commit_lock": commit_lock, "detached": detached, **options}
        refuse_options("LanceDataset.commit", refused, REFUSED_COMMIT_OPTIONS)
        config = CommitConfig()
        if max_retries != PYLANCE_MAX_RETRIES or timeout != PYLANCE_COMMIT_TIMEOUT:
            config = CommitConfig(max_retries=max_retries, timeout=timeout.total_seconds())
        committed = Dataset.commit(base_uri, operation, read_version, storage_options, config)
        return _as_lance_dataset(committed)


#: pylance's ``create_scalar_index`` options s3ddb has no such thing for.
REFUSED_INDEX_OPTIONS: dict[str, tuple[Any, str]] = {
    "fragment_ids": (None, "s3ddb indexes every fragment"),
    "index_uuid": (None, "s3ddb chooses the index's uuid"),
    "progress_callback": (None, "s3ddb builds an index in one step"),
    "format_version": (None, "s3ddb writes its own BTREE layout"),
    "document_granularity": (None, "s3ddb has no full-text indices"),
}

#: pylance arguments of ``update``, ``get_fragments``, the clones and ``add_columns``
#: that s3ddb has no such thing for.
REFUSED_UPDATE_OPTIONS: dict[str, tuple[Any, str]] = {
    "data_storage_version": ("stable", "s3ddb writes one Parquet format"),
}
REFUSED_FRAGMENT_LIST_OPTIONS: dict[str, tuple[Any, str]] = {
    "filter": (None, "filter the rows with to_table(filter=...) instead"),
}
REFUSED_CLONE_OPTIONS: dict[str, tuple[Any, str]] = {}
REFUSED_ADD_COLUMNS_OPTIONS: dict[str, tuple[Any, str]] = {
    "reader_schema": (None, "s3ddb reads the schema the data carries"),
}


def _clone_version(reference: int | str | tuple[str | None, int | None] | None) -> int | str | None:
    """pylance's clone ``reference`` as s3ddb's version (a number or a tag).

    Raises:
        UnsupportedOperationError: a ``(branch, version)`` pair naming a branch.
    """
    if isinstance(reference, tuple):
        branch, version = reference
        if branch is not None:
            raise unsupported(f"a clone of branch {branch!r}", "s3ddb has no branches")
        return version
    return reference
