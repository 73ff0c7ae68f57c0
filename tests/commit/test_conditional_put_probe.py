"""A plain ``s3://`` writer asks, once per process and bucket, whether the store refuses
a second ``If-None-Match: *`` write, and refuses to commit where it does not: there two
writers could both commit one version, and one commit would be lost without a trace
(as it was: every append of four racing processes was acknowledged, a third of them
gone)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import CommitMechanismError, InvalidInputError
from s3ddb.io import ObjectStore
from s3ddb.io.object_store import PROBE_DIR
from tests.commit.conftest import HONOURING_BUCKET
from tests.conftest import TEST_BUCKET


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def _probes(aws: Any) -> list[str]:
    return [
        f"{r.operation} {r.path.split(PROBE_DIR)[0]}" for r in aws.requests if PROBE_DIR in r.path
    ]


def test_a_store_that_ignores_if_none_match_is_refused(aws: Any) -> None:
    so = aws.storage_options()
    uri = f"s3://{TEST_BUCKET}/ignores-{uuid.uuid4().hex[:10]}"
    with pytest.raises(CommitMechanismError, match="does not honour If-None-Match") as raised:
        s3ddb.write_dataset(_rows(1, 2), uri, storage_options=so)
    assert "s3+ddb://" in str(raised.value) and "s3_conditional_writes" in str(raised.value)
    assert list(ObjectStore(uri, so).iter_list("")) == []  # nothing committed, nothing left
    with pytest.raises(s3ddb.DatasetNotFoundError):
        s3ddb.dataset(uri, storage_options=so)


def test_trusted_commits_without_asking(aws: Any) -> None:
    so = {**aws.storage_options(), "s3_conditional_writes": "trusted"}
    uri = f"s3://{TEST_BUCKET}/trusted-{uuid.uuid4().hex[:10]}"
    aws.clear_requests()
    s3ddb.write_dataset(_rows(1, 2), uri, storage_options=so)
    s3ddb.write_dataset(_rows(3), uri, mode="append", storage_options=so)
    assert s3ddb.dataset(uri, storage_options=so).count_rows() == 3
    assert _probes(aws) == []


def test_a_store_that_honours_it_is_asked_once(honouring: Any) -> None:
    so = honouring.storage_options()
    first, second = (f"s3://{HONOURING_BUCKET}/ds-{uuid.uuid4().hex[:10]}" for _ in range(2))
    honouring.clear_requests()
    s3ddb.write_dataset(_rows(1, 2), first, storage_options=so)
    probes = sorted(_probes(honouring))
    where = f"/{first.removeprefix('s3://')}/"
    assert probes == [f"DeleteObject {where}", f"PutObject {where}", f"PutObject {where}"]
    honouring.clear_requests()
    s3ddb.write_dataset(_rows(3), first, mode="append", storage_options=so)
    s3ddb.write_dataset(_rows(4), second, storage_options=so)  # the same bucket
    assert _probes(honouring) == []
    assert s3ddb.dataset(first, storage_options=so).count_rows() == 3
    assert not any(PROBE_DIR in m.path for m in ObjectStore(first, so).iter_list(""))


def test_the_setting_takes_probe_or_trusted(aws: Any) -> None:
    so = {**aws.storage_options(), "s3_conditional_writes": "sure"}
    with pytest.raises(InvalidInputError, match="probe or trusted"):
        s3ddb.write_dataset(
            _rows(1), f"s3://{TEST_BUCKET}/x-{uuid.uuid4().hex[:8]}", storage_options=so
        )


def test_a_lost_response_to_the_first_scratch_write_still_answers(honouring: Any) -> None:
    """The client sends it again, and a store that honours the header refuses its own
    first write: that is the answer (it was a bare FileExistsError, the commit lost)."""
    bucket = honouring.create_bucket(f"lost-{uuid.uuid4().hex[:8]}")
    uri = f"s3://{bucket}/ds"
    so = honouring.storage_options()
    lost = honouring.inject_fault("s3", "PutObject", "apply_then_drop", path=PROBE_DIR)
    s3ddb.write_dataset(_rows(1, 2), uri, storage_options=so)
    assert lost.triggered == 1
    assert s3ddb.dataset(uri, storage_options=so).count_rows() == 2


def test_a_store_that_rejects_the_header_is_refused_as_one_that_ignores_it(aws: Any) -> None:
    """Some S3-compatible stores answer 501 NotImplemented to If-None-Match: nothing
    committed, and the error says what to use instead (it was the raw store error)."""
    from botocore.awsrequest import AWSResponse

    class Body:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def stream(self, **_: Any) -> Iterator[bytes]:
            yield self.data

        def read(self, *_: Any) -> bytes:
            data, self.data = self.data, b""
            return data

    error = b"<Error><Code>NotImplemented</Code><Message>If-None-Match</Message></Error>"

    def rejects(request: Any, **_: Any) -> Any:
        if request.method == "PUT" and request.headers.get("If-None-Match"):
            return AWSResponse(request.url, 501, {"Content-Type": "application/xml"}, Body(error))
        return None

    bucket = aws.create_bucket(f"rejects-{uuid.uuid4().hex[:8]}")
    uri = f"s3://{bucket}/ds"
    so = aws.storage_options()
    events = ObjectStore(uri, so).aws.client("s3").meta.events
    events.register("before-send.s3.PutObject", rejects)
    try:
        with pytest.raises(CommitMechanismError, match="does not honour If-None-Match"):
            s3ddb.write_dataset(_rows(1, 2), uri, storage_options=so)
    finally:
        events.unregister("before-send.s3.PutObject", rejects)
    assert list(ObjectStore(uri, so).iter_list("")) == []
