"""count.lua on the real Valkey: exact under duplicate, late and out-of-order notices."""

from __future__ import annotations

import pytest

from bidder.core.campaigns import CapPolicy
from fcap import keys
from fcap.rules import build_subjects
from fcap.store import CountOutcome, FcapStore
from tests.fcap.support import DAY_S, HOUR_S, T0, campaign, cap, far_deadline, new_user, one_subject

pytestmark = pytest.mark.asyncio
DAY = one_subject(cap("campaign", "fixed", DAY_S, 100))
DAY_MS = DAY_S * 1000


async def _total(store: FcapStore, user: str) -> int:
    values = await store.client.hvals(keys.counters(keys.USER, user))
    return sum(int(v) for v in values)


async def test_a_duplicate_impression_id_is_refused(store: FcapStore) -> None:
    user = new_user()
    await store.count("imp-1", DAY, "win", user, None, T0, T0)
    assert await store.count("imp-1", DAY, "win", user, None, T0, T0 + 5) == (
        CountOutcome.DUPLICATE
    )


async def test_duplicates_leave_the_count_exact(store: FcapStore) -> None:
    user = new_user()
    for n in (1, 2, 1, 3, 2, 1):
        await store.count(f"imp-{n}", DAY, "win", user, None, T0 + n, T0 + 10)
    assert await _total(store, user) == 3


async def test_a_late_notice_counts_in_the_bucket_of_its_impression(store: FcapStore) -> None:
    subject = one_subject(cap("campaign", "fixed", HOUR_S, 1))
    user = new_user()
    # Shown at 00:59:59.999, noticed at 01:00:00.500: it belongs to the first hour.
    await store.count("imp", subject, "win", user, None, T0 + 3_599_999, T0 + 3_600_500)
    first = await store.check([subject], user, None, T0 + 3_599_999, far_deadline())
    second = await store.check([subject], user, None, T0 + 3_600_500, far_deadline())
    assert (subject in first.capped, subject in second.capped) == (True, False)


async def test_out_of_order_notices_count_the_same_as_in_order(store: FcapStore) -> None:
    rolling = one_subject(cap("campaign", "rolling", 24 * HOUR_S, 100))
    times = [T0 + k * 3_000_000 for k in range(10)]
    in_order, shuffled = new_user(), new_user()
    for n, t in enumerate(times):
        await store.count(f"i{n}", rolling, "win", in_order, None, t, times[-1])
    for n in (7, 2, 9, 0, 5, 1, 8, 3, 6, 4):
        await store.count(f"i{n}", rolling, "win", shuffled, None, times[n], times[-1])
    a = await store.client.hgetall(keys.counters(keys.USER, in_order))
    b = await store.client.hgetall(keys.counters(keys.USER, shuffled))
    assert a == b and sum(int(v) for v in a.values()) == 10


async def test_a_recency_notice_out_of_order_keeps_the_latest_impression(
    store: FcapStore,
) -> None:
    subject = one_subject(cap("creative", "recency", 600))
    user = new_user()
    await store.count("late", subject, "win", user, None, T0 + 60_000, T0 + 61_000)
    await store.count("early", subject, "win", user, None, T0, T0 + 62_000)
    result = await store.check([subject], user, None, T0 + 62_000, far_deadline())
    assert result.capped[subject] == T0 + 60_000 + 600_000


async def test_a_notice_too_late_for_every_window_changes_nothing(store: FcapStore) -> None:
    user = new_user()
    outcome = await store.count("old", DAY, "win", user, None, T0 - DAY_MS, T0 + 600_000)
    assert outcome == CountOutcome.EXPIRED
    assert not await store.client.exists(keys.counters(keys.USER, user))


async def test_a_reserve_at_bid_subject_is_not_counted_on_a_win(store: FcapStore) -> None:
    subject = one_subject(cap("campaign", "fixed", DAY_S, 1), policy=CapPolicy(count_on="bid"))
    assert await store.count("imp", subject, "win", new_user(), None, T0, T0) == (
        CountOutcome.NOT_COUNTED
    )


async def test_a_viewable_campaign_counts_only_viewable_events(store: FcapStore) -> None:
    subject = one_subject(
        cap("campaign", "fixed", DAY_S, 1), policy=CapPolicy(impressions="viewable")
    )
    user = new_user()
    won = await store.count("imp", subject, "win", user, None, T0, T0)
    seen = await store.count("imp", subject, "viewable", user, None, T0, T0)
    assert (won, seen) == (CountOutcome.NOT_COUNTED, CountOutcome.COUNTED)


async def test_household_caps_count_in_the_households_hash(store: FcapStore) -> None:
    subject = one_subject(cap("household", "fixed", DAY_S, 2), cap("campaign", "fixed", DAY_S, 5))
    user, home = new_user(), "h:4:" + new_user()
    await store.count("imp", subject, "win", user, home, T0, T0)
    house = await store.client.hvals(keys.counters(keys.HOUSEHOLD, home))
    mine = await store.client.hvals(keys.counters(keys.USER, user))
    assert (house, mine) == ([b"1"], [b"1"])


async def test_a_sibling_campaigns_win_counts_against_the_advertiser_cap(
    store: FcapStore,
) -> None:
    capped = campaign(cap("advertiser", "fixed", DAY_S, 1), cid="capped")
    subjects = build_subjects([capped, campaign(cid="sibling")])
    user = new_user()
    await store.count("imp", subjects[("sibling", "cr1")], "win", user, None, T0, T0)
    check = [subjects[("capped", "cr1")]]
    assert check[0] in (await store.check(check, user, None, T0 + 1, far_deadline())).capped


async def test_writes_prune_buckets_no_check_reads_anymore(store: FcapStore) -> None:
    hourly = one_subject(cap("campaign", "fixed", HOUR_S, 100))
    user = new_user()
    for hour in range(5):
        t = T0 + hour * HOUR_S * 1000 + 600_000  # the last hour ended past the skew slack
        await store.count(f"i{hour}", hourly, "win", user, None, t, t)
    assert await store.client.hlen(keys.counters(keys.USER, user)) == 1


async def test_counter_and_dedup_keys_expire_after_the_longest_window(store: FcapStore) -> None:
    user = new_user()
    await store.count("imp", DAY, "win", user, None, T0 + 1000, T0 + 1000)
    ttls = [
        await store.client.pttl(keys.counters(keys.USER, user)),
        await store.client.pttl(keys.dedup(keys.USER, user, "imp")),
    ]
    assert all(DAY_MS - 1000 < ttl <= DAY_MS - 1000 + 120_000 for ttl in ttls)
