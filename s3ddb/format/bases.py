"""Base paths: other dataset roots whose files a manifest references (shallow clones).

A manifest's ``base_paths`` are the only way it can name a file outside its own
root. A data or deletion file with ``base_id`` N lives under base N's root, with the
same layout (``data/<name>``, ``_deletions/<name>``); ``base_id`` None means this
dataset's root. s3ddb only ever *reads* through a base: every file it writes or
deletes is under the dataset's own root.

:class:`FileResolver` is the one place that turns a data or deletion file into an
(object store, path) pair; every reader goes through it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from s3ddb.arguments import is_int
from s3ddb.errors import InvalidURIError, ManifestCorruptError, PathOutsideDatasetError
from s3ddb.format import layout
from s3ddb.format._proto import manifest_pb2 as pb
from s3ddb.format.fragment_metadata import DataFile, FragmentMetadata
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.uri import parse_uri

if TYPE_CHECKING:
    from s3ddb.format.manifest import Manifest

__all__ = [
    "ALLOW_CROSS_STORE",
    "BASE_SCHEMES",
    "BasePath",
    "FileResolver",
    "Files",
    "as_resolver",
    "base_path_problem",
    "check_base_paths",
    "cross_store_allowed",
    "file_base_ids",
    "fragment_files",
]

#: Schemes a base path may use: the object stores s3ddb reads (an ``s3+ddb`` dataset
#: is a base through its plain ``s3://`` root: reading files needs no DynamoDB).
BASE_SCHEMES = ("file", "memory", "s3")

#: The storage option that lets a dataset read base paths on another kind of store
#: than its own (a bucket dataset reading ``file://``, a local one ``s3://``...).
ALLOW_CROSS_STORE = "allow_cross_store_base_paths"


def cross_store_allowed(storage_options: dict[str, Any]) -> bool:
    """Whether ``storage_options`` set :data:`ALLOW_CROSS_STORE` to true (its value
    is checked to be a boolean where the options are, by ``AwsConfig``)."""
    value = next((v for k, v in storage_options.items() if k.lower() == ALLOW_CROSS_STORE), "")
    return str(value).lower() in ("true", "1", "yes")


def base_path_problem(path: str) -> str | None:
    """Why ``path`` is not an acceptable base root URI, or None if it is."""
    if not isinstance(path, str) or not path:
        return "it is empty"
    if any(ord(c) < 32 or ord(c) == 127 for c in path) or "\\" in path:
        return "it contains control characters or backslashes"
    if "://" not in path:
        return "it is not an absolute URI (scheme://...)"
    parts = urlsplit(path)
    if parts.scheme not in BASE_SCHEMES:
        return f"scheme {parts.scheme!r} is not one of {', '.join(BASE_SCHEMES)}"
    if parts.query or parts.fragment or "?" in path or "#" in path:
        return "it has a query or fragment"
    rest = path.split("://", 1)[1].rstrip("/")
    segments = rest.split("/")
    if parts.scheme == "file":
        if not rest.startswith("/"):
            return "a file:// base must be an absolute path (file:///...)"
        segments = segments[1:]
    if any(s in ("", ".", "..") for s in segments):
        return "it has an empty, '.' or '..' segment"
    try:
        parse_uri(path)
    except InvalidURIError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class BasePath:
    """One base: another root whose files this manifest references.

    Attributes:
        id: the id files refer to (``DataFile.base_id``), unique, >= 1.
        path: the base's root, an absolute ``file://``, ``memory://`` or ``s3://``
            URI without ``.``/``..`` segments.
        name: an optional label (e.g. the tag a shallow clone was made from).
        is_dataset_root: the path is a dataset root (files under ``data/``,
            ``_deletions/``), as every base s3ddb creates.

    Raises:
        PathOutsideDatasetError: a bad id or path (the message says which and why).
    """

    id: int
    path: str
    name: str | None = None
    is_dataset_root: bool = True

    def __post_init__(self) -> None:
        if not is_int(self.id) or self.id < 1:
            raise PathOutsideDatasetError(f"refusing base path id {self.id!r}: ids are >= 1")
        problem = base_path_problem(self.path)
        if problem is not None:
            raise PathOutsideDatasetError(
                f"refusing base path {self.id} {self.path!r}: {problem}; a base must be "
                f"the absolute root URI of another dataset"
            )
        object.__setattr__(self, "path", self.path.rstrip("/"))
        if not self.is_dataset_root:
            raise PathOutsideDatasetError(
                f"refusing base path {self.id} {self.path!r}: only dataset roots are "
                "supported as bases"
            )

    def to_pb(self) -> pb.BasePath:
        return pb.BasePath(
            id=self.id, path=self.path, name=self.name or "", is_dataset_root=self.is_dataset_root
        )

    @classmethod
    def from_pb(cls, m: pb.BasePath) -> BasePath:
        return cls(id=m.id, path=m.path, name=m.name or None, is_dataset_root=m.is_dataset_root)


def check_base_paths(bases: Iterable[BasePath]) -> tuple[BasePath, ...]:
    """``bases`` as a tuple, if their ids are unique.

    Raises:
        PathOutsideDatasetError: an id appears twice, or an entry is no BasePath.
    """
    out = tuple(bases)
    seen: set[int] = set()
    for base in out:
        if not isinstance(base, BasePath):
            raise PathOutsideDatasetError(f"not a BasePath: {base!r}")
        if base.id in seen:
            raise PathOutsideDatasetError(f"base path id {base.id} is used twice")
        seen.add(base.id)
    return out


def file_base_ids(fragments: Iterable[FragmentMetadata]) -> set[int]:
    """The base ids the data and deletion files of ``fragments`` use."""
    out: set[int] = set()
    for fragment in fragments:
        out.update(d.base_id for d in fragment.files if d.base_id is not None)
        if fragment.deletion_file is not None and fragment.deletion_file.base_id is not None:
            out.add(fragment.deletion_file.base_id)
    return out


def fragment_files(fragment: FragmentMetadata) -> Iterator[tuple[int | None, str]]:
    """(base id, path under that root) of every data and deletion file of ``fragment``."""
    for data_file in fragment.files:
        yield data_file.base_id, layout.data_file_path(data_file.path)
    d = fragment.deletion_file
    if d is not None:
        yield d.base_id, layout.deletion_file_path(fragment.id, d.read_version, d.id, d.extension)


# Stores opened on base roots, shared by every resolver of the process: creating an
# fsspec filesystem per read would cost more than the read.
_stores: dict[tuple[str, str], ObjectStore] = {}
_stores_lock = threading.Lock()


def _store_for_url(url: str, options: dict[str, Any]) -> ObjectStore:
    key = (url, repr(sorted(options.items())))
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = ObjectStore(url, options)
        return store


class FileResolver:
    """Where the files of one manifest are: its own root, or one of its bases.

    Built from the dataset's own :class:`ObjectStore` and the manifest's base paths;
    a base's store is opened on its root with the dataset's storage options. Pickles
    (worker processes and Spark tasks receive one). ``version``, if known, is the
    version whose files these are, for error messages.
    """

    def __init__(
        self,
        store: ObjectStore,
        base_paths: Iterable[BasePath] = (),
        *,
        version: int | None = None,
    ) -> None:
        self.store = store
        self.bases = {b.id: b for b in base_paths}
        self.version = version
        #: base id -> the manifest that declared it (for messages).
        self.declared_in: dict[int, str] = {}
        self._remembered: _WholeReads | None = None

    def __getstate__(self) -> dict[str, object]:
        # What a plan remembered stays in its process (tasks elsewhere read afresh).
        return {**self.__dict__, "_remembered": None}

    def remembering(self) -> FileResolver:
        """A copy of this resolver that keeps the objects it reads whole (up to
        :data:`REMEMBERED_BYTES` in all), for a plan that reads the same small data
        files twice: an update finds its rows, then reads them again to rewrite them.
        Data files never change under their names, so the second read is the first's
        bytes (checked again, as any read)."""
        twin = copy.copy(self)
        twin._remembered = _WholeReads()
        return twin

    def read_whole(self, store: ObjectStore, path: str) -> bytes:
        """The object at ``path`` in ``store`` (one of this resolver's), read whole;
        from memory if this resolver remembers it.

        Raises:
            What ``store.get`` raises.
        """
        remembered = self._remembered
        if remembered is None:
            return store.get(path)
        key = (store.url, path)
        data = remembered.get(key)
        if data is None:
            data = store.get(path)
            remembered.keep(key, data)
        return data

    @classmethod
    def for_manifest(cls, store: ObjectStore, *manifests: Manifest | None) -> FileResolver:
        """The resolver of ``manifests`` (their base paths together: ids never change
        meaning within a dataset)."""
        bases: dict[int, BasePath] = {}
        declared_in: dict[int, str] = {}
        version = None
        for manifest in manifests:
            if manifest is not None:
                for b in manifest.base_paths:
                    bases[b.id] = b
                    declared_in[b.id] = f"manifest of {store.url} version {manifest.version}"
                version = manifest.version
        resolver = cls(store, bases.values(), version=version)
        resolver.declared_in = declared_in
        return resolver

    def store_for(self, base_id: int | None) -> ObjectStore:
        """The store of ``base_id``'s root (None: the dataset's own).

        A base on another kind of store than the dataset's own (``file://`` for a
        bucket dataset, ``s3://`` or ``memory://`` for a local one...) is refused
        unless the dataset was opened with the storage option
        ``allow_cross_store_base_paths=true``: a manifest planted in a bucket must
        not make its readers read their own disk.

        Raises:
            ManifestCorruptError: the manifest declares no such base.
            PathOutsideDatasetError: the base is on another kind of store, not allowed.
        """
        if base_id is None:
            return self.store
        base = self.bases.get(base_id)
        if base is None:
            raise ManifestCorruptError(
                f"a file of {self.store.url} refers to base path {base_id}, which its "
                f"manifest does not declare (declared: {sorted(self.bases) or 'none'})"
            )
        options = self.store.storage_options
        kind = base.path.split("://", 1)[0]
        if kind != self.store.protocol and not cross_store_allowed(options):
            where = self.declared_in.get(base_id) or f"the manifest of {self.store.url}"
            raise PathOutsideDatasetError(
                f"refusing base path {base_id} {base.path!r} declared by {where}: a "
                f"dataset on {self.store.protocol}:// reads base paths on its own kind of "
                f"store only; open it with storage option {ALLOW_CROSS_STORE}=true if "
                "you trust it to read there"
            )
        return _store_for_url(base.path, options)

    def data_file(self, data_file: DataFile) -> tuple[ObjectStore, str]:
        """(store, path) of a data file."""
        return self.store_for(data_file.base_id), layout.data_file_path(data_file.path)

    def deletion_file(self, fragment: FragmentMetadata) -> tuple[ObjectStore, str]:
        """(store, path) of ``fragment``'s deletion file (it must have one)."""
        d = fragment.deletion_file
        assert d is not None
        path = layout.deletion_file_path(fragment.id, d.read_version, d.id, d.extension)
        return self.store_for(d.base_id), path

    def describe(self, base_id: int | None) -> str:
        """A label for messages: "this dataset" or "base 2 (s3://b/src)"."""
        if base_id is None:
            return "this dataset"
        base = self.bases.get(base_id)
        return f"base {base_id} ({base.path if base else 'undeclared'})"


#: Bytes a :meth:`FileResolver.remembering` resolver keeps, at most.
REMEMBERED_BYTES = 64 * 1024 * 1024


class _WholeReads:
    """Objects read whole, by (store URL, path), up to :data:`REMEMBERED_BYTES`;
    shared by the threads of one plan."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, str], bytes] = {}
        self._size = 0

    def get(self, key: tuple[str, str]) -> bytes | None:
        with self._lock:
            return self._kept.get(key)

    def keep(self, key: tuple[str, str], data: bytes) -> None:
        with self._lock:
            if key not in self._kept and self._size + len(data) <= REMEMBERED_BYTES:
                self._kept[key] = data
                self._size += len(data)


#: What readers accept: a resolver, or a plain store (a manifest without bases).
Files = FileResolver | ObjectStore


def as_resolver(files: Files) -> FileResolver:
    """``files`` as a resolver (a plain store resolves only files without a base)."""
    return files if isinstance(files, FileResolver) else FileResolver(files)
