"""Worker-id leases on a Valkey Cluster: one slot per namespace, the scripts work there."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from importlib import resources

import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from bidder.adapters.valkey import AsyncValkey, connect_async, warm_up
from bidder.core.clock import ManualClock
from bidder.stack.cluster import LocalValkeyCluster
from ids.snowflake import Snowflake
from ids.worker_lease import WorkerLease, lease_keys

SCRIPTS = ("acquire.lua", "renew.lua", "release.lua")


@pytest_asyncio.fixture
async def client(cluster: LocalValkeyCluster) -> AsyncIterator[AsyncValkey]:
    valkey = connect_async(cluster.url, cluster=True, timeout_s=2.0)
    await warm_up(valkey, 5.0)
    try:
        yield valkey
    finally:
        await valkey.aclose()


@given(st.from_regex(r"[A-Za-z0-9_-]{1,32}", fullmatch=True))
def test_the_lease_keys_of_any_namespace_share_one_slot(namespace: str) -> None:
    assert len({key_slot(key.encode()) for key in lease_keys(namespace)}) == 1


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_touches_only_the_two_lease_keys(script: str) -> None:
    text = resources.files("ids").joinpath("lua", script).read_text(encoding="utf-8")
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", text)}
    assert used <= set(range(1, len(lease_keys("x")) + 1))


@pytest.mark.asyncio
async def test_leases_are_acquired_renewed_and_released_on_a_cluster(
    client: AsyncValkey,
) -> None:
    clock = ManualClock()
    leases = [
        WorkerLease(client, Snowflake(clock), clock, namespace="cl", ttl_ms=10_000)
        for _ in range(2)
    ]
    workers = [await lease.acquire() for lease in leases]
    renewed = await leases[0].renew()
    await leases[0].release()
    again = await WorkerLease(client, Snowflake(clock), clock, namespace="cl").acquire()
    assert (workers, renewed, again) == ([0, 1], True, 0)
