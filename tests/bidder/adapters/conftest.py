"""Fixtures for the Valkey adapter tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from bidder.adapters.valkey import connect_pipelined
from bidder.adapters.valkey_pipelined import PipelinedConnection


@pytest_asyncio.fixture
async def pipelined(valkey_url: str) -> AsyncIterator[PipelinedConnection]:
    """A pipelined connection to the session's Valkey."""
    connection = connect_pipelined(valkey_url, connect_timeout_s=2.0)
    await connection.connect()
    yield connection
    await connection.aclose()
