"""bidder.pipeline.response: one bid per imp, its fields and its notice URLs."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.campaign_docs import load_campaign_file
from bidder.core.campaigns import Creative
from bidder.core.clock import ManualClock
from bidder.core.tokens import TokenSigner
from bidder.decide.eligibility import Candidate
from bidder.openrtb.request import parse_bid_request
from bidder.openrtb.view import BidRequest, Imp
from bidder.pipeline.response import (
    BidTemplate,
    NoticeUrls,
    bid_template,
    bid_templates,
    build_response,
)
from bidder.pipeline.runner import Context, PricedCandidate
from bidder.winloop.notices import parse_notice
from ids import IdsUnavailable, Snowflake, bid_id_source, decode
from tests.bidder.conftest import CAMPAIGNS as CAMPAIGNS_PATH

CAMPAIGNS = {campaign.id: campaign for campaign in load_campaign_file(CAMPAIGNS_PATH)}
BASE = "https://bidder.example"
MACRO = "${AUCTION_PRICE}"
CLOCK = ManualClock()
SIGNER = TokenSigner({"k1": b"r" * 32}, "k1")
IDS = Snowflake(CLOCK, worker=9, pause=lambda: CLOCK.advance(0.001))
URLS = NoticeUrls(BASE, SIGNER, IDS.next_id, CLOCK)

# (campaign, creative) of each format among the bundled campaigns.
BANNER = ("brightleaf-remnant-mrec", "bl-mrec-quote")
VIDEO = ("northwind-ctv-us-ca", "nw-spot-30-hd")
AUDIO = ("evergreen-audio-us", "er-audio-30")
NATIVE = ("larder-native-recipes", "ld-native-weeknight")
NURL_SERVED = ("lumen-outstream-eu", "lt-outstream-15-mp4")
WITH_ATTR = ("pixelforge-app-install", "pf-320x480-interstitial")


def _request(*imp_ids: str, request_id: str = "r1") -> BidRequest:
    imps = [{"id": imp_id, "banner": {"w": 300, "h": 250}} for imp_id in imp_ids or ("1",)]
    return parse_bid_request(orjson.dumps({"id": request_id, "imp": imps}))


def _option(imp: Imp, ids: tuple[str, str] = BANNER, price: int = 1_000_000) -> PricedCandidate:
    campaign = CAMPAIGNS[ids[0]]
    creative = next(c for c in campaign.creatives if c.id == ids[1])
    return PricedCandidate(Candidate(imp, campaign, creative), price)


def _body(
    request: BidRequest,
    *priced: PricedCandidate,
    urls: NoticeUrls = URLS,
    seat: str = "bidsim-seat",
) -> bytes:
    ctx = Context(request=request, ssp="ssp-1", received=0.0, priced=list(priced))
    ctx.user_key, ctx.household_key = "b:user-1", "h:4:192.0.2.1"
    return build_response(ctx, seat, urls, bid_id_source())


def _response(
    request: BidRequest, *priced: PricedCandidate, urls: NoticeUrls = URLS
) -> dict[str, Any]:
    response: dict[str, Any] = orjson.loads(_body(request, *priced, urls=urls))
    return response


def _bids(request: BidRequest, *priced: PricedCandidate) -> list[dict[str, Any]]:
    bids: list[dict[str, Any]] = _response(request, *priced)["seatbid"][0]["bid"]
    return bids


def _one_bid(ids: tuple[str, str] = BANNER, price: int = 1_000_000) -> dict[str, Any]:
    request = _request()
    [bid] = _bids(request, _option(request.imps[0], ids, price))
    return bid


def _query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query, strict_parsing=True))


# ------------------------------------------------------------------------ the auction


def test_response_echoes_the_request_id_in_usd_for_our_seat() -> None:
    request = _request(request_id="req-42")
    response = _response(request, _option(request.imps[0]))
    assert (response["id"], response["cur"], response["seatbid"][0]["seat"]) == (
        "req-42",
        "USD",
        "bidsim-seat",
    )


def test_one_bid_per_imp() -> None:
    request = _request("a", "b")
    a, b = request.imps
    priced = [_option(imp, ids) for imp in (a, b) for ids in (BANNER, VIDEO, NATIVE)]
    assert sorted(bid["impid"] for bid in _bids(request, *priced)) == ["a", "b"]


def test_imp_without_a_priced_candidate_gets_no_bid() -> None:
    request = _request("a", "b")
    assert [bid["impid"] for bid in _bids(request, _option(request.imps[1]))] == ["b"]


def test_highest_price_wins() -> None:
    request = _request()
    imp = request.imps[0]
    prices = {BANNER: 500_000, VIDEO: 900_000, AUDIO: 700_000}
    priced = [_option(imp, ids, price) for ids, price in prices.items()]
    assert [bid["cid"] for bid in _bids(request, *priced)] == [VIDEO[0]]


@pytest.mark.parametrize("lower_first", [True, False])
def test_price_tie_goes_to_the_lower_campaign_id(lower_first: bool) -> None:
    request = _request()
    imp = request.imps[0]
    lower, higher = _option(imp, BANNER), _option(imp, VIDEO)  # 'brightleaf' < 'northwind'
    priced = [lower, higher] if lower_first else [higher, lower]
    assert [bid["cid"] for bid in _bids(request, *priced)] == [BANNER[0]]


def test_bids_follow_the_request_imp_order() -> None:
    request = _request("first", "second", "third")
    first, second, third = request.imps
    priced = [_option(third), _option(first), _option(second)]
    assert [bid["impid"] for bid in _bids(request, *priced)] == ["first", "second", "third"]


def test_bid_ids_are_unique_within_the_response() -> None:
    request = _request(*(str(n) for n in range(10)))
    bid_ids = [bid["id"] for bid in _bids(request, *(_option(imp) for imp in request.imps))]
    assert len(set(bid_ids)) == 10


# ------------------------------------------------------------------------ the JSON

MTYPES = {"banner": 1, "video": 2, "audio": 3, "native": 4}
ALL_CREATIVES = [(c.id, cr.id) for c in CAMPAIGNS.values() for cr in c.creatives]


def _as_dict(creative: Creative, ids: tuple[str, str], bid: dict[str, Any]) -> dict[str, Any]:
    """The bid as a dict with OpenRTB's fields for ``creative`` (ids, notice URLs: ``bid``'s)."""
    expected = {
        "id": bid["id"],
        "impid": bid["impid"],
        "price": bid["price"],
        "cid": ids[0],
        "crid": ids[1],
        "adomain": list(creative.adomain),
        "mtype": MTYPES[creative.format],
        "nurl": bid["nurl"],
        "burl": bid["burl"],
    }
    if creative.cat:
        expected["cat"] = list(creative.cat)
    if creative.attr:
        expected["attr"] = sorted(creative.attr)
    if creative.w and creative.h:
        expected["w"], expected["h"] = creative.w, creative.h
    if creative.serve == "adm":
        expected["adm"] = creative.markup
    return expected


@given(
    request_id=st.text(min_size=1, max_size=40),
    imp_id=st.text(min_size=1, max_size=40),
    seat=st.text(max_size=20),
    micros=st.integers(1, 10**12),
    ids=st.sampled_from(ALL_CREATIVES),
)
def test_the_response_is_exactly_the_json_of_its_dict(
    request_id: str, imp_id: str, seat: str, micros: int, ids: tuple[str, str]
) -> None:
    """Ids from the request are attacker-controlled text: they are escaped as orjson
    escapes any string, and the whole answer is byte for byte the dict's JSON."""
    request = _request(imp_id, request_id=request_id)
    option = _option(request.imps[0], ids, micros)
    body = _body(request, option, seat=seat)
    [bid] = orjson.loads(body)["seatbid"][0]["bid"]
    assert (bid["impid"], bid["price"]) == (imp_id, micros / 1_000_000)
    expected = {
        "id": request_id,
        "cur": "USD",
        "seatbid": [{"seat": seat, "bid": [_as_dict(option.candidate.creative, ids, bid)]}],
    }
    assert body == orjson.dumps(expected)


