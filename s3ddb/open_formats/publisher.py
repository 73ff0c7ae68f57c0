"""Publishing a finished s3ddb version as Iceberg and Delta metadata.

A dataset publishes the formats its config key :data:`CONFIG_KEY` names (a comma
separated list, e.g. ``iceberg,delta``), set by ``write_dataset(open_formats=...)``
or ``Dataset.enable_open_formats``. Publication is part of finishing a version:

* on the external-store path (``s3+ddb://``) it runs between the copy of the final
  manifest (step 3) and the repoint of the row (step 4), by whoever finishes the
  version: its writer's background finalizer, or the next reader or writer that
  repairs it after a crash. A version whose row is final is published;
* on the other paths (local files, S3 with conditional writes) the writer publishes
  right after its claim; a writer that crashed in between is repaired by the next
  publication, which first publishes every version before it that is missing.

What a version publishes is a deterministic function of its manifest and of what the
version before it published (:mod:`s3ddb.open_formats.model`), so two finishers of
one version write the same bytes, and a crash leaves nothing a later finisher would
write differently. Open-format readers see a version only once its s3ddb readers can.

Publication never decides a commit: when it fails (the store refuses a write, say)
the commit stands, the failure is logged and counted (``s3ddb.publication_failures``),
and the next version's publication or ``Dataset.publish_open_formats`` catches up.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from s3ddb.errors import ManifestCorruptError, OpenFormatError, StoredMetadataError
from s3ddb.format import layout
from s3ddb.format.bases import FileResolver
from s3ddb.format.deletion import read_deleted_rows
from s3ddb.format.fragment_list import EncodedFragments, FragmentList
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.schema import DatasetSchema
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import run_all_beside
from s3ddb.io.per_process import PerProcess
from s3ddb.observe import telemetry
from s3ddb.open_formats.cast_hints import describe_casts, publishable_casts
from s3ddb.open_formats.column_names import describe_misnamed, misnamed_columns
from s3ddb.open_formats.model import (
    CUT_PATTERN,
    GROUP_METADATA_KEY,
    FileGroup,
    FormatWriter,
    OpenFormat,
    Publication,
    PublishedFile,
    TableVersion,
)

__all__ = [
    "CONFIG_KEY",
    "MAX_CATCH_UP",
    "Rebuilt",
    "all_formats",
    "by_name_formats",
    "check_publishable",
    "deletion_key",
    "enabled_formats",
    "expected_table",
    "expected_tables",
    "forget_states",
    "format_names",
    "formats_config",
    "inline_group_name",
    "parse_formats",
    "publish_version",
    "published_schema",
    "rebuild_formats",
    "table_version",
    "writer_of",
]

log = logging.getLogger(__name__)

#: The dataset config key naming the formats a dataset publishes.
CONFIG_KEY = "s3ddb.open_formats"


def all_formats() -> tuple[OpenFormat, ...]:
    """Every open format's plug-in (:data:`s3ddb.open_formats.plugins.FORMATS`, read
    at each call). The format modules are imported on first use: a process whose
    datasets publish none never loads them."""
    from s3ddb.open_formats import plugins

    return plugins.FORMATS


def format_names() -> tuple[str, ...]:
    """The names of :func:`all_formats`, in their order (how a config names them)."""
    return tuple(plugin.name for plugin in all_formats())


def writer_of(name: str) -> OpenFormat:
    """The plug-in of format ``name`` (one of :func:`format_names`).

    Raises:
        OpenFormatError: no format has that name.
    """
    for plugin in all_formats():
        if plugin.name == name:
            return plugin
    raise OpenFormatError(
        f"unknown open format {name!r}: s3ddb publishes {', '.join(format_names())}"
    )


#: How many unpublished versions before the one being published a publication
#: catches up with (oldest first); a longer gap starts publication afresh.
MAX_CATCH_UP = 100

LoadVersion = Callable[[int], Manifest | None]


def parse_formats(formats: Iterable[str] | str | None) -> tuple[str, ...]:
    """The formats named by ``formats`` (names or one comma separated string), in
    :func:`format_names` order, each once.

    Raises:
        OpenFormatError: an unknown format name.
    """
    if formats is None:
        return ()
    names = formats.split(",") if isinstance(formats, str) else list(formats)
    wanted = set()
    known: tuple[str, ...] = ()  # read once a name is given (loads the format modules)
    for name in names:
        if not isinstance(name, str):
            raise OpenFormatError(f"open formats are named by strings, got {name!r}")
        name = name.strip().lower()
        if not name:
            continue
        known = known or format_names()
        if name not in known:
            raise OpenFormatError(
                f"unknown open format {name!r}: s3ddb publishes {', '.join(known)}"
            )
        wanted.add(name)
    return tuple(f for f in known if f in wanted)


def formats_config(formats: Sequence[str]) -> str:
    """The config value for ``formats`` (already parsed)."""
    return ",".join(formats)


def enabled_formats(manifest: Manifest | None) -> tuple[str, ...]:
    """The formats ``manifest``'s version publishes (none for a value s3ddb did not
    write: a planted key never makes a reader write files)."""
    if manifest is None:
        return ()
    value = manifest.config.get(CONFIG_KEY, "")
    if not value:
        return ()
    try:
        return parse_formats(value)
    except OpenFormatError:
        return ()


def published_schema(schema: DatasetSchema) -> pa.Schema:
    """``schema``'s Arrow schema with each field's s3ddb id as ``PARQUET:field_id``
    metadata, nested fields included (as its data files carry them)."""
    return schema.arrow_with_ids


def check_publishable(manifest: Manifest, base: Manifest | None, store: ObjectStore) -> None:
    """Refuse a version its open formats could not represent exactly, before it is
    committed: a column type with no counterpart in a format, or a fragment this
    version added or changed with several data files (Iceberg and Delta list whole
    files; one row is never split across files). Only what changed since ``base``
    is looked at, so the check follows the change, not the table; when ``base``'s
    fragment list cannot be read (a lost chunk, which a restore moves away from),
    every fragment is.

    For the formats whose readers find a file's columns by name (Delta: see
    :attr:`~s3ddb.open_formats.model.OpenFormat.reads_columns_by_name`), also refuse
    data files (in ``store``) that name a column otherwise than the schema (written
    before a rename, see :mod:`s3ddb.open_formats.column_names`): every file when this
    version turns such a format on (one footer read each), else the files a rename
    since ``base`` kept.

    Raises:
        OpenFormatError: naming the format and the column, or the fragment, and the
            fix.
        DataFileError: a data file whose names are checked is missing or unreadable.
    """
    formats = enabled_formats(manifest)
    if not formats:
        return
    newly = set(formats) - set(enabled_formats(base))
    if newly or base is None or base.schema != manifest.schema:
        arrow = published_schema(manifest.schema)
        for name in formats:
            writer = writer_of(name)
            problem = writer.type_problem(arrow)
            if problem is not None:
                casts = publishable_casts(arrow, writer)
                fix = (
                    f". Fix: cast {describe_casts(casts)} in the data written (or as "
                    "alter_columns' data_type), or disable_open_formats first"
                    if casts
                    else ". Fix: leave the column out, or disable_open_formats first"
                )
                raise OpenFormatError(
                    f"cannot publish {manifest.version} as {name}: {problem}{fix}; "
                    "nothing was committed"
                )
    fragments: Iterable[FragmentMetadata] = manifest.fragments
    if base is not None and not newly:
        try:
            _removed, added, changed = base.fragments.diff(manifest.fragments)
        except ManifestCorruptError:
            pass  # base unreadable: every fragment is looked at
        else:
            wanted = set(added) | changed
            fragments = manifest.fragments.select(wanted).values() if wanted else ()
    for fragment in fragments:
        if len(fragment.files) != 1:
            raise OpenFormatError(
                f"fragment {fragment.id} has {len(fragment.files)} data files; the open "
                f"formats this dataset publishes ({', '.join(formats)}) need one file per "
                "fragment: compact the dataset first (ds.optimize.compact_files() joins "
                "them; once publication is on, s3ddb's schema changes write one file)"
            )
    by_name = [writer_of(name) for name in formats if writer_of(name).reads_columns_by_name]
    if by_name and base is not None:
        turned_on = any(plugin.name in newly for plugin in by_name)
        titles = " and ".join(plugin.title for plugin in by_name)
        _check_column_names(manifest, base, store, turned_on, titles)


def by_name_formats(formats: Iterable[str]) -> tuple[str, ...]:
    """Those of ``formats`` (names, already parsed) whose readers find a file's
    columns by name (:attr:`~s3ddb.open_formats.model.OpenFormat.reads_columns_by_name`):
    a rename writes the files again for them."""
    return tuple(name for name in formats if writer_of(name).reads_columns_by_name)


def _check_column_names(
    manifest: Manifest, base: Manifest, store: ObjectStore, turned_on: bool, titles: str
) -> None:
    """The part of :func:`check_publishable` for the formats whose readers find
    columns by name (``titles``: theirs, for the message; ``turned_on``: this version
    starts publishing one of them).

    Raises:
        OpenFormatError: a data file names a column otherwise than the schema.
    """
    schema = manifest.schema
    if turned_on:
        candidates = list(manifest.fragments)
        fix = (
            "Dataset.enable_open_formats writes such files again under the current "
            f"names before it turns {titles} on: run it (again)"
        )
    else:
        old = dict(zip(base.schema.top_level_ids(), base.schema.arrow.names, strict=True))
        renamed = {
            i for i, name in zip(schema.top_level_ids(), schema.arrow.names, strict=True)
            if old.get(i, name) != name
        }  # fmt: skip
        if not renamed:
            return
        try:
            kept: set[str] | None = {d.path for f in base.fragments for d in f.files}
        except ManifestCorruptError:
            kept = None  # base unreadable: every file holding a renamed column is read
        candidates = [
            f for f in manifest.fragments
            if any(renamed & set(d.fields) and (kept is None or d.path in kept) for d in f.files)
        ]  # fmt: skip
        fix = (
            f"the schema change was planned on a version that did not publish {titles}, "
            "and kept the files: run it again (Dataset.alter_columns) on the newest "
            "version, which writes them under the new names"
        )
    misnamed = misnamed_columns(FileResolver.for_manifest(store, manifest), candidates, schema)
    if misnamed:
        raise OpenFormatError(
            f"cannot publish version {manifest.version} as {titles}: its data files name "
            f"columns otherwise than its schema ({describe_misnamed(misnamed)}), and "
            f"{titles} readers find columns by name. Nothing was committed; {fix}"
        )


# --- from a manifest to a TableVersion ---------------------------------------------------


def _root_of(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url.rstrip("/")


def deletion_key(fragment: FragmentMetadata) -> str | None:
    """The name of ``fragment``'s deleted rows as published (None: it has none): its
    deletion file's, and its data file's, since a fragment rewritten whole (a schema
    change of a publishing dataset) keeps its deletion file while an Iceberg delete
    file names the data file it applies to."""
    d = fragment.deletion_file
    if d is None:
        return None
    stem = fragment.files[0].path.rsplit(".", 1)[0] if fragment.files else ""
    return f"{fragment.id}-{d.read_version}-{d.id}-{stem}"


def _published_file(fragment: FragmentMetadata, manifest: Manifest) -> PublishedFile:
    if len(fragment.files) != 1:
        raise OpenFormatError(
            f"version {manifest.version}: fragment {fragment.id} has {len(fragment.files)} "
            "data files; the open formats need one file per fragment"
        )
    data_file = fragment.files[0]
    path = layout.data_file_path(data_file.path)
    if data_file.base_id is not None:
        bases = {b.id: b for b in manifest.base_paths}
        base = bases.get(data_file.base_id)
        if base is None:
            raise OpenFormatError(
                f"version {manifest.version}: fragment {fragment.id} names base "
                f"{data_file.base_id}, which the manifest does not declare"
            )
        path = f"{_root_of(base.path)}/{path}"
    return PublishedFile(
        path=path,
        size=data_file.file_size_bytes,
        physical_rows=fragment.physical_rows,
        deletion_key=deletion_key(fragment),
        deleted_rows=fragment.num_deleted_rows,
    )


class _VersionFiles:
    """The fragments of one version whose files were made into :class:`PublishedFile`
    (by deletion key), and the deleted rows read for them: both formats ask for the
    same ones, and each deletion file is read once."""

    def __init__(self, store: ObjectStore, manifest: Manifest) -> None:
        self.store = store
        self.manifest = manifest
        self.by_key: dict[str, FragmentMetadata] = {}
        self.positions: dict[str, list[int]] = {}

    @functools.cached_property
    def resolver(self) -> FileResolver:
        return FileResolver.for_manifest(self.store, self.manifest)

    def file(self, fragment: FragmentMetadata) -> PublishedFile:
        published = _published_file(fragment, self.manifest)
        if published.size <= 0:
            # A fragment committed without its file's size (pylance-style callers may
            # leave it 0): readers of both formats locate the Parquet footer by it.
            store, path = self.resolver.data_file(fragment.files[0])
            published = replace(published, size=store.head(path).size)
        if published.deletion_key is not None:
            self.by_key[published.deletion_key] = fragment
        return published

    def deleted(self, file: PublishedFile) -> Sequence[int]:
        key = file.deletion_key or ""
        if key not in self.positions:
            fragment = self.by_key.get(key)
            if fragment is None:
                raise OpenFormatError(
                    f"version {self.manifest.version} published no file with deleted rows {key!r}"
                )
            self.positions[key] = list(read_deleted_rows(self.resolver, fragment))
        return self.positions[key]

    def read_deleted(self, file: PublishedFile) -> Sequence[int]:
        """``file``'s deleted positions (sorted), read again from its deletion file
        unless :meth:`deleted` holds them: for checks of what was published, which
        go through every file of a version one at a time and keep nothing (a
        version's positions together may be far larger than one file's). Called
        from the I/O pool too: it only reads ``by_key``, filled before.

        Raises:
            OpenFormatError: ``file`` is none of this version's files with deleted
                rows.
            ManifestCorruptError, StoredMetadataError: its deletion file is missing
                or corrupt (see :func:`~s3ddb.format.deletion.read_deleted_rows`).
        """
        key = file.deletion_key or ""
        cached = self.positions.get(key)
        if cached is not None:
            return cached
        fragment = self.by_key.get(key)
        if fragment is None:
            raise OpenFormatError(
                f"version {self.manifest.version} published no file with deleted rows {key!r}"
            )
        # An array of uint32 (offsets within a fragment): 4 bytes a position, not a
        # Python int's 36.
        return read_deleted_rows(self.resolver, fragment).to_array()


def _groups(files: _VersionFiles) -> tuple[FileGroup, ...]:
    """The version's files in groups: one per fragment-list chunk (named by the
    chunk), and the fragments kept in the manifest itself as one group named by a
    hash of their content."""
    groups: list[FileGroup] = []
    inline: list[Any] = []
    for segment in files.manifest.fragments.segments:
        ref = segment.stored_ref() if isinstance(segment, EncodedFragments) else None
        if ref is None:
            inline.append(segment)
            continue
        groups.append(_group(ref.name, FragmentList(segment), files))
    if inline:
        listed = FragmentList.of_segments(inline)
        groups.append(_group(inline_group_name(listed), listed, files))
    return tuple(groups)


def inline_group_name(inline: FragmentList) -> str:
    """The group name of the fragments a manifest keeps inline: ``t`` and a hash of
    their encoding (cleanup derives the same name to know which manifests to keep)."""
    return "t" + hashlib.sha256(inline.encoded()).hexdigest()[:32]


def _group(name: str, fragments: FragmentList, files: _VersionFiles) -> FileGroup:
    loaded: list[tuple[PublishedFile, ...]] = []

    def load() -> tuple[PublishedFile, ...]:
        if not loaded:  # once, whichever format asks first
            loaded.append(tuple(files.file(f) for f in fragments))
        return loaded[0]

    return FileGroup(name=name, file_count=len(fragments), load=load)


def _table_uuid(manifest: Manifest, root: str) -> str:
    # Stable across the dataset's versions: its identity when it has one (a dataset
    # re-created at the same root gets a new table), else its root.
    seed = manifest.dataset_id or root
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"s3ddb:{seed}"))


def table_version(
    store: ObjectStore, manifest: Manifest, previous: Manifest | None
) -> TableVersion:
    """What the open formats publish of ``manifest``; ``previous`` is the manifest of
    the version before it when that one is published in the same formats (its files
    then give ``added`` and ``removed``)."""
    return _table_version(_VersionFiles(store, manifest), previous)


def _cut_of(manifest: Manifest, root: str) -> str | None:
    """The group commit that made ``manifest``'s version (its cut), checked; None
    for a version committed alone.

    Raises:
        StoredMetadataError: the manifest records a group that is not a group id.
    """
    group = manifest.table_metadata.get(GROUP_METADATA_KEY)
    if group is None:
        return None
    if not isinstance(group, str) or CUT_PATTERN.fullmatch(group) is None:
        raise StoredMetadataError(
            f"{root}: version {manifest.version}'s manifest records group "
            f"{str(group)[:80]!r} ({GROUP_METADATA_KEY}), not a group id: 1 to 64 "
            "letters, digits, '_', '.', ':' or '-'"
        )
    return group


def _table_version(files: _VersionFiles, previous: Manifest | None) -> TableVersion:
    manifest = files.manifest
    root = _root_of(files.store.url)
    added: tuple[PublishedFile, ...] = ()
    removed: tuple[PublishedFile, ...] = ()
    if previous is not None:
        gone, new, changed = previous.fragments.diff(manifest.fragments)
        before = previous.fragments.select(gone | changed) if gone or changed else {}
        after = manifest.fragments.select(set(new) | changed) if new or changed else {}
        removed = tuple(_published_file(before[i], previous) for i in sorted(before))
        added = tuple(files.file(after[i]) for i in new) + tuple(
            files.file(after[i]) for i in sorted(changed)
        )
    return TableVersion(
        version=manifest.version,
        timestamp_ms=manifest.timestamp_nanos // 1_000_000,
        root=root,
        table_uuid=_table_uuid(manifest, root),
        schema=published_schema(manifest.schema),
        groups=_groups(files),
        operation=manifest.operation or "Unknown",
        previous=previous.version if previous is not None else None,
        added=added,
        removed=removed,
        cut=_cut_of(manifest, root),
        deleted=files.read_deleted,
    )


def expected_table(
    store: ObjectStore, manifest: Manifest, load_version: LoadVersion, format_name: str
) -> TableVersion:
    """``manifest``'s version as format ``format_name`` publishes it, derived from the
    manifests alone (the version before it gives ``added`` and ``removed`` when it
    publishes the format too): what a check of the published files compares them
    with."""
    return expected_tables(store, manifest, load_version)(format_name)


def expected_tables(
    store: ObjectStore, manifest: Manifest, load_version: LoadVersion
) -> Callable[[str], TableVersion]:
    """:func:`expected_table` of ``manifest`` for any format name, built once for the
    formats it is the same for (those the version before publishes too, or none of
    them), the version before loaded once. Each call raises as
    :func:`expected_table` does; what is built is held as long as the function."""
    run = _Run(store, load_version)

    def table(format_name: str) -> TableVersion:
        return run.table(manifest, _publishing_before(writer_of(format_name), run, manifest))

    return table


# --- per-process state -------------------------------------------------------------------


class _States:
    """The state each format published last, per dataset root (bounded, LRU)."""

    LIMIT = 64

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[str, str], tuple[int, str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str], version: int, dataset_id: str) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None or item[0] != version or item[1] != dataset_id:
                return None
            self._items.move_to_end(key)
            return item[2]

    def put(self, key: tuple[str, str], version: int, dataset_id: str, state: Any) -> None:
        with self._lock:
            self._items[key] = (version, dataset_id, state)
            self._items.move_to_end(key)
            while len(self._items) > self.LIMIT:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_STATE_CACHES: PerProcess[None, _States] = PerProcess("open format states")


def _states() -> _States:
    return _STATE_CACHES.get(None, _States)


def forget_states() -> None:
    """Forget what this process published (the next publication reads the formats'
    own files to know where they stand)."""
    _states().clear()


# --- publishing --------------------------------------------------------------------------


def _write(store: ObjectStore, publication: Publication) -> None:
    run_all_beside(
        store,
        (functools.partial(store.put, path, data) for path, data in publication.content),
    )
    for path, data in publication.then:
        store.put(path, data)


def publish_version(
    store: ObjectStore,
    manifest: Manifest,
    load_version: LoadVersion,
    *,
    formats: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """Publish ``manifest``'s version in the formats it enables (or ``formats``),
    first the versions before it that should be published and are not (oldest
    first, at most :data:`MAX_CATCH_UP`). ``load_version`` gives the manifest of an
    earlier version (None: gone). Returns the formats published.

    Raises:
        What writing or reading the store raised; OpenFormatError for a version the
        formats cannot represent (committed before publication was enabled, or by a
        release without these checks).
    """
    names = tuple(formats) if formats is not None else enabled_formats(manifest)
    run = _Run(store, load_version)
    for name in names:
        _publish(writer_of(name), run, manifest, 0)
    return names


class _Run:
    """One publication: what its formats share (the manifests read, each version's
    :class:`TableVersion` and deleted rows), so the second format reads nothing the
    first one did."""

    def __init__(self, store: ObjectStore, load_version: LoadVersion) -> None:
        self.store = store
        self._load_version = load_version
        self._manifests: dict[int, Manifest | None] = {}
        self._files: dict[int, _VersionFiles] = {}
        self._tables: dict[tuple[int, int | None], TableVersion] = {}

    def manifest(self, version: int) -> Manifest | None:
        if version not in self._manifests:
            self._manifests[version] = self._load_version(version)
        return self._manifests[version]

    def files(self, manifest: Manifest) -> _VersionFiles:
        if manifest.version not in self._files:
            self._files[manifest.version] = _VersionFiles(self.store, manifest)
        return self._files[manifest.version]

    def table(self, manifest: Manifest, previous: Manifest | None) -> TableVersion:
        key = (manifest.version, previous.version if previous is not None else None)
        if key not in self._tables:
            self._tables[key] = _table_version(self.files(manifest), previous)
        return self._tables[key]


def _publishing_before(writer: FormatWriter, run: _Run, manifest: Manifest) -> Manifest | None:
    """The manifest of the version before ``manifest`` when that one publishes
    ``writer``'s format too, for the same dataset (None: ``manifest`` starts it)."""
    before = manifest.version - 1
    if before < 1:
        return None
    previous = run.manifest(before)
    if (
        previous is None
        or writer.name not in enabled_formats(previous)
        or previous.dataset_id != manifest.dataset_id  # a re-created dataset
    ):
        return None
    return previous


