"""Reserve-at-bid: the check takes a slot atomically; release gives it back."""

from __future__ import annotations

import asyncio

import pytest

from bidder.core.campaigns import CapPolicy
from fcap import keys
from fcap.store import FcapStore
from tests.fcap.support import DAY_S, T0, cap, far_deadline, new_user, one_subject

pytestmark = pytest.mark.asyncio
STRICT = CapPolicy(count_on="bid")


async def test_64_concurrent_writers_never_get_more_than_the_limit(store: FcapStore) -> None:
    subject = one_subject(cap("campaign", "fixed", DAY_S, 5), policy=STRICT)
    user = new_user()
    results = await asyncio.gather(
        *(store.check([subject], user, None, T0 + n, far_deadline()) for n in range(64))
    )
    granted = sum(subject in r.reservations for r in results)
    assert granted == 5
    assert await store.client.hvals(keys.counters(keys.USER, user)) == [b"5"]


async def test_a_release_frees_the_slot(store: FcapStore) -> None:
    subject = one_subject(cap("campaign", "fixed", DAY_S, 1), policy=STRICT)
    user = new_user()
    first = await store.check([subject], user, None, T0, far_deadline())
    await store.release(first.reservations[subject])
    again = await store.check([subject], user, None, T0 + 1, far_deadline())
    assert subject in again.reservations


async def test_a_second_release_of_one_reservation_does_nothing(store: FcapStore) -> None:
    subject = one_subject(cap("campaign", "fixed", DAY_S, 2), policy=STRICT)
    user = new_user()
    await store.check([subject], user, None, T0, far_deadline())
    mine = (await store.check([subject], user, None, T0, far_deadline())).reservations[subject]
    await store.release(mine)
    await store.release(mine)
    assert await store.client.hvals(keys.counters(keys.USER, user)) == [b"1"]


async def test_a_recency_release_restores_the_gap_before_it(store: FcapStore) -> None:
    subject = one_subject(cap("creative", "recency", 60), policy=STRICT)
    user = new_user()
    await store.check([subject], user, None, T0, far_deadline())
    later = await store.check([subject], user, None, T0 + 60_000, far_deadline())
    await store.release(later.reservations[subject])
    check = await store.check([subject], user, None, T0 + 59_999, far_deadline())
    assert check.capped[subject] == T0 + 60_000


async def test_a_slot_reserved_on_one_side_is_given_back_when_the_other_caps(
    store: FcapStore,
) -> None:
    subject = one_subject(
        cap("campaign", "fixed", DAY_S, 5), cap("household", "fixed", DAY_S, 1), policy=STRICT
    )
    user, other, home = new_user(), new_user(), "h:4:" + new_user()
    await store.check([subject], other, home, T0, far_deadline())  # fills the household
    result = await store.check([subject], user, home, T0 + 1, far_deadline())
    await store.drain()
    assert subject in result.capped and subject not in result.reservations
    assert await store.client.hvals(keys.counters(keys.USER, user)) == []


async def test_reservations_in_one_check_see_each_other(store: FcapStore) -> None:
    a = one_subject(cap("advertiser", "fixed", DAY_S, 1), policy=STRICT, cid="a")
    b = one_subject(cap("advertiser", "fixed", DAY_S, 1), policy=STRICT, cid="b")
    result = await store.check([a, b], new_user(), None, T0, far_deadline())
    assert (a in result.reservations, b in result.capped) == (True, True)
