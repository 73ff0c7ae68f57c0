"""moto's ``TransactWriteItems`` without a copy of every table it touches.

moto (5.x) backs up a transaction by deep-copying each whole table it names before the
first operation, and puts the copies back if any operation fails. That costs time in
proportion to the table (about 50 us per item), on every transaction: a commit claims
its version with one, so on a long-lived endpoint whose table holds thousands of rows
every commit pays for all of them. :func:`back_up_touched_items_only` makes the backup
what the rollback needs: a deep copy of each item the transaction's operations name
(their keys, as moto computes them), put back, or removed if it did not exist, when
moto rolls back. Every outcome, item and error is the same as moto's own: only the
items an operation names can change (Put, Update and Delete act on their key alone).
Tables with a stream (whose records a rollback would also have to take back) and
requests whose keys cannot be read keep moto's whole-table copy.
"""

from __future__ import annotations

import copy
import functools
import threading
from typing import Any

__all__ = ["back_up_touched_items_only"]

_installed = False
_install_lock = threading.Lock()
_in_transaction = threading.local()  # .active: this thread's transaction backs up items


class _CopyUnlessTable:
    """Stands for the ``copy`` module inside moto's DynamoDB models: ``deepcopy`` of a
    whole table during a transaction whose touched items are backed up returns the
    table itself (its rollback then puts back the same object)."""

    def __init__(self, table_class: type) -> None:
        self._table_class = table_class

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        if getattr(_in_transaction, "active", False) and isinstance(value, self._table_class):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def _touched_items(backend: Any, transact_items: list[dict[str, Any]]) -> list[Any] | None:
    """(table, hash key, range key, deep copy of the item or None) for each item the
    operations name, first mention only; None where moto's own backup must be used."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    saved: dict[tuple[str, Any, Any], Any] = {}
    try:
        for request in transact_items:
            _kind, op = next(iter(request.items()))
            table = backend.tables[op["TableName"]]
            if getattr(table, "stream_shard", None) is not None:
                return None
            key = op["Item"] if "Item" in op else op["Key"]
            hash_key = DynamoType(key[table.hash_key_attr])
            range_key = DynamoType(key[table.range_key_attr]) if table.has_range_key else None
            where = (op["TableName"], hash_key, range_key)
            if where not in saved:
                item = table.get_item(hash_key, range_key)
                saved[where] = (table, hash_key, range_key, copy.deepcopy(item))
    except Exception:  # a malformed request: moto answers it, with its own backup
        return None
    return list(saved.values())


def _put_back(touched: list[Any]) -> None:
    for table, hash_key, range_key, item in touched:
        if range_key is not None:
            if item is None:
                table.items.get(hash_key, {}).pop(range_key, None)
            else:
                table.items[hash_key][range_key] = item
        elif item is None:
            table.items.pop(hash_key, None)
        else:
            table.items[hash_key] = item


def back_up_touched_items_only() -> None:
    """Make moto's ``TransactWriteItems`` back up only the items it names (once per
    process; see the module docstring). Callers serialize moto's requests (LocalAWS
    runs each under one lock): the backup is read and put back around moto's call.

    Raises:
        ImportError: moto is not installed.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        from moto.dynamodb import models
        from moto.dynamodb.models.table import Table

        original = models.DynamoDBBackend.transact_write_items

        @functools.wraps(original)
        def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> Any:
            touched = _touched_items(self, transact_items)
            if touched is None:
                return original(self, transact_items)
            _in_transaction.active = True
            try:
                return original(self, transact_items)
            except BaseException:
                _put_back(touched)
                raise
            finally:
                _in_transaction.active = False

        setattr(models, "copy", _CopyUnlessTable(Table))  # noqa: B010 (a module's name)
        setattr(models.DynamoDBBackend, "transact_write_items", transact_write_items)  # noqa: B010
        _installed = True
