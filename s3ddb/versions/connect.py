"""From a URI to the pieces that serve it: object store and commit handler.

This is the one place that knows which commit mechanism each URI scheme uses, and the
only place in the dataset layer that touches the DynamoDB implementation, which loads
lazily.
"""

from __future__ import annotations

import os
from typing import Any

from s3ddb.commit import finalizer as finalizers
from s3ddb.commit.external import ExternalStoreCommitHandler
from s3ddb.commit.handlers import CommitHandler, ConditionalPutCommitHandler
from s3ddb.external_store.ddb_contract import UNFENCED_ENV
from s3ddb.external_store.manifest_store import ExternalManifestStore
from s3ddb.io.aws import AwsConfig
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.per_process import PerProcess
from s3ddb.io.uri import DatasetURI, parse_uri

__all__ = ["external_store_for", "open_handler"]

_EXTERNAL_STORES: PerProcess[tuple[str, AwsConfig, str | None], ExternalManifestStore] = PerProcess(
    "external manifest stores"
)


def external_store_for(uri: DatasetURI, store: ObjectStore) -> ExternalManifestStore:
    """The DynamoDB manifest store for ``uri`` (one per process, table and config)."""
    assert uri.ddb_table is not None
    table = uri.ddb_table

    def create() -> ExternalManifestStore:
        from s3ddb.external_store.dynamodb import DynamoDBManifestStore

        return DynamoDBManifestStore(table, store.aws)

    # The environment may turn transactions off where the storage options say nothing
    # (UNFENCED_ENV): a store made under one setting must not serve the other.
    return _EXTERNAL_STORES.get((table, store.aws, os.environ.get(UNFENCED_ENV)), create)


def open_handler(
    uri: str | os.PathLike[str] | DatasetURI,
    storage_options: dict[str, Any] | None = None,
    *,
    external_store: ExternalManifestStore | None = None,
) -> CommitHandler:
    """The commit handler for a dataset URI.

    ``external_store`` overrides the DynamoDB store of ``s3+ddb://`` URIs (tests and
    simulations pass an in-memory store).

    Raises:
        InvalidURIError: the URI cannot be parsed.
    """
    parsed = uri if isinstance(uri, DatasetURI) else parse_uri(uri)
    store = ObjectStore(parsed, storage_options)
    if parsed.uses_external_store:
        external = external_store or external_store_for(parsed, store)
        finalizer = finalizers.process_finalizer() if finalizers.enabled() else None
        return ExternalStoreCommitHandler(store, external, parsed.base_uri, finalizer=finalizer)
    return ConditionalPutCommitHandler(store)
