"""What the open-format writers see of one s3ddb version.

The publisher (:mod:`s3ddb.open_formats.publisher`) turns a manifest into a
:class:`TableVersion`; each format's writer (:mod:`s3ddb.open_formats.iceberg`,
:mod:`s3ddb.open_formats.delta`) turns a :class:`TableVersion` and its own state of
the version before into a :class:`Publication`: the files to write, all of them a
deterministic function of the version (two finishers of one version write the same
bytes).

Paths in a :class:`Publication` are relative to the dataset root.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from s3ddb.io.object_store import ObjectStore

__all__ = [
    "FORMATS",
    "DeletedPositions",
    "FileGroup",
    "FormatWriter",
    "Publication",
    "PublishedFile",
    "TableVersion",
]

# The formats s3ddb publishes, in the order they are written.
FORMATS = ("iceberg", "delta")


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

    def refresh_state(self, store: ObjectStore, state: Any, now_ms: int) -> Any:
        """``state`` (one this process published or loaded: trusted), brought up to
        date with what maintenance changed since in the published files (a cleanup
        that expired snapshots), before the next version is published from it; as
        cheap as the format allows (usually no request)."""
        ...

    def state_problems(self, store: ObjectStore, expected: TableVersion) -> list[str]:
        """What is wrong with the published files of ``expected.version`` and of the
        history they list (for ``verify``): each problem a sentence naming the file
        (relative to the root) and what is wrong. Empty when the format publishes
        exactly what the manifests give; bounded like :meth:`load_state`."""
        ...

    def publish(
        self, table: TableVersion, previous: Any | None, deleted: DeletedPositions
    ) -> tuple[Publication, Any]:
        """The files of ``table`` and the state after it. ``previous`` is the state
        after ``table.previous`` (None when that is None)."""
        ...
