"""S3 and DynamoDB on two different servers: moto's S3, dynalite's DynamoDB.

Tests of the four-step protocol run against this as well as against moto alone, so
that the protocol is proved on a second, independent DynamoDB implementation. The
request log and fault injection exist only on the in-process moto endpoint: a test
that needs them for DynamoDB is skipped here, with the reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from s3ddb.testing import LocalAWS
from s3ddb.testing.node_servers import Dynalite

_NO_DDB_LOG = (
    "dynalite runs as a separate server: the request log and fault injection cover "
    "moto's endpoint only"
)


class SplitEndpoints:
    """Same client helpers as ``LocalAWS``, for S3 on ``s3`` and DynamoDB on ``ddb``."""

    name = "dynalite"

    def __init__(self, s3: LocalAWS, ddb: Dynalite) -> None:
        self.s3 = s3
        self.ddb = ddb

    def storage_options(self) -> dict[str, str]:
        return {**self.s3.storage_options(), "dynamodb_endpoint": self.ddb.endpoint_url}

    def env(self, *, inherit: bool = False) -> dict[str, str]:
        env = self.s3.env(inherit=inherit)
        env["AWS_ENDPOINT_URL_DYNAMODB"] = self.ddb.endpoint_url
        return env

    def boto3_client(self, service: str, **kwargs: Any) -> Any:
        server = self.ddb if service == "dynamodb" else self.s3
        return server.boto3_client(service, **kwargs)

    def create_table(self, name: str) -> str:
        return self.ddb.create_table(name)

    def inject_fault(self, service: str, *args: Any, **kwargs: Any) -> Any:
        if service == "dynamodb":
            pytest.skip(_NO_DDB_LOG)
        return self.s3.inject_fault(service, *args, **kwargs)

    @property
    def requests(self) -> Any:
        pytest.skip(_NO_DDB_LOG)

    def count(self, service: str | None = None, operation: str | None = None) -> int:
        if service != "s3":
            pytest.skip(_NO_DDB_LOG)
        return self.s3.count(service, operation)

    def clear_requests(self) -> None:
        self.s3.clear_requests()

    def clear_faults(self) -> None:
        self.s3.clear_faults()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)
