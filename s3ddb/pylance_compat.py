"""Names pylance code uses, so that switching is a change of import.

``import s3ddb as lance`` then ``lance.LanceOperation.Overwrite(schema, fragments)``,
``lance.LanceDataset.commit(uri, op, read_version=...)``; docs/pylance.md lists every
pylance call and whether s3ddb supports it, differs (and why), or not.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from s3ddb.errors import InvalidInputError, UnsupportedOperationError
from s3ddb.format.fragment_list import FragmentList
from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
from s3ddb.format.schema import DatasetSchema
from s3ddb.maintenance.inspection import check_files
from s3ddb.operations import (
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Merge,
    Operation,
    Overwrite,
    Project,
    Restore,
    Rewrite,
    RewriteGroup,
    Update,
    UpdateConfig,
)
from s3ddb.reading.scanner import Scanner, require_pandas, take
from s3ddb.versions.pinned import PinnedVersion

__all__ = [
    "CLEANUP_TUNING",
    "DATA_STORAGE_VERSION",
    "DATA_STORAGE_VERSIONS",
    "IGNORED_WRITE_OPTIONS",
    "REFUSED_WRITE_OPTIONS",
    "UNSUPPORTED_FRAGMENT_MEMBERS",
    "UNSUPPORTED_MEMBERS",
    "CallableDict",
    "LanceFragment",
    "LanceOperation",
    "check_cleanup_options",
    "check_open_options",
    "check_write_options",
    "decoded_metadata",
    "metadata_changes",
    "pylance_overwrite",
    "refusal",
    "refuse_options",
    "unsupported",
]

#: cleanup_old_versions options of pylance that only tune how files are deleted.
CLEANUP_TUNING = frozenset({"delete_rate_limit", "delete_concurrency"})


def pylance_overwrite(
    new_schema: DatasetSchema | pa.Schema,
    fragments: Any,
    initial_bases: Any = None,
) -> Overwrite:
    """``Overwrite`` with pylance's parameters, in pylance's order
    (``LanceOperation.Overwrite(new_schema, fragments)``).

    Raises:
        InvalidInputError, UnsupportedOperationError: as :class:`s3ddb.operations.Overwrite`.
    """
    return Overwrite(fragments, new_schema, initial_bases=initial_bases)


class LanceOperation:
    """pylance's ``LanceOperation`` namespace: the s3ddb operations of the same names
    (``BaseOperation`` is :class:`s3ddb.operations.Operation`; ``Overwrite`` builds an
    :class:`s3ddb.operations.Overwrite` from pylance's argument order)."""

    BaseOperation = Operation
    Append = Append
    Overwrite = staticmethod(pylance_overwrite)
    Restore = Restore
    Delete = Delete
    Update = Update
    Rewrite = Rewrite
    RewriteGroup = RewriteGroup
    Merge = Merge
    Project = Project
    UpdateConfig = UpdateConfig
    CreateIndex = CreateIndex
    DataReplacement = DataReplacement
    DataReplacementGroup = DataReplacementGroup
    Clone = Clone


def check_cleanup_options(error_if_tagged_old_versions: bool, options: dict[str, Any]) -> None:
    """Refuse pylance cleanup options whose meaning s3ddb does not implement.

    Raises:
        UnsupportedOperationError: ``error_if_tagged_old_versions=True``, ``versions``,
            or an unknown option.
    """
    if error_if_tagged_old_versions:
        raise UnsupportedOperationError(
            "error_if_tagged_old_versions=True is not supported: s3ddb always keeps "
            "tagged versions and does not report them"
        )
    unknown = sorted(k for k, v in options.items() if k not in CLEANUP_TUNING and v is not None)
    if unknown:
        raise UnsupportedOperationError(f"cleanup_old_versions option(s) {unknown} not supported")


#: What ``ds.data_storage_version`` answers: s3ddb's data files are Parquet.
DATA_STORAGE_VERSION = "parquet"

#: Why s3ddb refuses the pylance members it does not have.
NO_SEARCH = "s3ddb has no vector, full-text or other search indices (only BTREE scalar indices)"
NO_BRANCHES = "s3ddb has no branches: a dataset has one line of versions"
NO_BLOBS = "s3ddb has no blob columns"
NO_ROW_IDS = "s3ddb has no stable row ids or row addresses"
NO_MEM_WAL = "s3ddb has no MemWAL"
NO_SESSIONS = "s3ddb has no sessions, caches or I/O statistics"
NO_PYARROW = (
    "s3ddb's Dataset is an Arrow stream, not a pyarrow.dataset.Dataset; "
    "use scanner(columns=, filter=)"
)
NO_INDEX_SEGMENTS = "s3ddb builds an index in one commit (create_scalar_index), not in segments"
NO_BASES = "s3ddb adds base paths only by shallow_clone (docs/clones.md)"
NO_TRANSACTIONS = "s3ddb reads transaction files only while committing"
NO_NAMESPACES = "s3ddb has no namespaces: open a dataset by its URI"
NO_LOCKS = "s3ddb decides commits itself (conditional writes or one DynamoDB write)"
PARQUET = "s3ddb writes Parquet data files, not Lance files"
LIST_FILES = "list the dataset's objects with the store, or run `s3ddb verify`"
WRITE_FRAGMENTS = "write data files with s3ddb.fragment.write_fragments"

#: pylance ``LanceDataset`` members that s3ddb does not implement, and why (the
#: reasons docs/pylance.md gives). On a Dataset such a method is a function that
#: raises UnsupportedOperationError with the reason; such a property raises it.
UNSUPPORTED_MEMBERS: dict[str, str] = {
    "add_bases": NO_BASES,
    "all_files": LIST_FILES,
    "base_paths": NO_BASES,
    "branches": NO_BRANCHES,
    "centroids": NO_SEARCH,
    "commit_batch": "commit one operation at a time with commit()",
    "commit_existing_index_segments": NO_INDEX_SEGMENTS,
    "create_branch": NO_BRANCHES,
    "create_index": NO_SEARCH,
    "create_index_uncommitted": NO_SEARCH,
    "drop_index": "an index is rebuilt with create_scalar_index(replace=True), not dropped",
    "explain_cleanup_old_versions": "cleanup_old_versions() reports what it removed",
    "filter": NO_PYARROW,
    "from_pydantic_model": "s3ddb takes Arrow data and schemas, not pydantic models",
    "get_ivf_model": NO_SEARCH,
    "get_transactions": NO_TRANSACTIONS,
    "initialize_mem_wal": NO_MEM_WAL,
    "io_stats_incremental": NO_SESSIONS,
    "io_stats_snapshot": NO_SESSIONS,
    "join": NO_PYARROW,
    "join_asof": NO_PYARROW,
    "lance_schema": (
        "the schema with field ids is ds.manifest.schema (an s3ddb.format.schema.DatasetSchema)"
    ),
    "mem_wal_index_details": NO_MEM_WAL,
    "mem_wal_writer": NO_MEM_WAL,
    "merge": "add columns from a table aligned with the rows with add_columns(table)",
    "merge_existing_index_segments": NO_INDEX_SEGMENTS,
    "merge_index_metadata": NO_INDEX_SEGMENTS,
    "migrate_manifest_paths_v2": "a dataset keeps the manifest naming it was created with",
    "new_file_session": NO_SESSIONS,
    "partition_expression": NO_PYARROW,
    "prewarm_index": NO_SESSIONS,
    "read_blob_ranges": NO_BLOBS,
    "read_blobs": NO_BLOBS,
    "read_transaction": NO_TRANSACTIONS,
    "remap_row_addrs": NO_ROW_IDS,
    "replace_schema": "change the schema with add_columns, drop_columns or alter_columns",
    "sample": "take(indices) with positions you choose",
    "session": NO_SESSIONS,
    "sort_by": NO_PYARROW,
    "sql": "query the Arrow stream with DuckDB",
    "storage_options_accessor": "storage options are fixed when a dataset is opened",
    "take_blobs": NO_BLOBS,
    "tracked_files": LIST_FILES,
}

#: pylance write arguments that only tune Lance's own file writer: accepted, ignored.
IGNORED_WRITE_OPTIONS = frozenset({"data_cache_bytes", "max_page_bytes"})

#: pylance ``write_dataset``/``write_fragments`` arguments s3ddb has no such thing
#: for: (pylance's default, why). The default (or None) is accepted.
REFUSED_WRITE_OPTIONS: dict[str, tuple[Any, str]] = {
    "max_bytes_per_file": (90 * 1024**3, "files are split by rows (max_rows_per_file)"),
    "commit_lock": (None, NO_LOCKS),
    "use_legacy_format": (False, PARQUET),
    # write_dataset takes it (popped before this check); fragments get their ids
    # when committed to a dataset that has them.
    "enable_stable_row_ids": (False, "pass enable_stable_row_ids to write_dataset"),
    "auto_cleanup_options": (None, "run cleanup_old_versions (or `s3ddb cleanup`) yourself"),
    "commit_message": (None, "pass transaction_properties to s3ddb.Dataset.commit"),
    "transaction_properties": (None, "pass transaction_properties to s3ddb.Dataset.commit"),
    "initial_bases": (None, NO_BASES),
    "target_bases": (None, NO_BASES),
    "target_all_bases": (None, NO_BASES),
    "base_store_params": (None, NO_BASES),
    "external_blob_mode": ("reference", NO_BLOBS),
    "allow_external_blob_outside_bases": (False, NO_BLOBS),
    "blob_pack_file_size_threshold": (None, NO_BLOBS),
    "namespace_client": (None, NO_NAMESPACES),
    "table_id": (None, NO_NAMESPACES),
    "session": (None, NO_SESSIONS),
}

#: The ``data_storage_version`` values s3ddb writes (as Parquet): pylance's default.
DATA_STORAGE_VERSIONS = (None, "stable")


def check_write_options(
    call: str, data_storage_version: str | None, options: dict[str, Any]
) -> None:
    """Check pylance's write arguments beyond the ones s3ddb applies.

    Raises:
        UnsupportedOperationError: a Lance file version, or an argument of
            :data:`REFUSED_WRITE_OPTIONS` with a value other than pylance's default.
        TypeError: an argument pylance does not have either.
    """
    if data_storage_version not in DATA_STORAGE_VERSIONS:
        raise unsupported(
            f"{call}(data_storage_version={data_storage_version!r})",
            f"{PARQUET}; pass None or 'stable'",
        )
    given = {k: v for k, v in options.items() if k not in IGNORED_WRITE_OPTIONS}
    refuse_options(call, given, REFUSED_WRITE_OPTIONS)


#: pylance's ``LanceDataset(...)`` and ``lance.dataset(...)`` arguments s3ddb has no
#: such thing for: (default, why).
REFUSED_OPEN_OPTIONS: dict[str, tuple[Any, str]] = {
    "commit_lock": (None, NO_LOCKS),
    "serialized_manifest": (None, "s3ddb reads manifests from the store"),
    "default_scan_options": (None, "pass scan options to each read"),
    "read_params": (None, "pass scan options to each read"),
    "session": (None, "s3ddb has no sessions"),
    "namespace_client": (None, NO_NAMESPACES),
    "table_id": (None, NO_NAMESPACES),
    "namespace_client_managed_versioning": (False, NO_NAMESPACES),
    "base_store_params": (None, "a base path is read with the dataset's storage options"),
}

#: pylance's open arguments that size its caches: accepted and ignored.
IGNORED_OPEN_OPTIONS = frozenset(
    {
        "block_size",
        "index_cache_size",
        "metadata_cache_size",
        "metadata_cache_size_bytes",
        "index_cache_size_bytes",
    }
)


def check_open_options(call: str, options: dict[str, Any]) -> None:
    """Check pylance's arguments for opening a dataset.

    Raises:
        UnsupportedOperationError: an argument of :data:`REFUSED_OPEN_OPTIONS` with a
            value other than pylance's default.
        TypeError: an argument pylance does not have either.
    """
    given = {k: v for k, v in options.items() if k not in IGNORED_OPEN_OPTIONS}
    refuse_options(call, given, REFUSED_OPEN_OPTIONS)


#: pylance ``LanceFragment`` members that s3ddb does not implement, and why.
UNSUPPORTED_FRAGMENT_MEMBERS: dict[str, str] = {
    "create": WRITE_FRAGMENTS,
    "create_from_file": WRITE_FRAGMENTS,
    "delete": "delete rows with Dataset.delete(predicate)",
    "delete_rows": "delete rows with Dataset.delete(predicate)",
    "merge": "add columns with Dataset.add_columns",
    "merge_columns": "add columns with Dataset.add_columns",
    "open_session": NO_SESSIONS,
    "partition_expression": NO_PYARROW,
    "update_columns": "change values with Dataset.update",
}

#: Members of the tables above that are properties in pylance: reading one raises
#: (the others are methods, which raise when called).
UNSUPPORTED_PROPERTIES = frozenset(
    {"branches", "lance_schema", "partition_expression", "storage_options_accessor"}
)


def unsupported(member: str, reason: str) -> UnsupportedOperationError:
    """The error for a pylance member or argument s3ddb does not implement."""
    return UnsupportedOperationError(
        f"{member} is not supported by s3ddb: {reason} (docs/pylance.md)"
    )


def refusal(obj: object, name: str, table: dict[str, str]) -> Any:
    """What looking up ``name`` on ``obj`` gives when ordinary lookup failed: for a
    pylance member in ``table``, a function raising UnsupportedOperationError (a
    property raises at once).

    Raises:
        AttributeError: ``name`` is no pylance member in ``table``.
        UnsupportedOperationError: ``name`` is a pylance property in ``table``.
    """
    reason = table.get(name)
    if reason is None:
        raise AttributeError(f"{type(obj).__name__!r} object has no attribute {name!r}")
    if name in UNSUPPORTED_PROPERTIES:
        raise unsupported(name, reason)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise unsupported(f"{name}()", reason)

    refuse.__name__ = name
    return refuse


def refuse_options(call: str, given: dict[str, Any], refused: dict[str, tuple[Any, str]]) -> None:
    """Refuse pylance arguments whose meaning s3ddb does not implement.

    ``refused`` maps an argument to (pylance's default, why s3ddb has no such
    thing); None or the default is accepted, any other value refused.

    Raises:
        UnsupportedOperationError: the first such argument, named, with the reason.
        TypeError: an argument pylance does not have either (as Python would).
    """
    for name, value in given.items():
        if name not in refused:
            raise TypeError(f"{call}() got an unexpected keyword argument {name!r}")
        default, reason = refused[name]
        if value is not None and value is not default and value != default:
            raise unsupported(f"{call}({name}={value!r})", reason)


def metadata_changes(
    current: dict[str, str], values: dict[str, str | None], replace: bool
) -> tuple[dict[str, str], list[str]]:
    """pylance's metadata update as (keys to set, keys to delete): a text value sets
    a key, None deletes it; with ``replace``, ``values`` become the whole map.

    Raises:
        InvalidInputError: ``values`` is not a dict of text keys to text or None.
    """
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in values.items()
    ):
        raise InvalidInputError(
            f"metadata updates must map text keys to text or None, got {values!r}"
        )
    upsert = {k: v for k, v in values.items() if v is not None}
    if replace:
        return upsert, sorted(k for k in current if k not in upsert)
    return upsert, sorted(k for k, v in values.items() if v is None and k in current)


