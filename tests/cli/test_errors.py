"""The CLI's error contract, walked through every verb: exit 2 for usage and access
errors (missing bucket, table, credentials, endpoint; a misspelt URI key), 1 for
failures and problems found; ``--debug`` adds the traceback and keeps the status;
long messages wrapped, continuation lines indented; hidden verbs stay hidden. And the
typed errors the library raises for the same mistakes."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.cli.main import build_parser
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.cli_runner import run_cli as run

# Every verb that opens a dataset, with the arguments it needs besides the URI.
DATASET_VERBS: dict[str, Callable[[str], list[str]]] = {
    "info": lambda uri: ["info", uri],
    "history": lambda uri: ["history", uri],
    "versions": lambda uri: ["versions", uri],
    "show": lambda uri: ["show", uri],
    "changes": lambda uri: ["changes", uri, "--from", "0"],
    "delete": lambda uri: ["delete", uri, "id > 1"],
    "update": lambda uri: ["update", uri, "--set", "id=1"],
    "compact": lambda uri: ["compact", uri],
    "restore": lambda uri: ["restore", uri, "1"],
    "tags": lambda uri: ["tags", uri],
    "tags list": lambda uri: ["tags", uri, "list"],
    "tags create": lambda uri: ["tags", uri, "create", "t", "1"],
    "tags delete": lambda uri: ["tags", uri, "delete", "t"],
    "verify": lambda uri: ["verify", uri],
    "sync": lambda uri: ["sync", uri],
    "cleanup": lambda uri: ["cleanup", uri],
    "drop": lambda uri: ["drop", uri, "--yes"],
    "migrate-commits": lambda uri: ["migrate-commits", uri],
    "doctor": lambda uri: ["doctor", uri],
    "open-formats": lambda uri: ["open-formats", uri],
    "catalog register": lambda uri: ["catalog", "register", uri, "--glue", "db.t"],
    "catalog sync": lambda uri: ["catalog", "sync", uri],
}
# Verbs without a dataset URI, tested on their own below.
OTHER_VERBS = {"create-table", "local-aws", "demo"}
HIDDEN_VERBS = {"demo-writer", "demo-change"}


def _verbs_listed() -> set[str]:
    """The verbs ``s3ddb --help`` lists, aliases included."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    shown = {id(action.choices[a.dest]) for a in action._get_subactions()}
    return {name for name, verb in action.choices.items() if id(verb) in shown}


def test_every_verb_is_walked() -> None:
    assert _verbs_listed() == {v.split()[0] for v in DATASET_VERBS} | OTHER_VERBS


def _assert_wrapped(err: str, first: str) -> list[str]:
    """stderr holds one error: its first line starts with ``first``, no line is over
    100 characters unless the message indents it (a command kept whole), and every
    continuation line is indented."""
    lines = err.splitlines()
    assert lines and lines[0].startswith(first), err
    assert len(lines[0]) <= 100 or len(lines) == 1, err
    for line in lines[1:]:
        assert line.startswith("  "), err
        assert len(line) <= 100 or line.startswith("      "), err
    return lines


@pytest.fixture
def flags(aws: Any) -> list[str]:
    return [f"--storage-option={k}={v}" for k, v in aws.storage_options().items()]


@pytest.mark.parametrize("verb", sorted(DATASET_VERBS))
def test_missing_table(capsys: Any, flags: list[str], verb: str) -> None:
    uri = f"s3+ddb://{TEST_BUCKET}/e-{uuid.uuid4().hex[:8]}?ddbTableName=nope_table"
    code, out, err = run(capsys, *DATASET_VERBS[verb](uri), *flags)
    if verb == "doctor":  # a diagnosis, with the access error's status
        assert code == 2 and "[FAIL] dynamodb.table" in out
        return
    assert code == 2, err
    lines = _assert_wrapped(
        err, "s3ddb: error: ExternalStoreTableError: DynamoDB table 'nope_table'"
    )
    # The command that fixes it is on a line of its own, whole, ready to copy.
    assert any(line.strip().startswith("s3ddb create-table nope_table ") for line in lines)


@pytest.mark.parametrize("verb", sorted(DATASET_VERBS))
def test_missing_bucket(capsys: Any, flags: list[str], verb: str) -> None:
    uri = f"s3+ddb://no-such-bucket-{uuid.uuid4().hex[:8]}/ds?ddbTableName={TEST_TABLE}"
    code, out, err = run(capsys, *DATASET_VERBS[verb](uri), *flags)
    if verb == "doctor":
        assert code == 2 and "NoSuchBucket" in out
        return
    assert code == 2, err
    assert err.startswith("s3ddb: error: BucketNotFoundError: S3 bucket 'no-such-bucket-"), err
    assert err.count("\n") == 1 and "unexpected" not in err


