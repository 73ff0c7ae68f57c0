"""``s3ddb catalog register URI --rest NS.TABLE`` and ``s3ddb catalog serve``: the
registry entry, the refusals (exit status 2), and a real server process that
pyiceberg reads, stopped by SIGTERM, whose output never shows the token."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import s3ddb
import s3ddb.catalog_server
from tests.catalog_server.support import TOKEN, rest_catalog, sorted_ids
from tests.support.cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[2]


def test_register_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")
    uri = f"{wh}/events"
    s3ddb.write_dataset(pa.table({"id": [1, 2]}), uri, open_formats=["iceberg"])
    code, out, err = run_cli(
        capsys, "catalog", "register", uri, "--rest", "sales.events", "--registry", wh, "--json"
    )
    assert code == 0, err
    assert json.loads(out) == {
        "registered": "sales.events", "uri": uri, "registry": f"file://{wh}", "new": True
    }  # fmt: skip
    code, out, _ = run_cli(capsys, "catalog", "register", uri, "--rest", "sales.events",
                           "--registry", wh)  # fmt: skip
    assert code == 0 and "registered already" in out
    # Refused, exit status 2: outside the registry's root, no Iceberg, a bad name,
    # no registry named, another dataset under the name.
    plain = f"{wh}/plain"
    s3ddb.write_dataset(pa.table({"id": [1]}), plain)
    other = f"{wh}/other"
    s3ddb.write_dataset(pa.table({"id": [1]}), other, open_formats=["iceberg"])
    for argv, said in (
        ([str(tmp_path / "elsewhere"), "--rest", "a.b", "--registry", wh], "not under"),
        ([plain, "--rest", "a.plain", "--registry", wh], "does not publish Iceberg"),
        ([uri, "--rest", "a.b.c", "--registry", wh], "not a catalog name"),
        ([uri, "--rest", "a.b"], "--registry"),
        ([other, "--rest", "sales.events", "--registry", wh], "registered already"),
    ):
        code, _, err = run_cli(capsys, "catalog", "register", *argv)
        assert code == 2 and said in " ".join(err.split()), (argv, err)


def _serve(*argv: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "s3ddb.cli.main", "catalog", "serve", *argv],
        cwd=ROOT, env={**os.environ, **env}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def test_serve_answers_pyiceberg_and_stops_on_sigterm(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    uri = f"{wh}/events"
    s3ddb.write_dataset(pa.table({"id": [1, 2, 3]}), uri, open_formats=["iceberg"])
    assert s3ddb.catalog_server.CatalogRegistry(wh).register(
        s3ddb.catalog_server.parse_table_name("sales.events"), uri
    )
    server = _serve("--registry", wh, "--port", "0", env={"S3DDB_CATALOG_TOKEN": TOKEN})
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("s3ddb catalog: serving"), line
        url = line.split(" at ")[1].strip()
        table = rest_catalog(url).load_table("sales.events")
        assert sorted_ids(table.scan().to_arrow()) == [1, 2, 3]
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)
    # uvicorn stops after the requests in flight, then ends by the signal it caught.
    assert server.returncode in (0, -signal.SIGTERM), err
    assert TOKEN not in out + err and TOKEN not in line


def test_serve_refuses_no_token_and_no_auth_off_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("S3DDB_CATALOG_TOKEN", raising=False)
    short = tmp_path / "short"
    short.write_text("abc")
    for argv, said in (
        (["--registry", str(tmp_path)], "S3DDB_CATALOG_TOKEN"),
        (["--registry", str(tmp_path), "--no-auth", "--host", "0.0.0.0"], "loopback"),
        (["--registry", str(tmp_path), "--token-file", str(tmp_path / "none")], "token file"),
        (["--registry", str(tmp_path), "--token-file", str(short)], "at least 16"),
        ([], "--registry"),
    ):
        code, _, err = run_cli(capsys, "catalog", "serve", *argv)
        assert code == 2 and said in " ".join(err.split()), (argv, err)
