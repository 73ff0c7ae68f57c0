"""``pip install s3ddb`` alone gives a working package (issue 44: numpy was missing and
nothing noticed, as the dev extra brings pandas, which brings numpy).

The test builds the wheel from a copy of the sources, installs it into a clean virtual
environment with no extra, and runs the README's five lines on a local path and
``s3ddb --help``; then adds ``[otel]`` (s3ddb's spans go to the OpenTelemetry API) and
``[spark]`` (a native write and a read by the data source, ``local[1]``, the Python
workers running that environment's interpreter). One environment, extras added step by
step. Each install goes first through uv where it is at hand (the Makefile puts it in
.venv), offline, from what its cache holds of the package index (the Makefile's install
of the dev extra filled it: seconds); where that cannot resolve, through pip and the
package index (PyPI; about a minute of index look-ups). Either way only what the
wheel's metadata asks for is installed, so a missing dependency still fails.

tests/project/test_dependencies.py checks the same lists statically, module by module.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What the wheel is built from (pyproject's packages.find and readme).
_SOURCES = ("pyproject.toml", "README.md", "s3ddb", "pyspark_s3ddb")


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{' '.join(argv)} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    )
    return done.stdout


def _build_wheel(tmp_path: Path, env: dict[str, str]) -> Path:
    """The wheel of a copy of the sources (a build in the checkout would leave build/,
    whose stale files setuptools would ship)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in _SOURCES:
        if (ROOT / name).is_dir():
            skip = shutil.ignore_patterns("__pycache__")
            shutil.copytree(ROOT / name, source / name, ignore=skip)
        else:
            shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    # With setuptools here (the dev extra's environments have it) pip need not fetch it
    # into an isolated build environment.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation,
         "--wheel-dir", str(wheels), str(source)],
        cwd=tmp_path, env=env,
    )  # fmt: skip
    (wheel,) = wheels.glob("s3ddb-*.whl")
    return wheel


def _uv() -> str | None:
    """uv beside this interpreter (the Makefile installs it into .venv) or on the PATH."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


def _five_lines(local_path: Path) -> str:
    """The README's five lines, on ``local_path`` (the README says: "or a local path")."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Five lines of Python\n.*?^```python\n(.*?)^```", readme, re.S | re.M)
    assert section, "README.md has a '## Five lines of Python' section with a python block"
    code, replaced = re.subn(
        r"^uri = .*$", f"uri = {str(local_path)!r}", section.group(1), count=1, flags=re.M
    )
    assert replaced == 1, "the five lines set uri = ... on a line of its own"
    return code


_OTEL_CHECK = """
import pyarrow as pa, s3ddb
from s3ddb.observe import telemetry
assert telemetry.available(), "opentelemetry-api installed, yet s3ddb does not see it"
ds = s3ddb.write_dataset(pa.table({"id": [1]}), "otel-ds")
print(ds.version)
"""

_SPARK_CHECK = """
import pyarrow as pa, s3ddb, s3ddb.spark_ext
from pyspark.sql import SparkSession

builder = (SparkSession.builder.master("local[1]").appName("s3ddb-install-check")
           .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1"))
spark = s3ddb.spark_ext.configure(builder).getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
df = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id long, kind string")
committed = s3ddb.spark_ext.write(df, "spark-ds", mode="append")    # Spark's Parquet writer
read = spark.read.format("s3ddb").load("spark-ds")                  # s3ddb in the workers
rows = s3ddb.dataset("spark-ds").count_rows()
print(committed.version, sorted(r.id for r in read.collect()), rows)
spark.stop()
"""


@pytest.mark.slow  # builds a wheel, installs from the package index, starts Spark
def test_the_wheel_alone_and_with_each_extra_installs_and_runs(tmp_path: Path) -> None:
    # Nothing of the checkout or of its environment: no PYTHONPATH, a directory of its
    # own as the working directory (python -c puts it first on sys.path). And Python's
    # default of caching compiled modules: the packages are installed uncompiled, and
    # without the cache every process (each of Spark's Python workers too) compiles
    # pandas, pyarrow and pyspark again, ~4 s of CPU each.
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYSPARK_PYTHON",
            "PYTHONDONTWRITEBYTECODE",
        )
    }  # fmt: skip
    wheel = _build_wheel(tmp_path, env)
    venv = tmp_path / "venv"
    # No pip inside: the test's own pip installs into it (pip --python), which saves
    # the seconds ensurepip takes.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    env = {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}
    work = tmp_path / "work"
    work.mkdir()

    uv = _uv()

    def install(extra: str) -> None:
        # Neither installer compiles bytecode here (uv compiles only when asked).
        if uv:
            offline = subprocess.run(
                [uv, "pip", "install", "--quiet", "--offline", "--python", str(python),
                 f"{wheel}{extra}"],
                cwd=work, env=env, capture_output=True, timeout=600,
            )  # fmt: skip
            if offline.returncode == 0:
                return
        # No uv, or its cache lacks something: pip, from the package index.
        _run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
             "--no-compile", "--disable-pip-version-check", f"{wheel}{extra}"],
            cwd=work, env=env,
        )  # fmt: skip

    def run(code: str) -> str:
        return _run([str(python), "-c", code], cwd=work, env=env)

    install("")
    where = run("import s3ddb; print(s3ddb.__file__)")
    assert where.startswith(str(venv)), f"s3ddb imported from {where}, not the clean environment"
    out = run(_five_lines(work / "events"))
    assert out.startswith("1 [{'id': 2, 'kind': 'b'}]"), out
    help_text = _run([str(venv / "bin" / "s3ddb"), "--help"], cwd=work, env=env)
    assert "open-formats" in help_text and "local-aws" in help_text, help_text

    install("[otel]")
    assert run(_OTEL_CHECK).split() == ["1"]

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java: the [spark] part needs Java 17 (the rest passed)")
    install("[spark]")
    # Spark's Python workers run the interpreter PYSPARK_PYTHON names (else python3).
    env["PYSPARK_PYTHON"] = str(python)
    # The driver's JVM as tests/spark/conftest.py starts it (C1 only, one GC thread: a
    # short run on three rows spends 40 % less CPU). Performance flags only.
    env.setdefault(
        "PYSPARK_SUBMIT_ARGS",
        "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell",
    )
    out = _run([str(python), "-c", _SPARK_CHECK], cwd=work, env=env, timeout=300)
    assert out.splitlines()[-1] == "1 [1, 2, 3] 3", out


def test_readme_says_how_to_reach_the_command_make_installs() -> None:
    """After ``make demo`` the ``s3ddb`` command is in the Makefile's venv, not on the
    PATH (issue 44: "s3ddb: command not found"): the README says where."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    venv = re.search(r"^VENV \?= (\S+)$", makefile, re.M)
    assert venv, "the Makefile names its virtual environment (VENV ?= ...)"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^s3ddb = "s3ddb\.cli\.main:main"$', pyproject, re.M)
    two_commands = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert f"{venv.group(1)}/bin/s3ddb" in two_commands
    assert f"source {venv.group(1)}/bin/activate" in two_commands