@pytest.mark.parametrize("verb", sorted(set(DATASET_VERBS) - {"doctor"}))
@pytest.mark.parametrize("scheme", ["s3", "s3+ddb"])
def test_missing_dataset(capsys: Any, flags: list[str], verb: str, scheme: str) -> None:
    """Every verb on a bucket (and table) that exist but hold no dataset there: no
    such dataset, exit 2; sync and drop included (they have nothing to repair or
    delete, which is not success)."""
    uri = f"{scheme}://{TEST_BUCKET}/nothing-{uuid.uuid4().hex[:8]}"
    if scheme == "s3+ddb":
        uri += f"?ddbTableName={TEST_TABLE}"
    code, _, err = run(capsys, *DATASET_VERBS[verb](uri), *flags)
    assert code == 2, err
    assert err.startswith("s3ddb: error: DatasetNotFoundError: no dataset at "), err


def test_drop_missing_ok(capsys: Any, flags: list[str]) -> None:
    uri = f"s3+ddb://{TEST_BUCKET}/nothing-{uuid.uuid4().hex[:8]}?ddbTableName={TEST_TABLE}"
    code, out, err = run(capsys, "drop", uri, "--yes", "--missing-ok", *flags)
    assert code == 0, err
    assert "0 objects (0 bytes), 0 DynamoDB rows" in out


@pytest.mark.parametrize("verb", sorted(DATASET_VERBS))
def test_misspelt_query_key(capsys: Any, flags: list[str], verb: str) -> None:
    uri = f"s3+ddb://{TEST_BUCKET}/ds?ddbtablename={TEST_TABLE}"
    code, _, err = run(capsys, *DATASET_VERBS[verb](uri), *flags)
    assert code == 2
    assert err.startswith("s3ddb: error: InvalidURIError: "), err
    assert "misspelt query key 'ddbtablename'" in err and "ddbTableName" in err


@pytest.mark.parametrize("verb", sorted(DATASET_VERBS))
def test_unreachable_endpoint(capsys: Any, monkeypatch: pytest.MonkeyPatch, verb: str) -> None:
    # s3:// with one attempt fails at once; sync has nothing to do on s3://, so it
    # gets s3+ddb:// (DynamoDB retries a connection for seconds before giving up).
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    uri = f"s3://{TEST_BUCKET}/ds"
    if verb == "sync":
        uri = f"s3+ddb://{TEST_BUCKET}/ds?ddbTableName={TEST_TABLE}"
    dead = ["--endpoint-url", "http://127.0.0.1:1", "--region", "us-east-1"]
    keys = ["--storage-option=aws_access_key_id=x", "--storage-option=aws_secret_access_key=y"]
    code, out, err = run(capsys, *DATASET_VERBS[verb](uri), *dead, *keys)
    if verb == "doctor":
        # doctor's own contract: an unreachable service is 2, a report is still printed
        assert code == 2 and "127.0.0.1:1" in out
        return
    assert code == 2, err
    _assert_wrapped(err, "s3ddb: error: ")
    assert "UnreachableError: cannot connect to " in err and "127.0.0.1:1" in err


@pytest.mark.parametrize("verb", sorted(DATASET_VERBS))
def test_debug_adds_traceback_and_keeps_status(capsys: Any, flags: list[str], verb: str) -> None:
    uri = f"s3+ddb://{TEST_BUCKET}/ds?ddbtablename={TEST_TABLE}"
    argv = DATASET_VERBS[verb](uri)
    code, _, err = run(capsys, "--debug", *argv, *flags)
    assert code == 2
    assert err.startswith("Traceback (most recent call last):"), err
    assert err.splitlines()[-1].startswith("s3ddb: error: InvalidURIError: ")


