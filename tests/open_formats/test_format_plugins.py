"""Open formats are plug-ins (s3ddb.open_formats.model.OpenFormat): every format in the
tuple s3ddb.open_formats.plugins.FORMATS implements the whole protocol; a third format
planted in that tuple, and nowhere else, is published on commit, cleaned by cleanup
and checked by verify; and scripts/structure.py refuses a format named by a string
outside open_formats/."""

from __future__ import annotations

import ast
import datetime as dt
import functools
import importlib.util
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import OpenFormatError, PublishedStateError
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.maintenance.verify import verify
from s3ddb.open_formats import plugins
from s3ddb.open_formats.model import (
    DeletedPositions,
    FormatWriter,
    OpenFormat,
    Publication,
    Retention,
    TableVersion,
)
from s3ddb.open_formats.publisher import forget_states

ROOT = Path(__file__).resolve().parents[2]
# What s3ddb itself writes under a dataset root: no format may publish there.
S3DDB_DIRS = ("data/", "_versions/", "_deletions/", "_transactions/", "_indices/")


# --- the protocol --------------------------------------------------------------------


def _protocol_members(protocol: type) -> dict[str, Any]:
    """The attributes (name: annotation) and methods (name: function) a class must have
    to implement ``protocol``, its base protocols' included."""
    members: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        members.update(inspect.get_annotations(cls))
        members.update(
            (name, value)
            for name, value in vars(cls).items()
            if inspect.isfunction(value) and not name.startswith("_")
        )
    return members


def test_the_protocol_holds_what_the_rest_of_s3ddb_asks_a_format() -> None:
    members = _protocol_members(OpenFormat)
    assert set(_protocol_members(FormatWriter)) <= set(members)
    assert {
        "name",
        "title",
        "prefixes",
        "publishes_apart",
        "reads_columns_by_name",
        "type_problem",
        "load_state",
        "refresh_state",
        "state_problems",
        "kept_checker",
        "publish",
        "published_paths",
        "reader_location",
        "foreign_problems",
        "retire",
    } <= set(members)


def _check_implements(plugin: object) -> None:
    """Every member of OpenFormat on ``plugin``: attributes of the annotated type,
    methods taking the protocol's parameters, by name, in order (and optional
    keyword-only ones of their own)."""
    for name, member in _protocol_members(OpenFormat).items():
        assert hasattr(plugin, name), f"{type(plugin).__name__} lacks {name}"
        value = getattr(plugin, name)
        if inspect.isfunction(member):
            assert callable(value), name
            wanted = list(inspect.signature(member).parameters)[1:]  # self aside
            # Optional keyword-only parameters beyond the protocol's are the plug-in's
            # own (IcebergWriter.load_state's metadata): callers of the protocol never
            # pass them.
            has = [
                p.name
                for p in inspect.signature(value).parameters.values()
                if not (p.kind is p.KEYWORD_ONLY and p.default is not p.empty) or p.name in wanted
            ]
            assert has == wanted, name
        else:
            kind = {"str": str, "bool": bool, "tuple[str, ...]": tuple}[member]
            assert isinstance(value, kind), f"{type(plugin).__name__}.{name}: {value!r}"


def test_every_format_in_the_tuple_implements_the_whole_protocol() -> None:
    assert len(plugins.FORMATS) >= 2
    for plugin in plugins.FORMATS:
        _check_implements(plugin)
        assert re.fullmatch(r"[a-z][a-z0-9_]*", plugin.name), plugin.name
        assert plugin.prefixes and all(p.endswith("/") for p in plugin.prefixes)
        assert not any(p.startswith(S3DDB_DIRS) for p in plugin.prefixes), plugin.name
    names = [p.name for p in plugins.FORMATS]
    assert len(set(names)) == len(names)
    prefixes = [prefix for plugin in plugins.FORMATS for prefix in plugin.prefixes]
    assert not any(a != b and b.startswith(a) for a in prefixes for b in prefixes), (
        "two formats publish under one prefix"
    )


def test_a_class_missing_a_member_is_refused_by_that_check() -> None:
    class Partial:
        name = "partial"
        title = "Partial"
        prefixes = ("_partial/",)
        publishes_apart = True
        reads_columns_by_name = False

    with pytest.raises(AssertionError, match="lacks"):
        _check_implements(Partial())


# --- a planted third format ------------------------------------------------------------

LISTING_DIR = "_listing"
_LISTING_NAME = re.compile(rf"{LISTING_DIR}/(\d{{20}})\.json")


