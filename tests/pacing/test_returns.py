"""Returned leases on the real Valkey: a departing node gives its leases back in one
script, and the reconciler never leases to it again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis
from redis.crc import key_slot

from bidder.core.clock import ManualClock
from bidder.core.nobid import NoBid
from pacing.debits import DebitInbox, DebitOutbox
from pacing.lease import Lease, LeaseAccount, ReturnedLease
from pacing.lease_store import (
    LeaseReader,
    LeaseWriter,
    gone_key,
    leases_key,
    returned_key,
    returns_log_key,
)
from pacing.node import NodePacer
from pacing.refresher import refresh_once, return_leases

T0 = 1_767_225_600_000
OLD = Lease(1, 1_000, T0 + 10_000, 1_000_000)
NEW = Lease(2, 1_000, T0 + 15_000, 1_000_000)


@pytest.fixture
def prefix() -> str:
    return f"test-returns-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def sync(valkey_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(valkey_url)
    yield client
    client.close()


@pytest.fixture
def writer(sync: redis.Redis, prefix: str) -> LeaseWriter:
    return LeaseWriter(sync, prefix)


@pytest_asyncio.fixture
async def reader(valkey_url: str, prefix: str) -> AsyncIterator[LeaseReader]:
    client = aioredis.Redis.from_url(valkey_url)
    yield LeaseReader(client, "node-a", 15_000, prefix)
    await client.aclose()


def _spent(lease: Lease, spent: int) -> dict[str, LeaseAccount]:
    return {"c1": LeaseAccount(lease, spent)}


def test_a_nodes_keys_share_one_slot() -> None:
    slots = {key_slot(k("n1").encode()) for k in (leases_key, returned_key, gone_key)}
    assert slots == {key_slot(b"{node:n1}")}


@pytest.mark.asyncio
async def test_returning_deletes_the_leases_and_records_what_was_not_spent(
    writer: LeaseWriter, reader: LeaseReader, sync: redis.Redis, prefix: str
) -> None:
    writer.write(["node-a"], {"c1": OLD}, 10_000)
    await reader.give_back(_spent(OLD, 300))
    assert not sync.exists(leases_key("node-a", prefix))
    assert writer.read_returns(["node-a"]) == [ReturnedLease("node-a", "c1", 1, 700)]


@pytest.mark.asyncio
async def test_a_lease_written_after_the_last_refresh_is_returned_whole(
    writer: LeaseWriter, reader: LeaseReader
) -> None:
    writer.write(["node-a"], {"c1": NEW}, 10_000)
    await reader.give_back(_spent(OLD, 300))  # the node still spends from lease 1
    returned = sorted(writer.read_returns(["node-a"]), key=lambda r: r.lease_id)
    assert returned == [
        ReturnedLease("node-a", "c1", 1, 700),
        ReturnedLease("node-a", "c1", 2, 1_000),
    ]


@pytest.mark.asyncio
async def test_a_used_up_lease_returns_nothing(writer: LeaseWriter, reader: LeaseReader) -> None:
    writer.write(["node-a"], {"c1": OLD}, 10_000)
    await reader.give_back(_spent(OLD, 1_200))  # billed past its chunk
    assert writer.read_returns(["node-a"]) == []


@pytest.mark.asyncio
async def test_no_lease_is_written_to_a_node_that_has_left(
    writer: LeaseWriter, reader: LeaseReader, sync: redis.Redis, prefix: str
) -> None:
    await reader.give_back({})
    writer.write(["node-a"], {"c1": NEW}, 10_000)  # a tick that read the live set earlier
    assert not sync.exists(leases_key("node-a", prefix))


@pytest.mark.asyncio
async def test_a_new_process_with_the_same_node_id_is_leased_again(
    writer: LeaseWriter, reader: LeaseReader, valkey_url: str, prefix: str
) -> None:
    await reader.give_back({})
    client = aioredis.Redis.from_url(valkey_url)
    try:
        again = LeaseReader(client, "node-a", 15_000, prefix)
        await again.refresh(T0)
        writer.write(["node-a"], {"c1": NEW}, 10_000)
        assert await again.refresh(T0) == {"c1": NEW}
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_a_node_that_returned_its_leases_admits_nothing(
    writer: LeaseWriter, reader: LeaseReader
) -> None:
    clock = ManualClock(start_wall_ms=T0)
    pacer = NodePacer("node-a", clock, rng=lambda: 0.0)
    writer.write(["node-a"], {"c1": OLD}, 10_000)
    await refresh_once(pacer, reader, clock)
    pacer.debit("c1", 250)
    assert await return_leases(pacer, reader)
    assert pacer.admit("c1", 1) is NoBid.NO_LEASE
    assert writer.read_returns(["node-a"]) == [ReturnedLease("node-a", "c1", 1, 750)]


@pytest.mark.asyncio
async def test_a_returned_remainder_counts_the_debits_other_workers_routed_here(
    writer: LeaseWriter, reader: LeaseReader, valkey_url: str, prefix: str
) -> None:
    clock = ManualClock(start_wall_ms=T0)
    pacer = NodePacer("node-a", clock, rng=lambda: 0.0)
    writer.write(["node-a"], {"c1": OLD}, 10_000)
    client = aioredis.Redis.from_url(valkey_url)
    try:
        inbox, outbox = DebitInbox(client, lambda: 9, prefix), DebitOutbox(client, prefix)
        await refresh_once(pacer, reader, clock, inbox)
        assert await outbox.send(9, "c1", 400)
        assert await return_leases(pacer, reader, inbox=inbox)
        assert not await outbox.send(9, "c1", 100)  # the senders pay from now on
    finally:
        await client.aclose()
    assert writer.read_returns(["node-a"]) == [ReturnedLease("node-a", "c1", 1, 600)]


def test_settled_returns_are_logged_and_only_the_applied_fields_deleted(
    writer: LeaseWriter, sync: redis.Redis, prefix: str
) -> None:
    key = returned_key("node-b", prefix)
    sync.hset(key, mapping={"1:c1": 700, "2:c1": 1_000})
    writer.settle_returns([ReturnedLease("node-b", "c1", 1, 700)], ['{"nodes":["node-b"]}'])
    assert sync.hgetall(key) == {b"2:c1": b"1000"}
    assert sync.lrange(returns_log_key(prefix), 0, -1) == [b'{"nodes":["node-b"]}']


def test_malformed_returned_fields_are_skipped(
    writer: LeaseWriter, sync: redis.Redis, prefix: str
) -> None:
    sync.hset(returned_key("node-c", prefix), mapping={"x:c1": 5, "3:c2": "y", "4:c3": 9})
    assert writer.read_returns(["node-c"]) == [ReturnedLease("node-c", "c3", 4, 9)]
