"""Row checks and commit identity shared by every external store backend.

A retried ``put_if_not_exists`` whose first attempt's response was lost finds the
version taken. It must then tell "taken by my own earlier attempt" (success) from
"taken by another writer" (conflict). A staged manifest path embeds a fresh UUID, so
an identical path means the same commit. If another process already finalized the
row, the path no longer carries the UUID; the row is then recognised by its final
path together with the same committer, commit time and size.
"""

from __future__ import annotations

from s3ddb.arguments import check_int
from s3ddb.errors import InvalidInputError
from s3ddb.external_store.manifest_store import (
    DATASET_ID_ATTRIBUTE,
    Fence,
    ManifestRow,
    is_staged_path,
)

__all__ = [
    "CLAIM_ATTRIBUTE",
    "CORE_ATTRIBUTES",
    "check_fence",
    "check_row",
    "fence_failure_text",
    "fence_holds",
    "final_path_of",
    "same_commit",
]

#: Attributes every row has; ``ManifestRow.extra`` may not reuse these names.
CORE_ATTRIBUTES = ("base_uri", "version", "path", "size", "committer", "committed_at")


def final_path_of(staged_path: str) -> str:
    """The final manifest path a staged path is copied to.

    ``_versions/<name>.manifest-<uuid>`` -> ``_versions/<name>.manifest``; a path that
    is not staged is returned unchanged.
    """
    if not is_staged_path(staged_path):
        return staged_path
    head, sep, _uuid = staged_path.rpartition(".manifest-")
    return head + ".manifest" if sep else staged_path


#: Row attribute naming the staged manifest a commit claimed its version with; it stays
#: when the row is finalized (its path then names the final manifest).
CLAIM_ATTRIBUTE = "claimed_with"


def same_commit(mine: ManifestRow, theirs: ManifestRow) -> bool:
    """Whether ``theirs`` (the row holding a version) is the commit ``mine`` put.

    True when the paths are equal (a staged path is unique), or when ``theirs`` is the
    finalized form of ``mine``: final path of ``mine``'s staged path, same committer,
    commit time and manifest size.
    """
    if (mine.base_uri, mine.version) != (theirs.base_uri, theirs.version):
        return False
    if theirs.path == mine.path:
        return True
    ours, held = mine.extra.get(CLAIM_ATTRIBUTE), theirs.extra.get(CLAIM_ATTRIBUTE)
    if ours and held:
        # Both rows name the staged manifest they claimed with (unique per commit):
        # threads of one process can commit in the same millisecond with manifests of
        # the same size, so committer, time and size alone cannot tell them apart.
        return ours == held
    return (
        mine.is_staged
        and theirs.path == final_path_of(mine.path)
        and theirs.committer == mine.committer
        and theirs.committed_at == mine.committed_at
        and theirs.size == mine.size
    )


def check_row(row: ManifestRow) -> None:
    """Reject a row no backend could store faithfully.

    Raises:
        InvalidInputError: empty base_uri or path, version < 1, negative size or
            commit time, or an ``extra`` attribute that is not a string or reuses a
            core attribute name.
    """
    if not row.base_uri:
        raise InvalidInputError("ManifestRow.base_uri must not be empty")
    check_int("ManifestRow.version", row.version, minimum=1)
    if not row.path:
        raise InvalidInputError("ManifestRow.path must not be empty")
    if row.size < 0 or row.committed_at < 0:
        raise InvalidInputError(
            f"ManifestRow.size and committed_at must be >= 0, got {row.size}, {row.committed_at}"
        )
    for key, value in row.extra.items():
        if key in CORE_ATTRIBUTES or not key:
            raise InvalidInputError(
                f"ManifestRow.extra may not use the attribute name {key!r} "
                f"(core attributes: {', '.join(CORE_ATTRIBUTES)})"
            )
        if not isinstance(value, str):
            raise InvalidInputError(
                f"ManifestRow.extra[{key!r}] must be a string, got {type(value).__name__}"
            )


def check_fence(row: ManifestRow, fence: Fence | None) -> None:
    """Reject a fence that does not guard ``row``'s claim.

    Raises:
        InvalidInputError: the fence is not on ``row.version - 1`` (or on a version
            below 1).
    """
    if fence is None:
        return
    if fence.version != row.version - 1 or fence.version < 1:
        raise InvalidInputError(
            f"a claim of version {row.version} must be fenced on version {row.version - 1}, "
            f"not {fence.version}"
        )


def fence_holds(fence: Fence, predecessor: ManifestRow | None) -> bool:
    """Whether ``predecessor`` (the row of ``fence.version``, None if missing)
    satisfies ``fence``."""
    if fence.absent:
        return predecessor is None
    if predecessor is None:
        return False
    held = predecessor.extra.get(DATASET_ID_ATTRIBUTE)
    return held == fence.dataset_id if fence.dataset_id else held is None


def fence_failure_text(row: ManifestRow, fence: Fence, predecessor: ManifestRow | None) -> str:
    """Why ``fence`` refused the claim of ``row`` (for FenceFailedError)."""
    claim = f"claim of version {row.version} of {row.base_uri} refused"
    if fence.absent:
        return f"{claim}: version {fence.version} already has a row (committed through the store)"
    if predecessor is None:
        return (
            f"{claim}: version {fence.version}, which it builds on, no longer exists "
            "(the dataset was dropped, or re-created with fewer versions)"
        )
    held = predecessor.extra.get(DATASET_ID_ATTRIBUTE) or "none"
    return (
        f"{claim}: version {fence.version} belongs to dataset identity {held}, not "
        f"{fence.dataset_id or 'none'} (the dataset was dropped and re-created)"
    )
