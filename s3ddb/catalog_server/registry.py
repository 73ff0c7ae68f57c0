"""The namespace registry of the Iceberg REST catalog: which dataset each
``namespace.table`` name stands for.

The registry lives with the datasets it names. Its root is a folder (a local path, or
an ``s3://`` prefix; an ``s3+ddb://`` URI means its objects' location), the datasets
are under that root, and each entry is one small JSON object of its own::

    <root>/_s3ddb_catalog/<namespace>/<table>.json     {"uri": "<dataset URI>"}

One object per table means registrations never overwrite each other (each is a
put-if-absent of its own object) and listing the catalog is one listing of the
registry's prefix. A namespace exists while it holds a table.

Everything read from the registry is untrusted input: the listing is bounded
(:data:`MAX_ENTRIES`), an entry's object is read within :data:`MAX_ENTRY_BYTES`,
names must match :data:`NAME_PATTERN`, and the URI an entry holds must be a dataset
URI under the registry's root (so a planted entry cannot send the catalog to another
bucket or to ``/etc``). A bad entry is a typed error naming its object.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from s3ddb.errors import (
    InvalidInputError,
    PathOutsideDatasetError,
    S3DDBError,
    StoredMetadataError,
)
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.redact import redact_url
from s3ddb.io.uri import DatasetURI, parse_uri

__all__ = [
    "MAX_ENTRIES",
    "MAX_ENTRY_BYTES",
    "NAME_PATTERN",
    "REGISTRY_DIR",
    "CatalogRegistry",
    "EntryCache",
    "TableName",
    "parse_table_name",
]

#: The folder under the registry's root that holds the entries.
REGISTRY_DIR = "_s3ddb_catalog"
#: A namespace or table name: what the registry accepts and serves (no separators,
#: no dots, nothing a URL or an object key would need to escape).
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,127}")
#: The largest entry object read (an entry holds one URI).
MAX_ENTRY_BYTES = 16 * 1024
#: The most entries one listing of the registry takes; a registry with more is
#: refused as damaged rather than listed without bound.
MAX_ENTRIES = 10_000

_ENTRY_KEY = re.compile(rf"{REGISTRY_DIR}/([^/]+)/([^/]+)\.json")


@dataclass(frozen=True, order=True)
class TableName:
    """A registered table's identifier: one namespace level and a table name."""

    namespace: str
    table: str

    def __str__(self) -> str:
        return f"{self.namespace}.{self.table}"


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise InvalidInputError(
            f"{what} {name!r} is not a catalog name: 1 to 128 letters, digits, '_' or '-', "
            "not starting with '-'"
        )
    return name


def parse_table_name(text: str) -> TableName:
    """``NS.TABLE`` as a :class:`TableName`.

    Raises:
        InvalidInputError: not two names joined by one dot, or a name outside
            :data:`NAME_PATTERN`.
    """
    namespace, dot, table = text.partition(".") if isinstance(text, str) else ("", "", "")
    if not dot:
        raise InvalidInputError(f"expected NAMESPACE.TABLE, got {text!r}")
    return TableName(_check_name(namespace, "namespace"), _check_name(table, "table"))


def _under(root: DatasetURI, dataset: DatasetURI) -> bool:
    """Whether ``dataset``'s objects are strictly under ``root``'s, on the same store."""
    if root.storage_protocol != dataset.storage_protocol:
        return False
    base = root.object_url.rstrip("/") + "/"
    return dataset.object_url.startswith(base) and len(dataset.object_url) > len(base)


