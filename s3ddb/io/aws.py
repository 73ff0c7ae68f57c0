"""AWS configuration shared by the S3 object store and the DynamoDB external store.

Settings come from the standard boto3 chain (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL_DYNAMODB``, ``AWS_REGION`` /
``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``...). ``storage_options`` override them, and the same overrides apply to
both services: ``endpoint_url`` is the endpoint of every service (like
``AWS_ENDPOINT_URL``) unless the service-specific ``s3_endpoint`` or
``dynamodb_endpoint`` is given.

boto3 imports lazily, so local and in-memory datasets never pay for it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from s3ddb.errors import InvalidInputError

# storage_options key -> AwsConfig attribute. Aliases follow boto3 / object_store spellings.
_OPTION_ALIASES: dict[str, str] = {
    "endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "aws_endpoint_url": "endpoint_url",
    "s3_endpoint": "s3_endpoint",
    "aws_endpoint_url_s3": "s3_endpoint",
    "dynamodb_endpoint": "dynamodb_endpoint",
    "aws_endpoint_url_dynamodb": "dynamodb_endpoint",
    "region": "region",
    "region_name": "region",
    "aws_region": "region",
    "aws_access_key_id": "aws_access_key_id",
    "access_key_id": "aws_access_key_id",
    "aws_secret_access_key": "aws_secret_access_key",
    "secret_access_key": "aws_secret_access_key",
    "aws_session_token": "aws_session_token",
    "session_token": "aws_session_token",
    "profile": "profile",
    "aws_profile": "profile",
    # pylance (object_store) spellings of the same settings.
    "endpoint": "endpoint_url",
    "aws_default_region": "region",
    "default_region": "region",
    "aws_token": "aws_session_token",
    "token": "aws_session_token",
}

# pylance (object_store) switches s3ddb accepts for compatibility but that change
# nothing: boto3 talks HTTP to an http:// endpoint anyway, and picks the addressing
# style itself (the option is not applied). Values must still be booleans.
_ACCEPTED_FLAGS = frozenset(
    {"allow_http", "aws_allow_http", "virtual_hosted_style_request",
     "aws_virtual_hosted_style_request"}
)  # fmt: skip
_BOOLEANS = frozenset({"true", "false", "1", "0", "yes", "no"})


@dataclass(frozen=True)
class AwsConfig:
    """Explicit AWS overrides; ``None`` means "let the boto3 chain decide"."""

    endpoint_url: str | None = None
    s3_endpoint: str | None = None
    dynamodb_endpoint: str | None = None
    region: str | None = None
    aws_access_key_id: str | None = field(default=None, repr=False)
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    profile: str | None = None

    def __repr__(self) -> str:
        # Credentials never appear in a repr (nor so in any message or log built
        # from one): only whether they were given.
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.repr and getattr(self, f.name) is not None
        )
        given = "explicit credentials" if self.aws_access_key_id else "credentials from the chain"
        return f"AwsConfig({shown}{', ' if shown else ''}{given})"

    @classmethod
    def from_storage_options(cls, storage_options: Mapping[str, Any] | None) -> AwsConfig:
        """Build the overrides from ``storage_options``.

        Raises:
            InvalidInputError: an option is not an AWS setting s3ddb knows, or its value
                is not a string.
        """
        values: dict[str, str] = {}
        for key, value in (storage_options or {}).items():
            if key.lower() in _ACCEPTED_FLAGS:
                if str(value).lower() not in _BOOLEANS:
                    raise InvalidInputError(f"storage option {key!r} must be true or false")
                continue
            attr = _OPTION_ALIASES.get(key.lower())
            if attr is None:
                known = ", ".join(sorted({k for k in _OPTION_ALIASES if k == _OPTION_ALIASES[k]}))
                raise InvalidInputError(f"unknown storage option {key!r}; AWS options are: {known}")
            if value is not None and not isinstance(value, str):
                raise InvalidInputError(
                    f"storage option {key!r} must be a string, got {type(value).__name__} {value!r}"
                )
            if value is not None:
                values[attr] = value
        return cls(**values)

    def as_dict(self) -> dict[str, str]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    def endpoint_for(self, service: str) -> str | None:
        """The explicit endpoint for ``service`` ("s3" or "dynamodb"), if any."""
        specific = {"s3": self.s3_endpoint, "dynamodb": self.dynamodb_endpoint}.get(service)
        return specific or self.endpoint_url

    def endpoint_in_effect(self, service: str) -> str | None:
        """The endpoint requests to ``service`` go to, for messages: the explicit one,
        else the environment's (``AWS_ENDPOINT_URL_<SERVICE>``, ``AWS_ENDPOINT_URL``, as
        boto3 reads them), else None (the region's AWS endpoint)."""
        explicit = self.endpoint_for(service)
        if explicit or os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true":
            return explicit
        return (
            os.environ.get(f"AWS_ENDPOINT_URL_{service.upper()}")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None
        )

    def region_or_default(self) -> str | None:
        return self.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")

    # --- boto3 -------------------------------------------------------------------

    def boto3_session(self) -> Any:
        """A boto3 Session for these overrides, shared per process."""
        key = (os.getpid(), self)
        with _lock:
            session = _sessions.get(key)
            if session is None:
                import boto3

                kwargs: dict[str, Any] = {}
                if self.profile:
                    kwargs["profile_name"] = self.profile
                if self.aws_access_key_id:
                    kwargs["aws_access_key_id"] = self.aws_access_key_id
                    kwargs["aws_secret_access_key"] = self.aws_secret_access_key
                    kwargs["aws_session_token"] = self.aws_session_token
                region = self.region_or_default()
                if region:
                    kwargs["region_name"] = region
                session = boto3.Session(**kwargs)
                _sessions[key] = session
            return session

    def client(self, service: str, *, max_attempts: int | None = None) -> Any:
        """A boto3 client for ``service``, created once per process and reused.

        ``max_attempts`` sets botocore's own retry budget; callers that retry
        themselves pass 1 so that their retry policy is the only one.
        """
        key = (os.getpid(), self, service, max_attempts)
        with _lock:
            client = _clients.get(key)
        if client is not None:
            return client
        # One thread at a time builds clients: a boto3 Session is not thread-safe, and
        # the commit path's parallel uploads may all ask for the first S3 client at once.
        with _create_lock:
            with _lock:
                client = _clients.get(key)
            if client is not None:
                return client
            from botocore.config import Config

            retries: dict[str, Any] = {"mode": "standard"}
            if max_attempts is not None:
                retries["total_max_attempts"] = max_attempts
            config = Config(retries=retries, max_pool_connections=32)  # type: ignore[arg-type]
            kwargs: dict[str, Any] = {"config": config}
            endpoint = self.endpoint_for(service)
            if endpoint:
                kwargs["endpoint_url"] = endpoint
            session = self.boto3_session()
            if session.region_name is None:
                # boto3 refuses to build a client without a region (from the environment,
                # a profile or ~/.aws/config); emulators ignore it.
                kwargs["region_name"] = "us-east-1"
            client = session.client(service, **kwargs)
            with _lock:
                return _clients.setdefault(key, client)

    # --- s3fs --------------------------------------------------------------------

    def s3fs_options(self) -> dict[str, Any]:
        """Keyword arguments for ``s3fs.S3FileSystem`` carrying these overrides."""
        opts: dict[str, Any] = {}
        client_kwargs: dict[str, Any] = {}
        endpoint = self.endpoint_for("s3")
        if endpoint:
            opts["endpoint_url"] = endpoint
        region = self.region_or_default()
        if region:
            client_kwargs["region_name"] = region
        if self.aws_access_key_id:
            opts["key"] = self.aws_access_key_id
            opts["secret"] = self.aws_secret_access_key
            if self.aws_session_token:
                opts["token"] = self.aws_session_token
        if self.profile:
            opts["profile"] = self.profile
        if client_kwargs:
            opts["client_kwargs"] = client_kwargs
        return opts


_lock = threading.Lock()
_create_lock = threading.Lock()
_sessions: dict[Any, Any] = {}
_clients: dict[Any, Any] = {}
