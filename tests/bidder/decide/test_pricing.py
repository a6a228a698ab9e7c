"""bidder.decide.pricing.base_price: the base bid, raised to the floor, never above the max bid."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.campaign_docs import campaigns_from_docs
from bidder.core.campaigns import Campaign
from bidder.decide.eligibility import Candidate
from bidder.decide.pricing import base_price
from bidder.openrtb.request import parse_bid_request


def _campaign(base: int = 500_000, top: int = 2_000_000) -> Campaign:
    creative = {"id": "cr", "format": "banner", "w": 300, "h": 250}
    creative |= {"adomain": ["acme.example"], "markup": "<img>"}
    doc = {"id": "c1", "advertiser": "Acme", "daily_budget_micros": 1_000_000_000}
    doc |= {"base_bid_cpm_micros": base, "max_bid_cpm_micros": top, "creatives": [creative]}
    return campaigns_from_docs([doc])[0]


def _price(floor_micros: int, base: int = 500_000, top: int = 2_000_000) -> int | None:
    imp = {"id": "1", "banner": {"w": 300, "h": 250}, "bidfloor": floor_micros / 1_000_000}
    request = parse_bid_request(orjson.dumps({"id": "r1", "imp": [imp]}))
    campaign = _campaign(base, top)
    return base_price(Candidate(request.imps[0], campaign, campaign.creatives[0]))


def test_base_bid_when_it_is_above_the_floor() -> None:
    assert _price(100_000) == 500_000


def test_base_bid_when_there_is_no_floor() -> None:
    assert _price(0) == 500_000


def test_price_is_raised_to_the_floor() -> None:
    assert _price(1_200_000) == 1_200_000


def test_floor_equal_to_the_max_bid_is_met() -> None:
    assert _price(2_000_000) == 2_000_000


def test_no_price_when_the_floor_is_above_the_max_bid() -> None:
    assert _price(2_000_001) is None


@given(
    floor=st.integers(0, 1_000_000_000),
    base=st.integers(1, 1_000_000_000),
    extra=st.integers(0, 1_000_000_000),
)
def test_price_is_the_larger_of_base_and_floor_up_to_the_max(
    floor: int, base: int, extra: int
) -> None:
    top = min(base + extra, 1_000_000_000)
    assert _price(floor, base, top) == (None if floor > top else max(base, floor))
