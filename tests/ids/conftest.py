"""An async Valkey client on the session server, and a fresh lease namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis.asyncio as aioredis


@pytest_asyncio.fixture
async def valkey(valkey_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(valkey_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def namespace() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"
