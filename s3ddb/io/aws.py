"""AWS configuration of the S3 object store, the DynamoDB external store and the AWS
Glue catalog a dataset may keep current (:mod:`s3ddb.catalogs`).

Each service (``s3``, ``dynamodb``, ``glue``) resolves each of its settings on its own, taking the
first of (docs/deployments.md, "Precedence"): what the caller passes beats the
environment, and within each the setting for the service beats the shared one.

1. the storage option for that service (``dynamodb_region``, ``s3_access_key_id``...);
2. the shared storage option (``region``, ``aws_access_key_id``, ``endpoint_url``...);
3. the environment variable for that service (``AWS_REGION_DYNAMODB``,
   ``AWS_ACCESS_KEY_ID_S3``, ``AWS_ENDPOINT_URL_DYNAMODB``...);
4. the standard boto3 chain (``AWS_REGION`` / ``AWS_DEFAULT_REGION``,
   ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ``~/.aws/config``,
   instance roles...).

Credentials resolve as one unit (key id, secret and token, or a profile) from the first
level that gives any, so a key id from one level is never paired with a secret from
another. ``role_arn`` (per service too) assumes that role with those credentials
through botocore's refreshing assume-role fetcher.

boto3 imports lazily, so local and in-memory datasets never pay for it.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from s3ddb.errors import InvalidInputError
from s3ddb.io.aws_sessions import aio_role_session, session_for
from s3ddb.io.per_process import PerProcess
from s3ddb.io.redact import is_secret_option
from s3ddb.io.service_settings import ServiceSettings

__all__ = ["CLIENTS", "SERVICES", "AwsConfig", "ServiceSettings", "is_storage_option"]

#: AWS Glue is a catalog s3ddb keeps current (s3ddb.catalogs), not a store.
SERVICES = ("s3", "dynamodb", "glue")

# storage_options key -> AwsConfig attribute. Aliases follow boto3 / object_store spellings.
_OPTION_ALIASES: dict[str, str] = {
    "endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "aws_endpoint_url": "endpoint_url",
    "s3_endpoint": "s3_endpoint",
    "aws_endpoint_url_s3": "s3_endpoint",
    "dynamodb_endpoint": "dynamodb_endpoint",
    "aws_endpoint_url_dynamodb": "dynamodb_endpoint",
    "glue_endpoint": "glue_endpoint",
    "aws_endpoint_url_glue": "glue_endpoint",
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
# style itself (the option is not applied; s3_addressing_style chooses one). Values
# must still be booleans.
_ACCEPTED_FLAGS = frozenset(
    {"allow_http", "aws_allow_http", "virtual_hosted_style_request",
     "aws_virtual_hosted_style_request",
     # s3ddb's own switch, not an AWS setting: read by s3ddb.format.bases.
     "allow_cross_store_base_paths"}
)  # fmt: skip
_BOOLEANS = frozenset({"true", "false", "1", "0", "yes", "no"})

# --- per-service settings (mixed deployments) ----------------------------------------
# Kept in a block of their own: <service>_<setting>, plus the environment-variable
# spellings (lower case) that delta-rs users know, e.g. aws_region_dynamodb.
_PER_SERVICE_SETTINGS = (
    "region",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "profile",
    "role_arn",
)
_SERVICE_OPTION_ALIASES: dict[str, str] = {
    **{f"{svc}_{s}": f"{svc}_{s}" for svc in SERVICES for s in _PER_SERVICE_SETTINGS},
    **{f"aws_{s}_{svc}": f"{svc}_{s}" for svc in SERVICES for s in _PER_SERVICE_SETTINGS},
    "s3_addressing_style": "s3_addressing_style",
    "s3_ca_bundle": "s3_ca_bundle",
    "s3_verify": "s3_verify",
    "s3_conditional_writes": "s3_conditional_writes",
    "dynamodb_transactions": "dynamodb_transactions",
    "role_arn": "role_arn",
    "aws_role_arn": "role_arn",
    "role_session_name": "role_session_name",
    "sts_endpoint": "sts_endpoint",
    "aws_endpoint_url_sts": "sts_endpoint",
}
_ALL_ALIASES = {**_OPTION_ALIASES, **_SERVICE_OPTION_ALIASES}

_ADDRESSING_STYLES = ("path", "virtual", "auto")
#: Values of the storage option ``s3_conditional_writes``.
CONDITIONAL_WRITES_SETTINGS = ("probe", "trusted")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_SECRET_FIELDS = frozenset(
    {"aws_access_key_id", "aws_secret_access_key", "aws_session_token"}
    | {
        f"{svc}_{s}"
        for svc in SERVICES
        for s in ("access_key_id", "secret_access_key", "session_token")
    }
)


def is_storage_option(name: str) -> bool:
    """Whether ``name`` is a storage option s3ddb knows (any spelling it accepts)."""
    return name.lower() in _ALL_ALIASES or name.lower() in _ACCEPTED_FLAGS


def _short_repr(value: object) -> str:
    """repr() of a non-secret option's value, cut to a readable length."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not replace the real error
        return "(unprintable)"
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class AwsConfig:
    """Explicit AWS overrides from ``storage_options``; ``None`` means "not given".

    :meth:`settings` resolves them, with the environment, into what one service uses.
    """

    endpoint_url: str | None = None
    s3_endpoint: str | None = None
    dynamodb_endpoint: str | None = None
    glue_endpoint: str | None = None
    region: str | None = None
    aws_access_key_id: str | None = field(default=None, repr=False)
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    role_arn: str | None = None
    role_session_name: str | None = None
    sts_endpoint: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = field(default=None, repr=False)
    s3_secret_access_key: str | None = field(default=None, repr=False)
    s3_session_token: str | None = field(default=None, repr=False)
    s3_profile: str | None = None
    s3_role_arn: str | None = None
    s3_addressing_style: str | None = None
    s3_ca_bundle: str | None = None
    s3_verify: str | None = None
    #: "probe" (the default): before its first plain ``s3://`` commit to a bucket, a
    #: process checks that the store refuses a second ``If-None-Match: *`` write;
    #: "trusted": it does not (docs/deployments.md).
    s3_conditional_writes: str | None = None
    dynamodb_region: str | None = None
    dynamodb_access_key_id: str | None = field(default=None, repr=False)
    dynamodb_secret_access_key: str | None = field(default=None, repr=False)
    dynamodb_session_token: str | None = field(default=None, repr=False)
    dynamodb_profile: str | None = None
    dynamodb_role_arn: str | None = None
    #: "false" for DynamoDB implementations without TransactWriteItems: claims are
    #: then single conditional PutItems, without their fence (docs/protocol.md).
    dynamodb_transactions: str | None = None
    glue_region: str | None = None
    glue_access_key_id: str | None = field(default=None, repr=False)
    glue_secret_access_key: str | None = field(default=None, repr=False)
    glue_session_token: str | None = field(default=None, repr=False)
    glue_profile: str | None = None
    glue_role_arn: str | None = None

    def __post_init__(self) -> None:
        style = self.s3_addressing_style
        if style is not None and style.lower() not in _ADDRESSING_STYLES:
            raise InvalidInputError(
                f"storage option s3_addressing_style={style!r}: expected one of "
                f"{', '.join(_ADDRESSING_STYLES)}"
            )
        verify = self.s3_verify
        if verify is not None and verify.lower() not in _TRUE + _FALSE:
            raise InvalidInputError(f"storage option s3_verify={verify!r}: expected true or false")
        writes = self.s3_conditional_writes
        if writes is not None and writes.lower() not in CONDITIONAL_WRITES_SETTINGS:
            raise InvalidInputError(
                f"storage option s3_conditional_writes={writes!r}: expected "
                f"{' or '.join(CONDITIONAL_WRITES_SETTINGS)}"
            )
        transactions = self.dynamodb_transactions
        if transactions is not None and transactions.lower() not in _TRUE + _FALSE:
            raise InvalidInputError(
                f"storage option dynamodb_transactions={transactions!r}: expected true or false"
            )
        for prefix in ("aws_", *(f"{svc}_" for svc in SERVICES)):
            key_id = getattr(self, f"{prefix}access_key_id")
            if getattr(self, f"{prefix}secret_access_key") and not key_id:
                raise InvalidInputError(
                    f"storage option {prefix}secret_access_key given without {prefix}access_key_id"
                )

    def __repr__(self) -> str:
        # Credentials never appear in a repr (nor so in any message or log built
        # from one): only whether they were given.
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.repr and getattr(self, f.name) is not None
        )
        given = [n for n in sorted(_SECRET_FIELDS) if n.endswith("key_id") and getattr(self, n)]
        creds = (
            f"explicit credentials ({', '.join(given)})" if given else "credentials from the chain"
        )
        return f"AwsConfig({shown}{', ' if shown else ''}{creds})"

    @classmethod
    def from_storage_options(cls, storage_options: Mapping[str, Any] | None) -> AwsConfig:
        """Build the overrides from ``storage_options``.

        Raises:
            InvalidInputError: an option is not an AWS setting s3ddb knows, its value
                is not a string, or a value is invalid (``s3_addressing_style``,
                ``s3_verify``, a secret without its key id).
        """
        values: dict[str, str] = {}
        for key, value in (storage_options or {}).items():
            if key.lower() in _ACCEPTED_FLAGS:
                if str(value).lower() not in _BOOLEANS:
                    raise InvalidInputError(f"storage option {key!r} must be true or false")
                continue
            attr = _ALL_ALIASES.get(key.lower())
            if attr is None:
                known = ", ".join(sorted({k for k in _ALL_ALIASES if k == _ALL_ALIASES[k]}))
                close = difflib.get_close_matches(key.lower(), [*_ALL_ALIASES, *_ACCEPTED_FLAGS], 1)
                meant = f" (did you mean {close[0]!r}?)" if close else ""
                raise InvalidInputError(
                    f"unknown storage option {key!r}{meant}; AWS options are: {known}"
                )
            if value is not None and not isinstance(value, str):
                # Redacted by name, whatever the type: b"...", an int or an object
                # whose str() is the secret are as secret as a string.
                shown = (
                    "(value hidden: a credential)"
                    if is_secret_option(key) or attr in _SECRET_FIELDS
                    else _short_repr(value)
                )
                raise InvalidInputError(
                    f"storage option {key!r} must be a string, got {type(value).__name__} {shown}"
                )
            if value is not None:
                values[attr] = value
        return cls(**values)

    # --- resolution ------------------------------------------------------------------

    def settings(self, service: str) -> ServiceSettings:
        """What ``service``'s client uses: storage option for the service, shared
        storage option, environment for the service, boto3 chain (first given wins).

        Raises:
            InvalidInputError: ``service`` is not "s3", "dynamodb" or "glue", or an
                environment variable for it is invalid (a secret without a key id).
        """
        if service not in SERVICES:
            raise InvalidInputError(
                f"unknown AWS service {service!r}; expected {', '.join(SERVICES)}"
            )
        env = os.environ
        tag = service.upper()
        sources: dict[str, str] = {}

        def pick(
            name: str,
            mine: str | None,
            env_mine: str,
            shared_attr: str | None,
            env_shared: tuple[str, ...] = (),
        ) -> str | None:
            candidates = [(mine, f"storage option {service}_{name}")]
            if shared_attr:
                candidates.append((getattr(self, shared_attr), f"storage option {shared_attr}"))
            candidates += [(env.get(n), f"environment {n}") for n in (env_mine, *env_shared)]
            for value, where in candidates:
                if value:
                    sources[name] = where
                    return value
            return None

        ignore_env_endpoints = env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true"
        endpoint = pick(
            "endpoint",
            getattr(self, f"{service}_endpoint"),
            "" if ignore_env_endpoints else f"AWS_ENDPOINT_URL_{tag}",
            "endpoint_url",
            () if ignore_env_endpoints else ("AWS_ENDPOINT_URL",),
        )
        region = pick(
            "region",
            getattr(self, f"{service}_region"),
            f"AWS_REGION_{tag}",
            "region",
            ("AWS_REGION", "AWS_DEFAULT_REGION"),
        )
        role_arn = pick(
            "role_arn", getattr(self, f"{service}_role_arn"), f"AWS_ROLE_ARN_{tag}", "role_arn"
        )
        key_id, secret, token, profile = self._credentials(service, sources)
        style = self.s3_addressing_style if service == "s3" else None
        verify: bool | str | None = None
        if service == "s3":
            style = style or env.get("AWS_S3_ADDRESSING_STYLE") or None
            if style and style.lower() not in _ADDRESSING_STYLES:
                raise InvalidInputError(
                    f"environment AWS_S3_ADDRESSING_STYLE={style!r}: expected one of "
                    f"{', '.join(_ADDRESSING_STYLES)}"
                )
            if self.s3_verify is not None and self.s3_verify.lower() in _FALSE:
                verify = False
            else:
                verify = self.s3_ca_bundle or env.get("AWS_CA_BUNDLE_S3") or None
        chain_environment = None
        if not key_id:
            chain_environment = hashlib.sha256(
                "\0".join(env.get(n, "") for n in _CHAIN_ENVIRONMENT).encode()
            ).hexdigest()
        return ServiceSettings(
            chain_environment=chain_environment,
            service=service,
            endpoint=endpoint,
            region=region,
            access_key_id=key_id,
            secret_access_key=secret,
            session_token=token,
            profile=profile,
            role_arn=role_arn,
            role_session_name=self.role_session_name,
            sts_endpoint=self.sts_endpoint,
            addressing_style=style.lower() if style else None,
            verify=verify,
            sources=tuple(sorted(sources.items())),
        )

    def _credentials(
        self, service: str, sources: dict[str, str]
    ) -> tuple[str | None, str | None, str | None, str | None]:
        """(key id, secret, token, profile) from the first level that gives any."""
        env = os.environ
        tag = service.upper()
        levels = [
            (
                getattr(self, f"{service}_access_key_id"),
                getattr(self, f"{service}_secret_access_key"),
                getattr(self, f"{service}_session_token"),
                getattr(self, f"{service}_profile"),
                f"storage option {service}_access_key_id",
                f"storage option {service}_profile",
            ),
            (
                self.aws_access_key_id,
                self.aws_secret_access_key,
                self.aws_session_token,
                self.profile,
                "storage option aws_access_key_id",
                "storage option profile",
            ),
            (
                env.get(f"AWS_ACCESS_KEY_ID_{tag}"),
                env.get(f"AWS_SECRET_ACCESS_KEY_{tag}"),
                env.get(f"AWS_SESSION_TOKEN_{tag}"),
                env.get(f"AWS_PROFILE_{tag}"),
                f"environment AWS_ACCESS_KEY_ID_{tag}",
                f"environment AWS_PROFILE_{tag}",
            ),
        ]
        for key_id, secret, token, profile, key_source, profile_source in levels:
            if key_id:
                if not secret:
                    raise InvalidInputError(
                        f"{key_source} is set but its secret access key is not "
                        f"({service} credentials come as a pair from one place)"
                    )
                sources["credentials"] = key_source
                return key_id, secret, token or None, None
            if secret:
                raise InvalidInputError(
                    f"a {service} secret access key is set without its access key id "
                    f"(where {key_source} is expected)"
                )
            if profile:
                sources["credentials"] = profile_source
                return None, None, None, profile
        return None, None, None, None

    # --- compatibility helpers (messages) ------------------------------------------

    def endpoint_in_effect(self, service: str) -> str | None:
        """The endpoint requests to ``service`` go to, for messages: the resolved one
        (see :meth:`settings`), or None (the region's AWS endpoint)."""
        return self.settings(service).endpoint

    def region_or_default(self, service: str = "s3") -> str | None:
        """The region resolved for ``service``, or None (boto3 then decides)."""
        return self.settings(service).region

    # --- boto3 -------------------------------------------------------------------

    def client(self, service: str, *, max_attempts: int | None = None) -> Any:
        """A boto3 client for ``service``, created once per process and reused.

        ``max_attempts`` sets botocore's own retry budget; callers that retry
        themselves pass 1 so that their retry policy is the only one.
        """
        settings = self.settings(service)
        # One thread at a time builds clients (PerProcess.get): a boto3 Session is not
        # thread-safe, and the commit path's parallel uploads may all ask for the first
        # S3 client at once.
        return CLIENTS.get(
            (settings, max_attempts), lambda: _new_client(service, settings, max_attempts)
        )

    # --- s3fs --------------------------------------------------------------------

    def s3fs_options(self) -> dict[str, Any]:
        """Keyword arguments for ``s3fs.S3FileSystem`` carrying the S3 settings."""
        s = self.settings("s3")
        opts: dict[str, Any] = {}
        client_kwargs: dict[str, Any] = {}
        if s.endpoint:
            opts["endpoint_url"] = s.endpoint
        if s.region:
            client_kwargs["region_name"] = s.region
        if s.verify is not None:
            client_kwargs["verify"] = s.verify
        if s.addressing_style:
            opts["config_kwargs"] = {"s3": {"addressing_style": s.addressing_style}}
        if s.role_arn:
            opts["session"] = aio_role_session(s)
        else:
            if s.access_key_id:
                opts["key"] = s.access_key_id
                opts["secret"] = s.secret_access_key
                if s.session_token:
                    opts["token"] = s.session_token
            if s.profile:
                opts["profile"] = s.profile
            env = os.environ
            if not s.access_key_id and not s.profile and env.get("AWS_ACCESS_KEY_ID"):
                # What boto3's chain takes first, given explicitly: fsspec keeps one
                # filesystem per arguments, and one built under other environment
                # credentials must not be reused when they change.
                opts["key"] = env["AWS_ACCESS_KEY_ID"]
                opts["secret"] = env.get("AWS_SECRET_ACCESS_KEY")
                if env.get("AWS_SESSION_TOKEN"):
                    opts["token"] = env["AWS_SESSION_TOKEN"]
        if client_kwargs:
            opts["client_kwargs"] = client_kwargs
        return opts


