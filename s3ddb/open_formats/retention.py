"""Which published files cleanup deletes, and what verify reports of them.

Every file a version publishes is named after what it stands for (see
:mod:`s3ddb.open_formats.iceberg` and :mod:`s3ddb.open_formats.delta`): the version
itself, a group of files (a fragment-list chunk, or a manifest's inline fragments),
or a set of deleted rows (its s3ddb deletion file). So the published files a set of
versions needs follow from their manifests alone, as their data files do.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from s3ddb.format.fragment_list import EncodedFragments, FragmentList
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.open_formats.model import TableVersion
from s3ddb.open_formats.publisher import (
    deletion_key,
    enabled_formats,
    forget_states,
    inline_group_name,
    table_version,
)

__all__ = [
    "PUBLISHED_KIND",
    "PublishedNames",
    "doomed_published",
    "expire_delta_log",
    "expire_iceberg_snapshots",
    "foreign_commits",
    "names_of",
    "published_paths",
    "tail_group_name",
]

#: The kind cleanup's statistics count deleted published files under.
PUBLISHED_KIND = "open_format_files"


def tail_group_name(fragments: FragmentList) -> str | None:
    """The group name of the fragments a manifest keeps inline (None: it keeps none):
    ``t`` and a hash of their encoding, as the publisher names it."""
    inline = [
        s
        for s in fragments.segments
        if not (isinstance(s, EncodedFragments) and s.stored_ref() is not None)
    ]
    if not inline:
        return None
    return inline_group_name(FragmentList.of_segments(inline))


@dataclass
class PublishedNames:
    """What some versions' published files are named after."""

    versions: set[int] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    deletion_keys: set[str] = field(default_factory=set)

    def update(self, other: PublishedNames) -> None:
        self.versions |= other.versions
        self.groups |= other.groups
        self.deletion_keys |= other.deletion_keys

    def paths(self) -> set[str]:
        """The paths of the published files these names give (both formats), group
        manifests aside (their names also carry the version that wrote them: see
        :func:`doomed_published`)."""
        from s3ddb.open_formats import delta, iceberg

        out: set[str] = set()
        for version in self.versions:
            out.update(iceberg.version_files(version))
        for key in self.deletion_keys:
            out.update(iceberg.deletion_files(key))
            out.update(delta.deletion_files(key))
        return out


def names_of(manifest: Manifest, skip_chunks: Collection[str] = ()) -> PublishedNames:
    """What ``manifest``'s published files are named after. The fragments of chunks
    named in ``skip_chunks`` are not read (their names were taken already)."""
    names = PublishedNames(versions={manifest.version})
    names.groups.update(ref.name for ref in manifest.fragments.chunk_refs())
    tail = tail_group_name(manifest.fragments)
    if tail is not None:
        names.groups.add(tail)
    for segment in manifest.fragments.segments:
        ref = segment.stored_ref() if isinstance(segment, EncodedFragments) else None
        if ref is not None and ref.name in skip_chunks:
            continue
        for fragment in FragmentList(segment):
            key = deletion_key(fragment)
            if key is not None:
                names.deletion_keys.add(key)
    return names


def doomed_published(
    listed: Iterable[ObjectMeta], keep: PublishedNames, gone: PublishedNames
) -> dict[str, tuple[str, int]]:
    """The published files among ``listed`` cleanup deletes: those only removed
    versions (``gone``) stood for, each with its kind and size. (The Delta log before
    the oldest kept version is :func:`expire_delta_log`'s.)"""
    kept_paths = keep.paths()
    gone_paths = gone.paths() - kept_paths
    doomed: dict[str, tuple[str, int]] = {}
    from s3ddb.open_formats import iceberg

    gone_groups = gone.groups - keep.groups
    for meta in listed:
        group = iceberg.group_of(meta.path)
        if meta.path in gone_paths or (group is not None and group in gone_groups):
            doomed[meta.path] = (PUBLISHED_KIND, meta.size)
    return doomed


