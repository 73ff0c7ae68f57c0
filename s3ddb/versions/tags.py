"""Tags: names for versions, stored as ``_refs/tags/<tag>.json``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Protocol

from s3ddb.arguments import check_int
from s3ddb.commit.handlers import CommitHandler, ManifestLocation
from s3ddb.errors import InvalidInputError, StoredMetadataError, VersionNotFoundError
from s3ddb.format import layout
from s3ddb.format.naming import MAX_VERSION, is_valid_version
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.parallel import run_beside
from s3ddb.versions.opening import locate_version

__all__ = [
    "MAX_TAG_FILE_BYTES",
    "TAG_FILE_SUFFIX",
    "Tags",
    "read_tag_version",
    "tag_name_of",
]

#: The most bytes of a tag file that are read: s3ddb writes ``{"version": N}``, and
#: other Lance-format writers add a few fields; anything larger is refused unread.
MAX_TAG_FILE_BYTES = 4096

#: How a tag file's name ends (:func:`s3ddb.format.layout.tag_path`).
TAG_FILE_SUFFIX = ".json"


def tag_name_of(path: str) -> str | None:
    """The tag the object at ``path`` stores (``_refs/tags/<tag>.json``: ``<tag>``), or
    None if ``path`` is not a tag file: also a file in a folder below ``_refs/tags/``
    or one whose name no tag can have (listings are recursive, and any file may be
    planted there: none of them is a tag, for reads, cleanup and verify alike)."""
    if not path.startswith(f"{layout.TAGS_DIR}/") or not path.endswith(TAG_FILE_SUFFIX):
        return None
    name = path[len(layout.TAGS_DIR) + 1 : -len(TAG_FILE_SUFFIX)]
    if not _TAG_RE.match(name) or name.endswith(TAG_FILE_SUFFIX):
        return None
    return name


def read_tag_version(store: ObjectStore, path: str) -> int:
    """The version the tag file at ``path`` names, checked: a JSON object of at most
    :data:`MAX_TAG_FILE_BYTES` bytes whose ``version`` is an integer from 1 to
    2^63-1 (not a fraction, a boolean or a string).

    Raises:
        FileNotFoundError: there is no such file.
        StoredMetadataError: anything else; the message names the tag file.
    """
    where = f"tag file {store.url}/{path}"
    data = store.get_prefix(path, MAX_TAG_FILE_BYTES + 1)
    if len(data) > MAX_TAG_FILE_BYTES:
        raise StoredMetadataError(f"{where} is larger than {MAX_TAG_FILE_BYTES} bytes")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise StoredMetadataError(f"{where} is not JSON: {str(exc)[:120]}") from None
    if not isinstance(body, dict):
        raise StoredMetadataError(f"{where} is not a JSON object")
    if "version" not in body:
        raise StoredMetadataError(f"{where} has no version")
    version = body["version"]
    if not is_valid_version(version):
        shown = repr(version)[:40] if not isinstance(version, (dict, list)) else type(version)
        raise StoredMetadataError(
            f"{where}: version {shown} is not an integer from 1 to {MAX_VERSION}"
        )
    return int(version)


class _Located(Protocol):
    """What tags need of a dataset: where it is and how it commits."""

    @property
    def uri(self) -> str: ...

    @property
    def handler(self) -> CommitHandler: ...


_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class Tags:
    """The tags of a dataset. Tags are not versioned; a tag names one version."""

    def __init__(
        self, dataset: _Located, before_write: Callable[[str], None] | None = None
    ) -> None:
        """``before_write(what)``, if given, runs before a tag is created, moved or
        deleted, and raises to refuse it (a handle in an atomic group does)."""
        self._ds = dataset
        self._store = dataset.handler.store
        self._before_write = before_write

    def _writing(self, what: str) -> None:
        if self._before_write is not None:
            self._before_write(f"tags.{what}()")

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not _TAG_RE.match(name) or name.endswith(TAG_FILE_SUFFIX):
            raise InvalidInputError(
                f"invalid tag name {name!r}: letters, digits, '.', '_', '-' (max 128)"
            )

    def _still_there(
        self, version: int, undo: Callable[[], None], before: ManifestLocation
    ) -> bool:
        """Whether ``version`` can be opened now that a tag names it: its location
        (row or listing) and the manifest object there, looked up afresh (no cache).
        The object at its final name (``before`` gives the naming) is asked for beside
        the location, so that both take one round trip when the location is that
        name. If not there, or if looking fails, ``undo`` takes the tag's change back
        first (a tag must never name a version cleanup may have removed).

        Raises:
            Whatever looking raised other than VersionNotFoundError, once undone.
        """
        final = layout.manifest_path(version, before.naming)
        final_there = run_beside(self._store, lambda: self._store.exists(final))
        try:
            location = self._ds.handler.location_of(version)
            if location.path == final:
                there = final_there.result()
            else:
                there = self._store.exists(location.path)
        except VersionNotFoundError:
            there = False
        except BaseException:
            undo()
            raise
        if not there:
            undo()
        return there

    def create(self, name: str, version: int) -> None:
        """Name ``version`` ``name``.

        A tag protects its version from cleanup from the moment this returns: after
        writing the tag it checks again that the version is still there, and if a
        cleanup removed it meanwhile, it deletes the tag and raises. (Cleanup makes
        the versions it removes unreadable first, then reads the tags again and puts
        back any version a tag now names; see
        :func:`s3ddb.maintenance.cleanup.cleanup_old_versions`.)

        Raises:
            InvalidInputError: bad name, a version that is not an int >= 1, or the
                tag already exists.
            VersionNotFoundError: no such version.
            DatasetNotFoundError: nothing is committed any more (dropped meanwhile).
            AtomicGroupError: the dataset is a handle of an atomic group (tags act
                at once).
        """
        self._writing("create")
        self._check_name(name)
        check_int("version", version, minimum=1)
        before = locate_version(self._ds.handler, version, self._ds.uri)
        body = json.dumps({"version": version}).encode()
        try:
            # Asked first as well: a store that ignores If-None-Match (where s3+ddb://
            # datasets live) would let the put move an existing tag.
            if self._store.exists(layout.tag_path(name)):
                raise FileExistsError(layout.tag_path(name))
            self._store.put_if_not_exists(layout.tag_path(name), body)
        except FileExistsError:
            raise InvalidInputError(f"tag {name!r} already exists in {self._ds.uri}") from None

        def undo() -> None:
            self._store.delete(layout.tag_path(name))

        if not self._still_there(version, undo, before):
            raise VersionNotFoundError(
                f"version {version} of {self._ds.uri} was removed by cleanup while tag "
                f"{name!r} was being created; the tag was not created"
            )

    def update(self, name: str, version: int) -> None:
        """Point the existing tag ``name`` at ``version``. As :meth:`create`, it checks
        again after writing; if cleanup removed ``version`` meanwhile, the tag points
        back at its previous version and this raises.

        Raises:
            InvalidInputError: bad name, or a version that is not an int >= 1.
            VersionNotFoundError: no such tag, or no such version.
            DatasetNotFoundError: as :meth:`create`.
            AtomicGroupError: as :meth:`create`.
        """
        self._writing("update")
        self._check_name(name)
        check_int("version", version, minimum=1)
        previous = self.get(name)
        before = locate_version(self._ds.handler, version, self._ds.uri)
        self._store.put(layout.tag_path(name), json.dumps({"version": version}).encode())
        back = json.dumps({"version": previous}).encode()

        def undo() -> None:
            self._store.put(layout.tag_path(name), back)

        if not self._still_there(version, undo, before):
            raise VersionNotFoundError(
                f"version {version} of {self._ds.uri} was removed by cleanup while tag "
                f"{name!r} was being moved to it; the tag still names version {previous}"
            )

    def delete(self, name: str) -> None:
        """Remove tag ``name``.

        Raises:
            VersionNotFoundError: there is no such tag.
            AtomicGroupError: as :meth:`create`.
        """
        self._writing("delete")
        self._check_name(name)
        self.get(name)
        self._store.delete(layout.tag_path(name))

    def get(self, name: str) -> int:
        """The version tag ``name`` points at.

        Raises:
            VersionNotFoundError: no such tag.
            StoredMetadataError: its file is not a valid tag (see
                :func:`read_tag_version`).
        """
        try:
            return read_tag_version(self._store, layout.tag_path(name))
        except FileNotFoundError:
            raise VersionNotFoundError(f"no tag {name!r} in {self._ds.uri}") from None

    def list(self) -> dict[str, int]:
        """Every tag and its version.

        Raises:
            StoredMetadataError: a tag file is not a valid tag.
        """
        out = {}
        for meta in self._store.list(f"{layout.TAGS_DIR}/"):
            name = tag_name_of(meta.path)
            if name is not None:
                out[name] = self.get(name)
        return out

    def get_version(self, tag: str) -> int:
        """pylance's name for :meth:`get`."""
        return self.get(tag)

    def resolve(self, name: str) -> int:
        self._check_name(name)
        return self.get(name)
