"""The third-party imports of s3ddb's own modules, beside what pyproject.toml declares.

``pip install s3ddb`` gives exactly the ``dependencies`` of pyproject.toml, and each
extra adds its own list; a distribution that another dependency happens to bring today
(numpy came with pandas, botocore comes with boto3) may stop coming tomorrow. So every
distribution a module imports must be declared where that module's users get it:

- a module of an optional part (:data:`OPTIONAL_PARTS`: Spark, OpenTelemetry, the local
  AWS endpoint) may import the dependencies and its part's extra;
- any other module (the core) only the dependencies, wherever the import is (module
  level or inside a function: the function runs for some user). An import the module
  guards with ``except ImportError`` is optional: some extra must declare it.

Imports under ``if TYPE_CHECKING:`` never run and are not counted. Import names are
mapped to distributions through the installed distributions' file lists
(:func:`installed_providers`), so ``google.protobuf`` is protobuf's and
``opentelemetry.trace`` is opentelemetry-api's.

Used by tests/project/test_dependencies.py.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FIRST_PARTY",
    "OPTIONAL_PARTS",
    "DeclaredDependencies",
    "Import",
    "declared_dependencies",
    "installed_providers",
    "normalized",
    "third_party_imports",
    "undeclared_imports",
]

#: The top-level packages the wheel ships (pyproject's ``packages.find``).
FIRST_PARTY = ("s3ddb", "pyspark_s3ddb")

#: Module (or package) -> the extra that brings what it imports. Every module not
#: under one of these is core: it may import the dependencies only.
OPTIONAL_PARTS: dict[str, str] = {
    "s3ddb.spark_ext": "spark",
    "pyspark_s3ddb": "spark",
    "s3ddb.observe.telemetry": "otel",
    "s3ddb.testing": "testing",
    "s3ddb.catalog_server": "catalog",
}


@dataclass(frozen=True)
class Import:
    """One import of a third-party module: ``module`` imports ``name`` at ``line``;
    ``guarded``: inside a ``try`` that catches ImportError (an optional import)."""

    module: str
    path: Path
    line: int
    name: str
    guarded: bool


@dataclass(frozen=True)
class DeclaredDependencies:
    """pyproject.toml's lists, as normalized distribution names; an extra that names
    ``s3ddb[other]`` includes ``other``'s list."""

    dependencies: frozenset[str]
    extras: Mapping[str, frozenset[str]]


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them: ``Werkzeug`` -> ``werkzeug``."""
    return re.sub(r"[-_.]+", "-", name).lower()


_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def declared_dependencies(pyproject: Path) -> DeclaredDependencies:
    """The ``dependencies`` and ``optional-dependencies`` of ``pyproject``."""
    import tomllib  # Python >= 3.11; the caller skips on older interpreters

    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    own = normalized(project["name"])
    raw_extras: dict[str, list[str]] = project.get("optional-dependencies", {})

    def names(requirements: list[str], seen: frozenset[str]) -> frozenset[str]:
        result: set[str] = set()
        for requirement in requirements:
            match = _REQUIREMENT_NAME.match(requirement)
            assert match, f"pyproject.toml: cannot read the requirement {requirement!r}"
            name = normalized(match.group(1))
            if name == own:  # s3ddb[a,b]: the lists of extras a and b
                for extra in (e.strip() for e in (match.group(2) or "").split(",")):
                    if extra and extra not in seen:
                        result |= names(raw_extras[extra], seen | {extra})
            else:
                result.add(name)
        return frozenset(result)

    return DeclaredDependencies(
        dependencies=names(project.get("dependencies", []), frozenset()),
        extras={extra: names(reqs, frozenset({extra})) for extra, reqs in raw_extras.items()},
    )


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return any(
        isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names
    )


#: The fields of statements that hold statements: imports are statements, so the walk
#: never descends into expressions.
_STATEMENT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _imports_of(nodes: list[ast.AST], guarded: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every import statement in ``nodes`` and the statements they hold, with whether an
    ``except ImportError`` guards it; ``if TYPE_CHECKING:`` bodies are skipped (they
    never run)."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, guarded
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _imports_of(node.orelse, guarded)
        elif isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            yield from _imports_of(node.body, True)
            yield from _imports_of([*node.handlers, *node.orelse, *node.finalbody], guarded)
        else:
            for name in _STATEMENT_FIELDS:
                yield from _imports_of(getattr(node, name, []), guarded)


def third_party_imports(root: Path, packages: Collection[str] = FIRST_PARTY) -> list[Import]:
    """The imports of modules outside the standard library and ``packages`` by every
    module of ``packages`` under ``root`` (generated protobuf code included: it runs)."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node, guarded in _imports_of(tree.body):
                if isinstance(node, ast.ImportFrom):
                    if node.level or not node.module:
                        continue  # relative: the package's own
                    names = [node.module]
                else:
                    names = [alias.name for alias in node.names]
                for name in names:
                    top = name.partition(".")[0]
                    if top in sys.stdlib_module_names or top in packages:
                        continue
                    found.append(Import(module, path, node.lineno, name, guarded))
    return found


