"""CampaignTable against the session's real moto server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from bidder.adapters.aws import aws_client
from bidder.adapters.campaign_store import CampaignTable, StoreError
from bidder.core.clock import ManualClock
from bidder.stack.child import held_port


@pytest.fixture
def dynamodb(aws_endpoint: str) -> Iterator[Any]:
    client = aws_client("dynamodb", aws_endpoint)
    yield client
    client.close()


@pytest.fixture
def table(dynamodb: Any) -> CampaignTable:
    # A table per test: the moto server is shared by the whole session.
    table = CampaignTable(dynamodb, f"campaigns-{uuid.uuid4().hex[:12]}")
    table.ensure_table()
    return table


def _docs(*ids: str) -> list[dict[str, Any]]:
    return [{"id": i, "budget_micros": 1_000_000, "geo": ["US", "CA"], "name": i} for i in ids]


def test_ensure_table_is_idempotent(table: CampaignTable, dynamodb: Any) -> None:
    table.ensure_table()
    described = dynamodb.describe_table(TableName=table.table_name)["Table"]
    assert described["TableStatus"] == "ACTIVE"
    assert described["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]


def test_replace_all_then_scan_round_trips_sorted_by_id(table: CampaignTable) -> None:
    docs = _docs("c3", "c1", "c2")
    docs[0]["nested"] = {"z": 1, "a": [1, 2, {"b": None}]}
    table.replace_all(docs)
    assert table.scan_docs() == sorted(docs, key=lambda d: d["id"])


def test_replace_all_removes_stale_ids(table: CampaignTable) -> None:
    table.replace_all(_docs("a", "b", "c"))
    table.replace_all(_docs("b", "d"))
    assert [d["id"] for d in table.scan_docs()] == ["b", "d"]


def test_replace_all_with_nothing_empties_the_table(table: CampaignTable) -> None:
    table.replace_all(_docs("a", "b"))
    table.replace_all([])
    assert table.scan_docs() == []


def test_items_hold_canonical_json_and_the_write_time(dynamodb: Any) -> None:
    clock = ManualClock(start_wall_ms=1_767_225_600_123)
    table = CampaignTable(dynamodb, f"campaigns-{uuid.uuid4().hex[:12]}", clock=clock)
    table.ensure_table()
    table.replace_all([{"name": "x", "id": "a"}])
    item = dynamodb.get_item(TableName=table.table_name, Key={"id": {"S": "a"}})["Item"]
    assert item["doc"] == {"S": '{"id":"a","name":"x"}'}
    assert item["updated_ms"] == {"N": "1767225600123"}


def test_scan_follows_pages(dynamodb: Any, table: CampaignTable) -> None:
    docs = _docs(*(f"c{i:04d}" for i in range(300)))
    table.replace_all(docs)
    # 7 items per page: anything short of following LastEvaluatedKey loses items.
    paged = CampaignTable(dynamodb, table.table_name, scan_page_size=7)
    assert paged.scan_docs() == docs
    paged.replace_all(docs[:5])
    assert [d["id"] for d in paged.scan_docs()] == ["c0000", "c0001", "c0002", "c0003", "c0004"]


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        ([{"name": "no id"}], "no string 'id'"),
        ([{"id": 7}], "no string 'id'"),
        ([{"id": "a"}, {"id": "a"}], "more than once"),
    ],
)
def test_replace_all_rejects_bad_ids(
    table: CampaignTable, docs: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        table.replace_all(docs)


def test_missing_table_is_a_store_error(dynamodb: Any) -> None:
    table = CampaignTable(dynamodb, "no-such-table")
    with pytest.raises(StoreError, match="scan_docs on table 'no-such-table'"):
        table.scan_docs()


def test_unreachable_endpoint_is_a_store_error() -> None:
    port = held_port()
    client = aws_client("dynamodb", f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(StoreError, match=f"ensure_table .* at http://127.0.0.1:{port}"):
            CampaignTable(client).ensure_table()
    finally:
        client.close()
