"""Structure figures of the s3ddb package, computed from its source; run by ``make lint``.

Checks (each failure is listed with where it is; exit status 1 if any):

* import cycles between modules: 0. Every import counts, at module level or inside a
  function, except those under ``if TYPE_CHECKING:`` (they never run);
* layers: a package imports only from its own layer or the layers below it
  (:data:`LAYERS`, lowest first), so dependencies point one way;
* at most :data:`MAX_TOP_LEVEL_MODULES` modules directly under ``s3ddb/``;
* no private name imported across packages: neither a ``_name`` nor anything from a
  ``_module`` of another package (``s3ddb.<package>`` is the unit);
* no private attribute used across packages: ``x._name`` (``x`` not ``self`` or
  ``cls``) where only classes of other packages define ``_name``
  (:func:`_private_attributes`), so a package changes another's objects only through
  their public methods;
* no type check of a commit handler or a store outside the package that defines its
  class: ``isinstance``/``issubclass`` naming one, or ``getattr``/``hasattr`` of an
  attribute only such classes define (:func:`_handler_type_checks`). The rest asks
  their interface (which dataset, which group, whether stores share transactions);
* no module over :data:`MAX_MODULE_LINES` lines (generated protobuf code aside);
* the public surface: at most :data:`MAX_EXPORTS` names in ``s3ddb.__all__``; every
  exception there or in ``s3ddb.errors.__all__`` is an ``S3DDBError``; every public
  exception class defined in the package is either in ``s3ddb.errors.__all__`` (users
  may meet it) or an internal signal of :data:`INTERNAL_EXCEPTIONS`, which neither
  ``__all__`` exports;
* every public module (no ``_`` in its path, entry points aside) declares ``__all__``;
* no open format named by a string literal outside ``open_formats/``: the rest asks
  the format's plug-in (:func:`_format_names_outside_open_formats`).
* no module base name used twice in the package (``__init__`` aside), so a module's
  name says what it holds (:func:`_shared_module_names`).

Usage: ``python scripts/structure.py [--root s3ddb] [--quiet]``.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_TOP_LEVEL_MODULES = 8
#: Size follows the concept: a module may be long if it is one concept (``Dataset``
#: with all its members, the external-store commit protocol), and a module is split
#: where concepts part, never to fit a line count. This cap only catches a module
#: that has grown into several concepts (issue 34).
MAX_MODULE_LINES = 1200
#: At most this many names in ``s3ddb.__all__``: what users call and catch.
MAX_EXPORTS = 60

#: Exceptions the library raises and handles itself (or, for ``InjectedFault``, that
#: only failpoints raise in tests): users never meet them, so neither ``s3ddb.__all__``
#: nor ``s3ddb.errors.__all__`` lists them. Every other public exception class is an
#: ``S3DDBError`` in ``s3ddb.errors.__all__``.
INTERNAL_EXCEPTIONS = {
    "s3ddb.commit.handlers.VersionConflict",
    "s3ddb.commit.finalizer.NothingToFinish",
    "s3ddb.commit.external_versions.VersionReplacedError",
    "s3ddb.errors.InjectedFault",
    "s3ddb.external_store.manifest_store.ExternalStoreOutcomeUnknownError",
    "s3ddb.external_store.manifest_store.FenceFailedError",
    "s3ddb.external_store.manifest_store.VersionTakenError",
    "s3ddb.external_store.manifest_store.GroupRefusedError",
}

#: The layers, lowest first. A module may import from its own layer and any layer
#: before it; names are ``s3ddb.<first component>`` (a package, or a top-level module).
LAYERS: list[set[str]] = [
    {"s3ddb.errors", "s3ddb.version", "s3ddb.arguments"},
    {"s3ddb.io", "s3ddb.tasks"},
    {"s3ddb.format"},
    {"s3ddb.expressions"},
    {"s3ddb.operations"},
    {"s3ddb.observe"},
    {"s3ddb.open_formats"},
    # catalogs: above open_formats (it asks the Iceberg plug-in where a version's
    # metadata file is) and below commit, whose publication hook moves the catalog
    # after each published version; it needs nothing of external_store.
    {"s3ddb.external_store", "s3ddb.catalogs"},
    {"s3ddb.commit"},
    {"s3ddb.versions"},
    {"s3ddb.scan"},
    {"s3ddb.index"},
    {"s3ddb.reading"},
    {"s3ddb.writes"},
    {"s3ddb.maintenance"},
    {
        "s3ddb.dataset",
        "s3ddb.fragment",
        "s3ddb.pylance_compat",
        "s3ddb.lance_dataset",
        "s3ddb.groups",
        "s3ddb",
    },
    {"s3ddb.testing", "s3ddb.spark_ext", "s3ddb.catalog_server"},
    {"s3ddb.cli"},
]


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    lines: int
    imports: list[tuple[str, str | None, int]] = field(default_factory=list)


def _modules(root: Path) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted(root.rglob("*.py")):
        if "_proto" in path.parts:
            continue
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        text = path.read_text()
        modules[".".join(parts)] = Module(
            ".".join(parts), path, is_package, ast.parse(text), text.count("\n")
        )
    return modules


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return skipped


def _resolve_imports(module: Module, modules: dict[str, Module]) -> None:
    """Fill ``module.imports`` with (target module, imported name or None, line)."""
    skipped = _type_checking_nodes(module.tree)
    for node in ast.walk(module.tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    module.imports.append((alias.name, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.name.split(".")
                if not module.is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    module.imports.append((submodule, None, node.lineno))
                elif source in modules:
                    module.imports.append((source, alias.name, node.lineno))


def _unit(name: str) -> str:
    return ".".join(name.split(".")[:2])


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph = {name: sorted({t for t, _, _ in m.imports if t != name}) for name, m in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(graph[succ])))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _private_attributes(tree: ast.Module) -> set[str]:
    """The private attribute and method names the classes of ``tree`` define: ``def _x``
    and ``_x = ...`` (or ``_x: T``) in a class, ``self._x = ...`` (or ``cls._x``) in
    its methods. Dunder names are not private."""
    names: set[str] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name) and _is_private(t.id))
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(node.name):
                names.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
                and _is_private(node.attr)
            ):
                names.add(node.attr)
    return names


def _private_attribute_uses(modules: dict[str, Module]) -> list[str]:
    """Every ``x._name`` (read, written or deleted; ``x`` not ``self`` or ``cls``) in a
    module of package P where ``_name`` is defined by classes of other packages and by
    none of P's. Attributes of other libraries' objects (pyarrow's, ``os._exit``,
    namedtuple's ``_replace``) are names no s3ddb class defines: never counted."""
    defined: dict[str, set[str]] = {}
    for name, module in modules.items():
        defined.setdefault(_unit(name), set()).update(_private_attributes(module.tree))
    problems = []
    for name, module in modules.items():
        mine = defined[_unit(name)]
        for node in ast.walk(module.tree):
            if (
                not isinstance(node, ast.Attribute)
                or not _is_private(node.attr)
                or node.attr in mine
                or (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                continue
            owners = sorted(u for u, names in defined.items() if node.attr in names)
            if owners:
                problems.append(
                    f"{module.path}:{node.lineno}: private attribute across packages: "
                    f"{ast.unparse(node)} (defined in {', '.join(owners)})"
                )
    return problems


#: The interfaces whose classes (these and every subclass in the package) no code
#: outside the class's own package asks an object whether it is, by type or by
#: attribute: it asks the interface instead (issue 45).
HANDLER_AND_STORE_ROOTS = ("CommitHandler", "ObjectStore", "ExternalManifestStore")


def _handler_type_checks(modules: dict[str, Module]) -> list[str]:
    """Every ``isinstance``/``issubclass`` naming a commit-handler or store class (see
    :data:`HANDLER_AND_STORE_ROOTS`) and every ``getattr``/``hasattr`` of a literal
    attribute that only such classes define (methods, class attributes, ``self.x =``),
    in a module of a package that defines none of those classes (or attributes)."""
    bases: dict[str, set[str]] = {}
    units: dict[str, set[str]] = {}
    attributes: dict[str, dict[str, set[str]]] = {}  # class -> attribute -> units
    for name, module in modules.items():
        for cls in ast.walk(module.tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            bases.setdefault(cls.name, set()).update(
                b.id if isinstance(b, ast.Name) else b.attr
                for b in cls.bases
                if isinstance(b, (ast.Name, ast.Attribute))
            )
            units.setdefault(cls.name, set()).add(_unit(name))
            found = attributes.setdefault(cls.name, {})
            for node in ast.walk(cls):
                attr = None
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    attr = node.name
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    attr = node.id if node in _class_level_targets(cls) else None
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    attr = node.attr
                if attr is not None and not attr.startswith("__"):
                    found.setdefault(attr, set()).add(_unit(name))
    family = set(HANDLER_AND_STORE_ROOTS) & set(bases)
    while True:
        grown = family | {c for c, b in bases.items() if b & family}
        if grown == family:
            break
        family = grown
    owned: dict[str, set[str]] = {}  # attribute -> units of the family defining it
    elsewhere: set[str] = set()  # attributes other classes define too
    for cls, found in attributes.items():
        for attr, where in found.items():
            if cls in family:
                owned.setdefault(attr, set()).update(where)
            else:
                elsewhere.add(attr)
    problems = []
    for name, module in modules.items():
        unit = _unit(name)
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            what = None
            if node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                kinds = node.args[1]
                for kind in kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]:
                    named = kind.id if isinstance(kind, ast.Name) else getattr(kind, "attr", None)
                    if named in family and unit not in units[named]:
                        what = f"{node.func.id}(..., {named})"
            elif (
                node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                attr = node.args[1].value
                public = not attr.startswith("_")  # private names: the check above
                if public and attr in owned and attr not in elsewhere and unit not in owned[attr]:
                    what = f"{node.func.id}(..., {attr!r})"
            if what is not None:
                problems.append(
                    f"{module.path}:{node.lineno}: a type check of a commit handler or store "
                    f"outside its package: {what}; ask its interface instead"
                )
    return problems


def _class_level_targets(cls: ast.ClassDef) -> set[ast.expr]:
    """The names a class body assigns (``x = ...``, ``x: T = ...``)."""
    targets: set[ast.expr] = set()
    for node in cls.body:
        if isinstance(node, ast.Assign):
            targets.update(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets.add(node.target)
    return targets


def _layer_of(unit: str) -> int | None:
    for rank, layer in enumerate(LAYERS):
        if unit in layer:
            return rank
    return None


def _exception_classes(modules: dict[str, Module]) -> list[tuple[str, str]]:
    """(module, class) of every public exception class, found by importing."""
    found = []
    for name, module in modules.items():
        if any(_is_private(part) for part in name.split(".")):
            continue
        if not any(isinstance(node, ast.ClassDef) for node in module.tree.body):
            continue
        loaded = importlib.import_module(name)
        for node in module.tree.body:
            if isinstance(node, ast.ClassDef) and not _is_private(node.name):
                cls = getattr(loaded, node.name, None)
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    found.append((name, node.name))
    return found


def check(root: Path) -> list[str]:
    """Every structure problem of the package at ``root``, one line each."""
    modules = _modules(root)
    for module in modules.values():
        _resolve_imports(module, modules)
    problems: list[str] = []

    for cycle in _cycles(modules):
        problems.append(f"import cycle: {' -> '.join(cycle)}")

    top = root.name
    for name, module in modules.items():
        if name.endswith("__main__"):
            continue  # an entry point: nothing imports it
        mine = _layer_of(_unit(name))
        if mine is None:
            problems.append(f"{module.path}: {_unit(name)} is in no layer of LAYERS")
            continue
        for target, imported, line in module.imports:
            theirs = _layer_of(_unit(target))
            if theirs is not None and theirs > mine:
                problems.append(
                    f"{module.path}:{line}: layer {_unit(name)} imports {target}, a higher layer"
                )
            if _unit(target) != _unit(name) and (
                any(_is_private(p) for p in target.split(".")[1:])
                or (imported is not None and _is_private(imported))
            ):
                what = f"{target}.{imported}" if imported else target
                problems.append(f"{module.path}:{line}: private name across packages: {what}")

    problems.extend(_private_attribute_uses(modules))
    problems.extend(_handler_type_checks(modules))

    top_level = [n for n, m in modules.items() if n.count(".") == 1 and not m.is_package]
    top_level.append(top)  # __init__.py
    if len(top_level) > MAX_TOP_LEVEL_MODULES:
        problems.append(
            f"{len(top_level)} modules directly under {top}/ (at most "
            f"{MAX_TOP_LEVEL_MODULES}): {', '.join(sorted(top_level))}"
        )

    for module in modules.values():
        if module.lines > MAX_MODULE_LINES:
            problems.append(f"{module.path}: {module.lines} lines (at most {MAX_MODULE_LINES})")

    for name, module in modules.items():
        if any(_is_private(p) for p in name.split(".")) or name.endswith("__main__"):
            continue
        declares = any(
            isinstance(node, (ast.Assign, ast.AnnAssign))
            and any(
                isinstance(t, ast.Name) and t.id == "__all__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
            for node in module.tree.body
        )
        if not declares:
            problems.append(f"{module.path}: a public module without __all__")

    problems.extend(_format_names_outside_open_formats(top, modules))
    problems.extend(_shared_module_names(modules))
    problems.extend(_public_surface(top, modules))
    return problems


#: Modules outside ``open_formats/`` that may spell a format's name, and why: the
#: names there are not s3ddb's choice of a format.
FORMAT_NAME_EXCEPTIONS = {
    # Code for other engines' readers of each format (pyiceberg reads Iceberg,
    # deltalake Delta; DuckDB's iceberg and delta extensions; Spark's data sources):
    # a new format's readers need snippets of their own, not a plug-in's answer.
    "cli/reader_snippets.py",
    # pylance's ``LanceDataset.delta``, a method s3ddb refuses: not a format.
    "pylance_compat.py",
    # AWS Glue's vocabulary: the formats a Glue table reads, whose names are Glue's
    # ``table_type`` values (ICEBERG, DELTA), not s3ddb's choice of a format.
    "catalogs/glue.py",
}


def _format_names_outside_open_formats(top: str, modules: dict[str, Module]) -> list[str]:
    """A string literal equal (case aside) to an open format's name outside
    ``<top>/open_formats/``: everything else asks the format's plug-in. The names are
    those of the plug-ins in ``<top>.open_formats.plugins.FORMATS`` (a literal tuple of
    ``SomeClass()``): each class's ``name = "..."``. Docstrings and messages that
    mention a format in a sentence are not names; :data:`FORMAT_NAME_EXCEPTIONS`
    lists the modules allowed to name one."""
    package = f"{top}.open_formats"
    plugins = modules.get(f"{package}.plugins")
    if plugins is None:  # a package without open formats (a planted one) has none to name
        if package not in modules:
            return []
        return [f"{top}/open_formats/plugins.py: missing (the tuple FORMATS of the formats)"]
    classes: set[str] = set()
    for node in plugins.tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "FORMATS":
            value = node.value  # type: ignore[union-attr]
            for element in value.elts if isinstance(value, ast.Tuple) else []:
                if isinstance(element, ast.Call) and isinstance(element.func, ast.Name):
                    classes.add(element.func.id)
    names: set[str] = set()
    for name, module in modules.items():
        if not name.startswith(package + "."):
            continue
        for node in module.tree.body:
            if isinstance(node, ast.ClassDef) and node.name in classes:
                for item in node.body:
                    if (
                        isinstance(item, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "name" for t in item.targets)
                        and isinstance(item.value, ast.Constant)
                        and isinstance(item.value.value, str)
                    ):
                        names.add(item.value.value.lower())
    if not names:
        return [f"{plugins.path}: FORMATS names no plug-in class with a name = \"...\""]
    problems = []
    for name, module in modules.items():
        if name == package or name.startswith(package + "."):
            continue
        relative = name.removeprefix(f"{top}.").replace(".", "/") + ".py"
        if relative in FORMAT_NAME_EXCEPTIONS:
            continue
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.lower() in names
            ):
                problems.append(
                    f"{module.path}:{node.lineno}: the open format {node.value!r} named by a "
                    "string: ask its plug-in (s3ddb.open_formats.publisher.writer_of, "
                    "all_formats)"
                )
    return problems


def _public_surface(top: str, modules: dict[str, Module]) -> list[str]:
    """The rules of the exports: see the module's docstring."""
    problems = []
    package = importlib.import_module(top)
    errors = importlib.import_module(f"{top}.errors")
    base = getattr(errors, "S3DDBError", None)
    exported = list(getattr(package, "__all__", []))
    if len(exported) > MAX_EXPORTS:
        problems.append(f"{top}.__all__ has {len(exported)} names (at most {MAX_EXPORTS})")
    for where, listed in ((top, exported), (f"{top}.errors", getattr(errors, "__all__", []))):
        source = importlib.import_module(where)
        for name in listed:
            value = getattr(source, name, None)
            if not (isinstance(value, type) and issubclass(value, BaseException)):
                continue
            if base is None or not issubclass(value, base):
                problems.append(f"{where}.__all__: {name} is not an {top}.errors.S3DDBError")
            if f"{value.__module__}.{value.__qualname__}" in INTERNAL_EXCEPTIONS:
                problems.append(f"{where}.__all__: {name} is an internal signal")
    users_meet = set(getattr(errors, "__all__", []))
    defined = set()
    for where, cls in _exception_classes(modules):
        defined.add(f"{where}.{cls}")
        if f"{where}.{cls}" not in INTERNAL_EXCEPTIONS and cls not in users_meet:
            problems.append(
                f"{where}.{cls}: a public exception neither in {top}.errors.__all__ "
                "nor in INTERNAL_EXCEPTIONS"
            )
    for name in sorted(INTERNAL_EXCEPTIONS - defined):
        if name.rsplit(".", 1)[0] in modules:
            problems.append(f"INTERNAL_EXCEPTIONS names {name}, which is not defined")
    return problems


def _shared_module_names(modules: dict[str, Module]) -> list[str]:
    """A module base name (``rows`` of a ``reading/rows.py``) that two or more modules
    of the package use, packages (``__init__.py``) aside: one line per name, naming
    its modules. Two modules called ``rows`` say where they are, not what they hold."""
    by_name: dict[str, list[Module]] = {}
    for name, module in modules.items():
        if not module.is_package:
            by_name.setdefault(name.rsplit(".", 1)[-1], []).append(module)
    return [
        f"module name {base}.py used {len(found)} times: "
        + ", ".join(str(m.path) for m in sorted(found, key=lambda m: m.name))
        for base, found in sorted(by_name.items())
        if len(found) > 1
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="s3ddb", type=Path)
    parser.add_argument("--quiet", action="store_true", help="print problems only")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root.resolve().parent))
    problems = check(args.root)
    for problem in problems:
        print(problem)
    if not args.quiet:
        print(f"structure: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
