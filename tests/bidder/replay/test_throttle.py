"""The exchange's response-rate rule (``bidder.replay.throttle``), in virtual time."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.replay.throttle import Throttle, ThrottleRule

RULE = ThrottleRule(threshold=0.85, window_s=2.0, step_s=1.0, min_answers=10, cut=0.5)

events = st.lists(
    st.tuples(st.floats(0, 0.5), st.booleans(), st.integers(0, 30)), min_size=1, max_size=60
)


def _late_step(throttle: Throttle, at_s: float, answers: int = 20) -> None:
    for i in range(answers):
        throttle.record(at_s + i / (10 * answers), on_time=False)


@given(events)
def test_the_share_sent_stays_between_the_floor_and_one(
    steps: list[tuple[float, bool, int]],
) -> None:
    throttle, now = Throttle(RULE), 0.0
    for gap, on_time, count in steps:
        now += gap
        for _ in range(count):
            throttle.record(now, on_time)
        throttle.admit(now)
        assert RULE.floor <= throttle.share <= 1.0


@given(st.lists(st.floats(0, 0.5), min_size=1, max_size=200))
def test_a_bidder_that_answers_in_time_gets_every_request(gaps: list[float]) -> None:
    throttle, now = Throttle(RULE), 0.0
    for gap in gaps:
        now += gap
        throttle.record(now, on_time=True)
        assert throttle.admit(now)
    assert throttle.changes == []


def test_a_share_of_late_answers_below_the_threshold_cuts_the_rate() -> None:
    throttle = Throttle(RULE)
    throttle.admit(0.0)
    for i in range(20):  # 16 of 20 on time: 80% < 85%
        throttle.record(0.5, on_time=i < 16)
    throttle.admit(1.0)
    assert throttle.share == 0.5


def test_too_few_answers_to_judge_cut_nothing() -> None:
    throttle = Throttle(RULE)
    throttle.admit(0.0)
    _late_step(throttle, 0.5, answers=RULE.min_answers - 1)
    throttle.admit(1.0)
    assert throttle.share == 1.0


@given(st.integers(1, 6))
def test_after_lateness_the_rate_comes_back_step_by_step(late_steps: int) -> None:
    throttle = Throttle(RULE)
    for step in range(late_steps):
        throttle.admit(float(step))
        _late_step(throttle, step + 0.5)
    throttle.admit(float(late_steps))
    lowest = throttle.share
    assert lowest == max(RULE.floor, RULE.cut**late_steps)
    shares, step = [lowest], late_steps
    while shares[-1] < 1.0:
        step += 1
        throttle.record(step - 0.5, on_time=True)
        throttle.admit(float(step))
        shares.append(throttle.share)
    assert shares == sorted(shares)
    assert len(shares) - 1 == math.ceil(round((1.0 - lowest) / RULE.restore, 9))


@given(st.integers(1, 2000), st.integers(1, 3))
def test_the_requests_sent_at_a_steady_share_are_that_share(n: int, cuts: int) -> None:
    throttle = Throttle(RULE)
    for step in range(cuts):
        throttle.admit(float(step))
        _late_step(throttle, step + 0.5)
    sent = sum(throttle.admit(cuts + 0.5) for _ in range(n))
    assert abs(sent - n * throttle.share) <= 1


@pytest.mark.parametrize(
    "changes", [{"threshold": 0.0}, {"cut": 1.5}, {"window_s": 0.0}, {"min_answers": 0}]
)
def test_a_bad_rule_is_refused_naming_the_setting(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(changes))):
        ThrottleRule(**changes)  # type: ignore[arg-type]
