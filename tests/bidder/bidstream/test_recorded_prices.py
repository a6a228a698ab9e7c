"""The exchange settling against a stream line's recorded clearing price."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.auction import (
    RECORDED,
    SYNTHETIC,
    Market,
    recorded_clearing_price,
    settle,
)

MARKET = Market(seed=3)
prices = st.floats(min_value=0.0001, max_value=500, allow_nan=False)


def request(at: int = 2, floor: float = 0.0) -> bytes:
    return orjson.dumps({"id": "r", "at": at, "imp": [{"id": "1", "bidfloor": floor}]})


def response(price: float) -> bytes:
    bid = {"id": "b", "impid": "1", "price": price, "nurl": "http://b/win?p=${AUCTION_PRICE}"}
    return orjson.dumps({"id": "r", "seatbid": [{"bid": [bid]}]})


def test_a_bid_above_the_recorded_price_wins_and_pays_it() -> None:
    settlement = settle(MARKET, 0, request(), response(0.2), recorded_price=0.080645)
    assert settlement.model == RECORDED
    [win] = settlement.wins
    assert win.price == 0.080645 and win.nurl == "http://b/win?p=0.080645"
    assert win.spend_micros == 81


def test_a_bid_at_or_below_the_recorded_price_loses() -> None:
    assert settle(MARKET, 0, request(), response(0.5), recorded_price=0.5).wins == []
    assert settle(MARKET, 0, request(), response(0.4), recorded_price=0.5).wins == []


def test_a_bid_below_the_floor_loses_even_above_the_recorded_price() -> None:
    assert settle(MARKET, 0, request(floor=1.0), response(0.9), recorded_price=0.1).wins == []


def test_first_price_pays_its_own_bid() -> None:
    [win] = settle(MARKET, 0, request(at=1), response(0.7), recorded_price=0.2).wins
    assert win.price == 0.7


def test_without_a_recorded_price_the_synthetic_model_decides_as_before() -> None:
    for seq in range(200):
        plain = settle(MARKET, seq, request(floor=0.5), response(0.9))
        explicit = settle(MARKET, seq, request(floor=0.5), response(0.9), recorded_price=None)
        assert plain == explicit and plain.model == SYNTHETIC


@given(own=prices, recorded=prices, floor=st.floats(0, 500))
def test_the_recorded_rule(own: float, recorded: float, floor: float) -> None:
    """Win exactly when the bid reaches the floor and beats the recorded price; pay the
    recorded price (6 decimals, never above the bid)."""
    wins = settle(MARKET, 1, request(floor=floor), response(own), recorded_price=recorded).wins
    assert bool(wins) == (own >= floor and own > recorded)
    if wins:
        assert wins[0].price <= own
        assert abs(wins[0].price - recorded) <= 1.5e-6  # rounding, then one micro-CPM down


@given(own=prices, recorded=prices)
def test_a_recorded_clearing_price_never_exceeds_the_bid(own: float, recorded: float) -> None:
    for at in (1, 2):
        assert recorded_clearing_price(at, own, min(recorded, own)) <= own


@given(click=st.sampled_from([True, False, None]))
def test_a_win_the_recorded_price_decided_carries_the_lines_click(click: bool | None) -> None:
    settlement = settle(MARKET, 0, request(), response(0.2), 0.080645, recorded_click=click)
    assert [win.clicked for win in settlement.wins] == [click]


def test_a_win_the_synthetic_model_decided_carries_no_click() -> None:
    for seq in range(50):
        settlement = settle(MARKET, seq, request(floor=0.5), response(9.0), recorded_click=True)
        assert settlement.wins and all(win.clicked is None for win in settlement.wins)
