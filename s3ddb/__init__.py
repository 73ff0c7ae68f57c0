"""s3ddb: ACID, multi-version datasets on object storage, with many concurrent writers."""

from s3ddb._version import __version__
from s3ddb.errors import *  # noqa: F403
