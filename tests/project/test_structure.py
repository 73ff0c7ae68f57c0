"""scripts/structure.py (run by ``make lint``) finds each kind of structure problem in
planted packages, passes the real one, and docs/architecture.md states its layers."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "structure.py"


def _structure() -> ModuleType:
    spec = importlib.util.spec_from_file_location("structure_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    # A child process: the planted package is also named s3ddb, and the script imports it.
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root.parent,
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_package_has_no_structure_problem() -> None:
    result = _run(ROOT / "s3ddb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "structure: 0 problem(s)" in result.stdout


def test_a_planted_package_shows_every_kind_of_problem(tmp_path: Path) -> None:
    root = tmp_path / "s3ddb"
    ok = "__all__: list[str] = []\n"
    _write(
        root,
        {
            # the exports: 61 names, an exception that is no S3DDBError, an internal signal
            "__init__.py": (
                "from s3ddb.commit.handlers import VersionConflict\n"
                "from s3ddb.errors import Exported, Plain\n"
                + "".join(f"x{i} = {i}\n" for i in range(58))
                + "__all__ = ['Exported', 'Plain', 'VersionConflict'] + "
                "[f'x{i}' for i in range(58)]\n"
            ),
            "errors.py": (
                "__all__ = ['Exported', 'Plain', 'S3DDBError']\n"
                "class S3DDBError(Exception): ...\n"
                "class Exported(S3DDBError): ...\n"
                "class Plain(Exception): ...\n"
                "class Forgotten(S3DDBError): ...\n"
            ),
            # an internal signal (structure.INTERNAL_EXCEPTIONS) that no __all__ lists
            "commit/handlers.py": ok + "class VersionConflict(Exception): ...\n",
            "io/__init__.py": ok,
            # a cycle through a lazy import; a TYPE_CHECKING import does not count
            "io/a.py": ok + "import s3ddb.io.b\ndef _helper() -> None: ...\n",
            "io/b.py": ok + "def f() -> None:\n    import s3ddb.io.a\n",
            "io/typed.py": ok
            + "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import s3ddb.commit.x\n",
            # a lower layer importing a higher one
            "io/upward.py": ok + "import s3ddb.commit.x\n",
            "commit/__init__.py": ok,
            "commit/x.py": ok,
            # a private name across packages, and from a private module
            "format/__init__.py": ok,
            "format/d.py": ok
            + "from s3ddb.io.a import _helper\nfrom s3ddb.commit import _internal\n",
            "commit/_internal.py": "",
            # no __all__
            "format/bare.py": "x = 1\n",
            # too long
            "format/long.py": ok + "x = 1\n" * (_structure().MAX_MODULE_LINES + 1),
            # nine modules at the top (with __init__ and errors)
            **{f"top{i}.py": ok for i in range(7)},
            # in no layer
            "stray.py": ok,
        },
    )
    result = _run(root)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "import cycle: s3ddb.io.a -> s3ddb.io.b" in out
    assert "typed.py" not in out
    assert re.search(r"upward\.py:\d+: layer s3ddb\.io imports s3ddb\.commit\.x", out)
    assert re.search(r"d\.py:\d+: private name across packages: s3ddb\.io\.a\._helper", out)
    assert re.search(r"d\.py:\d+: private name across packages: s3ddb\.commit\._internal", out)
    assert "format/bare.py: a public module without __all__" in out
    limit = _structure().MAX_MODULE_LINES
    assert re.search(rf"format/long\.py: {limit + 2} lines \(at most {limit}\)", out)
    assert re.search(r"1[01] modules directly under s3ddb/", out)
    assert "stray.py: s3ddb.stray is in no layer of LAYERS" in out
    assert "s3ddb.__all__ has 61 names (at most 60)" in out
    assert "s3ddb.__all__: Plain is not an s3ddb.errors.S3DDBError" in out
    assert "s3ddb.errors.__all__: Plain is not an s3ddb.errors.S3DDBError" in out
    assert "s3ddb.__all__: VersionConflict is not an s3ddb.errors.S3DDBError" in out
    assert "s3ddb.__all__: VersionConflict is an internal signal" in out
    assert (
        "s3ddb.errors.Forgotten: a public exception neither in s3ddb.errors.__all__ "
        "nor in INTERNAL_EXCEPTIONS"
    ) in out
    assert "Exported" not in out
    assert "commit.handlers.VersionConflict: a public exception" not in out
    assert "INTERNAL_EXCEPTIONS names s3ddb.commit.handlers.VersionConflict" not in out
    # errors.py defines no InjectedFault: the list names a class that is gone; the
    # modules the planted package lacks are not reported
    assert "INTERNAL_EXCEPTIONS names s3ddb.errors.InjectedFault, which is not defined" in out
    assert "INTERNAL_EXCEPTIONS names s3ddb.external_store" not in out


def test_a_private_attribute_used_across_packages_is_a_problem(tmp_path: Path) -> None:
    root = tmp_path / "s3ddb"
    ok = "__all__: list[str] = []\n"
    files = {
        "__init__.py": ok,
        "io/__init__.py": ok,
        "commit/__init__.py": ok,
        # a class of s3ddb.io with a private class attribute, method and field
        "io/state.py": (
            "__all__ = ['Handle']\n"
            "class Handle:\n"
            "    _limit = 3\n"
            "    def __init__(self) -> None:\n"
            "        self._pinned = 1\n"
            "    def _move(self) -> None:\n"
            "        self._pinned += self._limit\n"
        ),
        # its own package may use them
        "io/friend.py": ok + "from s3ddb.io.state import Handle\nHandle()._move()\n",
        # another package's own private names, and names no s3ddb class defines
        "commit/clean.py": ok
        + "from collections import namedtuple\n"
        + "class Own:\n"
        + "    def __init__(self) -> None:\n"
        + "        self._mine = 0\n"
        + "def use(o: Own) -> None:\n"
        + "    o._mine += 1\n"
        + "    namedtuple('P', 'a')(1)._replace(a=2)\n",
    }
    _write(root, files)
    clean = _run(root)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "structure: 0 problem(s)" in clean.stdout

    _write(
        root,
        {
            "commit/user.py": ok
            + "from s3ddb.io.state import Handle\n"
            + "def use(h: Handle) -> None:\n"
            + "    h._pinned = 2\n"
            + "    h._move()\n"
            + "    print(h._limit)\n"
        },
    )
    result = _run(root)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    for line, expr in ((4, "h._pinned"), (5, "h._move"), (6, "h._limit")):
        assert (
            f"user.py:{line}: private attribute across packages: {expr} (defined in s3ddb.io)"
            in out
        ), out
    assert "structure: 3 problem(s)" in out, out


def test_the_architecture_page_lists_the_layers_in_order() -> None:
    layers = _structure().LAYERS
    page = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (.+?) \|", page, flags=re.MULTILINE)
    assert [int(rank) for rank, _ in rows] == list(range(len(layers)))
    for (rank, cell), layer in zip(rows, layers):
        named = set(re.findall(r"`([a-z_]+)(?:/|\.py)`", cell)) - {"__init__"}
        expected = {unit.removeprefix("s3ddb.") for unit in layer} - {"s3ddb"}
        assert named == expected, f"layer {rank}: the page names {named}, LAYERS {expected}"


def test_a_type_check_of_a_handler_or_store_outside_its_package_is_a_problem(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s3ddb"
    ok = "__all__: list[str] = []\n"
    files = {
        "__init__.py": ok,
        "io/__init__.py": ok,
        "commit/__init__.py": ok,
        "groups/__init__.py": ok,
        # a store interface and a backend of s3ddb.io, which may ask its own types
        "io/stores.py": (
            "__all__ = ['MemoryStore', 'ObjectStore']\n"
            "class ObjectStore:\n"
            "    def shares_transactions_with(self, other: 'ObjectStore') -> bool:\n"
            "        return False\n"
            "class MemoryStore(ObjectStore):\n"
            "    def __init__(self) -> None:\n"
            "        self.fs: dict[str, bytes] = {}\n"
            "    def shares_transactions_with(self, other: ObjectStore) -> bool:\n"
            "        return isinstance(other, MemoryStore)\n"
        ),
        # a handler of s3ddb.commit, a subclass of a subclass of the interface
        "commit/handler_kinds.py": (
            "__all__ = ['CommitHandler', 'ListingHandler', 'TableHandler']\n"
            "class CommitHandler:\n"
            "    pass\n"
            "class ListingHandler(CommitHandler):\n"
            "    pass\n"
            "class TableHandler(ListingHandler):\n"
            "    table_name = 't'\n"
        ),
        # another package asking the interface, and getattr of names no handler defines
        "groups/clean.py": ok
        + "from s3ddb.io.stores import ObjectStore\n"
        + "def together(a: ObjectStore, b: ObjectStore) -> bool:\n"
        + "    return a.shares_transactions_with(b) and getattr(a, 'color', 1) == 1\n",
    }
    _write(root, files)
    clean = _run(root)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "structure: 0 problem(s)" in clean.stdout

    _write(
        root,
        {
            "groups/user.py": ok
            + "from s3ddb.commit.handler_kinds import TableHandler\n"
            + "from s3ddb.io import stores\n"
            + "def kind(h: object, s: object) -> bool:\n"
            + "    a = isinstance(s, stores.MemoryStore)\n"
            + "    b = isinstance(h, (int, TableHandler))\n"
            + "    c = getattr(s, 'fs', None)\n"
            + "    return a and b and c and hasattr(h, 'table_name')\n"
        },
    )
    result = _run(root)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    for line, what in (
        (5, "isinstance(..., MemoryStore)"),
        (6, "isinstance(..., TableHandler)"),
        (7, "getattr(..., 'fs')"),
        (8, "hasattr(..., 'table_name')"),
    ):
        assert (
            f"user.py:{line}: a type check of a commit handler or store outside its "
            f"package: {what}" in out
        ), out
    assert "structure: 4 problem(s)" in out, out


def test_a_module_name_used_twice_is_a_problem(tmp_path: Path) -> None:
    root = tmp_path / "s3ddb"
    ok = "__all__: list[str] = []\n"
    _write(
        root,
        {
            "__init__.py": ok,
            "io/__init__.py": ok,
            "format/__init__.py": ok,
            "commit/__init__.py": ok,
            # rows.py three times; __init__.py in every package is no problem
            "io/rows.py": ok,
            "format/rows.py": ok,
            "commit/rows.py": ok,
            "format/fragment_metadata.py": ok,
            "commit/fragment.py": ok,
        },
    )
    out = _run(root).stdout
    assert (
        "module name rows.py used 3 times: "
        f"{root / 'commit' / 'rows.py'}, {root / 'format' / 'rows.py'}, {root / 'io' / 'rows.py'}"
    ) in out, out
    assert "structure: 1 problem(s)" in out, out
