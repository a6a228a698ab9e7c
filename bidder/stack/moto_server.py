"""moto's server as the local stack runs it: five costs removed, two races closed.

moto stands in for AWS on the same cores as the bidder under test, so whatever CPU it
burns is taken from the bidder's latency. None of the changes alters what a call
answers (the figures behind each: docs/decisions.md, "Processes and operations").

Costs, the first three growing with the run:

* Garbage collection: survivors of each full collection are frozen, so the next one
  walks only what arrived since (moto keeps every record and item as Python objects).
  A frozen object that later becomes cyclic garbage is never freed: acceptable for a
  stand-in that lives for one run and keeps its state anyway.
* ``TransactWriteItems`` rolls back by item: the items the transaction names are saved
  (a deep copy of each) before it runs, moto's copy of every named table is skipped,
  and on failure each saved item is put back, or removed if it did not exist.
* Kinesis shards: the first and last sequence numbers are read from the ends of the
  shard's dict (records sit there in insertion order under consecutive numbers), and
  GetRecords starts at the number it asks for instead of walking from the first.
* Routing: moto's listing of its own package directory, made on every request to find
  the backend, is made once (it cannot change while the server runs).
* Connections: moto's own server (werkzeug's development server) closes the connection
  after every answer, so each boto3 call opened a TCP connection and moto started a
  thread for it. moto's application is served here by waitress: HTTP/1.1 connections
  kept open as AWS keeps them, and a fixed pool of request threads (``THREADS``). Like
  werkzeug, waitress drops request headers with an underscore in their name; moto's
  server put back S3 metadata spelled that way, which no caller here sends.

Races between moto's request threads (any two requests may run at once):

* Kinesis shards are used under a lock. ``Shard.put_record`` reads the shard's last
  sequence number, then stores the record under the next one: two PutRecords on one
  shard (two bidder workers shipping at once) can both take N+1, and the later store
  overwrites the earlier record after both callers were told it was accepted, losing a
  ledger entry. Reads iterate the same dict and can fail while a put runs.
* DynamoDB transactions are serialized with the item writes. A transaction is several
  writes and, on failure, their undoing; DynamoDB makes it atomic, moto does not. One
  re-entrant lock covers ``transact_write_items``, ``put_item``, ``update_item`` and
  ``delete_item``, so a transaction and its rollback see no other write in between (a
  client's retry running beside its first attempt would otherwise undo that attempt's
  fresh items while its increments stay).
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from moto.dynamodb.models.dynamo_type import DynamoType

THREADS = 4
"""Requests moto answers at once. Its handlers hold the GIL nearly throughout, so more
threads would add switching, not answers."""
CONNECTION_LIMIT = 1000
"""Open connections waitress accepts (its default is 100): every bidder worker, the
reconciler and the replay keep a pool of connections each."""
_OLDEST = 2
_ITEM_WRITES = ("transact_write_items", "put_item", "update_item", "delete_item")
"""The DynamoDB backend's writes of items that a transaction must not interleave with."""
_SHARD_METHODS = ("put_record", "get_records", "get_sequence_number_at")
"""Every ``Shard`` method that reads or writes its records dict in more than one step."""


def _freeze_after_full_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == _OLDEST:
        gc.freeze()


class _NoTableCopies:
    """Stands in for the ``copy`` module inside moto's DynamoDB models: a deep copy of a
    ``table_type`` object is the object itself, so the backup moto takes before a
    transaction costs nothing (and restoring it changes nothing; ``_undone_by_item``
    rolls back instead). In that module only ``transact_write_items`` copies tables
    (moto 5.2). Any other object is deep-copied as usual: moto also copies single
    items, e.g. for an update's old values."""

    def __init__(self, table_type: type) -> None:
        self._table_type = table_type

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    def deepcopy(self, obj: Any, memo: dict[int, Any] | None = None) -> Any:
        if isinstance(obj, self._table_type):
            return obj
        return copy.deepcopy(obj, memo)


Saved = tuple[Any, Any, Any, Any]
"""(table, hash value, range value or None, a deep copy of the item or None if absent)."""


def saved_items(backend: Any, transact_items: Any) -> list[Saved]:
    """The items a TransactWriteItems request names, as they are now, each once.

    An entry moto will refuse (no such table, no key) is left out: moto changes nothing
    for it."""
    saved: dict[tuple[int, Any, Any], Saved] = {}
    for entry in transact_items if isinstance(transact_items, list) else ():
        try:
            ((op_type, op),) = entry.items()
            table = backend.tables[op["TableName"]]
            key = op["Item"] if op_type == "Put" else op["Key"]
            hash_value = DynamoType(key[table.hash_key_attr])
            range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
            item = table.get_item(hash_value, range_value)
        except Exception:  # malformed in any way: moto refuses it itself
            continue
        saved.setdefault(
            (id(table), hash_value, range_value),
            (table, hash_value, range_value, copy.deepcopy(item)),
        )
    return list(saved.values())


