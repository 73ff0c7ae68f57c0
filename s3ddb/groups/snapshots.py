"""``s3ddb.snapshot``: several datasets pinned at one instant, never half of a group.

The datasets' commit handlers find their newest versions as of one instant
(:meth:`~s3ddb.commit.handlers.CommitHandler.latest_together`). On ``s3+ddb://``:
read the newest row of every dataset (in parallel: one round trip), then check in one
``TransactGetItems`` that no dataset has a next version. If none has, the versions
read were the newest at the instant of that read, which is serializable with every
group's ``TransactWriteItems``: a group is either wholly before it or wholly after.
If one has, something committed meanwhile: read again. A staged newest version is
finished first, as any reader does. On ``memory://`` the newest versions are listed
while memory stores accept no conditional put. Then each version is opened (its
manifest read).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterable
from typing import Any

from s3ddb.arguments import check_int
from s3ddb.commit.group_commit import check_together
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.dataset import Dataset
from s3ddb.errors import AtomicGroupError, InvalidInputError, TooMuchWriteContentionError
from s3ddb.external_store.manifest_store import MAX_GROUP_READS
from s3ddb.groups.atomic_group import check_transactions
from s3ddb.io.parallel import process_pool
from s3ddb.versions.opening import dataset_not_found, open_validated

__all__ = ["DEFAULT_SNAPSHOT_ATTEMPTS", "snapshot", "snapshot_of"]

#: How often a snapshot reads again because something committed meanwhile.
DEFAULT_SNAPSHOT_ATTEMPTS = 100


def snapshot(
    uris: Iterable[str | os.PathLike[str]],
    storage_options: dict[str, Any] | None = None,
    *,
    max_attempts: int = DEFAULT_SNAPSHOT_ATTEMPTS,
) -> dict[str, Dataset]:
    """Each dataset of ``uris`` pinned at its newest version as of one instant:
    ``{uri: Dataset}``. Never shows part of a group (``s3ddb.atomic``): all of its
    members' versions or none.

    Members are all ``s3+ddb://`` (tables behind one endpoint, region and
    credentials) or all ``memory://``, at most 100. Costs, when nothing commits
    meanwhile: one Query per dataset (in parallel), one TransactGetItems, and the
    manifest reads.

    Raises:
        AtomicGroupError: the datasets cannot be read at one instant (a local path
            or ``s3://``, mixed schemes or DynamoDB endpoints, more than 100).
        DatasetNotFoundError: nothing is committed at one of them.
        TooMuchWriteContentionError: something committed between the reads
            ``max_attempts`` times in a row.
        InvalidInputError: ``max_attempts`` is not an int >= 1, or ``uris`` is not
            an iterable of URIs (a single URI string, say).
    """
    check_int("max_attempts", max_attempts, minimum=1)
    if isinstance(uris, (str, bytes, os.PathLike)) or not isinstance(uris, Iterable):
        # A lone URI is iterable too (by character): say so rather than fail on "s".
        raise InvalidInputError(
            f"uris must be a list of dataset URIs, got {type(uris).__name__} {uris!r:.200}"
            + (": wrap a single URI in a list" if isinstance(uris, (str, os.PathLike)) else "")
        )
    texts = list(dict.fromkeys(_uri_text(u) for u in uris))
    if not texts:
        return {}
    if len(texts) > MAX_GROUP_READS:
        raise AtomicGroupError(
            f"a snapshot reads at most {MAX_GROUP_READS} datasets, got {len(texts)}"
        )
    handlers = [open_validated(t, storage_options) for t in texts]
    return snapshot_of(handlers, texts, storage_options, max_attempts=max_attempts)


def _uri_text(uri: object) -> str:
    if not isinstance(uri, (str, os.PathLike)):
        raise InvalidInputError(
            f"uris must hold dataset URIs, got {type(uri).__name__} {uri!r:.200}"
        )
    return os.fspath(uri)


def snapshot_of(
    handlers: list[CommitHandler],
    texts: list[str],
    storage_options: dict[str, Any] | None = None,
    *,
    max_attempts: int = DEFAULT_SNAPSHOT_ATTEMPTS,
) -> dict[str, Dataset]:
    """:func:`snapshot` of datasets already opened: ``handlers[i]`` serves ``texts[i]``.

    Raises:
        As :func:`snapshot`.
    """
    check_together(handlers)
    _check_one_instant(handlers, texts)
    for attempt in range(1, max_attempts + 1):
        locations = handlers[0].latest_together(handlers)
        if locations is not None:
            return _open_all(handlers, texts, _found(locations, texts), storage_options)
        time.sleep(random.uniform(0, min(0.2, 0.002 * 2**attempt)))
    raise TooMuchWriteContentionError(
        f"no consistent snapshot of {len(texts)} datasets after {max_attempts} attempts: "
        "versions kept being committed between the reads"
    )


def _check_one_instant(handlers: list[CommitHandler], texts: list[str]) -> None:
    first = handlers[0]
    for text, handler in zip(texts, handlers):
        check_transactions(handler, text, "be read in a snapshot")
        if not first.shares_transactions_with(handler):
            raise AtomicGroupError(
                f"{text} cannot be read in one snapshot with {texts[0]}: their DynamoDB "
                "tables are not behind one endpoint, region and set of credentials"
            )


def _found(locations: list[ManifestLocation | None], texts: list[str]) -> list[ManifestLocation]:
    """Every dataset's newest version.

    Raises:
        DatasetNotFoundError: a dataset has none.
    """
    out = []
    for text, location in zip(texts, locations):
        if location is None:
            raise dataset_not_found(text)
        out.append(location)
    return out


def _open_all(
    handlers: list[CommitHandler],
    texts: list[str],
    locations: list[ManifestLocation],
    storage_options: dict[str, Any] | None,
) -> dict[str, Dataset]:
    def open_one(i: int) -> Dataset:
        manifest = handlers[i].load_manifest(locations[i])
        ds = Dataset(texts[i], handlers[i], manifest, storage_options=storage_options)
        ds.forget_newest_seen()  # the newest at the snapshot's instant, maybe not now
        return ds

    pool = process_pool("snapshot")
    return dict(zip(texts, pool.map(open_one, range(len(handlers)))))
