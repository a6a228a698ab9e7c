"""Privacy rules: TCF v2 decoding and the vendor/purpose rules, COPPA, US privacy, GPP."""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.bidstream.population import population
from bidder.bidstream.privacy import user_tcf
from bidder.decide.consent import ALLOW, CHILD, CONTEXTUAL, REFUSE, ConsentPolicy, evaluate
from bidder.openrtb.request import parse_bid_request
from bidder.openrtb.tcf import PubRestriction, TcfConsent, TcfError, decode_core, vendor_view
from bidder.openrtb.tcf_encode import encode_tc_string
from bidder.openrtb.view import BidRequest
from tests.bidder.tcf_strategies import tc_consents

pytestmark = pytest.mark.pure

POLICY = ConsentPolicy()
US = 999
DAY_DS = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 10)
EVERYTHING = frozenset(range(1, 12))


def tc(
    purposes: frozenset[int] = EVERYTHING,
    vendors: frozenset[int] = frozenset({7, US}),
    li_purposes: frozenset[int] = frozenset(),
    li_vendors: frozenset[int] = frozenset(),
    restrictions: tuple[PubRestriction, ...] = (),
) -> str:
    consent = dataclasses.replace(
        user_tcf(population().user(0), DAY_DS),
        purposes_consent=purposes,
        vendor_consents=vendors,
        purposes_li=li_purposes,
        vendor_li=li_vendors,
        pub_restrictions=restrictions,
    )
    return encode_tc_string(consent)


def request(
    regs: dict[str, Any] | None = None, user: dict[str, Any] | None = None, country: str = "DEU"
) -> BidRequest:
    doc: dict[str, Any] = {
        "id": "r",
        "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}],
        "site": {"domain": "news-1.example"},
        "device": {"geo": {"country": country}},
    }
    if regs is not None:
        doc["regs"] = regs
    if user is not None:
        doc["user"] = user
    return parse_bid_request(orjson.dumps(doc))


def gdpr(consent: str | None) -> BidRequest:
    return request({"gdpr": 1}, {"consent": consent} if consent is not None else None)


# -- GDPR and TCF ------------------------------------------------------------------------------


def test_full_consent_allows_a_personalized_bid() -> None:
    assert evaluate(gdpr(tc()), POLICY) == ALLOW


def test_gdpr_without_a_consent_string_is_no_consent() -> None:
    assert evaluate(gdpr(None), POLICY) == REFUSE


@pytest.mark.parametrize("garbage", ["0", "undefined", "BOgarbage==", "CPXyz", "!!", "C" * 24])
def test_gdpr_with_an_unreadable_consent_string_is_no_consent(garbage: str) -> None:
    assert evaluate(gdpr(garbage), POLICY) == REFUSE


def test_our_vendor_left_out_is_no_consent() -> None:
    assert evaluate(gdpr(tc(vendors=frozenset({7, 1000}))), POLICY) == REFUSE


def test_a_missing_bid_purpose_is_no_consent() -> None:
    assert evaluate(gdpr(tc(purposes=EVERYTHING - {2})), POLICY) == REFUSE


def test_profile_purposes_refused_means_a_contextual_bid() -> None:
    assert evaluate(gdpr(tc(purposes=EVERYTHING - {3, 4})), POLICY) == CONTEXTUAL


def test_legitimate_interest_covers_purposes_2_and_7() -> None:
    text = tc(
        purposes=frozenset({1, 3, 4}), li_purposes=frozenset({2, 7}), li_vendors=frozenset({US})
    )
    assert evaluate(gdpr(text), POLICY) == ALLOW


def test_legitimate_interest_needs_our_vendor_li_bit() -> None:
    text = tc(
        purposes=frozenset({1, 3, 4}), li_purposes=frozenset({2, 7}), li_vendors=frozenset({5})
    )
    assert evaluate(gdpr(text), POLICY) == REFUSE


def test_legitimate_interest_never_covers_purpose_1() -> None:
    text = tc(
        purposes=frozenset({2, 3, 4, 7}), li_purposes=frozenset({1}), li_vendors=frozenset({US})
    )
    assert evaluate(gdpr(text), POLICY) == REFUSE


def test_a_publisher_restriction_can_forbid_a_purpose() -> None:
    text = tc(restrictions=(PubRestriction(7, 0, frozenset({US})),))
    assert evaluate(gdpr(text), POLICY) == REFUSE


def test_a_restriction_for_other_vendors_does_not_apply() -> None:
    text = tc(restrictions=(PubRestriction(7, 0, frozenset({1, 2, 3})),))
    assert evaluate(gdpr(text), POLICY) == ALLOW


def test_a_restriction_requiring_consent_rejects_legitimate_interest() -> None:
    text = tc(
        purposes=frozenset({1, 3, 4, 7}),
        li_purposes=frozenset({2}),
        li_vendors=frozenset({US}),
        restrictions=(PubRestriction(2, 1, frozenset({US})),),
    )
    assert evaluate(gdpr(text), POLICY) == REFUSE


