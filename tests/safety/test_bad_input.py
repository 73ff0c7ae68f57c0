"""Bad input gets a typed error that says what and where, and writes nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from tests.conftest import TEST_BUCKET


def test_a_version_beyond_any_number_is_not_found(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(pa.table({"id": [1]}), uri)
    for version in (10**30, 2**64, 0, -1):
        with pytest.raises(s3ddb.VersionNotFoundError, match=f"version {version} of .*latest is 1"):
            s3ddb.dataset(uri, version=version)
    with pytest.raises(s3ddb.VersionNotFoundError):
        s3ddb.dataset(uri).checkout_version(10**30)


@pytest.mark.parametrize(
    "data",
    [{"\udcff": [1]}, [{"name": "x\ud800"}], {"ok": ["fine", "bad \udcff"]}],
    ids=["column name", "row value", "column value"],
)
def test_text_that_is_not_unicode_is_refused(tmp_path: Path, data: Any) -> None:
    uri = tmp_path / "ds"
    with pytest.raises(s3ddb.InvalidInputError, match=r"not valid Unicode.*UTF-8"):
        s3ddb.write_dataset(data, str(uri))
    assert not uri.exists(), "nothing written"


def test_a_missing_table_names_the_endpoint_from_the_environment(
    aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in aws.env().items():
        monkeypatch.setenv(key, value)
    assert os.environ.get("AWS_ENDPOINT_URL") == aws.endpoint_url
    uri = f"s3+ddb://{TEST_BUCKET}/x?ddbTableName=no_such_table_here"
    with pytest.raises(s3ddb.ExternalStoreTableError) as info:
        s3ddb.dataset(uri)
    message = str(info.value)
    assert aws.endpoint_url in message and "default AWS" not in message
