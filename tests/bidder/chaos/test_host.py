"""``bidder.chaos.host``: the machine's wake-up lateness and its summary."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.chaos.host import summarize, wake_lateness

LATENESS = st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=200)
DURATION = st.floats(min_value=0.1, max_value=3600.0)


@given(LATENESS, DURATION)
def test_each_bound_counts_the_wakeups_later_than_it(
    lateness: list[float], duration: float
) -> None:
    summary = summarize(lateness, duration, bounds_ms=(2.0, 8.0))
    assert summary["wakeups"] == len(lateness)
    assert summary["later_than_ms"] == {
        "2": len([x for x in lateness if x > 0.002]),
        "8": len([x for x in lateness if x > 0.008]),
    }


@given(LATENESS, DURATION)
def test_the_rates_per_minute_scale_the_counts(lateness: list[float], duration: float) -> None:
    summary = summarize(lateness, duration)
    counts, rates = summary["later_than_ms"], summary["later_than_ms_per_min"]
    assert isinstance(counts, dict) and isinstance(rates, dict)
    for bound, count in counts.items():
        # Rounded to 2 decimals: off by at most half a hundredth (plus float error).
        assert rates[bound] == pytest.approx(count * 60 / duration, abs=0.005 + 1e-9)


@given(LATENESS)
def test_the_worst_is_the_largest_lateness(lateness: list[float]) -> None:
    worst = summarize(lateness, 1.0)["max_ms"]
    # Rounded to 3 decimals: off by at most half a thousandth (plus float error).
    assert worst == pytest.approx(max(lateness, default=0.0) * 1000, abs=0.0005 + 1e-9)


def test_a_duration_must_be_positive() -> None:
    with pytest.raises(ValueError, match="duration_s"):
        summarize([], 0.0)


def test_wakeups_are_counted_and_never_early() -> None:
    lateness = wake_lateness(0.05, period_s=0.001)
    assert 0 < len(lateness) <= 50
    assert all(late >= 0.0 for late in lateness)
