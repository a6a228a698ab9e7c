"""A node that holds no lease yet reads its leases often, against the real Valkey.

The reconciler leases to a node as soon as it joins the live set; the node must then
see them within a few of its short first reads, not at its regular interval (here an
hour away).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
import redis

from bidder.adapters.valkey import connect_async
from bidder.core.clock import SystemClock
from bidder.core.tasks import cancel_and_wait
from pacing.lease import Lease
from pacing.lease_store import LeaseReader, LeaseWriter, live_nodes_key
from pacing.node import NodePacer
from pacing.refresher import run_refresher

pytestmark = pytest.mark.asyncio

PREFIX = "test-refresher-first"


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


async def test_a_node_reads_its_first_leases_long_before_its_refresh_interval(
    valkey_url: str,
) -> None:
    clock = SystemClock()
    client = connect_async(valkey_url, timeout_s=2.0)
    sync = redis.Redis.from_url(valkey_url)
    try:
        pacer = NodePacer("first-1", clock)
        reader = LeaseReader(client, pacer.node_id, prefix=PREFIX)
        task = asyncio.create_task(run_refresher(pacer, reader, clock, interval_s=3600.0))
        try:
            assert await _until(
                lambda: sync.zscore(live_nodes_key(PREFIX), pacer.node_id) is not None
            )
            assert not pacer.holds_leases
            lease = Lease(1, 5_000_000, clock.wall_ms() + 60_000, 1_000_000)
            LeaseWriter(sync, PREFIX).write_each({pacer.node_id: {"c1": lease}}, 60_000)
            assert await _until(lambda: pacer.holds_leases)
            assert pacer.remaining("c1") == 5_000_000
        finally:
            await cancel_and_wait(task)
    finally:
        await client.aclose()
        sync.close()
