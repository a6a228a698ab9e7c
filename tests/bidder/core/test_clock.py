"""The simulated wall clock: one formula every process of a stack agrees on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.clock import ManualClock, SimClockError, SimTime, real_ttl_ms

EPOCH_MS = st.integers(min_value=0, max_value=4_000_000_000_000)
SPEEDS = st.floats(min_value=0.01, max_value=100_000, allow_nan=False)


@given(start=EPOCH_MS, speed=SPEEDS, at=EPOCH_MS)
def test_the_text_form_makes_an_equal_clock(start: int, speed: float, at: int) -> None:
    sim = SimTime(start, float(f"{speed:g}"), at)
    assert SimTime.parse(sim.text, now_ms=0) == sim


@given(start=EPOCH_MS, speed=SPEEDS, at=EPOCH_MS, later=st.integers(0, 10**9))
def test_wall_time_runs_speed_times_real_time_from_the_anchor(
    start: int, speed: float, at: int, later: int
) -> None:
    sim = SimTime(start, speed, at)
    assert sim.wall_at(at) == start
    assert abs(sim.wall_at(at + later) - (start + later * speed)) <= 1


@given(start=EPOCH_MS, speed=SPEEDS, at=EPOCH_MS, before=st.integers(1, 10**9))
def test_before_the_anchor_wall_time_holds_at_the_start(
    start: int, speed: float, at: int, before: int
) -> None:
    assert SimTime(start, speed, at).wall_at(at - before) == start


@given(start=EPOCH_MS, speed=SPEEDS, at=EPOCH_MS, ahead=st.integers(0, 86_400_000))
def test_real_at_inverts_wall_at(start: int, speed: float, at: int, ahead: int) -> None:
    sim = SimTime(start, speed, at)
    float_step = 2 * speed * max(at, 1) * 2**-52  # a real instant is a float of epoch ms
    assert abs(sim.wall_at(sim.real_at(start + ahead)) - (start + ahead)) <= 1 + float_step


def test_the_clock_agrees_with_its_formula_and_keeps_real_monotonic_time() -> None:
    real = ManualClock(start_monotonic=50.0, start_wall_ms=1_000_000)
    clock = SimTime(start_ms=1_767_225_600_000, speed=72.0, at_ms=1_002_000).clock(real)
    assert clock.wall_ms() == 1_767_225_600_000  # 2 s before the anchor: held
    real.advance(3.0)
    assert clock.wall_ms() == 1_767_225_600_000 + 72_000
    assert clock.monotonic() == 53.0  # deadlines and latency stay real
    assert clock.speed == 72.0


def test_a_without_anchor_clock_starts_now() -> None:
    assert SimTime.parse("1767225600000:72", now_ms=123).at_ms == 123


@pytest.mark.parametrize("text", ["", "72", "a:b", "1:2:3:4", "1:0", "1:nan", "1:inf"])
def test_a_malformed_value_is_one_message_naming_the_option(text: str) -> None:
    with pytest.raises(SimClockError, match=r"--sim-clock|speed"):
        SimTime.parse(text, now_ms=0)


@given(lifetime=st.integers(1, 10**9), speed=SPEEDS)
def test_a_real_ttl_lasts_at_least_the_wall_lifetime(lifetime: int, speed: float) -> None:
    clock = SimTime(0, speed, 0).clock(ManualClock())
    ttl = real_ttl_ms(lifetime, clock)
    assert ttl >= 1 and ttl * speed >= lifetime - 1e-6 * lifetime
    assert ttl == 1 or (ttl - 1) * speed < lifetime
