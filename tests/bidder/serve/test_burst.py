"""Partner protection live: a 10x burst from one SSP is throttled, the others are not.

A short generated stream in which ``ssp-delta`` sends ten times its usual share is
replayed open-loop through the real supervisor (one worker process: rate limits are
per worker). Every SSP has its own bucket; delta's is its normal rate (40 req/s, a
second of burst), so most of its burst must come back ``204 throttled``. The others'
buckets hold more than they send in the whole stream, so a throttled request from them
could only mean that delta's burst reached their buckets. No reconciler: the test is
about stage 2, and requests that pass it may end in any other no-bid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bidder.bidstream.generator import boost_scale, generate
from bidder.bidstream.stream import read_stream
from bidder.decide.ratelimit import parse_rate_limits
from bidder.replay.replayer import ReplayOptions, replay
from bidder.serve.server import running_bidder
from bidder.serve.settings import Settings
from bidder.stack.child import held_port
from tests.bidder.live import LiveBidder

BOOST = {"ssp-delta": 10.0}
NORMAL_RATE = 400.0
LIMITS = ["ssp-delta=40:40", "ssp-alpha=480:480", "ssp-beta=360:360", "ssp-gamma=240:240"]


@pytest.mark.asyncio
async def test_a_burst_from_one_ssp_is_throttled_while_the_others_are_not(
    bidder_settings: Settings, tmp_path: Path
) -> None:
    stream = tmp_path / "burst.jsonl.gz"
    generate(stream, 1500, seed=11, mean_rate=NORMAL_RATE * boost_scale(BOOST), ssp_boost=BOOST)
    settings = bidder_settings.replace(
        port=held_port(),
        admin_port=0,
        workers=1,
        reconciler=False,
        rate_limits=parse_rate_limits(LIMITS),
        spool_dir=tmp_path / "spool",
    )
    async with running_bidder(settings) as bidder:
        result = await replay(
            list(read_stream(stream)),
            f"{bidder.bid_url}/openrtb2/bid",
            ReplayOptions(deadline_ms=settings.deadline_ms, notices=False),
        )
    delta = result.ssps.pop("ssp-delta")
    assert delta.throttled >= delta.requests // 2
    assert {name: ssp.throttled for name, ssp in result.ssps.items()} == {
        "ssp-alpha": 0,
        "ssp-beta": 0,
        "ssp-gamma": 0,
    }


def test_a_throttled_partner_is_answered_before_its_body_is_read(
    bidder_settings: Settings,
) -> None:
    settings = bidder_settings.replace(
        port=held_port(), reconciler=False, rate_limits=parse_rate_limits(["ssp-x=1:1"])
    )
    with LiveBidder(settings) as bidder:
        first = bidder.post(b"not even json", headers={"X-Ssp": "ssp-x"})
        second = bidder.post(b"not even json", headers={"X-Ssp": "ssp-x"})
        other = bidder.post(b"not even json", headers={"X-Ssp": "ssp-y"})
    # The first is admitted and then refused as invalid; the second never gets that far.
    assert [(a.status, a.reason) for a in (first, second, other)] == [
        (204, "invalid"),
        (204, "throttled"),
        (204, "invalid"),
    ]
