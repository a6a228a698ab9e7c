"""fcap.region_audit: over-delivery explained by replication delay, and convergence."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bidder.core.campaigns import CapPolicy
from bidder.core.tokens import NoticeClaims
from fcap import regions
from fcap.region_audit import (
    counted_tokens,
    expected_counts,
    merged_count,
    peak_within,
    regional_over_delivery,
    seen_from,
)
from fcap.rules import build_subjects
from tests.fcap.support import HOUR_S, T0, campaign, cap

ONCE_AN_HOUR = campaign(cap("campaign", "fixed", HOUR_S, 1), cid="c1")
RESERVING = campaign(
    cap("campaign", "fixed", HOUR_S, 1), cid="c2", policy=CapPolicy(count_on="bid")
)
SUBJECTS = build_subjects([ONCE_AN_HOUR, RESERVING])


def _seen(bid_id: int, at_ms: int, user: str = "b:u1", cid: str = "c1") -> NoticeClaims:
    return NoticeClaims(bid_id, "1", cid, "adv", "cr1", user, None, 1_000_000, at_ms)


def test_only_the_other_regions_impressions_arrive_late() -> None:
    seen = seen_from("eu", {1: T0, 2: T0}, {1: "eu", 2: "us"}, delay_ms=500, slack_ms=100)
    assert seen == {1: T0, 2: T0 + 600}


def test_an_impression_the_delay_hid_is_explained_by_it() -> None:
    # us shows the ad 1 s after eu did and billed it; the limit is 1 an hour.
    delivered = [_seen(1, T0), _seen(2, T0 + 1_000)]
    billed, region_of = {1: T0 + 10, 2: T0 + 1_010}, {1: "eu", 2: "us"}
    within = regional_over_delivery(delivered, SUBJECTS, billed, region_of, delay_ms=2_000)
    shorter = regional_over_delivery(delivered, SUBJECTS, billed, region_of, delay_ms=200)
    assert within.overall.not_in_flight == 1 and not within.beyond_delay
    assert [f.bid_id for f in shorter.beyond_delay] == [2]


def test_the_same_region_never_waits_for_replication() -> None:
    delivered = [_seen(1, T0), _seen(2, T0 + 1_000)]
    billed, region_of = {1: T0 + 10, 2: T0 + 1_010}, {1: "eu", 2: "eu"}
    audit = regional_over_delivery(delivered, SUBJECTS, billed, region_of, delay_ms=5_000)
    assert [f.bid_id for f in audit.beyond_delay] == [2]


@given(st.lists(st.integers(0, 10_000), max_size=30), st.integers(0, 3_000))
def test_peak_within_is_the_most_impressions_in_any_window(times: list[int], width: int) -> None:
    delivered = [_seen(n, T0 + t) for n, t in enumerate(times)]
    billed = {n: T0 + t for n, t in enumerate(times)}
    brute = max((sum(s <= u <= s + width for u in times) for s in times), default=0)
    assert peak_within(delivered, billed, width) == brute


def test_reserved_counters_are_left_out_of_the_billed_comparison() -> None:
    tokens = counted_tokens(SUBJECTS.values())
    (win_rule,) = SUBJECTS["c1", "cr1"].user_count_rules
    assert tokens == {win_rule.token}


def test_the_merged_count_of_a_user_is_the_increments_of_its_billed_impressions() -> None:
    tokens = counted_tokens(SUBJECTS.values())
    (rule,) = SUBJECTS["c1", "cr1"].user_count_rules
    billed = [_seen(1, T0), _seen(2, T0 + 5), _seen(2, T0 + 5), _seen(3, T0, cid="c2")]
    slots = {
        regions.slot(rule.token + "abc", "eu"): 1,
        regions.slot(rule.token + "abc", "us"): 1,
        regions.slot(rule.token + "!", "us"): T0,
    }
    assert expected_counts(billed, SUBJECTS, tokens) == {"b:u1": 2}
    assert merged_count(slots, tokens) == 2
