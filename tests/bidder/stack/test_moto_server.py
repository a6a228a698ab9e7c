"""bidder.stack.moto_server: the corrections the local stack's moto server runs with."""

from __future__ import annotations

import os
import threading
import types
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import backends
from moto.dynamodb import models
from moto.kinesis.models import Shard
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from bidder.adapters.aws import aws_client
from bidder.stack.moto_server import (
    _NoTableCopies,
    fix_dynamodb_transactions,
    fix_kinesis_shards,
    list_moto_modules_once,
    saved_items,
)

SWITCH_WAIT_S = 0.5
"""How long the first put lets the other one run: it finishes at once unless it waits for
the first one's lock. Only a bound; nothing measures it."""


def test_two_puts_racing_on_one_shard_both_keep_their_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fix_kinesis_shards()
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


def _shard(records: int) -> Shard:
    fix_kinesis_shards()
    shard = Shard(0, 0, 2**128)
    for n in range(records):
        shard.put_record(str(n), f"data-{n}", "")
    return shard


def _expected(shard: Shard, after: int, limit: int | None) -> tuple[list[Any], int, int]:
    """What GetRecords means: the records numbered after ``after``, in order, at most
    ``limit``; the last number returned; how far behind the shard's last record."""
    found = [record for number, record in shard.records.items() if number > after][:limit]
    if not found:
        return [], after, 0
    newest = shard.records[next(reversed(shard.records))]
    return found, found[-1].sequence_number, int((newest.created_at - found[-1].created_at) * 1000)


@settings(max_examples=60)
@given(
    records=st.integers(0, 40),
    after=st.integers(-1, 45),
    limit=st.none() | st.integers(1, 45),
)
def test_get_records_returns_the_records_after_the_position(
    records: int, after: int, limit: int | None
) -> None:
    shard = _shard(records)
    assert shard.get_records(str(after), limit) == _expected(shard, after, limit)


def test_get_records_on_a_shard_with_a_gap_walks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    shard = _shard(10)
    del shard.records[4]
    assert shard.get_records("2", 3) == _expected(shard, 2, 3)
    assert shard.get_records("0", None) == _expected(shard, 0, None)


def test_a_shard_s_first_and_last_numbers() -> None:
    assert (_shard(0).get_min_sequence_number(), _shard(0).get_max_sequence_number()) == (0, 0)
    shard = _shard(5)
    assert (shard.get_min_sequence_number(), shard.get_max_sequence_number()) == (1, 5)


class _Table(dict[str, list[str]]):
    """A stand-in for moto's Table: the type whose deep copies are skipped."""


def test_a_table_is_not_deep_copied_other_objects_are() -> None:
    shim = _NoTableCopies(_Table)
    table, item = _Table(items=["a"]), {"pk": ["a"]}
    assert shim.deepcopy(table) is table
    copied = shim.deepcopy(item)
    assert copied == item and copied["pk"] is not item["pk"]


def test_entries_moto_will_refuse_are_not_saved() -> None:
    backend = types.SimpleNamespace(tables={})
    malformed = [{"Put": {"TableName": "absent", "Item": {}}}, {"Put": {}, "Delete": {}}, "x"]
    assert saved_items(backend, malformed) == []
    assert saved_items(backend, "not a list") == []


WRITE_WAIT_S = 1.0
"""How long a write may try to run while a transaction is held inside: without the lock
it finishes in about a millisecond. Only a bound; nothing measures it."""


