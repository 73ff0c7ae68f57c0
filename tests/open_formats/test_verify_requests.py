"""What ``s3ddb verify`` asks the store for the published Delta log of every kept
version: requests in proportion to the versions (the log is listed once, each commit,
checkpoint and manifest read a bounded number of times), however many are kept."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.maintenance.verify import verify

BUCKET = "verify-requests"


@pytest.fixture(scope="module")
def honouring() -> Iterator[Any]:
    """An endpoint whose S3 honours If-None-Match (datasets at ``s3://`` URIs, no
    DynamoDB: only S3 requests to count), with the bucket :data:`BUCKET`."""
    from s3ddb.testing import LocalAWS

    with LocalAWS(conditional_writes=True) as server:
        server.create_bucket(BUCKET)
        yield server


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids]})


def _verify_requests(aws: Any, versions: int) -> tuple[Counter[str], Counter[str]]:
    """The S3 requests of one verify of a Delta-published dataset of ``versions``
    versions (inserts, and a delete every third, so that versions carry deletion
    vectors): by operation, and the GETs of each file under ``_delta_log/`` and
    ``_versions/``."""
    name = f"t-verify-{uuid.uuid4().hex[:12]}"
    uri = f"s3://{BUCKET}/{name}"
    so = {**aws.storage_options(), "s3_conditional_writes": "trusted"}
    ds = s3ddb.write_dataset(
        _table(0, 10), uri, storage_options=so, open_formats=["delta"], max_rows_per_file=2
    )
    for i in range(1, versions):
        if i % 3 == 0:
            ds.delete(f"id = {100 * (i - 1)}")  # a row the version before inserted
        else:
            ds.insert(_table(100 * i, 2))
    assert ds.version == versions
    aws.clear_requests()
    report = verify(uri, so, grace_seconds=0)
    assert report.healthy, report.problems
    assert report.versions == versions
    s3 = [r for r in aws.requests if r.service == "s3"]
    by_file = Counter(
        r.path.split(f"/{name}/", 1)[1]
        for r in s3
        if r.operation == "GetObject" and f"/{name}/_delta_log/" in r.path
    )
    by_file.update(
        r.path.split(f"/{name}/", 1)[1]
        for r in s3
        if r.operation == "GetObject" and f"/{name}/_versions/" in r.path
    )
    return Counter(r.operation for r in s3), by_file


def test_verify_of_every_kept_delta_version_costs_requests_in_proportion(
    honouring: Any,
) -> None:
    """Three times the versions: as many listings, and as few files read more than
    twice (a file of the log is read once by the newest version's check, for paths
    outside the dataset, and once by the older versions' check, which carries each
    version's state forward to the next; those near the newest, and its manifest,
    are read by its own checks too), so the GETs grow in proportion to the versions.
    Loading each older version alone listed the log and read ``_last_checkpoint``,
    its checkpoint and the commits since, each time."""
    # As far from a checkpoint (one every ten versions) at the newest version: its own
    # checks read the same number of commits.
    few, few_files = _verify_requests(honouring, 15)
    many, many_files = _verify_requests(honouring, 45)
    assert many["ListObjectsV2"] == few["ListObjectsV2"], (few, many)

    def reread(files: Counter[str]) -> dict[str, int]:
        return {path: count for path, count in files.items() if count > 2}

    assert len(reread(many_files)) == len(reread(few_files)), (
        reread(few_files),
        reread(many_files),
    )
    assert max(many_files.values()) <= 4, reread(many_files)
    # Per version added: its commit and manifest, each read twice, a checkpoint twice
    # in ten versions, and what verify reads of each version besides (data files'
    # footers, deletion vectors and deletion files).
    per_version = (many["GetObject"] - few["GetObject"]) / (45 - 15)
    assert per_version < 10, (few, many)
