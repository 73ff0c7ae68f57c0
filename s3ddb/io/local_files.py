"""Local files under a dataset root, opened without following anything planted there.

Anyone who can write under a local dataset root can plant a symlink (to a file or a
directory outside the root) or a special file (a FIFO, whose ``open`` blocks until a
writer appears; a device). So every local read, write and delete of
:class:`~s3ddb.io.object_store.ObjectStore` walks from the root one component at a
time (``openat``) with ``O_NOFOLLOW``: a symlink anywhere under the root is refused,
and the last component is opened with ``O_NONBLOCK`` and checked with ``fstat`` on the
same descriptor to be a regular file, so there is no window between check and use.
The root itself may be reached through a symlink (users do that); only what lies
under it is checked.

Names are checked against the local filesystem's limits before any system call
(:func:`check_local_limits`): a name longer than ``NAME_MAX`` bytes or a path longer
than ``PATH_MAX`` bytes (UTF-8, not characters) is a ``PathOutsideDatasetError``
naming it, never a bare ``OSError``.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from s3ddb.errors import DatasetLocationError, PathOutsideDatasetError
from s3ddb.io.paths import relative_key

__all__ = [
    "NAME_MAX",
    "PATH_MAX",
    "check_local_limits",
    "copy_into",
    "directory",
    "list_files",
    "open_regular",
    "read_all",
    "read_range",
    "remove",
    "size_of",
    "write",
    "write_if_absent",
]

#: Longest file name (one path component) local filesystems accept, in bytes.
NAME_MAX = 255
#: Longest path the operating system accepts, in bytes (with the terminating NUL).
PATH_MAX = 4096 if sys.platform.startswith("linux") else 1024

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: Whether the walk can be done with descriptors (POSIX); elsewhere each component is
#: checked with lstat before the path is used (a check-then-use window remains).
_AT = bool(_NOFOLLOW and _DIRECTORY) and os.open in os.supports_dir_fd

_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC
# errno values an O_NOFOLLOW open of a symlink gives (ELOOP; EMLINK on FreeBSD) and
# what O_DIRECTORY gives for a non-directory.
_LINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})


def _short(name: str) -> str:
    return name if len(name) <= 60 else f"{name[:40]}...{name[-12:]}"


def check_local_limits(root: str, path: str) -> None:
    """Check that ``path`` (relative, '/'-separated) fits the local filesystem under
    ``root``: each name at most :data:`NAME_MAX` bytes, the whole path at most
    :data:`PATH_MAX` bytes, in UTF-8.

    Raises:
        PathOutsideDatasetError: a name or the path is too long, or not encodable.
    """
    if not path:
        return
    try:
        total = len(os.fsencode(root)) + 1 + len(os.fsencode(path))
        for name in path.split("/"):
            size = len(os.fsencode(name))
            if size > NAME_MAX:
                raise PathOutsideDatasetError(
                    f"refusing path {_short(path)!r} under {root}: the name {_short(name)!r} "
                    f"is {size} bytes, longer than the {NAME_MAX} bytes a local file name "
                    "may have"
                )
    except UnicodeError as exc:
        raise PathOutsideDatasetError(
            f"refusing path {path!r} under {root}: it is not valid text for a local file "
            f"name ({exc})"
        ) from None
    if total >= PATH_MAX:
        raise PathOutsideDatasetError(
            f"refusing path {_short(path)!r} under {root}: the full path is {total} bytes, "
            f"longer than the {PATH_MAX - 1} bytes a local path may have"
        )


def _refuse(root: str, path: str, what: str) -> PathOutsideDatasetError:
    return PathOutsideDatasetError(
        f"refusing path {path!r} under {root}: {what}; only regular files and directories "
        "(no symlinks, FIFOs or devices) are read or written under a local dataset root"
    )


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _open_root(root: str, create: bool) -> int:
    """A descriptor of the dataset root directory, made first when ``create``.

    Raises:
        DatasetLocationError: ``create`` and the root cannot be made (a part of the
            path is a file, the file system is read-only, permission is denied).
        FileNotFoundError: the root is missing or not a directory (not ``create``).
    """
    # The root may be reached through a symlink: it is followed.
    if create:
        try:
            os.makedirs(root or "/", exist_ok=True)
        except OSError as exc:
            raise DatasetLocationError(
                f"cannot create the dataset directory {root}: "
                f"{exc.strerror or type(exc).__name__}"
                + (f" ({exc.filename})" if exc.filename and exc.filename != root else ""),
            ) from exc
    try:
        return os.open(root or "/", os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except NotADirectoryError:
        raise FileNotFoundError(errno.ENOENT, "the dataset root is not a directory", root) from None


@contextmanager
def directory(root: str, path: str, *, create: bool = False) -> Iterator[tuple[int | None, str]]:
    """(descriptor of the directory holding ``path``'s last name, that name).

    Walks from ``root`` with ``O_NOFOLLOW``; with ``create``, missing directories are
    made. The descriptor is None where the platform has no ``openat`` (then the name
    is the full path, each directory checked with lstat first).

    Raises:
        PathOutsideDatasetError: a directory under the root is a symlink or not a
            directory.
        FileNotFoundError: a directory is missing (and ``create`` is False).
    """
    names = path.split("/")
    if not _AT:
        full = root
        for name in names[:-1]:
            full = os.path.join(full, name)
            try:
                mode = os.lstat(full).st_mode
            except FileNotFoundError:
                if not create:
                    raise
                os.makedirs(full, exist_ok=True)
                continue
            if not stat.S_ISDIR(mode):
                raise _refuse(root, path, f"{name!r} is {_kind(mode)}, not a directory")
        yield None, os.path.join(root, *names)
        return
    fd = _open_root(root, create)
    try:
        for name in names[:-1]:
            try:
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise FileNotFoundError(
                        errno.ENOENT, "no such object", os.path.join(root, path)
                    ) from None
                try:
                    os.mkdir(name, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile by another writer
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in _LINK_ERRNOS:
                    raise
                mode = os.lstat(name, dir_fd=fd).st_mode
                if stat.S_ISREG(mode) and not create:
                    # Like an object store: "a/b" does not exist where "a" is a file.
                    raise FileNotFoundError(
                        errno.ENOENT, "no such object", os.path.join(root, path)
                    ) from None
                raise _refuse(root, path, f"{name!r} is {_kind(mode)}, not a directory") from None
            os.close(fd)
            fd = new
        yield fd, names[-1]
    finally:
        os.close(fd)


def open_regular(root: str, path: str) -> int:
    """A read-only descriptor of the regular file ``path`` under ``root``.

    Never blocks (a FIFO is refused, not opened for reading until a writer comes) and
    never follows a symlink under the root.

    Raises:
        FileNotFoundError: nothing is there.
        PathOutsideDatasetError: it, or a directory on the way, is a symlink, a FIFO,
            a device or another non-regular file.
    """
    with directory(root, path) as (dir_fd, name):
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise FileNotFoundError(
                errno.ENOENT, "no such object", os.path.join(root, path)
            ) from None
        except OSError as exc:
            if exc.errno not in _LINK_ERRNOS and exc.errno != errno.EISDIR:
                raise
            mode = os.lstat(name, dir_fd=dir_fd).st_mode
            raise _refuse(root, path, f"it is {_kind(mode)}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _refuse(root, path, f"it is {_kind(mode)}")
    if _NONBLOCK:
        # Regular files ignore O_NONBLOCK; cleared so that nothing downstream is
        # surprised by it.
        os.set_blocking(fd, True)
    return fd


def read_all(root: str, path: str) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`)."""
    with os.fdopen(open_regular(root, path), "rb") as f:
        return f.read()


def read_range(root: str, path: str, start: int, end: int) -> bytes:
    """Bytes ``start`` to ``end`` (exclusive) of the regular file ``path`` (fewer at
    its end: nothing is allocated beyond what the file holds)."""
    with os.fdopen(open_regular(root, path), "rb") as f:
        end = min(end, os.fstat(f.fileno()).st_size)
        if end <= start:
            return b""
        f.seek(start)
        return f.read(end - start)


def size_of(root: str, path: str) -> int:
    """The size of the regular file ``path`` (opened and checked, never followed)."""
    fd = open_regular(root, path)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _write_temporary(dir_fd: int | None, name: str, data: bytes | BinaryIO) -> str:
    # Not derived from ``name``: a name of up to NAME_MAX bytes must fit.
    tmp = os.path.join(os.path.dirname(name), f".{uuid.uuid4().hex}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    fd = os.open(tmp, flags, 0o666, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                shutil.copyfileobj(data, f)
    except BaseException:
        os.unlink(tmp, dir_fd=dir_fd)
        raise
    return tmp


def write(root: str, path: str, data: bytes | BinaryIO) -> None:
    """Replace ``path`` with ``data`` (bytes, or a file read to its end) atomically:
    a temporary file renamed over it.

    Raises:
        PathOutsideDatasetError: a directory on the way is a symlink or not one.
    """
    with directory(root, path, create=True) as (dir_fd, name):
        tmp = _write_temporary(dir_fd, name, data)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            os.unlink(tmp, dir_fd=dir_fd)
            raise


def write_if_absent(root: str, path: str, data: bytes) -> None:
    """Write ``path`` only if nothing is there: a temporary file hard-linked to it.

    Raises:
        FileExistsError: something is there (never overwritten).
        PathOutsideDatasetError: a directory on the way is a symlink or not one.
    """
    with directory(root, path, create=True) as (dir_fd, name):
        tmp = _write_temporary(dir_fd, name, data)
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        finally:
            os.unlink(tmp, dir_fd=dir_fd)


def copy_into(fd: int, root: str, path: str) -> None:
    """Write the bytes of open file ``fd`` (closed here) to ``path``, atomically,
    without holding them all in memory."""
    with os.fdopen(fd, "rb") as f:
        write(root, path, f)


def remove(root: str, path: str) -> None:
    """Delete ``path`` (a symlink there is removed, never followed); a missing one
    is not an error.

    Raises:
        PathOutsideDatasetError: a directory on the way is a symlink or not one.
    """
    try:
        with directory(root, path) as (dir_fd, name):
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def list_files(root: str, prefix: str) -> Iterator[tuple[str, int, float]]:
    """(relative path, size, modification time) of every file under ``root`` whose
    relative path starts with ``prefix``, in key order (like S3).

    Only the directory the prefix names is walked, not the whole root. Entries are
    looked at with lstat, never opened or followed: a FIFO or a symlink is listed as
    what it is (reading it is refused, see :func:`open_regular`). In-flight atomic
    writes (``.<name>.tmp``) and paths that could not be addressed are skipped.
    """
    directory = os.path.join(root, prefix.rsplit("/", 1)[0]) if "/" in prefix else root
    if not os.path.isdir(directory):
        return
    under = root.rstrip("/") + "/"
    for dirpath, dirnames, filenames in os.walk(directory):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = sorted(d for d in dirnames if d not in links)
        for name in sorted(filenames + links):
            if name.startswith(".") and name.endswith(".tmp"):
                continue  # an in-flight atomic write
            full = os.path.join(dirpath, name)
            rel = relative_key(full.replace(os.sep, "/"), under)
            if rel is not None and rel.startswith(prefix):
                try:
                    stat_result = os.lstat(full)
                except FileNotFoundError:
                    continue
                yield rel, stat_result.st_size, stat_result.st_mtime
