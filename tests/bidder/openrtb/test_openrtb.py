"""bidder.openrtb.request: the shape check and the normalized view of a BidRequest."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.openrtb.request import MAX_IMPS, InvalidRequest, parse_bid_request
from bidder.openrtb.view import BidRequest, Imp
from tests.bidder.json_strategies import json_values as any_json
from tests.bidder.openrtb_checks import with_replaced

pytestmark = pytest.mark.pure


def _imp(**fields: Any) -> dict[str, Any]:
    return {"id": "1", "banner": {"w": 300, "h": 250}, **fields}


def _doc(*imps: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"id": "r1", "imp": list(imps) or [_imp()], **fields}


def _parse(doc: Any) -> BidRequest:
    return parse_bid_request(json.dumps(doc).encode())


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        both = isinstance(out.get(key), dict) and isinstance(value, dict)
        out[key] = _merged(out[key], value) if both else value
    return out


# ------------------------------------------------------------- 2.5 vs 2.6 locations

SCHAIN_A = {"ver": "1.0", "complete": 1, "nodes": [{"asi": "a.example", "sid": "1", "hp": 1}]}
SCHAIN_B = {"ver": "1.0", "complete": 0, "nodes": [{"asi": "b.example", "sid": "2", "hp": 1}]}
EIDS_A = [{"source": "a.example", "uids": [{"id": "ua", "atype": 1}]}]
EIDS_B = [{"source": "b.example", "uids": [{"id": "ub", "atype": 3}]}]
JUNK_REGS_EXT = {"gdpr": "yes", "us_privacy": 5, "gpp": []}

# field: (where 2.6 puts it, where 2.5 put it under ext, a value, another value,
#         the parsed attribute, what each value parses to)
LOCATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...], Any, Any, Any, Any]] = {
    "schain": (("source",), ("source", "ext"), SCHAIN_A, SCHAIN_B, SCHAIN_A, SCHAIN_B),
    "gdpr": (("regs",), ("regs", "ext"), 1, 0, True, False),
    "consent": (("user",), ("user", "ext"), "CONSENT-A", "CONSENT-B", "CONSENT-A", "CONSENT-B"),
    "us_privacy": (("regs",), ("regs", "ext"), "1YNN", "1---", "1YNN", "1---"),
    "eids": (("user",), ("user", "ext"), EIDS_A, EIDS_B, tuple(EIDS_A), tuple(EIDS_B)),
    "gpp": (("regs",), ("regs", "ext"), "DBABMA~A", "DBABMA~B", "DBABMA~A", "DBABMA~B"),
}


def _placed(path: tuple[str, ...], field: str, value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {field: value}
    for key in reversed(path):
        doc = {key: doc}
    return doc


@pytest.mark.parametrize("field", LOCATIONS)
def test_field_is_read_from_its_2_6_location(field: str) -> None:
    at_26, _, value, _, parsed, _ = LOCATIONS[field]
    request = _parse(_doc(**_placed(at_26, field, value)))
    assert getattr(request, field) == parsed


@pytest.mark.parametrize("field", LOCATIONS)
def test_field_is_read_from_its_2_5_ext_location(field: str) -> None:
    _, at_25, value, _, parsed, _ = LOCATIONS[field]
    request = _parse(_doc(**_placed(at_25, field, value)))
    assert getattr(request, field) == parsed


@pytest.mark.parametrize("field", LOCATIONS)
def test_2_6_location_wins_when_both_are_present(field: str) -> None:
    at_26, at_25, value_26, value_25, parsed_26, _ = LOCATIONS[field]
    both = _merged(_placed(at_26, field, value_26), _placed(at_25, field, value_25))
    assert getattr(_parse(_doc(**both)), field) == parsed_26


@pytest.mark.parametrize("field", LOCATIONS)
def test_field_is_empty_when_absent(field: str) -> None:
    empty = () if field == "eids" else None
    assert getattr(_parse(_doc()), field) == empty


# -------------------------------------------------------------------------- floors


@pytest.mark.parametrize(
    ("bidfloor", "micros"),
    [(0.03, 30_000), (1.5, 1_500_000), (2, 2_000_000), (0.000001, 1), (1.1, 1_100_000)],
)
def test_bidfloor_becomes_integer_micros(bidfloor: float, micros: int) -> None:
    request = _parse(_doc(_imp(bidfloor=bidfloor)))
    assert request.imps[0].bidfloor_micros == micros


def test_missing_bidfloor_is_zero() -> None:
    assert _parse(_doc()).imps[0].bidfloor_micros == 0


def test_bidfloorcur_defaults_to_usd() -> None:
    assert _parse(_doc()).imps[0].bidfloorcur == "USD"


def test_bidfloorcur_is_upper_cased() -> None:
    assert _parse(_doc(_imp(bidfloorcur="eur"))).imps[0].bidfloorcur == "EUR"


# ---------------------------------------------------------------------- banner sizes


def _banner(banner: dict[str, Any], **imp: Any) -> Any:
    return _parse(_doc({"id": "1", "banner": banner, **imp})).imps[0].banner


def test_banner_sizes_are_w_h_then_format() -> None:
    banner = _banner({"w": 728, "h": 90, "format": [{"w": 300, "h": 250}, {"w": 320, "h": 50}]})
    assert banner.sizes == ((728, 90), (300, 250), (320, 50))


def test_banner_sizes_are_deduplicated() -> None:
    formats = [{"w": 300, "h": 250}, {"w": 728, "h": 90}, {"w": 300, "h": 250}]
    assert _banner({"w": 300, "h": 250, "format": formats}).sizes == ((300, 250), (728, 90))


def test_banner_size_range_comes_from_wmin_wmax_hmin_hmax() -> None:
    banner = _banner({"wmin": 300, "wmax": 400, "hmin": 200, "hmax": 300})
    assert (banner.sizes, banner.size_range) == ((), (300, 400, 200, 300))


def test_size_range_minimums_default_to_zero() -> None:
    assert _banner({"wmax": 400, "hmax": 300}).size_range == (0, 400, 0, 300)


def test_interstitial_banner_without_a_size_is_accepted() -> None:
    banner = _banner({}, instl=1)
    assert (banner.sizes, banner.size_range) == ((), None)


def test_sizeless_banner_alone_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="no size"):
        _banner({})


def test_sizeless_banner_in_a_multi_format_imp_is_ignored() -> None:
    imp = {"id": "1", "banner": {}, "video": {"mimes": ["video/mp4"]}}
    parsed = _parse(_doc(imp)).imps[0]
    assert (parsed.banner, parsed.video is not None) == (None, True)


def test_null_format_is_the_same_as_no_format() -> None:
    assert _banner({"w": 300, "h": 250, "format": None}).sizes == ((300, 250),)


# ------------------------------------------------------------------ invalid requests

_VALID_BODY = b'{"id": "r1", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}]'
# msgspec's nesting bound is the interpreter's C recursion limit, which grows from
# Python 3.11 to 3.13; a nesting as deep as the 256 KiB body cap allows exceeds it on all.
_DEEP = b"[" * 100_000 + b"]" * 100_000

INVALID_BODIES = {
    "array, not an object": b"[]",
    "number, not an object": b"1",
    "string, not an object": b'"request"',
    "not JSON": b"{not json",
    "empty body": b"",
    "not UTF-8": b'{"id": "\xff"}',
    "not UTF-8 in a field bidsim skips": _VALID_BODY + b', "x": "\xff"}',
    "a lone surrogate in a field bidsim skips": _VALID_BODY + b', "x": "\\ud800"}',
    "nested too deep in a field bidsim skips": _VALID_BODY + b', "x": ' + _DEEP + b"}",
    "content after the object": _VALID_BODY + b"} {}",
    "a byte order mark": b"\xef\xbb\xbf" + _VALID_BODY + b"}",
    "a duplicate key, one of its values of the wrong type": _VALID_BODY + b', "at": "1", "at": 1}',
    "a number beyond a double in a field bidsim reads": _VALID_BODY + b', "tmax": 1e400}',
}


@pytest.mark.parametrize("body", INVALID_BODIES.values(), ids=list(INVALID_BODIES))
def test_body_that_is_no_json_request_object_is_invalid(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        parse_bid_request(body)


def _too_many_imps() -> dict[str, Any]:
    return _doc(*(_imp(id=str(n)) for n in range(MAX_IMPS + 1)))


def _banner_imp(**banner: Any) -> dict[str, Any]:
    return _imp(banner={"w": 300, "h": 250, **banner})


def _native_imp(request: Any) -> dict[str, Any]:
    return {"id": "1", "native": {"request": request}}


# What each malformed request must be refused for: the field its message names.
INVALID_DOCS: dict[str, tuple[dict[str, Any], str]] = {
    "site and app": (_doc(site={"domain": "a.example"}, app={"bundle": "com.a"}), "site and app"),
    "no imp": ({"id": "r1"}, "imp"),
    "empty imp array": (_doc() | {"imp": []}, "imp"),
    "too many imps": (_too_many_imps(), "imp"),
    "duplicate imp ids": (_doc(_imp(), _imp()), "imp[].id"),
    "imp not an object": (_doc() | {"imp": ["1"]}, "imp[0]"),
    "imp null": (_doc() | {"imp": [None]}, "imp[0]"),
    "imp without a format": (_doc({"id": "1"}), "imp[0]"),
    "empty format array": (_doc(_banner_imp(format=[])), "imp[0].banner.format"),
    "format with a null entry": (_doc(_banner_imp(format=[None])), "imp[0].banner.format[0]"),
    "negative bidfloor": (_doc(_imp(bidfloor=-0.01)), "imp[0].bidfloor"),
    "tmax zero": (_doc(tmax=0), "tmax"),
    "tmax negative": (_doc(tmax=-5), "tmax"),
    "gdpr 2": (_doc(regs={"gdpr": 2}), "regs.gdpr"),
    "gdpr string": (_doc(regs={"gdpr": "1"}), "regs.gdpr"),
    "gdpr float": (_doc(regs={"gdpr": 1.0}), "regs.gdpr"),
    "gdpr bool": (_doc(regs={"ext": {"gdpr": True}}), "regs.ext.gdpr"),
    "missing request id": (_doc() | {"id": None}, "id"),
    "empty request id": (_doc() | {"id": ""}, "id"),
    "request id a number": (_doc() | {"id": 7}, "id"),
    "imp id a number": (_doc(_imp(id=1)), "imp[0].id"),
    "site a string": (_doc(site="a.example"), "site"),
    "device.geo an array": (_doc(device={"geo": ["USA"]}), "device.geo"),
    "country a number": (_doc(device={"geo": {"country": 840}}), "device.geo.country"),
    "user.eids an object": (_doc(user={"eids": {"source": "a.example"}}), "user.eids"),
    "user.eids with a string": (_doc(user={"eids": ["a.example"]}), "user.eids[0]"),
    "bcat with a number": (_doc(bcat=["IAB1", 2]), "bcat[1]"),
    "bcat with a null": (_doc(bcat=["IAB1", None]), "bcat[1]"),
    "badv a string": (_doc(badv="a.example"), "badv"),
    "cur a string": (_doc(cur="USD"), "cur"),
    "banner.w a string": (_doc(_imp(banner={"w": "300", "h": 250})), "imp[0].banner.w"),
    "banner.w a whole float": (_doc(_imp(banner={"w": 300.0, "h": 250})), "imp[0].banner.w"),
    "battr with a string": (_doc(_banner_imp(battr=["1"])), "imp[0].banner.battr[0]"),
    "battr with a whole float": (_doc(_banner_imp(battr=[1.0])), "imp[0].banner.battr[0]"),
    "bidfloor a string": (_doc(_imp(bidfloor="0.5")), "imp[0].bidfloor"),
    "bidfloor out of range": (_doc(_imp(bidfloor=1e12)), "imp[0].bidfloor"),
    "deal without an id": (_doc(_imp(pmp={"deals": [{"bidfloor": 1.0}]})), "imp[0].pmp.deals"),
    "deal null": (_doc(_imp(pmp={"deals": [None]})), "imp[0].pmp.deals[0]"),
    "native request a number": (
        _doc({"id": "1", "native": {"request": 5}}),
        "imp[0].native.request",
    ),
    "native request null": (
        _doc({"id": "1", "native": {"request": None}}),
        "imp[0].native.request",
    ),
    "tmax a bool": (_doc(tmax=True), "tmax"),
    "banner.w a bool": (_doc(_imp(banner={"w": True, "h": 250})), "imp[0].banner.w"),
    "devicetype a bool": (_doc(device={"devicetype": False}), "device.devicetype"),
    "test a bool": (_doc(test=True), "test"),
    "instl a bool": (_doc(_imp(instl=True)), "imp[0].instl"),
    "battr with a bool": (_doc(_banner_imp(battr=[True])), "imp[0].banner.battr[0]"),
    "tmax a float": (_doc(tmax=100.5), "tmax"),
    "tmax beyond 64 bits": (_doc(tmax=2**64), "tmax"),
    "at beyond 64 bits": (_doc(at=2**63), "at"),
    "test below 64 bits": (_doc(test=-(2**63) - 1), "test"),
    "banner.h beyond 64 bits": (_doc(_imp(banner={"w": 300, "h": 2**63})), "imp[0].banner.h"),
    "regs.ext a string": (_doc(regs={"gdpr": 1, "ext": "x"}), "regs.ext"),
    "user.ext a string": (_doc(user={"consent": "c", "ext": "x"}), "user.ext"),
    "source.ext a string without a schain": (_doc(source={"ext": "x"}), "source.ext"),
    "source.ext.schain an array": (_doc(source={"ext": {"schain": []}}), "source.ext.schain"),
    "regs.ext.us_privacy a number": (_doc(regs={"ext": {"us_privacy": 1}}), "regs.ext.us_privacy"),
    "user.ext.consent a number": (_doc(user={"ext": {"consent": 1}}), "user.ext.consent"),
    "user.ext.eids an object": (_doc(user={"ext": {"eids": {}}}), "user.ext.eids"),
    # A field bidsim reads is checked wherever it appears, even where another makes it moot.
    "device.ipv6 a number beside an ip": (
        _doc(device={"ip": "192.0.2.1", "ipv6": 6}),
        "device.ipv6",
    ),
    "user.geo an array beside device.geo": (
        _doc(device={"geo": {"country": "USA"}}, user={"geo": []}),
        "user.geo",
    ),
    "site.page a number beside site.domain": (
        _doc(site={"domain": "a.example", "page": 1}),
        "site.page",
    ),
    "battr of a sizeless banner beside a video": (
        _doc({"id": "1", "banner": {"battr": "1"}, "video": {"mimes": ["video/mp4"]}}),
        "imp[0].banner.battr",
    ),
}


@pytest.mark.parametrize(
    ("doc", "field"), INVALID_DOCS.values(), ids=list(INVALID_DOCS)
)  # fmt: skip
def test_malformed_request_is_invalid_naming_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest, match=f"^{re.escape(field)}"):
        _parse(doc)


def test_the_body_the_invalid_bodies_extend_is_valid() -> None:
    assert parse_bid_request(_VALID_BODY + b"}").id == "r1"


def test_a_duplicate_key_takes_its_last_value() -> None:
    assert parse_bid_request(_VALID_BODY + b', "tmax": 50, "tmax": 120}').tmax_ms == 120


@pytest.mark.parametrize("number", [b"1e400", b"-1e400", b"9" * 400])
def test_a_number_beyond_a_double_in_a_field_bidsim_skips_is_ignored(number: bytes) -> None:
    body = _VALID_BODY + b', "x": ' + number + b', "ext": {"y": [' + number + b"]}}"
    assert parse_bid_request(body).id == "r1"


def test_integers_at_the_64_bit_limits_are_accepted() -> None:
    request = _parse(_doc(at=2**63 - 1, test=-(2**63)))
    assert (request.at, request.test) == (2**63 - 1, True)


def test_a_utf_8_body_beyond_ascii_is_accepted() -> None:
    body = json.dumps(_doc(site={"domain": "Ñews.example"}), ensure_ascii=False).encode()
    assert parse_bid_request(body).domain == "ñews.example"


@pytest.mark.parametrize(
    ("section", "channel"), [("site", "site"), ("app", "app"), ("dooh", "dooh"), ("device", "none")]
)
def test_an_empty_object_is_present_but_says_nothing(section: str, channel: str) -> None:
    request = _parse(_doc(**{section: {}}, user={}, regs={}, source={}))
    assert (request.channel, request.domain, request.country, request.gdpr, request.schain) == (
        channel,
        None,
        None,
        None,
        None,
    )


# An extension is exchange-specific: bidsim reads a value from it only for an empty 2.6
# field, and only then may its type make the request invalid.
UNREAD_EXTENSIONS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "regs.ext": (
        {"regs": {"gdpr": 1, "us_privacy": "1YNN", "gpp": "G", "ext": JUNK_REGS_EXT}},
        {"gdpr": True, "us_privacy": "1YNN", "gpp": "G"},
    ),
    "user.ext": (
        {"user": {"consent": "C", "eids": EIDS_A, "ext": {"consent": 5, "eids": "x"}}},
        {"consent": "C", "eids": tuple(EIDS_A)},
    ),
    "source.ext": ({"source": {"schain": SCHAIN_A, "ext": "test-ext"}}, {"schain": SCHAIN_A}),
    "the request's ext": ({"ext": {"source": {"tid": 5}}}, {"tid": None}),
}


@pytest.mark.parametrize(
    ("fields", "read"), UNREAD_EXTENSIONS.values(), ids=list(UNREAD_EXTENSIONS)
)  # fmt: skip
def test_an_extension_value_bidsim_does_not_need_is_not_checked(
    fields: dict[str, Any], read: dict[str, Any]
) -> None:
    request = _parse(_doc(**fields))
    assert {name: getattr(request, name) for name in read} == read


def test_max_imps_is_accepted() -> None:
    doc = _doc(*(_imp(id=str(n)) for n in range(MAX_IMPS)))
    assert len(_parse(doc).imps) == MAX_IMPS


def test_json_null_is_the_same_as_absent() -> None:
    request = _parse(_doc(site=None, device=None, tmax=None, regs={"gdpr": None}))
    assert (request.channel, request.country, request.tmax_ms, request.gdpr) == (
        "none",
        None,
        None,
        None,
    )


# --------------------------------------------------------------- domain and country


def test_domain_is_site_domain_lower_cased() -> None:
    site = {"domain": "News.Example", "page": "https://other.example/"}
    assert _parse(_doc(site=site)).domain == "news.example"


@pytest.mark.parametrize(
    "page",
    [
        "https://News.Example/path/to/story?id=1",
        "http://news.example:8080/",
        "https://news.example",
        "https://news.example?ref=home",
        "https://news.example#top",
        "https://reader@news.example/",
        "news.example/story",
    ],
)
def test_domain_falls_back_to_the_page_host(page: str) -> None:
    assert _parse(_doc(site={"page": page})).domain == "news.example"


def test_empty_site_domain_falls_back_to_the_page_host() -> None:
    site = {"domain": "", "page": "https://news.example/"}
    assert _parse(_doc(site=site)).domain == "news.example"


def test_app_request_has_a_bundle_and_no_domain() -> None:
    request = _parse(_doc(app={"bundle": "Com.Example.App", "domain": "app.example"}))
    assert (request.channel, request.bundle, request.domain) == ("app", "com.example.app", None)


def test_country_comes_from_device_geo_first() -> None:
    doc = _doc(device={"geo": {"country": "CAN"}}, user={"geo": {"country": "USA"}})
    assert _parse(doc).country == "CAN"


def test_country_falls_back_to_user_geo() -> None:
    doc = _doc(device={"geo": {"region": "ON"}}, user={"geo": {"country": "usa"}})
    assert _parse(doc).country == "USA"


def test_country_is_none_when_no_geo_says() -> None:
    assert _parse(_doc(device={"devicetype": 2})).country is None


# ------------------------------------------------------------------------ properties

json_values = any_json(text_size=12, width=4, max_leaves=16)

# Every field the parser reads, by path in a valid request, to be replaced by junk.
READ_PATHS: list[tuple[str | int, ...]] = [
    ("id",), ("imp",), ("imp", 0), ("imp", 0, "id"), ("imp", 0, "banner"),
    ("imp", 0, "banner", "w"), ("imp", 0, "banner", "format"), ("imp", 0, "banner", "battr"),
    ("imp", 0, "banner", "wmax"), ("imp", 0, "video"), ("imp", 0, "native"),
    ("imp", 0, "audio"), ("imp", 0, "bidfloor"), ("imp", 0, "bidfloorcur"),
    ("imp", 0, "instl"), ("imp", 0, "pmp"), ("imp", 0, "tagid"), ("at",), ("tmax",),
    ("cur",), ("test",), ("site",), ("site", "domain"), ("site", "page"),
    ("site", "publisher"), ("app",), ("dooh",), ("device",), ("device", "geo"),
    ("device", "devicetype"), ("device", "ip"), ("device", "ifa"), ("user",),
    ("user", "geo"), ("user", "eids"), ("user", "ext"), ("bcat",), ("badv",), ("bapp",),
    ("regs",), ("regs", "gdpr"), ("regs", "ext"), ("regs", "coppa"), ("source",),
    ("source", "schain"), ("source", "ext"),
]  # fmt: skip

FULL_REQUEST: dict[str, Any] = {
    "id": "r1",
    "imp": [
        {
            "id": "1",
            "banner": {"w": 300, "h": 250, "format": [{"w": 320, "h": 50}], "wmax": 400},
            "video": {"mimes": ["video/mp4"]},
            "native": {"request": "{}"},
            "audio": {"mimes": ["audio/mpeg"]},
            "bidfloor": 0.5,
            "bidfloorcur": "USD",
            "instl": 0,
            "pmp": {"private_auction": 0, "deals": [{"id": "d1"}]},
            "tagid": "t1",
        }
    ],
    "at": 1,
    "tmax": 100,
    "cur": ["USD"],
    "test": 0,
    "site": {"domain": "news.example", "page": "https://news.example/", "publisher": {"id": "p"}},
    "device": {"devicetype": 2, "ip": "192.0.2.1", "ifa": "x", "geo": {"country": "USA"}},
    "user": {"id": "u", "geo": {"country": "USA"}, "eids": [], "ext": {"consent": "c"}},
    "bcat": ["IAB25"],
    "badv": ["a.example"],
    "bapp": ["com.a"],
    "regs": {"gdpr": 0, "coppa": 0, "ext": {"us_privacy": "1---"}},
    "source": {"schain": {"nodes": []}, "ext": {}},
}


def _parses_or_is_invalid(body: bytes) -> None:
    with contextlib.suppress(InvalidRequest):
        parse_bid_request(body)


def test_the_full_request_used_for_mutations_parses() -> None:
    assert _parse(FULL_REQUEST).imps[0].deal_ids == ("d1",)


@given(body=st.binary(max_size=256))
def test_arbitrary_bytes_raise_only_invalid_request(body: bytes) -> None:
    _parses_or_is_invalid(body)


@given(value=json_values)
def test_arbitrary_json_raises_only_invalid_request(value: Any) -> None:
    _parses_or_is_invalid(json.dumps(value).encode())


@given(value=json_values.filter(lambda v: not isinstance(v, dict)))
def test_json_that_is_not_an_object_is_invalid(value: Any) -> None:
    with pytest.raises(InvalidRequest):
        _parse(value)


@given(path=st.sampled_from(READ_PATHS), value=json_values)
def test_a_request_with_any_field_replaced_raises_only_invalid_request(
    path: tuple[str | int, ...], value: Any
) -> None:
    _parses_or_is_invalid(json.dumps(with_replaced(FULL_REQUEST, path, value)).encode())


# A strategy of valid requests: random values for the fields the parser reads.

ids = st.text(min_size=1, max_size=12)
floor_micros = st.integers(min_value=0, max_value=1_000_000_000)
sizes = st.tuples(st.integers(1, 4000), st.integers(1, 4000))
domains = st.from_regex(r"[a-zA-Z0-9]{1,10}\.(example|com|co\.uk)", fullmatch=True)


@st.composite
def valid_imps(draw: st.DrawFn, imp_id: str) -> dict[str, Any]:
    imp: dict[str, Any] = {"id": imp_id}
    kind = draw(st.sampled_from(["banner", "video", "native", "audio"]))
    if kind == "banner":
        w, h = draw(sizes)
        formats = draw(st.lists(sizes, max_size=3))
        imp["banner"] = {"w": w, "h": h}
        if formats:  # an empty format array is invalid
            imp["banner"]["format"] = [{"w": fw, "h": fh} for fw, fh in formats]
    elif kind == "native":
        imp["native"] = {"request": draw(st.text(max_size=20))}
    else:
        imp[kind] = {"mimes": draw(st.lists(st.sampled_from([f"{kind}/mp4", f"{kind}/ogg"])))}
    micros = draw(st.none() | floor_micros)
    if micros is not None:
        whole = micros % 1_000_000 == 0 and draw(st.booleans())
        imp["bidfloor"] = micros // 1_000_000 if whole else micros / 1_000_000
    currency = draw(st.none() | st.sampled_from(["USD", "usd", "EUR", "jpy"]))
    if currency is not None:
        imp["bidfloorcur"] = currency
    deals = draw(st.lists(ids, max_size=2))
    if deals:
        imp["pmp"] = {
            "private_auction": draw(st.integers(0, 1)),
            "deals": [{"id": d} for d in deals],
        }
    return imp


@st.composite
def valid_requests(draw: st.DrawFn) -> dict[str, Any]:
    imp_ids = draw(st.lists(ids, min_size=1, max_size=4, unique=True))
    doc: dict[str, Any] = {"id": draw(ids), "imp": [draw(valid_imps(i)) for i in imp_ids]}
    channel = draw(st.sampled_from(["site", "app", "dooh", None]))
    if channel == "site":
        doc["site"] = {"domain": draw(domains)}
    elif channel == "app":
        doc["app"] = {"bundle": draw(domains)}
    elif channel == "dooh":
        doc["dooh"] = {"id": draw(ids)}
    country = draw(st.none() | st.from_regex(r"[A-Za-z]{3}", fullmatch=True))
    doc["device"] = {"devicetype": draw(st.integers(1, 8)), "geo": {"country": country}}
    tmax = draw(st.none() | st.integers(1, 10_000))
    if tmax is not None:
        doc["tmax"] = tmax
    return doc


@given(doc=valid_requests())
def test_valid_request_keeps_its_request_and_imp_ids(doc: dict[str, Any]) -> None:
    request = _parse(doc)
    assert (request.id, [imp.id for imp in request.imps]) == (
        doc["id"],
        [imp["id"] for imp in doc["imp"]],
    )


@given(doc=valid_requests())
def test_valid_request_keeps_its_floors_in_micros(doc: dict[str, Any]) -> None:
    expected = [
        (round(imp.get("bidfloor", 0) * 1_000_000), imp.get("bidfloorcur", "USD").upper())
        for imp in doc["imp"]
    ]
    parsed = [(imp.bidfloor_micros, imp.bidfloorcur) for imp in _parse(doc).imps]
    assert parsed == expected


@given(micros=floor_micros)
def test_bidfloor_micros_round_trip_through_the_cpm_float(micros: int) -> None:
    request = _parse(_doc(_imp(bidfloor=micros / 1_000_000)))
    assert request.imps[0].bidfloor_micros == micros


FORMATS = ("banner", "video", "native", "audio")


@given(doc=valid_requests())
def test_valid_request_keeps_its_formats_and_deals(doc: dict[str, Any]) -> None:
    def stated(imp: dict[str, Any]) -> tuple[list[str], tuple[str, ...]]:
        deals = tuple(d["id"] for d in imp.get("pmp", {}).get("deals", []))
        return [kind for kind in FORMATS if kind in imp], deals

    def parsed(imp: Imp) -> tuple[list[str], tuple[str, ...]]:
        return [kind for kind in FORMATS if getattr(imp, kind) is not None], imp.deal_ids

    assert [parsed(imp) for imp in _parse(doc).imps] == [stated(imp) for imp in doc["imp"]]


@given(doc=valid_requests())
def test_valid_request_keeps_its_banner_sizes_in_order_without_repeats(
    doc: dict[str, Any],
) -> None:
    def stated(banner: dict[str, Any]) -> tuple[tuple[int, int], ...]:
        listed = [(banner["w"], banner["h"])] + [(f["w"], f["h"]) for f in banner.get("format", [])]
        return tuple(dict.fromkeys(listed))

    expected = [stated(imp["banner"]) for imp in doc["imp"] if "banner" in imp]
    parsed = [imp.banner.sizes for imp in _parse(doc).imps if imp.banner is not None]
    assert parsed == expected


@given(doc=valid_requests())
def test_valid_request_keeps_its_context(doc: dict[str, Any]) -> None:
    channel = next((c for c in ("site", "app", "dooh") if c in doc), "none")
    device = doc["device"]
    expected = (
        channel,
        doc["site"]["domain"].lower() if "site" in doc else None,
        doc["app"]["bundle"].lower() if "app" in doc else None,
        device["geo"]["country"].upper() if device["geo"]["country"] else None,
        device["devicetype"],
        doc.get("tmax"),
    )
    request = _parse(doc)
    parsed = (
        request.channel,
        request.domain,
        request.bundle,
        request.country,
        request.devicetype,
        request.tmax_ms,
    )
    assert parsed == expected
