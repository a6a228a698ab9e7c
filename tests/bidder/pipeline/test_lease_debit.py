"""The pacing sink charges a billed impression to the lease of the worker that bid."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from bidder.core.clock import ManualClock
from bidder.core.ledger import cost_of
from bidder.core.tokens import NoticeClaims
from bidder.pipeline.sinks import LeaseDebit
from bidder.stack.child import held_port
from bidder.winloop.billing import BilledImpression
from ids import compose
from pacing import NodePacer
from pacing.debits import DebitInbox, DebitOutbox
from pacing.lease import Lease

T0 = 1_767_225_600_000
PRICE = 2_000_000
pytestmark = pytest.mark.asyncio


def _billed(worker: int) -> BilledImpression:
    bid_id = compose(T0, worker, 1)
    claims = NoticeClaims(bid_id, "1", "c1", "adv", "cr1", "b:u1", None, PRICE, T0)
    return BilledImpression(claims, "win", PRICE, cost_of(PRICE), 42, T0)


def _pacer() -> NodePacer:
    pacer = NodePacer("n1", ManualClock(start_wall_ms=T0), rng=lambda: 0.0)
    pacer.install({"c1": Lease(1, 10_000, T0 + 10_000, 1_000_000)})
    return pacer


@pytest_asyncio.fixture
async def aclient(valkey_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(valkey_url)
    yield client
    await client.aclose()


@pytest.fixture
def prefix() -> str:
    return f"test-debit-{uuid.uuid4().hex[:8]}"


async def test_a_bid_of_this_worker_is_debited_here(aclient: aioredis.Redis, prefix: str) -> None:
    pacer = _pacer()
    await LeaseDebit(pacer, lambda: 3, DebitOutbox(aclient, prefix)).on_billed(_billed(3))
    assert pacer.remaining("c1") == 10_000 - cost_of(PRICE)
    assert await DebitInbox(aclient, lambda: 3, prefix).take() == {}


async def test_a_bid_of_another_worker_is_debited_to_that_worker(
    aclient: aioredis.Redis, prefix: str
) -> None:
    pacer = _pacer()
    await LeaseDebit(pacer, lambda: 3, DebitOutbox(aclient, prefix)).on_billed(_billed(5))
    assert pacer.remaining("c1") == 10_000
    assert await DebitInbox(aclient, lambda: 5, prefix).take() == {"c1": cost_of(PRICE)}


async def test_a_bid_of_a_worker_that_left_is_debited_here(
    aclient: aioredis.Redis, prefix: str
) -> None:
    await DebitInbox(aclient, lambda: 5, prefix).take(leaving=True)
    pacer = _pacer()
    await LeaseDebit(pacer, lambda: 3, DebitOutbox(aclient, prefix)).on_billed(_billed(5))
    assert pacer.remaining("c1") == 10_000 - cost_of(PRICE)


async def test_a_debit_valkey_does_not_take_is_charged_here() -> None:
    dead = aioredis.Redis(port=held_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    pacer = _pacer()
    await LeaseDebit(pacer, lambda: 3, DebitOutbox(dead)).on_billed(_billed(5))
    assert pacer.remaining("c1") == 10_000 - cost_of(PRICE)
    await dead.aclose()
