"""ObjectStore: the objects under one dataset root, over fsspec.

Backends: local files, ``memory://`` and S3 (s3fs). Paths given to an ObjectStore are
relative to its root and '/'-separated. The contract every backend keeps (and
tests/test_object_store.py checks for each):

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
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from s3ddb.errors import CredentialsError, EndpointUnreachableError, PathOutsideDatasetError
from s3ddb.io import local_files, service_errors
from s3ddb.io.aws import AwsConfig
from s3ddb.io.paths import check_relative_path
from s3ddb.io.uri import DatasetURI, parse_uri


@dataclass(frozen=True)
class ObjectMeta:
    """An object's path (relative to the store root), size in bytes and, from
    listings, its last modification (epoch seconds; None if the backend gave none)."""

    path: str
    size: int
    modified: float | None = field(default=None, compare=False)


class ObjectStore:
    """Objects under one root URL. See the module docstring for the contract."""

    def __init__(self, url: str | DatasetURI, storage_options: dict[str, Any] | None = None):
        self._uri = url if isinstance(url, DatasetURI) else parse_uri(url)
        self._storage_options = dict(storage_options or {})
        self._aws = AwsConfig.from_storage_options(self._storage_options)
        self._fs: Any = None
        self._fs_lock = threading.Lock()

    # --- identity ------------------------------------------------------------------

    @property
    def protocol(self) -> str:
        """ "file", "memory" or "s3"."""
        return self._uri.storage_protocol

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

        if self.protocol == "s3":
            import s3fs

            # Listing caches would hide objects other writers add; every listing here
            # must be fresh.
            return s3fs.S3FileSystem(use_listings_cache=False, **self._aws.s3fs_options())
        return fsspec.filesystem(self.protocol)

    def _s3(self) -> Any:
        """The process's boto3 S3 client: whole-object requests (get, put, copy, head,
        delete) go through it, as they cost about a millisecond less each than through
        s3fs's event loop, and a writer then needs no second S3 client. s3fs serves
        ranged reads of large files and listings."""
        return self._aws.client("s3")

    @property
    def _local_root(self) -> str:
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
        root = self._uri.path.rstrip("/")
        check_relative_path(path, self.url)
        if self.protocol == "file":
            local_files.check_local_limits(root, path)
        return f"{root}/{path.lstrip('/')}" if path else root

    def arrow_filesystem(self) -> Any:
        """A ``pyarrow.fs.FileSystem`` that accepts ``full_path()`` paths."""
        import pyarrow.fs as pafs

        if self.protocol == "file":
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    # --- operations -----------------------------------------------------------------

    def get(self, path: str) -> bytes:
        """The object's bytes.

        Locally, only a regular file is read, never through a symlink under the root
        (see :mod:`s3ddb.io.local_files`); the same holds for every read and write.

        Raises:
            FileNotFoundError: it does not exist.
            PathOutsideDatasetError: locally, it or a directory on the way is a
                symlink, a FIFO or another non-regular file.
        """
        full = self.full_path(path)
        if self.protocol == "file":
            return local_files.read_all(self._local_root, path)
        try:
            if self.protocol == "s3":
                bucket, key = _split_s3(full)
                body = self._s3().get_object(Bucket=bucket, Key=key)["Body"]
                try:
                    return bytes(body.read())
                finally:
                    body.close()
            return bytes(self.fs.cat_file(full))
        except Exception as exc:
            raise _translate(exc, full) from exc

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``start`` (inclusive) to ``end`` (exclusive) of the object (fewer at
        its end). Raises FileNotFoundError if it does not exist."""
        full = self.full_path(path)
        if end <= start:
            return b""
        if self.protocol == "file":
            return local_files.read_range(self._local_root, path, start, end)
        try:
            if self.protocol == "s3":
                bucket, key = _split_s3(full)
                response = self._s3().get_object(
                    Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}"
                )
                body = response["Body"]
                try:
                    return bytes(body.read())
                finally:
                    body.close()
            return bytes(self.fs.cat_file(full, start=start, end=end))
        except Exception as exc:
            raise _translate(exc, full) from exc

    def get_prefix(self, path: str, length: int) -> bytes:
        """The first ``length`` bytes of the object (all of it if it is shorter).

        Raises:
            FileNotFoundError: it does not exist.
        """
        return self.get_range(path, 0, length)

    def open_input(self, path: str, size: int | None = None) -> BinaryIO:
        """A seekable binary file for reading ``path`` (for pyarrow readers).

        ``size``, if known, spares S3 the HEAD request that would look it up.
        """
        full = self.full_path(path)
        if self.protocol == "file":
            return os.fdopen(local_files.open_regular(self._local_root, path), "rb")
        try:
            if self.protocol == "s3" and size:
                return self.fs.open(full, "rb", size=size)  # type: ignore[no-any-return]
            return self.fs.open(full, "rb")  # type: ignore[no-any-return]
        except Exception as exc:
            raise _translate(exc, full) from exc

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path``, replacing it atomically for readers."""
        full = self.full_path(path)
        if self.protocol == "file":
            local_files.write(self._local_root, path, data)
            return
        if self.protocol == "s3":
            self.put_with_etag(path, data)
            return
        try:
            self.fs.pipe_file(full, data)
        except Exception as exc:
            raise _translate(exc, full) from exc

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` only if no object is there.

        Readers never see a partial object: locally the data is written to a temporary
        name and hard-linked into place (link fails if the target exists).

        Raises:
            FileExistsError: an object already exists at ``path``.
        """
        full = self.full_path(path)
        if self.protocol == "file":
            local_files.write_if_absent(self._local_root, path, data)
            return
        if self.protocol == "memory":
            with _memory_lock:
                if self.fs.exists(full):
                    raise FileExistsError(errno.EEXIST, "object exists", full)
                self.fs.pipe_file(full, data)
            return
        try:
            self.fs.pipe_file(full, data, mode="create")
        except Exception as exc:
            raise _translate(exc, full) from exc

    def put_with_etag(self, path: str, data: bytes) -> str | None:
        """``put`` that returns the object's ETag where the backend has one (S3)."""
        if self.protocol != "s3":
            self.put(path, data)
            return None
        full = self.full_path(path)
        bucket, key = _split_s3(full)
        try:
            response = self._s3().put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:
            raise _translate(exc, full) from exc
        etag = response.get("ETag")
        return str(etag) if etag else None

    def copy(self, src: str, dst: str) -> str | None:
        """Copy ``src`` to ``dst`` (server-side on S3), replacing ``dst``.

        Returns the new object's ETag on S3, else None.

        Raises:
            FileNotFoundError: ``src`` does not exist.
        """
        full_src, full_dst = self.full_path(src), self.full_path(dst)
        if self.protocol == "file":
            fd = local_files.open_regular(self._local_root, src)
            local_files.copy_into(fd, self._local_root, dst)
            return None
        if self.protocol == "memory":
            self.fs.pipe_file(full_dst, self.get(src))
            return None
        bucket, key = _split_s3(full_dst)
        src_bucket, src_key = _split_s3(full_src)
        try:
            response = self._s3().copy_object(
                Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key}
            )
        except Exception as exc:
            raise _translate(exc, full_src) from exc
        etag = response.get("CopyObjectResult", {}).get("ETag")
        return str(etag) if etag else None

    def copy_to(self, target: ObjectStore, src: str, dst: str) -> None:
        """Copy ``src`` of this store to ``dst`` of ``target`` (another root):
        server-side (CopyObject, issued with ``target``'s credentials) when both are
        on S3, else read and written through this process.

        Raises:
            FileNotFoundError: ``src`` does not exist.
        """
        if self.protocol == "s3" and target.protocol == "s3":
            src_bucket, src_key = _split_s3(self.full_path(src))
            full_dst = target.full_path(dst)
            bucket, key = _split_s3(full_dst)
            try:
                target._s3().copy_object(
                    Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key}
                )
            except Exception as exc:
                raise _translate(exc, self.full_path(src)) from exc
            return
        if self.protocol == "file" and target.protocol == "file":
            self.full_path(src), target.full_path(dst)  # checks both
            fd = local_files.open_regular(self._local_root, src)
            local_files.copy_into(fd, target._local_root, dst)
            return
        target.put(dst, self.get(src))

    def head(self, path: str) -> ObjectMeta:
        """Size of the object. Raises FileNotFoundError if it does not exist."""
        full = self.full_path(path)
        if self.protocol == "file":
            return ObjectMeta(path, local_files.size_of(self._local_root, path))
        if self.protocol == "memory":
            try:
                return ObjectMeta(path, int(self.fs.info(full)["size"]))
            except Exception as exc:
                raise _translate(exc, full) from exc
        bucket, key = _split_s3(full)
        try:
            response = self._s3().head_object(Bucket=bucket, Key=key)
        except Exception as exc:
            raise _translate(exc, full) from exc
        return ObjectMeta(path, int(response["ContentLength"]))

    def exists(self, path: str) -> bool:
        try:
            self.head(path)
        except FileNotFoundError:
            return False
        return True

    def delete(self, path: str) -> None:
        """Delete ``path``; a missing object is not an error."""
        full = self.full_path(path)
        if self.protocol == "file":
            local_files.remove(self._local_root, path)
            return
        if self.protocol == "memory":
            try:
                self.fs.rm_file(full)
            except FileNotFoundError:
                pass
            return
        bucket, key = _split_s3(full)
        try:
            self._s3().delete_object(Bucket=bucket, Key=key)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise _translate(exc, full) from exc

    def delete_many(self, paths: list[str]) -> None:
        """Delete every path in ``paths`` (missing ones are not errors).

        S3 deletes up to 1,000 objects per request (DeleteObjects); other backends
        delete one by one.

        Raises:
            OSError: some object could not be deleted (the others may be gone).
        """
        if self.protocol != "s3":
            for path in paths:
                self.delete(path)
            return
        for start in range(0, len(paths), _DELETE_BATCH):
            chunk = paths[start : start + _DELETE_BATCH]
            if len(chunk) == 1:
                self.delete(chunk[0])
                continue
            bucket = _split_s3(self.full_path(chunk[0]))[0]
            keys = [{"Key": _split_s3(self.full_path(p))[1]} for p in chunk]
            try:
                response = self._s3().delete_objects(
                    Bucket=bucket, Delete={"Objects": keys, "Quiet": True}
                )
            except Exception as exc:
                raise _translate(exc, self.full_path(chunk[0])) from exc
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise OSError(
                    f"could not delete {len(errors)} of {len(chunk)} objects under "
                    f"{self.url}, e.g. {first.get('Key')}: {first.get('Code')} "
                    f"{first.get('Message', '')}".rstrip()
                )

    def list(self, prefix: str = "") -> list[ObjectMeta]:
        """Every object whose relative path starts with ``prefix``, sorted by path."""
        return sorted(self.iter_list(prefix), key=lambda m: m.path)

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
        self.full_path(prefix)  # checks the prefix
        root = self.full_path("")
        if self.protocol == "file":
            yield from _local_list(root, prefix)
            return
        if self.protocol == "memory":
            directory = f"{root}/{prefix.rsplit('/', 1)[0]}" if "/" in prefix else root
            found = self.fs.find(directory, detail=True)
            for full, info in sorted(found.items()):
                rel = _under(full, root + "/")
                if rel is not None and rel.startswith(prefix) and info["type"] == "file":
                    created = info.get("created")
                    modified = created.timestamp() if hasattr(created, "timestamp") else created
                    yield ObjectMeta(rel, int(info["size"]), modified)
            return
        yield from self._list_s3(prefix, start_after=start_after)

    def _list_s3(
        self, prefix: str, *, start_after: str | None = None, page_size: int | None = None
    ) -> Iterator[ObjectMeta]:
        """Objects under ``<root>/<prefix>`` on S3, in key order, paginated: keys not
        under the root (or not addressable) are skipped."""
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
                raise _translate(exc, self.full_path(prefix)) from exc
            for item in page.get("Contents", []):
                rel = _under(str(item["Key"]), under)
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

    def first_listed(self, prefix: str) -> ObjectMeta | None:
        """The first object under ``prefix`` in key order (one request on S3, unless
        the first keys are ones :meth:`iter_list` skips)."""
        if self.protocol == "s3":
            self.full_path(prefix)
            return next(self._list_s3(prefix, page_size=1), None)
        listed = self.list(prefix)
        return listed[0] if listed else None


