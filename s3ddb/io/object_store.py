"""ObjectStore: the objects under one dataset root, one class per backend.

Backends: local files (:class:`LocalObjectStore`), ``memory://``
(:class:`MemoryObjectStore`) and S3 (:class:`S3ObjectStore`). ``ObjectStore(url,
storage_options)`` constructs the one that serves the URL's scheme (the table
``_BACKENDS`` below). Paths given to an ObjectStore are relative to its root and
'/'-separated. The contract every backend keeps (and tests/stores/test_object_store.py checks
for each):

  * ``get`` of a missing object raises FileNotFoundError;
  * ``put`` is atomic for readers: they see the old object or the whole new one;
  * ``put_if_not_exists`` raises FileExistsError when the object exists and never
    overwrites it — where the backend truly supports it (O_EXCL/hard link locally, a
    lock in memory, If-None-Match on S3; see ``supports_conditional_put``);
  * ``list`` returns every object under a prefix, sorted by path, paginating as needed;
  * ``delete`` of a missing object is not an error.

Clients are created once and reused; an ObjectStore pickles as (url, options) and
reconnects lazily, so Spark and multiprocessing workers can receive one.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ClassVar, TypeVar, cast

from s3ddb.errors import InvalidInputError
from s3ddb.io import local_files
from s3ddb.io.aws import AwsConfig
from s3ddb.io.paths import check_relative_path, relative_key
from s3ddb.io.service_errors import (
    CONDITION_FAILED_CODES,
    as_storage_error,
    error_code,
    http_status,
)
from s3ddb.io.uri import DatasetURI, parse_uri

__all__ = [
    "DELETE_BATCH",
    "LocalObjectStore",
    "MemoryObjectStore",
    "ObjectMeta",
    "ObjectStore",
    "S3ObjectStore",
]


_Store = TypeVar("_Store", bound="ObjectStore")

log = logging.getLogger(__name__)

#: Where :meth:`S3ObjectStore.honours_conditional_put` writes its scratch object,
#: under the dataset root.
PROBE_DIR = "_s3ddb_probe"
# (endpoint, bucket) -> whether the store refuses a second If-None-Match write. A
# forked child keeps its parent's answers: the stores did not change.
_CONDITIONAL_PUT_PROBES: dict[tuple[str, str], bool] = {}
_PROBE_LOCK = threading.Lock()


@dataclass(frozen=True)
class ObjectMeta:
    """An object's path (relative to the store root), size in bytes and, from
    listings, its last modification (epoch seconds; None if the backend gave none)."""

    path: str
    size: int
    modified: float | None = field(default=None, compare=False)


class ObjectStore:
    """Objects under one root URL. See the module docstring for the contract.

    ``ObjectStore(url, storage_options)`` returns the backend's subclass for the URL;
    each backend implements the operations this class documents without a body.
    """

    #: The storage protocol served: "file", "memory" or "s3".
    protocol: ClassVar[str]
    #: Objects are files on this machine: reads go through file descriptors and cost
    #: no request.
    is_local: ClassVar[bool] = False
    #: Every operation is a network request: it costs a round trip (worth sending side
    #: by side, and one whole read beats several ranged ones), and it may fail after
    #: taking effect (its response was lost).
    is_remote: ClassVar[bool] = False
    #: How ``put_if_not_exists`` decides, as commit logs name it.
    conditional_put_mechanism: ClassVar[str] = "put-if-not-exists"

    def __new__(
        cls: type[_Store], url: str | DatasetURI, storage_options: Mapping[str, Any] | None = None
    ) -> _Store:
        # ObjectStore(url) is the one place a backend is chosen; a backend class (or a
        # subclass of one) constructs itself.
        if cls is not ObjectStore:
            return object.__new__(cls)
        uri = url if isinstance(url, DatasetURI) else parse_uri(url)
        return cast(_Store, object.__new__(_BACKENDS[uri.storage_protocol]))

    def __init__(
        self, url: str | DatasetURI, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        """
        Raises:
            InvalidURIError: ``url`` cannot be parsed.
            InvalidInputError: an invalid storage option (or ``storage_options`` not
                a mapping), or a backend class given a
                URL of another protocol.
        """
        self._uri = url if isinstance(url, DatasetURI) else parse_uri(url)
        if self._uri.storage_protocol != self.protocol:
            raise InvalidInputError(
                f"{type(self).__name__} serves {self.protocol} URLs, not {self._uri.object_url}"
            )
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise InvalidInputError(
                "storage_options must be a dict of option names to values, got "
                f"{type(storage_options).__name__}"
            )
        self._storage_options = dict(storage_options or {})
        self._aws = AwsConfig.from_storage_options(self._storage_options)
        self._fs: Any = None
        self._fs_lock = threading.Lock()

    # --- identity ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._uri.object_url

    @property
    def aws(self) -> AwsConfig:
        return self._aws

    @property
    def storage_options(self) -> dict[str, Any]:
        """The storage options this store was opened with (a copy)."""
        return dict(self._storage_options)

    @property
    def supports_conditional_put(self) -> bool:
        """Whether ``put_if_not_exists`` is atomic on this backend.

        True for local files and memory. For S3 it relies on If-None-Match, which
        plain S3 before 2024 and many S3-compatible stores ignore: use ``s3+ddb://``
        there.
        """
        return True

    def honours_conditional_put(self) -> bool:
        """Whether a second ``put_if_not_exists`` of one path is refused here, as
        :meth:`put_if_not_exists` promises. Always so for local files and memory; see
        :class:`S3ObjectStore` for S3.

        Raises:
            The store's errors (S3 only).
        """
        return True

    def known_conditional_put(self) -> bool | None:
        """:meth:`honours_conditional_put`'s answer if known without a request, else
        None. Never raises."""
        return True

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ObjectStore, (self._uri, self._storage_options))

    # --- fsspec -------------------------------------------------------------------

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (created on first use, then reused)."""
        if self._fs is None:
            with self._fs_lock:
                if self._fs is None:
                    self._fs = self._make_fs()
        return self._fs

    def _make_fs(self) -> Any:
        import fsspec

        return fsspec.filesystem(self.protocol)

    @property
    def _root(self) -> str:
        return self._uri.path.rstrip("/")

    def full_path(self, path: str) -> str:
        """The backend path (no scheme) of ``path``, for fsspec and pyarrow.

        Every operation goes through here, so nothing outside the root is ever
        touched.

        Raises:
            PathOutsideDatasetError: ``path`` would leave the root
                (see :func:`s3ddb.io.paths.check_relative_path`), or, locally, a
                name or the path is longer than the filesystem allows
                (:func:`s3ddb.io.local_files.check_local_limits`).
        """
        check_relative_path(path, self.url)
        return f"{self._root}/{path.lstrip('/')}" if path else self._root

    # --- operations each backend implements ------------------------------------------

    def get(self, path: str) -> bytes:
        """The object's bytes.

        Locally, only a regular file is read, never through a symlink under the root
        (see :mod:`s3ddb.io.local_files`); the same holds for every read and write.

        Raises:
            FileNotFoundError: it does not exist.
            PathOutsideDatasetError: locally, it or a directory on the way is a
                symlink, a FIFO or another non-regular file.
        """
        raise NotImplementedError

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``start`` (inclusive) to ``end`` (exclusive) of the object (fewer at
        its end). Raises FileNotFoundError if it does not exist."""
        raise NotImplementedError

    def open_input(self, path: str, size: int | None = None) -> BinaryIO:
        """A seekable binary file for reading ``path`` (for pyarrow readers).

        ``size``, if known, spares S3 the HEAD request that would look it up.
        """
        raise NotImplementedError

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path``, replacing it atomically for readers."""
        raise NotImplementedError

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` only if no object is there.

        Readers never see a partial object: locally the data is written to a temporary
        name and hard-linked into place (link fails if the target exists).

        Raises:
            FileExistsError: an object already exists at ``path``.
        """
        raise NotImplementedError

    def copy(self, src: str, dst: str) -> str | None:
        """Copy ``src`` to ``dst`` (server-side on S3), replacing ``dst``.

        Returns the new object's ETag on S3 (in the quoted form ``put_with_etag``
        returns, whichever form the store answers in), else None.

        Raises:
            FileNotFoundError: ``src`` does not exist.
        """
        raise NotImplementedError

    def head(self, path: str) -> ObjectMeta:
        """Size of the object. Raises FileNotFoundError if it does not exist."""
        raise NotImplementedError

    def delete(self, path: str) -> None:
        """Delete ``path``; a missing object is not an error."""
        raise NotImplementedError

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[ObjectMeta]:
        """Objects under ``prefix`` in key order (S3: fetched one page at a time).

        Only this root's objects: the root is listed as ``<root>/``, never as a bare
        prefix that a neighbouring dataset's name extends (``ds`` and ``ds2``), and a
        returned key that is not under ``<root>/``, or whose relative path could not
        be addressed through :meth:`full_path`, is skipped. Local listings never open
        an entry (a FIFO cannot block them) nor follow a symlink; the reads of such
        entries are refused (see :meth:`get`).

        Raises:
            PathOutsideDatasetError: ``prefix`` would leave the root.
        """
        raise NotImplementedError

    # --- operations built on those (a backend may do better) ----------------------------

    def get_prefix(self, path: str, length: int) -> bytes:
        """The first ``length`` bytes of the object (all of it if it is shorter).

        Raises:
            FileNotFoundError: it does not exist.
        """
        return self.get_range(path, 0, length)

    def get_bounded(self, path: str, limit: int) -> tuple[bytes, int]:
        """The object's bytes and size, when it holds at most ``limit`` bytes; for a
        larger one, no bytes and its size (at least ``limit + 1``), having read at
        most ``limit + 1`` bytes of it: locally and on S3 none (the size is known
        first: an open file's size, or the Content-Range of one ranged GET, whose
        body is then dropped unread). For objects whose size is stored beside them
        (a chunk's in its manifest) or bounded (a manifest), so that a file grown to
        gigabytes is refused in bounded memory.

        Raises:
            FileNotFoundError: it does not exist.
        """
        data = self.get_prefix(path, limit + 1)
        return (data, len(data)) if len(data) <= limit else (b"", len(data))

    def put_with_etag(self, path: str, data: bytes) -> str | None:
        """``put`` that returns the object's ETag where the backend has one (S3),
        quoted as S3 sends it."""
        self.put(path, data)
        return None

    def copy_to(self, target: ObjectStore, src: str, dst: str) -> None:
        """Copy ``src`` of this store to ``dst`` of ``target`` (another root):
        server-side (CopyObject, issued with ``target``'s credentials) when both are
        on S3, else read and written through this process.

        Raises:
            FileNotFoundError: ``src`` does not exist.
        """
        target.put(dst, self.get(src))

    def exists(self, path: str) -> bool:
        try:
            self.head(path)
        except FileNotFoundError:
            return False
        return True

    def delete_many(
        self, paths: list[str], *, deleted: Callable[[list[str]], None] | None = None
    ) -> None:
        """Delete every path in ``paths`` (missing ones are not errors), in batches of
        :data:`DELETE_BATCH`, in order; ``deleted``, if given, is called with each batch
        once it is gone (for counts and progress).

        S3 deletes a batch with one request (DeleteObjects); other backends delete one
        by one.

        Raises:
            OSError: some object could not be deleted (the others may be gone).
        """
        for batch in _batches(paths):
            for path in batch:
                self.delete(path)
            if deleted is not None:
                deleted(batch)

    # --- several stores at one instant (groups: s3ddb.atomic, s3ddb.snapshot) --------

    def shares_transactions_with(self, other: ObjectStore) -> bool:
        """Whether one atomic step of this store (:meth:`put_all_if_absent`,
        :meth:`instant`) can also hold ``other``'s objects. Only memory stores can:
        local files and S3 have no transaction over several objects."""
        return False

    def put_all_if_absent(self, items: Sequence[tuple[ObjectStore, str, bytes]]) -> list[bool]:
        """Put every ``(store, path, data)`` unless some path exists: all or none, in
        one atomic step (every store sharing transactions with this one).

        Returns:
            Per item, whether its path exists; every entry False means all were put.

        Raises:
            TypeError: this store, or one of ``items``, has no such step.
        """
        raise TypeError(f"{self.url} cannot put several objects atomically")

    def instant(self) -> AbstractContextManager[None]:
        """Hold back every conditional put of the stores sharing transactions with this
        one: reads inside see one instant. Not reentrant: never put conditionally
        inside.

        Raises:
            TypeError: this store has no such instant.
        """
        raise TypeError(f"{self.url} cannot hold several objects at one instant")

    def list(self, prefix: str = "") -> list[ObjectMeta]:
        """Every object whose relative path starts with ``prefix``, sorted by path."""
        return sorted(self.iter_list(prefix), key=lambda m: m.path)

    def first_listed(self, prefix: str) -> ObjectMeta | None:
        """The first object under ``prefix`` in key order (one request on S3, unless
        the first keys are ones :meth:`iter_list` skips)."""
        listed = self.list(prefix)
        return listed[0] if listed else None


class LocalObjectStore(ObjectStore):
    """Files under a local directory, never following what is planted there (see
    :mod:`s3ddb.io.local_files`)."""

    protocol = "file"
    is_local = True
    conditional_put_mechanism = "rename-if-not-exists"

    def full_path(self, path: str) -> str:
        full = super().full_path(path)
        local_files.check_local_limits(self._root, path)
        return full

    def get(self, path: str) -> bytes:
        self.full_path(path)
        return local_files.read_all(self._root, path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self.full_path(path)
        if end <= start:
            return b""
        return local_files.read_range(self._root, path, start, end)

    def open_input(self, path: str, size: int | None = None) -> BinaryIO:
        self.full_path(path)
        return os.fdopen(local_files.open_regular(self._root, path), "rb")

    def get_bounded(self, path: str, limit: int) -> tuple[bytes, int]:
        self.full_path(path)
        with os.fdopen(local_files.open_regular(self._root, path), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                return b"", size
            # Not read(limit + 1): a buffer of the limit would be allocated up front.
            data = f.read(size + 1)
            if len(data) > size:  # it grew meanwhile: read on, still bounded
                data += f.read(limit + 1 - len(data))
        return (data, len(data)) if len(data) <= limit else (b"", len(data))

    def put(self, path: str, data: bytes) -> None:
        self.full_path(path)
        local_files.write(self._root, path, data)

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        self.full_path(path)
        local_files.write_if_absent(self._root, path, data)

    def copy(self, src: str, dst: str) -> str | None:
        self.full_path(src), self.full_path(dst)  # checks both
        fd = local_files.open_regular(self._root, src)
        local_files.copy_into(fd, self._root, dst)
        return None

    def copy_to(self, target: ObjectStore, src: str, dst: str) -> None:
        if not isinstance(target, LocalObjectStore):
            super().copy_to(target, src, dst)
            return
        self.full_path(src), target.full_path(dst)  # checks both
        fd = local_files.open_regular(self._root, src)
        local_files.copy_into(fd, target._root, dst)

    def head(self, path: str) -> ObjectMeta:
        self.full_path(path)
        return ObjectMeta(path, local_files.size_of(self._root, path))

    def delete(self, path: str) -> None:
        self.full_path(path)
        local_files.remove(self._root, path)

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[ObjectMeta]:
        self.full_path(prefix)  # checks the prefix
        for rel, size, modified in local_files.list_files(self.full_path(""), prefix):
            yield ObjectMeta(rel, size, modified)


class MemoryObjectStore(ObjectStore):
    """fsspec's in-memory filesystem (one per process, shared by every store)."""

    protocol = "memory"

    def get(self, path: str) -> bytes:
        full = self.full_path(path)
        try:
            return bytes(self.fs.cat_file(full))
        except Exception as exc:
            raise as_storage_error(exc, full) from exc

    def get_range(self, path: str, start: int, end: int) -> bytes:
        full = self.full_path(path)
        if end <= start:
            return b""
        try:
            return bytes(self.fs.cat_file(full, start=start, end=end))
        except Exception as exc:
            raise as_storage_error(exc, full) from exc

    def get_bounded(self, path: str, limit: int) -> tuple[bytes, int]:
        size = self.head(path).size
        if size > limit:
            return b"", size
        return super().get_bounded(path, limit)

    def open_input(self, path: str, size: int | None = None) -> BinaryIO:
        full = self.full_path(path)
        try:
            return self.fs.open(full, "rb")  # type: ignore[no-any-return]
        except Exception as exc:
            raise as_storage_error(exc, full) from exc

    def put(self, path: str, data: bytes) -> None:
        full = self.full_path(path)
        try:
            self.fs.pipe_file(full, data)
        except Exception as exc:
            raise as_storage_error(exc, full) from exc

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        full = self.full_path(path)
        with _memory_lock:
            if self.fs.exists(full):
                raise FileExistsError(errno.EEXIST, "object exists", full)
            self.fs.pipe_file(full, data)

    def shares_transactions_with(self, other: ObjectStore) -> bool:
        """Every memory store: their conditional puts take one process-wide lock."""
        return isinstance(other, MemoryObjectStore)

    def put_all_if_absent(self, items: Sequence[tuple[ObjectStore, str, bytes]]) -> list[bool]:
        stores: list[MemoryObjectStore] = []
        for store, _, _ in items:
            if not isinstance(store, MemoryObjectStore):
                raise TypeError(f"{store.url} is not a memory store")
            stores.append(store)
        with _memory_lock:
            taken = [s.fs.exists(s.full_path(path)) for s, (_, path, _) in zip(stores, items)]
            if any(taken):
                return taken
            for s, (_, path, data) in zip(stores, items):
                s.fs.pipe_file(s.full_path(path), data)
        return taken

    @contextmanager
    def instant(self) -> Iterator[None]:
        with _memory_lock:
            yield

    def copy(self, src: str, dst: str) -> str | None:
        self.full_path(src)
        self.fs.pipe_file(self.full_path(dst), self.get(src))
        return None

    def head(self, path: str) -> ObjectMeta:
        full = self.full_path(path)
        try:
            return ObjectMeta(path, int(self.fs.info(full)["size"]))
        except Exception as exc:
            raise as_storage_error(exc, full) from exc

    def delete(self, path: str) -> None:
        full = self.full_path(path)
        try:
            self.fs.rm_file(full)
        except FileNotFoundError:
            pass

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[ObjectMeta]:
        self.full_path(prefix)  # checks the prefix
        root = self.full_path("")
        directory = f"{root}/{prefix.rsplit('/', 1)[0]}" if "/" in prefix else root
        found = self.fs.find(directory, detail=True)
        for full, info in sorted(found.items()):
            rel = relative_key(full, root + "/")
            if rel is not None and rel.startswith(prefix) and info["type"] == "file":
                created = info.get("created")
                modified = created.timestamp() if hasattr(created, "timestamp") else created
                yield ObjectMeta(rel, int(info["size"]), modified)


class S3ObjectStore(ObjectStore):
    """An S3 bucket prefix: whole-object requests through boto3, ranged reads of large
    files and listings through s3fs."""

    protocol = "s3"
    is_remote = True

    def _make_fs(self) -> Any:
        import s3fs

        # Listing caches would hide objects other writers add; every listing here
        # must be fresh.
        return s3fs.S3FileSystem(use_listings_cache=False, **self._aws.s3fs_options())

    def _s3(self) -> Any:
        """The process's boto3 S3 client: whole-object requests (get, put, copy, head,
        delete) go through it, as they cost about a millisecond less each than through
        s3fs's event loop, and a writer then needs no second S3 client. s3fs serves
        ranged reads of large files and listings."""
        return self._aws.client("s3")

    def _get_object(self, full: str, **range_: str) -> bytes:
        bucket, key = _split_s3(full)
        try:
            body = self._s3().get_object(Bucket=bucket, Key=key, **range_)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()
        except Exception as exc:
            if range_ and error_code(exc) == "InvalidRange":
                return b""  # a range starting past the end (of an empty object, say)
            raise as_storage_error(exc, full) from exc

    def get_bounded(self, path: str, limit: int) -> tuple[bytes, int]:
        full = self.full_path(path)
        bucket, key = _split_s3(full)
        try:
            response = self._s3().get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{limit}")
        except Exception as exc:
            if error_code(exc) == "InvalidRange":
                return b"", 0  # an empty object has no byte 0
            raise as_storage_error(exc, full) from exc
        body = response["Body"]
        try:
            size = _object_size(response)
            if size > limit:
                return b"", size  # the body is dropped unread
            # Bounded whatever the headers said, without a buffer of the limit.
            data = bytes(body.read(size + 1))
            if len(data) > size:
                data += bytes(body.read(limit + 1 - len(data)))
        except Exception as exc:
            raise as_storage_error(exc, full) from exc
        finally:
            body.close()
        return (data, len(data)) if len(data) <= limit else (b"", len(data))

    def get(self, path: str) -> bytes:
        return self._get_object(self.full_path(path))

    def get_range(self, path: str, start: int, end: int) -> bytes:
        full = self.full_path(path)
        if end <= start:
            return b""
        return self._get_object(full, Range=f"bytes={start}-{end - 1}")

    def open_input(self, path: str, size: int | None = None) -> BinaryIO:
        full = self.full_path(path)
        try:
            if size:
                return self.fs.open(full, "rb", size=size)  # type: ignore[no-any-return]
            return self.fs.open(full, "rb")  # type: ignore[no-any-return]
        except Exception as exc:
            raise as_storage_error(exc, full) from exc

    def put(self, path: str, data: bytes) -> None:
        self.full_path(path)
        self.put_with_etag(path, data)

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        # Through boto3, as the other whole-object requests: a small body goes out
        # with its headers (see s3ddb.io.aws), where s3fs's client waits for
        # "100 Continue" first.
        full = self.full_path(path)
        bucket, key = _split_s3(full)
        try:
            self._s3().put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except Exception as exc:
            # 409 ConditionalRequestConflict: another conditional write of the name
            # is under way; as 412, the name is not this writer's to take now.
            if error_code(exc) in CONDITION_FAILED_CODES:
                raise FileExistsError(errno.EEXIST, "object exists", full) from exc
            raise as_storage_error(exc, full) from exc

    def honours_conditional_put(self) -> bool:
        """Whether the store refuses a second ``If-None-Match: *`` write of one key.
        AWS S3 does; plain S3 before 2024 and many S3-compatible stores ignore the
        header, and the second write then replaces the first. Asked once per process,
        endpoint and bucket: a scratch object (``_s3ddb_probe/<uuid>`` under this
        root) is written twice with the header, then deleted.

        Raises:
            The store's errors (e.g. PermissionError) from the scratch writes; a
            failed delete leaves the object and is logged.
        """
        known = self.known_conditional_put()
        if known is not None:
            return known
        path = f"{PROBE_DIR}/{uuid.uuid4().hex}"
        try:
            honoured = self._second_put_refused(path)
        finally:
            try:
                self.delete(path)
            except Exception as exc:  # the answer stands; the object is an orphan
                log.warning("could not delete the scratch object %s: %s", path, exc)
        with _PROBE_LOCK:
            _CONDITIONAL_PUT_PROBES[self._probe_key] = honoured
        return honoured

    def _second_put_refused(self, path: str) -> bool:
        """Put ``path`` twice with ``If-None-Match: *``: whether the second was refused.
        The first refused is an answer too: only this writer's own write, sent again
        by the client after a lost response, can have been there. A store that
        rejects the header itself (501 NotImplemented, as some S3-compatible stores
        answer) honours nothing.

        Raises:
            The store's other errors.
        """
        try:
            self.put_if_not_exists(path, b"first")
            self.put_if_not_exists(path, b"second")
        except FileExistsError:
            return True
        except Exception as exc:  # as_storage_error's, the ClientError its cause
            cause = exc.__cause__ or exc
            if error_code(cause) == "NotImplemented" or http_status(cause) == 501:
                return False
            raise
        return False

    @functools.cached_property
    def _probe_key(self) -> tuple[str, str]:
        """(endpoint, bucket): what an answer of the probe holds for (asked on every
        plain commit: worked out once per store)."""
        bucket, _key = _split_s3(self.full_path(""))
        return (str(self._s3().meta.endpoint_url), bucket)

    def known_conditional_put(self) -> bool | None:
        with _PROBE_LOCK:
            return _CONDITIONAL_PUT_PROBES.get(self._probe_key)

    def put_with_etag(self, path: str, data: bytes) -> str | None:
        full = self.full_path(path)
        bucket, key = _split_s3(full)
        try:
            response = self._s3().put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:
            raise as_storage_error(exc, full) from exc
        return _quoted_etag(response.get("ETag"))

    def copy(self, src: str, dst: str) -> str | None:
        full_src, full_dst = self.full_path(src), self.full_path(dst)
        bucket, key = _split_s3(full_dst)
        src_bucket, src_key = _split_s3(full_src)
        try:
            response = self._s3().copy_object(
                Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key}
            )
        except Exception as exc:
            raise as_storage_error(exc, full_src) from exc
        return _quoted_etag(response.get("CopyObjectResult", {}).get("ETag"))

    def copy_to(self, target: ObjectStore, src: str, dst: str) -> None:
        if not isinstance(target, S3ObjectStore):
            super().copy_to(target, src, dst)
            return
        src_bucket, src_key = _split_s3(self.full_path(src))
        bucket, key = _split_s3(target.full_path(dst))
        try:
            target._s3().copy_object(
                Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key}
            )
        except Exception as exc:
            raise as_storage_error(exc, self.full_path(src)) from exc

    def head(self, path: str) -> ObjectMeta:
        full = self.full_path(path)
        bucket, key = _split_s3(full)
        try:
            response = self._s3().head_object(Bucket=bucket, Key=key)
        except Exception as exc:
            raise as_storage_error(exc, full) from exc
        return ObjectMeta(path, int(response["ContentLength"]))

    def delete(self, path: str) -> None:
        full = self.full_path(path)
        bucket, key = _split_s3(full)
        try:
            self._s3().delete_object(Bucket=bucket, Key=key)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise as_storage_error(exc, full) from exc

    def delete_many(
        self, paths: list[str], *, deleted: Callable[[list[str]], None] | None = None
    ) -> None:
        for chunk in _batches(paths):
            self._delete_batch(chunk)
            if deleted is not None:
                deleted(chunk)

    def _delete_batch(self, chunk: list[str]) -> None:
        """One DeleteObjects (a DeleteObject for one path)."""
        if len(chunk) == 1:
            self.delete(chunk[0])
            return
        bucket = _split_s3(self.full_path(chunk[0]))[0]
        keys = [{"Key": _split_s3(self.full_path(p))[1]} for p in chunk]
        try:
            response = self._s3().delete_objects(
                Bucket=bucket, Delete={"Objects": keys, "Quiet": True}
            )
        except Exception as exc:
            raise as_storage_error(exc, self.full_path(chunk[0])) from exc
        errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            first = errors[0]
            raise OSError(
                f"could not delete {len(errors)} of {len(chunk)} objects under "
                f"{self.url}, e.g. {first.get('Key')}: {first.get('Code')} "
                f"{first.get('Message', '')}".rstrip()
            )

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[ObjectMeta]:
        self.full_path(prefix)  # checks the prefix
        yield from self._list(prefix, start_after=start_after)

    def first_listed(self, prefix: str) -> ObjectMeta | None:
        self.full_path(prefix)
        return next(self._list(prefix, page_size=1), None)

    def _list(
        self, prefix: str, *, start_after: str | None = None, page_size: int | None = None
    ) -> Iterator[ObjectMeta]:
        """Objects under ``<root>/<prefix>`` in key order, paginated: keys not under
        the root (or not addressable) are skipped."""
        bucket, root_key = _split_s3(self.full_path(""))
        under = f"{root_key}/"
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": under + prefix}
        if start_after is not None:
            kwargs["StartAfter"] = under + start_after
        if page_size is not None:
            kwargs["MaxKeys"] = page_size
        while True:
            try:
                page = self.fs.call_s3("list_objects_v2", **kwargs)
            except Exception as exc:
                raise as_storage_error(exc, self.full_path(prefix)) from exc
            for item in page.get("Contents", []):
                rel = relative_key(str(item["Key"]), under)
                if rel is None or not rel.startswith(prefix):
                    continue
                modified = item.get("LastModified")
                yield ObjectMeta(
                    rel,
                    int(item["Size"]),
                    modified.timestamp() if modified is not None else None,
                )
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]


#: The class of each storage protocol (``DatasetURI.storage_protocol``).
_BACKENDS: dict[str, type[ObjectStore]] = {
    "file": LocalObjectStore,
    "memory": MemoryObjectStore,
    "s3": S3ObjectStore,
}

_memory_lock = threading.Lock()
#: Objects deleted per batch of :meth:`ObjectStore.delete_many` (one DeleteObjects on
#: S3, which accepts at most 1,000 keys).
DELETE_BATCH = 1000


def _batches(paths: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(paths), DELETE_BATCH):
        yield paths[start : start + DELETE_BATCH]


def _object_size(response: Mapping[str, Any]) -> int:
    """The whole object's size, from a GetObject response: the total of its
    Content-Range (``bytes 0-99/1234``), or its Content-Length when the store sent
    the whole object (no range)."""
    total = str(response.get("ContentRange") or "").rpartition("/")[2]
    if total.isascii() and total.isdigit():  # str.isdigit takes "²", which int() refuses
        return int(total)
    return int(response.get("ContentLength") or 0)


def _quoted_etag(etag: object) -> str | None:
    """An ETag in S3's quoted form: SeaweedFS quotes a PutObject's ETag but not a
    CopyObject's, and the two must compare equal (a copy is verified by its ETag)."""
    if not etag:
        return None
    return '"' + str(etag).strip('"') + '"'


def _split_s3(full: str) -> tuple[str, str]:
    bucket, _, key = full.partition("/")
    return bucket, key
