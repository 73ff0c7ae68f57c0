"""A plain ``s3://`` commit's conditional PUT of its manifest applies, and its response
is lost: botocore resends it and the store answers 412, its own object being there.
The commit reads the object back to learn whether it is its own; when that read
fails too, the outcome is unknown and every file stays. (The failed read used to
pass for a definite failure, as the 412 it was made while handling: the commit's
transaction file and fragment-list chunks were deleted from a version that had
landed, which could then not be read, and the caller, told it had failed, appended
the rows again.)"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import CredentialsError, ObjectStoreError
from s3ddb.format.chunks import clear_chunk_cache
from s3ddb.io import ObjectStore
from s3ddb.io.service_errors import as_storage_error
from tests.commit.conftest import HONOURING_BUCKET


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


@pytest.mark.parametrize("read_back", ["throttle", "expired_token"])
def test_a_landed_put_whose_read_back_fails_keeps_every_file(
    honouring: Any, read_back: str
) -> None:
    # Trusted: the probe's answer, cached per bucket, is another test's subject.
    so = {**honouring.storage_options(), "s3_conditional_writes": "trusted"}
    uri = f"s3://{HONOURING_BUCKET}/lost-put-{uuid.uuid4().hex[:10]}"
    s3ddb.write_dataset(_rows(100), uri, storage_options=so)
    ds = s3ddb.dataset(uri, storage_options=so)
    # Version 2 lists its fragments in chunks, files of its own a cleanup would delete.
    ds.update_config({"s3ddb.chunk_fragments": "2", "s3ddb.inline_fragments": "1"})
    try:
        lost = honouring.inject_fault("s3", "PutObject", "apply_then_drop", path="/_versions/")
        failed = honouring.inject_fault(
            "s3", "GetObject", read_back, 10, after=lost, path="/_versions/"
        )
        with pytest.raises(s3ddb.CommitStateUnknownError, match="may have landed"):
            s3ddb.write_dataset(
                _rows(1, 2, 3, 4), uri, mode="append", max_rows_per_file=1, storage_options=so
            )
        assert lost.triggered == 1 and failed.triggered >= 1
    finally:
        honouring.clear_faults()
    clear_chunk_cache()
    reread = s3ddb.dataset(uri, storage_options=so)
    assert reread.version == 3
    assert sorted(reread.to_table()["id"].to_pylist()) == [1, 2, 3, 4, 100]
    store = ObjectStore(uri, so)
    assert any(m.path.startswith("_fragments/") for m in store.iter_list(""))


def test_a_failure_met_while_handling_another_is_named_by_its_own_answer() -> None:
    """An S3 error raised while handling a 412 is mapped by its own code, not the
    412's: a throttled read is a failed read, not a taken name."""
    from botocore.exceptions import ClientError

    def client_error(code: str, status: int) -> ClientError:
        return ClientError(
            {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op"
        )

    try:
        try:
            raise client_error("PreconditionFailed", 412)
        except ClientError as taken:
            raise as_storage_error(taken, "b/k") from taken
    except FileExistsError:
        try:
            raise client_error("SlowDown", 503)
        except ClientError as throttled:
            mapped = as_storage_error(throttled, "b/k")
    assert isinstance(mapped, ObjectStoreError) and "SlowDown" in str(mapped)


@pytest.mark.parametrize("first", ["refused", "lost, then refused"])
def test_a_put_refused_for_expired_credentials(honouring: Any, first: str) -> None:
    """The manifest's PUT is refused as of expired credentials, and so is the read of
    the object. Refused at its only attempt, nothing of it landed: the error is the
    credentials', and nothing is committed. Refused when resent after an attempt
    whose response was lost, the first attempt may have landed: unknown, every file
    kept, and the version is there."""
    so = {**honouring.storage_options(), "s3_conditional_writes": "trusted"}
    uri = f"s3://{HONOURING_BUCKET}/expired-{uuid.uuid4().hex[:10]}"
    ds = s3ddb.write_dataset(_rows(1), uri, storage_options=so)
    try:
        after = None
        if first != "refused":
            after = honouring.inject_fault("s3", "PutObject", "apply_then_drop", path="/_versions/")
        refused = honouring.inject_fault(
            "s3", "PutObject", "expired_token", 10, after=after, path="/_versions/"
        )
        honouring.inject_fault("s3", "GetObject", "expired_token", 10, after=refused)
        expected = CredentialsError if first == "refused" else s3ddb.CommitStateUnknownError
        with pytest.raises(expected):
            ds.insert(_rows(2))
        assert refused.triggered == 1
    finally:
        honouring.clear_faults()
    reread = s3ddb.dataset(uri, storage_options=so)
    assert sorted(reread.to_table()["id"].to_pylist()) == ([1] if first == "refused" else [1, 2])
