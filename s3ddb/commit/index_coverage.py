"""Keeping index metadata true as fragments change.

An index covers a fragment only while the data file holding the indexed column is
the one it was built from. Every builder that derives the next manifest from the
previous one (all but Overwrite and Restore, which bring their own indices) passes
through :func:`drop_stale_coverage`: fragments that vanished (deleted whole,
compacted away) or whose indexed column now lives in another data file (an update
rewriting that column, a DataReplacement) leave the index's fragment set, and are
scanned from then on. Deleted rows need nothing: readers apply deletion files.
"""

from __future__ import annotations

from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.manifest import Manifest

__all__ = ["drop_stale_coverage", "file_holding"]


def file_holding(fragment: FragmentMetadata, field_id: int) -> str | None:
    """The data file of ``fragment`` that holds ``field_id``'s column, or None. (At
    most one does: a decoded fragment whose files share a field is refused.)"""
    holder = None
    for data_file in fragment.files:
        if field_id in data_file.fields:
            holder = data_file.path
    return holder


def drop_stale_coverage(base: Manifest, built: Manifest) -> Manifest:
    """``built`` with each index covering only fragments whose indexed columns are
    stored as in ``base``."""
    if not built.indices:
        return built
    before = {f.id: f for f in base.fragments}
    after = {f.id: f for f in built.fragments}
    indices = []
    changed = False
    for index in built.indices:
        kept = set()
        for fid in index.fragment_ids:
            old, new = before.get(fid), after.get(fid)
            if new is None:
                continue
            if old is not None and any(
                file_holding(old, f) != file_holding(new, f) for f in index.fields
            ):
                continue
            kept.add(fid)
        narrowed = index.covering(kept)
        changed |= narrowed is not index
        indices.append(narrowed)
    return built.evolve(indices=tuple(indices)) if changed else built
