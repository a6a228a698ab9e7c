"""fcap.audit: delivered impressions judged against the caps after the fact."""

from __future__ import annotations

from bidder.core.campaigns import CapPolicy
from bidder.core.tokens import NoticeClaims, TokenSigner
from fcap.audit import cap_over_delivery, claims_from_notice_urls, counted_times
from fcap.rules import build_subjects
from tests.fcap.support import HOUR_S, T0, campaign, cap

TWICE_AN_HOUR = campaign(cap("campaign", "fixed", HOUR_S, 2), cid="c1")
VIEWABLE = campaign(
    cap("campaign", "fixed", HOUR_S, 1), cid="c2", policy=CapPolicy(impressions="viewable")
)
SUBJECTS = build_subjects([TWICE_AN_HOUR, VIEWABLE])
SIGNER = TokenSigner({"k1": b"k" * 32}, "k1")


def _seen(bid_id: int, at_ms: int, cid: str = "c1", user: str = "b:u1") -> NoticeClaims:
    return NoticeClaims(bid_id, "1", cid, "adv", "cr1", user, None, 1_000_000, at_ms)


def test_impressions_up_to_the_limit_are_not_above_the_cap() -> None:
    audit = cap_over_delivery([_seen(1, T0), _seen(2, T0 + 1)], SUBJECTS)
    assert (audit.impressions, audit.over_cap) == (2, 0)


def test_the_impression_past_the_limit_in_one_window_is_above_the_cap() -> None:
    audit = cap_over_delivery([_seen(n, T0 + n) for n in range(1, 4)], SUBJECTS)
    assert [f.bid_id for f in audit.above_cap] == [3] and audit.max_excess == 1


def test_the_next_window_starts_from_zero() -> None:
    seen = [_seen(1, T0), _seen(2, T0 + 1), _seen(3, T0 + HOUR_S * 1000)]
    assert cap_over_delivery(seen, SUBJECTS).over_cap == 0


def test_other_users_do_not_share_a_counter() -> None:
    seen = [_seen(n, T0 + n, user=f"b:u{n}") for n in range(1, 4)]
    assert cap_over_delivery(seen, SUBJECTS).over_cap == 0


def test_viewable_counted_campaigns_are_not_audited() -> None:
    audit = cap_over_delivery([_seen(n, T0 + n, cid="c2") for n in range(1, 4)], SUBJECTS)
    assert (audit.impressions, audit.over_cap) == (0, 0)


def test_an_impression_bid_while_the_earlier_ones_were_in_flight_is_explained() -> None:
    seen = [_seen(n, T0 + n) for n in range(1, 4)]
    counted = {1: T0 + 1_000, 2: T0 + 1_000}  # counted long after bid 3 was made
    audit = cap_over_delivery(seen, SUBJECTS, counted_ms=counted)
    assert (audit.over_cap, audit.not_in_flight) == (1, 0)


def test_an_impression_bid_after_the_earlier_ones_were_counted_is_not_explained() -> None:
    seen = [_seen(1, T0), _seen(2, T0 + 1), _seen(3, T0 + 60_000)]
    counted = {1: T0 + 100, 2: T0 + 100}
    audit = cap_over_delivery(seen, SUBJECTS, counted_ms=counted)
    assert audit.not_in_flight == 1


def test_a_count_within_one_deadline_before_the_bid_may_not_have_been_seen() -> None:
    seen = [_seen(1, T0), _seen(2, T0 + 1), _seen(3, T0 + 1_000)]
    counted = {1: T0 + 100, 2: T0 + 1_000 - 30}
    assert cap_over_delivery(seen, SUBJECTS, counted_ms=counted, deadline_ms=50).not_in_flight == 0
    assert cap_over_delivery(seen, SUBJECTS, counted_ms=counted, deadline_ms=20).not_in_flight == 1


def test_a_count_time_is_the_last_answer_to_a_notice_of_the_impression() -> None:
    win, bill = (f"/notice/{kind}?t={SIGNER.sign(_seen(7, T0))}" for kind in ("win", "bill"))
    assert counted_times([(win, 204, T0 + 5), (bill, 204, T0 + 9)], SIGNER) == {7: T0 + 9}
    assert counted_times([(bill, 204, T0 + 9), (win, 200, T0 + 5)], SIGNER) == {7: T0 + 9}


def test_an_impression_with_a_deferred_or_failed_notice_has_no_count_time() -> None:
    win, bill = (f"/notice/{kind}?t={SIGNER.sign(_seen(7, T0))}" for kind in ("win", "bill"))
    for status in (202, 503):
        assert counted_times([(win, status, T0 + 5), (bill, 204, T0 + 9)], SIGNER) == {}
    assert counted_times([("/notice/win?t=k1.forged", 204, T0)], SIGNER) == {}


def test_notice_urls_give_one_claims_per_bid_and_skip_foreign_tokens() -> None:
    token = SIGNER.sign(_seen(7, T0))
    urls = [
        f"http://bidder/notice/win?t={token}&p=1.5",
        f"http://bidder/notice/bill?t={token}&p=1.5",
        "http://bidder/notice/win?t=k1.forged",
    ]
    assert [c.bid_id for c in claims_from_notice_urls(urls, SIGNER)] == [7]