def test_a_base_url_is_escaped_in_the_notice_urls() -> None:
    base = 'https://bidder.example/a"b\\c'
    urls = NoticeUrls(base, SIGNER, IDS.next_id, CLOCK)
    request = _request()
    [bid] = _response(request, _option(request.imps[0]), urls=urls)["seatbid"][0]["bid"]
    assert bid["nurl"].startswith(f"{base}/notice/win?t=k1.")


class _Templates:
    def __init__(self, table: dict[tuple[str, str], BidTemplate]) -> None:
        self.bid_templates = table


def test_bids_come_from_the_load_time_templates() -> None:
    table = bid_templates(CAMPAIGNS.values())
    creative = table[BANNER].creative
    table[BANNER] = table[BANNER]._replace(tail=b',"adm":"from the table"}')
    urls = NoticeUrls(BASE, SIGNER, IDS.next_id, CLOCK, templates=_Templates(table))
    request = _request()
    option = PricedCandidate(Candidate(request.imps[0], CAMPAIGNS[BANNER[0]], creative), 1)
    [bid] = _response(request, option, urls=urls)["seatbid"][0]["bid"]
    assert bid["adm"] == "from the table"


def test_a_creative_changed_since_the_templates_is_rendered_from_itself() -> None:
    campaign = CAMPAIGNS[BANNER[0]]
    old = next(c for c in campaign.creatives if c.id == BANNER[1])
    table = {BANNER: bid_template(campaign, old)}
    urls = NoticeUrls(BASE, SIGNER, IDS.next_id, CLOCK, templates=_Templates(table))
    request = _request()
    new = dataclasses.replace(old, markup="<p>new</p>")
    option = PricedCandidate(Candidate(request.imps[0], campaign, new), 1)
    [bid] = _response(request, option, urls=urls)["seatbid"][0]["bid"]
    assert bid["adm"] == "<p>new</p>"


