"""Fixtures for the Valkey adapter tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from bidder.adapters.valkey import connect_pipelined
from bidder.adapters.valkey_pipelined import PipelinedConnection


@pytest_asyncio.fixture
async def pipelined(valkey_url: str) -> AsyncIterator[PipelinedConnection]:
    """A pipelined connection to the session's Valkey. Its silence bound is 2 s, not the
    worker's 0.1 s: these tests never pause the server, and a test process descheduled
    for a tenth of a second on a loaded machine must not read as Valkey's silence (the
    bound's own tests set theirs)."""
    connection = connect_pipelined(valkey_url, connect_timeout_s=2.0, silent_s=2.0)
    await connection.connect()
    yield connection
    await connection.aclose()
