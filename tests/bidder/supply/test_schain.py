"""Supply-chain verdicts for every schain shape, verified and not, and per-campaign policy.

The caches are plain dicts built here from small hand-written files, so nothing does
I/O; requests go through the real parser so both OpenRTB locations are exercised.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from bidder.core.campaign_docs import load_campaign_file
from bidder.core.nobid import NoBid
from bidder.decide.eligibility import Candidate
from bidder.openrtb.request import parse_bid_request
from bidder.openrtb.view import BidRequest
from bidder.supply.ads_txt import parse_ads_txt
from bidder.supply.schain import PASS, SupplyFiles, Verdict, apply_policy, verify
from bidder.supply.sellers_json import parse_sellers_json
from tests.bidder.conftest import CAMPAIGNS, EXTERNAL


def sellers(*rows: tuple[str, str], confidential: str | None = None) -> str:
    docs: list[dict[str, Any]] = [{"seller_id": sid, "seller_type": t} for sid, t in rows]
    if confidential is not None:
        docs.append(
            {"seller_id": confidential, "seller_type": "INTERMEDIARY", "is_confidential": 1}
        )
    return orjson.dumps({"version": "1.0", "sellers": docs}).decode()


FILES = SupplyFiles(
    sellers={
        "ssp.example": parse_sellers_json(
            sellers(("pub-1", "PUBLISHER"), ("res-9", "INTERMEDIARY"), confidential="hidden-1")
        ),
        "reseller.example": parse_sellers_json(sellers(("r-pub-1", "PUBLISHER"))),
    },
    ads_txt={
        "news.example": parse_ads_txt(
            "ssp.example, pub-1, DIRECT\n"
            "reseller.example, r-pub-1, DIRECT\n"
            "ssp.example, res-9, RESELLER\n"
            "ssp.example, hidden-1, RESELLER\n"
        ),
    },
    app_ads_txt={"com.example.app": parse_ads_txt("ssp.example, pub-1, DIRECT\n")},
)
DIRECT: list[dict[str, Any]] = [{"asi": "ssp.example", "sid": "pub-1", "hp": 1}]
RESOLD: list[dict[str, Any]] = [
    {"asi": "reseller.example", "sid": "r-pub-1", "hp": 1},
    {"asi": "ssp.example", "sid": "res-9", "hp": 1},
]


def chain(nodes: list[dict[str, Any]], complete: int = 1) -> dict[str, Any]:
    return {"ver": "1.0", "complete": complete, "nodes": nodes}


def bid_request(
    schain: dict[str, Any] | None, ortb: str = "2.6", site: str = "news.example"
) -> BidRequest:
    doc: dict[str, Any] = {"id": "r", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}]}
    if site.startswith("com."):
        doc["app"] = {"bundle": site}
    else:
        doc["site"] = {"domain": site}
    if schain is not None:
        doc["source"] = {"schain": schain} if ortb == "2.6" else {"ext": {"schain": schain}}
    return parse_bid_request(orjson.dumps(doc))


def check(request: BidRequest, files: SupplyFiles = FILES) -> Verdict:
    return verify(request.schain, request.domain, request.bundle, files)


BOTH_UNKNOWN = Verdict(NoBid.SCHAIN_UNKNOWN_SELLER, NoBid.SCHAIN_UNKNOWN_SELLER)
BOTH_UNAUTHORIZED = Verdict(NoBid.ADS_TXT_UNAUTHORIZED, NoBid.ADS_TXT_UNAUTHORIZED)

# -- each shape, verified and unverified --------------------------------------------------------


def test_26_source_schain_verified() -> None:
    assert check(bid_request(chain(DIRECT), "2.6")) == PASS


def test_26_source_schain_unverified() -> None:
    spoofed = [{"asi": "ssp.example", "sid": "pub-666"}]
    assert check(bid_request(chain(spoofed), "2.6")) == BOTH_UNKNOWN


def test_25_source_ext_schain_verified() -> None:
    assert check(bid_request(chain(RESOLD), "2.5")) == PASS


def test_25_source_ext_schain_unverified() -> None:
    spoofed = [RESOLD[0], {"asi": "ssp.example", "sid": "res-0"}]
    assert check(bid_request(chain(spoofed), "2.5")) == BOTH_UNKNOWN


def test_one_node_direct_chain_verified() -> None:
    assert check(bid_request(chain(DIRECT), site="com.example.app")) == PASS


def test_one_node_chain_listed_only_as_reseller_is_unauthorized() -> None:
    # res-9 is a known seller, but a one-node chain claims the publisher's own account.
    request = bid_request(chain([{"asi": "ssp.example", "sid": "res-9"}]))
    assert check(request) == BOTH_UNAUTHORIZED


def test_multi_node_reseller_chain_verified() -> None:
    assert check(bid_request(chain(RESOLD))) == PASS


def test_multi_node_chain_not_in_the_publishers_ads_txt_is_unauthorized() -> None:
    request = bid_request(chain(RESOLD), site="com.example.app")  # its app-ads.txt: direct only
    assert check(request) == BOTH_UNAUTHORIZED


def test_incomplete_chain_passes_lenient_and_fails_strict() -> None:
    assert check(bid_request(chain(RESOLD, complete=0))) == Verdict(None, NoBid.SCHAIN_INCOMPLETE)


def test_incomplete_chain_with_an_unknown_seller_fails_both() -> None:
    spoofed = [{"asi": "ssp.example", "sid": "nobody"}]
    assert check(bid_request(chain(spoofed, complete=0))) == BOTH_UNKNOWN


# -- what each policy accepts -------------------------------------------------------------------


def test_missing_chain_passes_lenient_and_fails_strict() -> None:
    assert check(bid_request(None)) == Verdict(None, NoBid.SCHAIN_MISSING)


def test_a_chain_without_usable_nodes_is_incomplete_for_both() -> None:
    for nodes in ([], [{"asi": "ssp.example"}], ["x"], [{"asi": "", "sid": "pub-1"}]):
        verdict = check(bid_request({"complete": 1, "nodes": nodes}))
        assert verdict == Verdict(NoBid.SCHAIN_INCOMPLETE, NoBid.SCHAIN_INCOMPLETE)


def test_a_seller_from_a_system_without_sellers_json_passes_only_lenient() -> None:
    nodes = [{"asi": "elsewhere.example", "sid": "x"}, DIRECT[0]]
    files = FILES._replace(ads_txt={"news.example": parse_ads_txt("ssp.example, pub-1, RESELLER")})
    assert check(bid_request(chain(nodes)), files) == Verdict(None, NoBid.SCHAIN_UNKNOWN_SELLER)


def test_a_confidential_seller_passes_only_lenient() -> None:
    nodes = [RESOLD[0], {"asi": "ssp.example", "sid": "hidden-1"}]
    assert check(bid_request(chain(nodes))) == Verdict(None, NoBid.SCHAIN_UNKNOWN_SELLER)


def test_a_seller_type_that_does_not_fit_its_position_passes_only_lenient() -> None:
    # res-9 is an INTERMEDIARY but sits first, where the publisher's own account belongs.
    nodes = [{"asi": "ssp.example", "sid": "res-9"}, {"asi": "ssp.example", "sid": "res-9"}]
    assert check(bid_request(chain(nodes))) == Verdict(None, NoBid.SCHAIN_UNKNOWN_SELLER)


def test_no_ads_txt_for_the_site_passes_only_lenient() -> None:
    verdict = check(bid_request(chain(DIRECT), site="other.example"))
    assert verdict == Verdict(None, NoBid.ADS_TXT_UNAVAILABLE)


def test_a_subdomain_is_covered_by_its_parents_ads_txt() -> None:
    assert check(bid_request(chain(DIRECT), site="www.news.example")) == PASS


def test_the_asi_is_matched_case_insensitively() -> None:
    assert check(bid_request(chain([{"asi": "SSP.Example", "sid": "pub-1"}]))) == PASS


def test_the_spec_simple_banner_passes_lenient() -> None:
    path = EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json"
    request = parse_bid_request(path.read_bytes())
    assert check(request, SupplyFiles({}, {}, {})).lenient is None


# -- applying the verdict per campaign ----------------------------------------------------------

_CAMPAIGNS = load_campaign_file(CAMPAIGNS)
_STRICT = next(c for c in _CAMPAIGNS if c.supply_policy == "strict")
_LENIENT = next(c for c in _CAMPAIGNS if c.supply_policy == "lenient")
_IMP = bid_request(None).imps[0]


def candidates(*campaigns: Any) -> list[Candidate]:
    return [Candidate(_IMP, c, c.creatives[0]) for c in campaigns]


def test_a_passing_verdict_keeps_every_candidate() -> None:
    both = candidates(_STRICT, _LENIENT)
    assert apply_policy(both, PASS) is both


def test_a_strict_only_failure_drops_strict_campaigns() -> None:
    kept = apply_policy(candidates(_STRICT, _LENIENT), Verdict(None, NoBid.SCHAIN_MISSING))
    assert isinstance(kept, list) and [c.campaign.id for c in kept] == [_LENIENT.id]


def test_a_strict_only_failure_with_only_strict_campaigns_names_the_reason() -> None:
    verdict = Verdict(None, NoBid.ADS_TXT_UNAVAILABLE)
    assert apply_policy(candidates(_STRICT), verdict) == NoBid.ADS_TXT_UNAVAILABLE


def test_a_lenient_failure_drops_everyone() -> None:
    assert apply_policy(candidates(_STRICT, _LENIENT), BOTH_UNAUTHORIZED) == (
        NoBid.ADS_TXT_UNAUTHORIZED
    )


def test_strict_is_read_from_the_campaign() -> None:
    relaxed = dataclasses.replace(_STRICT, supply_policy="lenient")
    kept = apply_policy(candidates(relaxed), Verdict(None, NoBid.SCHAIN_MISSING))
    assert isinstance(kept, list) and len(kept) == 1
