"""Cuts: every registered table as of one instant, for engines that read several.

A client that asks for the warehouse :data:`CUT_WAREHOUSE` (pyiceberg's
``warehouse``, DuckDB's ``ATTACH 'cut'``) gets, in ``/v1/config``, the prefix
``cuts/<id>``: the newest version of every registered table read together
(:func:`s3ddb.snapshot`: all of a group commit's members or none of them). Every
request under that prefix serves those versions, so tables loaded one after another
are as they were at one instant, never half of an ``s3ddb.atomic`` group.

Cuts need datasets whose versions can be read at one instant: ``s3+ddb://`` ones
behind one DynamoDB endpoint (or ``memory://``), at most
:data:`~s3ddb.groups.snapshots.MAX_GROUP_READS`. A server keeps the last
:data:`MAX_CUTS` cuts, in memory.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from s3ddb.catalog_server.registry import CatalogRegistry, TableName
from s3ddb.catalog_server.table_loading import publish_pinned
from s3ddb.groups.snapshots import snapshot

__all__ = ["CUT_WAREHOUSE", "MAX_CUTS", "Cuts"]

#: The warehouse name that asks for a cut.
CUT_WAREHOUSE = "cut"
#: How many cuts one server remembers (the oldest are forgotten first).
MAX_CUTS = 1000


class Cuts:
    """The cuts one server made, by id (a bounded table)."""

    def __init__(self, registry: CatalogRegistry, storage_options: Mapping[str, Any]) -> None:
        self._registry = registry
        self._options = dict(storage_options)
        self._cuts: OrderedDict[str, dict[TableName, tuple[str, int]]] = OrderedDict()
        self._lock = threading.Lock()

    def make(self) -> str:
        """A new cut of every registered table; returns its id.

        Each version read is published first if it is not yet.

        Raises:
            AtomicGroupError: the datasets cannot be read at one instant (local
                paths, ``s3://``, several DynamoDB endpoints, more than 100).
            OpenFormatError: a dataset's version does not publish Iceberg.
            What reading the registry or the datasets raised.
        """
        uris: dict[TableName, str] = {}
        for name in self._registry.names():
            uri = self._registry.dataset_uri(name)
            if uri is not None:
                uris[name] = uri
        opened = snapshot(list(dict.fromkeys(uris.values())), self._options or None)
        for ds in opened.values():
            publish_pinned(ds)  # read before its writer's finalizer published it
        versions = {name: (uri, opened[uri].version) for name, uri in uris.items()}
        cut = secrets.token_hex(16)
        with self._lock:
            self._cuts[cut] = versions
            while len(self._cuts) > MAX_CUTS:
                self._cuts.popitem(last=False)
        return cut

    def tables(self, cut: str) -> dict[TableName, tuple[str, int]] | None:
        """The tables of ``cut`` with their dataset URI and version (None: no such
        cut, or forgotten)."""
        with self._lock:
            found = self._cuts.get(cut)
        return dict(found) if found is not None else None
