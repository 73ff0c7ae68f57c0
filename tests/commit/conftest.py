"""Fixtures of the commit tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

#: The bucket of :func:`honouring`.
HONOURING_BUCKET = "honours-inm"


@pytest.fixture(scope="session")
def honouring() -> Iterator[Any]:
    """An endpoint whose S3 honours If-None-Match, as AWS S3 does (the suite's own
    drops it), with the bucket :data:`HONOURING_BUCKET`."""
    from s3ddb.testing import LocalAWS

    with LocalAWS(conditional_writes=True) as server:
        server.create_bucket(HONOURING_BUCKET)
        yield server
