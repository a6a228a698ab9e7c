"""Acceptance on the standard scenario: $10,000, 50 nodes, 5 s ticks, standard curve, seed 1."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacing.reconcile import PacingConfig
from pacing.report import day_report, tracking
from pacing.simulate import Scenario, admitted_share, run, seen_spend, window

pytestmark = pytest.mark.pure


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return day_report(Scenario())


def test_end_of_day_spend_is_98_to_100_percent(report: dict[str, Any]) -> None:
    assert 0.98 <= report["eod_spend_ratio"] <= 1.0
    assert report["over_budget_micros"] == 0


def test_cumulative_spend_is_within_3_percent_every_hour(report: dict[str, Any]) -> None:
    assert report["max_cum_error_ratio"] <= 0.03


def test_hourly_spend_is_in_band_in_90_percent_of_hours(report: dict[str, Any]) -> None:
    assert report["hours_in_band_ratio"] >= 0.90


def test_back_in_band_within_30_steps_after_a_50_percent_supply_step(
    report: dict[str, Any],
) -> None:
    assert report["step_up_steps"] is not None and report["step_up_steps"] <= 30
    assert report["step_down_steps"] is not None and report["step_down_steps"] <= 30


def test_a_late_tick_overspends_at_most_nodes_times_chunk(report: dict[str, Any]) -> None:
    assert 0 < report["late_tick_overspend_micros"] <= 50 * report["chunk_micros"]


def test_a_stalled_reconciler_overspends_at_most_two_chunks_per_node_then_stops(
    report: dict[str, Any],
) -> None:
    assert 0 < report["stall_overspend_chunks_per_node"] <= 2.0
    assert report["stall_spend_stopped_after_s"] <= 2 * 5.0


def test_the_breaker_pauses_a_runaway_within_60_simulated_seconds(
    report: dict[str, Any],
) -> None:
    assert report["breaker_seconds"] is not None and report["breaker_seconds"] <= 60.0


def test_the_asap_baseline_runs_out_early(report: dict[str, Any]) -> None:
    assert report["asap_eod_hour"] is not None and report["asap_eod_hour"] < 20.0
    assert report["asap_max_cum_error_ratio"] > report["max_cum_error_ratio"]


def test_the_invariant_holds_all_day(report: dict[str, Any]) -> None:
    assert report["invariant_violations"] == 0


def test_same_seed_same_day() -> None:
    sc = window(Scenario(), 43_200.0, 600.0, 600.0)
    assert run(sc).spend.tolist() == run(sc).spend.tolist()
    assert run(sc).spend.tolist() != run(replace(sc, seed=2)).spend.tolist()


def test_a_lease_below_one_impression_at_the_maximum_bid_never_spends() -> None:
    sc = window(Scenario(), 43_200.0, 600.0, 600.0)
    assert run(replace(sc, max_cost_micros=sc.chunk + 1)).spend.sum() == 0
    assert run(replace(sc, max_cost_micros=sc.chunk)).spend.sum() > 0


def test_the_bid_time_bound_leaves_less_than_one_maximum_cost_per_node_unspent() -> None:
    """Two nodes, chunks of a quarter of the budget per node: leases run out at the end."""
    base = Scenario(
        budget_micros=200_000, nodes=2, supply_ratio=2.5,
        config=PacingConfig(tick_s=720.0, chunk_periods_per_day=4, breaker_window_s=86_400.0),
    )  # fmt: skip
    free = tracking(run(base))["eod_spend_micros"]
    for max_cost in (5_000, 12_000, 20_000):
        bound = tracking(run(replace(base, max_cost_micros=max_cost)))["eod_spend_micros"]
        assert free - 2 * max_cost < bound < free


def _end_of_budget(nodes: int, lag_ticks: float, seed: int) -> Scenario:
    """Nodes bidding only while their lease covers one impression at the maximum, the
    budget binding at the end of the day, the reconciler ``lag_ticks`` behind the spend."""
    return Scenario(
        budget_micros=200_000, nodes=nodes, supply_ratio=2.5, seed=seed, max_cost_micros=12_000,
        config=PacingConfig(tick_s=720.0, chunk_periods_per_day=4, breaker_window_s=86_400.0),
        ledger_lag_ticks=lag_ticks,
    )  # fmt: skip


@pytest.mark.parametrize("lag_ticks", [0.5, 1, 2])
def test_a_day_with_the_ledger_behind_ends_within_its_budget(lag_ticks: float) -> None:
    for nodes, seed in ((2, 1), (2, 2), (3, 1), (4, 1)):
        trace = run(_end_of_budget(nodes, lag_ticks, seed))
        assert int(trace.cum[-1]) <= 200_000
        assert trace.violations == []


def test_a_tick_sees_the_spend_applied_its_lag_before() -> None:
    applied = [0, 100, 300]  # by the tick two before, the one before, this one
    assert [seen_spend(applied, lag) for lag in (0, 0.5, 1, 1.5)] == [300, 200, 100, 50]


@given(
    st.lists(st.integers(0, 10**9), min_size=2, max_size=6).map(sorted),
    st.floats(0, 4, exclude_max=True),
)
def test_a_fraction_of_a_tick_sees_part_of_that_interval(applied: list[int], lag: float) -> None:
    whole = int(lag)
    if len(applied) < whole + 2:
        applied = [applied[0]] * (whole + 2 - len(applied)) + applied
    newer, older = applied[-1 - whole], applied[-2 - whole]
    assert older <= seen_spend(applied, lag) <= newer
    assert seen_spend(applied, whole) == newer


def test_a_day_with_every_minute_admitted_is_the_same_day() -> None:
    plain = run(Scenario(seed=2, end_s=4 * 3600.0))
    admitted = run(Scenario(seed=2, end_s=4 * 3600.0, admitted=(1.0,) * 1440))
    assert (plain.spend == admitted.spend).all()


def test_nothing_is_spent_in_the_minutes_the_bidder_shed_everything() -> None:
    shares = [1.0] * 1440
    shares[60:120] = [0.0] * 60  # 01:00-02:00
    trace = run(Scenario(seed=2, end_s=3 * 3600.0, admitted=tuple(shares)))
    hour = (trace.t_s // 3600).astype(int)
    assert trace.spend[hour == 1].sum() == 0
    assert trace.spend[hour == 0].sum() > 0 and trace.spend[hour == 2].sum() > 0


@given(
    st.lists(st.floats(0, 1), min_size=10, max_size=10),  # ten minutes
    st.floats(0, 590),
    st.floats(1, 400),
)
def test_the_admitted_share_of_an_interval_is_a_mean_of_its_minutes(
    shares: list[float], start: float, length: float
) -> None:
    end = min(start + length, 600.0)
    got = admitted_share(shares, start, end)
    covered = shares[int(start // 60) : int((end - 1e-9) // 60) + 1]
    assert min(covered) - 1e-12 <= got <= max(covered) + 1e-12
    assert admitted_share([0.25] * 10, start, end) == pytest.approx(0.25)
    whole = admitted_share(shares, 60.0 * int(start // 60), 60.0 * (int(start // 60) + 1))
    assert whole == pytest.approx(shares[int(start // 60)])
