"""No secret appears in an error message, a repr or a log line, whatever its type.

Storage options are redacted by name, not by the value's type: a secret given as bytes,
a bytearray, a memoryview, an int or an object whose ``str()`` is the secret must not
be echoed by the error that refuses it. URIs carrying credentials (user info, query
parameters) are refused without printing them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.cli.main import main
from s3ddb.errors import InvalidInputError, S3DDBError
from s3ddb.io.redact import is_secret_option, redact_url
from s3ddb.maintenance.doctor import diagnose

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYSECRET"
NUMBER = 918273645546372819

# Every spelling of a credential option s3ddb accepts (docs/deployments.md).
SECRET_OPTIONS = [
    "aws_secret_access_key",
    "secret_access_key",
    "aws_session_token",
    "session_token",
    "aws_token",
    "token",
    "aws_access_key_id",
    "access_key_id",
    "s3_secret_access_key",
    "s3_session_token",
    "s3_access_key_id",
    "dynamodb_secret_access_key",
    "dynamodb_session_token",
    "dynamodb_access_key_id",
    "aws_secret_access_key_s3",
    "aws_session_token_dynamodb",
    "aws_access_key_id_s3",
    "AWS_SECRET_ACCESS_KEY",
]


class _StrIsSecret:
    def __str__(self) -> str:
        return SECRET

    __repr__ = __str__


VALUES: dict[str, Callable[[], Any]] = {
    "bytes": lambda: SECRET.encode(),
    "bytearray": lambda: bytearray(SECRET.encode()),
    "memoryview": lambda: memoryview(SECRET.encode()),
    "int": lambda: NUMBER,
    "object": _StrIsSecret,
}


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _leaks(text: str, value: Any) -> bool:
    forms = {SECRET, repr(SECRET), str(NUMBER), repr(SECRET.encode())}
    if isinstance(value, (bytes, bytearray)):
        forms.add(repr(value))
    return any(form in text for form in forms)


def _assert_no_secret(exc: BaseException, value: Any, caplog: pytest.LogCaptureFixture) -> None:
    for e in _chain(exc):
        for text in (str(e), repr(e), *map(str, e.args)):
            assert not _leaks(text, value), f"{type(e).__name__} shows the secret: {text}"
    assert not _leaks(caplog.text, value), caplog.text


def _calls(option: str, value: Any) -> dict[str, Callable[[], object]]:
    options = {option: value}
    table = pa.table({"a": [1]})
    return {
        "dataset-memory": lambda: s3ddb.dataset("memory://secrets", storage_options=options),
        "dataset-s3": lambda: s3ddb.dataset("s3://bucket/ds", storage_options=options),
        "write-s3+ddb": lambda: s3ddb.write_dataset(
            table, "s3+ddb://bucket/ds?ddbTableName=t", storage_options=options
        ),
        "write-memory": lambda: s3ddb.write_dataset(
            table, "memory://secrets-w", storage_options=options
        ),
        "doctor": lambda: diagnose("s3://bucket/ds", options),
    }


@pytest.mark.parametrize("kind", list(VALUES))
@pytest.mark.parametrize("option", SECRET_OPTIONS)
def test_secret_option_of_any_type_is_never_echoed(
    option: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    value = VALUES[kind]()
    caplog.set_level(logging.DEBUG)
    for name, call in _calls(option, value).items():
        with pytest.raises(InvalidInputError) as info:
            call()
        assert option in str(info.value), (name, str(info.value))  # says which option
        assert type(value).__name__ in str(info.value)
        _assert_no_secret(info.value, value, caplog)


def test_non_secret_option_still_shows_its_value() -> None:
    with pytest.raises(InvalidInputError, match=r"region.*bytes b'eu-west-1'"):
        s3ddb.dataset("s3://bucket/ds", storage_options={"region": b"eu-west-1"})


class _Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_option_whose_repr_fails_still_gets_the_typed_error() -> None:
    with pytest.raises(InvalidInputError, match="unprintable"):
        s3ddb.dataset("s3://bucket/ds", storage_options={"region": _Unprintable()})


@pytest.mark.parametrize(
    "uri",
    [
        f"s3://bucket/ds?aws_secret_access_key={SECRET}",
        f"s3+ddb://bucket/ds?ddbTableName=t&token={SECRET}",
        f"s3+ddb://bucket/ds?{SECRET}",
        f"s3://bucket/ds?{SECRET}",
        f"s3://AKIAEXAMPLE:{SECRET}@bucket/ds",
        f"s3+ddb://user:{SECRET}@bucket/ds?ddbTableName=t",
        f"file:///tmp/ds?secret={SECRET}",
        f"gs://bucket/ds?sig={SECRET}",
        f"memory://?password={SECRET}",
    ],
)
def test_uri_with_credentials_is_refused_without_showing_them(
    uri: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    for call in (
        lambda: s3ddb.dataset(uri),
        lambda: s3ddb.write_dataset(pa.table({"a": [1]}), uri),
        lambda: diagnose(uri),
    ):
        with pytest.raises(S3DDBError) as info:
            call()
        _assert_no_secret(info.value, SECRET, caplog)
    for verb in ("info", "doctor", "verify"):
        code = main([verb, uri])
        out, err = capsys.readouterr()
        assert code == 2, err
        assert SECRET not in out + err, err
        assert "error" in err


def test_cli_storage_option_secret_is_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["info", "s3://bucket/ds", "--storage-option", f"aws_secret_access_key={SECRET}"])
    out, err = capsys.readouterr()
    assert code == 2
    assert SECRET not in out + err, err


def test_redaction_helpers() -> None:
    for name in [*SECRET_OPTIONS, "password", "aws-secret-access-key", "X-Amz-Signature"]:
        assert is_secret_option(name), name
    for name in ("region", "endpoint_url", "profile", "ddbTableName", "s3_addressing_style"):
        assert not is_secret_option(name), name
    assert (
        redact_url("s3+ddb://b/p?ddbTableName=t&token=x") == "s3+ddb://b/p?ddbTableName=t&token=***"
    )
    assert redact_url("http://user:pw@localhost:4566/x#frag") == "http://***@localhost:4566/x"
    assert redact_url("/local/path?x=1") == "/local/path?x=1"
    assert redact_url("http://[::1/x?a=b") == "http://***"


def test_the_dynamodb_store_repr_hides_credentials_in_its_endpoint() -> None:
    from s3ddb.external_store.dynamodb import DynamoDBManifestStore
    from s3ddb.io.aws import AwsConfig

    store = DynamoDBManifestStore("t", AwsConfig(dynamodb_endpoint="http://user:hunter2@h:1"))
    assert "hunter2" not in repr(store) and "h:1" in repr(store)