def test_a_write_waits_for_a_running_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    fix_dynamodb_transactions()
    backend = models.DynamoDBBackend("us-east-1", "123456789012")
    backend.create_table(
        name="t",
        schema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        throughput=None,
        attr=[{"AttributeName": "pk", "AttributeType": "S"}],
        global_indexes=None,
        indexes=None,
        streams=None,
        billing_mode="PAY_PER_REQUEST",
        sse_specification=None,
        tags=[],
        deletion_protection_enabled=None,
        warm_throughput=None,
    )
    inside, release = threading.Event(), threading.Event()
    condition = models.get_filter_expression

    def held_inside(*args: Any, **kwargs: Any) -> Any:
        inside.set()
        release.wait(WRITE_WAIT_S * 5)
        return condition(*args, **kwargs)

    monkeypatch.setattr(models, "get_filter_expression", held_inside)
    put = {"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}, "by": {"S": "transaction"}}}}
    put["Put"]["ConditionExpression"] = "attribute_not_exists(pk)"
    transaction = threading.Thread(target=backend.transact_write_items, args=([put],))
    write = threading.Thread(
        target=backend.put_item, args=("t", {"pk": {"S": "a"}, "by": {"S": "write"}})
    )
    transaction.start()
    assert inside.wait(WRITE_WAIT_S * 5)
    write.start()
    write.join(WRITE_WAIT_S)
    still_waiting = write.is_alive()
    release.set()
    transaction.join()
    write.join()
    assert still_waiting
    item = backend.get_item("t", {"pk": {"S": "a"}})
    assert item is not None and item.attrs["by"].value == "write"  # the write came second


def _table(client: Any, range_key: bool = False) -> str:
    name = f"tx-{uuid.uuid4().hex[:8]}"
    keys = [("pk", "HASH")] + ([("sk", "RANGE")] if range_key else [])
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k, _ in keys],
        KeySchema=[{"AttributeName": k, "KeyType": kind} for k, kind in keys],
    )
    return name


def _items(client: Any, table: str) -> dict[str, dict[str, Any]]:
    found = client.scan(TableName=table, ConsistentRead=True)["Items"]
    return {item["pk"]["S"] + item.get("sk", {}).get("S", ""): item for item in found}


def _put(table: str, pk: str, **attrs: str) -> dict[str, Any]:
    return {"Put": {"TableName": table, "Item": {"pk": {"S": pk}, **_s(attrs)}}}


def _s(attrs: dict[str, str]) -> dict[str, Any]:
    return {name: {"S": value} for name, value in attrs.items()}


def test_a_cancelled_transaction_leaves_every_item_as_it_was(aws_endpoint: str) -> None:
    client = aws_client("dynamodb", aws_endpoint)
    table = _table(client)
    client.put_item(TableName=table, Item={"pk": {"S": "kept"}, "n": {"N": "1"}})
    client.put_item(TableName=table, Item={"pk": {"S": "deleted"}, "v": {"S": "x"}})
    before = _items(client, table)
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": "kept"}},
                        "UpdateExpression": "ADD n :five",
                        "ExpressionAttributeValues": {":five": {"N": "5"}},
                    }
                },
                _put(table, "new", v="y"),
                {"Delete": {"TableName": table, "Key": {"pk": {"S": "deleted"}}}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {"pk": {"S": "missing"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    assert _items(client, table) == before


def test_a_transaction_refused_midway_leaves_the_items_as_they_were(aws_endpoint: str) -> None:
    client = aws_client("dynamodb", aws_endpoint)
    table = _table(client)
    client.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"S": "old"}})
    before = _items(client, table)
    with pytest.raises(ClientError, match="ValidationException"):  # two writes to one item
        client.transact_write_items(
            TransactItems=[_put(table, "a", v="new"), _put(table, "b"), _put(table, "a")]
        )
    assert _items(client, table) == before


def test_a_cancelled_transaction_restores_items_of_a_range_key_table(aws_endpoint: str) -> None:
    client = aws_client("dynamodb", aws_endpoint)
    table = _table(client, range_key=True)
    client.put_item(TableName=table, Item={"pk": {"S": "h"}, "sk": {"S": "1"}, "v": {"S": "x"}})
    before = _items(client, table)
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": _s({"pk": "h", "sk": "1", "v": "y"})}},
                {"Put": {"TableName": table, "Item": _s({"pk": "h", "sk": "2"})}},
                {
                    "Put": {
                        "TableName": table,
                        "Item": _s({"pk": "h", "sk": "3"}),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    assert _items(client, table) == before


def test_a_transaction_that_succeeds_applies_every_item(aws_endpoint: str) -> None:
    client = aws_client("dynamodb", aws_endpoint)
    table = _table(client)
    client.put_item(TableName=table, Item={"pk": {"S": "gone"}})
    client.transact_write_items(
        TransactItems=[
            _put(table, "a", v="1"),
            {"Delete": {"TableName": table, "Key": {"pk": {"S": "gone"}}}},
        ]
    )
    assert _items(client, table) == {"a": {"pk": {"S": "a"}, "v": {"S": "1"}}}


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
