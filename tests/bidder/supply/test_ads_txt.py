"""ads.txt / app-ads.txt: the IAB examples parse, mess is skipped and reported, round trips."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.supply.ads_txt import AdsRecord, AdsTxt, parse_ads_txt, write_ads_txt
from tests.bidder.conftest import EXTERNAL

pytestmark = pytest.mark.pure

SUPPLY = EXTERNAL / "supply"
EXAMPLES = sorted(SUPPLY.glob("*ads.txt_*.txt"))


def test_the_iab_examples_are_there() -> None:
    assert len(EXAMPLES) == 13, f"expected the IAB ads.txt examples under {SUPPLY}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_iab_example_parses_without_skipping(path: Path) -> None:
    parsed = parse_ads_txt(path.read_bytes())
    assert parsed.skipped == ()
    assert parsed.records or parsed.variables


def test_direct_record_with_certification_id() -> None:
    parsed = parse_ads_txt((SUPPLY / "ads.txt_4.1_single-system-direct.txt").read_text())
    assert parsed.records == (AdsRecord("greenadexchange.com", "XF7342", "DIRECT", "5jyxf8k54"),)


def test_multiple_systems_and_resellers_with_a_comment_line() -> None:
    parsed = parse_ads_txt((SUPPLY / "ads.txt_4.3_multiple-systems-and-resellers.txt").read_text())
    assert [(r.domain, r.account_id, r.relationship) for r in parsed.records] == [
        ("greenadexchange.com", "12345", "DIRECT"),
        ("silverssp.com", "9675", "RESELLER"),
        ("blueadexchange.com", "XF436", "DIRECT"),
        ("orangeexchange.com", "45678", "RESELLER"),
        ("silverssp.com", "ABE679", "RESELLER"),
    ]
    assert parsed.relationship("silverssp.com", "9675") == "RESELLER"
    assert parsed.relationship("silverssp.com", "abe679") is None  # account ids keep case


def test_variables_are_read_by_upper_case_name() -> None:
    contact = parse_ads_txt((SUPPLY / "ads.txt_4.4_contact-records.txt").read_text())
    assert contact.variable("contact") == ("adops@example.com", "http://example.com/contact-us")
    manager = parse_ads_txt((SUPPLY / "ads.txt_4.8_managerdomain.txt").read_text())
    assert manager.variable("OWNERDOMAIN") == ("mediacompany.com",)
    assert manager.variable("MANAGERDOMAIN") == (
        "yellowmediamanager.com, FR",
        "bluemediamanager.com, US",
    )
    sub = parse_ads_txt((SUPPLY / "ads.txt_4.5_subdomain-referral_example.com.txt").read_text())
    assert sub.variable("SUBDOMAIN") == ("divisionone.example.com",)
    app = SUPPLY / "app-ads.txt_4.6_vMVPDB_inventorypartnerdomain.txt"
    assert parse_ads_txt(app.read_text()).variable("inventorypartnerdomain") == ("programmerA.com",)


def test_the_placeholder_line_authorizes_nobody_real() -> None:
    path = SUPPLY / "ads.txt_4.9_placeholder-no-authorized-sellers.txt"
    parsed = parse_ads_txt(path.read_text())
    assert parsed.records == (
        AdsRecord("placeholder.example.com", "placeholder", "DIRECT", "placeholder"),
    )


def test_real_world_mess_is_tolerated() -> None:
    text = "\ufeffAdX.com ,\tpub-1 , direct,, \r\nb.com, 2, Reseller # note\rc.com, 3, DIRECT;x=1\n"
    parsed = parse_ads_txt(text)
    assert parsed.records == (
        AdsRecord("adx.com", "pub-1", "DIRECT"),
        AdsRecord("b.com", "2", "RESELLER"),
        AdsRecord("c.com", "3", "DIRECT", None, "x=1"),
    )
    assert parsed.skipped == ()


def test_bad_lines_are_skipped_with_their_line_number_and_reason() -> None:
    text = (
        "a.com, 1\nnot a domain, 1, DIRECT\nb.com, , DIRECT\nc.com, 1, OWNER\n=x\nd.com, 1, DIRECT"
    )
    parsed = parse_ads_txt(text)
    assert parsed.records == (AdsRecord("d.com", "1", "DIRECT"),)
    assert parsed.skipped == (
        "line 1: fewer than three fields",
        "line 2: 'not a domain' is not a domain",
        "line 3: bad account id",
        "line 4: relationship 'OWNER' is not DIRECT or RESELLER",
        "line 5: '' is not a variable name",
    )


def test_an_html_error_page_yields_nothing_and_says_so() -> None:
    parsed = parse_ads_txt("<html>\n<body>Not found</body>\n</html>\n")
    assert parsed.records == () and len(parsed.skipped) == 3


def test_a_repeated_account_keeps_direct_over_reseller() -> None:
    parsed = parse_ads_txt("a.com, 1, RESELLER\na.com, 1, DIRECT\na.com, 1, RESELLER\n")
    assert parsed.records == (AdsRecord("a.com", "1", "DIRECT"),)
    assert parsed.relationship("a.com", "1") == "DIRECT"


_token = st.text(
    st.characters(blacklist_categories=("Cs", "Zs", "Cc", "Zl", "Zp"), blacklist_characters=",;#="),
    min_size=1,
    max_size=10,
)
_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_domain = st.lists(_label, min_size=2, max_size=3).map(".".join)
_records = st.builds(
    AdsRecord,
    domain=_domain,
    account_id=_token,
    relationship=st.sampled_from(["DIRECT", "RESELLER"]),
    cert_id=st.none() | _token,
    extension=st.none() | _token,
)
_variables = st.tuples(
    st.sampled_from(["CONTACT", "SUBDOMAIN", "OWNERDOMAIN", "MANAGERDOMAIN", "X-CUSTOM"]),
    _token,
)


def _unique(records: list[AdsRecord]) -> tuple[AdsRecord, ...]:
    return tuple({(r.domain, r.account_id): r for r in records}.values())


@settings(max_examples=200, database=None)
@given(st.text() | st.binary())
def test_the_parser_never_raises_on_arbitrary_input(text: str | bytes) -> None:
    parse_ads_txt(text)


@settings(max_examples=200, database=None)
@given(st.lists(_records, max_size=6).map(_unique), st.lists(_variables, max_size=3))
def test_what_is_written_parses_back_the_same(
    records: tuple[AdsRecord, ...], variables: list[tuple[str, str]]
) -> None:
    ads = AdsTxt(records=records, variables=tuple(variables))
    parsed = parse_ads_txt(write_ads_txt(ads))
    assert parsed == ads and parsed.skipped == ()


_lines = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.builds(
            lambda d, a, r: f"{d}, {a}, {r}",
            _domain,
            _token,
            st.sampled_from(["direct", "RESELLER", "x"]),
        ),
    ),
    max_size=6,
).map("\n".join)


@settings(max_examples=200, database=None)
@given(_lines)
def test_what_it_accepts_round_trips(text: str) -> None:
    parsed = parse_ads_txt(text)
    assert parse_ads_txt(write_ads_txt(parsed)) == parsed
