"""Which published files cleanup deletes, and what verify reports of them.

Every file a version publishes is named after what it stands for (see
:mod:`s3ddb.open_formats.iceberg` and :mod:`s3ddb.open_formats.delta`): the version
itself, a group of files (a fragment-list chunk, or a manifest's inline fragments),
or a set of deleted rows (its s3ddb deletion file). So the published files a set of
versions needs follow from their manifests alone, as their data files do.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from s3ddb.format.fragment_list import EncodedFragments, FragmentList
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.open_formats.publisher import deletion_key, inline_group_name

__all__ = [
    "PUBLISHED_KIND",
    "PublishedNames",
    "doomed_published",
    "foreign_commits",
    "names_of",
    "published_paths",
    "tail_group_name",
]

#: The kind cleanup's statistics count deleted published files under.
PUBLISHED_KIND = "open_format_files"

_DELTA_LOG = re.compile(r"^_delta_log/(\d{20})\.(json|checkpoint\.parquet)$")


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
    listed: Iterable[ObjectMeta],
    keep: PublishedNames,
    gone: PublishedNames,
    oldest_kept: int,
    delta_enabled: bool,
) -> dict[str, tuple[str, int]]:
    """The published files among ``listed`` cleanup deletes: those only removed
    versions (``gone``) stood for, and the Delta log entries and checkpoints a reader
    of the oldest kept version no longer needs (everything before the newest
    checkpoint at or below it; nothing when there is none). Each with its kind and
    size."""
    kept_paths = keep.paths()
    gone_paths = gone.paths() - kept_paths
    doomed: dict[str, tuple[str, int]] = {}
    checkpoints = []
    log: list[tuple[int, ObjectMeta]] = []
    from s3ddb.open_formats import iceberg

    gone_groups = gone.groups - keep.groups
    for meta in listed:
        group = iceberg.group_of(meta.path)
        if meta.path in gone_paths or (group is not None and group in gone_groups):
            doomed[meta.path] = (PUBLISHED_KIND, meta.size)
            continue
        match = _DELTA_LOG.match(meta.path)
        if match:
            version = int(match.group(1))
            log.append((version, meta))
            if match.group(2) != "json" and version <= oldest_kept:
                checkpoints.append(version)
    if delta_enabled and checkpoints:
        start = max(checkpoints)
        for version, meta in log:
            if version < start:
                doomed[meta.path] = (PUBLISHED_KIND, meta.size)
    return doomed


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
