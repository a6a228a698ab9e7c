"""Routed debits: what other workers billed of a node's bids reaches its leases (real Valkey)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis

from bidder.core.clock import ManualClock
from pacing.debits import DEBITS_TTL_MS, DebitInbox, DebitOutbox, debits_keys
from pacing.lease import Lease
from pacing.lease_store import LeaseReader, LeaseWriter
from pacing.node import NodePacer
from pacing.refresher import refresh_once

T0 = 1_767_225_600_000
pytestmark = pytest.mark.asyncio


@pytest.fixture
def prefix() -> str:
    return f"test-debits-{uuid.uuid4().hex[:8]}"


@pytest_asyncio.fixture
async def aclient(valkey_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(valkey_url)
    yield client
    await client.aclose()


async def test_a_worker_takes_what_was_sent_to_it_once(
    aclient: aioredis.Redis, prefix: str
) -> None:
    outbox = DebitOutbox(aclient, prefix)
    await outbox.send(7, "c1", 1_200)
    await outbox.send(7, "c1", 800)
    await outbox.send(7, "c2", 5)
    await outbox.send(8, "c1", 99)
    inbox = DebitInbox(aclient, lambda: 7, prefix)
    assert await inbox.take() == {"c1": 2_000, "c2": 5}
    assert await inbox.take() == {}
    assert await DebitInbox(aclient, lambda: 8, prefix).take() == {"c1": 99}


async def test_unclaimed_debits_expire(aclient: aioredis.Redis, prefix: str) -> None:
    await DebitOutbox(aclient, prefix).send(3, "c1", 10)
    assert 0 < await aclient.pttl(debits_keys(3, prefix)[0]) <= DEBITS_TTL_MS


async def test_a_worker_that_left_gets_no_more_debits_until_its_id_is_held_again(
    aclient: aioredis.Redis, prefix: str
) -> None:
    outbox, inbox = DebitOutbox(aclient, prefix), DebitInbox(aclient, lambda: 6, prefix)
    assert await outbox.send(6, "c1", 10)
    assert await inbox.take(leaving=True) == {"c1": 10}
    assert not await outbox.send(6, "c1", 20)
    assert await inbox.take() == {}  # the next holder of worker id 6
    assert await outbox.send(6, "c1", 30)
    assert await inbox.take() == {"c1": 30}


async def test_a_worker_without_an_id_takes_nothing(aclient: aioredis.Redis, prefix: str) -> None:
    await DebitOutbox(aclient, prefix).send(0, "c1", 10)
    assert await DebitInbox(aclient, lambda: None, prefix).take() == {}


async def test_a_refresh_debits_the_routed_costs_to_the_leases_it_installs(
    aclient: aioredis.Redis, valkey_url: str, prefix: str
) -> None:
    clock = ManualClock(start_wall_ms=T0)
    pacer = NodePacer("n1", clock, rng=lambda: 0.0)
    reader = LeaseReader(aclient, "n1", 15_000, prefix)
    inbox = DebitInbox(aclient, lambda: 4, prefix)
    assert await refresh_once(pacer, reader, clock, inbox)
    with redis.Redis.from_url(valkey_url) as sync:
        LeaseWriter(sync, prefix).write(["n1"], {"c1": Lease(1, 1_000, T0 + 10_000, 1)}, 10_000)
    await DebitOutbox(aclient, prefix).send(4, "c1", 300)
    await refresh_once(pacer, reader, clock, inbox)
    assert pacer.remaining("c1") == 700
    await refresh_once(pacer, reader, clock, inbox)
    assert pacer.remaining("c1") == 700
