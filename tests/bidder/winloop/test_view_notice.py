"""Viewability notices on the live bidder against the real Valkey.

Alpenrail's campaign (``fixtures/openrtb/campaigns.json``) counts viewable impressions
(``cap_policy.impressions: viewable``) with a cap of 4 a day per person, and case 005
(a German news site's 300x250) is the request it wins. Each test is one new person.
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import orjson

from bidder.core.tokens import TokenSigner
from tests.bidder.conftest import REPO
from tests.bidder.live import LiveBidder

_CASE = json.loads((REPO / "fixtures/openrtb/cases/005_dach-site-mrec.json").read_text())
CAMPAIGN = "alpenrail-dach"
DAILY_CAP = 4


def _bid(bidder: LiveBidder, person: str) -> dict[str, Any] | None:
    """The bid for ``person``'s request, or None on a no-bid."""
    doc: dict[str, Any] = json.loads(json.dumps(_CASE["request"]))
    doc["user"] = {"buyeruid": person}
    answer = bidder.post(orjson.dumps(doc))
    if answer.status == 204:
        return None
    assert answer.status == 200, answer.reason
    bid: dict[str, Any] = orjson.loads(answer.body)["seatbid"][0]["bid"][0]
    return bid


def _alpenrail_bid(bidder: LiveBidder, person: str) -> dict[str, Any]:
    bid = _bid(bidder, person)
    assert bid is not None and bid["cid"] == CAMPAIGN
    return bid


def _bills(bidder: LiveBidder, bid: dict[str, Any]) -> None:
    parts = urlsplit(bid["burl"].replace("${AUCTION_PRICE}", "0.5"))
    assert bidder.get(f"{parts.path}?{parts.query}").status == 204


def _token(bid: dict[str, Any]) -> str:
    return parse_qs(urlsplit(bid["burl"]).query)["t"][0]


def _view(bidder: LiveBidder, token: str) -> int:
    return bidder.get("/notice/view?" + urlencode({"t": token})).status


def _won_and_viewed(bidder: LiveBidder, person: str, times: int) -> list[str]:
    tokens = []
    for _ in range(times):
        bid = _alpenrail_bid(bidder, person)
        _bills(bidder, bid)
        tokens.append(_token(bid))
        assert _view(bidder, tokens[-1]) == 204
    return tokens


def _bids_alpenrail(bidder: LiveBidder, person: str) -> bool:
    bid = _bid(bidder, person)
    return bid is not None and bid["cid"] == CAMPAIGN


def test_the_campaign_stops_bidding_once_the_persons_viewable_impressions_reach_the_cap(
    live_bidder: LiveBidder,
) -> None:
    person = uuid.uuid4().hex
    _won_and_viewed(live_bidder, person, DAILY_CAP)
    assert not _bids_alpenrail(live_bidder, person)


def test_billed_impressions_that_never_became_viewable_do_not_count(
    live_bidder: LiveBidder,
) -> None:
    person = uuid.uuid4().hex
    for _ in range(DAILY_CAP):
        _bills(live_bidder, _alpenrail_bid(live_bidder, person))
    assert _bids_alpenrail(live_bidder, person)


def test_a_replayed_view_notice_counts_once(live_bidder: LiveBidder) -> None:
    person = uuid.uuid4().hex
    last = _won_and_viewed(live_bidder, person, DAILY_CAP - 1)[-1]
    for _ in range(3):
        assert _view(live_bidder, last) == 204
    assert _bids_alpenrail(live_bidder, person)


def test_a_forged_view_notice_is_refused_and_counts_nothing(live_bidder: LiveBidder) -> None:
    assert live_bidder.state is not None
    person = uuid.uuid4().hex
    _won_and_viewed(live_bidder, person, DAILY_CAP - 1)
    bid = _alpenrail_bid(live_bidder, person)
    _bills(live_bidder, bid)
    claims = live_bidder.state.signer.verify(_token(bid))
    forged = TokenSigner({"k1": b"f" * 32}, "k1").sign(claims)
    answer = live_bidder.get("/notice/view?" + urlencode({"t": forged}))
    assert (answer.status, answer.body.split(b":")[0]) == (400, b"bad_token")
    assert _bids_alpenrail(live_bidder, person)
    assert _view(live_bidder, _token(bid)) == 204  # the real one still counts: now capped
    assert not _bids_alpenrail(live_bidder, person)


def test_a_view_notice_without_a_token_is_refused(live_bidder: LiveBidder) -> None:
    answer = live_bidder.get("/notice/view")
    assert (answer.status, answer.body.split(b":")[0]) == (400, b"missing")