# ------------------------------------------------------------------------ bid fields


def test_price_is_the_micros_as_a_cpm_float() -> None:
    assert _one_bid(price=1_234_567)["price"] == 1.234567


@given(micros=st.integers(1, 1_000_000_000))
def test_price_float_turns_back_into_the_same_micros(micros: int) -> None:
    assert round(_one_bid(price=micros)["price"] * 1_000_000) == micros


def test_bid_names_its_campaign_and_creative() -> None:
    bid = _one_bid(NATIVE)
    assert (bid["cid"], bid["crid"]) == NATIVE


def test_adm_is_the_markup_of_an_adm_served_creative() -> None:
    creative = next(c for c in CAMPAIGNS[BANNER[0]].creatives if c.id == BANNER[1])
    assert _one_bid(BANNER)["adm"] == creative.markup


def test_nurl_served_creative_has_no_adm() -> None:
    assert "adm" not in _one_bid(NURL_SERVED)


@pytest.mark.parametrize(
    ("ids", "mtype"), [(BANNER, 1), (VIDEO, 2), (AUDIO, 3), (NATIVE, 4)], ids=str
)
def test_mtype_follows_the_creative_format(ids: tuple[str, str], mtype: int) -> None:
    assert _one_bid(ids)["mtype"] == mtype


@pytest.mark.parametrize(("ids", "size"), [(BANNER, (300, 250)), (VIDEO, (1920, 1080))], ids=str)
def test_w_and_h_come_from_the_creative(ids: tuple[str, str], size: tuple[int, int]) -> None:
    bid = _one_bid(ids)
    assert (bid["w"], bid["h"]) == size


@pytest.mark.parametrize("ids", [NATIVE, AUDIO], ids=str)
def test_creative_without_a_size_gives_no_w_or_h(ids: tuple[str, str]) -> None:
    assert {"w", "h"} & set(_one_bid(ids)) == set()


def test_bid_carries_the_creative_adomain_and_cat() -> None:
    bid = _one_bid(BANNER)
    assert (bid["adomain"], bid["cat"]) == (["brightleaf-insurance.example"], ["IAB13-7"])


def test_bid_carries_attr_only_when_the_creative_has_some() -> None:
    assert (_one_bid(WITH_ATTR).get("attr"), _one_bid(BANNER).get("attr")) == ([13], None)


