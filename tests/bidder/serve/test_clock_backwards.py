"""The bid path when the id generator finds the clock behind its last id.

The step back is made by a stage placed last in the pipeline: it tells the generator
(as a lease grant's ``not_before_ms`` does) that ids were issued up to ``step_ms``
ahead of the wall clock, right before the response asks for the bid's id, so the
clock is behind by the step whatever the machine's speed. Each test starts its own
bidder on a Valkey of its own: a step of seconds leaves the generator unable to issue
ids until the clock catches up, and the worker lease it gives back says so, which would
hold the next bidder to take that worker id on a shared server to the same wait.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import pytest

from bidder.core.nobid import NoBid
from bidder.pipeline.runner import Context, Stage
from bidder.serve.app import BidderState
from bidder.serve.settings import Settings
from bidder.stack.local import LocalStack
from ids.snowflake import decode
from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import LiveBidder
from tests.bidder.openrtb_checks import with_fresh_user
from tests.published import sample

SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()
TOLERATED_STEP_MS = 50
REFUSED_STEP_MS = 10_000


class ClockStep:
    """A stage that, when armed, moves the generator's last id ``step_ms`` ahead of now."""

    def __init__(self) -> None:
        self.state: BidderState | None = None
        self.step_ms: int | None = None
        self.stepped_to_ms: int | None = None

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        if self.step_ms is not None and self.state is not None:
            ids, worker = self.state.ids, self.state.ids.worker
            assert worker is not None
            self.stepped_to_ms = self.state.clock.wall_ms() + self.step_ms
            ids.grant(worker, self.stepped_to_ms + 1_000, not_before_ms=self.stepped_to_ms)
            self.step_ms = None
        return None


@pytest.fixture
def stepping_bidder(bidder_settings: Settings) -> Iterator[tuple[LiveBidder, ClockStep]]:
    # The tolerated step holds the loop while the generator waits out its 50 ms: a
    # generous deadline keeps that wait from turning the bid into a ``deadline`` no-bid.
    settings = replace(bidder_settings, deadline_ms=1000.0)
    step = ClockStep()

    def last(state: BidderState) -> Sequence[Stage]:
        step.state = state
        return [*state.stages, step]

    with LocalStack(aws_endpoint=settings.aws_endpoint) as stack:
        settings = replace(settings, valkey_url=stack.valkey_url)
        with LiveBidder(settings, stages=last) as bidder:
            yield bidder, step


def _bid_id(bidder: LiveBidder) -> int:
    assert bidder.state is not None
    answer = bidder.post(with_fresh_user(SIMPLE_BANNER))
    assert answer.status == 200, (answer.status, answer.reason)
    bid: dict[str, Any] = orjson.loads(answer.body)["seatbid"][0]["bid"][0]
    token = dict(parse_qsl(urlsplit(bid["nurl"]).query))["t"]
    return bidder.state.signer.verify(token).bid_id


def _backwards(action: str) -> float:
    return sample("bidsim_clock_backwards_total", {"action": action})


def test_a_step_back_within_the_bound_still_bids_with_a_later_id(
    stepping_bidder: tuple[LiveBidder, ClockStep],
) -> None:
    bidder, step = stepping_bidder
    assert bidder.settings.id_max_backwards_ms > TOLERATED_STEP_MS
    before_id = _bid_id(bidder)
    tolerated, refused = _backwards("tolerated"), _backwards("refused")
    step.step_ms = TOLERATED_STEP_MS
    after_id = _bid_id(bidder)
    assert step.stepped_to_ms is not None
    assert after_id > before_id
    # Never in a millisecond the generator was told ids may already have used.
    assert decode(after_id).time_ms > step.stepped_to_ms
    assert (_backwards("tolerated"), _backwards("refused")) == (tolerated + 1, refused)


def test_a_step_back_past_the_bound_is_a_204_ids_unavailable_not_a_bug(
    stepping_bidder: tuple[LiveBidder, ClockStep],
) -> None:
    bidder, step = stepping_bidder
    assert bidder.settings.id_max_backwards_ms < REFUSED_STEP_MS
    _bid_id(bidder)
    refused = _backwards("refused")
    unavailable = sample("bidsim_ids_unavailable_total")
    bugs = sample("bidsim_internal_errors_total")
    step.step_ms = REFUSED_STEP_MS
    answer = bidder.post(with_fresh_user(SIMPLE_BANNER))
    assert (answer.status, answer.reason, answer.body) == (204, "ids_unavailable", b"")
    assert _backwards("refused") == refused + 1
    # Answered as "no id", not caught as a bug in the bid path.
    assert sample("bidsim_ids_unavailable_total") == unavailable + 1
    assert sample("bidsim_internal_errors_total") == bugs
