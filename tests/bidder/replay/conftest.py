"""The fake bidder the replay tests send to, on an aiohttp test server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from tests.bidder.replay.test_replayer import FakeBidder


@pytest_asyncio.fixture
async def bidder(aiohttp_server) -> AsyncIterator[FakeBidder]:
    fake = FakeBidder()
    server = await aiohttp_server(fake.app())
    fake.url = f"http://127.0.0.1:{server.port}"
    yield fake
    fake.release.set()
