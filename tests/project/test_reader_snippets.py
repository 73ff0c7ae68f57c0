"""``s3ddb open-formats URI --reader NAME`` prints code that reads the dataset's
published tables with another engine (issue 44: the S3 settings of each reader had to
be worked out by hand, and deltalake's obvious calls refuse deletion vectors).

The snippets run for real, in a child process as a user would paste them, and read
the newest version's rows, deleted rows removed: on a local path and on the local S3
endpoint (tests/conftest.py), whose settings (endpoint, path style, plain HTTP) come
from the environment as ``s3ddb local-aws``'s ``export`` lines give them. Spark's
snippet is checked as text: Spark cannot reach S3 here (no hadoop-aws jars).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.cli.reader_snippets import READERS, s3_access
from s3ddb.commit import finalizer
from s3ddb.io.aws import AwsConfig
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.cli_runner import run_cli

#: The readers whose snippets run here (Spark's: text only).
RUN = ("duckdb", "pyiceberg", "deltalake", "polars")

#: A secret no snippet may contain: the endpoint accepts any credentials.
SECRET = "sn1ppet-secret-value"

# Runs each snippet of argv[1] (JSON {reader: code}) alone, in a fresh namespace, and
# prints {reader: sorted ids of rows} as the last line.
_CHILD = """
import contextlib, io, json, sys
import pyarrow as pa
snippets = json.loads(open(sys.argv[1]).read())
ids = {}
for reader, code in snippets.items():
    namespace = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, reader, "exec"), namespace)
    ids[reader] = sorted(pa.table(namespace["rows"]).column("id").to_pylist())
