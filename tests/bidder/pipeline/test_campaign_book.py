"""CampaignBook: the worker's campaigns, refreshed from the real (moto) store."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_asyncio

from bidder.adapters.aws import aws_client
from bidder.adapters.campaign_store import CampaignTable, StoreError
from bidder.core.campaign_docs import campaign_to_doc, load_campaign_file
from bidder.pipeline.campaign_book import CampaignBook
from tests.bidder.conftest import CAMPAIGNS
from tests.published import sample

DOCS = [campaign_to_doc(c) for c in load_campaign_file(CAMPAIGNS)]
ACTIVE = sum(1 for doc in DOCS if doc.get("status", "active") == "active")


@pytest.fixture
def table(aws_endpoint: str) -> Iterator[CampaignTable]:
    client = aws_client("dynamodb", aws_endpoint)
    table = CampaignTable(client, f"book-{uuid.uuid4().hex[:12]}")
    table.ensure_table()
    table.replace_all(DOCS)
    yield table
    client.close()


def _refresh_errors() -> float:
    return sample("bidsim_campaign_refreshes_total", {"outcome": "error"})


def _paused(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "status": "paused"}


@pytest.mark.asyncio
async def test_the_first_refresh_loads_the_active_campaigns(table: CampaignTable) -> None:
    book = CampaignBook(table)
    assert await book.refresh() is True
    assert len(book.index) == ACTIVE


@pytest.mark.asyncio
async def test_an_unchanged_store_keeps_the_same_index(table: CampaignTable) -> None:
    book = CampaignBook(table)
    await book.refresh()
    index = book.index
    assert await book.refresh() is False
    assert book.index is index


@pytest.mark.asyncio
async def test_a_change_in_the_store_reaches_the_index(table: CampaignTable) -> None:
    book = CampaignBook(table)
    await book.refresh()
    first_active = next(doc for doc in DOCS if doc.get("status", "active") == "active")
    table.replace_all([_paused(d) if d is first_active else d for d in DOCS])
    assert await book.refresh() is True
    assert len(book.index) == ACTIVE - 1
    assert first_active["id"] not in {c.id for c in book.index.campaigns}


@pytest_asyncio.fixture
async def book_with_lost_store(table: CampaignTable, aws_endpoint: str) -> CampaignBook:
    """A book that loaded the campaigns once, whose table is then deleted."""
    book = CampaignBook(table)
    await book.refresh()
    aws_client("dynamodb", aws_endpoint).delete_table(TableName=table.table_name)
    return book


@pytest.mark.asyncio
async def test_a_failed_refresh_raises_and_keeps_the_last_good_index(
    book_with_lost_store: CampaignBook,
) -> None:
    index = book_with_lost_store.index
    with pytest.raises(StoreError):
        await book_with_lost_store.refresh()
    assert book_with_lost_store.index is index


@pytest.mark.asyncio
async def test_keep_fresh_counts_errors_and_keeps_serving(
    book_with_lost_store: CampaignBook,
) -> None:
    index = book_with_lost_store.index
    before = _refresh_errors()
    refresher = asyncio.create_task(book_with_lost_store.keep_fresh(interval_s=0.01))
    try:
        async with asyncio.timeout(10):
            # Two failed rounds show the loop goes on. A counter has no event to wait on.
            while _refresh_errors() < before + 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher
    assert book_with_lost_store.index is index
