"""Stage 3, eligibility: one behaviour per test, then the corpus and a property test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from bidder.core.campaign_docs import campaigns_from_docs, load_campaign_file
from bidder.core.campaigns import Campaign
from bidder.core.nobid import NoBid
from bidder.decide.eligibility import (
    CampaignIndex,
    Candidate,
    EligibilityPolicy,
    domain_keys,
    select,
)
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from bidder.openrtb.view import BidRequest

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[3]
CAMPAIGNS = REPO / "fixtures" / "openrtb" / "campaigns.json"


def openrtb_corpus() -> Path:
    """The shared public OpenRTB examples, beside the repository (never copied in)."""
    return REPO.parent / "shared" / "external" / "openrtb"


def _creative(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": "cr-mrec", "format": "banner", "w": 300, "h": 250}
    doc["adomain"] = ["acme.example"]
    return {**doc, "markup": "<img>", **fields}


_ADV = ["acme.example"]
_VIDEO = {"id": "cr-video", "format": "video", "mime": "video/mp4", "duration_s": 30}
_VIDEO |= {"adomain": _ADV, "markup": "<VAST version='4.2'/>"}
_NATIVE = {"id": "cr-native", "format": "native", "adomain": _ADV, "markup": "{}"}
_AUDIO = {"id": "cr-audio", "format": "audio", "mime": "audio/mpeg", "duration_s": 30}
_AUDIO |= {"adomain": _ADV, "markup": "<VAST/>"}


def _campaign(**fields: Any) -> Campaign:
    doc = {
        "id": "c1",
        "advertiser": "Acme",
        "daily_budget_micros": 1_000_000_000,
        "base_bid_cpm_micros": 500_000,
        "max_bid_cpm_micros": 2_000_000,
        "creatives": [_creative()],
    }
    return campaigns_from_docs([{**doc, **fields}])[0]


def _request(*imps: dict[str, Any], **fields: Any) -> BidRequest:
    doc: dict[str, Any] = {
        "id": "r1",
        "imp": list(imps) or [{"id": "1", "banner": {"w": 300, "h": 250}, "bidfloor": 0.5}],
        "site": {"domain": "news.example"},
        "device": {"devicetype": 2, "geo": {"country": "USA"}},
    }
    return parse_bid_request(orjson.dumps({**doc, **fields}))


def _select(
    request: BidRequest, *campaigns: Campaign, policy: EligibilityPolicy | None = None
) -> list[Candidate] | NoBid:
    return select(request, CampaignIndex(campaigns), policy or EligibilityPolicy())


def _triples(candidates: list[Candidate]) -> list[tuple[str, str, str]]:
    return [(c.imp.id, c.campaign.id, c.creative.id) for c in candidates]


def _ids(result: list[Candidate] | NoBid) -> list[tuple[str, str, str]] | NoBid:
    return result if isinstance(result, NoBid) else _triples(result)


# --------------------------------------------------------------------- request-level


def test_matching_request_yields_a_candidate() -> None:
    assert _ids(_select(_request(), _campaign())) == [("1", "c1", "cr-mrec")]


def test_candidate_carries_the_parsed_imp_campaign_and_creative() -> None:
    request, campaign = _request(), _campaign()
    [candidate] = _select(request, campaign)  # type: ignore[misc]
    assert candidate == Candidate(request.imps[0], campaign, campaign.creatives[0])


def test_test_request_gets_no_bid_by_default() -> None:
    assert _select(_request(test=1), _campaign()) is NoBid.TEST_REQUEST


def test_test_request_bids_when_policy_allows() -> None:
    policy = EligibilityPolicy(bid_on_test=True)
    assert _ids(_select(_request(test=1), _campaign(), policy=policy)) == [("1", "c1", "cr-mrec")]


def test_request_currency_without_usd_is_refused() -> None:
    assert _select(_request(cur=["EUR"]), _campaign()) is NoBid.CURRENCY


def test_request_currency_list_including_usd_is_accepted() -> None:
    assert isinstance(_select(_request(cur=["EUR", "USD"]), _campaign()), list)


def test_request_currency_is_case_insensitive() -> None:
    assert isinstance(_select(_request(cur=["usd"]), _campaign()), list)


def test_imp_floor_in_another_currency_is_refused() -> None:
    imp = {"id": "1", "banner": {"w": 300, "h": 250}, "bidfloorcur": "EUR"}
    assert _select(_request(imp), _campaign()) is NoBid.CURRENCY


def test_only_the_usd_imp_of_a_mixed_request_gets_candidates() -> None:
    request = _request(
        {"id": "eur", "banner": {"w": 300, "h": 250}, "bidfloorcur": "EUR"},
        {"id": "usd", "banner": {"w": 300, "h": 250}, "bidfloorcur": "usd"},
    )
    assert _ids(_select(request, _campaign())) == [("usd", "c1", "cr-mrec")]


def test_empty_index_gives_no_campaigns() -> None:
    assert _select(_request()) is NoBid.NO_CAMPAIGNS


def test_paused_campaigns_are_not_indexed() -> None:
    index = CampaignIndex([_campaign(status="paused")])
    assert len(index) == 0
    assert select(_request(), index, EligibilityPolicy()) is NoBid.NO_CAMPAIGNS


def test_index_finds_creatives_of_paused_campaigns_for_win_notices() -> None:
    paused = _campaign(status="paused")
    index = CampaignIndex([paused])
    assert index.creative("c1", "cr-mrec") == paused.creatives[0]
    assert index.creative("c1", "nope") is None


# ------------------------------------------------------------------- audience checks


def test_channel_not_targeted_is_refused() -> None:
    assert _select(_request(), _campaign(targeting={"channels": ["app"]})) is NoBid.CHANNEL


def test_request_without_site_app_or_dooh_fails_channel_targeting() -> None:
    request = _request(site=None)
    assert request.channel == "none"
    assert _select(request, _campaign(targeting={"channels": ["site"]})) is NoBid.CHANNEL


def test_country_not_targeted_is_refused() -> None:
    assert _select(_request(), _campaign(targeting={"countries": ["CAN"]})) is NoBid.GEO


def test_unknown_country_fails_country_targeting() -> None:
    request = _request(device={"devicetype": 2})
    assert _select(request, _campaign(targeting={"countries": ["USA"]})) is NoBid.GEO


def test_unknown_country_matches_a_campaign_without_country_targeting() -> None:
    assert isinstance(_select(_request(device={}), _campaign()), list)


def test_country_no_campaign_names_behaves_like_unknown() -> None:
    campaigns = (_campaign(targeting={"countries": ["USA"]}), _campaign(id="any"))
    result = _select(_request(device={"geo": {"country": "ZZZ"}}), *campaigns)
    assert _ids(result) == [("1", "any", "cr-mrec")]


def test_device_type_not_targeted_is_refused() -> None:
    campaign = _campaign(targeting={"device_types": ["phone"]})
    assert _select(_request(), campaign) is NoBid.DEVICE


def test_missing_device_type_fails_device_targeting() -> None:
    request = _request(device={"geo": {"country": "USA"}})
    assert _select(request, _campaign(targeting={"device_types": ["pc"]})) is NoBid.DEVICE


def test_legacy_mobile_tablet_code_matches_phone_targeting() -> None:
    request = _request(device={"devicetype": 1})
    assert isinstance(_select(request, _campaign(targeting={"device_types": ["phone"]})), list)


def test_phone_matches_legacy_mobile_tablet_targeting() -> None:
    request = _request(device={"devicetype": 4})
    campaign = _campaign(targeting={"device_types": ["mobile_tablet"]})
    assert isinstance(_select(request, campaign), list)


# ------------------------------------------------------------------ sites and apps


@pytest.mark.parametrize("domain", ["news.example", "www.news.example", "live.news.example"])
def test_allowed_domain_matches_itself_and_subdomains(domain: str) -> None:
    campaign = _campaign(targeting={"allow_domains": ["news.example"]})
    assert isinstance(_select(_request(site={"domain": domain}), campaign), list)


def test_domain_not_on_the_allow_list_is_refused() -> None:
    campaign = _campaign(targeting={"allow_domains": ["news.example"]})
    request = _request(site={"domain": "badnews.example"})
    assert _select(request, campaign) is NoBid.BLOCKED_SITE


def test_blocked_domain_blocks_its_subdomains() -> None:
    campaign = _campaign(targeting={"block_domains": ["news.example"]})
    request = _request(site={"domain": "www.sport.news.example"})
    assert _select(request, campaign) is NoBid.BLOCKED_SITE


def test_site_domain_falls_back_to_the_page_host() -> None:
    campaign = _campaign(targeting={"block_domains": ["news.example"]})
    request = _request(site={"page": "https://www.news.example/story?id=1"})
    assert _select(request, campaign) is NoBid.BLOCKED_SITE


def test_blocked_bundle_is_refused() -> None:
    campaign = _campaign(targeting={"block_bundles": ["com.example.game7"]})
    request = _request(site=None, app={"bundle": "com.example.game7"})
    assert _select(request, campaign) is NoBid.BLOCKED_SITE


def test_domain_allow_list_alone_keeps_a_campaign_off_apps() -> None:
    campaign = _campaign(targeting={"allow_domains": ["news.example"]})
    request = _request(site=None, app={"bundle": "com.example.news1"})
    assert _select(request, campaign) is NoBid.BLOCKED_SITE


def test_allowed_bundle_matches() -> None:
    targeting = {"allow_domains": ["news.example"], "allow_bundles": ["com.example.news1"]}
    request = _request(site=None, app={"bundle": "com.example.news1"})
    assert isinstance(_select(request, _campaign(targeting=targeting)), list)


def test_domain_keys_stop_above_the_top_level_domain() -> None:
    assert domain_keys("www.a.b.example") == ("a.b.example", "b.example")
    assert domain_keys("localhost") == ("localhost",)


# ------------------------------------------------------------------- format and size


def test_banner_size_mismatch_is_refused() -> None:
    imp = {"id": "1", "banner": {"w": 728, "h": 90}}
    assert _select(_request(imp), _campaign()) is NoBid.FORMAT


def test_banner_matches_any_size_in_format_list() -> None:
    imp = {"id": "1", "banner": {"format": [{"w": 728, "h": 90}, {"w": 300, "h": 250}]}}
    assert _ids(_select(_request(imp), _campaign())) == [("1", "c1", "cr-mrec")]


def test_banner_matches_every_fitting_creative_once() -> None:
    creatives = [
        _creative(),
        _creative(id="cr-board", w=728, h=90),
        _creative(id="cr-sky", w=160, h=600),
    ]
    imp = {"id": "1", "banner": {"format": [{"w": 728, "h": 90}, {"w": 300, "h": 250}]}}
    result = _ids(_select(_request(imp), _campaign(creatives=creatives)))
    assert result == [("1", "c1", "cr-board"), ("1", "c1", "cr-mrec")]


def test_banner_size_range_accepts_creatives_inside_it() -> None:
    creatives = [_creative(), _creative(id="cr-board", w=728, h=90)]
    imp = {"id": "1", "banner": {"wmin": 250, "wmax": 400, "hmin": 200, "hmax": 300}}
    assert _ids(_select(_request(imp), _campaign(creatives=creatives))) == [("1", "c1", "cr-mrec")]


def test_banner_size_range_rejects_creatives_outside_it() -> None:
    imp = {"id": "1", "banner": {"wmin": 700, "wmax": 800, "hmin": 50, "hmax": 100}}
    assert _select(_request(imp), _campaign()) is NoBid.FORMAT


def test_sizeless_interstitial_accepts_full_screen_creatives() -> None:
    creatives = [_creative(id="cr-full", w=320, h=480), _creative(id="cr-board", w=728, h=90)]
    imp = {"id": "1", "instl": 1, "banner": {}}
    assert _ids(_select(_request(imp), _campaign(creatives=creatives))) == [("1", "c1", "cr-full")]


def test_sizeless_interstitial_rejects_other_sizes() -> None:
    imp = {"id": "1", "instl": 1, "banner": {}}
    campaign = _campaign(creatives=[_creative(w=728, h=90)])
    assert _select(_request(imp), campaign) is NoBid.FORMAT


def test_video_creative_matches_video_imp() -> None:
    imp = {"id": "1", "video": {"mimes": ["video/mp4"], "minduration": 5, "maxduration": 30}}
    assert _ids(_select(_request(imp), _campaign(creatives=[_VIDEO]))) == [("1", "c1", "cr-video")]


def test_video_mime_not_accepted_is_refused() -> None:
    imp = {"id": "1", "video": {"mimes": ["video/webm"]}}
    assert _select(_request(imp), _campaign(creatives=[_VIDEO])) is NoBid.FORMAT


def test_video_longer_than_maxduration_is_refused() -> None:
    imp = {"id": "1", "video": {"mimes": ["video/mp4"], "maxduration": 15}}
    assert _select(_request(imp), _campaign(creatives=[_VIDEO])) is NoBid.FORMAT


def test_video_shorter_than_minduration_is_refused() -> None:
    imp = {"id": "1", "video": {"mimes": ["video/mp4"], "minduration": 31}}
    assert _select(_request(imp), _campaign(creatives=[_VIDEO])) is NoBid.FORMAT


def test_video_maxduration_zero_means_not_stated() -> None:
    imp = {"id": "1", "video": {"mimes": ["video/mp4"], "maxduration": 0}}
    assert isinstance(_select(_request(imp), _campaign(creatives=[_VIDEO])), list)


def test_banner_creative_does_not_match_video_imp() -> None:
    imp = {"id": "1", "video": {"mimes": ["video/mp4"]}}
    assert _select(_request(imp), _campaign()) is NoBid.FORMAT


def test_native_imp_matches_any_native_creative() -> None:
    imp = {"id": "1", "native": {"request": "{}", "ver": "1.2"}}
    creatives = [_creative(), _NATIVE]
    assert _ids(_select(_request(imp), _campaign(creatives=creatives))) == [
        ("1", "c1", "cr-native")
    ]


def test_audio_matches_on_mime() -> None:
    matching = {"id": "1", "audio": {"mimes": ["audio/mpeg"]}}
    other = {"id": "1", "audio": {"mimes": ["audio/ogg"]}}
    campaign = _campaign(creatives=[_AUDIO])
    assert _ids(_select(_request(matching), campaign)) == [("1", "c1", "cr-audio")]
    assert _select(_request(other), campaign) is NoBid.FORMAT


def test_multi_format_imp_matches_creatives_of_each_format() -> None:
    imp = {"id": "1", "banner": {"w": 300, "h": 250}, "video": {"mimes": ["video/mp4"]}}
    campaign = _campaign(creatives=[_creative(), _VIDEO])
    result = _ids(_select(_request(imp), campaign))
    assert result == [("1", "c1", "cr-mrec"), ("1", "c1", "cr-video")]


# ------------------------------------------------------------------ creative blocks


def test_bcat_tier_one_blocks_its_subcategories() -> None:
    campaign = _campaign(creatives=[_creative(cat=["IAB7-39"])])
    assert _select(_request(bcat=["IAB7"]), campaign) is NoBid.BLOCKED_CREATIVE


def test_bcat_prefix_stops_at_the_hyphen() -> None:
    campaign = _campaign(creatives=[_creative(cat=["IAB13-7"])])
    assert isinstance(_select(_request(bcat=["IAB1"]), campaign), list)


def test_bcat_subcategory_does_not_block_its_parent() -> None:
    campaign = _campaign(creatives=[_creative(cat=["IAB7"])])
    assert isinstance(_select(_request(bcat=["IAB7-39"]), campaign), list)


def test_badv_blocks_subdomains_of_the_blocked_advertiser() -> None:
    campaign = _campaign(creatives=[_creative(adomain=["shop.acme.example"])])
    assert _select(_request(badv=["acme.example"]), campaign) is NoBid.BLOCKED_CREATIVE


def test_badv_is_case_insensitive_and_ignores_www() -> None:
    campaign = _campaign(creatives=[_creative(adomain=["acme.example"])])
    assert _select(_request(badv=["WWW.Acme.Example"]), campaign) is NoBid.BLOCKED_CREATIVE


def test_badv_subdomain_does_not_block_the_parent_advertiser() -> None:
    campaign = _campaign(creatives=[_creative(adomain=["acme.example"])])
    assert isinstance(_select(_request(badv=["shop.acme.example"]), campaign), list)


def test_battr_blocks_creative_with_that_attribute() -> None:
    imp = {"id": "1", "banner": {"w": 300, "h": 250, "battr": [3, 6]}}
    campaign = _campaign(creatives=[_creative(attr=[6])])
    assert _select(_request(imp), campaign) is NoBid.BLOCKED_CREATIVE


def test_battr_of_another_format_does_not_apply() -> None:
    imp = {"id": "1", "banner": {"w": 300, "h": 250}, "video": {"battr": [6]}}
    campaign = _campaign(creatives=[_creative(attr=[6])])
    assert isinstance(_select(_request(imp), campaign), list)


def test_blocked_creative_leaves_its_siblings_eligible() -> None:
    creatives = [_creative(cat=["IAB8-5"]), _creative(id="cr-clean", cat=["IAB8-9"])]
    result = _select(_request(bcat=["IAB8-5"]), _campaign(creatives=creatives))
    assert _ids(result) == [("1", "c1", "cr-clean")]


# ------------------------------------------------------------- private auction, floor


def _pmp_imp(private: int, *deals: str) -> dict[str, Any]:
    pmp = {"private_auction": private, "deals": [{"id": deal} for deal in deals]}
    return {"id": "1", "banner": {"w": 300, "h": 250}, "pmp": pmp}


def test_private_auction_without_our_deal_is_refused() -> None:
    campaign = _campaign(deals=["deal-b"])
    assert _select(_request(_pmp_imp(1, "deal-a")), campaign) is NoBid.PRIVATE_AUCTION


def test_private_auction_with_our_deal_is_accepted() -> None:
    campaign = _campaign(deals=["deal-b"])
    assert isinstance(_select(_request(_pmp_imp(1, "deal-a", "deal-b")), campaign), list)


def test_open_auction_with_deals_takes_any_campaign() -> None:
    assert isinstance(_select(_request(_pmp_imp(0, "deal-a")), _campaign()), list)


def test_floor_above_max_bid_is_refused() -> None:
    imp = {"id": "1", "banner": {"w": 300, "h": 250}, "bidfloor": 2.01}
    assert _select(_request(imp), _campaign()) is NoBid.FLOOR


def test_floor_equal_to_max_bid_is_accepted() -> None:
    imp = {"id": "1", "banner": {"w": 300, "h": 250}, "bidfloor": 2.0}
    assert isinstance(_select(_request(imp), _campaign()), list)


# ---------------------------------------------------------------- furthest reason


@pytest.mark.parametrize(
    ("near", "far", "reason"),
    [
        ({"targeting": {"channels": ["app"]}}, {"targeting": {"countries": ["CAN"]}}, NoBid.GEO),
        ({"targeting": {"countries": ["CAN"]}}, {"creatives": [_VIDEO]}, NoBid.FORMAT),
        ({"creatives": [_VIDEO]}, {"max_bid_cpm_micros": 600_000}, NoBid.FLOOR),
        ({"targeting": {"block_domains": ["news.example"]}}, {"deals": []}, NoBid.PRIVATE_AUCTION),
    ],
)
def test_no_bid_names_the_check_that_got_furthest(
    near: dict[str, Any], far: dict[str, Any], reason: NoBid
) -> None:
    imp = _pmp_imp(1, "deal-a") if reason is NoBid.PRIVATE_AUCTION else None
    request = _request(imp or {"id": "1", "banner": {"w": 300, "h": 250}, "bidfloor": 1.0})
    campaigns = (_campaign(id="near", **near), _campaign(id="far", **far))
    assert _select(request, *campaigns) is reason
    assert _select(request, *reversed(campaigns)) is reason


def test_furthest_reason_counts_the_creative_checks_before_the_floor() -> None:
    # Both the format and the floor fail for this campaign; format comes first.
    imp = {"id": "1", "banner": {"w": 728, "h": 90}, "bidfloor": 9.0}
    assert _select(_request(imp), _campaign()) is NoBid.FORMAT


def test_currency_of_one_imp_loses_to_a_later_reason_on_another() -> None:
    imps = [
        {"id": "eur", "banner": {"w": 300, "h": 250}, "bidfloorcur": "EUR"},
        {"id": "usd", "banner": {"w": 728, "h": 90}},
    ]
    assert _select(_request(*imps), _campaign()) is NoBid.FORMAT


# --------------------------------------------------------------------- multi-imp


def test_each_imp_gets_its_own_candidates() -> None:
    imps: list[dict[str, Any]] = [
        {"id": "top", "banner": {"w": 728, "h": 90}},
        {"id": "side", "banner": {"w": 300, "h": 250}},
        {"id": "low", "banner": {"w": 300, "h": 250}, "bidfloor": 50.0},
    ]
    creatives = [_creative(), _creative(id="cr-board", w=728, h=90)]
    campaigns = (_campaign(creatives=creatives), _campaign(id="c2"))
    result = _ids(_select(_request(*imps), *campaigns))
    assert result == [
        ("top", "c1", "cr-board"),
        ("side", "c1", "cr-mrec"),
        ("side", "c2", "cr-mrec"),
    ]


# ----------------------------------------------------------------- corpus, property


def test_spec_simple_banner_gets_a_candidate_from_the_bundled_campaigns() -> None:
    path = openrtb_corpus() / "requests" / "001_iab26_spec-6.2.1-simple-banner.json"
    request = parse_bid_request(path.read_bytes())
    index = CampaignIndex(load_campaign_file(CAMPAIGNS))
    result = select(request, index, EligibilityPolicy())
    assert isinstance(result, list)
    assert result
    assert {c.imp.id for c in result} == {"1"}


# Small OpenRTB request documents in the generator's vocabulary, mostly valid ones.
_battr = st.lists(st.integers(1, 17), max_size=3)
_sizes = st.sampled_from([(300, 250), (320, 50), (728, 90), (320, 480), (160, 600)])
_banner = st.fixed_dictionaries(
    {},
    optional={
        "format": st.lists(_sizes.map(lambda s: {"w": s[0], "h": s[1]}), min_size=1, max_size=3),
        "wmax": st.integers(0, 1000),
        "hmax": st.integers(0, 1000),
        "battr": _battr,
    },
)
_video = st.fixed_dictionaries(
    {},
    optional={
        "mimes": st.lists(st.sampled_from(["video/mp4", "video/webm"]), max_size=2),
        "minduration": st.integers(0, 60),
        "maxduration": st.integers(0, 60),
        "battr": _battr,
    },
)
_media = st.one_of(
    _sizes.flatmap(lambda s: _banner.map(lambda b: {"banner": {"w": s[0], "h": s[1], **b}})),
    st.just({"banner": {}, "instl": 1}),
    _video.map(lambda v: {"video": v}),
    st.just({"native": {"request": "{}"}}),
    st.just({"audio": {"mimes": ["audio/mpeg"]}}),
    st.fixed_dictionaries({"banner": _banner, "video": _video}),
)
_deals = st.lists(st.fixed_dictionaries({"id": st.sampled_from(["d1", "alpha-auto-1042"])}))
_imp_extras = st.fixed_dictionaries(
    {},
    optional={
        "bidfloor": st.floats(0, 30),
        "bidfloorcur": st.sampled_from(["USD", "EUR", "usd"]),
        "pmp": st.fixed_dictionaries({"private_auction": st.integers(0, 1), "deals": _deals}),
    },
)
_imps = st.lists(st.tuples(_media, _imp_extras), min_size=1, max_size=3).map(
    lambda pairs: [{"id": str(n), **m, **x} for n, (m, x) in enumerate(pairs)]
)
_placement: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.sampled_from(["news-3.example", "www.sports-1.example", "A.B"]).map(
        lambda d: {"site": {"domain": d}}
    ),
    st.sampled_from(["com.example.game7", "tv.example.channel1"]).map(
        lambda b: {"app": {"bundle": b}}
    ),
    st.just({}),
)
_device = st.fixed_dictionaries(
    {},
    optional={
        "devicetype": st.integers(0, 9),
        "geo": st.fixed_dictionaries(
            {"country": st.sampled_from(["USA", "CAN", "DEU", "JPN", "ZZZ", "us", ""])}
        ),
    },
)
_request_docs = st.builds(
    lambda imps, placement, extras: {"id": "r", "imp": imps, **placement, **extras},
    _imps,
    _placement,
    st.fixed_dictionaries(
        {},
        optional={
            "device": _device,
            "cur": st.lists(st.sampled_from(["USD", "EUR"]), max_size=2),
            "test": st.integers(0, 1),
            "bcat": st.lists(st.sampled_from(["IAB8", "IAB8-5", "IAB9-30", "IAB1"]), max_size=3),
            "badv": st.lists(st.sampled_from(["rival-4.example", "harbor-bank.example"])),
        },
    ),
)
_FIXTURE_INDEX = CampaignIndex(load_campaign_file(CAMPAIGNS))


@given(_request_docs, st.booleans())
def test_select_never_raises_and_candidates_respect_the_floor(
    doc: dict[str, Any], bid_on_test: bool
) -> None:
    try:
        request = parse_bid_request(orjson.dumps(doc))
    except InvalidRequest:
        reject()
    result = select(request, _FIXTURE_INDEX, EligibilityPolicy(bid_on_test=bid_on_test))
    if doc.get("test") == 1 and not bid_on_test:
        assert result is NoBid.TEST_REQUEST
    elif doc.get("cur") and "USD" not in doc["cur"]:
        assert result is NoBid.CURRENCY
    elif isinstance(result, list):
        assert len(result) > 0, "no candidate is a NoBid reason, never an empty list"
    else:
        assert result is not NoBid.TEST_REQUEST
    for candidate in result if isinstance(result, list) else ():
        assert candidate.campaign.max_bid_cpm_micros >= candidate.imp.bidfloor_micros
        assert getattr(candidate.imp, candidate.creative.format) is not None


_CHECK_ORDER = [
    NoBid.TEST_REQUEST,
    NoBid.CURRENCY,
    NoBid.CHANNEL,
    NoBid.GEO,
    NoBid.DEVICE,
    NoBid.BLOCKED_SITE,
    NoBid.FORMAT,
    NoBid.BLOCKED_CREATIVE,
    NoBid.PRIVATE_AUCTION,
    NoBid.FLOOR,
]
_ACTIVE = [c for c in load_campaign_file(CAMPAIGNS) if c.active]


@given(_request_docs)
def test_whole_index_agrees_with_campaigns_taken_one_at_a_time(doc: dict[str, Any]) -> None:
    try:
        request = parse_bid_request(orjson.dumps(doc))
    except InvalidRequest:
        reject()
    alone = [_select(request, campaign) for campaign in _ACTIVE]
    together = select(request, _FIXTURE_INDEX, EligibilityPolicy())
    candidates = [c for result in alone if isinstance(result, list) for c in result]
    if candidates:
        assert isinstance(together, list)
        assert sorted(_triples(together)) == sorted(_triples(candidates))
    else:
        reasons = [r for r in alone if isinstance(r, NoBid)]
        assert together is max(reasons, key=_CHECK_ORDER.index)
