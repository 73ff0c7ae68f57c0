"""Commit handlers: how a version is claimed atomically, and how versions are found.

A commit handler owns the ``_versions/`` side of a dataset:

  * :class:`ConditionalPutCommitHandler` claims version N by writing its manifest with
    the object store's atomic put-if-not-exists — hard-link rename locally, a lock in
    memory, If-None-Match on S3 — and finds versions by listing ``_versions/``;
  * :class:`s3ddb.commit.external.ExternalStoreCommitHandler` claims version N with
    one conditional write to an external manifest store (DynamoDB) and never relies
    on S3 conditional writes.

A handler claims a set of parts (:meth:`CommitHandler.claim_parts`): a single commit
claims one (:meth:`CommitHandler.commit_manifest`), a group (``s3ddb.atomic``, see
:mod:`s3ddb.commit.group_commit`) several versions of several datasets at once, each
part through its own dataset's handler. Which datasets can be claimed together is
asked of the handlers (:meth:`CommitHandler.group_kind`,
:meth:`CommitHandler.shares_transactions_with`), never of their types.
"""

from __future__ import annotations

import abc
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from s3ddb.catalogs import update_catalogs
from s3ddb.commit.failpoints import failpoint
from s3ddb.commit.manifest_cache import MANIFESTS, CacheKey
from s3ddb.commit.own_newest import OwnNewest
from s3ddb.errors import (
    AtomicGroupError,
    CommitMechanismError,
    CommitStateUnknownError,
    CredentialsError,
    DatasetRecreatedError,
    ManifestCorruptError,
    RetryableCommitConflictError,
    StoredMetadataError,
    VersionNotFoundError,
)
from s3ddb.format import layout
from s3ddb.format.chunks import ChunkSource
from s3ddb.format.manifest import (
    CONDITIONAL_PUT,
    DYNAMODB,
    Manifest,
    new_dataset_id,
    read_committed_manifest,
    read_manifest_bytes,
    read_manifest_header,
)
from s3ddb.format.naming import NamingScheme, parse_manifest_name, parse_staged_name
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import PendingWrites, run_beside
from s3ddb.io.service_errors import resent
from s3ddb.observe import telemetry
from s3ddb.open_formats.publisher import enabled_formats, publish_version

if TYPE_CHECKING:
    from s3ddb.commit.external_versions import ExternalStoreVersions
    from s3ddb.external_store.manifest_store import ExternalManifestStore

