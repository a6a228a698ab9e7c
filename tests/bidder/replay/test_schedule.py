"""Properties of the intended send schedule (pure: no clock, no I/O)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.stream import StreamRecord
from bidder.replay.schedule import Pacing, loop_period_ms, schedule

pytestmark = pytest.mark.pure

gaps = st.lists(st.integers(min_value=0, max_value=5_000), min_size=0, max_size=60)
speeds = st.floats(min_value=0.01, max_value=1_000, allow_nan=False)
rates = st.floats(min_value=0.5, max_value=100_000, allow_nan=False)
durations = st.floats(min_value=0.001, max_value=30, allow_nan=False)


def stream(gap_list: list[int], start: int = 0) -> list[StreamRecord]:
    t, records = start, []
    for i, gap in enumerate(gap_list):
        t += gap
        records.append(
            StreamRecord(t_ms=t, ts=1_767_225_600_000 + t, ssp=f"ssp-{i % 3}", body=b"{}")
        )
    return records


def offsets(records: list[StreamRecord], pacing: Pacing, limit: int = 2_000) -> list[float]:
    result = []
    for offset, _ in schedule(records, pacing):
        result.append(offset)
        if len(result) >= limit:
            break
    return result


@given(gaps, speeds, st.one_of(st.none(), rates), st.one_of(st.none(), durations))
def test_offsets_never_decrease(gap_list, speed, rate, duration):
    sent = offsets(stream(gap_list), Pacing(speed=speed, rate=rate, duration_s=duration))
    assert all(a <= b for a, b in itertools.pairwise(sent))


@given(gaps, speeds)
def test_speed_scales_recorded_offsets(gap_list, speed):
    records = stream(gap_list, start=7)
    sent = offsets(records, Pacing(speed=speed))
    assert sent == pytest.approx([r.t_ms / speed / 1000 for r in records], rel=1e-12, abs=1e-12)


@given(gaps, rates)
def test_rate_spaces_requests_evenly_ignoring_recorded_gaps(gap_list, rate):
    sent = offsets(stream(gap_list), Pacing(rate=rate))
    assert sent == pytest.approx([i / rate for i in range(len(gap_list))], rel=1e-12, abs=1e-12)


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=20),
    st.floats(min_value=0.5, max_value=1_000),
    st.floats(min_value=0.001, max_value=2),
)
def test_rate_with_duration_loops_the_stream_until_the_cut(gap_list, rate, duration):
    records = stream(gap_list)
    sent = list(schedule(records, Pacing(rate=rate, duration_s=duration)))
    expected = math.ceil(duration * rate)
    assert all(offset < duration for offset, _ in sent)
    assert abs(len(sent) - expected) <= 1  # float edge at the boundary
    assert [record for _, record in sent] == [records[i % len(records)] for i in range(len(sent))]


@given(gaps, speeds, durations)
def test_duration_cuts_everything_at_or_after_it(gap_list, speed, duration):
    sent = offsets(stream(gap_list), Pacing(speed=speed, duration_s=duration))
    assert all(offset < duration for offset in sent)


def test_speed_loop_starts_one_mean_gap_after_the_last_record():
    records = stream([0, 10, 10, 10])  # t = 0, 10, 20, 30: mean gap 10 ms
    sent = offsets(records, Pacing(speed=2.0, duration_s=0.05))
    # period 40 ms at speed 2 -> 20 ms of replay per pass
    assert sent == pytest.approx([0, 0.005, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.045])


def test_one_shot_iterator_loops_like_a_list():
    records = stream([0, 3, 4, 1])
    pacing = Pacing(speed=1.0, duration_s=0.1)
    assert list(schedule(iter(records), pacing)) == list(schedule(records, pacing))


def test_stream_without_a_rate_is_not_looped():
    single = stream([5])
    assert offsets(single, Pacing(duration_s=10)) == [0.005]
    same_instant = stream([5, 0, 0])
    assert len(offsets(same_instant, Pacing(duration_s=10))) == 3


def test_empty_stream_with_duration_ends():
    assert offsets([], Pacing(duration_s=10)) == []
    assert offsets([], Pacing(rate=100, duration_s=10)) == []


def test_loop_period_keeps_the_average_rate():
    assert loop_period_ms(0, 30, 4) == 40
    assert loop_period_ms(5, 5, 3) is None
    assert loop_period_ms(0, 100, 1) is None


@pytest.mark.parametrize(
    "kwargs",
    [{"speed": 0}, {"speed": -1}, {"rate": 0}, {"duration_s": math.nan}, {"speed": math.inf}],
)
def test_pacing_rejects_non_positive_or_non_finite_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Pacing(**kwargs)