def decoded_metadata(metadata: dict[bytes, bytes] | None) -> dict[str, str]:
    """An Arrow schema's metadata as text."""
    return {k.decode(): v.decode() for k, v in (metadata or {}).items()}


class CallableDict(dict[str, str]):
    """A dict that a call answers with a copy of itself: s3ddb's ``ds.config`` is a
    property and pylance's a method, so both ``ds.config["k"]`` and
    ``ds.config()["k"]`` read."""

    def __call__(self) -> dict[str, str]:
        return dict(self)


class LanceFragment:
    """pylance's ``LanceFragment``: one fragment of a pinned version, read as that
    version reads it (deleted rows removed). ``ds.get_fragment(id)`` gives one.

    pylance members s3ddb does not implement raise UnsupportedOperationError
    (:data:`UNSUPPORTED_FRAGMENT_MEMBERS`; docs/pylance.md lists each).
    """

    def __init__(self, ds: PinnedVersion, fragment: FragmentMetadata) -> None:
        self._fragment = fragment
        # A handle on a version holding only this fragment (and no index, whose
        # answers name rows of other fragments): its reads read this fragment.
        only = replace(ds.manifest, fragments=FragmentList((fragment,)), indices=())
        self._version = PinnedVersion(ds.uri, ds.handler, only, storage_options=ds.storage_options)

    if not TYPE_CHECKING:  # (mypy keeps reporting unknown attributes)

        def __getattr__(self, name: str) -> Any:
            return refusal(self, name, UNSUPPORTED_FRAGMENT_MEMBERS)

    def __repr__(self) -> str:
        return f"LanceFragment(id={self.fragment_id}, rows={self._fragment.num_rows})"

    @property
    def fragment_id(self) -> int:
        return self._fragment.id

    @property
    def metadata(self) -> FragmentMetadata:
        return self._fragment

    @property
    def physical_rows(self) -> int:
        """Rows in the data files, deleted ones included."""
        return self._fragment.physical_rows

    @property
    def num_deletions(self) -> int:
        return self._fragment.physical_rows - self._fragment.num_rows

    @property
    def schema(self) -> pa.Schema:
        return self._version.schema

    @property
    def physical_schema(self) -> pa.Schema:
        """The dataset's schema (a column no data file holds reads as nulls)."""
        return self._version.schema

    def data_files(self) -> list[DataFile]:
        return list(self._fragment.files)

    def deletion_file(self) -> str | None:
        """The deletion file's path under the dataset root, or None."""
        if self._fragment.deletion_file is None:
            return None
        return self._version.files().deletion_file(self._fragment)[1]

    def scanner(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
        **options: Any,
    ) -> Scanner:
        """A scanner of this fragment's visible rows, as ``Dataset.scanner``."""
        return Scanner(self._version, columns, filter, limit, offset, **options)

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        return self.scanner([], filter).count_rows()

    def head(self, num_rows: int) -> pa.Table:
        return self.scanner(limit=num_rows).to_table()

    def take(self, indices: Any, columns: list[str] | None = None) -> pa.Table:
        """Rows at 0-based positions over this fragment's visible rows.

        Raises:
            InvalidInputError: a position out of range, or one that is not an integer
                (floats, strings, booleans, None, nulls are refused).
        """
        return take(self._version, indices, columns)

    def to_batches(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
        **options: Any,
    ) -> Iterator[pa.RecordBatch]:
        return self.scanner(columns, filter, **options).to_batches()

    def to_table(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
        **options: Any,
    ) -> pa.Table:
        return self.scanner(columns, filter, **options).to_table()

    def to_pandas(
        self,
        columns: list[str] | None = None,
        filter: str | pc.Expression | None = None,
        **options: Any,
    ) -> Any:
        require_pandas()
        return self.to_table(columns, filter, **options).to_pandas()

    def validate(self) -> None:
        """Check this fragment's files, as :meth:`s3ddb.Dataset.validate`."""
        check_files(self._version.files(), self._version.manifest, self._version.uri)