def _listing_path(version: int) -> str:
    return f"{LISTING_DIR}/{version:020d}.json"


def _listing(table: TableVersion) -> bytes:
    files = sorted(
        (f.path, f.size, f.physical_rows, f.deletion_key, f.deleted_rows) for f in table.all_files()
    )
    return json.dumps({"version": table.version, "files": files}).encode()


class ListingFormat:
    """A format that publishes each version as a JSON listing of its data files, under
    its own prefix: the smallest plug-in. Its state is the version it published."""

    name = "listing"
    title = "Listing"
    prefixes = (f"{LISTING_DIR}/",)
    publishes_apart = True
    reads_columns_by_name = False

    def type_problem(self, schema: pa.Schema) -> str | None:
        return None

    def load_state(self, store: ObjectStore, expected: TableVersion) -> Any | None:
        path = _listing_path(expected.version)
        if not store.exists(path):
            return None
        if store.head(path).size > 1 << 20 or store.get(path) != _listing(expected):
            raise PublishedStateError(f"{path}: not the listing of the manifest", path=path)
        return expected.version

    def refresh_state(
        self, store: ObjectStore, state: Any, now_ms: int, kept: Callable[[int], bool]
    ) -> Any:
        return state

    def state_problems(self, store: ObjectStore, expected: TableVersion) -> list[str]:
        try:
            self.load_state(store, expected)
        except PublishedStateError as exc:
            return [str(exc)]
        return []

    def kept_checker(
        self, store: ObjectStore, listed: Iterable[ObjectMeta]
    ) -> Callable[[TableVersion], list[str]]:
        return functools.partial(self.state_problems, store)

    def publish(
        self, table: TableVersion, previous: Any | None, deleted: DeletedPositions
    ) -> tuple[Publication, Any]:
        return Publication(then=[(_listing_path(table.version), _listing(table))]), table.version

    def published_paths(self, version: int) -> list[str]:
        return [_listing_path(version)]

    def reader_location(self, root: str, version: int) -> str:
        return f"{root}/{_listing_path(version)}"

    def foreign_problems(self, store: ObjectStore, newest_version: int) -> list[tuple[str, str]]:
        problems = []
        for meta in store.list(f"{LISTING_DIR}/"):
            match = _LISTING_NAME.fullmatch(meta.path)
            if match is None or int(match.group(1)) > newest_version:
                problems.append((meta.path, "not a listing s3ddb writes"))
        return problems

    def retire(self, store: ObjectStore, retention: Retention) -> list[ObjectMeta]:
        doomed = []
        for meta in retention.listed:
            match = _LISTING_NAME.fullmatch(meta.path)
            if match is None:
                continue
            version = int(match.group(1))
            if version in retention.gone.versions and version not in retention.keep.versions:
                doomed.append(meta)
        return doomed


@pytest.fixture
def listing_format(monkeypatch: pytest.MonkeyPatch) -> Iterator[ListingFormat]:
    """The listing format added to the tuple of formats, and nothing else changed."""
    plugin = ListingFormat()
    monkeypatch.setattr(plugins, "FORMATS", (*plugins.FORMATS, plugin))
    forget_states()
    yield plugin
    forget_states()


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids]})


def _listed(uri: str) -> dict[int, dict[str, Any]]:
    folder = Path(uri, LISTING_DIR)
    if not folder.exists():
        return {}
    out = {}
    for path in sorted(folder.iterdir()):
        match = _LISTING_NAME.fullmatch(f"{LISTING_DIR}/{path.name}")
        assert match is not None, path
        out[int(match.group(1))] = json.loads(path.read_text())
    return out


def test_the_planted_format_implements_the_protocol() -> None:
    _check_implements(ListingFormat())


