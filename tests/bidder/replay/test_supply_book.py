"""The supply book: who would have bought each imp, and each campaign's supply at the
others' rates; and the simulator's supply read from it."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.auction import Market, settle, would_pay
from bidder.replay.campaign_outcomes import Budget
from bidder.replay.offline_days import OfflineSettings, book_supplies, offline_day
from bidder.replay.pacing_figures import pacing_section
from bidder.replay.supply_book import SupplyBook, supply_at
from pacing.curves import STANDARD

pytestmark = pytest.mark.pure

MIDNIGHT_MS = 1_767_225_600_000
MARKET = Market(seed=3)


def _request(*imps: tuple[str, float]) -> bytes:
    return orjson.dumps({"id": "r", "at": 2, "imp": [{"id": i, "bidfloor": f} for i, f in imps]})


def _response(*bids: tuple[str, str, float]) -> bytes:
    bid = [
        {"id": str(n), "impid": imp, "price": p, "cid": cid} for n, (cid, imp, p) in enumerate(bids)
    ]
    return orjson.dumps({"id": "r", "seatbid": [{"seat": "s", "bid": bid}]})


@given(st.integers(0, 10_000), st.floats(0.2, 5.0), st.floats(0.2, 5.0))
def test_the_bid_sent_would_pay_what_it_paid(seq: int, floor: float, price: float) -> None:
    settlement = settle(MARKET, seq, _request(("1", floor)), _response(("a", "1", price)))
    paid = would_pay(MARKET, seq, settlement, "1", price)
    assert paid == (settlement.wins[0].price if settlement.wins else None)


def test_an_imp_the_answer_did_not_bid_on_pays_nothing() -> None:
    settlement = settle(MARKET, 1, _request(("1", 0.5), ("2", 0.5)), _response(("a", "1", 9.0)))
    assert would_pay(MARKET, 1, settlement, "2", 9.0) is None


def test_the_book_orders_each_imp_by_price_and_prices_each_campaign_in_the_same_auction() -> None:
    book, floor = SupplyBook(), 1.0
    body = _request(("1", floor), ("2", floor))
    # Imp 1: a bid 50 CPM (sent, wins against any competitor drawn at sigma 0.6 around
    # 1.5 CPM but the rarest); b and c priced it at 50 too and at the floor's tenth.
    settlement = settle(MARKET, 7, body, _response(("a", "1", 50.0)))
    priced = [("c", "1", 100_000), ("b", "1", 50_000_000), ("a", "1", 50_000_000)]
    book.add(MARKET, 7, settlement, [*priced, ("a", "2", 9_000_000)], MIDNIGHT_MS + 3_600_000)
    (entry,) = book.json()[1]
    assert entry["order"] == ["a", "b", "c"] and entry["imps"] == 1  # ties by campaign id
    won = settlement.wins[0].spend_micros
    assert entry["spend_micros"] == [won, won, 0]  # c is below the floor: it loses
    assert all(not hour for h, hour in enumerate(book.json()) if h != 1)  # imp 2: no bid


orders = st.lists(
    st.tuples(
        st.integers(0, 23),
        st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True),
        st.lists(st.integers(0, 5_000), min_size=4, max_size=4),
    ),
    max_size=12,
)
rates = st.dictionaries(
    st.sampled_from("abcd"), st.lists(st.floats(0, 1), min_size=24, max_size=24)
)


def _book(entries: list[tuple[int, list[str], list[int]]]) -> list[list[dict[str, object]]]:
    book = SupplyBook()
    for hour, order, spend in entries:
        book.count(hour, tuple(order), spend[: len(order)])
    return book.json()


@given(orders)
def test_with_every_campaign_at_rate_1_each_meets_its_first_places(entries) -> None:
    book = _book(entries)
    supply = supply_at(book, {})
    for cid in "abcd":
        first = [sum(e["spend_micros"][0] for e in hour if e["order"][0] == cid) for hour in book]
        assert supply.get(cid, [0.0] * 24) == first


@given(orders)
def test_with_no_campaign_bidding_each_meets_all_its_places(entries) -> None:
    book = _book(entries)
    supply = supply_at(book, {cid: [0.0] * 24 for cid in "abcd"})
    for cid in "abcd":
        every = [
            sum(
                s
                for e in hour
                for c, s in zip(e["order"], e["spend_micros"], strict=True)
                if c == cid
            )
            for hour in book
        ]
        assert supply.get(cid, [0.0] * 24) == every


@given(orders, rates, st.sampled_from("abcd"), st.floats(0, 1))
def test_a_campaign_bidding_less_leaves_the_others_more_and_itself_the_same(
    entries, at, cid, lower
) -> None:
    book = _book(entries)
    before = supply_at(book, at)
    less = dict(at)
    less[cid] = [min(r, lower) for r in at.get(cid, [1.0] * 24)]
    after = supply_at(book, less)
    for other in "abcd":
        was, now = before.get(other, [0.0] * 24), after.get(other, [0.0] * 24)
        if other == cid:
            assert now == was
        else:
            assert all(n >= w - 1e-6 for n, w in zip(now, was, strict=True))


BUDGET = 24_000_000
OFFLINE = OfflineSettings(
    nodes=2, tick_s=300.0, chunk_periods=4, breaker_window_s=86_400.0, seeds=2
)


def _target() -> list[float]:
    return [BUDGET * (STANDARD.cum[h + 1] - STANDARD.cum[h]) for h in range(24)]


def test_a_paced_campaign_above_another_leaves_it_supply_the_replay_did_not_see() -> None:
    # Every imp is priced by a first, then b; each would spend 3x a's target there.
    # Paced, a takes about a third, so b meets about two thirds of what a passes up.
    book = [[{"order": ["a", "b"], "imps": 100, "spend_micros": [3 * t, 3 * t]}] for t in _target()]
    calibrated = {"spend_by_hour": [round(3 * t) for t in _target()], "ecpm_usd": 2.0}
    budget = Budget(BUDGET, STANDARD)
    supply = book_supplies(book, {"a": offline_day(calibrated, budget, OFFLINE)})
    assert supply["a"] == [3 * t for t in _target()]
    assert 1.6 * BUDGET <= sum(supply["b"]) <= 2.4 * BUDGET  # 0 at rate 1 for all


def test_the_section_reads_the_simulators_supply_from_the_book() -> None:
    book = [[{"order": ["a", "b"], "imps": 100, "spend_micros": [3 * t, 3 * t]}] for t in _target()]
    figures = {"spend_by_hour": [round(t) for t in _target()], "target_by_hour": _target()}
    calibration = {
        cid: {"spend_by_hour": [round(3 * t) for t in _target()], "ecpm_usd": 2.0} for cid in "ab"
    }
    budgets = {"a": Budget(BUDGET, STANDARD), "b": Budget(BUDGET, STANDARD)}
    section = pacing_section({"a": figures, "b": figures}, budgets, calibration, OFFLINE, book)
    assert section["a"]["offline_supply"] == section["b"]["offline_supply"] == "book"
    assert section["a"]["supply_ratio"] == 3.0
    assert 1.6 <= section["b"]["supply_ratio"] <= 2.4
    without = pacing_section({"a": figures, "b": figures}, budgets, calibration, OFFLINE)
    assert without["b"]["offline_supply"] == "spend" and without["b"]["supply_ratio"] == 3.0
