"""boto3 and aiobotocore sessions for one service's resolved settings
(:class:`s3ddb.io.service_settings.ServiceSettings`), assume-role included; one per process and
settings, reused.

A role (``role_arn``) is assumed with the service's own credentials through botocore's
refreshing assume-role fetcher, so long-lived writers renew the temporary credentials
before they expire.
"""

from __future__ import annotations

import functools
from typing import Any

from s3ddb.errors import CredentialsError
from s3ddb.io.per_process import PerProcess
from s3ddb.io.service_settings import ServiceSettings

__all__ = ["SESSIONS", "aio_role_session", "session_for"]

#: The process's boto3 Sessions, by the settings that shape them.
SESSIONS: PerProcess[tuple[str | None, ...], Any] = PerProcess("boto3 sessions")


def _base_session(settings: ServiceSettings) -> Any:
    """The boto3 Session of the service's own credentials and region (no role)."""
    import boto3

    kwargs: dict[str, Any] = {}
    if settings.profile:
        kwargs["profile_name"] = settings.profile
    if settings.access_key_id:
        kwargs["aws_access_key_id"] = settings.access_key_id
        kwargs["aws_secret_access_key"] = settings.secret_access_key
        kwargs["aws_session_token"] = settings.session_token
    if settings.region:
        kwargs["region_name"] = settings.region
    return boto3.Session(**kwargs)


def _role_fetcher(settings: ServiceSettings) -> Any:
    """botocore's refreshing AssumeRole fetcher, signing STS with the service's own
    credentials (STS at ``sts_endpoint`` if given, else where boto3 sends it)."""
    from botocore.credentials import AssumeRoleCredentialFetcher

    base = _base_session(settings)
    source = base.get_credentials()
    if source is None:
        raise CredentialsError(
            f"cannot assume role {settings.role_arn} for {settings.service}: no credentials "
            "to call STS with (set the service's access key, a profile, or the boto3 chain)"
        )
    creator = functools.partial(
        base._session.create_client,
        region_name=settings.region or base.region_name or "us-east-1",
        **({"endpoint_url": settings.sts_endpoint} if settings.sts_endpoint else {}),
    )
    return AssumeRoleCredentialFetcher(
        client_creator=creator,
        source_credentials=source,
        role_arn=str(settings.role_arn),
        extra_args={"RoleSessionName": settings.role_session_name or f"s3ddb-{settings.service}"},
    )


def session_for(settings: ServiceSettings) -> Any:
    """A boto3 Session for ``settings`` (per process, reused)."""
    key = (
        settings.access_key_id,
        settings.secret_access_key,
        settings.session_token,
        settings.profile,
        settings.region,
        settings.role_arn,
        settings.role_session_name,
        settings.sts_endpoint,
        settings.chain_environment,
    )
    return SESSIONS.get(key, lambda: _new_session(settings))


def _new_session(settings: ServiceSettings) -> Any:
    if not settings.role_arn:
        return _base_session(settings)
    import boto3
    import botocore.session
    from botocore.credentials import CredentialProvider, DeferredRefreshableCredentials

    credentials = DeferredRefreshableCredentials(
        refresh_using=_role_fetcher(settings).fetch_credentials, method="assume-role"
    )

    class _Assumed(CredentialProvider):  # type: ignore[misc]
        METHOD = "assume-role"
        CANONICAL_NAME = "s3ddb-assume-role"

        def load(self) -> Any:
            return credentials

    core = botocore.session.Session()
    core.get_component("credential_provider").insert_before("env", _Assumed())
    return boto3.Session(botocore_session=core, region_name=settings.region)


def aio_role_session(settings: ServiceSettings) -> Any:
    """An aiobotocore session (for s3fs) whose credentials come from assuming the
    service's role, refreshed by the same botocore fetcher (run off the event loop)."""
    import asyncio

    from aiobotocore.credentials import AioDeferredRefreshableCredentials
    from aiobotocore.session import AioSession

    fetcher = _role_fetcher(settings)

    async def refresh() -> Any:
        return await asyncio.to_thread(fetcher.fetch_credentials)

    session = AioSession()
    # aiobotocore consults this attribute before its provider chain.
    session._credentials = AioDeferredRefreshableCredentials(
        refresh_using=refresh, method="assume-role"
    )
    return session
