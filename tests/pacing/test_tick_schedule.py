"""When the reconciler ticks next: on cadence, skipping missed ticks, retrying failures soon."""

from __future__ import annotations

import threading

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import SlotNotCoveredError

from pacing.reconciler import RETRY_FRACTION, next_tick_at, run_reconciler

ticks = st.floats(min_value=0.05, max_value=60.0)
times = st.floats(min_value=0.0, max_value=1e6)


def test_a_tick_that_ran_in_time_keeps_the_cadence() -> None:
    assert next_tick_at(scheduled=10.0, now=10.3, tick_s=5.0, failed=False) == 15.0


def test_missed_ticks_are_skipped_not_burst() -> None:
    assert next_tick_at(scheduled=10.0, now=27.0, tick_s=5.0, failed=False) == 30.0


def test_a_failed_tick_is_retried_within_a_quarter_tick() -> None:
    assert next_tick_at(scheduled=10.0, now=10.5, tick_s=2.0, failed=True) == 11.0


@given(scheduled=times, lag=st.floats(min_value=0.0, max_value=1e4), tick=ticks)
def test_the_next_tick_is_never_in_the_past_and_at_most_one_tick_ahead(
    scheduled: float, lag: float, tick: float
) -> None:
    now = scheduled + lag
    nxt = next_tick_at(scheduled, now, tick, failed=False)
    assert now - 1e-6 <= nxt <= now + tick + 1e-6


@given(scheduled=times, lag=st.floats(min_value=0.0, max_value=1e4), tick=ticks)
def test_a_retry_comes_sooner_than_the_next_regular_tick_would(
    scheduled: float, lag: float, tick: float
) -> None:
    now = scheduled + lag
    retry = next_tick_at(scheduled, now, tick, failed=True)
    assert retry == now + RETRY_FRACTION * tick
    assert retry < now + tick


class _FailsOnce:
    """A reconciler whose first tick fails with ``error``; the second stops the loop."""

    def __init__(self, error: Exception, stop: threading.Event) -> None:
        self.error, self.stop, self.ticks = error, stop, 0

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks == 1:
            raise self.error
        self.stop.set()


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError("valkey down"),
        SlotNotCoveredError('Slot "9217" not covered by the cluster'),  # no RedisError
        TimeoutError("read timed out"),
    ],
)
def test_a_tick_failed_by_valkey_is_retried_not_fatal(error: Exception) -> None:
    stop = threading.Event()
    reconciler = _FailsOnce(error, stop)
    run_reconciler(reconciler, 0.01, stop)  # type: ignore[arg-type]
    assert reconciler.ticks == 2