# --- helpers --------------------------------------------------------------------------

_memory_lock = threading.Lock()
_DELETE_BATCH = 1000  # DeleteObjects accepts at most 1,000 keys


def _split_s3(full: str) -> tuple[str, str]:
    bucket, _, key = full.partition("/")
    return bucket, key


def _under(key: str, root: str) -> str | None:
    """``key`` relative to ``root`` (which ends with '/'), or None if it is not under
    it or could not be addressed again through ``full_path`` (a key such as
    ``ds//x`` or ``ds/../x``, which an object store allows)."""
    if not key.startswith(root):
        return None
    rel = key[len(root) :]
    try:
        check_relative_path(rel, root)
    except PathOutsideDatasetError:
        return None
    return rel if rel else None


def _local_list(root: str, prefix: str) -> Iterator[ObjectMeta]:
    # Walk only the directory the prefix names, not the whole dataset.
    directory = os.path.join(root, prefix.rsplit("/", 1)[0]) if "/" in prefix else root
    if not os.path.isdir(directory):
        return
    # Key order, like S3: walk directories and files sorted. Entries are looked at
    # with lstat, never opened or followed: a FIFO or a symlink is listed as what it
    # is, and reading it is refused.
    for dirpath, dirnames, filenames in os.walk(directory):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = sorted(d for d in dirnames if d not in links)
        for name in sorted(filenames + links):
            if name.startswith(".") and name.endswith(".tmp"):
                continue  # an in-flight atomic write
            full = os.path.join(dirpath, name)
            rel = _under(full.replace(os.sep, "/"), root.rstrip("/") + "/")
            if rel is not None and rel.startswith(prefix):
                try:
                    stat = os.lstat(full)
                except FileNotFoundError:
                    continue
                yield ObjectMeta(rel, stat.st_size, stat.st_mtime)


