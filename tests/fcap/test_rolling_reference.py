"""Rolling windows on the real Valkey against a brute-force reference (hypothesis)."""

from __future__ import annotations

import asyncio

import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fcap.rules import Subject, capped_by
from fcap.store import FcapStore, connect
from tests.fcap.support import HOUR_S, T0, cap, new_user, one_subject


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hours=st.sampled_from([1, 2, 6, 24]),
    limit=st.integers(1, 4),
    offsets=st.lists(st.integers(0, 30 * HOUR_S * 1000), min_size=1, max_size=8),
    probe=st.integers(0, 40 * HOUR_S * 1000),
)
def test_rolling_window_matches_the_reference(
    fcap_valkey_url: str, hours: int, limit: int, offsets: list[int], probe: int
) -> None:
    """Exact brute force bounds the store: capped whenever the exact window is full,
    never when even the window widened by one sub-bucket (the error bound) is not;
    and equal to the documented sub-bucket model everywhere."""
    subject = one_subject(cap("campaign", "rolling", hours * HOUR_S, limit))
    rule = subject.user_rules[0]
    now = T0 + probe
    impressions = [T0 + o for o in offsets]
    capped = asyncio.run(_count_then_check(fcap_valkey_url, subject, impressions, now))
    exact = sum(0 <= now - t < rule.reach_ms for t in impressions)
    widened = sum(0 <= now - t < rule.reach_ms + rule.size_ms for t in impressions)
    assert capped == capped_by(rule, [t for t in impressions if t <= now], now)
    assert (exact < limit or capped) and (widened >= limit or not capped)


async def _count_then_check(url: str, subject: Subject, times: list[int], now: int) -> bool:
    client: redis.asyncio.Redis = connect(url, socket_timeout_s=2.0)
    store = FcapStore(client, check_timeout_s=2.0, write_timeout_s=2.0)
    user = new_user()
    deadline = asyncio.get_running_loop().time() + 5.0
    try:
        for n, t in enumerate(sorted(times)):
            if t <= now:  # notices arrive by the time of the check
                await store.count(f"i{n}", subject, "win", user, None, t, now)
        return subject in (await store.check([subject], user, None, now, deadline)).capped
    finally:
        await client.aclose()