def _checked_state(writer: FormatWriter, run: _Run, manifest: Manifest) -> Any | None:
    """``writer``'s published state after ``manifest``'s version, checked against the
    manifests (None: not published, or damaged: said so, and the next version is
    published afresh from the manifests)."""
    try:
        expected = run.table(manifest, _publishing_before(writer, run, manifest))
    except ManifestCorruptError as exc:
        # The version before cannot be read (a lost chunk, say): nothing can be built
        # on it, whatever was published for it.
        log.warning(
            "%s: version %d cannot be read (%s): version %d is published afresh",
            run.store.url, manifest.version, exc, manifest.version + 1,
        )  # fmt: skip
        return _DAMAGED
    try:
        return writer.load_state(run.store, expected)
    except StoredMetadataError as exc:  # PublishedStateError, or a decoding error
        log.warning(
            "%s: the %s state published for version %d is damaged (%s): version %d is "
            "published afresh from the manifests; `s3ddb open-formats URI --rebuild` "
            "republishes the versions kept",
            run.store.url, writer.name, manifest.version, exc, manifest.version + 1,
        )  # fmt: skip
        telemetry.add("s3ddb.damaged_publications", 1, {"s3ddb.format": writer.name})
        return _DAMAGED


def _now_ms() -> int:
    return int(time.time() * 1000)


