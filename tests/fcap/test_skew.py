"""Two bidder processes whose clocks differ by 2 s share one user's counters.

The caller's clock is the time authority: an impression belongs to the window of the
clock that stamped it; each process judges "now" by its own clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from bidder.core.clock import ManualClock
from fcap.store import FcapStore, connect
from tests.fcap.support import HOUR_S, T0, cap, far_deadline, new_user, one_subject

pytestmark = pytest.mark.asyncio
SKEW_MS = 2_000
HOURLY = one_subject(cap("campaign", "fixed", HOUR_S, 1))
RECENCY = one_subject(cap("creative", "recency", 60))


@pytest_asyncio.fixture
async def other(fcap_valkey_url: str) -> AsyncIterator[FcapStore]:
    """A second "process": its own client."""
    client = connect(fcap_valkey_url, socket_timeout_s=2.0)
    yield FcapStore(client, check_timeout_s=1.0)
    await client.aclose()


def _clocks(true_ms: int) -> tuple[ManualClock, ManualClock]:
    """(ahead, behind): 'ahead' reads 2 s later than 'behind'."""
    return ManualClock(start_wall_ms=true_ms + SKEW_MS), ManualClock(start_wall_ms=true_ms)


async def test_mid_window_skew_changes_nothing(store: FcapStore, other: FcapStore) -> None:
    ahead, behind = _clocks(T0 + 1_800_000)
    user = new_user()
    await store.count("imp", HOURLY, "win", user, None, ahead.wall_ms(), ahead.wall_ms())
    result = await other.check([HOURLY], user, None, behind.wall_ms(), far_deadline())
    assert HOURLY in result.capped


async def test_near_an_edge_the_impression_follows_the_stamping_clock(
    store: FcapStore, other: FcapStore
) -> None:
    edge = T0 + HOUR_S * 1000
    ahead, behind = _clocks(edge - 1_000)  # ahead reads edge + 1 s, behind edge - 1 s
    user = new_user()
    await store.count("imp", HOURLY, "win", user, None, ahead.wall_ms(), ahead.wall_ms())
    before = await other.check([HOURLY], user, None, behind.wall_ms(), far_deadline())
    behind.advance(2.0)
    after = await other.check([HOURLY], user, None, behind.wall_ms(), far_deadline())
    assert (HOURLY in before.capped, HOURLY in after.capped) == (False, True)


async def test_a_recency_gap_looks_longer_by_the_skew_to_a_slower_clock(
    store: FcapStore, other: FcapStore
) -> None:
    ahead, behind = _clocks(T0)
    user = new_user()
    await store.count("imp", RECENCY, "win", user, None, ahead.wall_ms(), ahead.wall_ms())
    result = await other.check([RECENCY], user, None, behind.wall_ms(), far_deadline())
    assert result.capped[RECENCY] - behind.wall_ms() == 60_000 + SKEW_MS
