"""Which published files cleanup deletes.

Every file a version publishes is named after what it stands for (each format's
plug-in, :class:`~s3ddb.open_formats.model.OpenFormat`, owns its names): the version
itself, a group of files (a fragment-list chunk, or a manifest's inline fragments),
or a set of deleted rows (its s3ddb deletion file). So the published files a set of
versions needs follow from their manifests alone (:func:`names_of`), as their data
files do, and each plug-in says which of its files go (:func:`retire_published`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from s3ddb.format.fragment_list import EncodedFragments, FragmentList
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.open_formats.model import PublishedNames, Retention, TableVersion
from s3ddb.open_formats.publisher import (
    all_formats,
    deletion_key,
    enabled_formats,
    forget_states,
    inline_group_name,
    table_version,
)

__all__ = [
    "PUBLISHED_KIND",
    "names_of",
    "retire_published",
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


def retire_published(
    store: ObjectStore,
    listed: Sequence[ObjectMeta],
    keep: PublishedNames,
    gone: PublishedNames,
    kept: Collection[int],
    manifest_of: Callable[[int], Manifest],
) -> dict[str, tuple[str, int]]:
    """The published files cleanup deletes, each with its kind and size, in every
    format (whether or not the newest version still publishes it): what each plug-in
    retires (:meth:`~s3ddb.open_formats.model.OpenFormat.retire`) given ``listed``
    (cleanup's listing of the root), what the kept and the removed versions are named
    after (``keep``, ``gone``), the versions cleanup keeps (``kept``) and
    ``manifest_of``, which gives a kept version's manifest. The plug-ins first write
    what the kept versions need once those files are gone (a Delta checkpoint,
    Iceberg metadata files that stop listing removed snapshots). This process then
    forgets the states it published (they may list what was retired; the next
    publication reads the formats' files). Cleanup calls it once the removed versions
    are invisible and before it deletes their files.

    Raises:
        What reading the manifests or the store, or writing the store, raises (a
        damaged published file is not an error: it is said, and left for
        ``s3ddb open-formats URI --rebuild``).
    """
    ordered = tuple(sorted(kept))
    doomed: dict[str, tuple[str, int]] = {}
    for plugin in all_formats():
        expected = _expected_of(store, plugin.name, manifest_of)
        retired = plugin.retire(store, Retention(listed, keep, gone, ordered, expected))
        doomed.update((meta.path, (PUBLISHED_KIND, meta.size)) for meta in retired)
    forget_states()
    return doomed


def _expected_of(
    store: ObjectStore, name: str, manifest_of: Callable[[int], Manifest]
) -> Callable[[int], TableVersion | None]:
    """A kept version as format ``name`` publishes it when publication starts there
    (None: that version does not publish ``name``)."""

    def expected(version: int) -> TableVersion | None:
        manifest = manifest_of(version)
        if name not in enabled_formats(manifest):
            return None
        return table_version(store, manifest, None)

    return expected