# Marks a previous state found damaged (publication starts afresh without catching up).
_DAMAGED = object()


def _publish(writer: FormatWriter, run: _Run, manifest: Manifest, depth: int) -> Any:
    store = run.store

    key = (store.url, writer.name)
    states = _states()
    done = states.get(key, manifest.version, manifest.dataset_id)
    if done is not None:
        return done
    previous_state: Any | None = None
    before = manifest.version - 1
    previous_manifest = _publishing_before(writer, run, manifest)
    if previous_manifest is not None:
        previous_state = states.get(key, before, manifest.dataset_id)
        if previous_state is not None:
            # Kept in this process: a cleanup elsewhere may have expired some of it.
            previous_state = writer.refresh_state(
                store, previous_state, _now_ms(), lambda v: run.manifest(v) is not None
            )
        else:
            previous_state = _checked_state(writer, run, previous_manifest)
        if previous_state is _DAMAGED:
            previous_manifest, previous_state = None, None
        elif previous_state is None:
            if depth >= MAX_CATCH_UP:
                log.warning(
                    "%s: version %d is not published as %s, nor the %d before it; "
                    "publication starts again at version %d",
                    store.url, before, writer.name, MAX_CATCH_UP, manifest.version,
                )  # fmt: skip
                previous_manifest = None
            else:
                previous_state = _publish(writer, run, previous_manifest, depth + 1)
    try:
        table = run.table(manifest, previous_manifest)
    except ManifestCorruptError as exc:
        if previous_manifest is None:
            raise
        # The version before cannot be read (a lost chunk): publish this one afresh.
        log.warning(
            "%s: version %d cannot be read (%s): version %d is published afresh",
            store.url, previous_manifest.version, exc, manifest.version,
        )  # fmt: skip
        previous_manifest, previous_state = None, None
        table = run.table(manifest, None)
    publication, state = writer.publish(table, previous_state, run.files(manifest).deleted)
    with telemetry.span(
        "s3ddb.publish",
        {
            "s3ddb.dataset": telemetry.dataset_attribute(store.url),
            "s3ddb.version": manifest.version,
            "s3ddb.format": writer.name,
        },
    ):
        _write(store, publication)
    states.put(key, manifest.version, manifest.dataset_id, state)
    telemetry.add("s3ddb.publications", 1, {"s3ddb.format": writer.name})
    return state


