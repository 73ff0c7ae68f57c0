"""What a cleanup is about to delete, written down first: ``_cleanup/<id>.json``.

Cleanup deletes the final manifests of the versions it removes before their other
files, so that a reader finds each version whole or not at all. Once those manifests
are gone nothing else says which files those versions read; were cleanup interrupted
then, they would be left until they are older than the grace period. So before it
deletes anything, cleanup writes here the files that only the removed versions
referenced, and deletes the note once done. The next cleanup takes the notes older
than the claim window as files a removed version referenced, and deletes each that no
version it keeps references, however young.

It names their final manifests too: one an interrupted cleanup left without its row
(see :func:`s3ddb.maintenance.cleanup.cleanup_old_versions`) goes at once as well.

A note is read as untrusted input: a JSON object ``{"files": [...], "index_dirs":
[...], "manifests": [...]}`` of relative paths, each checked to stay inside the
dataset.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from s3ddb.errors import StoredMetadataError
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.io.paths import check_relative_path

__all__ = ["JOURNAL_DIR", "MAX_JOURNAL_BYTES", "Journal", "read_journals", "write_journal"]

#: Where cleanup's notes live, under the dataset root (Lance readers ignore it).
JOURNAL_DIR = "_cleanup"

#: The largest note read; a larger one is refused unread.
MAX_JOURNAL_BYTES = 256 * 1024 * 1024

_KEYS = ("files", "index_dirs", "manifests")


@dataclass
class Journal:
    """Files and index directories that versions a cleanup removed referenced, those
    versions' final manifests, and the notes that said so (``notes``: their paths)."""

    files: set[str] = field(default_factory=set)
    index_dirs: set[str] = field(default_factory=set)
    manifests: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def write_journal(store: ObjectStore, removed: Journal) -> str:
    """Write a note of ``removed`` (its ``notes`` aside); returns its path."""
    path = f"{JOURNAL_DIR}/{uuid.uuid4().hex}.json"
    body = {key: sorted(getattr(removed, key)) for key in _KEYS}
    store.put(path, json.dumps(body).encode())
    return path


def read_journals(
    store: ObjectStore, listed: Iterable[ObjectMeta], min_age: float, wall: float
) -> Journal:
    """The notes among ``listed`` last modified at least ``min_age`` seconds before
    ``wall`` (younger ones may be of a cleanup still running), merged.

    A note lists what versions already removed when it was written referred to, so a
    path it lists whose object (or, for an index directory, any object in it) was
    modified after the note is none of those: it is left out. A note planted (or
    left) naming a writer's file not committed yet can then not make cleanup delete
    it before its grace period, as it did.

    Raises:
        StoredMetadataError: a note is too large, or not such a JSON object; the
            message names it (delete it by hand: it only ever speeds cleanup up).
        PathOutsideDatasetError: a path in a note leaves the dataset.
    """
    listed = list(listed)
    modified = {m.path: m.modified for m in listed if m.modified is not None}
    # The newest modification in each directory (an index's ``_indices/<uuid>``).
    newest_in: dict[str, float] = {}
    for path, when in modified.items():
        directory = path.rsplit("/", 1)[0]
        newest_in[directory] = max(when, newest_in.get(directory, when))
    out = Journal()
    for meta in listed:
        if not meta.path.startswith(f"{JOURNAL_DIR}/") or not meta.path.endswith(".json"):
            continue
        if meta.modified is not None and wall - meta.modified < min_age:
            continue
        where = f"cleanup note {store.url}/{meta.path}"
        data = store.get_prefix(meta.path, MAX_JOURNAL_BYTES + 1)
        if len(data) > MAX_JOURNAL_BYTES:
            raise StoredMetadataError(f"{where} is larger than {MAX_JOURNAL_BYTES} bytes")
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise StoredMetadataError(f"{where} is not JSON: {str(exc)[:120]}") from None
        if not isinstance(body, dict):
            raise StoredMetadataError(f"{where} is not a JSON object")
        for key in _KEYS:
            into: set[str] = getattr(out, key)
            paths = body.get(key, [])
            if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                raise StoredMetadataError(f"{where}: {key} is not a list of paths")
            checked = [check_relative_path(p, store.url) for p in paths]
            into.update(
                p for p in checked if not _newer(p, key, meta.modified, modified, newest_in)
            )
        out.notes.append(meta.path)
    return out


def _newer(
    path: str,
    key: str,
    note_time: float | None,
    modified: Mapping[str, float],
    newest_in: Mapping[str, float],
) -> bool:
    """Whether ``path`` (listed under ``key`` in a note written at ``note_time``) was
    modified after the note: an index directory when any object directly in it was
    (``newest_in``: the newest modification per directory; an index's files lie
    directly in it)."""
    if note_time is None:
        return False
    if key == "index_dirs":
        return newest_in.get(path.rstrip("/"), note_time) > note_time
    return modified.get(path, note_time) > note_time
