"""Pure cap rules: compilation, tokens, fan-out and the window model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bidder.core.campaign_docs import load_campaign_file
from bidder.core.campaigns import CapPolicy
from fcap.rules import (
    SUB_BUCKETS,
    TOKEN_CHARS,
    build_subjects,
    checked_buckets,
    compile_cap,
    counts_at,
    expiry_ms,
    subject_for,
)
from tests.fcap.support import DAY_S, HOUR_S, T0, campaign, cap

CAMPAIGNS = "fixtures/openrtb/campaigns.json"


def test_every_bundled_campaign_compiles_to_a_subject_per_creative() -> None:
    campaigns = load_campaign_file(CAMPAIGNS)
    subjects = build_subjects(campaigns)
    assert len(subjects) == sum(len(c.creatives) for c in campaigns)


def test_tokens_are_short_and_fixed_length() -> None:
    rule = compile_cap(cap("campaign", "fixed", DAY_S, 3), campaign(cid="x" * 64), "cr1")
    assert len(rule.token) == TOKEN_CHARS


def test_household_caps_go_to_the_household_side() -> None:
    subject = subject_for(
        campaign(cap("household", "fixed", DAY_S, 4), cap("campaign", "fixed", DAY_S, 2)), "cr1"
    )
    assert [r.limit for r in subject.household_rules] == [4]
    assert [r.limit for r in subject.user_rules] == [2]


def test_line_item_scope_counts_per_campaign_not_per_creative() -> None:
    c = campaign(cap("line_item", "fixed", DAY_S, 5), creatives=("a", "b"))
    assert subject_for(c, "a").user_rules == subject_for(c, "b").user_rules


def test_creative_scope_counts_per_creative() -> None:
    c = campaign(cap("creative", "fixed", DAY_S, 5), creatives=("a", "b"))
    assert subject_for(c, "a").user_rules != subject_for(c, "b").user_rules


def test_advertiser_windows_of_siblings_are_counted_not_checked() -> None:
    capped = campaign(cap("advertiser", "fixed", 7 * DAY_S, 10), cid="capped")
    sibling = campaign(cid="sibling")
    subjects = build_subjects([capped, sibling])
    plain = subjects[("sibling", "cr1")]
    assert plain.user_rules == ()
    assert plain.user_count_rules == subjects[("capped", "cr1")].user_rules


def test_other_advertisers_caps_are_not_counted() -> None:
    capped = campaign(cap("advertiser", "fixed", DAY_S, 10), cid="a", advertiser="one")
    other = campaign(cid="b", advertiser="two")
    assert build_subjects([capped, other])[("b", "cr1")].user_count_rules == ()


def test_reserve_at_bid_subjects_are_not_counted_on_a_win() -> None:
    subject = subject_for(campaign(policy=CapPolicy(count_on="bid")), "cr1")
    assert subject.reserve and subject.count_event is None


def test_viewable_policy_counts_on_the_viewable_event() -> None:
    assert subject_for(campaign(policy=CapPolicy(impressions="viewable")), "cr1").count_event == (
        "viewable"
    )


def test_rolling_windows_use_24_sub_buckets() -> None:
    rule = compile_cap(cap("campaign", "rolling", 24 * HOUR_S, 6), campaign(), "cr1")
    assert rule.size_ms * SUB_BUCKETS == 24 * HOUR_S * 1000


def test_fixed_window_reads_only_the_current_bucket() -> None:
    rule = compile_cap(cap("campaign", "fixed", DAY_S, 1), campaign(), "cr1")
    assert len(checked_buckets(rule, T0 + 5)) == 1


@given(
    hours=st.integers(1, 720),
    impression=st.integers(0, 10**10),
    age=st.integers(0, 10**10),
)
def test_rolling_counts_every_impression_of_the_exact_window(
    hours: int, impression: int, age: int
) -> None:
    rule = compile_cap(cap("campaign", "rolling", hours * HOUR_S, 1), campaign(), "cr1")
    now = T0 + impression + age
    inside_exact = age < rule.reach_ms
    inside_bound = age < rule.reach_ms + rule.size_ms
    counted = counts_at(rule, T0 + impression, now)
    assert (not inside_exact or counted) and (inside_bound or not counted)


@given(hours=st.integers(1, 720), impression=st.integers(0, 10**10))
def test_an_impression_counts_until_its_bucket_expires(hours: int, impression: int) -> None:
    rule = compile_cap(cap("campaign", "rolling", hours * HOUR_S, 1), campaign(), "cr1")
    end = expiry_ms(rule, (T0 + impression) // rule.size_ms)
    assert counts_at(rule, T0 + impression, end - 1)
    assert not counts_at(rule, T0 + impression, end)
