"""The exchange model: determinism, auction rules, macro substitution."""

from __future__ import annotations

import statistics

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.auction import (
    Market,
    clearing_price,
    competing_bid,
    fill_price,
    format_price,
    parse_terms,
    settle,
)

# sigma 0 makes the competing bid exactly median_multiple x floor: rules become checkable.
FIXED = Market(seed=1, median_multiple=1.5, sigma=0.0)
prices = st.floats(min_value=0.0001, max_value=500, allow_nan=False)


def request(at: int | None = 2, floor: float = 1.0, impid: str = "1") -> bytes:
    body: dict = {"id": "req", "imp": [{"id": impid, "bidfloor": floor}]}
    if at is not None:
        body["at"] = at
    return orjson.dumps(body)


def response(*bids: tuple[str, float]) -> bytes:
    bid_objects = [
        {
            "id": f"b{i}",
            "impid": impid,
            "price": price,
            "nurl": "http://bidder/notice/win?t=x&price=${AUCTION_PRICE}",
            "burl": "http://bidder/notice/bill?price=${AUCTION_PRICE}&b=${AUCTION_PRICE:B64}",
        }
        for i, (impid, price) in enumerate(bids)
    ]
    return orjson.dumps({"id": "req", "cur": "USD", "seatbid": [{"seat": "s", "bid": bid_objects}]})


def test_same_seed_same_outcomes():
    market = Market(seed=42)
    runs = [
        [settle(market, seq, request(), response(("1", 1.6))) for seq in range(300)]
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def test_outcome_does_not_depend_on_the_order_answers_arrive():
    market = Market(seed=7)
    forward = {seq: settle(market, seq, request(), response(("1", 1.6))) for seq in range(100)}
    backward = {
        seq: settle(market, seq, request(), response(("1", 1.6))) for seq in reversed(range(100))
    }
    assert forward == backward


def test_different_seeds_draw_different_competition():
    draws = [[competing_bid(Market(seed=s), 1.0, f"{i}:1:0") for i in range(50)] for s in (1, 2)]
    assert draws[0] != draws[1]


def test_competition_is_centred_on_the_floor_times_the_median_multiple():
    market = Market(seed=3, median_multiple=1.5, sigma=0.6)
    draws = [competing_bid(market, 2.0, f"{i}:1:0") for i in range(4000)]
    assert statistics.median(draws) == pytest.approx(3.0, rel=0.05)
    assert min(draws) > 0


def test_no_floor_uses_the_default_floor_as_scale():
    market = Market(sigma=0.0, median_multiple=2.0, default_floor=0.25)
    assert competing_bid(market, 0.0, "k") == pytest.approx(0.5)


def test_first_price_winner_pays_its_bid():
    settlement = settle(FIXED, 0, request(at=1), response(("1", 2.0)))
    assert settlement.bids == 1
    assert [w.price for w in settlement.wins] == [2.0]


def test_second_price_winner_pays_competitor_plus_a_cent():
    settlement = settle(FIXED, 0, request(at=2), response(("1", 2.0)))
    assert [w.price for w in settlement.wins] == [1.51]


def test_second_price_is_the_default_auction_type():
    settlement = settle(FIXED, 0, request(at=None), response(("1", 2.0)))
    assert [w.price for w in settlement.wins] == [1.51]


def test_second_price_never_exceeds_the_bid():
    settlement = settle(FIXED, 0, request(at=2), response(("1", 1.505)))
    assert [w.price for w in settlement.wins] == [1.505]


def test_bid_at_or_below_the_competitor_loses():
    assert settle(FIXED, 0, request(), response(("1", 1.5))).wins == []
    assert settle(FIXED, 0, request(), response(("1", 1.2))).wins == []


def test_bid_below_the_floor_is_rejected_even_without_competition():
    market = Market(sigma=0.0, median_multiple=0.001)
    assert settle(market, 0, request(floor=1.0), response(("1", 0.99))).wins == []


def test_bid_for_an_unknown_impression_or_an_unreadable_request_loses():
    assert settle(FIXED, 0, request(impid="1"), response(("2", 9.0))).wins == []
    assert settle(FIXED, 0, b"{not json", response(("1", 9.0))).wins == []


def test_every_bid_of_every_seat_is_auctioned():
    settlement = settle(FIXED, 0, request(), response(("1", 9.0), ("1", 1.0), ("1", 3.0)))
    assert settlement.bids == 3
    assert len(settlement.wins) == 2


def test_unreadable_response_has_no_bids():
    assert settle(FIXED, 0, request(), b"<html>").bids == 0
    assert settle(FIXED, 0, request(), b'{"seatbid": "nope"}').bids == 0


@given(
    own=prices,
    competitor=prices,
    floor=st.floats(min_value=0, max_value=500),
    at=st.sampled_from([1, 2]),
)
def test_clearing_price_never_above_own_bid(own, competitor, floor, at):
    price = clearing_price(at, own, competitor, floor)
    assert price <= own
    assert round(price, 6) == price


@given(own=prices, competitor=prices, floor=st.floats(min_value=0, max_value=500))
def test_second_price_is_at_least_the_competition_when_it_wins(own, competitor, floor):
    if own > competitor and own >= floor:
        assert clearing_price(2, own, competitor, floor) >= min(own, max(competitor, floor)) - 1e-6


def test_winner_notices_carry_the_clearing_price():
    (win,) = settle(FIXED, 0, request(at=2), response(("1", 2.0))).wins
    assert win.nurl == "http://bidder/notice/win?t=x&price=1.51"
    assert win.burl == "http://bidder/notice/bill?price=1.51&b=${AUCTION_PRICE:B64}"
    assert win.spend_micros == 1510


@pytest.mark.parametrize(
    ("price", "text"),
    [(1.5, "1.5"), (2.0, "2"), (0.000001, "0.000001"), (1.23456789, "1.234568"), (0.0, "0")],
)
def test_price_format_has_at_most_six_decimals(price, text):
    assert format_price(price) == text


def test_fill_price_replaces_every_plain_macro():
    assert fill_price("a=${AUCTION_PRICE}&b=${AUCTION_PRICE}", 0.5) == "a=0.5&b=0.5"


def test_terms_read_floors_by_imp_id_and_auction_type():
    body = orjson.dumps({"at": 1, "imp": [{"id": "a", "bidfloor": 0.7}, {"id": "b"}, "junk"]})
    terms = parse_terms(body)
    assert terms is not None
    assert (terms.at, terms.floors) == (1, {"a": 0.7, "b": 0.0})
