"""Paths from stored metadata stay inside their dataset.

A dataset's metadata is data that others can write: anyone with write access to its
prefix or its DynamoDB table can plant a manifest or a row. So every path taken from
it is checked before it is used, in two places:

* where it is decoded (:func:`check_name`), which knows where it came from and names
  it in the error: a data file, deletion file or transaction file is one plain name
  in its directory, as in Lance;
* where any relative path is joined to the dataset root
  (:func:`check_relative_path`, called by :meth:`ObjectStore.full_path`), the last
  line: no absolute path, no ``.``/``..`` segment, no control character, whatever the
  caller.
"""

from __future__ import annotations

import re

from s3ddb.errors import PathOutsideDatasetError

__all__ = ["MAX_NAME_LENGTH", "check_name", "check_relative_path", "name_problem", "relative_key"]

MAX_NAME_LENGTH = 1024


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _control_characters(text: str) -> bool:
    return _CONTROL.search(text) is not None


def name_problem(name: str) -> str | None:
    """Why ``name`` is not one plain file name, or None if it is."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    # Bytes, not characters: what object stores (1,024-byte keys) and filesystems
    # limit. Encoded only once the cheap character count allows it (a UTF-8
    # character is at most 4 bytes).
    if len(name) > MAX_NAME_LENGTH:
        return f"it is longer than {MAX_NAME_LENGTH} bytes"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid Unicode text (a lone surrogate)"
    if size > MAX_NAME_LENGTH:
        return f"it is {size} bytes in UTF-8, longer than {MAX_NAME_LENGTH}"
    if _control_characters(name):
        return "it contains control characters"
    if "/" in name or "\\" in name:
        return "it is not a single name (it contains a path separator)"
    if name in (".", ".."):
        return "it names a directory"
    return None


def check_name(name: str, what: str, where: str = "") -> str:
    """Return ``name`` if it is one plain file name.

    Args:
        name: the stored name.
        what: what it is ("data file", "transaction file"...).
        where: where it was found ("manifest s3://.../_versions/x.manifest,
            fragment 3"), for the message.

    Raises:
        PathOutsideDatasetError: it is not.
    """
    problem = name_problem(name)
    if problem is not None:
        found = f" (found in {where})" if where else ""
        raise PathOutsideDatasetError(
            f"refusing {what} {name!r}{found}: {problem}; stored paths must stay inside the dataset"
        )
    return name


def check_relative_path(path: str, root: str) -> str:
    """Return ``path`` if, joined to ``root``, it stays under it.

    Allowed: "" (the root itself) and '/'-separated plain names, with an optional
    trailing '/' (a prefix).

    Raises:
        PathOutsideDatasetError: absolute, ``.``/``..`` or empty segments, a
            backslash, or control characters.
    """
    if not path:
        return path
    problem = None
    if path.startswith("/") or "\\" in path:
        problem = "it is absolute or uses backslashes"
    elif _control_characters(path):
        problem = "it contains control characters"
    else:
        segments = path[:-1].split("/") if path.endswith("/") else path.split("/")
        if any(s in ("", ".", "..") for s in segments):
            problem = "it has an empty, '.' or '..' segment"
    if problem is not None:
        raise PathOutsideDatasetError(
            f"refusing path {path!r} under {root}: {problem}; paths must stay inside the dataset"
        )
    return path


def relative_key(key: str, root: str) -> str | None:
    """``key`` relative to ``root`` (which ends with '/'), or None if it is not under
    it or could not be addressed again through :func:`check_relative_path` (a key such
    as ``ds//x`` or ``ds/../x``, which an object store allows)."""
    if not key.startswith(root):
        return None
    rel = key[len(root) :]
    try:
        check_relative_path(rel, root)
    except PathOutsideDatasetError:
        return None
    return rel if rel else None
