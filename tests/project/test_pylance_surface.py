"""pylance 14's surface beside s3ddb's (``import s3ddb as lance``).

Every public member of pylance's ``LanceDataset``, ``LanceScanner``,
``LanceFragment`` and ``MergeInsertBuilder``, and every argument of ``write_dataset`` and
``fragment.write_fragments``, is listed in docs/pylance.md's "Every pylance member"
with its status; s3ddb has each one listed as Yes or Differs, and refuses each one
listed as No with UnsupportedOperationError (never AttributeError or TypeError).
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import S3DDBError, UnsupportedOperationError

lance = pytest.importorskip("lance", reason="pylance is in the bench extra (make test installs it)")

DOC = Path(__file__).resolve().parents[2] / "docs" / "pylance.md"
STATUSES = {"Yes", "Differs", "No"}
ROW = re.compile(r"^\|\s*(?P<names>`[^|]+)\|\s*(?P<status>\w+)\s*\|")


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _arguments(function: Any) -> set[str]:
    return set(inspect.signature(function).parameters)


#: Each documented surface: pylance's names, and the heading of its table.
SURFACES = {
    "LanceDataset": lambda: _public(lance.LanceDataset),
    "LanceScanner": lambda: _public(lance.LanceScanner),
    "LanceFragment": lambda: _public(lance.fragment.LanceFragment),
    "MergeInsertBuilder": lambda: _public(
        importlib.import_module("lance.dataset").MergeInsertBuilder
    ),
    "write_dataset": lambda: _arguments(lance.write_dataset),
    "fragment.write_fragments": lambda: _arguments(lance.fragment.write_fragments),
}


def _documented() -> dict[str, dict[str, str]]:
    """{surface: {member: status}} from the doc's "Every pylance member" tables."""
    text = DOC.read_text().split("## Every pylance member", 1)[1]
    tables: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            break
        if line.startswith("### "):
            current = tables.setdefault(line[4:].strip().strip("`"), {})
            continue
        match = ROW.match(line)
        if match and current is not None:
            for name in re.findall(r"`([A-Za-z_]\w*)`", match["names"]):
                assert name not in current, f"{name} is listed twice"
                current[name] = match["status"]
    return tables


def test_the_doc_lists_every_pylance_member_with_a_status() -> None:
    documented = _documented()
    assert set(documented) == set(SURFACES)
    for surface, members in SURFACES.items():
        listed = documented[surface]
        missing = sorted(members() - set(listed))
        extra = sorted(set(listed) - members())
        assert (missing, extra) == ([], []), f"{surface}: missing {missing}, not in pylance {extra}"
        assert set(listed.values()) <= STATUSES, surface


def _refuses(obj: Any, name: str) -> bool:
    """Whether ``obj.name`` (read, or called without arguments) raises
    UnsupportedOperationError."""
    try:
        member = getattr(obj, name)
        member()
    except UnsupportedOperationError:
        return True
    return False


@pytest.fixture
def lance_dataset(tmp_path: Path) -> Any:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1, 2, 3], "kind": ["a", "b", "c"]}), uri)
    return s3ddb.LanceDataset(uri)


def _objects(ds: Any) -> dict[str, Any]:
    return {
        "LanceDataset": ds,
        "LanceScanner": ds.scanner(),
        "LanceFragment": ds.get_fragment(0),
        "MergeInsertBuilder": ds.merge_insert("id"),
    }


@pytest.mark.parametrize(
    "surface", ["LanceDataset", "LanceScanner", "LanceFragment", "MergeInsertBuilder"]
)
def test_members_are_implemented_or_refused(lance_dataset: Any, surface: str) -> None:
    obj = _objects(lance_dataset)[surface]
    for name, status in _documented()[surface].items():
        if status == "No":
            assert _refuses(obj, name), f"{surface}.{name} does not refuse"
        else:
            inspect.getattr_static(obj, name)  # defined by s3ddb (AttributeError if not)


#: Values of pylance's arguments that differ from its defaults (to check refusals).
def _non_default(parameter: inspect.Parameter) -> Any:
    return object() if parameter.default is not True else False


@pytest.mark.parametrize("surface", ["write_dataset", "fragment.write_fragments"])
def test_write_arguments_are_accepted_or_refused(tmp_path: Path, surface: str) -> None:
    ours = s3ddb.write_dataset if surface == "write_dataset" else s3ddb.fragment.write_fragments
    theirs = lance.write_dataset if surface == "write_dataset" else lance.fragment.write_fragments
    parameters = inspect.signature(theirs).parameters
    table = pa.table({"id": [1, 2]})
    for number, (name, status) in enumerate(_documented()[surface].items()):
        parameter = parameters[name]
        if name in ("data_obj", "data", "uri", "dataset_uri"):
            continue  # every call passes them first, by position
        uri = str(tmp_path / f"ds{number}")
        if status == "No":
            with pytest.raises(UnsupportedOperationError, match=name):
                ours(table, uri, **{name: _non_default(parameter)})
        else:
            ours(table, uri, **{name: parameter.default})  # pylance's default is accepted


