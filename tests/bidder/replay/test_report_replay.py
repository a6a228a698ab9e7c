"""Per-SSP figures as a replay records them, against a stand-in bidder on loopback."""

from __future__ import annotations

import pytest

from bidder.replay.replayer import replay
from tests.bidder.replay.test_replayer import options, records


@pytest.mark.asyncio
async def test_each_request_is_counted_under_the_ssp_it_was_sent_as(bidder):
    kinds = ["bid"] * 2 + ["nobid-throttled"] * 3 + ["boom"]
    result = await replay(records(kinds), bidder.url, options())
    assert {name: ssp.requests for name, ssp in result.ssps.items()} == {
        "bid": 2,
        "nobid-throttled": 3,
        "boom": 1,
    }
    assert result.ssps["nobid-throttled"].throttled == 3
    assert result.ssps["bid"].status[200] == 2
    assert result.ssps["boom"].status[500] == 1


@pytest.mark.asyncio
async def test_per_ssp_latencies_add_up_to_the_overall_histogram(bidder):
    result = await replay(records(["bid", "nobid-geo", "slow"] * 3), bidder.url, options())
    per_ssp = sum(ssp.corrected.get_total_count() for ssp in result.ssps.values())
    assert per_ssp == result.samples == 9


@pytest.mark.asyncio
async def test_a_timeout_is_counted_under_its_ssp(bidder):
    result = await replay(records(["hold", "nobid-geo"]), bidder.url, options(timeout_ms=30))
    assert result.ssps["hold"].timeouts == 1
    assert result.ssps["nobid-geo"].timeouts == 0


@pytest.mark.asyncio
async def test_warmup_requests_are_not_counted_per_ssp(bidder):
    opts = options(rate=None, speed=1.0, warmup_s=0.010)
    result = await replay(records(["nobid-geo"] * 20), bidder.url, opts)
    assert result.ssps["nobid-geo"].requests == result.requests == 10