print(json.dumps(ids))
"""


def _published(uri: str, storage_options: dict[str, str] | None = None) -> s3ddb.Dataset:
    """ids 1 to 5 in two fragments, 2 and 4 deleted: Delta deletion vectors and
    Iceberg positional deletes."""
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "kind": ["a", "b", "c"]})
    ds = s3ddb.write_dataset(
        rows, uri, open_formats=["iceberg", "delta"], storage_options=storage_options
    )
    ds.insert(pa.table({"id": pa.array([4, 5], pa.int64()), "kind": ["d", "e"]}))
    ds.delete("id = 2 OR id = 4")
    finalizer.drain()
    return ds


def _snippets(capsys: pytest.CaptureFixture[str], uri: str, *options: str) -> dict[str, str]:
    snippets = {}
    for reader in READERS:
        code, out, err = run_cli(capsys, "open-formats", uri, "--reader", reader, *options)
        assert code == 0, err
        ast.parse(out)  # Python, every one of them
        snippets[reader] = out
    return snippets


def _run(snippets: dict[str, str], tmp_path: Path, env: dict[str, str] | None) -> Any:
    path = tmp_path / "snippets.json"
    path.write_text(json.dumps({r: snippets[r] for r in RUN}))
    # A directory of its own: nothing there shadows duckdb, polars...
    work = tmp_path / "paste"
    work.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], cwd=work, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_snippets_read_a_local_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "events"
    _published(str(root))
    snippets = _snippets(capsys, str(root))
    assert _run(snippets, tmp_path, None) == {reader: [1, 3, 5] for reader in RUN}
    # Plain paths; nothing of S3.
    for code in snippets.values():
        assert str(root) in code and "s3://" not in code and "aws_" not in code.lower(), code
    code_lines = [line for line in snippets["deltalake"].splitlines() if not line.startswith("#")]
    assert "QueryBuilder" in snippets["deltalake"]
    assert not [line for line in code_lines if "to_pyarrow_table" in line or "to_pandas" in line]
    assert f"load('file://{root}')" in snippets["spark"]


def test_snippets_read_a_dataset_on_the_local_endpoint(
    aws: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The shell of a user who pasted s3ddb local-aws's export lines.
    env = {**aws.env(inherit=True), "AWS_SECRET_ACCESS_KEY": SECRET}
    for name, value in env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    prefix = f"snippets-{uuid.uuid4().hex[:8]}"
    _published(f"s3+ddb://{TEST_BUCKET}/{prefix}?ddbTableName={TEST_TABLE}")
    snippets = _snippets(capsys, f"s3+ddb://{TEST_BUCKET}/{prefix}?ddbTableName={TEST_TABLE}")
    for reader, code in snippets.items():
        assert SECRET not in code, f"{reader}: a secret in the snippet"
        assert "os.environ['AWS_SECRET_ACCESS_KEY']" in code, reader
    assert _run(snippets, tmp_path, env) == {reader: [1, 3, 5] for reader in RUN}

    host = aws.endpoint_url.split("://", 1)[1]
    duckdb = snippets["duckdb"]
    assert f"ENDPOINT '{host}'" in duckdb and "URL_STYLE 'path'" in duckdb
    assert "USE_SSL false" in duckdb
    assert f"'s3.endpoint': {aws.endpoint_url!r}" in snippets["pyiceberg"]
    assert "'AWS_ALLOW_HTTP': 'true'" in snippets["deltalake"]
    spark = snippets["spark"]
    assert f"load('s3a://{TEST_BUCKET}/{prefix}')" in spark
    for setting in (
        f"'spark.hadoop.fs.s3a.endpoint', {aws.endpoint_url!r}",
        "'spark.hadoop.fs.s3a.path.style.access', 'true'",
        "'spark.hadoop.fs.s3a.connection.ssl.enabled', 'false'",
        "'spark.hadoop.fs.s3a.secret.key', os.environ['AWS_SECRET_ACCESS_KEY']",
        "org.apache.hadoop:hadoop-aws:",
    ):
        assert setting in spark, setting


def test_credentials_given_as_options_are_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    config = AwsConfig.from_storage_options(
        {"endpoint_url": "https://store.example:9000", "aws_access_key_id": "AKIAEXAMPLE",
         "aws_secret_access_key": SECRET, "region": "eu-west-3"}
    )  # fmt: skip
    access = s3_access(config.settings("s3"), {})
    assert access.endpoint == "https://store.example:9000" and access.region == "eu-west-3"
    assert access.path_style and not access.allow_http
    assert access.note and "AWS_ACCESS_KEY_ID" in access.note
    assert SECRET not in repr(access) and "AKIAEXAMPLE" not in (access.note or "")
    # Per-service variables are named as s3ddb read them.
    per_service = {"AWS_ACCESS_KEY_ID_S3": "k", "AWS_SECRET_ACCESS_KEY_S3": SECRET}
    for name, value in per_service.items():
        monkeypatch.setenv(name, value)
    access = s3_access(AwsConfig.from_storage_options({}).settings("s3"), per_service)
    assert access.credentials is not None
    assert (access.credentials.key_id, access.credentials.secret) == tuple(per_service)


def test_a_reader_of_a_format_not_published_says_what_to_enable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    only_delta = str(tmp_path / "delta-only")
    s3ddb.write_dataset(pa.table({"id": [1]}), only_delta, open_formats=["delta"])
    code, _, err = run_cli(capsys, "open-formats", only_delta, "--reader", "pyiceberg")
    assert code == 2 and "--enable delta,iceberg" in err, err
    code, out, _ = run_cli(capsys, "open-formats", only_delta, "--reader", "polars")
    assert code == 0 and "pl.scan_delta(" in out

    plain = str(tmp_path / "plain")
    s3ddb.write_dataset(pa.table({"id": [1]}), plain)
    code, _, err = run_cli(capsys, "open-formats", plain, "--reader", "duckdb")
    assert code == 2 and "publishes no open formats" in err, err


def test_deltalakes_plain_reads_refuse_what_the_snippet_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What docs/open-formats.md says: deltalake's to_pyarrow_table() and to_pandas()
    refuse a table with deletion vectors (any dataset with a delete), which is why the
    snippet reads through QueryBuilder."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaProtocolError

    root = tmp_path / "deleted"
    _published(str(root))
    table = DeltaTable(str(root))
    with pytest.raises(DeltaProtocolError, match="deletionVectors"):
        table.to_pyarrow_table()
    with pytest.raises(DeltaProtocolError, match="deletionVectors"):
        table.to_pandas()
    code, out, _ = run_cli(capsys, "open-formats", str(root), "--reader", "deltalake")
    assert code == 0
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(out, "deltalake snippet", "exec"), namespace)
    assert sorted(namespace["rows"].column("id").to_pylist()) == [1, 3, 5]