#: Values for the arguments s3ddb's methods require, to reach their option checks.
REQUIRED_ARGUMENTS: dict[str, Any] = {
    "updates": {"id": "id + 1"},
    "values": {"id": "id + 1"},
    "column": "id",
    "index_type": "BTREE",
    "transforms": {"twice": "id * 2"},
    "indices": [0],
    "on": "id",
    "keys": ["absent"],
}
_CLASSES = {
    "LanceDataset": lambda: lance.LanceDataset,
    "LanceScanner": lambda: lance.LanceScanner,
    "LanceFragment": lambda: lance.fragment.LanceFragment,
}


def _pylance_methods(surface: str) -> list[tuple[str, inspect.Signature]]:
    """The methods of ``surface`` that docs/pylance.md lists as Yes or Differs, with
    pylance's signatures."""
    cls = _CLASSES[surface]()
    methods = []
    for name, status in _documented()[surface].items():
        member = inspect.getattr_static(cls, name)
        if status == "No" or isinstance(member, property) or not callable(getattr(cls, name)):
            continue
        try:
            methods.append((name, inspect.signature(getattr(cls, name))))
        except ValueError:  # a compiled member without a signature
            continue
    return methods


@pytest.mark.parametrize("surface", ["LanceDataset", "LanceScanner", "LanceFragment"])
def test_every_pylance_argument_of_a_method_is_accepted_or_refused(
    tmp_path: Path, surface: str
) -> None:
    """Each argument of pylance's methods is s3ddb's too (pylance's default accepted),
    or, given another value, is taken as a hint, checked (InvalidInputError) or refused
    (UnsupportedOperationError): never a TypeError or AttributeError from an argument
    s3ddb does not know."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1, 2, 3]}), uri)
    targets = iter(range(10_000))
    failures = []
    for name, theirs in _pylance_methods(surface):
        for argument, parameter in theirs.parameters.items():
            if argument == "self" or parameter.kind in (
                parameter.VAR_KEYWORD,
                parameter.VAR_POSITIONAL,
            ):
                continue
            ds = s3ddb.LanceDataset(uri)
            obj = _objects(ds)[surface]
            method = getattr(obj, name)
            ours = inspect.signature(method).parameters
            if name in ("commit", "drop"):
                continue  # static: test_write_arguments_are_accepted_or_refused's kind
            if argument in ours and (argument in REQUIRED_ARGUMENTS or argument == "target_path"):
                continue  # the argument every call passes
            call: dict[str, Any] = {}
            for required, p in ours.items():
                if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                    if required in ("target", "target_path", "base_uri"):
                        call[required] = str(tmp_path / f"clone{next(targets)}")
                    else:
                        call[required] = REQUIRED_ARGUMENTS.get(required)
            if argument in ours:  # named by s3ddb: pylance's default is accepted
                call[argument] = None if parameter.default is parameter.empty else parameter.default
            else:  # taken by **options: used as a hint, checked, or refused
                call[argument] = object() if parameter.default is not True else False
            try:
                method(**call)
            except (TypeError, AttributeError) as exc:
                failures.append(f"{surface}.{name}({argument}=...): {type(exc).__name__}: {exc}")
            except S3DDBError:
                pass  # checked or refused in s3ddb's words
    assert failures == [], "\n".join(failures)


def test_lance_dataset_clones_take_pylance_arguments(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1, 2]}), uri)
    s3ddb.write_dataset(pa.table({"id": [3]}), uri, mode="append")
    ds = s3ddb.LanceDataset(uri)
    shallow = ds.shallow_clone(target_path=str(tmp_path / "shallow"), reference=1)
    deep = ds.deep_clone(str(tmp_path / "deep"), (None, 2))
    assert isinstance(shallow, s3ddb.LanceDataset)
    assert shallow.to_table()["id"].to_pylist() == [1, 2]
    assert sorted(deep.to_table()["id"].to_pylist()) == [1, 2, 3]
    with pytest.raises(UnsupportedOperationError, match="branch"):
        ds.shallow_clone(str(tmp_path / "branch"), ("main", 1))
    with pytest.raises(s3ddb.InvalidInputError, match="commit_timeout"):
        s3ddb.LanceDataset.commit(uri, s3ddb.operations.Restore(1), 2, commit_timeout=30)
