"""The policy layer: negative cache, fail-open / fail-closed, missing keys, metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from bidder.core.campaigns import CapPolicy
from bidder.stack.child import held_port
from fcap.capper import FrequencyCapper
from fcap.store import FcapStore, connect
from tests.fcap.support import DAY_S, T0, cap, far_deadline, new_user, one_subject
from tests.published import sample

pytestmark = pytest.mark.asyncio
OPEN = one_subject(cap("campaign", "fixed", DAY_S, 1), cid="open")
CLOSED = one_subject(
    cap("campaign", "fixed", DAY_S, 1), cid="closed", policy=CapPolicy(on_store_error="closed")
)
UNCAPPED = one_subject(cid="free")


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return sample(name, labels)


@pytest_asyncio.fixture
async def down_store() -> AsyncIterator[FcapStore]:
    """A store whose Valkey is not there: a real refused connection."""
    client = connect(f"redis://127.0.0.1:{held_port()}")
    yield FcapStore(client)
    await client.aclose()


async def test_a_capped_user_is_answered_from_the_cache(store: FcapStore) -> None:
    capper, user = FrequencyCapper(store), new_user()
    await store.count("imp", OPEN, "win", user, None, T0, T0)
    await capper.check([OPEN], user, None, T0 + 1, far_deadline())
    before = _sample("bidsim_fcap_checks_total")
    verdict = await capper.check([OPEN], user, None, T0 + 2, far_deadline())
    assert OPEN in verdict.capped and _sample("bidsim_fcap_checks_total") == before


async def test_the_cache_lets_go_when_the_window_ends(store: FcapStore) -> None:
    capper, user = FrequencyCapper(store), new_user()
    await store.count("imp", OPEN, "win", user, None, T0, T0)
    await capper.check([OPEN], user, None, T0 + 1, far_deadline())
    verdict = await capper.check([OPEN], user, None, T0 + DAY_S * 1000, far_deadline())
    assert verdict.allows(OPEN)


async def test_store_down_fail_open_bids(down_store: FcapStore) -> None:
    verdict = await FrequencyCapper(down_store).check([OPEN], new_user(), None, T0, far_deadline())
    assert verdict.allows(OPEN) and verdict.store_error


async def test_store_down_fail_closed_does_not_bid(down_store: FcapStore) -> None:
    verdict = await FrequencyCapper(down_store).check(
        [CLOSED], new_user(), None, T0, far_deadline()
    )
    assert CLOSED in verdict.unavailable


async def test_store_errors_are_counted(down_store: FcapStore) -> None:
    before = _sample("bidsim_fcap_store_errors_total", {"op": "check"})
    await FrequencyCapper(down_store).check([OPEN], new_user(), None, T0, far_deadline())
    assert _sample("bidsim_fcap_store_errors_total", {"op": "check"}) == before + 1


async def test_no_user_key_fail_open_bids(store: FcapStore) -> None:
    verdict = await FrequencyCapper(store).check([OPEN], None, None, T0, far_deadline())
    assert verdict.allows(OPEN)


async def test_no_user_key_fail_closed_does_not_bid(store: FcapStore) -> None:
    verdict = await FrequencyCapper(store).check([CLOSED], None, None, T0, far_deadline())
    assert CLOSED in verdict.unavailable


async def test_uncapped_campaigns_need_no_round_trip(down_store: FcapStore) -> None:
    verdict = await FrequencyCapper(down_store).check([UNCAPPED], None, None, T0, far_deadline())
    assert verdict.allows(UNCAPPED) and not verdict.store_error
