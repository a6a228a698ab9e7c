"""The stream's own clock, and which bidders a replay on it accepts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.stream import StreamRecord
from bidder.core.clock import SimTime
from bidder.replay.stream_clock import (
    ClockFit,
    StreamClock,
    clock_problem,
    target_problem,
)

pytestmark = pytest.mark.pure

DAY0 = 1_767_225_600_000
NOW = 1_800_000_000_000


def _line(t_ms: int, ts: int) -> StreamRecord:
    return StreamRecord(t_ms=t_ms, ts=ts, ssp="ssp-alpha", body=b"{}")


@given(
    offsets=st.lists(st.integers(0, 1_200_000), min_size=2, max_size=50, unique=True),
    ratio=st.sampled_from([1, 12, 72, 288]),
    speed=st.sampled_from([0.5, 1.0, 4.0]),
)
def test_each_line_arrives_at_its_ts_on_a_constant_ratio_stream(
    offsets: list[int], ratio: int, speed: float
) -> None:
    lines = [_line(t, DAY0 + t * ratio) for t in sorted(offsets)]
    clock = ClockFit.of(lines).clock(speed)
    assert clock is not None and abs(clock.speed - ratio * speed) < 1e-6 * ratio * speed
    sim = clock.at(NOW)
    for line in lines:  # sent at t_ms / speed real ms after the start
        assert abs(sim.wall_at(NOW + line.t_ms / speed) - line.ts) <= 2


def test_a_stream_whose_times_do_not_advance_has_no_clock() -> None:
    assert ClockFit.of([_line(0, DAY0)]).clock(1.0) is None
    assert ClockFit.of([_line(0, DAY0), _line(0, DAY0)]).clock(1.0) is None
    assert ClockFit.of([_line(0, DAY0), _line(10, DAY0)]).clock(1.0) is None


def test_a_clock_too_fast_for_the_pacing_tick_is_refused_naming_the_options() -> None:
    assert clock_problem(StreamClock(DAY0, 72.0), pacing_tick_s=5.0) is None
    problem = clock_problem(StreamClock(DAY0, 5758.0), pacing_tick_s=5.0)
    assert problem is not None and "--pacing-tick-s 0.625" in problem and "--clock real" in problem


def test_a_stream_before_the_bid_ids_epoch_is_refused() -> None:
    problem = clock_problem(StreamClock(1_370_476_800_000, 1.0), pacing_tick_s=5.0)
    assert problem is not None and "epoch" in problem


def test_a_target_on_the_streams_clock_starting_later_is_taken() -> None:
    wanted = StreamClock(DAY0, 72.0)
    assert target_problem(wanted, SimTime(DAY0 + 200, 72.0, NOW + 5_000), NOW) is None


def test_a_target_on_another_clock_is_refused_with_the_value_to_start_it_with() -> None:
    wanted = StreamClock(DAY0, 72.0)
    cases = {
        "real clock": None,
        "runs 36x": SimTime(DAY0, 36.0, NOW),
        "starts at": SimTime(DAY0 + 86_400_000, 72.0, NOW),
        "started 60.0 s ago": SimTime(DAY0, 72.0, NOW - 60_000),
    }
    for words, target in cases.items():
        problem = target_problem(wanted, target, NOW)
        assert problem is not None and words in problem
        assert f"--sim-clock {DAY0}:72:AT_MS" in problem


def test_a_real_clock_replay_refuses_a_simulated_target_only() -> None:
    assert target_problem(None, None, NOW) is None
    assert target_problem(None, SimTime(DAY0, 72.0, NOW), NOW) is not None


@given(
    lines=st.lists(
        st.tuples(st.integers(0, 10_000_000), st.integers(-3_600_000, 3_600_000)),
        min_size=2,
        max_size=60,
    )
)
def test_the_running_fit_is_the_least_squares_line(lines: list[tuple[int, int]]) -> None:
    """Fed one line at a time, the fit matches the two-pass least squares over all of them."""
    records = [_line(t, DAY0 + 72 * t + wander) for t, wander in sorted(lines)]
    fit = ClockFit()
    for record in records:
        fit.add(record.t_ms, record.ts)
    n = len(records)
    mean_t = sum(r.t_ms for r in records) / n
    mean_ts = sum(r.ts for r in records) / n
    var = sum((r.t_ms - mean_t) ** 2 for r in records)
    cov = sum((r.t_ms - mean_t) * (r.ts - mean_ts) for r in records)
    clock = fit.clock(1.0)
    if var <= 0 or cov <= 0:
        assert clock is None
        return
    assert clock is not None
    assert abs(clock.speed - cov / var) <= 1e-9 * abs(cov / var)
    assert abs(clock.start_ms - (mean_ts - cov / var * mean_t)) <= 1.0