def test_another_vendor_id_is_read_from_the_policy() -> None:
    text = tc(vendors=frozenset({7}))
    assert evaluate(gdpr(text), ConsentPolicy(vendor_id=7)) == ALLOW


def test_gdpr_zero_ignores_the_consent_string() -> None:
    assert evaluate(request({"gdpr": 0}, {"consent": "garbage"}), POLICY) == ALLOW


def test_absent_gdpr_applies_in_the_eea_and_uk() -> None:
    assert evaluate(request(country="FRA"), POLICY) == REFUSE
    assert evaluate(request(country="GBR"), POLICY) == REFUSE
    assert evaluate(request(country="USA"), POLICY) == ALLOW


def test_the_25_location_of_gdpr_and_consent_is_read() -> None:
    req = request({"ext": {"gdpr": 1}}, {"ext": {"consent": tc()}})
    assert evaluate(req, POLICY) == ALLOW


def test_the_generators_users_get_what_their_choice_says() -> None:
    pop = population()
    outcomes = set()
    for index in range(400):
        user = pop.user(index)
        outcome = evaluate(gdpr(encode_tc_string(user_tcf(user, DAY_DS))), POLICY)
        outcomes.add(outcome)
        if user.consent_draw < 0.80:
            assert outcome == ALLOW
        elif 0.80 <= user.consent_draw < 0.85 or user.consent_draw >= 0.90:
            assert outcome == REFUSE  # our vendor left out, or everything rejected
        else:
            assert outcome == CONTEXTUAL  # purposes 3 and 4 refused
    assert outcomes == {ALLOW, REFUSE, CONTEXTUAL}


# -- COPPA, US privacy, GPP --------------------------------------------------------------------


def test_coppa_is_a_no_bid_whatever_the_consent() -> None:
    assert evaluate(request({"coppa": 1, "gdpr": 1}, {"consent": tc()}), POLICY) == CHILD


@pytest.mark.parametrize(
    ("usp", "expected"),
    [
        ("1YNN", ALLOW),
        ("1---", ALLOW),
        ("1NNY", ALLOW),
        ("1YYN", CONTEXTUAL),
        ("1Y", CONTEXTUAL),
        ("2YNN", CONTEXTUAL),
        ("yes", CONTEXTUAL),
    ],
)
def test_us_privacy_opt_out_or_unreadable_means_no_personalization(
    usp: str, expected: object
) -> None:
    assert evaluate(request({"us_privacy": usp}, country="USA"), POLICY) == expected


def test_gpp_alone_means_no_personalization() -> None:
    assert evaluate(request({"gpp": "DBABLA~xyz.QA"}, country="USA"), POLICY) == CONTEXTUAL


def test_gpp_with_a_us_privacy_string_follows_that_string() -> None:
    req = request({"gpp": "DBABLA~xyz.QA", "us_privacy": "1YNN"}, country="USA")
    assert evaluate(req, POLICY) == ALLOW


def test_policy_rejects_impossible_ids() -> None:
    with pytest.raises(ValueError, match="vendor id"):
        ConsentPolicy(vendor_id=0)
    with pytest.raises(ValueError, match="purposes"):
        ConsentPolicy(bid_purposes=frozenset({25}))


# -- the decoder ---------------------------------------------------------------------------------

_consents = tc_consents(st.frozensets(st.integers(1, 3000), max_size=30), restrictions=True)


@settings(max_examples=100, database=None)
@given(_consents, st.booleans())
def test_decoding_round_trips_bit_fields_and_ranges(consent: TcfConsent, ranges: bool) -> None:
    text = encode_tc_string(consent, range_encoding=ranges)
    assert decode_core(text).to_consent() == consent


@settings(max_examples=100, database=None)
@given(_consents, st.integers(1, 3000))
def test_the_bid_path_view_agrees_with_the_full_decode(consent: TcfConsent, vendor: int) -> None:
    text = encode_tc_string(consent)
    view, core = vendor_view(text, vendor), decode_core(text)
    assert view.vendor_consent == (vendor in consent.vendor_consents)
    assert view.vendor_li == (vendor in consent.vendor_li)
    assert (view.purposes_consent, view.purposes_li) == (core.purposes_consent, core.purposes_li)
    covering = [
        (r.purpose, r.restriction_type) for r in consent.pub_restrictions if vendor in r.vendors
    ]
    assert list(view.restrictions) == covering


@settings(max_examples=300, database=None)
@given(st.text(max_size=80) | st.binary(max_size=60).map(lambda b: b.hex()))
def test_the_decoder_only_ever_raises_tcf_error(text: str) -> None:
    for decode in (decode_core, lambda t: vendor_view(t, US)):
        with contextlib.suppress(TcfError):
            decode(text)


def test_a_tcf_v1_string_is_refused() -> None:
    with pytest.raises(TcfError, match="version 1"):
        decode_core("BOEFEAyOEFEAyAHABDENAI4AAAB9vABAASA")


def test_segments_after_the_core_are_ignored() -> None:
    # A disclosed-vendors segment (type 1, 10 bits set) follows the core.
    assert vendor_view(tc() + ".IFoEUQQgAIQwgIwQABAEAAAAOIAACAIAAAAQ", US).vendor_consent
