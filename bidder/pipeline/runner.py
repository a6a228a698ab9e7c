"""The decision pipeline: stages that narrow the candidates or say why not.

Every stage has one contract: ``stage(ctx, deadline)`` either narrows
``ctx.candidates`` (and may attach prices) and returns None, or returns the
``NoBid`` reason that ends the auction for us. Stages run cheapest first, because
~97% of requests end in a no-bid and the cheapest stage that can decide should. The
stage table (order, code, no-bid reasons) is in ``docs/architecture.md``; the wiring,
in that order, is ``bidder.serve.assemble``.

Deadline enforcement. A pure stage returns its answer directly; a stage that
does I/O returns an awaitable, and only then is the request's deadline armed, once,
around it and every stage after it, so every awaited call is cut off at the deadline
while the ~97% of requests that never leave memory pay for nothing. A stage whose wait
ends by the deadline on its own (the cap read: its replies carry their limit, at most
the deadline, on the connection) returns a ``Later`` instead, and the stages after it
run from the reply's done-callback with no task and no armed deadline, until one of
them awaits something else (``run_stages``). The deadlines of
all requests in flight share one loop timer (``bidder.core.deadlines``), since a loop
timer of its own costs a request about as much as the eligibility stage. A pure stage
can't be interrupted; the caller checks the clock once more before a bid goes out.
``deadline`` is passed so a stage can give a sub-call its own, tighter bound. It is an
instant on the ``Clock``'s monotonic time, which the timer compares with the loop's
time: with the ``SystemClock`` both are CLOCK_MONOTONIC (asyncio's default loop and
uvloop alike).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from bidder.core.deadlines import TaskDeadlines
from bidder.core.futures import Later, Outcome
from bidder.core.nobid import NoBid
from bidder.decide.eligibility import Candidate
from bidder.openrtb.view import BidRequest
from bidder.pipeline.campaign_trace import CampaignTrace
from bidder.pipeline.stage_times import StageTimes

StageResult = NoBid | None


@dataclass(slots=True)
class PricedCandidate:
    candidate: Candidate
    price_cpm_micros: int


@dataclass(frozen=True, slots=True)
class EarlyClaim:
    """The auction's claim, sent before the cap check (stage 7a,
    ``bidder.pipeline.auction_claims``): its reply comes while the request is checked
    and scored."""

    reply: asyncio.Future[Any]
    sent_at: float
    """Monotonic time it was sent."""
    fair_chance: bool
    """It was sent with at least the claim budget to go (a timeout then fails open)."""


@dataclass(slots=True)
class Context:
    request: BidRequest
    ssp: str
    received: float
    """Monotonic time at receipt."""
    candidates: list[Candidate] = field(default_factory=list)
    priced: list[PricedCandidate] = field(default_factory=list)
    personalize: bool = True
    """False when consent or privacy signals forbid using the person's identity."""
    user_key: str | None = None
    """Stage 5's one key for this person (``bidder.decide.identity``); None when anonymous."""
    household_key: str | None = None
    low_confidence: bool = False
    """The identity graph knows ``user_key`` with less than its confidence threshold."""
    fallback_keys: dict[tuple[str, str], str] | None = None
    """(campaign id, creative id) -> the fallback key its user caps were checked under
    (``cap_policy.fallback``); the bid's notice token carries it as the user key, so
    the win counts under the same key. None when no candidate used one."""
    caps_unchecked: frozenset[tuple[str, str]] = frozenset()
    """(campaign id, creative id) of candidates that passed stage 7 without a cap check
    (fail-open); their bids carry the unchecked mark."""
    profile: Any = None
    """The user's profile when stage 5 had it in cache (``bidder.decide.profile_cache``)."""
    held: bool = False
    """Stage 8b held the claim back for a better-placed copy
    (``bidder.pipeline.auction_claims``)."""
    top_ranked: bool | None = None
    """Stage 7a's ranking of this copy's supply path, when it ranked it; 8b ranks it
    otherwise (``bidder.pipeline.auction_claims``)."""
    claim: EarlyClaim | None = None
    """Stage 7a sent the auction's claim; stage 8b reads its reply."""
    finishers: list[Finisher] = field(default_factory=list)
    """Called once with the bids sent (none on a no-bid), e.g. to release fcap slots."""
    times: StageTimes | None = None
    """Per-stage times, when the request asked for them (``stage_times``)."""
    trace: CampaignTrace | None = None
    """What was decided per campaign, when the request asked (``campaign_trace``)."""

    def finish(self, bids: Sequence[PricedCandidate]) -> None:
        for finisher in self.finishers:
            finisher(bids)


