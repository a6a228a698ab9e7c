"""The replay report says which exchange model decided each auction."""

from __future__ import annotations

import dataclasses

from bidder.bidstream.auction import RECORDED, SYNTHETIC, Settlement, Win
from bidder.core.tokens import NoticeClaims, TokenSigner
from bidder.replay.auction_totals import AuctionTotals, auction_json, caps_unchecked
from bidder.replay.report import ReplayResult, render_table, to_json


def _win(price: float) -> Win:
    return Win(impid="1", bid_price=1.0, price=price, nurl=None, burl=None)


def _result() -> ReplayResult:
    result = ReplayResult(deadline_ms=8.0)
    result.auction.count(Settlement(bids=1, wins=[_win(0.5)], model=SYNTHETIC))
    result.auction.count(Settlement(bids=1, wins=[_win(0.080645)], model=RECORDED))
    result.auction.count(Settlement(bids=1, wins=[], model=RECORDED))
    result.auction.count(Settlement(bids=0, wins=[], model=RECORDED))  # unreadable answer
    return result


def test_each_auction_counts_under_the_model_that_decided_it() -> None:
    models = to_json(_result())["auction"]["models"]
    no_clicks = {"clicks": 0, "click_recorded_wins": 0, "ctr": None}
    assert models == {
        "synthetic": {"auctions": 1, "wins": 1, "spend_micros": 500, **no_clicks},
        "recorded": {"auctions": 2, "wins": 1, "spend_micros": 81, **no_clicks},
    }


def test_the_totals_are_the_sum_of_both_models() -> None:
    auction = to_json(_result())["auction"]
    assert (auction["bids"], auction["wins"], auction["spend_micros"]) == (3, 2, 581)


def test_a_replay_without_auctions_reports_both_models_at_zero() -> None:
    models = to_json(ReplayResult(deadline_ms=8.0))["auction"]["models"]
    zero = {"auctions": 0, "wins": 0, "spend_micros": 0, "clicks": 0, "click_recorded_wins": 0}
    assert models == {name: {**zero, "ctr": None} for name in models}
    assert set(models) == {"synthetic", "recorded"}


def test_the_table_shows_both_models() -> None:
    table = render_table(_result())
    assert "synthetic model   1 auctions decided  wins 1  spend 500 micros" in table
    assert "recorded model    2 auctions decided  wins 1  spend 81 micros" in table


def _won(claims: NoticeClaims) -> Win:
    token = TokenSigner({"k1": b"t" * 32}, "k1").sign(claims)
    url = f"http://127.0.0.1:1/notice/win?t={token}&p=${{AUCTION_PRICE}}"
    return Win(impid="1", bid_price=2.0, price=1.0, nurl=url, burl=url)


_CLAIMS = NoticeClaims(1, "1", "c", "a", "cr", "b:u", None, 2_000_000, 1_767_225_600_000)


def test_wins_bid_without_a_cap_check_are_counted() -> None:
    totals = AuctionTotals()
    marked = _won(dataclasses.replace(_CLAIMS, caps_unchecked=True))
    totals.count(Settlement(bids=3, wins=[marked, _won(_CLAIMS), marked]))
    assert totals.unchecked_wins == 2 and auction_json(totals)["unchecked_wins"] == 2


def test_a_win_without_notice_urls_is_not_counted_as_unchecked() -> None:
    assert not caps_unchecked(Win(impid="1", bid_price=2.0, price=1.0, nurl=None, burl=None))
