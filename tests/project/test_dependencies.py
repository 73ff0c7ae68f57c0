"""pyproject.toml declares every distribution s3ddb's modules import, where their users
get it (tests/project/declared_dependencies.py says the rules): ``pip install s3ddb``
alone gives a package that imports. tests/project/test_install.py installs the wheel
into clean environments to show it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.project.declared_dependencies import (
    OPTIONAL_PARTS,
    DeclaredDependencies,
    Import,
    declared_dependencies,
    installed_providers,
    third_party_imports,
    undeclared_imports,
)

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("tomllib", reason="Python >= 3.11 reads pyproject.toml")


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return third_party_imports(ROOT)


@pytest.fixture(scope="module")
def declared() -> DeclaredDependencies:
    return declared_dependencies(ROOT / "pyproject.toml")


@pytest.fixture(scope="module")
def providers() -> Callable[[str], frozenset[str]]:
    return installed_providers()


def test_every_import_of_the_package_is_declared(
    imports: list[Import],
    declared: DeclaredDependencies,
    providers: Callable[[str], frozenset[str]],
) -> None:
    problems = undeclared_imports(imports, declared, providers)
    assert not problems, "\n".join(problems)


def test_the_check_names_a_dependency_removed_from_the_list(
    imports: list[Import],
    declared: DeclaredDependencies,
    providers: Callable[[str], frozenset[str]],
) -> None:
    """numpy was missing (issue 44): without it the check names its importers."""
    assert "numpy" in declared.dependencies
    without = dataclasses.replace(declared, dependencies=declared.dependencies - {"numpy"})
    problems = undeclared_imports(imports, without, providers)
    assert problems and all("imports numpy" in p for p in problems), problems
    assert any(
        "s3ddb/format/deletion.py" in p and "which the dependencies of" in p for p in problems
    ), problems
    assert len(problems) == sum(i.name.partition(".")[0] == "numpy" for i in imports)


def test_an_optional_part_may_import_only_its_own_extra(
    imports: list[Import],
    declared: DeclaredDependencies,
    providers: Callable[[str], frozenset[str]],
) -> None:
    """pyspark is declared by [spark] only: the Spark part's imports of it are fine, the
    same imports in a core module are reported."""
    spark = [i for i in imports if i.name.partition(".")[0] == "pyspark"]
    assert spark and all(
        i.module.startswith(("s3ddb.spark_ext", "pyspark_s3ddb")) for i in spark
    ), spark
    assert OPTIONAL_PARTS["s3ddb.spark_ext"] == "spark"
    assert not undeclared_imports(spark, declared, providers)
    moved = [
        dataclasses.replace(i, module="s3ddb.writes.version_writes", guarded=False) for i in spark
    ]
    problems = undeclared_imports(moved, declared, providers)
    assert len(problems) == len(moved), problems
    assert all("from pyspark, which the dependencies of pyproject.toml" in p for p in problems)


def test_a_namespace_package_maps_to_the_distribution_that_holds_the_module(
    providers: Callable[[str], frozenset[str]],
) -> None:
    assert providers("google.protobuf.message") == {"protobuf"}
    assert providers("opentelemetry.trace") == {"opentelemetry-api"}
    assert providers("werkzeug.serving") == {"werkzeug"}