#: What boto3's credential chain reads from the environment before any file or
#: service (a client is kept per settings: see ServiceSettings.chain_environment).
_CHAIN_ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
)

#: The process's boto3 clients, by resolved settings and retry budget.
CLIENTS: PerProcess[tuple[ServiceSettings, int | None], Any] = PerProcess("boto3 clients")


#: Seconds a Glue client waits for a connection, and for an answer.
_GLUE_CONNECT_TIMEOUT = 5
_GLUE_READ_TIMEOUT = 20


def _new_client(service: str, settings: ServiceSettings, max_attempts: int | None) -> Any:
    from botocore.config import Config

    retries: dict[str, Any] = {"mode": "standard"}
    config_kwargs: dict[str, Any] = {"retries": retries, "max_pool_connections": 32}
    if max_attempts is not None:
        retries["total_max_attempts"] = max_attempts
    if settings.addressing_style:
        config_kwargs["s3"] = {"addressing_style": settings.addressing_style}
    if service == "glue":
        # A catalog update follows a commit (in a local writer's own path): a Glue
        # endpoint that is down or black-holed must cost seconds, not botocore's
        # 60-second timeouts; the next commit catches up.
        config_kwargs.update(connect_timeout=_GLUE_CONNECT_TIMEOUT, read_timeout=_GLUE_READ_TIMEOUT)
    kwargs: dict[str, Any] = {"config": Config(**config_kwargs)}
    if settings.endpoint:
        kwargs["endpoint_url"] = settings.endpoint
    if settings.verify is not None:
        kwargs["verify"] = settings.verify
    session = session_for(settings)
    if session.region_name is None:
        # boto3 refuses to build a client without a region (from the environment, a
        # profile or ~/.aws/config); emulators ignore it.
        kwargs["region_name"] = "us-east-1"
    client = session.client(service, **kwargs)
    if service == "s3":
        # After botocore's own handler, which asks every upload to wait for the
        # server's "100 Continue".
        client.meta.events.register_last("before-call.s3", _send_small_bodies_at_once)
    return client


#: Bodies up to this size are sent with their request headers (curl's threshold).
EXPECT_CONTINUE_ABOVE = 1 << 20


def _send_small_bodies_at_once(params: dict[str, Any], **_: Any) -> None:
    """Drop ``Expect: 100-continue`` from a request whose body is known and small.

    botocore asks for it on every S3 upload of a file-like body, whatever its size,
    and then holds the body back until the server answers "100 Continue": one round
    trip more for each manifest, transaction and small data file a commit uploads.
    The wait only pays when a large body would be refused (a signature or redirect
    error), so bodies of unknown or larger size keep it.
    """
    headers = params.get("headers") or {}
    if "Expect" not in headers:
        return
    from botocore.utils import determine_content_length

    size = determine_content_length(params.get("body"))
    if size is not None and size <= EXPECT_CONTINUE_ABOVE:
        del headers["Expect"]