def put_back(saved: list[Saved]) -> None:
    """Every saved item where it was; an item that did not exist is removed."""
    for table, hash_value, range_value, item in saved:
        slot = table.items if range_value is None else table.items[hash_value]
        position = hash_value if range_value is None else range_value
        if item is None:
            slot.pop(position, None)
        else:
            slot[position] = item


def _undone_by_item(transact: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(transact)
    def wrapped(backend: Any, transact_items: Any) -> Any:
        saved = saved_items(backend, transact_items)
        try:
            return transact(backend, transact_items)
        except BaseException:
            put_back(saved)
            raise

    return wrapped


def fix_dynamodb_transactions() -> None:
    """Transactions rolled back by item and serialized with the item writes, as the
    module docstring says (idempotent)."""
    from moto.dynamodb import models
    from moto.dynamodb.models.table import Table

    backend = models.DynamoDBBackend
    if getattr(backend, "_bidsim_fixed", False):
        return
    models.copy = _NoTableCopies(Table)  # type: ignore[assignment]
    backend.transact_write_items = _undone_by_item(backend.transact_write_items)  # type: ignore[method-assign]
    writes = threading.RLock()  # re-entrant: a transaction calls the item writes
    for name in _ITEM_WRITES:
        setattr(backend, name, _holding(writes, getattr(backend, name)))
    backend._bidsim_fixed = True  # type: ignore[attr-defined]


def list_moto_modules_once() -> None:
    """moto's module listing, read from disk once instead of per request (idempotent)."""
    from moto import backends

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules


def fix_kinesis_shards() -> None:
    """Kinesis shards as the module docstring says: their ends read in O(1), GetRecords
    from the asked position, and every use of a shard's records under one lock
    (idempotent)."""
    from moto.kinesis.models import Shard

    if getattr(Shard, "_bidsim_fixed", False):
        return
    Shard.get_min_sequence_number = _first_number  # type: ignore[method-assign,assignment]
    Shard.get_max_sequence_number = _last_number  # type: ignore[method-assign,assignment]
    Shard.get_records = _records_from_position(Shard.get_records)  # type: ignore[method-assign]
    lock = threading.Lock()
    for name in _SHARD_METHODS:
        setattr(Shard, name, _holding(lock, getattr(Shard, name)))
    Shard._bidsim_fixed = True  # type: ignore[attr-defined]


def _first_number(shard: Any) -> int:
    return next(iter(shard.records)) if shard.records else 0


def _last_number(shard: Any) -> int:
    return next(reversed(shard.records)) if shard.records else 0


def _records_from_position(walk: Callable[..., Any]) -> Callable[..., Any]:
    """GetRecords reading from ``last_sequence_id + 1`` on: what moto's walk from the
    first record returns when the numbers run without gaps, which ``put_record`` (the
    only way records enter a shard) guarantees. Anything else goes to the walk."""

    @functools.wraps(walk)
    def records_from_position(shard: Any, last_sequence_id: str, limit: int | None) -> Any:
        records = shard.records
        after = int(last_sequence_id)
        first, last = _first_number(shard), _last_number(shard)
        if not records or last - first + 1 != len(records) or (limit is not None and limit < 1):
            return walk(shard, last_sequence_id, limit)
        start = max(after + 1, first)
        stop = last if limit is None else min(last, start + limit - 1)
        found = [records[number] for number in range(start, stop + 1)]
        if not found:
            return found, after, 0
        behind_s = records[last].created_at - found[-1].created_at
        return found, found[-1].sequence_number, int(behind_s * 1000)

    return records_from_position


def _holding(
    lock: threading.Lock | threading.RLock, method: Callable[..., Any]
) -> Callable[..., Any]:
    @functools.wraps(method)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return method(*args, **kwargs)

    return locked


def apply_corrections() -> None:
    """Every change of the module docstring but the server: costs and races."""
    gc.callbacks.append(_freeze_after_full_collection)
    fix_dynamodb_transactions()
    list_moto_modules_once()
    fix_kinesis_shards()


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bidder.stack.moto_server")
    parser.add_argument("-H", "--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("-p", "--port", type=int, default=5000, help="port to listen on")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    apply_corrections()
    import waitress
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    # moto builds URLs that name its own server (an SQS queue's, a presigned one) from it.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    waitress.serve(
        DomainDispatcherApplication(create_backend_app),
        host=args.host,
        port=args.port,
        threads=THREADS,
        connection_limit=CONNECTION_LIMIT,
        asyncore_use_poll=True,  # select() fails past 1,024 descriptors
        _quiet=True,
    )


if __name__ == "__main__":
    main()
