"""Where things live under a dataset root (see design.md, "Dataset layout")."""

from __future__ import annotations

from s3ddb.format.naming import NamingScheme, staged_manifest_name, unique_hex

__all__ = [
    "DATA_DIR",
    "DELETIONS_DIR",
    "INDICES_DIR",
    "SPARK_STAGING_DIR",
    "TAGS_DIR",
    "TRANSACTIONS_DIR",
    "VERSIONS_DIR",
    "data_file_path",
    "deletion_file_path",
    "index_file_path",
    "manifest_path",
    "new_data_file_name",
    "staged_manifest_path",
    "tag_path",
    "transaction_file_name",
    "transaction_path",
]

DATA_DIR = "data"
VERSIONS_DIR = "_versions"
TRANSACTIONS_DIR = "_transactions"
DELETIONS_DIR = "_deletions"
INDICES_DIR = "_indices"
TAGS_DIR = "_refs/tags"
#: Where native Spark writes put their files before committing them, one folder per
#: write (``_spark_staging/<write id>/``); no version refers to anything under it.
SPARK_STAGING_DIR = "_spark_staging"


def data_file_path(name: str) -> str:
    """Path of a data file named ``name`` (relative to the dataset root)."""
    return f"{DATA_DIR}/{name}"


def new_data_file_name(extension: str = "parquet") -> str:
    return f"{unique_hex()}.{extension}"


def manifest_path(version: int, scheme: NamingScheme) -> str:
    return f"{VERSIONS_DIR}/{scheme.manifest_name(version)}"


def staged_manifest_path(version: int, scheme: NamingScheme, token: str | None = None) -> str:
    return f"{VERSIONS_DIR}/{staged_manifest_name(scheme.manifest_name(version), token)}"


def transaction_file_name(read_version: int, txn_uuid: str) -> str:
    return f"{read_version}-{txn_uuid}.txn"


def transaction_path(file_name: str) -> str:
    return f"{TRANSACTIONS_DIR}/{file_name}"


def deletion_file_path(fragment_id: int, read_version: int, file_id: str, ext: str) -> str:
    return f"{DELETIONS_DIR}/{fragment_id}-{read_version}-{file_id}.{ext}"


def tag_path(tag: str) -> str:
    return f"{TAGS_DIR}/{tag}.json"


def index_file_path(index_uuid: str, name: str) -> str:
    """Path of one file of index ``index_uuid`` (relative to the dataset root)."""
    return f"{INDICES_DIR}/{index_uuid}/{name}"