# ---------------------------------------------------------------------- notice URLs


def _claims(url: str, price: str = "0.5") -> Any:
    query = _query(url.replace(MACRO, price))
    return parse_notice(query, SIGNER, CLOCK.wall_ms(), 3_600_000).claims


@pytest.mark.parametrize(("key", "path"), [("nurl", "/notice/win"), ("burl", "/notice/bill")])
def test_notice_url_points_at_its_endpoint(key: str, path: str) -> None:
    assert _one_bid()[key].startswith(f"{BASE}{path}?t=k1.")


@pytest.mark.parametrize("key", ["nurl", "burl"])
def test_notice_url_carries_the_macros_verbatim(key: str) -> None:
    assert _one_bid()[key].endswith(f"&p={MACRO}&c=${{AUCTION_CURRENCY}}")


def test_win_and_billing_urls_carry_the_same_token() -> None:
    bid = _one_bid()
    assert _query(bid["nurl"])["t"] == _query(bid["burl"])["t"]


def test_token_names_the_bid_it_was_made_for() -> None:
    claims = _claims(_one_bid(NATIVE, price=1_234_567)["burl"])
    assert (claims.imp_id, claims.campaign_id, claims.creative_id) == ("1", *NATIVE)
    assert (claims.advertiser, claims.max_price_cpm_micros) == (
        CAMPAIGNS[NATIVE[0]].advertiser,
        1_234_567,
    )


def test_token_carries_the_user_and_household_keys() -> None:
    claims = _claims(_one_bid()["nurl"])
    assert (claims.user_key, claims.household_key) == ("b:user-1", "h:4:192.0.2.1")


def test_token_carries_the_issue_time() -> None:
    assert _claims(_one_bid()["nurl"]).issued_ms == CLOCK.wall_ms()


def test_a_bid_that_passed_without_a_cap_check_carries_the_unchecked_mark() -> None:
    request = _request("1", "2")
    ctx = Context(
        request=request,
        ssp="ssp-1",
        received=0.0,
        priced=[_option(request.imps[0], BANNER), _option(request.imps[1], NATIVE)],
        caps_unchecked=frozenset({NATIVE}),
    )
    response = orjson.loads(build_response(ctx, "bidsim-seat", URLS, bid_id_source()))
    marks = {
        bid["impid"]: _claims(bid["nurl"]).caps_unchecked for bid in response["seatbid"][0]["bid"]
    }
    assert marks == {"1": False, "2": True}


def test_each_bid_gets_its_own_snowflake_id() -> None:
    request = _request(*(str(n) for n in range(5)))
    bids = _bids(request, *(_option(imp) for imp in request.imps))
    snowflakes = {_claims(bid["nurl"]).bid_id for bid in bids}
    assert len(snowflakes) == 5 and {decode(s).worker for s in snowflakes} == {9}


def test_no_snowflake_id_means_no_response() -> None:
    urls = NoticeUrls(BASE, SIGNER, Snowflake(CLOCK).next_id, CLOCK)  # never granted an id
    request = _request()
    with pytest.raises(IdsUnavailable):
        _response(request, _option(request.imps[0]), urls=urls)


@given(request_id=st.text(min_size=1, max_size=20), imp_id=st.text(min_size=1, max_size=20))
def test_any_imp_id_round_trips_through_the_token(request_id: str, imp_id: str) -> None:
    request = _request(imp_id, request_id=request_id)
    [bid] = _bids(request, _option(request.imps[0], BANNER, 1_234_567))
    assert _claims(bid["nurl"]).imp_id == imp_id


@given(micros=st.integers(1, 1_000_000_000))
def test_notice_url_parses_back_to_its_bid_once_the_exchange_fills_the_price(micros: int) -> None:
    bid = _one_bid(price=micros)
    url = bid["burl"].replace(MACRO, repr(bid["price"]))
    notice = parse_notice(_query(url), SIGNER, CLOCK.wall_ms(), 3_600_000)
    assert (notice.claims.max_price_cpm_micros, notice.clearing_price_cpm_micros) == (
        micros,
        micros,
    )
