"""S3 and DynamoDB on two different servers.

* ``dynalite``: moto's S3, dynalite's DynamoDB (a second DynamoDB implementation);
* ``s3rver``: s3rver's S3 (a second S3 implementation, without conditional writes),
  moto's DynamoDB on its own endpoint;
* ``seaweedfs``: SeaweedFS's S3 (a real S3-compatible store, with conditional writes;
  tests/support/seaweedfs.py), moto's DynamoDB on its own endpoint.

Tests of the four-step protocol run against these as well as against moto alone, so
that the protocol is proved on independent implementations. Request logs exist on
moto and s3rver (not SeaweedFS); fault injection only on moto. A test that needs
either from a server that lacks it is skipped, with the reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from s3ddb.testing._requests import RequestRecord

#: The session fixture of each endpoint name tests are parametrized with (conftest.py).
ENDPOINT_FIXTURES = {
    "moto": "moto_aws",
    "dynalite": "split_aws",
    "s3rver": "s3rver_split",
    "seaweedfs": "seaweedfs_split",
}


def endpoint(request: pytest.FixtureRequest, name: str) -> Any:
    """The endpoint (``LocalAWS`` or :class:`SplitEndpoints`) named ``name``."""
    return request.getfixturevalue(ENDPOINT_FIXTURES[name])


def _why_not(server: Any, what: str) -> str:
    return (
        f"{type(server).__name__} runs as a separate server without {what}: "
        "only moto's endpoint (LocalAWS) has it"
    )


class SplitEndpoints:
    """Same client helpers as ``LocalAWS``, for S3 on ``s3`` and DynamoDB on ``ddb``."""

    def __init__(self, s3: Any, ddb: Any, name: str = "dynalite") -> None:
        self.s3 = s3
        self.ddb = ddb
        self.name = name

    def _server(self, service: str) -> Any:
        return self.ddb if service == "dynamodb" else self.s3

    @property
    def transactions(self) -> bool:
        """Whether this DynamoDB implements TransactWriteItems (dynalite does not:
        claims there are single conditional PutItems, without their fence)."""
        return self.name != "dynalite"

    def storage_options(self) -> dict[str, str]:
        return {
            **self.s3.storage_options(),
            "s3_endpoint": self.s3.endpoint_url,
            "dynamodb_endpoint": self.ddb.endpoint_url,
            **({} if self.transactions else {"dynamodb_transactions": "false"}),
        }

    def env(self, *, inherit: bool = False) -> dict[str, str]:
        env = self.s3.env(inherit=inherit)
        env["AWS_ENDPOINT_URL_DYNAMODB"] = self.ddb.endpoint_url
        if not self.transactions:
            env["S3DDB_DYNAMODB_TRANSACTIONS"] = "false"
        return env

    def boto3_client(self, service: str, **kwargs: Any) -> Any:
        return self._server(service).boto3_client(service, **kwargs)

    def create_table(self, name: str) -> str:
        return str(self.ddb.create_table(name))

    def create_bucket(self, name: str) -> str:
        return str(self.s3.create_bucket(name))

    def inject_fault(self, service: str, *args: Any, **kwargs: Any) -> Any:
        server = self._server(service)
        if not hasattr(server, "inject_fault"):
            pytest.skip(_why_not(server, "fault injection"))
        return server.inject_fault(service, *args, **kwargs)

    def _log(self, service: str) -> list[RequestRecord]:
        server = self._server(service)
        if not hasattr(server, "requests"):
            pytest.skip(_why_not(server, "a request log"))
        return [r for r in server.requests if r.service == service]

    @property
    def requests(self) -> list[RequestRecord]:
        """Both servers' logs, S3's first (order across the two is not kept)."""
        return self._log("s3") + self._log("dynamodb")

    def count(self, service: str | None = None, operation: str | None = None) -> int:
        services = [service] if service else ["s3", "dynamodb"]
        return sum(
            1
            for s in services
            for r in self._log(s)
            if operation is None or r.operation == operation
        )

    def clear_requests(self) -> None:
        for server in {id(self.s3): self.s3, id(self.ddb): self.ddb}.values():
            if hasattr(server, "clear_requests"):
                server.clear_requests()

    def clear_faults(self) -> None:
        for server in {id(self.s3): self.s3, id(self.ddb): self.ddb}.values():
            if hasattr(server, "clear_faults"):
                server.clear_faults()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)