# --- rebuilding from the manifests ---------------------------------------------------------

#: How far the store's clock may lag this one's (see :func:`rebuild_formats`).
_CLOCK_MARGIN_SECONDS = 2


@dataclass
class Rebuilt:
    """What :func:`rebuild_formats` did: the formats republished, the oldest
    (``first_version``) and newest versions republished (those between that publish
    a format, in it), and the published files it deleted (paths relative to the
    root: damaged, foreign, or left by versions no longer kept)."""

    formats: tuple[str, ...] = ()
    first_version: int = 0
    newest_version: int = 0
    deleted_files: list[str] = field(default_factory=list)


def _newest_unbroken(versions: Sequence[int]) -> list[int]:
    """The newest run of consecutive numbers among ``versions`` (sorted)."""
    first = len(versions) - 1
    while first > 0 and versions[first - 1] == versions[first] - 1:
        first -= 1
    return list(versions[first:])


def rebuild_formats(
    store: ObjectStore,
    manifest: Manifest,
    load_version: LoadVersion,
    *,
    formats: Sequence[str] | None = None,
    kept: Iterable[int] | None = None,
) -> Rebuilt:
    """Republish, from the manifests alone, ``manifest``'s version and every kept
    version before it that publishes the same formats, each as publication published
    it: a version whose predecessor publishes the format too on the state just
    written for that one, any other afresh (the first version after a stretch with
    publication disabled, after versions cleanup removed, or of the dataset). So a
    stretch of disabled versions leaves the versions before it readable, as
    publication left them. A format whose history has no gaps (Delta: a reader
    replays every commit after a checkpoint) is republished only for the newest
    unbroken run of kept versions, where cleanup starts its log
    (:func:`~s3ddb.open_formats.delta_log.expire_log`); the others (Iceberg) for
    every kept version.

    Published files none of these versions wrote (a damaged or planted file, another
    engine's commit, what versions no longer kept left) are deleted, except those
    modified less than two seconds before the rebuild began, or since (a concurrent
    writer's publication of a newer version: running it again removes what is
    left). Nothing is read from the published files: whatever state they were in,
    the result is what publication derives from the manifests.

    ``kept`` are the versions the dataset keeps (its history: tagged versions kept
    across removed ones included), at most ``manifest.version``; None: every version
    from 1 that ``load_version`` finds (one load each).

    Raises:
        What reading the manifests or writing the store raised; OpenFormatError for
        a version the formats cannot represent. A kept version older than
        ``manifest``'s whose fragments cannot be read (a lost chunk) is not
        republished (said in a warning); the one after it is published afresh.
    """
    names = tuple(formats) if formats is not None else enabled_formats(manifest)
    run = _Run(store, load_version)
    # Files modified since (a concurrent writer's publication of a newer version) are
    # not deleted: S3 listings give whole seconds, and the store's clock may be a
    # little behind this one's.
    started = math.floor(time.time()) - _CLOCK_MARGIN_SECONDS
    written: set[str] = set()
    report = Rebuilt(formats=names, newest_version=manifest.version)
    report.first_version = manifest.version
    if kept is None:
        kept = (v for v in range(1, manifest.version) if run.manifest(v) is not None)
    history = sorted({v for v in kept if 1 <= v < manifest.version} | {manifest.version})
    for name in names:
        writer = writer_of(name)
        versions = history if writer.publishes_apart else _newest_unbroken(history)
        for version in _rebuild_format(writer, run, manifest, versions, written):
            report.first_version = min(report.first_version, version)
        stale = [
            meta.path
            for prefix in writer.prefixes
            for meta in store.list(prefix)
            if meta.path not in written and (meta.modified is None or meta.modified < started)
        ]
        store.delete_many(stale)
        report.deleted_files.extend(stale)
    log.info(
        "%s: republished %s for versions %d to %d; deleted %d published files",
        store.url, ", ".join(names), report.first_version, report.newest_version,
        len(report.deleted_files),
    )  # fmt: skip
    return report


