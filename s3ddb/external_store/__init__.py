"""External manifest stores: the rows that decide which manifest is each version.

* :class:`ExternalManifestStore` — the interface, with groups of rows decided together
  (:mod:`.manifest_store`).
* :class:`DynamoDBManifestStore` — production, on a DynamoDB table (:mod:`.dynamodb`);
  :func:`create_table` provisions that table like the Terraform module does.
* :class:`InMemoryManifestStore` — in-process, for tests and simulation (:mod:`.memory`).

Nothing here imports boto3 at import time.
"""

from __future__ import annotations

from s3ddb.external_store.ddb_table import create_table, describe_table
from s3ddb.external_store.dynamodb import DynamoDBManifestStore
from s3ddb.external_store.identity import final_path_of, same_commit
from s3ddb.external_store.manifest_store import (
    DATASET_ID_ATTRIBUTE,
    ExternalManifestStore,
    ExternalStoreOutcomeUnknownError,
    Fence,
    FenceFailedError,
    ManifestRow,
    VersionTakenError,
    is_staged_path,
)
from s3ddb.external_store.memory import InMemoryManifestStore

__all__ = [
    "DATASET_ID_ATTRIBUTE",
    "DynamoDBManifestStore",
    "ExternalManifestStore",
    "ExternalStoreOutcomeUnknownError",
    "Fence",
    "FenceFailedError",
    "InMemoryManifestStore",
    "ManifestRow",
    "VersionTakenError",
    "create_table",
    "describe_table",
    "final_path_of",
    "is_staged_path",
    "same_commit",
]