class CatalogRegistry:
    """The registry at ``root`` (see the module docstring).

    ``storage_options`` are s3ddb's (endpoint, region, credentials) for the root's
    store; registered datasets are opened with the same ones.

    Raises:
        InvalidURIError: ``root`` is not a local path or a URI s3ddb reads.
    """

    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self._root = parse_uri(root)
        self._storage_options = dict(storage_options or {})
        self._store = ObjectStore(self._root.object_url, self._storage_options)

    @property
    def root(self) -> str:
        """The root's location (``file:///abs``, ``s3://bucket/prefix``)."""
        return self._root.object_url

    @property
    def storage_options(self) -> dict[str, Any]:
        return dict(self._storage_options)

    def _entry_path(self, name: TableName) -> str:
        return f"{REGISTRY_DIR}/{name.namespace}/{name.table}.json"

    def check_dataset_uri(self, uri: str, where: str = "") -> str:
        """``uri`` if it is a dataset URI under the registry's root.

        Raises:
            PathOutsideDatasetError: it names a location outside the root (another
                bucket, another folder, the root itself).
            InvalidURIError: it is not a dataset URI.
        """
        dataset = parse_uri(uri)
        if not _under(self._root, dataset):
            found = f" (in {where})" if where else ""
            raise PathOutsideDatasetError(
                f"dataset {redact_url(uri)!r}{found} is not under the catalog's root "
                f"{self.root}: the catalog serves only datasets under its root"
            )
        return uri

    def register(self, name: TableName, uri: str) -> bool:
        """Register the dataset at ``uri`` as ``name`` (a local path as an absolute
        one). Returns False if ``name`` already names that same dataset (nothing is
        written).

        Raises:
            InvalidInputError: ``name`` names another dataset already (unregister it
                first), or ``uri`` is not under the root (PathOutsideDatasetError).
            InvalidURIError: ``uri`` is not a dataset URI.
        """
        _check_name(name.namespace, "namespace")
        _check_name(name.table, "table")
        self.check_dataset_uri(uri)
        # A local dataset is recorded by its absolute path: the server may run
        # elsewhere than the command that registered it.
        dataset = parse_uri(uri)
        uri = dataset.path if dataset.scheme == "file" else uri
        data = json.dumps({"uri": uri}, sort_keys=True).encode()
        if len(data) > MAX_ENTRY_BYTES:
            raise InvalidInputError(f"dataset URI longer than {MAX_ENTRY_BYTES} bytes")
        try:
            self._store.put_if_not_exists(self._entry_path(name), data)
        except FileExistsError:
            existing = self.dataset_uri(name)
            if existing == uri:
                return False
            raise InvalidInputError(
                f"{name} is registered already, to {redact_url(existing)!r}: unregister it first"
            ) from None
        return True

    def unregister(self, name: TableName) -> None:
        """Remove ``name`` from the registry (the dataset itself is untouched); a
        name not registered is not an error."""
        self._store.delete(self._entry_path(name))

    def names(self) -> list[TableName]:
        """Every registered table, sorted. Objects under the registry's folder that
        are not entries (other names, other depths) are ignored.

        Raises:
            StoredMetadataError: more than :data:`MAX_ENTRIES` objects.
        """
        found: list[TableName] = []
        for count, meta in enumerate(self._store.iter_list(f"{REGISTRY_DIR}/")):
            if count >= MAX_ENTRIES:
                raise StoredMetadataError(
                    f"catalog registry {self.root}/{REGISTRY_DIR}/ holds more than "
                    f"{MAX_ENTRIES} objects"
                )
            match = _ENTRY_KEY.fullmatch(meta.path)
            if match is None:
                continue
            namespace, table = match.groups()
            if NAME_PATTERN.fullmatch(namespace) and NAME_PATTERN.fullmatch(table):
                found.append(TableName(namespace, table))
        return sorted(found)

    def namespaces(self) -> list[str]:
        """The namespaces holding at least one table, sorted."""
        return sorted({name.namespace for name in self.names()})

    def tables(self, namespace: str) -> list[TableName]:
        """The tables of ``namespace``, sorted (empty: no such namespace)."""
        return [name for name in self.names() if name.namespace == namespace]

    def dataset_uri(self, name: TableName) -> str | None:
        """The URI of the dataset registered as ``name`` (None: not registered),
        checked.

        Raises:
            StoredMetadataError: the entry is larger than :data:`MAX_ENTRY_BYTES`, not
                a JSON object with a string ``uri``; PathOutsideDatasetError: the URI
                is outside the root (or not a dataset URI); the message names the
                entry's object.
        """
        if (
            NAME_PATTERN.fullmatch(name.namespace) is None
            or NAME_PATTERN.fullmatch(name.table) is None
        ):
            return None
        path = self._entry_path(name)
        where = f"{self.root}/{path}"
        try:
            data, size = self._store.get_bounded(path, MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return None
        if size > MAX_ENTRY_BYTES:
            raise StoredMetadataError(f"catalog entry {where}: larger than {MAX_ENTRY_BYTES} bytes")
        try:
            entry = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise StoredMetadataError(f"catalog entry {where}: not JSON ({exc})") from None
        uri = entry.get("uri") if isinstance(entry, dict) else None
        if not isinstance(uri, str) or not uri:
            raise StoredMetadataError(f'catalog entry {where}: not an object with a string "uri"')
        try:
            return self.check_dataset_uri(uri, where)
        except PathOutsideDatasetError:
            raise
        except S3DDBError as exc:
            raise PathOutsideDatasetError(f"catalog entry {where}: {exc}") from None


class EntryCache:
    """The checked dataset URIs of a registry's entries, as a server keeps them: an
    entry is read (and checked, as :meth:`CatalogRegistry.dataset_uri` checks it) at
    most once per ``max_age`` seconds, in a table of at most ``max_entries`` names
    (the least recently used are forgotten first).

    Entries are written once (put-if-absent) and only removed by
    :meth:`CatalogRegistry.unregister`, so a cached URI goes stale only when its entry
    is removed or registered again: it is served at most ``max_age`` seconds after,
    and not at all once the dataset cannot be opened there (the caller then calls
    :meth:`forget` and reads the entry again). Names not registered, and
    entries refused, are not cached: a new registration is seen at once, a damaged
    entry is refused on every request.
    """

    def __init__(
        self,
        registry: CatalogRegistry,
        *,
        max_entries: int,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._max_entries = max_entries
        self._max_age = max_age
        self._clock = clock
        self._entries: OrderedDict[TableName, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def dataset_uri(self, name: TableName) -> tuple[str | None, bool]:
        """The URI registered as ``name`` (None: not registered) and whether it came
        from the cache (not read from the registry by this call).

        Raises:
            What :meth:`CatalogRegistry.dataset_uri` raises.
        """
        now = self._clock()
        with self._lock:
            found = self._entries.get(name)
            if found is not None and now - found[1] < self._max_age:
                self._entries.move_to_end(name)
                return found[0], True
        uri = self._registry.dataset_uri(name)
        with self._lock:
            if uri is None:
                self._entries.pop(name, None)
            elif self._max_entries > 0:
                self._entries[name] = (uri, now)
                self._entries.move_to_end(name)
                while len(self._entries) > self._max_entries:
                    self._entries.popitem(last=False)
        return uri, False

    def forget(self, name: TableName) -> None:
        """Drop ``name``'s cached URI: the next lookup reads its entry again."""
        with self._lock:
            self._entries.pop(name, None)
