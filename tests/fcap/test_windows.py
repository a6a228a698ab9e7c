"""Window edges on the real Valkey: window end -1 ms still capped, +1 ms free.

Each test counts one impression at its window's first instant with limit 1, then
checks just before and just after the instant the impression stops counting.
"""

from __future__ import annotations

import pytest

from bidder.core.campaigns import FIXED_WINDOWS
from fcap.rules import Subject, bucket_of, expiry_ms
from fcap.store import FcapStore
from tests.fcap.support import HOUR_S, T0, cap, far_deadline, new_user, one_subject

pytestmark = pytest.mark.asyncio


async def _capped(store: FcapStore, subject: Subject, user: str, now_ms: int) -> bool:
    result = await store.check([subject], user, None, now_ms, far_deadline())
    return subject in result.capped


async def _edges(store: FcapStore, subject: Subject, start: int, end: int) -> tuple[bool, ...]:
    user = new_user()
    await store.count("imp", subject, "win", user, None, start, start)
    return (
        await _capped(store, subject, user, end - 1),
        await _capped(store, subject, user, end),
        await _capped(store, subject, user, end + 1),
    )


@pytest.mark.parametrize("window", sorted(FIXED_WINDOWS))
async def test_fixed_window_edges(store: FcapStore, window: str) -> None:
    subject = one_subject(cap("campaign", "fixed", FIXED_WINDOWS[window], 1))
    rule = subject.user_rules[0]
    start = bucket_of(rule, T0) * rule.size_ms
    end = start + rule.size_ms
    assert await _edges(store, subject, start, end) == (True, False, False)


@pytest.mark.parametrize("hours", [1, 6, 24, 720])
async def test_rolling_window_edges(store: FcapStore, hours: int) -> None:
    subject = one_subject(cap("campaign", "rolling", hours * HOUR_S, 1))
    rule = subject.user_rules[0]
    start = bucket_of(rule, T0) * rule.size_ms
    end = expiry_ms(rule, bucket_of(rule, start))  # the sub-bucket's end + the window
    assert await _edges(store, subject, start, end) == (True, False, False)


async def test_recency_edges(store: FcapStore) -> None:
    subject = one_subject(cap("creative", "recency", 1_800))
    assert await _edges(store, subject, T0 + 123, T0 + 123 + 1_800_000) == (True, False, False)


async def test_a_capped_answer_says_until_when(store: FcapStore) -> None:
    subject = one_subject(cap("campaign", "fixed", FIXED_WINDOWS["hour"], 1))
    user = new_user()
    await store.count("imp", subject, "win", user, None, T0 + 5, T0 + 5)
    result = await store.check([subject], user, None, T0 + 10, far_deadline())
    assert result.capped[subject] == T0 + 3_600_000


async def test_fixed_buckets_are_utc_aligned(store: FcapStore) -> None:
    subject = one_subject(cap("campaign", "fixed", FIXED_WINDOWS["day"], 1))
    user = new_user()
    await store.count("imp", subject, "win", user, None, T0 - 1, T0 - 1)  # 23:59:59.999 UTC
    assert not await _capped(store, subject, user, T0)
