"""Object storage access: URIs, AWS configuration and the ObjectStore."""

from s3ddb.io.aws import AwsConfig, ServiceSettings
from s3ddb.io.object_store import (
    LocalObjectStore,
    MemoryObjectStore,
    ObjectMeta,
    ObjectStore,
    S3ObjectStore,
)
from s3ddb.io.uri import DatasetURI, parse_uri

__all__ = [
    "AwsConfig",
    "DatasetURI",
    "LocalObjectStore",
    "MemoryObjectStore",
    "ObjectMeta",
    "ObjectStore",
    "S3ObjectStore",
    "ServiceSettings",
    "parse_uri",
]
