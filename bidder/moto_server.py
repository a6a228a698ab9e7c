"""moto's server as the local stack runs it: three costs taken out, one race fixed.

moto stands in for AWS on the same 2 cores as the bidder under test, so whatever CPU it
burns is taken from the bidder's latency. Two of its costs grow with the run, and both
are removed here without changing what any call answers:

* Garbage collection. moto keeps every Kinesis record and DynamoDB item as Python
  objects, so its heap only grows, and each full collection walked all of it again:
  70-190 ms of CPU every 0.3-0.8 s under the chaos suite's ``steady`` (measured with
  ``gc.callbacks``). Survivors of each full collection are frozen, so the next one walks
  only what arrived since. A frozen object that later becomes cyclic garbage is never
  freed: acceptable for a stand-in that lives for one run and keeps its state anyway.
* ``TransactWriteItems`` (the reconciler applies spend with it). Before applying
  anything, moto deep-copies the table once *per item* of the transaction, to roll back
  on failure; with 25 items that is 25 identical copies of a table that grows with
  every ledger entry. It was 55% of moto's CPU (py-spy). During that call the first
  copy is handed out again for the same unchanged table: the same snapshot, one copy.
* Routing. To find a request's backend, moto lists its own package directory
  (``os.listdir`` and an ``isdir`` per entry, about 150) on every request: 8% of its
  samples under ``steady`` (py-spy), 240 us of the dispatcher's 242 us per request
  (``timeit`` of ``get_application`` on a DynamoDB request). The listing cannot change
  while the server runs, so it is made once.

And one correction: Kinesis shards are used under a lock. moto serves each request on a
thread of its own, and ``Shard.put_record`` ("not safe for concurrency", its own
comment) reads the shard's last sequence number, then stores the record under the next
one. Two PutRecords calls on one shard (two bidder workers shipping at once) can both
take N+1: the later store overwrites the earlier record, and both callers were told it
was accepted, so a ledger entry is silently gone from the stream (the chaos suite's
``steady`` lost one; 4 processes putting in a loop lose about 1 record in 60 with a
0.5 ms switch interval). Reads iterate the same dict and can fail ("mutated during
iteration") while a put runs.
"""

from __future__ import annotations

import copy
import functools
import gc
import sys
import threading
from collections.abc import Callable
from typing import Any

_OLDEST = 2
_SHARD_METHODS = ("put_record", "get_records", "get_sequence_number_at")
"""Every ``Shard`` method that reads or writes its records dict in more than one step."""


def _freeze_after_full_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == _OLDEST:
        gc.freeze()


class _OneCopyPerTransaction:
    """Stands in for the ``copy`` module inside moto's DynamoDB models: within one
    ``transact_write_items`` call (per thread: moto serves requests on threads), a deep
    copy of an object of the ``once`` type already copied returns that first copy. Only
    that type: moto also copies single items mid-transaction, after earlier writes."""

    def __init__(self, once: type) -> None:
        self._once = once
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    def deepcopy(self, obj: Any, memo: dict[int, Any] | None = None) -> Any:
        copies: dict[int, tuple[Any, Any]] | None = getattr(self._local, "copies", None)
        if copies is None or not isinstance(obj, self._once):
            return copy.deepcopy(obj, memo)
        if id(obj) not in copies:  # the original is kept too: its id cannot be reused
            copies[id(obj)] = (obj, copy.deepcopy(obj, memo))
        return copies[id(obj)][1]

    def during(self, call: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(call)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._local.copies = {}
            try:
                return call(*args, **kwargs)
            finally:
                self._local.copies = None

        return wrapped


def _copy_each_table_once() -> None:
    from moto.dynamodb import models
    from moto.dynamodb.models.table import Table

    shim = _OneCopyPerTransaction(once=Table)
    models.copy = shim  # type: ignore[assignment]
    backend = models.DynamoDBBackend
    backend.transact_write_items = shim.during(backend.transact_write_items)  # type: ignore[method-assign]


def list_moto_modules_once() -> None:
    """moto's module listing, read from disk once instead of per request (idempotent)."""
    from moto import backends

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules


def serialize_kinesis_shards() -> None:
    """Run every use of a moto Kinesis shard's records under one lock (idempotent)."""
    from moto.kinesis.models import Shard

    lock = threading.Lock()
    for name in _SHARD_METHODS:
        method = getattr(Shard, name)
        if not hasattr(method, "__wrapped__"):
            setattr(Shard, name, _holding(lock, method))


def _holding(lock: threading.Lock, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return method(*args, **kwargs)

    return locked


def main() -> None:
    gc.callbacks.append(_freeze_after_full_collection)
    _copy_each_table_once()
    list_moto_modules_once()
    serialize_kinesis_shards()
    from moto.server import main as moto_main

    moto_main(sys.argv[1:])


if __name__ == "__main__":
    main()
