"""The public surface of ``s3ddb`` (issue 34): ``s3ddb.__all__`` lists what users call
and catch, at most 60 names; every exception it exports is an ``S3DDBError``; the
operation classes live in ``s3ddb.operations`` and every error users may meet in
``s3ddb.errors``; the package exports ``__all__`` and nothing else (no name exported
before issue 34 stays an attribute), and what the README and docs call as
``s3ddb.<name>`` resolves."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import s3ddb
import s3ddb.errors
import s3ddb.operations
from s3ddb.errors import S3DDBError
from s3ddb.operations.kinds import OPERATIONS

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Every name ``s3ddb.__all__`` listed before issue 34 and no longer lists, with the
#: module it lives in: ``s3ddb.<name>`` is gone, the module's stays.
REMOVED = {
    **dict.fromkeys(
        [
            "Append",
            "Clone",
            "CreateIndex",
            "DataReplacement",
            "DataReplacementGroup",
            "Delete",
            "MapUpdate",
            "Merge",
            "Overwrite",
            "Project",
            "ReserveFragments",
            "Restore",
            "Rewrite",
            "RewriteGroup",
            "Update",
            "UpdateBases",
            "UpdateConfig",
            "UpdateMemWalState",
            "UpdateMode",
        ],
        "s3ddb.operations",
    ),
    "Atomic": "s3ddb.groups",
    "AtomicGroup": "s3ddb.groups",
    "BasePath": "s3ddb.format.bases",
    "DataFile": "s3ddb.fragment",
    "DatasetSchema": "s3ddb.format.schema",
    "IndexMetadata": "s3ddb.format.index",
    "KeptVersion": "s3ddb.maintenance.cleanup",
    "Scanner": "s3ddb.reading.scanner",
    # internal signals: users never meet them
    "VersionConflict": "s3ddb.commit.handlers",
    "InjectedFault": "s3ddb.errors",
    "FenceFailedError": "s3ddb.external_store.manifest_store",
    "VersionTakenError": "s3ddb.external_store.manifest_store",
    "ExternalStoreOutcomeUnknownError": "s3ddb.external_store.manifest_store",
    "GroupRefusedError": "s3ddb.external_store.manifest_store",
}
INTERNAL_SIGNALS = [
    "VersionConflict",
    "InjectedFault",
    "FenceFailedError",
    "VersionTakenError",
    "ExternalStoreOutcomeUnknownError",
    "GroupRefusedError",
]


def _is_exception(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def test_all_lists_at_most_60_names_each_once_and_each_resolves() -> None:
    assert len(s3ddb.__all__) <= 60, len(s3ddb.__all__)
    assert len(set(s3ddb.__all__)) == len(s3ddb.__all__)
    missing = [name for name in s3ddb.__all__ if not hasattr(s3ddb, name)]
    assert missing == []


def test_the_entry_points_are_exported() -> None:
    for name in ("dataset", "write_dataset", "Dataset", "LanceDataset", "LanceOperation",
                 "atomic", "snapshot", "fragment", "S3DDBError", "__version__"):  # fmt: skip
        assert name in s3ddb.__all__, name


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from s3ddb import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(s3ddb.__all__)


@pytest.mark.parametrize("module", [s3ddb, s3ddb.errors], ids=["s3ddb", "s3ddb.errors"])
def test_every_exported_exception_is_an_s3ddb_error(module: object) -> None:
    exported = {name: getattr(module, name) for name in module.__all__}  # type: ignore[attr-defined]
    errors = {name: value for name, value in exported.items() if _is_exception(value)}
    assert errors, "no exception exported"
    assert [name for name, value in errors.items() if not issubclass(value, S3DDBError)] == []


def test_s3ddb_errors_exports_every_error_it_defines_but_the_failpoints_signal() -> None:
    defined = {
        name
        for name, value in vars(s3ddb.errors).items()
        if _is_exception(value) and value.__module__ == "s3ddb.errors"
    }
    assert defined - set(s3ddb.errors.__all__) == {"InjectedFault"}


@pytest.mark.parametrize("name", INTERNAL_SIGNALS)
def test_internal_signals_are_not_exported(name: str) -> None:
    assert name not in s3ddb.__all__
    assert name not in s3ddb.errors.__all__
    assert _is_exception(getattr(importlib.import_module(REMOVED[name]), name))


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_removed_name_is_no_attribute_of_the_package_but_of_its_module(name: str) -> None:
    assert name not in s3ddb.__all__
    assert not hasattr(s3ddb, name)
    assert hasattr(importlib.import_module(REMOVED[name]), name)


@pytest.mark.parametrize("op", OPERATIONS, ids=[op.kind for op in OPERATIONS])
def test_every_operation_class_is_in_s3ddb_operations(op: type) -> None:
    assert op.__name__ in s3ddb.operations.__all__
    assert getattr(s3ddb.operations, op.__name__) is op
    assert op.__name__ not in s3ddb.__all__
    assert not hasattr(s3ddb, op.__name__)  # no old path


def test_what_the_docs_name_as_s3ddb_attributes_resolves() -> None:
    named: set[str] = set()
    for path in DOCS:
        text = path.read_text()
        # classes and errors, and the functions the examples call
        named.update(re.findall(r"(?<![\w.])(?:s3ddb|lance)\.([A-Z]\w*)", text))
        named.update(re.findall(r"(?<![\w.])(?:s3ddb|lance)\.([a-z_]\w*)\(", text))
        for names in re.findall(r"^from s3ddb import ([\w, ]+)$", text, re.MULTILINE):
            named.update(n.strip() for n in names.split(","))
    assert {"Dataset", "write_dataset", "atomic"} <= named
    assert sorted(name for name in named if not hasattr(s3ddb, name)) == []
