"""What the open-format plug-ins see of s3ddb versions, and what a plug-in is.

The publisher (:mod:`s3ddb.open_formats.publisher`) turns a manifest into a
:class:`TableVersion`; each format's writer (:mod:`s3ddb.open_formats.iceberg`,
:mod:`s3ddb.open_formats.delta`) turns a :class:`TableVersion` and its own state of
the version before into a :class:`Publication`: the files to write, all of them a
deterministic function of the version (two finishers of one version write the same
bytes).

A format is a plug-in (:class:`OpenFormat`): besides publishing (:class:`FormatWriter`)
it owns the names of its files, what cleanup may delete of them (:class:`Retention`),
which files another engine wrote, and what it needs of schema changes. The formats
s3ddb publishes are the literal tuple :data:`s3ddb.open_formats.plugins.FORMATS`;
nothing outside this package names one.

Paths in a :class:`Publication` are relative to the dataset root.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from s3ddb.io.object_store import ObjectMeta, ObjectStore

__all__ = [
    "CUT_KEY",
    "CUT_PATTERN",
    "CUT_TAG_PREFIX",
    "GROUP_METADATA_KEY",
    "DeletedPositions",
    "FileGroup",
    "FormatWriter",
    "OpenFormat",
    "Publication",
    "PublishedFile",
    "PublishedNames",
    "Retention",
    "TableVersion",
]


#: The manifest's table-metadata key recording the group commit (``s3ddb.atomic``)
#: that made a version: set by the commit from its transaction's property of the same
#: name, never carried to a later version (see ``s3ddb.commit.build``).
GROUP_METADATA_KEY = "s3ddb.group_id"
#: The key naming a version's cut (the id of the group commit that made it) in its
#: published metadata: an Iceberg snapshot summary property and a Delta commitInfo
#: field. Versions not made by a group commit have none.
CUT_KEY = "s3ddb.cut"
#: An Iceberg tag naming a cut: this prefix, then the cut's id.
CUT_TAG_PREFIX = "s3ddb-cut-"
#: What a cut id is (s3ddb's group ids are UUIDs).
CUT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}")


@dataclass(frozen=True)
class PublishedFile:
    """One Parquet data file of a version, as an open format lists it.

    Attributes:
        path: relative to the dataset root (``data/<name>.parquet``) when the file is
            under it; an absolute URI (``s3://bucket/key``, or an absolute local path)
            when it belongs to another base (a shallow clone's source).
        size: bytes on storage.
        physical_rows: rows in the file, deleted ones included.
        deletion_key: None without deleted rows; else a stable, file-name-safe id of
            the file's set of deleted rows (``<fragment id>-<read version>-<id>``): a
            changed set has a new key.
        deleted_rows: how many rows are deleted.
    """

    path: str
    size: int
    physical_rows: int
    deletion_key: str | None = None
    deleted_rows: int = 0

    @property
    def is_relative(self) -> bool:
        return "://" not in self.path and not self.path.startswith("/")


@dataclass(frozen=True)
class FileGroup:
    """Files listed together, and together again by later versions while unchanged:
    a fragment-list chunk (``name`` is its 32-hex name) or the manifest's inline
    fragments (``name`` is ``t`` and a hash of their content). Its files are loaded
    only when asked for (:meth:`files`): a writer that already published a group by
    ``name`` need not read it."""

    name: str
    file_count: int
    load: Callable[[], tuple[PublishedFile, ...]] = field(compare=False, repr=False)

    def files(self) -> tuple[PublishedFile, ...]:
        return self.load()


# Sorted positions of deleted rows of a file with a deletion_key.
DeletedPositions = Callable[[PublishedFile], Sequence[int]]


@dataclass(frozen=True)
class TableVersion:
    """One s3ddb version, as the open formats publish it.

    Attributes:
        version: the s3ddb version (the Iceberg snapshot id and the Delta version).
        timestamp_ms: when it was committed (milliseconds since the epoch).
        root: the dataset root as an absolute URI without a trailing ``/``:
            ``s3://bucket/prefix`` or an absolute local path (``/data/ds``).
        table_uuid: a UUID stable across the dataset's versions.
        schema: the Arrow schema; every field, nested ones included, has its s3ddb
            field id as ``PARQUET:field_id`` metadata (data files carry the same ids).
        groups: every file of the version, in groups (see :class:`FileGroup`).
        operation: the s3ddb operation kind that made the version (``Append``...).
        previous: the version before it, when that one is published in the same
            format (None: this version starts publication).
        added, removed: files this version lists that ``previous`` did not, and files
            ``previous`` listed that this one does not (a file whose deleted rows
            changed is in both, with its old and its new ``deletion_key``). Empty
            when ``previous`` is None.
        cut: the id of the group commit that made this version (its manifest's
            :data:`GROUP_METADATA_KEY`, checked against :data:`CUT_PATTERN`), published
            as :data:`CUT_KEY`; None for a version committed alone.
        deleted: the deleted positions of a file of :attr:`groups` with a
            ``deletion_key``, read from s3ddb's deletion file each time it is called
            (nothing kept: a check reads one file at a time); it may be called from
            the I/O pool. What a writer checks a published delete file or deletion
            vector against before the next version lists it by reference (the
            published bytes are output; s3ddb's deletion files, which the
            checksummed fragment lists name, the truth). The publisher always sets
            it; None only for a version built by hand (tests), whose published
            deleted rows are then checked by name and size alone.
    """

    version: int
    timestamp_ms: int
    root: str
    table_uuid: str
    schema: pa.Schema
    groups: tuple[FileGroup, ...]
    operation: str
    previous: int | None = None
    added: tuple[PublishedFile, ...] = ()
    removed: tuple[PublishedFile, ...] = ()
    cut: str | None = None
    deleted: DeletedPositions | None = field(default=None, compare=False, repr=False)

    def all_files(self) -> list[PublishedFile]:
        return [f for group in self.groups for f in group.files()]


@dataclass
class Publication:
    """The files one format writes for one version.

    ``content`` is written first, side by side (files only the ``then`` files point
    to); ``then`` after it, one at a time in order (the files that make the version
    visible: the last one is the format's pointer to the newest version)."""

    content: list[tuple[str, bytes]] = field(default_factory=list)
    then: list[tuple[str, bytes]] = field(default_factory=list)


class FormatWriter(Protocol):
    """One open format's writer. Its state (``Any``) is what it needs of the version
    before to publish the next one; it is kept per process and loaded from the
    format's own files when missing."""

    name: str
    #: Whether a version can be published apart from the versions before it (Iceberg:
    #: each version has its own metadata file; not Delta: a log has no gaps). A
    #: rebuild republishes such versions kept apart (tagged, across removed ones).
    publishes_apart: bool

    def type_problem(self, schema: pa.Schema) -> str | None:
        """Why ``schema`` cannot be published exactly (naming the column), or None."""
        ...

    def load_state(self, store: ObjectStore, expected: TableVersion) -> Any | None:
        """The state after ``expected.version`` from the published files (``store`` is
        rooted at the dataset), or None when that version is not published.

        ``expected`` is that version as its manifest gives it: the published state is
        returned only once checked against it (every file, path, schema and snapshot
        the state would carry into the next publication is one s3ddb derives from the
        manifests, by name, size and the version that wrote it), in bounded time and
        memory.

        Raises:
            PublishedStateError: the published state is damaged or disagrees with
                ``expected`` (the error's ``path`` names the file).
        """
        ...

    def refresh_state(
        self, store: ObjectStore, state: Any, now_ms: int, kept: Callable[[int], bool]
    ) -> Any:
        """``state`` (one this process published or loaded: trusted), brought up to
        date with what maintenance changed since in the published files (a cleanup
        that expired snapshots), before the next version is published from it; as
        cheap as the format allows (usually no request). ``kept`` says whether s3ddb
        still keeps a version (from the manifests): the published files are output,
        so nothing is dropped from ``state`` on their word alone."""
        ...

    def state_problems(self, store: ObjectStore, expected: TableVersion) -> list[str]:
        """What is wrong with the published files of ``expected.version`` and of the
        history they list (for ``verify``): each problem a sentence naming the file
        (relative to the root) and what is wrong. Empty when the format publishes
        exactly what the manifests give; bounded like :meth:`load_state`."""
        ...

    def kept_checker(
        self, store: ObjectStore, listed: Iterable[ObjectMeta]
    ) -> Callable[[TableVersion], list[str]]:
        """For ``verify``: a check of the published files of the kept versions older
        than the newest, called once with each that publishes this format, oldest
        first, each as its manifest gives it, and returning what is wrong with that
        version's own files (its metadata file or commit, and the state they give)
        and the deleted rows it lists, compared with what s3ddb renders for it as
        :meth:`load_state` compares them, a sentence naming the file each; empty when
        all is s3ddb's, or when the version is not published in this format.
        ``listed`` is a listing of the dataset root taken before, which the check may
        use instead of listing again. Across calls the check reads the files several
        versions share once, so that checking ``V`` versions costs requests in
        proportion to ``V`` (and to the files they list), and holds about one
        version's files at a time.

        The check raises OSError when the store cannot be listed or read.
        """
        ...

    def publish(
        self, table: TableVersion, previous: Any | None, deleted: DeletedPositions
    ) -> tuple[Publication, Any]:
        """The files of ``table`` and the state after it. ``previous`` is the state
        after ``table.previous`` (None when that is None)."""
        ...


@dataclass
class PublishedNames:
    """What some versions' published files are named after, in every format: the
    versions themselves, their file groups (:attr:`FileGroup.name`) and their sets of
    deleted rows (:attr:`PublishedFile.deletion_key`). Derived from the manifests
    alone (:func:`s3ddb.open_formats.retention.names_of`)."""

    versions: set[int] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    deletion_keys: set[str] = field(default_factory=set)

    def update(self, other: PublishedNames) -> None:
        self.versions |= other.versions
        self.groups |= other.groups
        self.deletion_keys |= other.deletion_keys


@dataclass(frozen=True)
class Retention:
    """What a cleanup keeps and removes, as one format sees it (see
    :meth:`OpenFormat.retire`).

    Attributes:
        listed: cleanup's listing of the dataset root (paths relative to it).
        keep: what the versions cleanup keeps are named after.
        gone: what the versions it removes were named after.
        kept: the versions it keeps, oldest first.
        expected: a kept version as the format publishes it when publication starts
            there (``TableVersion.previous`` None), from its manifest; None when that
            version does not publish the format.
    """

    listed: Sequence[ObjectMeta]
    keep: PublishedNames
    gone: PublishedNames
    kept: tuple[int, ...]
    expected: Callable[[int], TableVersion | None]


class OpenFormat(FormatWriter, Protocol):
    """One open format as a plug-in: its writer (:class:`FormatWriter`), and everything
    else s3ddb needs to know of it, so that publication, cleanup, verify, schema
    changes and the command line ask the plug-in instead of naming the format. A new
    format is one module with a class implementing this, and one entry in
    :data:`s3ddb.open_formats.plugins.FORMATS`."""

    #: How users see it named in messages (``Iceberg``); ``name`` is the config value.
    title: str
    #: Where its published files live, relative to the dataset root, each ending in
    #: ``/``: what a rebuild replaces, and where verify looks for foreign commits.
    prefixes: tuple[str, ...]
    #: Whether its readers find a data file's columns by the names the file was
    #: written with (Delta), not by field id: then a rename writes again the files
    #: holding renamed columns, and turning the format on writes again the files
    #: written under older names (:mod:`s3ddb.open_formats.column_names`).
    reads_columns_by_name: bool

    def published_paths(self, version: int) -> list[str]:
        """The files whose presence shows ``version`` is published in this format
        (relative to the root): what verify looks for."""
        ...

    def reader_location(self, root: str, version: int) -> str:
        """Where a reader of this format finds ``version`` of the dataset at ``root``
        (its URI without a trailing ``/``), as the command line shows it."""
        ...

    def foreign_problems(self, store: ObjectStore, newest_version: int) -> list[tuple[str, str]]:
        """What another engine wrote among this format's files (``store`` rooted at the
        dataset; ``newest_version`` the newest s3ddb version): each as the file's path
        (relative to the root) and what is wrong with it; empty when every file is one
        s3ddb writes. Bounded: a
        listing of :attr:`prefixes` and reads of a few small files.

        Raises:
            OSError: the store cannot be listed or read.
        """
        ...

    def retire(self, store: ObjectStore, retention: Retention) -> list[ObjectMeta]:
        """The published files of this format cleanup deletes (among
        ``retention.listed``): those only removed versions stood for, and what the
        format's own history needs gone so that every version it still lists is a kept
        one. Before returning, rewrites or adds what the kept versions need once those
        files are gone (a checkpoint, metadata files that stop listing removed
        snapshots), each written as publication would write it. Cleanup calls it once
        the removed versions are invisible and before it deletes anything of theirs.

        A damaged published file is not an error here: it is logged and left for
        ``s3ddb open-formats URI --rebuild``.

        Raises:
            What reading the manifests (through ``retention.expected``) or reading and
            writing the store raises.
        """
        ...
