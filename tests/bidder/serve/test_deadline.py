"""The deadline holds whatever a stage does: 204 ``deadline``, never a late bid.

A slow awaiting stage is cancelled at the deadline; a stage that blocks the
loop can't be cancelled, so its bid is withheld after the fact. These tests
assert status and reason. The one time figure used is the slow stage's own
length, 30 s: an answer before it proves the stage was cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import pytest

from bidder.core.nobid import NoBid
from bidder.pipeline.runner import Context, Stage
from bidder.serve.app import BidderState
from bidder.serve.settings import Settings
from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import DeadlineProbe, LiveBidder, StagesHook

pytestmark = pytest.mark.long(12)

StartBidder = Callable[[Stage], LiveBidder]

SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()
SLOW_STAGE_S = 30.0


class SleepingStage:
    """Awaits far past any deadline, like a stalled remote call."""

    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        await asyncio.sleep(SLOW_STAGE_S)
        return None


class BlockingStage:
    """Holds the event loop past the deadline, like a slow pure computation."""

    def __init__(self, settings: Settings):
        self._block_s = 3 * settings.deadline_ms / 1000

    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        time.sleep(self._block_s)  # noqa: ASYNC251 - blocking the loop is the point
        return None


class NeverStage:
    """Awaits a future nobody completes; notes each call and each cancellation."""

    def __init__(self) -> None:
        self.entered = 0
        self.cancelled = 0

    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        self.entered += 1
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return None


class FailingStage:
    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        raise RuntimeError("a bug in a stage")


def _with(extra: Stage) -> StagesHook:
    def hook(state: BidderState) -> Sequence[Stage]:
        return [*state.stages, extra]

    return hook


@pytest.fixture
def bidder_with(bidder_settings: Settings) -> Iterator[StartBidder]:
    """Starts live bidders with one extra stage; all are stopped after the test."""
    with contextlib.ExitStack() as running:
        yield lambda stage: running.enter_context(LiveBidder(bidder_settings, stages=_with(stage)))


def test_stages_must_finish_the_answer_margin_before_the_deadline(
    bidder_with: StartBidder, bidder_settings: Settings
) -> None:
    """The deadline is for the answer's last byte; writing it takes the margin."""
    probe = DeadlineProbe()
    bidder = bidder_with(probe)
    bidder.post(SIMPLE_BANNER)
    expected_ms = bidder_settings.deadline_ms - bidder_settings.answer_margin_ms
    assert bidder_settings.answer_margin_ms > 0
    assert probe.budgets_s == [pytest.approx(expected_ms / 1000)]


def test_a_stalled_stage_is_cut_off_at_the_deadline(bidder_with: StartBidder) -> None:
    bidder = bidder_with(SleepingStage())
    began = time.monotonic()
    answer = bidder.post(SIMPLE_BANNER)
    assert (answer.status, answer.reason) == (204, "deadline")
    assert time.monotonic() - began < SLOW_STAGE_S


def test_a_stage_that_blocks_past_the_deadline_loses_its_bid(
    bidder_with: StartBidder, bidder_settings: Settings
) -> None:
    bidder = bidder_with(BlockingStage(bidder_settings))
    answer = bidder.post(SIMPLE_BANNER)
    assert (answer.status, answer.reason) == (204, "deadline")


def test_a_bug_in_a_stage_is_a_204_not_a_5xx(bidder_with: StartBidder) -> None:
    bidder = bidder_with(FailingStage())
    answer = bidder.post(SIMPLE_BANNER)
    assert (answer.status, answer.reason, answer.headers.get("x-nbr")) == (
        204,
        "internal_error",
        "1",
    )


def test_at_the_real_deadline_a_stage_that_never_returns_is_cancelled(
    bidder_settings: Settings,
) -> None:
    """8 ms, as served. The stage goes first so each request that gets past the clock
    check before the pipeline reaches it; a request already late there is 204 deadline
    too. Each answer came, and by then the stage had been cancelled: nothing left
    awaiting."""
    settings = replace(
        bidder_settings,
        deadline_ms=8.0,
        fcap_check_timeout_ms=4.0,
        shed_lag_ms=8.0,
        shed_stay_lag_ms=8.0,
        dedup_hold_ms=0.0,
        dedup_claim_budget_ms=2.0,
    )
    stage = NeverStage()
    first: StagesHook = lambda state: [stage, *state.stages]  # noqa: E731
    with LiveBidder(settings, stages=first) as bidder:
        answers = []
        while stage.entered == 0 and len(answers) < 50:
            answers.append(bidder.post(SIMPLE_BANNER))
    assert stage.entered == stage.cancelled == 1
    assert {(a.status, a.reason) for a in answers} <= {(204, "deadline"), (204, "overloaded")}
    assert (answers[-1].status, answers[-1].reason) == (204, "deadline")