Finisher = Callable[[Sequence[PricedCandidate]], None]


class Stage(Protocol):
    def __call__(
        self, ctx: Context, deadline: float
    ) -> StageResult | Later[StageResult] | Awaitable[StageResult]: ...


Staged = StageResult | Later[StageResult] | Coroutine[Any, Any, StageResult]
"""What running stages gives: the result, the result once a reply is in, or a
coroutine of it."""


def run_stages(
    stages: Sequence[Stage], ctx: Context, deadline: float, bounds: TaskDeadlines
) -> Staged:
    """Run stages in order; the first no-bid reason ends the run.

    When every stage is pure the answer comes back at once (no task, no timer). A stage
    may return a ``Later`` that ends by the deadline on its own (a Valkey
    reply, whose limit the connection keeps): the stages after it then run from its
    done-callback, with no task (``bidder.core.futures``), and the result is a
    ``Later``; past the deadline they do not run (``deadline``). Any other
    awaitable makes the rest a coroutine, which puts the request's deadline in
    ``bounds`` around it and the stages after it, and raises TimeoutError when a stage
    is still awaiting at ``deadline``.
    """
    return _run_from(stages, 0, ctx, deadline, bounds)


def _run_from(
    stages: Sequence[Stage], first: int, ctx: Context, deadline: float, bounds: TaskDeadlines
) -> Staged:
    for n in range(first, len(stages)):
        stage = stages[n]
        result = stage(ctx, deadline)
        if result is None:
            if ctx.times is not None:
                ctx.times.mark(type(stage).__name__)
            continue
        if isinstance(result, NoBid):
            if ctx.times is not None:
                ctx.times.mark(type(stage).__name__)
            return result
        if isinstance(result, Later):
            return result.then(partial(_resume, stages, n, ctx, deadline, bounds))
        return _run_rest_in_time(result, stages[n:], ctx, deadline, bounds)
    return None


def _resume(
    stages: Sequence[Stage],
    n: int,
    ctx: Context,
    deadline: float,
    bounds: TaskDeadlines,
    done: Outcome[StageResult],
) -> Staged:
    """Stage ``n``'s future is done: its result, or the stages after it, unless the
    deadline has passed (as a task would have been cut there)."""
    result = done.result()
    if ctx.times is not None:
        ctx.times.mark(type(stages[n]).__name__)
    if result is not None:
        return result
    # Past the deadline no answer can be used: the rest would only take CPU from the
    # requests still in time, which is what an overloaded worker lacks. The clock is
    # read afresh: the loop's own time stands still through a long pass.
    if time.monotonic() >= deadline:
        return NoBid.DEADLINE
    return _run_from(stages, n + 1, ctx, deadline, bounds)


async def _run_rest_in_time(
    first: Awaitable[StageResult],
    stages: Sequence[Stage],
    ctx: Context,
    deadline: float,
    bounds: TaskDeadlines,
) -> StageResult:
    with bounds.until(deadline):
        return await _run_rest(first, stages, ctx, deadline)


async def _run_rest(
    first: Awaitable[StageResult], stages: Sequence[Stage], ctx: Context, deadline: float
) -> NoBid | None:
    """``first`` is the awaitable of ``stages[0]``; the rest run after it."""
    result = await first
    if ctx.times is not None:
        ctx.times.mark(type(stages[0]).__name__)
    for stage in stages[1:]:
        if result is not None:
            return result
        answer = stage(ctx, deadline)
        result = answer if answer is None or isinstance(answer, NoBid) else await answer
        if ctx.times is not None:
            ctx.times.mark(type(stage).__name__)
    return result