def _translate(exc: BaseException, where: str) -> BaseException:
    """Map a backend exception to a built-in one (or CredentialsError)."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 5:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for err in chain:
        if service_errors.is_not_sent(err):
            return EndpointUnreachableError(f"cannot connect to S3 for {where}: {err}")
        if service_errors.is_missing_credentials(err):
            return CredentialsError(
                f"no AWS credentials found for {where}: set AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or storage_options "
                "aws_access_key_id/aws_secret_access_key (for S3 only: s3_access_key_id/"
                "s3_secret_access_key, AWS_ACCESS_KEY_ID_S3/AWS_SECRET_ACCESS_KEY_S3)"
            )
        if type(err).__name__ in service_errors.UNLOADABLE_CREDENTIAL_ERRORS:
            return CredentialsError(
                f"AWS credentials could not be loaded for {where}: "
                f"{service_errors.describe_error(err)}"
            )
        code = service_errors.error_code(err)
        if code:
            if code in service_errors.REFUSED_CREDENTIAL_CODES:
                return CredentialsError(
                    f"the object store refused the credentials for {where} ({code}): check "
                    "s3_access_key_id/s3_secret_access_key (or aws_access_key_id/"
                    "aws_secret_access_key, AWS_ACCESS_KEY_ID_S3...); docs/deployments.md"
                )
            mapped = service_errors.S3_CODE_TO_OSERROR.get(code)
            if mapped is FileExistsError:
                return FileExistsError(errno.EEXIST, "object exists", where)
            if mapped is not None:
                return mapped(f"{code}: {where}")
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(errno.ENOENT, "no such object", where)
    if isinstance(exc, OSError) and "PreconditionFailed" in str(exc):
        return FileExistsError(errno.EEXIST, "object exists", where)
    return exc
