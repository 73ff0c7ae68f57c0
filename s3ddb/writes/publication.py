"""Turning the publication of open formats (Iceberg, Delta) on and off, and
publishing again (see :mod:`s3ddb.open_formats.publisher`)."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from s3ddb.errors import InvalidInputError, OpenFormatError
from s3ddb.format.bases import FileResolver
from s3ddb.format.manifest import Manifest
from s3ddb.format.schema import DatasetSchema
from s3ddb.open_formats.cast_hints import MAX_HINTED, describe_casts, publishable_casts
from s3ddb.open_formats.column_names import misnamed_columns
from s3ddb.open_formats.publisher import (
    CONFIG_KEY,
    Rebuilt,
    by_name_formats,
    enabled_formats,
    forget_states,
    formats_config,
    parse_formats,
    publish_version,
    published_schema,
    rebuild_formats,
    writer_of,
)
from s3ddb.operations import Operation, UpdateConfig
from s3ddb.versions.pinned import PinnedVersion, plan_and_commit
from s3ddb.writes.schema_evolution import is_safe_cast, plan_rewrite_under_current_names

__all__ = [
    "check_schema",
    "disable_open_formats",
    "enable_open_formats",
    "open_formats_config",
    "publish_open_formats",
    "rebuild_open_formats",
]


def open_formats_config(formats: Iterable[str] | str | None) -> dict[str, str]:
    """The config a new dataset publishing ``formats`` starts with ({} for none).

    Raises:
        OpenFormatError: an unknown format.
    """
    parsed = parse_formats(formats)
    return {CONFIG_KEY: formats_config(parsed)} if parsed else {}


def check_schema(schema: pa.Schema | DatasetSchema, formats: Iterable[str] | str | None) -> None:
    """Refuse ``schema`` (a dataset's, or new data's, whose fields get ids in order)
    if a column has no exact counterpart in one of ``formats``: checked before any
    data file is written.

    Raises:
        OpenFormatError: naming the format and the column, and, where a cast makes
            it publishable (a pandas datetime column's timestamp[ns] to
            timestamp[us], say), that cast.
    """
    names = parse_formats(formats)
    if not names:
        return
    new_data = isinstance(schema, pa.Schema)
    if isinstance(schema, pa.Schema):
        schema = DatasetSchema.assign(schema)
    arrow = published_schema(schema)
    for name in names:
        problem = writer_of(name).type_problem(arrow)
        if problem is not None:
            fix = _cast_hint(arrow, name, new_data)
            raise OpenFormatError(f"cannot publish as {name}: {problem}{fix}")


def _cast_hint(arrow: pa.Schema, name: str, new_data: bool) -> str:
    """The casts that make ``arrow``'s refused top-level columns publishable as
    ``name`` (:func:`~s3ddb.open_formats.cast_hints.publishable_casts`), as a sentence
    to append to the refusal; "" when no cast does."""
    casts = publishable_casts(arrow, writer_of(name))
    if not casts:
        return ""
    listed = describe_casts(casts)
    if not new_data:
        how = "write the dataset again with them cast (mode='overwrite')"
        if all(is_safe_cast(old, new) for _, old, new in casts):
            how = "alter_columns with data_type then optimize.compact_files(), or " + how
        return f". Fix: cast {listed}: {how}"
    pandas = [
        f"df[{c!r}] = df[{c!r}].astype('datetime64[us{', ' + t.tz if t.tz else ''}]')"
        for c, _, t in casts[:MAX_HINTED]
        if pa.types.is_timestamp(t)
    ]
    example = f" (pandas: {'; '.join(pandas)})" if pandas else ""
    return f". Fix: cast {listed} before writing{example}"


def enable_open_formats(ds: PinnedVersion, formats: Iterable[str] | str) -> tuple[str, ...]:
    """Commit a config change adding ``formats`` to what the dataset publishes; the
    version it makes is the first published in them. Returns every format the
    dataset now publishes.

    Turning on a format whose readers find columns by name (Delta) first writes
    again, in a version of their own, the data files that name a column otherwise
    than the schema (written before a rename, see
    :mod:`s3ddb.open_formats.column_names`).

    Raises:
        OpenFormatError: an unknown format, a column type a format cannot hold, or a
            fragment of several data files (compact the dataset first); nothing was
            committed. Also when a rename was committed meanwhile, after the files
            were checked: run it again.
        InvalidInputError: no format given.
    """
    wanted = parse_formats(formats)
    if not wanted:
        raise InvalidInputError("enable_open_formats: name at least one format (iceberg, delta)")
    if by_name_formats(wanted):
        _write_files_under_current_names(ds, wanted)

    def plan(manifest: Manifest) -> tuple[Operation | None, tuple[str, ...]]:
        now = enabled_formats(manifest)
        together = parse_formats([*now, *wanted])
        if together == now:
            return None, now
        check_schema(manifest.schema, together)
        value = formats_config(together)
        return UpdateConfig(config_upsert={CONFIG_KEY: value}), together

    return plan_and_commit(ds, "enable_open_formats", plan, None, None)


def _write_files_under_current_names(ds: PinnedVersion, wanted: tuple[str, ...]) -> None:
    """Before a format whose readers find columns by name (Delta) is turned on:
    commit a Merge writing again the fragments whose data files name a column
    otherwise than the schema (nothing if there are none, if every such format of
    ``wanted`` is on already, or if a fragment has several data files: the enabling
    commit refuses those, and compaction writes them under the current names).

    Raises:
        OpenFormatError: a column type a format cannot hold (nothing is written).
    """
    store = ds.handler.store

    def plan(manifest: Manifest) -> tuple[Operation | None, None]:
        now = enabled_formats(manifest)
        if set(by_name_formats(wanted)) <= set(now):
            return None, None
        check_schema(manifest.schema, parse_formats([*now, *wanted]))
        fragments = list(manifest.fragments)
        if any(len(f.files) != 1 for f in fragments):
            return None, None
        files = FileResolver.for_manifest(store, manifest)
        misnamed = misnamed_columns(files, fragments, manifest.schema)
        if not misnamed:
            return None, None
        ids = {m.fragment_id for m in misnamed}
        return plan_rewrite_under_current_names(store, manifest, ids), None

    plan_and_commit(ds, "enable_open_formats", plan, None, None)


def disable_open_formats(ds: PinnedVersion) -> None:
    """Commit a config change that stops publication (what was published stays, for
    the versions it stands for, until cleanup removes them)."""

    def plan(manifest: Manifest) -> tuple[Operation | None, None]:
        if CONFIG_KEY not in manifest.config:
            return None, None
        return UpdateConfig(config_delete=(CONFIG_KEY,)), None

    plan_and_commit(ds, "disable_open_formats", plan, None, None)


def publish_open_formats(ds: PinnedVersion) -> tuple[str, ...]:
    """Publish ``ds``'s version again in the formats it enables, with the versions
    before it that are missing (after a failure that was logged, say). Writes the
    same bytes a finisher would. Returns the formats published (none when the
    dataset publishes none).

    Raises:
        What reading the dataset or writing its store raised.
    """
    manifest = ds.manifest
    forget_states()  # read where each format stands from its files
    return publish_version(ds.handler.store, manifest, ds.handler.manifest_if_kept)


def rebuild_open_formats(ds: PinnedVersion) -> Rebuilt:
    """Republish ``ds``'s version and the kept versions before it that publish the
    same formats (across stretches with publication disabled) from the manifests
    alone, replacing whatever the published files
    hold (damaged, planted, another engine's commits) and deleting the published
    files no kept version writes (:func:`~s3ddb.open_formats.publisher.rebuild_formats`).

    Raises:
        What reading the dataset or writing its store raised.
    """
    handler = ds.handler
    # The history, and tagged versions (kept across removed ones) whichever way it
    # lists them.
    kept = {location.version for location in handler.list_locations(1, ds.version)}
    kept |= set(ds.tags.list().values())
    return rebuild_formats(handler.store, ds.manifest, handler.manifest_if_kept, kept=kept)