def installed_providers() -> Callable[[str], frozenset[str]]:
    """A function from an import name (``google.protobuf.message``) to the normalized
    names of the installed distributions that provide it: those that own its top-level
    name, narrowed, where several share it (namespace packages), to those whose files
    hold the module itself."""
    by_top = importlib.metadata.packages_distributions()
    cache: dict[str, frozenset[str]] = {}

    def provides(distribution: str, dotted: str) -> bool:
        files = importlib.metadata.distribution(distribution).files or []
        prefix = dotted.replace(".", "/")
        return any(str(f).startswith(prefix + "/") or str(f) in (prefix + ".py",) for f in files)

    def providers(name: str) -> frozenset[str]:
        if name not in cache:
            parts = name.split(".")
            candidates = sorted(set(by_top.get(parts[0], ())))
            # Several own the top-level name (a namespace package): the longest prefix
            # of the name that some candidate's files hold decides.
            for depth in range(len(parts), 1 if len(candidates) > 1 else len(parts), -1):
                holders = [d for d in candidates if provides(d, ".".join(parts[:depth]))]
                if holders:
                    candidates = holders
                    break
            cache[name] = frozenset(normalized(d) for d in candidates)
        return cache[name]

    return providers


def _part_of(module: str) -> str | None:
    for prefix, extra in OPTIONAL_PARTS.items():
        if module == prefix or module.startswith(prefix + "."):
            return extra
    return None


def undeclared_imports(
    imports: Collection[Import],
    declared: DeclaredDependencies,
    providers: Callable[[str], frozenset[str]],
) -> list[str]:
    """One line per import that ``declared`` does not cover (see the module docstring):
    where it is, what it imports, which distribution provides it and where it must
    be declared. Empty when every import is covered."""
    problems = []
    any_extra = frozenset().union(*declared.extras.values()) if declared.extras else frozenset()
    for imp in imports:
        extra = _part_of(imp.module)
        where = f"{imp.path.as_posix()}:{imp.line} ({imp.module}) imports {imp.name}"
        if extra is not None:
            allowed = declared.dependencies | declared.extras.get(extra, frozenset())
            needed = f"the dependencies or the [{extra}] extra"
        elif imp.guarded:
            allowed = declared.dependencies | any_extra
            needed = "the dependencies or an extra"
        else:
            allowed = declared.dependencies
            needed = "the dependencies"
        provided_by = providers(imp.name)
        if not provided_by:
            problems.append(f"{where}: no installed distribution provides it")
        elif not provided_by & allowed:
            problems.append(
                f"{where}, from {' or '.join(sorted(provided_by))}, which {needed} "
                "of pyproject.toml do not declare"
            )
    return problems
