"""Object storage access: URIs, AWS configuration and the ObjectStore."""

from s3ddb.io.aws import AwsConfig, ServiceSettings
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.io.uri import DatasetURI, parse_uri

__all__ = ["AwsConfig", "DatasetURI", "ObjectMeta", "ObjectStore", "ServiceSettings", "parse_uri"]
