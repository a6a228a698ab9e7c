"""bidder.moto_server: the corrections the local stack's moto server runs with."""

from __future__ import annotations

import os
import threading

import pytest
from moto import backends
from moto.kinesis.models import Shard
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from bidder.moto_server import (
    _OneCopyPerTransaction,
    list_moto_modules_once,
    serialize_kinesis_shards,
)

SWITCH_WAIT_S = 0.5
"""How long the first put lets the other one run: it finishes at once unless it waits for
the first one's lock. Only a bound; nothing measures it."""


def test_two_puts_racing_on_one_shard_both_keep_their_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serialize_kinesis_shards()
    shard = Shard(0, 0, 2**128)
    shard.put_record("k", "first", "")
    other = threading.Thread(target=shard.put_record, args=("k", "b", ""))
    last_number = Shard.get_max_sequence_number
    switched = False

    def switch_after_reading(self: Shard) -> int:
        # The server's other request thread gets the GIL right after this put has read
        # the last sequence number, and before it stores its record under the next one.
        nonlocal switched
        number = last_number(self)
        if not switched:
            switched = True
            other.start()
            other.join(SWITCH_WAIT_S)
        return number

    monkeypatch.setattr(Shard, "get_max_sequence_number", switch_after_reading)
    shard.put_record("k", "a", "")
    other.join()
    assert sorted(record.data for record in shard.records.values()) == ["a", "b", "first"]


class _Table(dict[str, list[str]]):
    """A stand-in for moto's Table: the type the shim copies once."""


def test_within_a_transaction_a_table_is_deep_copied_once() -> None:
    shim = _OneCopyPerTransaction(once=_Table)
    table = _Table(items=["a"])

    def transaction() -> tuple[object, object]:
        return shim.deepcopy(table), shim.deepcopy(table)

    first, second = shim.during(transaction)()
    assert first is second
    assert first == table and first is not table
    assert first["items"] is not table["items"]  # a deep copy, not a view of the table


def test_other_objects_are_copied_anew_even_within_a_transaction() -> None:
    shim = _OneCopyPerTransaction(once=_Table)
    item = {"pk": ["a"]}

    def transaction() -> tuple[object, object]:
        before = shim.deepcopy(item)
        item["pk"].append("b")
        return before, shim.deepcopy(item)

    assert shim.during(transaction)() == ({"pk": ["a"]}, {"pk": ["a", "b"]})


def test_outside_a_transaction_each_deep_copy_is_a_new_one() -> None:
    shim = _OneCopyPerTransaction(once=_Table)
    table = _Table(items=["a"])
    shim.during(lambda: shim.deepcopy(table))()
    assert shim.deepcopy(table) is not shim.deepcopy(table)


def test_each_transaction_copies_the_table_as_it_is_then() -> None:
    shim = _OneCopyPerTransaction(once=_Table)
    table = _Table(items=["a"])
    before = shim.during(lambda: shim.deepcopy(table))()
    table["items"].append("b")
    after = shim.during(lambda: shim.deepcopy(table))()
    assert before == {"items": ["a"]} and after == {"items": ["a", "b"]}


def test_moto_routes_requests_from_a_module_listing_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backends, "list_of_moto_modules", backends.list_of_moto_modules)
    listed = list(backends.list_of_moto_modules())
    list_moto_modules_once()

    def no_disk(path: str) -> list[str]:
        raise AssertionError(f"listed {path} again")

    monkeypatch.setattr(os, "listdir", no_disk)
    assert list(backends.list_of_moto_modules()) == listed
    dispatcher = DomainDispatcherApplication(create_backend_app)
    assert dispatcher.get_backend_for_host("dynamodb") == "dynamodb"
    assert dispatcher.get_backend_for_host("kinesis.us-east-1.amazonaws.com") == "kinesis"
