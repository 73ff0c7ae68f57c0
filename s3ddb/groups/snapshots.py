"""``s3ddb.snapshot``: several datasets pinned at one instant, never half of a group.

On ``s3+ddb://``: read the newest row of every dataset (in parallel: one round
trip), then check in one ``TransactGetItems`` that no dataset has a next version. If
none has, the versions read were the newest at the instant of that read, which is
serializable with every group's ``TransactWriteItems``: a group is either wholly
before it or wholly after. If one has, something committed meanwhile: read again.
Then each version is opened (its manifest read; a staged newest version is
finished first, as any reader does). On ``memory://`` the newest versions are listed
while memory stores accept no conditional put.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterable
from typing import Any

from s3ddb.commit.external import ExternalStoreCommitHandler
from s3ddb.commit.group import group_kind
from s3ddb.commit.handlers import CommitHandler
from s3ddb.dataset import Dataset
from s3ddb.errors import AtomicGroupError, InvalidInputError, TooMuchWriteContentionError
from s3ddb.external_store.base import ManifestRow
from s3ddb.external_store.group import MAX_GROUP_READS, read_rows
from s3ddb.groups.atomic_group import check_transactions
from s3ddb.io.arguments import check_int
from s3ddb.io.memory_transactions import memory_instant
from s3ddb.io.parallel import process_pool
from s3ddb.versions.opening import dataset_not_found, load_version, open_validated

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
    kind = group_kind(handlers)
    if kind == "external":
        _check_one_endpoint(handlers, texts)
    for attempt in range(1, max_attempts + 1):
        versions = (
            _memory_versions(handlers, texts)
            if kind == "memory"
            else _ddb_versions(handlers, texts)
        )
        if versions is not None:
            return _open_all(handlers, texts, versions, storage_options)
        time.sleep(random.uniform(0, min(0.2, 0.002 * 2**attempt)))
    raise TooMuchWriteContentionError(
        f"no consistent snapshot of {len(texts)} datasets after {max_attempts} attempts: "
        "versions kept being committed between the reads"
    )


def _check_one_endpoint(handlers: list[CommitHandler], texts: list[str]) -> None:
    first = handlers[0]
    assert isinstance(first, ExternalStoreCommitHandler)
    for text, handler in zip(texts, handlers):
        assert isinstance(handler, ExternalStoreCommitHandler)
        check_transactions(handler, text, "be read in a snapshot")
        if not first.external.shares_transactions_with(handler.external):
            raise AtomicGroupError(
                f"{text} cannot be read in one snapshot with {texts[0]}: their DynamoDB "
                "tables are not behind one endpoint, region and set of credentials"
            )


def _memory_versions(handlers: list[CommitHandler], texts: list[str]) -> list[int]:
    with memory_instant():
        locations = [h.latest_location(finalize=False) for h in handlers]
    out = []
    for text, location in zip(texts, locations):
        if location is None:
            raise dataset_not_found(text)
        out.append(location.version)
    return out


def _ddb_versions(
    handlers: list[CommitHandler], texts: list[str]
) -> list[int | ManifestRow] | None:
    """The newest version of each dataset (its row, or its number for a dataset
    whose versions predate the store), if they were all the newest at one instant;
    None if something committed meanwhile."""
    pool = process_pool("snapshot")

    def newest(i: int) -> int | ManifestRow:
        handler = handlers[i]
        assert isinstance(handler, ExternalStoreCommitHandler)
        row = handler.external.get_latest(handler.base_uri)
        if row is not None:
            return handler.checked_row(row)
        # Versions from before the dataset used the store (listed, not in rows).
        location = handler.latest_location(finalize=False)
        if location is None:
            raise dataset_not_found(texts[i])
        return location.version

    newest_found = list(pool.map(newest, range(len(handlers))))
    keys = []
    for handler, found in zip(handlers, newest_found):
        assert isinstance(handler, ExternalStoreCommitHandler)
        version = found if isinstance(found, int) else found.version
        keys.append((handler.external, handler.base_uri, version + 1))
    if any(row is not None for row in read_rows(keys)):
        return None
    return newest_found


def _open_all(
    handlers: list[CommitHandler],
    texts: list[str],
    versions: list[int] | list[int | ManifestRow],
    storage_options: dict[str, Any] | None,
) -> dict[str, Dataset]:
    def open_one(i: int) -> Dataset:
        handler, found = handlers[i], versions[i]
        if isinstance(found, int):
            manifest = load_version(handler, found, texts[i])
        else:
            # The row read is the version's: no need to ask for it again. A staged
            # one is finished first, as any reader does.
            assert isinstance(handler, ExternalStoreCommitHandler)
            row = handler.finished(found)
            manifest = handler.load_manifest(handler.location_of_row(row))
        ds = Dataset(texts[i], handlers[i], manifest, storage_options=storage_options)
        ds.forget_newest_seen()  # the newest at the snapshot's instant, maybe not now
        return ds

    pool = process_pool("snapshot")
    return dict(zip(texts, pool.map(open_one, range(len(handlers)))))
