"""The resolved settings of one AWS service's client (see :mod:`s3ddb.io.aws`, which
resolves them, and :mod:`s3ddb.io.aws_sessions`, which builds sessions from them)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ServiceSettings"]


@dataclass(frozen=True)
class ServiceSettings:
    """The settings one service's client uses, resolved (see the module docstring).

    ``None`` means "boto3 decides" (its chain, then s3ddb's ``us-east-1`` fallback for
    the region). ``sources`` says, per setting, where the value came from
    (``"storage option dynamodb_region"``, ``"environment AWS_REGION_DYNAMODB"``,
    ``"boto3 chain"``), for ``s3ddb doctor`` and error messages.
    """

    service: str
    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    role_arn: str | None = None
    role_session_name: str | None = None
    sts_endpoint: str | None = None
    addressing_style: str | None = None
    verify: bool | str | None = None
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    #: Without credentials given (boto3's chain finds them): a digest of the
    #: environment variables the chain reads first (``AWS_ACCESS_KEY_ID``...). The
    #: process keeps one client per settings; a client built under other environment
    #: credentials must not be reused when they change. Never the variables' values.
    chain_environment: str | None = field(default=None, repr=False)

    def source(self, setting: str) -> str:
        return dict(self.sources).get(setting, "boto3 chain")

    @property
    def credentials_text(self) -> str:
        """Which credentials sign, for messages: e.g. ``"access key ****WXYZ (storage
        option s3_access_key_id)"``. Only the last four characters of the key id are
        shown (as ``aws configure list`` does), never the secret or token."""
        where = self.source("credentials")
        if self.access_key_id:
            text = f"access key ****{self.access_key_id[-4:]} ({where})"
        elif self.profile:
            text = f"profile {self.profile!r} ({where})"
        else:
            text = "credentials of the boto3 chain"
        return text + (f", assuming role {self.role_arn}" if self.role_arn else "")
