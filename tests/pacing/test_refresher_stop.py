"""The lease refresher stops when its worker stops, wherever the stop finds it.

On Python 3.11 a cancellation that meets the end of a socket write is dropped inside
redis-py, and the refresher, a loop, went on refreshing: a worker's graceful stop then
ran out its whole grace period and skipped returning its leases. The stop cancels with
``cancel_and_wait``; this test stops a refresher at each of its first suspension
points, against the real Valkey.
"""

from __future__ import annotations

import asyncio

import pytest

from bidder.adapters.valkey import connect_async
from bidder.core.clock import SystemClock
from bidder.core.tasks import cancel_and_wait
from pacing.lease_store import LeaseReader
from pacing.node import NodePacer
from pacing.refresher import run_refresher

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("steps", range(8))
async def test_a_refresher_stopped_after_any_step_ends(valkey_url: str, steps: int) -> None:
    clock = SystemClock()
    client = connect_async(valkey_url, timeout_s=2.0)
    try:
        await client.ping()
        node = f"stop-{steps}"
        reader = LeaseReader(client, node, prefix=f"test-refresher-stop-{steps}")
        task = asyncio.create_task(run_refresher(NodePacer(node, clock), reader, clock, 0.2))
        for _ in range(steps):
            await asyncio.sleep(0)
        await cancel_and_wait(task)
        assert task.cancelled()
    finally:
        await client.aclose()
