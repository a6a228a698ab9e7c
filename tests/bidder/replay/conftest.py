"""The fake bidder the replay tests send to, on an aiohttp test server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from tests.bidder.replay.test_replayer import FakeBidder


@pytest_asyncio.fixture
async def fake(aiohttp_server) -> AsyncIterator[FakeBidder]:
    bidder = FakeBidder()
    server = await aiohttp_server(bidder.app())
    bidder.url = f"http://127.0.0.1:{server.port}"
    yield bidder
    bidder.release.set()