def _rebuild_format(
    writer: FormatWriter, run: _Run, newest: Manifest, versions: Sequence[int], written: set[str]
) -> Iterator[int]:
    """Republish ``versions`` (ascending, ``newest``'s last) that publish ``writer``'s
    format, for :func:`rebuild_formats`, adding the paths written to ``written``;
    yields each version republished.

    Raises:
        What reading the manifests or writing the store raised (a lost chunk only
        for ``newest``).
    """
    store = run.store
    key = (store.url, writer.name)
    states = _states()
    done: tuple[int, Any] | None = None  # the version just republished, and its state
    for version in versions:
        kept = newest if version == newest.version else run.manifest(version)
        if (
            kept is None
            or writer.name not in enabled_formats(kept)
            or kept.dataset_id != newest.dataset_id  # a re-created dataset's
        ):
            continue
        previous = _publishing_before(writer, run, kept)
        state: Any | None = None
        if previous is None or done is None or done[0] != previous.version:
            previous = None  # publication started afresh here
        else:
            state = done[1]
        try:
            try:
                table = run.table(kept, previous)
            except ManifestCorruptError:
                if previous is None:
                    raise
                # The version before cannot be read (a lost chunk): as publication
                # did, this one starts afresh.
                previous, state = None, None
                table = run.table(kept, None)
        except ManifestCorruptError as exc:
            if kept is newest:
                raise
            log.warning(
                "%s: version %d cannot be read (%s): its %s files are not republished",
                store.url, version, exc, writer.name,
            )  # fmt: skip
            done = None
            continue
        publication, state = writer.publish(table, state, run.files(kept).deleted)
        _write(store, publication)
        written.update(path for path, _ in (*publication.content, *publication.then))
        states.put(key, version, kept.dataset_id, state)
        done = (version, state)
        yield version