def expire_delta_log(
    store: ObjectStore,
    listed: Iterable[ObjectMeta],
    kept: Sequence[int],
    manifest_of: Callable[[int], Manifest],
) -> dict[str, tuple[str, int]]:
    """The Delta log files cleanup deletes once the versions it removes are gone, each
    with its kind and size; ``listed`` is cleanup's listing of the root, ``kept`` the
    versions it keeps and ``manifest_of`` gives a kept version's manifest.

    A Delta log has no gaps: a reader that reaches a version replays every commit
    after the checkpoint it starts from. So the log starts at the oldest version of
    the newest unbroken run of kept versions that publishes Delta (a tagged version
    kept apart, before a removed one, stays readable in s3ddb and Iceberg only): a
    checkpoint is written there if there is none, its state checked against the
    manifests, and ``_last_checkpoint`` keeps naming a checkpoint that stays (see
    :func:`~s3ddb.open_formats.delta_log.expire_log`). When no version of that run
    publishes Delta, the log before the run goes.

    Raises:
        What reading the manifests or the store raises (a damaged log is not an
        error: it is said, and left for ``s3ddb open-formats URI --rebuild``).
    """
    from s3ddb.open_formats.delta_log import expire_log, list_log

    listing = list_log(listed)
    if not kept or not (listing.commits or listing.checkpoints or listing.last_checkpoint):
        return {}
    ordered = sorted(kept)
    run = len(ordered) - 1
    while run > 0 and ordered[run - 1] == ordered[run] - 1:
        run -= 1
    oldest = None
    for version in ordered[run:]:
        if version not in listing.commits:
            continue  # not published in Delta
        manifest = manifest_of(version)
        if "delta" in enabled_formats(manifest):
            oldest = table_version(store, manifest, None)
            break
    doomed = expire_log(store, listing, oldest, ordered[run])
    return {meta.path: (PUBLISHED_KIND, meta.size) for meta in doomed}


def expire_iceberg_snapshots(
    store: ObjectStore,
    listed: Iterable[ObjectMeta],
    kept: Collection[int],
    manifest_of: Callable[[int], Manifest],
) -> list[str]:
    """Rewrite the Iceberg metadata files of the versions cleanup keeps (``kept``) that
    list snapshots of versions it removes, without them: every snapshot a kept
    metadata file lists stays readable (see
    :func:`~s3ddb.open_formats.iceberg.expire_snapshots`). ``listed`` is cleanup's
    listing of the root, ``manifest_of`` gives a kept version's manifest. Cleanup
    calls it once the removed versions are invisible and before it deletes their
    files. It also forgets the states this process published (they may list what
    was expired; the next publication reads the rewritten files). Returns the paths
    rewritten.

    Raises:
        What reading the manifests or writing the store raises (a damaged metadata
        file is not an error: it is said, and left for ``s3ddb open-formats URI
        --rebuild``).
    """
    from s3ddb.open_formats import iceberg

    paths = {meta.path for meta in listed}
    published = [v for v in kept if iceberg.version_files(v)[0] in paths]

    def expected_of(version: int) -> TableVersion | None:
        manifest = manifest_of(version)
        if "iceberg" not in enabled_formats(manifest):
            return None
        return table_version(store, manifest, None)

    rewritten = iceberg.expire_snapshots(store, published, kept, expected_of)
    forget_states()
    return rewritten


def published_paths(format_name: str, version: int) -> list[str]:
    """The files that show ``version`` is published in ``format_name``: its Iceberg
    metadata file, or its Delta commit."""
    from s3ddb.open_formats import delta, iceberg

    if format_name == "iceberg":
        return iceberg.version_files(version)[:1]
    return delta.version_files(version)


def foreign_commits(store: ObjectStore, newest_version: int) -> list[str]:
    """Commits another engine made to the published tables (``metadata/``,
    ``_delta_log/``): s3ddb is their only writer."""
    from s3ddb.open_formats import delta, iceberg

    return [
        *iceberg.foreign_problems(store, newest_version),
        *delta.foreign_problems(store, newest_version),
    ]