__all__ = [
    "ClaimOutcome",
    "ClaimPart",
    "CommitHandler",
    "ConditionalPutCommitHandler",
    "ListingCommitHandler",
    "ManifestLocation",
    "VersionConflict",
    "removed_by_cleanup",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ManifestLocation:
    """Where version ``version``'s manifest is (path relative to the dataset root)."""

    version: int
    path: str
    naming: NamingScheme
    size: int | None = None
    committed_at_ms: int | None = None
    operation: str | None = None
    #: The dataset identity the external store recorded for this version (None: not
    #: recorded, or versions found by listing).
    dataset_id: str | None = None
    #: The group (``s3ddb.atomic``) the version was committed in, as the external
    #: store's row records it: its id and members (JSON, unchecked; see
    #: :func:`s3ddb.external_store.manifest_store.parse_members`).
    group_id: str | None = None
    group_members: str | None = None
    #: The commit metrics the external store's row records (JSON, unchecked; see
    #: :func:`s3ddb.format.version_metrics.parse_metrics`).
    metrics: str | None = None
    #: The SHA-256 digest of the manifest the external store's row records (checked
    #: to be 64 hex digits when the row was read; None: not recorded). The manifest
    #: read must have it, and ``size``.
    sha256: str | None = None


class VersionConflict(Exception):
    """The version is already taken by another writer (definitely not ours)."""

    def __init__(self, version: int, winner: ManifestLocation | None = None) -> None:
        super().__init__(f"version {version} is already committed")
        self.version = version
        self.winner = winner


@dataclass
class ClaimPart:
    """One version a claim of several decides: ``manifest``, built on ``base``, through
    ``handler`` (its dataset's).

    Attributes:
        handler: the commit handler of the part's dataset.
        manifest: the version to claim (its number is ``manifest.version``).
        base: the manifest of the version before (None: creating the dataset).
        writes: the part's uploads still in flight; they land before the claim.
        follows: the index of the part, in the same claim, whose version this one
            builds on (the same dataset): that part fences the chain.
    """

    handler: CommitHandler
    manifest: Manifest
    base: Manifest | None
    writes: PendingWrites
    follows: int | None = None


@dataclass
class ClaimOutcome:
    """What a claim of several parts decided. ``locations``: every part won, one
    location per part, in order. Otherwise ``moved``: the parts whose datasets moved
    (another writer holds their version); nothing was claimed."""

    locations: list[ManifestLocation] | None = None
    moved: tuple[int, ...] = ()


class CommitHandler(abc.ABC):
    """Finds versions and claims new ones for one dataset."""

    #: Short name of the commit mechanism, for logs and the CLI.
    mechanism: str = ""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        #: Set by :meth:`adopt_dataset` (``migrate-commits``): the next commit may
        #: change the mechanism the dataset records.
        self.adopting = False

    @abc.abstractmethod
    def latest_location(self, *, finalize: bool = True) -> ManifestLocation | None:
        """The newest committed version, or None if the dataset has none.

        ``finalize=False`` (writers) may return an external store's staged version
        as it is: its manifest reads the same, and :meth:`commit_manifest` makes sure
        it is final before claiming the next version.

        Raises:
            ManifestFinalizationError: (external store) the newest version cannot be
                made readable.
        """

    @abc.abstractmethod
    def location_of(self, version: int) -> ManifestLocation:
        """Where ``version`` is.

        Raises:
            VersionNotFoundError: no such version.
        """

    @abc.abstractmethod
    def list_locations(self, start: int = 1, end: int | None = None) -> list[ManifestLocation]:
        """Versions ``start..end`` (inclusive, end None = latest), ascending."""

    @abc.abstractmethod
    def commit_manifest(
        self,
        manifest: Manifest,
        data: bytes,
        pending: PendingWrites | None = None,
        previous: Manifest | None = None,
    ) -> ManifestLocation:
        """Atomically make ``data`` (the framed ``manifest``) version ``manifest.version``,
        on top of ``previous`` (the manifest of the version before; None when
        creating the dataset).

        ``pending`` holds writes (data and transaction files) the manifest refers to:
        they land before the version is claimed, in parallel with the handler's own.

        The claim is *fenced*: it applies only if ``previous``'s version still exists
        with the dataset identity ``previous`` records (invariant 0). The external
        store decides that atomically with the claim; listing handlers check it just
        before their rename or conditional put.

        Raises:
            VersionConflict: another writer holds the version (definitely not ours).
            DatasetRecreatedError: ``previous``'s version is gone or belongs to another
                dataset identity (dropped or re-created); nothing was claimed.
            CommitMechanismError: the dataset commits another way (nothing claimed).
            CommitStateUnknownError: it is unknown whether the version is ours.
        """

    # --- the dataset's identity and commit mechanism ---------------------------------

    def mechanism_record(self) -> tuple[str, str]:
        """(commit mechanism, table) this handler records in the manifests it commits
        (see :attr:`Manifest.commit_mechanism`)."""
        return (CONDITIONAL_PUT, "")

    def writer_uri(self, mechanism: str, table: str) -> str:
        """The URI that commits this dataset's objects through ``mechanism``."""
        url = self.store.url
        if mechanism != DYNAMODB:
            return url
        if url.startswith("s3://"):
            return f"s3+ddb://{url[len('s3://') :]}?ddbTableName={table}"
        return (
            f"s3+ddb://<bucket>/<prefix>?ddbTableName={table} at the dataset's own location "
            f"({url} holds a copy of its objects)"
        )

    def recorded_elsewhere(self, base: Manifest | None) -> tuple[str, str] | None:
        """(commit mechanism, table) ``base`` records when they are not this handler's
        (:meth:`writer_uri` names the URI that commits through them); None when this
        handler may commit on ``base``. Never raises."""
        if base is None or not base.commit_mechanism or self.adopting:
            return None
        theirs = (
            base.commit_mechanism,
            base.commit_table if base.commit_mechanism == DYNAMODB else "",
        )
        return None if theirs == self.mechanism_record() else theirs

    def check_writable(self, base: Manifest | None) -> None:
        """Refuse to commit on top of ``base`` if the dataset commits another way.

        Manifests written before s3ddb recorded the mechanism are writable by any.

        Raises:
            CommitMechanismError: ``base`` records another mechanism or table; the
                message names the URI to write with.
        """
        theirs = self.recorded_elsewhere(base)
        if theirs is None or base is None:
            return
        how = (
            f"through the DynamoDB table {theirs[1]!r}"
            if theirs[0] == DYNAMODB
            else "by conditional put of its manifests (no external store)"
        )
        raise CommitMechanismError(
            f"refusing to commit to {self.store.url} with {self.mechanism}: version "
            f"{base.version} says this dataset commits {how}. Write with "
            f"{self.writer_uri(*theirs)} instead (reads work either way); to move the "
            "dataset to another commit mechanism on purpose, run "
            "`s3ddb migrate-commits <new URI>` once all its writers have stopped"
        )

    def adopt_dataset(self) -> None:
        """Let this handler's next commits move the dataset to its own mechanism
        (whatever the newest version records), for ``s3ddb migrate-commits``; the
        caller makes sure no writer of the old mechanism is left."""
        self.adopting = True

    def stamp(self, manifest: Manifest, base: Manifest | None) -> Manifest:
        """``manifest`` (built on ``base``) with the dataset identity and this
        handler's commit mechanism recorded: ``base``'s identity, or a new one for a
        new dataset (or one whose versions predate identities)."""
        mechanism, table = self.mechanism_record()
        identity = base.dataset_id if base is not None and base.dataset_id else ""
        return manifest.evolve(
            dataset_id=identity or manifest.dataset_id or new_dataset_id(),
            commit_mechanism=mechanism,
            commit_table=table,
        )

    def locations_since(self, start: int, *, finalize: bool = True) -> list[ManifestLocation]:
        """Versions ``start..latest``, ascending. Empty if nothing was committed since.

        ``finalize`` as for :meth:`latest_location`: with False the newest may be an
        external store's staged version, readable as it is."""
        latest = self.latest_location(finalize=finalize)
        if latest is None or latest.version < start:
            return []
        return self.list_locations(start, latest.version)

    def newest_version(self) -> int | None:
        """The newest committed version as the commit mechanism says now (None: none),
        never finishing a staged one: one request (the DynamoDB query, or the listing
        of the committed manifests)."""
        location = self.latest_location(finalize=False)
        return None if location is None else location.version

    def presumed_latest(self) -> ManifestLocation | None:
        """The newest version as this process last knew it, if a writer may build on it
        without asking the store (None: ask with :meth:`latest_location`).

        Safe whenever it is given: the version exists, and claiming the next one fails
        if another writer got there first.
        """
        return None

    def validate(self) -> None:  # noqa: B027 - optional hook; most handlers need no check
        """Check the commit mechanism is usable before anything is written."""

    def manifest_store(self) -> tuple[ExternalManifestStore, str] | None:
        """The external manifest store that decides this dataset's versions, and the
        dataset's key in it; None when the object store decides them (its rows are
        then nothing to list, repair or delete)."""
        return None

    def external_versions(self) -> ExternalStoreVersions | None:
        """This handler as the versions an external manifest store's rows decide (for
        ``verify`` and ``sync``, which check and repair those rows); None when the
        object store decides them."""
        return None

    def dataset_key(self) -> str:
        """What identifies this handler's dataset, however its URI is spelt: the
        object store's URL, or the external store's key (its base URI)."""
        return self.store.url

    # --- claims of several parts (groups: s3ddb.atomic, s3ddb.snapshot) --------------

    def group_kind(self) -> str | None:
        """The kind of group this handler's dataset can join, named as users write
        its members' URIs (``"s3+ddb://"``, ``"memory://"``); None: none (local paths
        and ``s3://`` have no atomic step over several datasets). A group holds one
        kind, and handlers that :meth:`share transactions <shares_transactions_with>`."""
        return None

    def shares_transactions_with(self, other: CommitHandler) -> bool:
        """Whether one atomic request can claim (or read) versions of both this
        handler's dataset and ``other``'s."""
        return False

    def transactions_unavailable(self) -> str | None:
        """Why this handler cannot take part in a group's one atomic request although
        its kind can (e.g. a DynamoDB store used without transactions); None: it can."""
        return None

    def claim_actions(self, follows: bool) -> int:
        """How many actions of the one atomic request of a group this handler's claim
        of a part takes (a part that ``follows`` another is fenced by it)."""
        return 1

    def claim_parts(self, parts: Sequence[ClaimPart], group_id: str) -> ClaimOutcome:
        """Claim every part's version in one atomic step, all or none, recording the
        group ``group_id``; each ``parts[i].handler`` shares transactions with this
        one. Then each won version is finished as a single commit's is.

        Raises:
            AtomicGroupError: this handler cannot claim several versions at once.
            CommitMechanismError: a base records another commit mechanism.
            DatasetRecreatedError, RetryableCommitConflictError: a fence failed (a
                dataset was dropped or re-created, or cleanup removed a base);
                nothing was claimed.
            CommitStateUnknownError: the outcome is unknown; the files are kept.
        """
        raise AtomicGroupError(f"{self.describe()} cannot claim several versions at once")

    def latest_together(
        self, handlers: Sequence[CommitHandler]
    ) -> list[ManifestLocation | None] | None:
        """The newest version of each of ``handlers`` (this one's kind, sharing
        transactions with it) as of one instant (None: that dataset has none); None
        when something was committed meanwhile: ask again.

        Raises:
            AtomicGroupError: this handler cannot read several datasets at one instant.
        """
        raise AtomicGroupError(f"{self.describe()} cannot read several datasets at one instant")

    def naming_scheme(self) -> NamingScheme | None:
        """The dataset's naming scheme, or None if it has no versions yet."""
        latest = self.latest_location()
        return latest.naming if latest else None

    def load_manifest(self, location: ManifestLocation) -> Manifest:
        """Read and parse the manifest at ``location``.

        Raises:
            ManifestCorruptError: it is truncated, corrupt, larger than any manifest
                (refused unread), has the wrong version, or is not the manifest whose
                size and digest ``location`` records.
        """
        where = f"{self.store.url}/{location.path}"
        try:
            if location.sha256 is not None and location.size is not None:
                data = read_committed_manifest(
                    self.store, location.path, where, location.size, location.sha256
                )
            else:
                data = read_manifest_bytes(self.store, location.path, where, location.size)
        except FileNotFoundError as exc:
            raise VersionNotFoundError(
                f"version {location.version} of {self.store.url}: manifest {location.path} "
                "is missing"
            ) from exc
        manifest = Manifest.from_bytes(data, where, ChunkSource(self.store))
        if manifest.version != location.version:
            raise ManifestCorruptError(
                f"manifest {where} holds version {manifest.version}, expected {location.version}"
            )
        return manifest

    def describe(self) -> str:
        return f"{self.mechanism} on {self.store.url}"

    #: Whether finishing a version publishes it (the external-store protocol does, in
    #: steps 3-4); otherwise the committer publishes right after the claim.
    publishes_on_finish = False

    def manifest_if_kept(self, version: int) -> Manifest | None:
        """The manifest of ``version``, None if it no longer exists (cleaned up,
        dropped) or cannot be read."""
        try:
            return self.load_manifest(self.location_of(version))
        except (VersionNotFoundError, ManifestCorruptError, FileNotFoundError):
            return None

    def publish_open_formats(self, manifest: Manifest, *, update_catalog: bool = True) -> bool:
        """Publish ``manifest``'s version as the open formats it enables (see
        :mod:`s3ddb.open_formats.publisher`), catching up with the versions before it;
        returns whether it is published. Never raises: the version is committed
        whatever publication does; a failure is logged and counted, and the next
        publication catches up. Once published, and if ``update_catalog``, the
        catalog table the version names (AWS Glue) moves to it, never failing either
        (:func:`~s3ddb.catalogs.update_catalogs`); a caller that passes False calls
        that itself (after its repoint: Glue's latency does not delay it)."""
        if not enabled_formats(manifest):
            return False
        failpoint("commit.before_publication")
        try:
            publish_version(self.store, manifest, self.manifest_if_kept)
        except Exception as exc:
            telemetry.add("s3ddb.publication_failures", 1)
            log.warning(
                "could not publish version %d of %s as %s (the next publication, or "
                "Dataset.publish_open_formats, catches up): %s",
                manifest.version,
                self.store.url,
                ",".join(enabled_formats(manifest)),
                exc,
            )
            return False
        if update_catalog:
            update_catalogs(self.store, manifest, newest=self.newest_version)
        return True


class ListingCommitHandler(CommitHandler):
    """Versions found by listing ``_versions/`` (final manifest names only)."""

    def _listed(self) -> list[ManifestLocation]:
        """Every final manifest listed, by version.

        Raises:
            StoredMetadataError: two files name one version (one under each naming
                scheme): one is planted or left over, and which one the version is
                cannot be told from names.
        """
        out = []
        for meta in self.store.iter_list(f"{layout.VERSIONS_DIR}/"):
            name = meta.path.rsplit("/", 1)[-1]
            parsed = parse_manifest_name(name)
            if parsed is not None:
                out.append(ManifestLocation(parsed[0], meta.path, parsed[1], meta.size))
        out.sort(key=lambda loc: loc.version)
        for before, after in itertools.pairwise(out):
            if before.version == after.version:
                raise StoredMetadataError(
                    f"{self.store.url}: version {before.version} has two manifests, "
                    f"{before.path} and {after.path} (a dataset names its versions one "
                    "way): remove the one that is not its own"
                )
        return out

    def latest_location(self, *, finalize: bool = True) -> ManifestLocation | None:
        # V2 names sort newest first, so the first final manifest in key order is the
        # latest; staged names never parse as final ones and are skipped.
        for meta in self.store.iter_list(f"{layout.VERSIONS_DIR}/"):
            parsed = parse_manifest_name(meta.path.rsplit("/", 1)[-1])
            if parsed is None:
                continue
            if parsed[1] is NamingScheme.V2:
                return ManifestLocation(parsed[0], meta.path, parsed[1], meta.size)
            break  # V1: names do not sort by version; list them all
        else:
            return None  # no final manifest: no version (a new dataset: one listing)
        listed = self._listed()
        return listed[-1] if listed else None

    def location_of(self, version: int) -> ManifestLocation:
        if version < 1:
            raise VersionNotFoundError(f"version {version} of {self.store.url} does not exist")
        for scheme in (NamingScheme.V2, NamingScheme.V1):
            path = layout.manifest_path(version, scheme)
            try:
                meta = self.store.head(path)
            except FileNotFoundError:
                continue
            return ManifestLocation(version, path, scheme, meta.size)
        raise VersionNotFoundError(f"version {version} of {self.store.url} does not exist")

    def list_locations(self, start: int = 1, end: int | None = None) -> list[ManifestLocation]:
        return [
            loc
            for loc in self._listed()
            if loc.version >= start and (end is None or loc.version <= end)
        ]


def removed_by_cleanup(
    where: str, read: int, version: int, newest: int
) -> RetryableCommitConflictError:
    """The error for a commit of ``version`` whose fence found version ``read`` (the
    one it built on) gone while newer versions of the same dataset exist: cleanup
    removed them, and the operation must run again on version ``newest``."""
    return RetryableCommitConflictError(
        f"versions {read} and {version} of {where} were removed by cleanup after this "
        f"commit read version {read} (the newest is {newest}); re-execute the operation "
        "on the newest version"
    )


#: The newest version this process put to each dataset (by store URL): a writer that
#: is alone builds on it without listing ``_versions/`` and reading the manifest back
#: (two round trips less on S3), as long as the process's manifest cache
#: (:data:`~s3ddb.commit.manifest_cache.MANIFESTS`) holds it. The predecessor's fence
#: catches a dataset dropped, re-created or written by others meanwhile.
OWN_PUTS: OwnNewest[ManifestLocation] = OwnNewest(max_datasets=256)


def _own_cache_key(url: str, location: ManifestLocation) -> CacheKey | None:
    """The manifest cache's key of a version this process put to ``url``."""
    if location.size is None or location.committed_at_ms is None:
        return None
    # (Apart from the external store's keys, which start with the dataset's URI.)
    where = f"conditional put to {url}"
    return (where, location.version, location.path, location.size, location.committed_at_ms, "")


class ConditionalPutCommitHandler(ListingCommitHandler):
    """Claims a version with the object store's atomic put-if-not-exists.

    Locally this is rename-if-not-exists: the manifest is written under a temporary
    name and hard-linked to its final name, which fails if that name exists. In memory
    it is a locked check-and-put; on S3 a PUT with ``If-None-Match: *``.
    """

    def __init__(self, store: ObjectStore) -> None:
        super().__init__(store)
        self.mechanism = store.conditional_put_mechanism

    def _own_newest(self) -> tuple[ManifestLocation, Manifest] | None:
        """The newest version this process put here and its manifest, unless it lost a
        version here lately or its manifest is no longer cached."""
        location = OWN_PUTS.presumed(self.store.url)
        key = _own_cache_key(self.store.url, location) if location is not None else None
        manifest = MANIFESTS.get(key) if key is not None else None
        return (location, manifest) if location is not None and manifest is not None else None

    def presumed_latest(self) -> ManifestLocation | None:
        own = self._own_newest()
        return own[0] if own is not None else None

    def load_manifest(self, location: ManifestLocation) -> Manifest:
        # Only the very location presumed_latest gave (the object, not an equal one):
        # a listing of a dataset re-created by another process may find the same
        # version at the same path, and readers must read what is there.
        own = self._own_newest()
        if own is not None and own[0] is location:
            return own[1]
        return super().load_manifest(location)

    def commit_manifest(
        self,
        manifest: Manifest,
        data: bytes,
        pending: PendingWrites | None = None,
        previous: Manifest | None = None,
    ) -> ManifestLocation:
        self.check_writable(previous)
        # Asked beside the uploads (once per process and bucket), answered before
        # the put that relies on it.
        honoured = (
            None
            if self._conditional_put_settled()
            else run_beside(self.store, self._check_conditional_put)
        )
        if pending is not None:
            pending.wait()
        path = layout.manifest_path(manifest.version, manifest.naming_scheme)
        # The fence: checked just before the put, so a dataset dropped and re-created
        # between the check and the put still slips through (docs/protocol.md).
        if previous is not None:
            try:
                self._check_predecessor(manifest, previous, path, self._presumed(previous))
            except (VersionConflict, DatasetRecreatedError, RetryableCommitConflictError):
                OWN_PUTS.lost(self.store.url)  # what this process put is not the newest
                raise
        elif manifest.version == 1:
            self._check_no_external_claims()
        if honoured is not None:
            honoured.result()
        try:
            self.store.put_if_not_exists(path, data)
        except FileExistsError as exc:
            # On S3 a PUT whose response was lost is retried by the client and then
            # fails its own precondition: the object may be ours.
            if self.store.is_remote and self._holds(path, data):
                return self._location_written(manifest, path, data)
            OWN_PUTS.lost(self.store.url)
            raise VersionConflict(manifest.version) from exc
        except Exception as exc:
            if not self.store.is_remote:
                raise
            refused = isinstance(exc, (CredentialsError, PermissionError))
            if refused and resent(exc) is False:
                raise  # refused at its only attempt: nothing of it can have landed
            # The client may have resent a PUT that landed before this error (its
            # credentials expiring meanwhile included): only the object tells.
            if self._holds(path, data):
                return self._location_written(manifest, path, data)
            if refused:
                raise  # refused, and no earlier attempt landed
            raise CommitStateUnknownError(
                f"conditional PUT of {self.store.url}/{path} failed ({exc}); it may still "
                "land, so the commit's files are kept. Re-open the dataset to see whether "
                f"version {manifest.version} is this commit."
            ) from exc
        return self._location_written(manifest, path, data)

    def _conditional_put_settled(self) -> bool:
        """Whether the store is known, without a request, to refuse a second put of
        one name, or the storage options say to rely on it unasked. Never raises."""
        setting = self.store.aws.s3_conditional_writes
        return (setting or "").lower() == "trusted" or self.store.known_conditional_put() is True

    def _check_conditional_put(self) -> None:
        """The store must refuse a second put of one name
        (:meth:`ObjectStore.honours_conditional_put`; asked only when not
        :meth:`_conditional_put_settled`).

        Raises:
            CommitMechanismError: it does not: two writers could both put one
                version, and one commit would be lost; nothing was claimed.
            The store's errors, from asking.
        """
        if self.store.honours_conditional_put():
            return
        raise CommitMechanismError(
            f"refusing to commit to {self.store.url}: the object store does not honour "
            "If-None-Match (a second conditional write of a scratch object was not "
            "refused), so two writers could both commit one version and one commit would "
            "be lost without a trace. Nothing was committed. Commit through DynamoDB "
            f"instead: s3+ddb://{self.store.url.removeprefix('s3://')}?ddbTableName=<table> "
            "(create the table with `s3ddb create-table <table>`). If only one process "
            "ever writes this dataset at a time, the storage option "
            "s3_conditional_writes='trusted' commits without this check "
            "(docs/deployments.md)."
        )

    def _presumed(self, previous: Manifest) -> bool:
        """Whether ``previous`` is this process's own newest version, built on
        without listing (see :data:`OWN_PUTS`)."""
        own = self._own_newest()
        return own is not None and own[1] is previous

    def _check_predecessor(
        self, manifest: Manifest, previous: Manifest, path: str, unlisted: bool = False
    ) -> None:
        """The fence of ``manifest``, to be put at ``path`` on ``previous``: version
        ``previous.version`` must still exist with ``previous``'s identity. Returns if
        it does. A remote ``previous`` built on without listing (``unlisted``) is also
        checked to be the newest: nothing at ``path`` yet (asked beside the header, so
        no round trip more). A listing would have shown a newer version; a store that
        ignores conditional puts would otherwise let the put replace it.

        Raises:
            VersionConflict: it is gone and ``path`` is taken: another writer
                committed that version (the normal rebase applies).
            RetryableCommitConflictError: it is gone and newer versions of the same
                identity exist (cleanup removed it after others committed).
            DatasetRecreatedError: it is gone, or of another identity.
            ManifestCorruptError, and the store's errors: its header is unreadable.
        """
        before = layout.manifest_path(previous.version, previous.naming_scheme)
        where = f"{self.store.url}/{before}"
        taken = None
        if unlisted and self.store.is_remote:
            taken = run_beside(self.store, lambda: self.store.exists(path))
        try:
            header = read_manifest_header(self.store, before, where)
            if taken is not None and taken.result():
                raise VersionConflict(manifest.version)
        except FileNotFoundError:
            if self.store.exists(path):
                raise VersionConflict(manifest.version) from None
            latest = self.latest_location()
            if latest is not None and latest.version > manifest.version:
                newest = read_manifest_header(self.store, latest.path, latest.path)
                if newest.dataset_id == previous.dataset_id:
                    raise removed_by_cleanup(
                        self.store.url, previous.version, manifest.version, latest.version
                    ) from None
            raise DatasetRecreatedError(
                f"refusing to commit version {manifest.version} of {self.store.url}: "
                f"version {previous.version}, which it builds on, no longer exists (the "
                "dataset was dropped, or re-created with fewer versions). Nothing was "
                "committed; re-open the dataset."
            ) from None
        if header.dataset_id != previous.dataset_id:
            raise DatasetRecreatedError(
                f"refusing to commit version {manifest.version} of {self.store.url}: "
                f"version {previous.version} now belongs to dataset identity "
                f"{header.dataset_id or 'none'}, not {previous.dataset_id or 'none'} (the "
                "dataset was dropped and re-created). Nothing was committed; re-open the "
                "dataset."
            )

    def _check_no_external_claims(self) -> None:
        """Before creating version 1: no staged manifest may lie in ``_versions/``
        (an external store's writer is creating, or committing, this dataset).

        Raises:
            CommitMechanismError: one does.
        """
        for meta in self.store.iter_list(f"{layout.VERSIONS_DIR}/"):
            name = meta.path.rsplit("/", 1)[-1]
            if parse_staged_name(name) is not None:
                raise CommitMechanismError(
                    f"refusing to create {self.store.url} by conditional put: "
                    f"{meta.path} is a staged manifest, so this dataset commits through "
                    "an external manifest store (DynamoDB). Write with "
                    "s3+ddb://<bucket>/<prefix>?ddbTableName=<its table> instead."
                )

    def _holds(self, path: str, data: bytes) -> bool:
        """Whether the object at ``path`` is ``data``: the manifest this commit put
        (its bytes name a unique transaction file, so equal bytes mean ours).

        Raises:
            CommitStateUnknownError: it could not be read (throttled, credentials
                refused...): whether the put landed is not known, and a definite
                failure would delete the files of a version that may be committed.
        """
        try:
            return self.store.get(path) == data
        except FileNotFoundError:
            return False
        except Exception as exc:
            raise CommitStateUnknownError(
                f"the conditional PUT of {self.store.url}/{path} may have landed (its "
                f"response was lost), and reading it back failed ({exc}); the commit's "
                "files are kept. Re-open the dataset to see whether this version is the "
                "commit."
            ) from exc

    def _location_written(self, manifest: Manifest, path: str, data: bytes) -> ManifestLocation:
        """The location of ``manifest``, put at ``path`` as ``data`` (now this process's
        newest version of the dataset). Never raises."""
        location = ManifestLocation(
            manifest.version,
            path,
            manifest.naming_scheme,
            len(data),
            manifest.timestamp_nanos // 1_000_000,
            manifest.operation,
        )
        key = _own_cache_key(self.store.url, location)
        if key is not None:
            MANIFESTS.put(key, manifest)
        OWN_PUTS.won(self.store.url, location.version, location)
        return location

    # --- claims of several parts (memory:// only) --------------------------------------

    def group_kind(self) -> str | None:
        # A store that shares transactions with itself has an atomic step over several
        # objects (memory://); local files and S3 have none.
        return "memory://" if self.store.shares_transactions_with(self.store) else None

    def shares_transactions_with(self, other: CommitHandler) -> bool:
        return isinstance(other, ConditionalPutCommitHandler) and (
            self.store.shares_transactions_with(other.store)
        )

    def claim_parts(self, parts: Sequence[ClaimPart], group_id: str) -> ClaimOutcome:
        """Put every part's manifest in one atomic step of the stores, unless one of
        their names is taken; each part's fence is checked before (as a single
        commit's is, just before its put).

        Raises:
            As :meth:`CommitHandler.claim_parts`.
        """
        if self.group_kind() is None:
            return super().claim_parts(parts, group_id)
        items: list[tuple[ObjectStore, str, bytes]] = []
        moved = []
        for i, part in enumerate(parts):
            handler = part.handler
            assert isinstance(handler, ConditionalPutCommitHandler)
            handler.check_writable(part.base)
            part.writes.wait()
            path = layout.manifest_path(part.manifest.version, part.manifest.naming_scheme)
            if part.base is not None and part.follows is None:
                try:
                    handler._check_predecessor(part.manifest, part.base, path)
                except VersionConflict:
                    moved.append(i)
            items.append((handler.store, path, part.manifest.to_bytes()))
        if moved:
            return ClaimOutcome(moved=tuple(moved))
        taken = self.store.put_all_if_absent(items)
        if any(taken):
            return ClaimOutcome(moved=tuple(i for i, held in enumerate(taken) if held))
        try:
            failpoint("commit.after_external_put")
        except Exception as exc:  # decided: never a reported failure
            log.warning("group %s committed; %s", group_id, exc)
        return ClaimOutcome(
            locations=[
                self._location_written(part.manifest, path, data)
                for part, (_, path, data) in zip(parts, items)
            ]
        )

    def latest_together(
        self, handlers: Sequence[CommitHandler]
    ) -> list[ManifestLocation | None] | None:
        """The newest versions, listed while the stores accept no conditional put."""
        if self.group_kind() is None:
            return super().latest_together(handlers)
        with self.store.instant():
            return [h.latest_location(finalize=False) for h in handlers]
