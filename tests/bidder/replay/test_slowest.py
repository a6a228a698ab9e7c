"""The slowest answers, explained by the bidder's per-stage times.

Pure parts (the header, the sample, the kept answers) with hypothesis; then a live
bidder with one stage made slow for every tenth request it sees: the replay's slowest
answers are those, and their slowest step is that stage.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.stream import StreamRecord
from bidder.core.nobid import NoBid
from bidder.pipeline.runner import Context, Stage
from bidder.pipeline.stage_times import StageTimes, parse_header
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import render_table, to_json
from bidder.replay.slowest import SlowestAnswers, asks_for_times
from bidder.serve.app import BidderState
from bidder.serve.settings import Settings
from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import LiveBidder

pytestmark = pytest.mark.long(8)

SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()
names = st.from_regex(r"[A-Za-z_]{1,20}", fullmatch=True)


@given(st.lists(st.tuples(names, st.integers(0, 10**9))))
def test_the_header_gives_back_each_step_in_order(spans: list[tuple[str, int]]) -> None:
    times = StageTimes(spans=list(spans))
    parsed = parse_header(times.header()) if spans else []
    assert [name for name, _ in parsed] == [name for name, _ in spans]
    assert all(abs(us - ns / 1000) <= 0.051 for (_, us), (_, ns) in zip(parsed, spans, strict=True))


@given(st.text(max_size=80))
def test_any_header_parses_to_steps_or_nothing(value: str) -> None:
    assert all(isinstance(us, float) for _, us in parse_header(value))


@given(st.integers(1, 5000), st.floats(0.0, 1.0))
def test_the_requests_that_ask_are_the_share_asked_for(n: int, share: float) -> None:
    asked = sum(asks_for_times(seq, share) for seq in range(n))
    assert abs(asked - n * share) <= 3


@given(st.lists(st.integers(0, 10**6), max_size=100), st.integers(0, 10))
def test_the_slowest_answers_kept_are_the_slowest(latencies: list[int], keep: int) -> None:
    slowest = SlowestAnswers(keep=keep)
    for seq, us in enumerate(latencies):
        slowest.offer(us, b'{"id": "r%d"}' % seq, "ssp", "bid", "read=1.0", seq)
    kept = [answer.corrected_us for answer in slowest.slowest_first()]
    assert kept == sorted(latencies, reverse=True)[:keep]
    assert slowest.timed == len(latencies)


SLOW_S = 0.1
"""What ``SlowEveryTenth`` adds: far longer than a stall of the worker's loop on a busy
machine, which lands in whichever stage is awaiting at that moment."""


class SlowEveryTenth:
    """Awaits ``SLOW_S`` on every tenth request it sees."""

    def __init__(self) -> None:
        self.seen = 0

    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        self.seen += 1
        if self.seen % 10 == 0:
            await asyncio.sleep(SLOW_S)
        return None


@contextlib.contextmanager
def _bidder(settings: Settings) -> Iterator[LiveBidder]:
    def hook(state: BidderState) -> Sequence[Stage]:
        return [SlowEveryTenth(), *state.stages]

    with LiveBidder(settings, stages=hook) as bidder:
        yield bidder


def _records(n: int) -> list[StreamRecord]:
    doc = orjson.loads(SIMPLE_BANNER)
    return [
        StreamRecord(
            t_ms=i, ts=1_767_225_600_000 + i, ssp="s1", body=orjson.dumps({**doc, "id": f"r{i}"})
        )
        for i in range(n)
    ]


def test_a_request_that_asks_gets_its_stage_times(bidder_settings: Settings) -> None:
    with _bidder(bidder_settings) as bidder:
        asked = bidder.post(SIMPLE_BANNER, {"X-Stage-Times": "1"})
        plain = bidder.post(SIMPLE_BANNER)
    steps = [name for name, _ in parse_header(asked.headers["x-stage-times"])]
    assert steps[0] == "read" and "SlowEveryTenth" in steps
    assert "x-stage-times" not in plain.headers


def test_the_slowest_answers_name_the_slow_stage(bidder_settings: Settings) -> None:
    records = _records(100)
    with _bidder(bidder_settings) as bidder:
        url = f"http://{bidder.settings.host}:{bidder.settings.port}/openrtb2/bid"
        # Connections opened as needed, not one per request: 100 requests against a
        # spread of 128 would each pay a connection set-up to the one worker.
        options = ReplayOptions(
            rate=200.0, notices=False, stage_times=1.0, connections=1, timeout_ms=1000.0
        )
        result = asyncio.run(replay(records, url, options))
    report = to_json(result)["slowest_answers"]
    assert report["timed_answers"] == 100
    # Every slowed request is among the slowest kept, named by its stage; on a busy
    # machine an unslowed one may queue as long, and it names no stage near SLOW_S (the
    # loop's timers fire to the millisecond).
    answers = report["answers"]
    assert {a["request_id"] for a in answers} <= {f"r{i}" for i in range(100)}
    slowed = [a for a in answers if a["stages_us"].get("SlowEveryTenth", 0) >= 0.75e6 * SLOW_S]
    assert len(slowed) == 10
    for answer in slowed:
        stages = answer["stages_us"]
        assert max(stages, key=stages.get) == "SlowEveryTenth"
    assert "slowest answers" in render_table(result)


def test_without_asking_no_answer_carries_stage_times(bidder_settings: Settings) -> None:
    with _bidder(bidder_settings) as bidder:
        url = f"http://{bidder.settings.host}:{bidder.settings.port}/openrtb2/bid"
        result = asyncio.run(replay(_records(20), url, ReplayOptions(rate=200.0, notices=False)))
    assert to_json(result)["slowest_answers"] == {"timed_answers": 0, "answers": []}


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_share_outside_0_1_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="stage_times"):
        ReplayOptions(stage_times=share)


def test_a_negative_count_of_slowest_answers_is_refused() -> None:
    with pytest.raises(ValueError, match="slowest"):
        ReplayOptions(slowest=-1)
