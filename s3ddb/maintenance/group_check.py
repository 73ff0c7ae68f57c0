"""``verify``'s check of group commits (``s3ddb.atomic``): every member of every group
a version of the dataset belongs to exists, in its own dataset, with the same group.

A member missing because cleanup removed old versions of its dataset (newer versions
exist) is not a problem; a member missing from a dataset whose history ends before it,
or held by another commit, is (a row deleted or overwritten by hand, or a store that
does not decide groups atomically).
"""

from __future__ import annotations

from s3ddb.commit.external_versions import ExternalStoreVersions
from s3ddb.errors import ExternalStoreTableError, StoredMetadataError
from s3ddb.external_store.manifest_store import (
    GROUP_ID_ATTRIBUTE,
    ExternalManifestStore,
    ManifestRow,
    group_members,
)
from s3ddb.maintenance.problems import ReportProblem

__all__ = ["check_groups"]


def check_groups(
    handler: ExternalStoreVersions, rows: list[ManifestRow], problem: ReportProblem
) -> None:
    """Report, through ``problem``, every group member of ``rows`` (the dataset's
    rows) that is malformed, missing, of another group, or in a table that does not
    exist or is no s3ddb table (rows are input: a table named by a row is never
    trusted to be there). Costs one GetItem per member of another dataset (each
    looked up once).

    Raises:
        S3DDBError: a member's table cannot be read (access, throttling).
    """
    stores: dict[str, ExternalManifestStore] = {}
    found: dict[tuple[str, str, int, str], str | None] = {}
    own_table = handler.external.table_name
    for row in rows:
        try:
            members = group_members(row)
        except StoredMetadataError as exc:
            problem(
                "malformed_group",
                str(row.version),
                str(exc),
                "the row was written by hand or by another tool; restore it from a backup",
                row.version,
            )
            continue
        if members is None:
            continue
        group = row.extra[GROUP_ID_ATTRIBUTE]
        for base_uri, version, table in members:
            if base_uri == row.base_uri and version == row.version:
                continue
            key = (table, base_uri, version, group)
            if key not in found:
                store = _store_for(handler, table, own_table, stores)
                found[key] = _member_state(store, base_uri, version, group)
            state = found[key]
            if state is None:
                continue
            problem(
                "missing_group_member",
                str(row.version),
                f"version {row.version} was committed in group {group} with version "
                f"{version} of {base_uri} (table {table}), which {state}: readers of both "
                "datasets may see part of that group",
                "restore the member's row (or its table) from a backup (DynamoDB "
                "point-in-time recovery)",
                row.version,
            )


def _member_state(
    store: ExternalManifestStore, base_uri: str, version: int, group: str
) -> str | None:
    """What is wrong with the member ``version`` of ``base_uri`` of ``group`` in
    ``store`` (None: nothing; its row is there, or cleanup removed it and the dataset
    has newer versions). A table that does not exist, or is no s3ddb table, is
    reported, not raised: the row naming it is input.

    Raises:
        S3DDBError: the table cannot be read (access, throttling).
    """
    try:
        other = store.get(base_uri, version)
        if other is None:
            return None if _cleaned_up(store, base_uri, version) else "has no row"
    except ExternalStoreTableError as exc:
        first_line = str(exc).split("\n", 1)[0]  # names the table (at most 255 long)
        return f"is in a table that cannot be read as an s3ddb table ({first_line})"
    if other.extra.get(GROUP_ID_ATTRIBUTE) == group:
        return None
    return "belongs to another commit"


def _store_for(
    handler: ExternalStoreVersions,
    table: str,
    own_table: str,
    stores: dict[str, ExternalManifestStore],
) -> ExternalManifestStore:
    """The store of ``table``, reached like the dataset's own (same endpoint, region
    and credentials: a group never spans others). No table named (``""``): the
    dataset's own."""
    if not table or table == own_table or not own_table:
        return handler.external
    if table not in stores:
        stores[table] = handler.external.store_for_table(table)
    return stores[table]


def _cleaned_up(store: ExternalManifestStore, base_uri: str, version: int) -> bool:
    """Whether ``version`` of ``base_uri`` is gone because cleanup removed it (the
    dataset has newer versions)."""
    latest = store.get_latest(base_uri)
    return latest is not None and latest.version > version
