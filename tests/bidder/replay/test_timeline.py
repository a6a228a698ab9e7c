"""Requests and answers per second: each event in its second, every request counted."""

from __future__ import annotations

import pytest

from bidder.replay.replayer import replay
from bidder.replay.report import to_json
from bidder.replay.timeline import Timeline, timeline_json
from tests.bidder.replay.test_replayer import options, records


def test_events_count_in_the_second_they_fall_in():
    timeline = Timeline()
    for offset_ns in (0, 999_999_999, 1_000_000_000, 3_500_000_000):
        timeline.add("sent", offset_ns)
    timeline.add_answer(204, 2_000_000_000)
    series = timeline_json(timeline, warmup_s=1.0)
    assert series["sent"] == [2, 1, 0, 1]
    assert series["no_bids"] == [0, 0, 1, 0]  # padded to the longest series
    assert series["seconds"] == 4 and series["warmup_s"] == 1.0


def test_answers_other_than_200_and_204_are_errors():
    timeline = Timeline()
    timeline.add_answer(200, 0)
    timeline.add_answer(500, 0)
    timeline.add_answer(302, 0)
    assert (timeline.counts["bids"], timeline.counts["errors"]) == ([1], [2])


@pytest.mark.asyncio
async def test_a_replay_counts_every_request_and_answer_warm_up_included(bidder):
    # Answers come within milliseconds and holds never: a timeout far above the first
    # keeps a loaded machine from turning an answer into a timeout.
    opts = options(rate=None, speed=1.0, warmup_s=0.010, timeout_ms=500)
    kinds = ["bid", "nobid-geo", "boom", "hold"] * 5
    result = await replay(records(kinds), bidder.url, opts)
    series = to_json(result)["timeline"]
    assert sum(series["sent"]) == result.requests + result.warmup_requests == 20
    assert (sum(series["bids"]), sum(series["no_bids"])) == (5, 5)
    assert (sum(series["errors"]), sum(series["timeouts"])) == (5, 5)
