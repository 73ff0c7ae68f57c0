"""Opening versions: the commit handler of a URI, a version's manifest, history.

Below :mod:`s3ddb.dataset` and the operation modules, which all open versions the
same way.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from s3ddb.arguments import is_int
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.errors import (
    DatasetNotFoundError,
    InvalidInputError,
    StoredMetadataError,
    VersionNotFoundError,
)
from s3ddb.external_store.manifest_store import parse_members
from s3ddb.format.fragment_list import FragmentList
from s3ddb.format.manifest import Manifest, read_manifest_header
from s3ddb.format.naming import MAX_VERSION
from s3ddb.format.schema import DatasetSchema
from s3ddb.format.version_metrics import read_metrics
from s3ddb.io.parallel import process_pool
from s3ddb.observe import telemetry
from s3ddb.observe.commit_metrics import api_operation_of
from s3ddb.versions.connect import open_handler

__all__ = [
    "HISTORY_READ_THREADS",
    "VersionInfo",
    "dataset_not_found",
    "history",
    "load_latest",
    "load_newest",
    "load_version",
    "locate_version",
    "open_validated",
    "placeholder_manifest",
    "require_latest_location",
    "version_as_of",
]


@dataclass(frozen=True)
class VersionInfo:
    """One entry of a dataset's history.

    Also reads as pylance's version dicts: ``v["version"]``, ``v["timestamp"]``,
    ``v["metadata"]`` and ``dict(v)`` work (the timestamp is UTC-aware here).
    """

    version: int
    timestamp: dt.datetime
    operation: str
    metadata: dict[str, str]
    #: The group (``s3ddb.atomic``) this version was committed in, and the group's
    #: members as (base URI, version, DynamoDB table); None for a single commit (and
    #: for versions read without the external store).
    group_id: str | None = None
    group_members: tuple[tuple[str, int, str], ...] | None = None
    #: What the version's commit recorded about itself: attempts, versions it was
    #: rebased over, durations, rows and files added and removed (see
    #: :mod:`s3ddb.observe.commit_metrics`); empty for versions written before.
    metrics: dict[str, Any] = field(default_factory=dict)
    #: What is wrong with the version's stored metrics (``metrics`` is then empty),
    #: or None. Metrics only tell about a commit: such a version still opens.
    metrics_problem: str | None = None

    @property
    def api_operation(self) -> str | None:
        """The call that made this version (``add_columns``, ``merge_insert``,
        ``restore``...), beside ``operation``, the kind the manifest records (``Merge``,
        ``Update``...); None for versions written before s3ddb recorded it and for
        calls it does not name (``write_dataset``: ``operation`` is ``Overwrite`` or
        ``Append``)."""
        return api_operation_of(self.metrics)

    def keys(self) -> tuple[str, ...]:
        return ("version", "timestamp", "operation", "metadata")

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)


def open_validated(uri: str, storage_options: dict[str, object] | None) -> CommitHandler:
    """The commit handler for ``uri``, checked before anything is read or written
    (e.g. a missing DynamoDB table fails here)."""
    handler = open_handler(uri, storage_options)
    handler.validate()
    return handler


def placeholder_manifest() -> Manifest:
    """The "version 0" of a dataset that does not exist yet."""
    return Manifest(version=0, schema=DatasetSchema.assign(pa.schema([])), fragments=FragmentList())


def load_version(handler: CommitHandler, version: int | None, uri: str) -> Manifest:
    """The manifest of ``version`` (None: the newest).

    Raises:
        InvalidInputError: ``version`` is not an int.
        DatasetNotFoundError: nothing is committed at ``uri``.
        VersionNotFoundError: no such version.
    """
    with telemetry.span("s3ddb.open", {"s3ddb.dataset": telemetry.dataset_attribute(uri)}) as span:
        manifest = _load_version(handler, version, uri)
        span.set_attribute("s3ddb.version", manifest.version)
        return manifest


def _load_version(handler: CommitHandler, version: int | None, uri: str) -> Manifest:
    if version is None:
        return load_latest(handler, uri)
    if not is_int(version):
        raise InvalidInputError(f"version must be an int or a tag name, got {version!r}")
    if not 1 <= version <= MAX_VERSION:
        latest = require_latest_location(handler, uri)
        raise VersionNotFoundError(
            f"version {version} of {uri} does not exist (versions are numbered from 1; "
            f"latest is {latest.version})"
        )
    return handler.load_manifest(locate_version(handler, version, uri))


def locate_version(handler: CommitHandler, version: int, uri: str) -> ManifestLocation:
    """Where ``version`` of the dataset at ``uri`` (as its reader named it) is.

    Raises:
        VersionNotFoundError: there is no such version, saying the latest.
        DatasetNotFoundError: nothing is committed at ``uri``.
    """
    try:
        return handler.location_of(version)
    except VersionNotFoundError:
        pass  # raised below, without this lookup as its context
    latest = require_latest_location(handler, uri)
    raise VersionNotFoundError(
        f"version {version} of {uri} does not exist (latest is {latest.version})"
    )


def load_latest(handler: CommitHandler, uri: str, *, finalize: bool = True) -> Manifest:
    """The newest manifest (``finalize=False``: for writers, see
    :meth:`CommitHandler.latest_location`).

    Raises:
        DatasetNotFoundError: nothing is committed at ``uri``.
    """
    location = require_latest_location(handler, uri, finalize=finalize)
    return load_newest(handler, location, finalize=finalize)


def dataset_not_found(uri: str) -> DatasetNotFoundError:
    """The error saying nothing is committed at ``uri``: one message wherever a
    dataset must exist and does not."""
    return DatasetNotFoundError(f"no dataset at {uri} (no committed version)")


def require_latest_location(
    handler: CommitHandler, uri: str, *, finalize: bool = True
) -> ManifestLocation:
    """The newest version's location (``finalize``: see
    :meth:`CommitHandler.latest_location`).

    Raises:
        DatasetNotFoundError: nothing is committed at ``uri``.
    """
    location = handler.latest_location(finalize=finalize)
    if location is None:
        raise dataset_not_found(uri)
    return location


def load_newest(
    handler: CommitHandler, location: ManifestLocation, *, finalize: bool = False
) -> Manifest:
    """The manifest at ``location``, the newest version when it was listed; if cleanup
    removed it meanwhile (a newer version was committed), the newest one then."""
    for _ in range(10):
        try:
            return handler.load_manifest(location)
        except FileNotFoundError:
            newer = handler.latest_location(finalize=finalize)
            if newer is None or newer.version <= location.version:
                raise
            location = newer
    return handler.load_manifest(location)


#: Manifest headers read at once when listing history from a remote store.
HISTORY_READ_THREADS = 16


def _version_info(handler: CommitHandler, location: ManifestLocation) -> VersionInfo:
    """``location``'s entry in history: from the listing where it carries the commit
    time and operation (an external store's rows), else from the manifest's header
    (its first bytes only).

    Raises:
        FileNotFoundError: the manifest is gone (cleaned up meanwhile).
        ManifestCorruptError: its header is corrupt.
    """
    where = f"{handler.store.url}/{location.path}"
    if location.committed_at_ms is not None and location.operation is not None:
        ts_ms, op, meta = location.committed_at_ms, location.operation, {}
        metrics, problem = read_metrics(
            location.metrics or "", f"the row of version {location.version} of {handler.describe()}"
        )
    else:
        header = read_manifest_header(handler.store, location.path, where)
        ts_ms = header.timestamp_nanos // 1_000_000
        op, meta, metrics = header.operation, header.table_metadata, header.metrics
        problem = header.metrics_problem
    timestamp = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.timezone.utc)
    members = parse_members(
        location.group_id,
        location.group_members,
        f"external store row of version {location.version} of {handler.store.url}",
    )
    return VersionInfo(
        location.version,
        timestamp,
        op,
        meta,
        location.group_id if members is not None else None,
        tuple(members) if members is not None else None,
        metrics,
        problem,
    )


def history(handler: CommitHandler) -> list[VersionInfo]:
    """Every version, oldest first, with its commit time and operation. Each entry
    costs no request where the listing carries them, else one read of the manifest's
    first bytes (in parallel on remote stores).

    Raises:
        StoredMetadataError: a listed version's manifest is missing (an external
            store's row ahead of the manifests, or pointing at one never written or
            since removed); the message names the version, the manifest and the
            commit mechanism that listed it.
        ManifestCorruptError: a manifest header read is corrupt. Malformed commit
            metrics are not: that entry's ``metrics`` are empty, its
            ``metrics_problem`` says what is wrong. History reads no fragment list:
            a version's lost chunk shows only when the version is read.
    """
    locations = handler.list_locations()
    if handler.store.is_local or len(locations) < 2:
        return [_listed_version_info(handler, location) for location in locations]
    pool = process_pool("history", HISTORY_READ_THREADS)
    return list(pool.map(lambda loc: _listed_version_info(handler, loc), locations))


def _listed_version_info(handler: CommitHandler, location: ManifestLocation) -> VersionInfo:
    """:func:`_version_info` of a version the handler listed: its manifest must exist.

    Raises:
        StoredMetadataError: the manifest is missing (not a bare FileNotFoundError:
            the listing and the manifests disagree).
        ManifestCorruptError: its header is corrupt.
    """
    try:
        return _version_info(handler, location)
    except FileNotFoundError as exc:
        raise StoredMetadataError(
            f"version {location.version} is listed by {handler.describe()}, but its "
            f"manifest {handler.store.url}/{location.path} is missing (never written, or "
            "removed meanwhile)"
        ) from exc


class _Gap(Exception):
    """A version between the first and the latest is gone (cleanup)."""


def _commit_time(handler: CommitHandler, version: int) -> dt.datetime:
    try:
        return _version_info(handler, handler.location_of(version)).timestamp
    except (VersionNotFoundError, FileNotFoundError):
        raise _Gap(version) from None


def _newest_at_or_before(handler: CommitHandler, latest: int, when: dt.datetime) -> int:
    """The newest version committed at or before ``when``, 0 if none, by bisection:
    s3ddb writers never give a version an earlier commit time than its predecessor,
    so about log2(latest) versions are looked at, whatever the history's length.

    Raises:
        _Gap: a version looked at is gone.
    """
    if _commit_time(handler, latest) <= when:
        return latest
    lo, hi = 0, latest  # committed by `when`: every version <= lo; none >= hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _commit_time(handler, mid) <= when:
            lo = mid
        else:
            hi = mid
    return lo


def version_as_of(handler: CommitHandler, uri: str, asof: dt.datetime | str) -> int:
    """The newest version of ``uri`` committed at or before ``asof`` (a datetime, or
    ISO 8601 text; UTC without a time zone).

    Raises:
        InvalidInputError: ``asof`` is unreadable.
        VersionNotFoundError: nothing was committed by then.
    """
    when = asof
    if isinstance(when, str):
        try:
            when = dt.datetime.fromisoformat(when.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(
                f"asof must be a datetime or ISO 8601 text, got {asof!r}"
            ) from None
    if not isinstance(when, dt.datetime):
        raise InvalidInputError(f"asof must be a datetime or ISO 8601 text, got {asof!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    latest = handler.latest_location()
    found = 0
    if latest is not None:
        try:
            found = _newest_at_or_before(handler, latest.version, when)
        except _Gap:
            # Cleanup removed versions in between: look at the ones that are left.
            found = max((v.version for v in history(handler) if v.timestamp <= when), default=0)
    if found == 0:
        versions = history(handler)[:1]
        first = versions[0].timestamp.isoformat() if versions else "never"
        raise VersionNotFoundError(
            f"no version of {uri} was committed at or before {when.isoformat()} "
            f"(the first was committed {first})"
        )
    return found
