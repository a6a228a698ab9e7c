"""Stage 7 on a real Valkey through the auto-pipelined connection: the cap read is sent
by the stage call itself, before anything awaits it, and a check the worker's caches
answer for is pure (no read, no awaitable, so no task and no timer)."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest

from bidder.core.campaigns import Campaign, CapPolicy
from bidder.core.clock import ManualClock
from bidder.core.futures import Later
from bidder.core.nobid import NoBid
from bidder.decide.eligibility import Candidate
from bidder.openrtb.request import parse_bid_request
from bidder.pipeline.campaign_book import CampaignBook
from bidder.pipeline.runner import Context, StageResult
from bidder.pipeline.stages import FcapStage
from fcap.capper import FrequencyCapper
from fcap.rules import subject_for
from fcap.store import FcapStore
from tests.fcap.support import DAY_S, DEFAULT_POLICY, campaign, cap, far_deadline

pytestmark = pytest.mark.asyncio
_CLOCK = ManualClock()


def _stage(store: FcapStore, c: Campaign) -> FcapStage:
    book = CampaignBook(table=None)  # type: ignore[arg-type]  # never refreshed here
    book.install([c])
    return FcapStage(FrequencyCapper(store), book, _CLOCK)


def _ctx(person: str, c: Campaign) -> Context:
    doc = {"id": "r", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}]}
    ctx = Context(request=parse_bid_request(orjson.dumps(doc)), ssp="ssp-a", received=0.0)
    ctx.user_key = person
    imp = ctx.request.imps[0]
    ctx.candidates = [Candidate(imp, c, cr) for cr in c.creatives]
    return ctx


def _once(policy: CapPolicy = DEFAULT_POLICY) -> Campaign:
    return campaign(
        cap("campaign", "fixed", DAY_S, 1), cid=f"sr-{uuid.uuid4().hex[:8]}", policy=policy
    )


async def _win(store: FcapStore, c: Campaign, person: str) -> None:
    now = _CLOCK.wall_ms()
    subject = subject_for(c, "cr1")
    await store.count(uuid.uuid4().hex, subject, "win", person, None, now, now)


async def _replies_settle(store: FcapStore) -> None:
    """Until the connection owes nothing (bounded: 5 s)."""
    assert store.pipelined is not None
    for _ in range(5_000):
        if store.pipelined.pending == 0:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the cap read's reply did not come within 5 s")


async def test_the_read_is_sent_by_the_stage_call_and_its_reply_settles_the_stage(
    store: FcapStore,
) -> None:
    c, person = _once(), f"b:{uuid.uuid4().hex}"
    stage = _stage(store, c)
    assert store.pipelined is not None
    await _replies_settle(store)
    sent_before = store.pipelined.commands

    pending = stage(_ctx(person, c), far_deadline())

    assert isinstance(pending, Later)  # not a coroutine: no task runs it
    assert store.pipelined.pending == 1  # owed as the stage call returns
    settled: list[StageResult] = []
    pending.on_done(lambda outcome: settled.append(outcome.result()))
    await _replies_settle(store)
    await asyncio.sleep(0)  # the reply's done-callbacks run on the next pass
    assert store.pipelined.commands == sent_before + 1
    assert settled == [None]  # settled by the reply's callback, never awaited


async def test_a_person_the_cache_knows_is_capped_gets_a_pure_no_bid(store: FcapStore) -> None:
    c, person = _once(), f"b:{uuid.uuid4().hex}"
    stage = _stage(store, c)
    assert await stage(_ctx(person, c), far_deadline()) is None  # type: ignore[misc]
    await _win(store, c, person)
    assert await stage(_ctx(person, c), far_deadline()) is NoBid.CAPPED  # type: ignore[misc]
    assert store.pipelined is not None
    sent_before = store.pipelined.commands

    # The store said capped; the worker's negative cache now answers alone.
    assert stage(_ctx(person, c), far_deadline()) is NoBid.CAPPED
    assert store.pipelined.commands == sent_before


async def test_a_loose_cap_answered_by_the_count_cache_is_pure(store: FcapStore) -> None:
    c, person = _once(CapPolicy.of_class("loose")), f"b:{uuid.uuid4().hex}"
    stage = _stage(store, c)
    assert await stage(_ctx(person, c), far_deadline()) is None  # type: ignore[misc]
    assert store.pipelined is not None
    sent_before = store.pipelined.commands

    ctx = _ctx(person, c)
    assert stage(ctx, far_deadline()) is None  # allowed on the first read's room
    assert [candidate.campaign.id for candidate in ctx.candidates] == [c.id]
    assert store.pipelined.commands == sent_before


async def test_a_read_that_fails_is_the_campaigns_policy_not_an_error(
    store: FcapStore,
) -> None:
    """A read past its limit when awaited: fail-open lets the candidate through unchecked."""
    c, person = _once(), f"b:{uuid.uuid4().hex}"
    stage = _stage(store, c)
    ctx = _ctx(person, c)
    pending = stage(ctx, asyncio.get_running_loop().time() + 0.000_001)
    await asyncio.sleep(0.01)  # the limit passes before the stage is awaited
    assert await pending is None  # type: ignore[misc]
    assert ctx.caps_unchecked == {(c.id, "cr1")}