def _child(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "s3ddb.cli.main", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _no_credentials_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def test_missing_credentials_in_a_child_process(aws: Any, tmp_path: Path) -> None:
    env = _no_credentials_env(tmp_path)
    where = ["--endpoint-url", aws.endpoint_url, "--region", aws.region]
    uri = f"s3+ddb://{TEST_BUCKET}/ds?ddbTableName={TEST_TABLE}"
    for argv in (["info", uri], ["create-table", "t_nocreds"], ["--debug", "info", uri]):
        child = _child(*argv, *where, env=env)
        assert child.returncode == 2, child.stderr
        message = child.stderr[child.stderr.index("s3ddb: error: ") :]
        lines = _assert_wrapped(message, "s3ddb: error: CredentialsError: ")
        assert len(lines) > 1 and "Traceback" not in message  # a wall of text, wrapped


def test_create_table_takes_the_aws_options(aws: Any, capsys: Any) -> None:
    name = f"t_{uuid.uuid4().hex[:8]}"
    keys = [f"--storage-option={k}={v}" for k, v in aws.storage_options().items()]
    dynamodb_only = [k for k in keys if "endpoint_url" not in k] + [
        "--dynamodb-endpoint",
        aws.endpoint_url,
        "--dynamodb-region",
        aws.region,
    ]
    code, out, err = run(capsys, "create-table", name, *dynamodb_only)
    assert code == 0, err
    assert f"created DynamoDB table {name!r} (endpoint {aws.endpoint_url}" in out
    code, _, err = run(capsys, "create-table", name, "--storage-option=regoin=x", *keys)
    assert code == 2 and "unknown storage option 'regoin'" in err
    dead = [k for k in keys if "endpoint_url" not in k] + ["--endpoint-url=http://127.0.0.1:1"]
    code, _, err = run(capsys, "create-table", name, *dead)
    assert code == 2 and "ExternalStoreUnreachableError: cannot connect to DynamoDB" in err


def test_wrong_verb_lists_only_the_listed_verbs(capsys: Any) -> None:
    code, _, err = run(capsys, "bogus")
    assert code == 2 and "invalid choice: 'bogus'" in err
    for verb in _verbs_listed():
        assert verb in err
    for hidden in HIDDEN_VERBS:
        assert hidden not in err


def test_filter_parse_errors_in_our_words(capsys: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1, 2, 3]}), uri)
    for text, words in (
        ("id >", "a value is missing after '>' at character 4"),
        ("id > 1 and", "a value is missing after 'AND' at character 8"),
        ("id in (1, 2", "a closing ')' is missing"),
        ("id = 'x", "unterminated string: the ' at character 6 is never closed"),
        ("id = 1 2", "unexpected '2' at character 8"),
    ):
        code, _, err = run(capsys, "show", uri, "--filter", text)
        assert code == 2
        assert err.startswith("s3ddb: error: InvalidExpressionError: cannot parse expression")
        assert words in err and "sqlglot" not in err and "<class" not in err, err


# --- the library's typed errors ------------------------------------------------------


def test_missing_bucket_is_typed(aws: Any) -> None:
    uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/ds"
    with pytest.raises(s3ddb.BucketNotFoundError, match="S3 bucket 'no-such-bucket-") as info:
        s3ddb.dataset(uri, storage_options=aws.storage_options())
    assert isinstance(info.value, FileNotFoundError)  # still caught as before
    with pytest.raises(s3ddb.BucketNotFoundError):
        s3ddb.write_dataset(pa.table({"id": [1]}), uri, storage_options=aws.storage_options())


def test_impossible_local_path_is_typed_without_noise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    caplog.set_level(logging.DEBUG, logger="s3ddb")
    with pytest.raises(s3ddb.DatasetLocationError, match="cannot create the dataset directory"):
        s3ddb.write_dataset(pa.table({"id": [1]}), str(a_file / "ds"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("bad", ["-1", "0", "+0"])
def test_a_version_below_1_is_a_usage_error_not_a_tag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    """'--version -1' said: invalid tag name '-1'."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1]}), uri)
    code, _out, err = run(capsys, "info", uri, "--version", bad)
    assert code == 2 and f"expected a version >= 1 or a tag, got {bad!r}" in err, err


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("s3://bucket-only", "s3://bucket-only/<prefix>"),
        ("s3+ddb://bucket-only?ddbTableName=T", "s3+ddb://bucket-only/<prefix>?ddbTableName="),
    ],
)
def test_a_uri_without_a_prefix_is_named_in_its_own_scheme(
    capsys: pytest.CaptureFixture[str], uri: str, shown: str
) -> None:
    code, _out, err = run(capsys, "info", uri)
    assert code == 2 and "needs a prefix" in err and shown in err, err


def test_a_storage_option_in_the_uri_is_named_and_sent_where_it_belongs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It was '1 unexpected query parameter(s) (names hidden)'. A known option's name
    is named, never its value; values stay hidden whatever the key."""
    code, _out, err = run(capsys, "info", "s3+ddb://bucket/p?ddbTableName=T&region=eu-west-9")
    assert code == 2 and "'region' is a storage option" in err and "eu-west-9" not in err
    code, _out, err = run(capsys, "info", "s3://bucket/p?k=topsecret")
    assert code == 2 and "names hidden" in err and "topsecret" not in err


def test_a_write_through_the_wrong_commit_mechanism_is_a_usage_error(
    aws: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """s3:// of a dataset that commits through DynamoDB: the fix is the URI the message
    names, as for a bad URI (it exited 1, as a failed operation)."""
    so = aws.storage_options()
    name = f"mech-{uuid.uuid4().hex[:10]}"
    s3ddb.write_dataset(
        pa.table({"id": [1, 2]}),
        f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}",
        storage_options=so,
    )
    flags = [f"--storage-option={k}={v}" for k, v in so.items()]
    code, _out, err = run(capsys, "delete", f"s3://{TEST_BUCKET}/{name}", "id = 1", *flags)
    assert code == 2 and "CommitMechanismError" in err and "ddbTableName" in err, err
