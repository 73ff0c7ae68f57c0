"""How clients reach a local AWS endpoint: env vars, s3ddb storage options, boto3 clients.

Shared by the in-process :class:`~s3ddb.testing.LocalAWS` and the subprocess-backed
:class:`~s3ddb.testing.LocalAWSProcess`, which differ only in where the server runs.
"""

from __future__ import annotations

import os
import threading
from typing import Any

DEFAULT_REGION = "us-east-1"

_SESSION_LOCK = threading.Lock()
# moto accepts any credentials; these are the conventional dummies ("testing"), so a
# test can never sign a request that real AWS would accept.
TEST_ACCESS_KEY_ID = "testing"
TEST_SECRET_ACCESS_KEY = "testing"

# Variables a child process may inherit that would send it somewhere else or make
# botocore look for credentials that do not exist; env(inherit=True) removes them.
_CONFLICTING_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_ENDPOINT_URL_STS",
)

# The contract key schema of the s3ddb commit table (docs: design.md, "DynamoDB table").
TABLE_KEY_SCHEMA: list[dict[str, str]] = [
    {"AttributeName": "base_uri", "KeyType": "HASH"},
    {"AttributeName": "version", "KeyType": "RANGE"},
]
TABLE_ATTRIBUTES: list[dict[str, str]] = [
    {"AttributeName": "base_uri", "AttributeType": "S"},
    {"AttributeName": "version", "AttributeType": "N"},
]


class EndpointClientMixin:
    """Client-side helpers for any object with ``endpoint_url`` and ``region``."""

    @property
    def endpoint_url(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def region(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def env(self, *, inherit: bool = False) -> dict[str, str]:
        """Environment variables that point boto3 (and s3ddb) at this endpoint.

        Args:
            inherit: when true, return a full environment for ``subprocess``: a copy of
                ``os.environ`` without variables that would redirect the child or make
                it look for real credentials (``AWS_PROFILE``, ``AWS_SESSION_TOKEN``...),
                with this endpoint's variables on top.

        Returns:
            ``AWS_ENDPOINT_URL`` (and the S3 / DynamoDB specific spellings, so inherited
            ones cannot win), ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
            (``"testing"``), ``AWS_REGION`` and ``AWS_DEFAULT_REGION``.
        """
        url = self.endpoint_url
        ours = {
            "AWS_ENDPOINT_URL": url,
            "AWS_ENDPOINT_URL_S3": url,
            "AWS_ENDPOINT_URL_DYNAMODB": url,
            "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": TEST_SECRET_ACCESS_KEY,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
        }
        if not inherit:
            return ours
        env = {k: v for k, v in os.environ.items() if k not in _CONFLICTING_ENV}
        env.update(ours)
        return env

    def storage_options(self) -> dict[str, str]:
        """s3ddb ``storage_options`` that address this endpoint (S3 and DynamoDB alike)."""
        return {
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "aws_access_key_id": TEST_ACCESS_KEY_ID,
            "aws_secret_access_key": TEST_SECRET_ACCESS_KEY,
        }

    def boto3_client(self, service: str, **kwargs: Any) -> Any:
        """A new boto3 client for ``service`` against this endpoint.

        Clients come from a boto3 session of this object's own, with the dummy
        credentials and this region, so the caller's AWS environment (profiles, real
        keys) plays no part; the session is reused because building one costs ~150 ms.
        ``kwargs`` go to ``Session.client`` (e.g. ``config=botocore.config.Config(...)``).
        Thread-safe.

        Raises:
            botocore.exceptions.UnknownServiceError: ``service`` is not an AWS service.
        """
        import boto3
        import botocore.session

        kwargs.setdefault("endpoint_url", self.endpoint_url)
        # boto3 sessions are not thread-safe; creating clients is serialized.
        with _SESSION_LOCK:
            session: Any = self.__dict__.get("_boto3_session")
            if session is None:
                # Ignore AWS_PROFILE / AWS_DEFAULT_PROFILE: a profile that does not exist
                # on this machine would otherwise fail every client (ProfileNotFound).
                core = botocore.session.Session(session_vars={"profile": (None, None, None, None)})
                session = boto3.session.Session(
                    aws_access_key_id=TEST_ACCESS_KEY_ID,
                    aws_secret_access_key=TEST_SECRET_ACCESS_KEY,
                    region_name=self.region,
                    botocore_session=core,
                )
                self.__dict__["_boto3_session"] = session
            return session.client(service, **kwargs)

    def create_bucket(self, name: str) -> str:
        """Create S3 bucket ``name`` (in this endpoint's region) and return the name.

        Raises:
            botocore.exceptions.ClientError: the bucket cannot be created, e.g.
                ``BucketAlreadyExists`` when another account in the process owns it.
        """
        kwargs: dict[str, Any] = {"Bucket": name}
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        self.boto3_client("s3").create_bucket(**kwargs)
        return name

    def create_table(self, name: str) -> str:
        """Create DynamoDB table ``name`` with the s3ddb commit-table key schema.

        The schema is the contract one (``base_uri`` S hash key, ``version`` N range
        key), billed on demand. Returns the name.

        Raises:
            botocore.exceptions.ClientError: e.g. ``ResourceInUseException`` when the
                table exists.
        """
        client = self.boto3_client("dynamodb")
        client.create_table(
            TableName=name,
            KeySchema=TABLE_KEY_SCHEMA,
            AttributeDefinitions=TABLE_ATTRIBUTES,
            BillingMode="PAY_PER_REQUEST",
        )
        client.get_waiter("table_exists").wait(
            TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
        )
        return name
