"""Campaign model and loader: the bundled file, round trips, and every kind of bad input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.campaign_docs import campaign_to_doc, campaigns_from_docs, load_campaign_file
from bidder.core.campaigns import (
    CAP_CLASSES,
    CAP_SCOPES,
    CHANNELS,
    FIXED_WINDOWS,
    MAX_BID_CPM_MICROS,
    SERVE_MODES,
    Campaign,
    CampaignError,
    CapPolicy,
    Creative,
    FrequencyCap,
    Targeting,
)

pytestmark = pytest.mark.pure

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "openrtb"
CAMPAIGNS = FIXTURES / "campaigns.json"
PACING_DAY = FIXTURES / "campaigns-pacing-day.json"


def _banner(**fields: Any) -> dict[str, Any]:
    doc = {"id": "cr1", "format": "banner", "w": 300, "h": 250, "adomain": ["acme.example"]}
    doc["markup"] = "<img src='https://cdn.acme.example/a.png'>"
    return {**doc, **fields}


def _doc(**fields: Any) -> dict[str, Any]:
    doc = {
        "id": "c1",
        "advertiser": "Acme",
        "daily_budget_micros": 1_000_000_000,
        "base_bid_cpm_micros": 500_000,
        "max_bid_cpm_micros": 1_000_000,
        "creatives": [_banner()],
    }
    return {**doc, **fields}


def _problems(*docs: Any) -> tuple[str, ...]:
    with pytest.raises(CampaignError) as info:
        campaigns_from_docs(list(docs))
    return info.value.problems


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "campaigns.json"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# --------------------------------------------------------------------- bundled file


def test_bundled_file_loads() -> None:
    campaigns = load_campaign_file(CAMPAIGNS)
    assert 10 <= len(campaigns) <= 14
    assert len({c.id for c in campaigns}) == len(campaigns)


def test_bundled_file_covers_the_documented_cases() -> None:
    campaigns = load_campaign_file(CAMPAIGNS)
    creatives = [cr for c in campaigns for cr in c.creatives]
    assert {cr.format for cr in creatives} >= {"banner", "video", "native"}
    assert any(c.status == "paused" for c in campaigns)
    assert any(c.deals for c in campaigns)
    assert any(cr.serve == "nurl" for cr in creatives)
    assert any(isinstance(c.pacing_curve, tuple) for c in campaigns)
    assert {cap.window_kind for c in campaigns for cap in c.frequency_caps} == {
        "fixed",
        "rolling",
        "recency",
    }


def test_bundled_file_round_trips_through_docs() -> None:
    campaigns = load_campaign_file(CAMPAIGNS)
    docs = orjson.loads(orjson.dumps([campaign_to_doc(c) for c in campaigns]))
    assert campaigns_from_docs(docs) == campaigns


def _can_meet(a: Campaign, b: Campaign) -> bool:
    """Whether some imp can be eligible for both: every targeting dimension overlaps
    (None is any) and they share a creative format and size."""
    ta, tb = a.targeting, b.targeting
    for mine, theirs in (
        (ta.countries, tb.countries),
        (ta.device_types, tb.device_types),
        (ta.channels, tb.channels),
    ):
        if mine is not None and theirs is not None and not mine & theirs:
            return False
    shapes = {(cr.format, cr.w, cr.h) for cr in a.creatives}
    return any((cr.format, cr.w, cr.h) in shapes for cr in b.creatives)


def test_can_meet_sees_a_shared_slice_and_a_disjoint_one() -> None:
    us_phone = Targeting(countries=frozenset({"USA"}), device_types=frozenset({4}))
    a = campaigns_from_docs([_doc()])[0]
    b = campaigns_from_docs([_doc(id="c2")])[0]
    assert _can_meet(a, b)
    assert not _can_meet(a, replace(b, creatives=(replace(b.creatives[0], w=728, h=90),)))
    pc = Targeting(device_types=frozenset({2}))
    assert not _can_meet(replace(a, targeting=us_phone), replace(b, targeting=pc))


def test_pacing_day_campaigns_never_meet_in_one_imp() -> None:
    # The pacing-day recipe reads each campaign's supply from a replay in which all of
    # them bid on everything: disjoint slices make that supply each one's own.
    campaigns = load_campaign_file(PACING_DAY)
    assert len(campaigns) == 4
    assert {cr.format for c in campaigns for cr in c.creatives} == {"banner", "video", "native"}
    for i, a in enumerate(campaigns):
        for b in campaigns[i + 1 :]:
            assert not _can_meet(a, b), (a.id, b.id)


# ------------------------------------------------------------------------- round trip

_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
_labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_domains = st.lists(_labels, min_size=2, max_size=4).map(".".join)
_domains = _domains.filter(lambda d: not d.startswith("www."))
_cats = st.from_regex(r"IAB[0-9]{1,2}(-[0-9]{1,3})?", fullmatch=True)
_sizes = st.integers(1, 10_000)


@st.composite
def _creatives(draw: st.DrawFn, creative_id: str) -> Creative:
    fmt = draw(st.sampled_from(["banner", "video", "native", "audio"]))
    common: dict[str, Any] = {
        "id": creative_id,
        "format": fmt,
        "adomain": tuple(draw(st.lists(_domains, min_size=1, max_size=3))),
        "cat": tuple(draw(st.lists(_cats, max_size=3))),
        "attr": frozenset(draw(st.sets(st.integers(1, 17), max_size=3))),
        "serve": draw(st.sampled_from(SERVE_MODES)),
    }
    if fmt == "banner":
        return Creative(markup=draw(st.text(min_size=1)), w=draw(_sizes), h=draw(_sizes), **common)
    if fmt == "native":
        return Creative(markup='{"native": {"ver": "1.2", "assets": []}}', **common)
    size = draw(st.none() | st.tuples(_sizes, _sizes)) if fmt == "video" else None
    return Creative(
        markup='<VAST version="4.2"></VAST>',
        mime=draw(st.sampled_from([f"{fmt}/mp4", f"{fmt}/webm", f"{fmt}/mpeg"])),
        duration_s=draw(st.integers(1, 3_600)),
        w=size[0] if size else None,
        h=size[1] if size else None,
        **common,
    )


_caps = st.one_of(
    st.builds(
        FrequencyCap,
        scope=st.sampled_from(CAP_SCOPES),
        window_kind=st.just("fixed"),
        window_s=st.sampled_from(sorted(FIXED_WINDOWS.values())),
        limit=st.integers(1, 1_000),
    ),
    st.builds(
        FrequencyCap,
        scope=st.sampled_from(CAP_SCOPES),
        window_kind=st.just("rolling"),
        window_s=st.integers(1, 720).map(lambda hours: hours * 3_600),
        limit=st.integers(1, 1_000),
    ),
    st.builds(
        FrequencyCap,
        scope=st.sampled_from(CAP_SCOPES),
        window_kind=st.just("recency"),
        window_s=st.integers(1, 2_592_000),
        limit=st.none(),
    ),
)
_weights = st.lists(st.floats(0, 1e6), min_size=24, max_size=24).filter(lambda ws: sum(ws) > 0)
_curves = st.one_of(
    st.just("default"),
    st.from_regex(r"[a-z0-9][a-z0-9_-]{0,20}", fullmatch=True),
    _weights.map(tuple),
)
_targeting = st.builds(
    Targeting,
    countries=st.none() | st.frozensets(st.from_regex(r"[A-Z]{3}", fullmatch=True), min_size=1),
    device_types=st.none() | st.frozensets(st.integers(1, 8), min_size=1),
    channels=st.none() | st.frozensets(st.sampled_from(CHANNELS), min_size=1),
    allow_domains=st.frozensets(_domains, max_size=3),
    block_domains=st.frozensets(_domains, max_size=3),
    allow_bundles=st.frozensets(st.from_regex(r"[a-z0-9.]{1,20}", fullmatch=True), max_size=3),
    block_bundles=st.frozensets(st.from_regex(r"[a-z0-9.]{1,20}", fullmatch=True), max_size=3),
)
_policies = st.builds(
    lambda name, count_on, on_error, impressions: replace(
        CapPolicy.of_class(name, impressions), count_on=count_on, on_store_error=on_error
    ),
    st.sampled_from(sorted(CAP_CLASSES)),
    st.sampled_from(["win", "bid"]),
    st.sampled_from(["open", "closed"]),
    st.sampled_from(["delivered", "viewable"]),
)


@st.composite
def _campaigns(draw: st.DrawFn) -> Campaign:
    creative_ids = draw(st.lists(_ids, min_size=1, max_size=3, unique=True))
    base = draw(st.integers(1, MAX_BID_CPM_MICROS))
    return Campaign(
        id=draw(_ids),
        advertiser=draw(st.text(min_size=1)),
        status=draw(st.sampled_from(["active", "paused"])),
        daily_budget_micros=draw(st.integers(1, 10**13)),
        base_bid_cpm_micros=base,
        max_bid_cpm_micros=draw(st.integers(base, MAX_BID_CPM_MICROS)),
        targeting=draw(_targeting),
        creatives=tuple(draw(_creatives(creative_id)) for creative_id in creative_ids),
        frequency_caps=tuple(
            draw(st.lists(_caps, max_size=4, unique_by=lambda c: (c.scope, c.window_s)))
        ),
        cap_policy=draw(_policies),
        pacing_curve=draw(_curves),
        deals=tuple(draw(st.lists(st.text(min_size=1), max_size=3, unique=True))),
    )


@given(_campaigns())
def test_any_valid_campaign_round_trips_through_a_json_doc(campaign: Campaign) -> None:
    doc = orjson.loads(orjson.dumps(campaign_to_doc(campaign)))
    assert campaigns_from_docs([doc]) == [campaign]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.lists(st.dictionaries(st.sampled_from([*_doc(), "targeting", "x"]), _json)))
def test_arbitrary_documents_only_ever_raise_campaign_error(docs: list[dict[str, Any]]) -> None:
    try:
        campaigns_from_docs(docs)
    except CampaignError as exc:
        assert exc.problems


# ---------------------------------------------------------------------- normal forms


def test_defaults_fill_optional_fields() -> None:
    [campaign] = campaigns_from_docs([_doc()])
    assert campaign.status == "active"
    assert campaign.currency == "USD"
    assert campaign.targeting == Targeting()
    assert campaign.cap_policy == CapPolicy("win", "open", "delivered")
    assert campaign.pacing_curve == "default"
    assert campaign.deals == ()
    assert campaign.creatives[0].serve == "adm"


def test_values_are_normalized() -> None:
    targeting = {
        "countries": ["usa"],
        "device_types": ["ctv", 7],
        "allow_domains": ["WWW.News.Example"],
    }
    creative = _banner(adomain=["www.Acme.example"], cat=["iab7-39"])
    [campaign] = campaigns_from_docs([_doc(targeting=targeting, creatives=[creative])])
    assert campaign.targeting.countries == {"USA"}
    assert campaign.targeting.device_types == {3, 7}
    assert campaign.targeting.allow_domains == {"news.example"}
    assert campaign.creatives[0].adomain == ("acme.example",)
    assert campaign.creatives[0].cat == ("IAB7-39",)


def test_pacing_curve_integers_become_floats() -> None:
    [campaign] = campaigns_from_docs([_doc(pacing_curve=[1] * 24)])
    assert campaign.pacing_curve == (1.0,) * 24


def test_frequency_windows_are_parsed() -> None:
    caps = [
        {"scope": "campaign", "window": "week", "limit": 5},
        {"scope": "campaign", "window": "rolling:24h", "limit": 6},
        {"scope": "creative", "window": "recency", "min_gap_s": 600},
    ]
    [campaign] = campaigns_from_docs([_doc(frequency_caps=caps)])
    week, rolling, recency = campaign.frequency_caps
    assert (week.window_kind, week.window_s, week.limit) == ("fixed", 604_800, 5)
    assert (rolling.window_kind, rolling.window_s, rolling.window) == (
        "rolling",
        86_400,
        "rolling:24h",
    )
    assert (recency.window_kind, recency.min_gap_s, recency.limit) == ("recency", 600, None)


# ------------------------------------------------------------------------ bad input


def test_unknown_device_type_names_campaign_index_id_and_path() -> None:
    bad = _doc(id="c-ctv", targeting={"device_types": ["ctv", "fridge"]})
    problems = _problems(_doc(id="a"), _doc(id="b"), _doc(id="c"), bad)
    assert len(problems) == 1
    assert problems[0].startswith(
        "campaigns[3] (id 'c-ctv'): targeting.device_types[1]: unknown device type 'fridge'"
    )


def test_every_problem_is_reported_not_just_the_first() -> None:
    one = _doc(id="one", currency="EUR", status="live")
    two = _doc(id="two", creatives=[_banner(w=None, cat=["food"])])
    problems = _problems(one, two)
    assert problems == (
        "campaigns[0] (id 'one'): status: must be one of 'active', 'paused' (got 'live')",
        "campaigns[0] (id 'one'): currency: 'EUR' is not supported: only 'USD' "
        "(no currency conversion yet)",
        "campaigns[1] (id 'two'): creatives[0].cat[0]: 'FOOD' is not an IAB category "
        "like 'IAB7' or 'IAB7-39'",
        "campaigns[1] (id 'two'): creatives[0].w: is required for banner creatives",
    )


def test_error_message_lists_all_problems() -> None:
    with pytest.raises(CampaignError) as info:
        campaigns_from_docs([_doc(id="a", advertiser=""), _doc(id="b", deals=["x", "x"])])
    assert str(info.value).splitlines() == [
        "2 problems:",
        "  campaigns[0] (id 'a'): advertiser: must be a non-empty string",
        "  campaigns[1] (id 'b'): deals[1]: duplicate deal id 'x'",
    ]


def test_unknown_field_is_an_error_with_a_suggestion() -> None:
    problems = _problems(_doc(targeting={"countrys": ["USA"]}))
    assert problems == (
        "campaigns[0] (id 'c1'): targeting.countrys: unknown field (did you mean 'countries'?)",
    )


def test_unknown_top_level_campaign_field_is_an_error() -> None:
    assert _problems(_doc(budget=5)) == ("campaigns[0] (id 'c1'): budget: unknown field",)


def test_duplicate_campaign_id_is_an_error() -> None:
    problems = _problems(_doc(id="same"), _doc(id="same"))
    assert problems == ("campaigns[1] (id 'same'): id: duplicate campaign id (also campaigns[0])",)


def test_duplicate_creative_id_is_an_error() -> None:
    problems = _problems(_doc(creatives=[_banner(), _banner()]))
    assert problems == (
        "campaigns[0] (id 'c1'): creatives[1].id: duplicate creative id (also creatives[0])",
    )


def test_campaign_without_a_usable_id_is_named_by_index() -> None:
    problems = _problems(_doc(id=None), _doc(id=7))
    assert problems == (
        "campaigns[0]: id: is required",
        "campaigns[1]: id: must be a non-empty string",
    )


def test_campaign_that_is_not_an_object_is_an_error() -> None:
    assert _problems(["c1"]) == ("campaigns[0]: must be an object",)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"daily_budget_micros": 1.5}, "daily_budget_micros: must be an integer (got 1.5)"),
        ({"daily_budget_micros": True}, "daily_budget_micros: must be an integer (got True)"),
        ({"daily_budget_micros": 0}, "daily_budget_micros: must be at least 1 (got 0)"),
        (
            {"base_bid_cpm_micros": 2_000_000},
            "base_bid_cpm_micros: 2_000_000 is above max_bid_cpm_micros 1_000_000",
        ),
        (
            {"max_bid_cpm_micros": 2_000_000_000},
            "max_bid_cpm_micros: must be at most 1_000_000_000 (got 2_000_000_000)",
        ),
        (
            {"supply_policy": "paranoid"},
            "supply_policy: must be one of 'lenient', 'strict' (got 'paranoid')",
        ),
        ({"click_value_micros": 0}, "click_value_micros: must be at least 1 (got 0)"),
        ({"click_value_micros": 0.5}, "click_value_micros: must be an integer (got 0.5)"),
        ({"creatives": []}, "creatives: must list at least one creative"),
        ({"creatives": None}, "creatives: must list at least one creative"),
        ({"targeting": []}, "targeting: must be an object"),
        (
            {"targeting": {"countries": []}},
            "targeting.countries: must not be empty (leave the field out to allow any)",
        ),
        (
            {"targeting": {"countries": ["US"]}},
            "targeting.countries[0]: 'US' is not an ISO 3166-1 alpha-3 country code",
        ),
        (
            {"targeting": {"channels": ["web"]}},
            "targeting.channels[0]: must be one of 'site', 'app', 'dooh' (got 'web')",
        ),
        (
            {"targeting": {"block_domains": ["https://evil.example/"]}},
            "targeting.block_domains[0]: 'https://evil.example/' is not a domain name "
            "(no scheme, port or path)",
        ),
        (
            {"targeting": {"allow_domains": ["com"]}},
            "targeting.allow_domains[0]: 'com' is not a domain name (no scheme, port or path)",
        ),
        (
            {"pacing_curve": [1] * 23},
            "pacing_curve: must be a curve name or an array of 24 non-negative numbers",
        ),
        (
            {"pacing_curve": [1] * 23 + [-1]},
            "pacing_curve: must be a curve name or an array of 24 non-negative numbers",
        ),
        ({"pacing_curve": [0] * 24}, "pacing_curve: the 24 hourly weights must not all be zero"),
        ({"pacing_curve": "Evening Peak"}, "pacing_curve: 'Evening Peak' is not a curve name"),
        (
            {"cap_policy": {"on_store_error": "fail"}},
            "cap_policy.on_store_error: must be one of 'open', 'closed' (got 'fail')",
        ),
        ({"id": "has space"}, "id: 'has space' is not a valid id (letters, digits, . _ -)"),
    ],
)
def test_bad_campaign_field_is_named(fields: dict[str, Any], problem: str) -> None:
    problems = _problems(_doc(**fields))
    assert len(problems) == 1
    assert problems[0].startswith(f"campaigns[0] (id '{fields.get('id', 'c1')}'): {problem}")


@pytest.mark.parametrize(
    ("creative", "problem"),
    [
        (_banner(format="popup"), "format: must be one of"),
        (_banner(h=None), "h: is required for banner creatives"),
        (_banner(mime="video/mp4"), "mime: not used by banner creatives"),
        (_banner(adomain=[]), "adomain: must list at least one advertiser domain"),
        (_banner(attr=[18]), "attr[0]: must be at most 17 (got 18)"),
        (_banner(serve="iframe"), "serve: must be one of 'adm', 'nurl' (got 'iframe')"),
        (_banner(markup=""), "markup: must be a non-empty string"),
        (
            {**_banner(format="video", w=640, h=None, duration_s=30), "mime": "video/mp4"},
            "h: video w and h go together",
        ),
        (
            {**_banner(format="video", duration_s=30), "mime": "audio/mpeg"},
            "mime: 'audio/mpeg' is not a video MIME type",
        ),
        (
            {**_banner(format="video", duration_s=30), "mime": "video/mp4"},
            "markup: video markup must be a VAST document",
        ),
        (
            {"id": "n", "format": "native", "adomain": ["a.example"], "markup": "<div>"},
            "markup: native markup must be a native response JSON object string",
        ),
        (
            {"id": "a", "format": "audio", "adomain": ["a.example"], "markup": "<VAST/>"},
            "mime: is required for audio creatives",
        ),
    ],
)
def test_bad_creative_field_is_named(creative: dict[str, Any], problem: str) -> None:
    problems = _problems(_doc(creatives=[creative]))
    assert problems
    assert problems[0].startswith(f"campaigns[0] (id 'c1'): creatives[0].{problem}")


@pytest.mark.parametrize(
    ("cap", "problem"),
    [
        ({"scope": "user", "window": "day", "limit": 1}, "scope: must be one of"),
        ({"scope": "campaign", "window": "fortnight", "limit": 1}, "window: unknown window"),
        ({"scope": "campaign", "window": "rolling:0h", "limit": 1}, "window: unknown window"),
        ({"scope": "campaign", "window": "day"}, "limit: is required"),
        ({"scope": "campaign", "window": "day", "limit": 0}, "limit: must be at least 1"),
        ({"scope": "campaign", "window": "day", "limit": 1, "min_gap_s": 5}, "min_gap_s: only"),
        ({"scope": "campaign", "window": "recency", "limit": 1, "min_gap_s": 5}, "limit: not"),
        ({"scope": "campaign", "window": "recency"}, "min_gap_s: is required"),
    ],
)
def test_bad_frequency_cap_is_named(cap: dict[str, Any], problem: str) -> None:
    problems = _problems(_doc(frequency_caps=[cap]))
    assert len(problems) == 1
    assert problems[0].startswith(f"campaigns[0] (id 'c1'): frequency_caps[0].{problem}")


def test_duplicate_frequency_cap_is_an_error() -> None:
    cap = {"scope": "campaign", "window": "day", "limit": 1}
    problems = _problems(_doc(frequency_caps=[cap, {**cap, "limit": 2}]))
    assert problems == (
        "campaigns[0] (id 'c1'): frequency_caps[1]: duplicate cap: same scope and window "
        "as an earlier one",
    )


# ------------------------------------------------------------------------------ files


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(CampaignError) as info:
        load_campaign_file(path)
    assert str(info.value) == f"{path}: file not found"


def test_directory_is_not_a_campaign_file(tmp_path: Path) -> None:
    with pytest.raises(CampaignError, match=f"^{tmp_path}: cannot read the file"):
        load_campaign_file(tmp_path)


def test_bad_json_names_path_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, '{\n  "version": 1,\n  "campaigns": [,]\n}\n')
    with pytest.raises(CampaignError) as info:
        load_campaign_file(path)
    assert str(info.value).startswith(f"{path}: line 3 column 17: not valid JSON: ")


def test_comment_in_json_gets_a_hint(tmp_path: Path) -> None:
    path = _write(tmp_path, '{\n  // our campaigns\n  "version": 1, "campaigns": []\n}\n')
    with pytest.raises(CampaignError) as info:
        load_campaign_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line 2 column 3: not valid JSON")
    assert message.endswith("(comments are not allowed in campaign files)")


def test_file_problems_carry_the_path(tmp_path: Path) -> None:
    doc = {"version": 1, "campaigns": [_doc(currency="GBP")]}
    path = _write(tmp_path, orjson.dumps(doc))
    with pytest.raises(CampaignError) as info:
        load_campaign_file(path)
    assert info.value.source == str(path)
    assert str(info.value).startswith(f"{path}: campaigns[0] (id 'c1'): currency: 'GBP'")


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ([], 'must be a JSON object {"version": 1, "campaigns": [...]}'),
        ({"campaigns": []}, "version: is required"),
        ({"version": 2, "campaigns": []}, "version: unsupported version 2 (this bidsim reads 1)"),
        ({"version": 1}, "campaigns: is required"),
        ({"version": 1, "campaigns": {}}, "campaigns: must be an array"),
        ({"version": 1, "campaigns": [], "extra": 1}, "extra: unknown field"),
    ],
)
def test_bad_top_level_is_named(tmp_path: Path, doc: Any, problem: str) -> None:
    path = _write(tmp_path, orjson.dumps(doc))
    with pytest.raises(CampaignError) as info:
        load_campaign_file(path)
    assert info.value.problems == (problem,)


def test_file_with_no_campaigns_is_valid(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"version": 1, "campaigns": []}')
    assert load_campaign_file(path) == []
