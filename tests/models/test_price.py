"""Pricing math: value, cap, floor, second-price truthfulness, first-price shading."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.price import bid_price, expected_surplus, impression_value, shade
from models.win_rate import Coefs, WinRateModel

CURVE = WinRateModel(tuple(Coefs(-1.0, 2.8, -2.6) for _ in range(4)))
micros = st.integers(1, 50_000_000)


def test_value_is_click_value_times_probability_times_1000() -> None:
    assert impression_value(500_000, 0.02) == 10_000_000  # $0.50 a click at 2%: $10 CPM


def test_value_rounds_down() -> None:
    assert impression_value(3, 0.0005) == 1  # 1.5 micros


@pytest.mark.parametrize("p", [-0.1, 1.5, math.nan])
def test_value_rejects_a_probability_outside_0_1(p: float) -> None:
    with pytest.raises(ValueError, match="P\\(click\\)"):
        impression_value(1_000, p)


@given(micros, st.integers(0, 50_000_000), micros)
def test_second_price_bids_the_value_capped_by_the_max(value: int, floor: int, cap: int) -> None:
    price = bid_price(value, floor, cap, 2, CURVE)
    expected = min(value, cap)
    assert price == (expected if expected >= max(floor, 1) else None)


def test_no_bid_when_the_ceiling_is_under_the_floor() -> None:
    assert bid_price(900_000, 1_000_000, 5_000_000, 1, CURVE) is None
    assert bid_price(5_000_000, 1_000_000, 900_000, 2, CURVE) is None


@given(micros, st.integers(0, 50_000_000), micros)
def test_first_price_bid_stays_between_floor_and_ceiling(value: int, floor: int, cap: int) -> None:
    price = bid_price(value, floor, cap, 1, CURVE)
    if min(value, cap) < max(floor, 1):
        assert price is None
    else:
        assert price is not None and max(floor, 1) <= price <= min(value, cap)


def test_first_price_shades_below_the_value() -> None:
    price = bid_price(4_000_000, 1_000_000, 20_000_000, 1, CURVE)
    assert price is not None and 1_000_000 < price < 4_000_000


def test_first_price_without_a_win_model_bids_the_ceiling() -> None:
    assert bid_price(4_000_000, 1_000_000, 3_000_000, 1, None) == 3_000_000


@given(
    st.integers(10_000, 50_000_000),
    st.floats(-4.0, 4.0),
    st.floats(0.3, 6.0),
    st.floats(0.0, 0.9),
)
def test_shading_finds_the_surplus_maximum(
    value: int, alpha: float, beta: float, floor_share: float
) -> None:
    lowest = max(int(value * floor_share), 1)
    bid = shade(value, lowest, value, alpha, beta)
    best = max(
        _surplus(value, b, alpha, beta)
        for b in {lowest + (value - lowest) * k // 400 for k in range(401)}
    )
    # Within a grid step of the true optimum: never worse than the grid by more than rounding.
    assert _surplus(value, bid, alpha, beta) >= best - 1e-6 * value - 1


def _surplus(value: int, bid: int, alpha: float, beta: float) -> float:
    """(value - bid) x P(win | bid), written apart from ``models.price``: the win
    probability as the logistic curve in the bid in dollars, 1 / (1 + e^-z). No
    overflow here: a bid of 1 micro and beta 6 give z near -87, e^87 is a finite float."""
    z = alpha + beta * math.log(bid / 1_000_000)
    return (value - bid) / (1.0 + math.exp(-z))


def test_the_surplus_is_the_margin_times_the_win_probability() -> None:
    # alpha 0, beta 1, a $1 bid: ln 1 = 0, P(win) = sigmoid(0) = 1/2; the margin is $3.
    assert expected_surplus(4_000_000, 1_000_000, 0.0, 1.0) == pytest.approx(1_500_000)
    assert _surplus(4_000_000, 1_000_000, 0.0, 1.0) == pytest.approx(1_500_000)


def test_a_curve_that_does_not_rise_is_not_shaded() -> None:
    assert shade(4_000_000, 1, 4_000_000, 0.0, 0.0) == 4_000_000