def test_a_planted_format_is_published_cleaned_and_verified(
    tmp_path: Path, listing_format: ListingFormat, instant_cleanup: None
) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 5), uri, open_formats=["listing"])
    assert ds.open_formats == ("listing",)
    ds.insert(_table(5, 5))
    ds.delete("id < 2")
    ds.insert(_table(10, 5))
    assert ds.version == 4

    # Published on commit: one listing per version, of exactly that version's files.
    listed = _listed(uri)
    assert sorted(listed) == [1, 2, 3, 4]
    for version, listing in listed.items():
        assert listing["version"] == version
        live = sum(row[2] - row[4] for row in listing["files"])
        assert live == ds.checkout_version(version).count_rows(), version
        deleted = sum(row[4] for row in listing["files"])
        assert deleted == (2 if version >= 3 else 0), version
    assert not Path(uri, "metadata").exists() and not Path(uri, "_delta_log").exists()
    assert verify(uri, grace_seconds=0).healthy, verify(uri).problems

    # Cleaned: the listings of removed versions go, the kept ones stay as they were.
    kept_bytes = {v: Path(uri, _listing_path(v)).read_bytes() for v in (3, 4)}
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    assert stats.versions_removed == [1, 2]
    assert sorted(_listed(uri)) == [3, 4]
    assert {v: Path(uri, _listing_path(v)).read_bytes() for v in (3, 4)} == kept_bytes
    assert stats.files["open_format_files"] == 2
    assert verify(uri, grace_seconds=0).healthy, verify(uri).problems

    # Verified: a damaged listing, a foreign file and a missing newest listing.
    Path(uri, _listing_path(4)).write_text('{"version": 4, "files": []}')
    problems = {(p.kind, p.path) for p in verify(uri, grace_seconds=0).problems}
    assert problems == {("damaged_open_format_state", _listing_path(4))}
    Path(uri, _listing_path(4)).write_bytes(kept_bytes[4])
    Path(uri, LISTING_DIR, "planted.txt").write_text("another engine")
    found = verify(uri, grace_seconds=0).problems
    assert [p.kind for p in found] == ["foreign_open_format_commit"], found
    assert found[0].path == f"{LISTING_DIR}/planted.txt"
    assert found[0].meaning.startswith("not a listing s3ddb writes: ")
    Path(uri, LISTING_DIR, "planted.txt").unlink()
    Path(uri, _listing_path(4)).unlink()
    problems = {(p.kind, p.path) for p in verify(uri, grace_seconds=0).problems}
    assert problems == {("unpublished_version", _listing_path(4))}

    # Published again on request, and the next commit builds on it.
    reopened = s3ddb.dataset(uri)
    assert reopened.publish_open_formats() == ("listing",)
    assert Path(uri, _listing_path(4)).read_bytes() == kept_bytes[4]
    reopened.insert(_table(20, 1))
    assert sorted(_listed(uri)) == [3, 4, 5]


def test_without_the_plug_in_in_the_tuple_the_name_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(OpenFormatError, match="unknown open format 'listing'"):
        s3ddb.write_dataset(_table(0, 1), str(tmp_path / "ds"), open_formats=["listing"])


# --- the structure check -----------------------------------------------------------------


def _structure() -> ModuleType:
    spec = importlib.util.spec_from_file_location("structure_script", ROOT / "scripts/structure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _with_module(structure: ModuleType, modules: dict[str, Any], name: str, text: str) -> None:
    path = ROOT / (name.replace(".", "/") + ".py")
    modules[name] = structure.Module(name, path, False, ast.parse(text), text.count("\n"))


def test_the_structure_check_refuses_a_format_named_by_a_string() -> None:
    structure = _structure()
    check = structure._format_names_outside_open_formats
    modules = structure._modules(ROOT / "s3ddb")
    assert check("s3ddb", modules) == []

    planted = dict(modules)
    _with_module(structure, planted, "s3ddb.cli.planted", 'WHICH = ("parquet", "Delta")\n')
    problems = check("s3ddb", planted)
    assert len(problems) == 1, problems
    assert re.search(r"cli/planted\.py:1: the open format 'Delta'", problems[0])

    # Sentences are not names; the format's own package may name it.
    fine = dict(modules)
    _with_module(structure, fine, "s3ddb.cli.planted", '"""Publishes iceberg and delta."""\n')
    _with_module(structure, fine, "s3ddb.open_formats.planted", 'X = "iceberg"\n')
    assert check("s3ddb", fine) == []


def test_the_structure_check_guards_the_name_of_a_format_added_to_the_tuple() -> None:
    structure = _structure()
    check = structure._format_names_outside_open_formats
    modules = structure._modules(ROOT / "s3ddb")
    source = (ROOT / "s3ddb/open_formats/plugins.py").read_text()
    added = source.replace("DeltaWriter())", "DeltaWriter(), ListingFormat())")
    assert added != source
    _with_module(structure, modules, "s3ddb.open_formats.plugins", added)
    _with_module(
        structure,
        modules,
        "s3ddb.open_formats.listing",
        'class ListingFormat:\n    name = "listing"\n',
    )
    _with_module(structure, modules, "s3ddb.maintenance.planted", 'if x == "listing": ...\n')
    problems = check("s3ddb", modules)
    assert len(problems) == 1, problems
    assert "maintenance/planted.py:1: the open format 'listing'" in problems[0]
