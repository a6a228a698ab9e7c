"""The achievable curve and the actual-day transforms (properties)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacing.actual import SCENARIOS, Actual, achievable
from pacing.curves import Curve
from pacing.simulate import Scenario, run

pytestmark = pytest.mark.pure

HOURS = 24
targets = st.lists(st.integers(0, 10**9), min_size=HOURS, max_size=HOURS)
supplies = st.lists(st.floats(0, 2e9, allow_nan=False), min_size=HOURS, max_size=HOURS)
weights = st.lists(st.floats(0.01, 100.0), min_size=HOURS, max_size=HOURS)


def _prefix(values: list[int]) -> list[int]:
    out, running = [], 0
    for v in values:
        running += v
        out.append(running)
    return out


@given(targets, supplies)
def test_achievable_never_exceeds_the_supply_of_its_hour(t: list[int], a: list[float]) -> None:
    assert all(0 <= got <= int(offer) for got, offer in zip(achievable(t, a), a, strict=True))


@given(targets, supplies)
def test_achievable_never_runs_ahead_of_the_target(t: list[int], a: list[float]) -> None:
    ahead = zip(_prefix(achievable(t, a)), _prefix(t), strict=True)
    assert all(got <= want for got, want in ahead)


@given(targets, supplies)
def test_a_shortfall_is_carried_only_when_the_hour_took_all_it_offered(
    t: list[int], a: list[float]
) -> None:
    got = achievable(t, a)
    for h, (done, want) in enumerate(zip(_prefix(got), _prefix(t), strict=True)):
        if done < want:
            assert got[h] == int(a[h])


@given(targets)
def test_with_enough_supply_the_achievable_curve_is_the_target(t: list[int]) -> None:
    assert achievable(t, [float(v) for v in t]) == t


@given(targets, supplies, st.integers(0, HOURS - 1), st.floats(0, 1e9))
def test_more_supply_never_lowers_the_achievable_total(
    t: list[int], a: list[float], hour: int, extra: float
) -> None:
    more = [*a[:hour], a[hour] + extra, *a[hour + 1 :]]
    assert sum(achievable(t, more)) >= sum(achievable(t, a))


@given(weights, st.integers(-30, 30))
def test_a_shift_moves_the_supply_and_keeps_the_day(w: list[float], shift: int) -> None:
    curve = Curve.from_weights(w)
    day = Actual(shift_hours=shift)
    shares = [day.volume_share(curve, h) for h in range(HOURS)]
    assert shares == [curve.hour_share((h - shift) % HOURS) for h in range(HOURS)]
    assert sum(shares) == pytest.approx(1.0)


@given(weights, st.floats(0.05, 5.0), st.integers(0, 23), st.integers(1, 24), st.floats(0, 1))
def test_scale_and_drop_change_only_what_they_name(
    w: list[float], scale: float, first: int, length: int, keep: float
) -> None:
    curve = Curve.from_weights(w)
    end = min(first + length, HOURS)
    day = Actual(scale=scale, drop_hours=(first, end), drop_keep=keep)
    for h in range(HOURS):
        factor = scale * (keep if first <= h < end else 1.0)
        assert day.volume_share(curve, h) == pytest.approx(curve.hour_share(h) * factor)


@given(st.integers(0, 23), st.floats(0.5, 3.0))
def test_a_price_shift_changes_the_money_per_request_from_its_hour_on(
    hour: int, factor: float
) -> None:
    base = Scenario().available_by_hour()
    shifted = Scenario(actual=Actual(price_from_hour=hour, price_factor=factor))
    moved = shifted.available_by_hour()
    assert moved[:hour] == base[:hour]
    ratio = shifted.market.shifted(factor).spend_per_request() / shifted.market.spend_per_request()
    assert moved[hour:] == pytest.approx([b * ratio for b in base[hour:]])


def test_a_dearer_market_buys_less_with_the_same_bid() -> None:
    market = Scenario().market
    assert market.shifted(1.5).spend_per_request() < market.spend_per_request()
    assert market.shifted(1.5).p_win() < market.p_win()


def test_the_named_scenarios_are_the_four_of_the_acceptance() -> None:
    sc = Scenario()
    forecast = sc.available_by_hour()
    late = replace(sc, actual=SCENARIOS["late-peak"]).available_by_hour()
    assert late.index(max(late)) == (forecast.index(max(forecast)) + 2) % HOURS
    light = replace(sc, actual=SCENARIOS["light-day"]).available_by_hour()
    assert sum(light) == pytest.approx(0.7 * sum(forecast))
    outage = replace(sc, actual=SCENARIOS["half-outage"]).available_by_hour()
    assert [h for h in range(HOURS) if outage[h] != forecast[h]] == [14, 15]
    price = SCENARIOS["price-up-noon"]
    assert (price.price_from_hour, price.price_factor) == (12, 1.5)


@pytest.mark.parametrize(
    ("day", "field"),
    [
        (Actual(scale=0.0), "scale"),
        (Actual(drop_hours=(5, 5)), "drop_hours"),
        (Actual(drop_keep=1.5), "drop_keep"),
        (Actual(price_from_hour=24), "price_from_hour"),
        (Actual(price_factor=-1.0), "price_factor"),
    ],
)
def test_a_bad_actual_day_names_its_field(day: Actual, field: str) -> None:
    assert [f for f, _ in day.problems()] == [field]


def test_ticks_that_cross_hours_draw_each_hours_supply() -> None:
    """7 s ticks straddle every hour boundary; rate 1 on half the target's supply spends
    exactly what the hours offered (expected values, leases far above it)."""
    day = Actual(drop_hours=(3, 9), drop_keep=0.2, shift_hours=5)
    sc = Scenario(supply_ratio=0.5, actual=day, pacing=False, expected_values=True)
    sc = replace(sc, config=replace(sc.config, tick_s=7.0))
    spent = int(run(sc).spend.sum())
    assert spent == pytest.approx(sum(sc.available_by_hour()), rel=1e-4)
