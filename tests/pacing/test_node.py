"""The node pacer: admission at bid time, debits, fail-closed refreshes (real Valkey)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import SlotNotCoveredError

from bidder.core.clock import ManualClock
from bidder.core.nobid import NoBid
from pacing.lease import Lease
from pacing.lease_store import LeaseReader, LeaseWriter, leases_key
from pacing.node import NodePacer
from pacing.refresher import refresh_once

T0 = 1_767_225_600_000


def _pacer(draw: float = 0.0) -> tuple[NodePacer, ManualClock]:
    clock = ManualClock(start_wall_ms=T0)
    return NodePacer("n1", clock, rng=lambda: draw), clock


def test_nothing_bids_before_the_first_refresh() -> None:
    pacer, _ = _pacer()
    assert pacer.admit("c1", 10) is NoBid.BUDGET_UNAVAILABLE


def test_a_campaign_without_a_lease_is_skipped() -> None:
    pacer, _ = _pacer()
    pacer.install({})
    assert pacer.admit("c1", 10) is NoBid.NO_LEASE


def test_a_live_lease_with_room_admits() -> None:
    pacer, _ = _pacer(draw=0.3)
    pacer.install({"c1": Lease(1, 1_000, T0 + 10_000, 400_000)})
    assert pacer.admit("c1", 10) is None


def test_the_rate_is_a_bid_probability() -> None:
    pacer, _ = _pacer(draw=0.4)
    pacer.install({"c1": Lease(1, 1_000, T0 + 10_000, 400_000)})
    assert pacer.admit("c1", 10) is NoBid.PACED


def test_an_expired_lease_stops_spending() -> None:
    pacer, clock = _pacer()
    pacer.install({"c1": Lease(1, 1_000, T0 + 10_000, 1_000_000)})
    clock.advance(10.0)
    assert pacer.admit("c1", 10) is NoBid.NO_LEASE


def test_billed_cost_uses_up_the_chunk() -> None:
    pacer, _ = _pacer()
    pacer.install({"c1": Lease(1, 1_000, T0 + 10_000, 1_000_000)})
    pacer.debit("c1", 995)
    assert pacer.admit("c1", 5) is None
    assert pacer.admit("c1", 6) is NoBid.NO_LEASE


@pytest.fixture
def prefix() -> str:
    return f"test-pacing-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def writer(valkey_url: str, prefix: str) -> Iterator[LeaseWriter]:
    client = redis.Redis.from_url(valkey_url)
    yield LeaseWriter(client, prefix)
    client.close()


@pytest_asyncio.fixture
async def aclient(valkey_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(valkey_url)
    yield client
    await client.aclose()


@pytest.mark.asyncio
async def test_leases_written_by_the_reconciler_reach_the_node(
    writer: LeaseWriter, aclient: aioredis.Redis, prefix: str
) -> None:
    pacer, clock = _pacer()
    reader = LeaseReader(aclient, "node-a", 15_000, prefix)
    assert await refresh_once(pacer, reader, clock)
    assert writer.live_nodes(T0) == ["node-a"]
    lease = Lease(1, 694_444, T0 + 10_000, 500_000)
    writer.write(["node-a"], {"c1": lease, "c2": lease}, 10_000)
    await refresh_once(pacer, reader, clock)
    assert pacer.admit("c1", 1_000) is None and pacer.remaining("c2") == 694_444


@pytest.mark.asyncio
async def test_a_node_that_stops_heartbeating_is_not_live(
    writer: LeaseWriter, aclient: aioredis.Redis, prefix: str
) -> None:
    pacer, clock = _pacer()
    await refresh_once(pacer, LeaseReader(aclient, "node-b", 15_000, prefix), clock)
    assert writer.live_nodes(T0 + 14_999) == ["node-b"]
    assert writer.live_nodes(T0 + 15_000) == []


def test_lease_hashes_expire_with_their_leases(
    writer: LeaseWriter, valkey_url: str, prefix: str
) -> None:
    writer.write(["node-c"], {"c1": Lease(1, 5, T0 + 10_000, 1)}, 10_000)
    with redis.Redis.from_url(valkey_url) as client:
        assert 0 < client.pttl(leases_key("node-c", prefix)) <= 10_000


@pytest_asyncio.fixture
async def dead() -> AsyncIterator[aioredis.Redis]:
    """A client of a Valkey that is not there: every refresh fails at once."""
    from bidder.stack.child import held_port

    client = aioredis.Redis(
        port=held_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    yield client
    await client.aclose()


def _leased(draw: float = 0.0) -> tuple[NodePacer, ManualClock]:
    pacer, clock = _pacer(draw)
    pacer.install({"c1": Lease(1, 1_000, T0 + 10_000, 1_000_000)})
    return pacer, clock


@pytest.mark.asyncio
async def test_a_failed_refresh_keeps_spending_from_an_unexpired_lease(
    dead: aioredis.Redis,
) -> None:
    pacer, clock = _leased()
    assert not await refresh_once(pacer, LeaseReader(dead, "node-d"), clock)
    assert pacer.admit("c1", 1) is None


class UncoveredSlot(LeaseReader):
    """A Cluster client's view while its slot map has no node for the node's keys: it
    raises its own error, not a ``RedisError``."""

    async def refresh(self, now_ms: int) -> dict[str, Lease]:
        raise SlotNotCoveredError('Slot "7" not covered by the cluster.')


@pytest.mark.asyncio
async def test_a_cluster_client_error_is_a_failed_refresh(dead: aioredis.Redis) -> None:
    pacer, clock = _leased()
    assert not await refresh_once(pacer, UncoveredSlot(dead, "node-s"), clock)
    assert pacer.admit("c1", 1) is None
    clock.advance(10.0)
    assert pacer.admit("c1", 1) is NoBid.BUDGET_UNAVAILABLE


@pytest.mark.asyncio
async def test_unreadable_budget_state_means_no_spend_once_the_lease_expires(
    dead: aioredis.Redis,
) -> None:
    pacer, clock = _leased()
    await refresh_once(pacer, LeaseReader(dead, "node-d"), clock)
    clock.advance(10.0)
    assert pacer.admit("c1", 1) is NoBid.BUDGET_UNAVAILABLE


@pytest.mark.asyncio
async def test_while_refreshes_fail_a_spent_chunk_is_not_topped_up(
    dead: aioredis.Redis,
) -> None:
    pacer, clock = _leased()
    await refresh_once(pacer, LeaseReader(dead, "node-d"), clock)
    pacer.debit("c1", 1_000)
    assert pacer.admit("c1", 1) is NoBid.BUDGET_UNAVAILABLE


@pytest.mark.asyncio
async def test_while_refreshes_fail_a_campaign_without_a_lease_is_budget_unavailable(
    dead: aioredis.Redis,
) -> None:
    pacer, clock = _leased()
    await refresh_once(pacer, LeaseReader(dead, "node-d"), clock)
    assert pacer.admit("c2", 1) is NoBid.BUDGET_UNAVAILABLE


@pytest.mark.asyncio
async def test_a_successful_refresh_after_failures_reads_the_leases_again(
    writer: LeaseWriter, aclient: aioredis.Redis, dead: aioredis.Redis, prefix: str
) -> None:
    pacer, clock = _leased()
    await refresh_once(pacer, LeaseReader(dead, "node-e"), clock)
    writer.write(["node-e"], {"c2": Lease(2, 1_000, T0 + 10_000, 1_000_000)}, 10_000)
    assert await refresh_once(pacer, LeaseReader(aclient, "node-e", 15_000, prefix), clock)
    assert (pacer.admit("c1", 1), pacer.admit("c2", 1)) == (NoBid.NO_LEASE, None)


def test_pacing_keys_of_one_node_share_a_slot() -> None:
    from redis.crc import key_slot

    from pacing.lease_store import leases_key, live_nodes_key

    assert key_slot(leases_key("n1").encode()) == key_slot(b"{node:n1}")
    assert key_slot(live_nodes_key().encode()) == key_slot(b"{nodes}")
