"""The exchange pushes back: a bidder that answers late gets fewer requests, then more.

A live bidder whose first stage is slow (it awaits longer than the replay's tmax) for
the first requests it sees, then fast: the replay's exchange model cuts the share of
requests it sends, withholds some, and gives the share back step by step once the
answers come in time again. Slowness is switched off by the count of requests the
stage saw, not by a clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bidder.bidstream.generator import generate
from bidder.bidstream.stream import StreamRecord, read_stream
from bidder.core.nobid import NoBid
from bidder.pipeline.runner import Context, Stage
from bidder.replay.replayer import ReplayOptions, ReplayResult, replay
from bidder.replay.report import render_table, to_json
from bidder.replay.throttle import ThrottleRule
from bidder.serve.app import BidderState
from bidder.serve.settings import Settings
from tests.bidder.live import LiveBidder

pytestmark = pytest.mark.long(13)

TMAX_MS = 30.0
RULE = ThrottleRule(window_s=1.0, step_s=0.5, min_answers=10, cut=0.5, restore=0.25)


class SlowAtFirst:
    """Awaits twice the replay's tmax for the first ``slow_requests`` requests."""

    def __init__(self, slow_requests: int) -> None:
        self.left = slow_requests

    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        if self.left > 0:
            self.left -= 1
            await asyncio.sleep(2 * TMAX_MS / 1000)
        return None


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[StreamRecord]:
    path: Path = tmp_path_factory.mktemp("pushback") / "stream.jsonl.gz"
    generate(path, 500, seed=21, mean_rate=100)
    return list(read_stream(path))


@contextlib.contextmanager
def _bidder(settings: Settings, first: Stage) -> Iterator[LiveBidder]:
    def hook(state: BidderState) -> Sequence[Stage]:
        return [first, *state.stages]

    with LiveBidder(settings, stages=hook) as bidder:
        yield bidder


def _replay(
    bidder: LiveBidder, records: list[StreamRecord], rule: ThrottleRule | None
) -> ReplayResult:
    url = f"http://{bidder.settings.host}:{bidder.settings.port}/openrtb2/bid"
    options = ReplayOptions(rate=100.0, timeout_ms=TMAX_MS, notices=False, throttle=rule)
    return asyncio.run(replay(records, url, options))


def test_a_slow_bidder_is_throttled_then_recovers(
    bidder_settings: Settings, records: list[StreamRecord]
) -> None:
    with _bidder(bidder_settings, SlowAtFirst(60)) as bidder:
        result = _replay(bidder, records, RULE)
    pushback = result.pushback
    assert pushback.withheld > 0
    assert result.requests + pushback.withheld == len(records)
    assert pushback.min_share <= RULE.cut
    shares = [share for _, share in pushback.changes]
    lowest = shares.index(min(shares))
    # Given back step by step, up to the whole share. The answers after that are on
    # time unless the machine stalls the bidder past tmax, and the rule may then cut
    # again, as it should: the recovery is judged up to the first full share.
    assert 1.0 in shares[lowest:]
    recovered = shares[lowest : shares.index(1.0, lowest) + 1]
    assert recovered == sorted(recovered)
    report = to_json(result)["pushback"]
    assert report["requests_withheld"] == pushback.withheld
    assert "exchange pushback  withheld" in render_table(result)


def test_without_the_rule_every_request_is_sent_to_a_slow_bidder(
    bidder_settings: Settings, records: list[StreamRecord]
) -> None:
    with _bidder(bidder_settings, SlowAtFirst(60)) as bidder:
        result = _replay(bidder, records, None)
    assert (result.requests, result.pushback.withheld) == (len(records), 0)
    assert result.timeouts >= 60
    assert "exchange pushback  off" in render_table(result)
