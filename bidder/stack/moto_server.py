"""moto's server as the local stack runs it: four costs taken out, two races fixed.

moto stands in for AWS on the same 2 cores as the bidder under test, so whatever CPU it
burns is taken from the bidder's latency. Four of its costs are removed here without
changing what any call answers; all but the last grow with the run:

* Garbage collection. moto keeps every Kinesis record and DynamoDB item as Python
  objects, so its heap only grows, and each full collection walked all of it again:
  70-190 ms of CPU every 0.3-0.8 s under the chaos suite's ``steady`` (measured with
  ``gc.callbacks``). Survivors of each full collection are frozen, so the next one walks
  only what arrived since. A frozen object that later becomes cyclic garbage is never
  freed: acceptable for a stand-in that lives for one run and keeps its state anyway.
* ``TransactWriteItems`` (the reconciler applies spend with it). To roll back a failed
  transaction, moto deep-copies every table the transaction names before applying
  anything, and puts the copies back on failure: a cost proportional to the table, and
  the spend table gains an item per ledger entry. A transaction took 11 ms on an empty
  table and 753 ms with 40,000 items (a long replay's worth; each median of 5, 23 puts
  and an update, a throwaway script against this server), so moto's CPU grew without
  bound over a long replay; with the change, 8-14 ms at every size. Here the rollback is
  by item instead: the items the transaction names are saved (a deep copy of each)
  before it runs, moto's table copy is skipped, and on any failure each saved item is
  put back, or removed if it did not exist. The same items end up as before either way,
  and a rollback no longer undoes another request's writes to other items of the table
  (moto serves requests on threads; putting a whole table back did).
* Kinesis shards. A shard keeps its records in insertion order under consecutive
  sequence numbers (each put takes the last one plus one), yet moto finds the last
  number by building a list of every key, once per record put, and GetRecords walks
  the shard from its first record. PutRecords of 100 records took 11 ms on a fresh
  shard and 96 ms at 40,000 records, GetRecords at the end 4.3 and 8.7 ms (medians of
  5, a throwaway script against this server). Here the first and last numbers are
  read from the ends of the dict and GetRecords starts at the number it asks for:
  PutRecords then took 12 ms at every size, GetRecords 4.3-5.1 ms.
* Routing. To find a request's backend, moto lists its own package directory
  (``os.listdir`` and an ``isdir`` per entry, about 150) on every request: 8% of its
  samples under ``steady`` (py-spy), 240 us of the dispatcher's 242 us per request
  (``timeit`` of ``get_application`` on a DynamoDB request). The listing cannot change
  while the server runs, so it is made once.

And two corrections, both races between moto's request threads (it serves each request
on a thread of its own):

* Kinesis shards are used under a lock. ``Shard.put_record`` ("not safe for
  concurrency", its own comment) reads the shard's last sequence number, then stores
  the record under the next one. Two PutRecords calls on one shard (two bidder workers
  shipping at once) can both take N+1: the later store overwrites the earlier record,
  and both callers were told it was accepted, so a ledger entry is silently gone from
  the stream (the chaos suite's ``steady`` lost one; 4 processes putting in a loop
  lose about 1 record in 60 with a 0.5 ms switch interval). Reads iterate the same
  dict and can fail ("mutated during iteration") while a put runs.
* DynamoDB transactions are serialized with the item writes. A transaction is several
  writes and, on failure, their undoing; DynamoDB makes it atomic, moto does not. The
  reconciler's client retries a call after a 5 s read timeout: a retried transaction
  running beside its still-running first attempt fails its conditions on the first
  attempt's fresh items, and its rollback (saved before them) removes them while the
  first attempt's increments stay, so a later replay of those entries counts them
  twice. moto's own whole-table restore raced the same way and erased the first
  attempt's writes instead. Found by reading, not seen happen: one re-entrant lock now
  covers ``transact_write_items``, ``put_item``, ``update_item`` and ``delete_item``,
  so a transaction and its rollback see no other write in between.
"""

from __future__ import annotations

import copy
import functools
import gc
import sys
import threading
from collections.abc import Callable
from typing import Any

from moto.dynamodb.models.dynamo_type import DynamoType

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


def main() -> None:
    gc.callbacks.append(_freeze_after_full_collection)
    fix_dynamodb_transactions()
    list_moto_modules_once()
    fix_kinesis_shards()
    from moto.server import main as moto_main

    moto_main(sys.argv[1:])


if __name__ == "__main__":
    main()
