"""ids.snowflake: layout, ordering, exhaustion, clock steps back, lease validity."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.clock import ManualClock
from ids import bid_id_source
from ids.snowflake import (
    EPOCH_MS,
    MAX_SEQUENCE,
    MAX_WORKER,
    ClockMovedBackwards,
    LeaseLost,
    Snowflake,
    compose,
    decode,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _generator(clock: ManualClock, worker: int | None = 5, **kwargs: object) -> Snowflake:
    return Snowflake(clock, worker, pause=lambda: clock.advance(0.001), **kwargs)  # type: ignore[arg-type]


def test_epoch_is_2024_01_01_utc() -> None:
    assert datetime.fromtimestamp(EPOCH_MS / 1000, UTC) == datetime(2024, 1, 1, tzinfo=UTC)


@given(
    time_ms=st.integers(EPOCH_MS, EPOCH_MS + (1 << 41) - 1),
    worker=st.integers(0, MAX_WORKER),
    sequence=st.integers(0, MAX_SEQUENCE),
)
def test_decode_returns_what_compose_packed(time_ms: int, worker: int, sequence: int) -> None:
    assert tuple(decode(compose(time_ms, worker, sequence))) == (time_ms, worker, sequence)


@given(worker=st.integers(0, MAX_WORKER), sequence=st.integers(0, MAX_SEQUENCE))
def test_ids_are_positive_signed_64_bit_integers(worker: int, sequence: int) -> None:
    assert 0 <= compose(EPOCH_MS + (1 << 41) - 1, worker, sequence) < 1 << 63


@pytest.mark.parametrize(
    ("time_ms", "worker", "sequence"),
    [(EPOCH_MS - 1, 0, 0), (EPOCH_MS, MAX_WORKER + 1, 0), (EPOCH_MS, 0, MAX_SEQUENCE + 1)],
)
def test_compose_refuses_out_of_range_parts(time_ms: int, worker: int, sequence: int) -> None:
    with pytest.raises(ValueError, match=r"range|must be"):
        compose(time_ms, worker, sequence)


@pytest.mark.parametrize("value", [-1, 1 << 63])
def test_decode_refuses_what_is_not_a_snowflake(value: int) -> None:
    with pytest.raises(ValueError, match="not a 63-bit"):
        decode(value)


def test_id_carries_the_clock_time_and_the_worker() -> None:
    clock = ManualClock(start_wall_ms=T0)
    assert decode(_generator(clock, worker=77).next_id()) == (T0, 77, 0)


def test_ids_in_one_millisecond_take_successive_sequence_numbers() -> None:
    generator = _generator(ManualClock(start_wall_ms=T0))
    assert [decode(generator.next_id()).sequence for _ in range(4)] == [0, 1, 2, 3]


def test_a_new_millisecond_restarts_the_sequence() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock)
    generator.next_id(), generator.next_id()
    clock.advance(0.001)
    assert decode(generator.next_id())[::2] == (T0 + 1, 0)


def test_an_exhausted_millisecond_waits_for_the_next() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock)
    for _ in range(MAX_SEQUENCE + 1):
        generator.next_id()
    assert decode(generator.next_id())[::2] == (T0 + 1, 0)


def test_a_50_ms_step_back_yields_no_duplicate_and_stays_increasing() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock, max_backwards_ms=100)
    ids: list[int] = []
    for step in range(400):
        ids.extend(generator.next_id() for _ in range(100))
        clock.set_wall_ms(clock.wall_ms() - 50 if step == 200 else clock.wall_ms() + 1)
    assert len(set(ids)) == len(ids)
    assert all(a < b for a, b in itertools.pairwise(ids))


def test_ids_issued_while_behind_stay_in_the_last_millisecond() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock)
    generator.next_id()
    clock.set_wall_ms(T0 - 50)
    assert decode(generator.next_id())[::2] == (T0, 1)


def test_a_step_back_past_the_bound_is_refused() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock, max_backwards_ms=100)
    generator.next_id()
    clock.set_wall_ms(T0 - 101)
    with pytest.raises(ClockMovedBackwards, match="101 ms behind"):
        generator.next_id()


def test_ids_resume_once_the_clock_has_caught_up() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock, max_backwards_ms=100)
    first = generator.next_id()
    clock.set_wall_ms(T0 - 500)
    with pytest.raises(ClockMovedBackwards):
        generator.next_id()
    clock.set_wall_ms(T0 + 1)
    assert generator.next_id() > first


def test_each_step_back_is_reported_once() -> None:
    seen: list[bool] = []
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock, max_backwards_ms=100, on_backwards=seen.append)
    generator.next_id()
    clock.set_wall_ms(T0 - 20)
    for _ in range(10):
        generator.next_id()
    clock.set_wall_ms(T0 - 300)
    for _ in range(3):
        with pytest.raises(ClockMovedBackwards):
            generator.next_id()
    assert seen == [False]  # the refusal happened while still behind the same ms


def test_a_refused_step_back_is_reported_as_refused() -> None:
    seen: list[bool] = []
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock, max_backwards_ms=100, on_backwards=seen.append)
    generator.next_id()
    clock.set_wall_ms(T0 - 300)
    with pytest.raises(ClockMovedBackwards):
        generator.next_id()
    assert seen == [True]


def test_a_generator_without_a_worker_id_issues_nothing() -> None:
    with pytest.raises(LeaseLost):
        Snowflake(ManualClock()).next_id()


def test_revoke_stops_ids_at_once() -> None:
    generator = _generator(ManualClock(start_wall_ms=T0))
    generator.next_id()
    generator.revoke()
    with pytest.raises(LeaseLost):
        generator.next_id()


def test_no_id_is_issued_at_or_past_valid_until() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = Snowflake(clock)
    generator.grant(3, valid_until_ms=T0 + 10)
    clock.advance(0.009)
    generator.next_id()
    clock.advance(0.001)
    with pytest.raises(LeaseLost):
        generator.next_id()


def test_extend_keeps_the_worker_id_valid_longer() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = Snowflake(clock)
    generator.grant(3, valid_until_ms=T0 + 10)
    generator.extend(T0 + 20)
    clock.advance(0.015)
    assert decode(generator.next_id()).time_ms == T0 + 15


def test_ids_start_after_the_previous_holders_high_water_mark() -> None:
    clock = ManualClock(start_wall_ms=T0)
    generator = _generator(clock, worker=None)
    generator.grant(3, valid_until_ms=T0 + 10_000, not_before_ms=T0 + 2)
    assert decode(generator.next_id()).time_ms == T0 + 3


def test_bid_ids_are_distinct_strings() -> None:
    next_bid_id = bid_id_source()
    ids = [next_bid_id() for _ in range(1000)]
    assert len(set(ids)) == 1000 and all(isinstance(i, str) for i in ids)
