"""The hold on grants while the spend stream lags: pure decisions over lag sequences."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacing.reconcile import PacingConfig
from pacing.stream_lag import LagGate, applied_through_ms, holds

THRESHOLD_MS = 10_000
lags = st.lists(st.integers(0, 60_000), max_size=40)


@given(lags)
def test_no_tick_grants_while_the_lag_is_above_the_threshold(sequence: list[int]) -> None:
    gate = LagGate(THRESHOLD_MS)
    for lag_ms in sequence:
        decision = gate.observe(lag_ms)
        if lag_ms > THRESHOLD_MS:
            assert decision.hold


@given(lags)
def test_every_tick_grants_once_the_lag_is_at_most_half_the_threshold(sequence: list[int]) -> None:
    gate = LagGate(THRESHOLD_MS)
    for lag_ms in sequence:
        decision = gate.observe(lag_ms)
        if lag_ms <= THRESHOLD_MS // 2:
            assert not decision.hold


@given(lags)
def test_between_half_and_the_threshold_the_last_decision_stands(sequence: list[int]) -> None:
    gate, before = LagGate(THRESHOLD_MS), False
    for lag_ms in sequence:
        decision = gate.observe(lag_ms)
        if THRESHOLD_MS // 2 < lag_ms <= THRESHOLD_MS:
            assert decision.hold == before
        before = decision.hold


@given(lags)
def test_holds_start_and_clear_in_turn(sequence: list[int]) -> None:
    gate, edges = LagGate(THRESHOLD_MS), []
    for lag_ms in sequence:
        decision = gate.observe(lag_ms)
        assert not (decision.started and decision.cleared)
        if decision.started or decision.cleared:
            edges.append(decision.started)
    assert edges == [i % 2 == 0 for i in range(len(edges))]


def test_a_healthy_stream_never_holds() -> None:
    gate = LagGate(PacingConfig().lag_threshold_ms)
    assert not any(gate.observe(lag_ms).hold for lag_ms in (0, 3, 250, 4_999, 10_000, 0))


def test_the_default_threshold_is_ten_seconds_of_lag() -> None:
    assert PacingConfig().lag_threshold_ms == 10_000
    assert holds(False, 10_001, 10_000) and not holds(False, 10_000, 10_000)
    assert holds(True, 5_001, 10_000) and not holds(True, 5_000, 10_000)


def test_a_threshold_below_one_ms_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 ms"):
        LagGate(0)
    assert PacingConfig(lag_threshold_s=0.0).problems() == [
        "lag_threshold_s must be at least 0.001, got 0.0"
    ]


def test_the_watermark_is_the_reads_start_less_the_lag_and_the_producers_delay() -> None:
    assert applied_through_ms(100_000, 2_500, 1_000) == 96_500
    assert applied_through_ms(100_000, 0, 0) == 100_000
