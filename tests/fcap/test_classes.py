"""Cap classes in the capper: the count cache of loose caps, each class's failure behaviour."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from bidder.core.campaigns import CapPolicy
from bidder.stack.child import held_port
from fcap.capper import FrequencyCapper
from fcap.rules import Subject
from fcap.store import FcapStore, connect
from tests.fcap.support import DAY_S, T0, cap, far_deadline, new_user, one_subject
from tests.published import sample

pytestmark = pytest.mark.asyncio
STALE_MS = CapPolicy.of_class("loose").max_stale_s * 1000


def _subject(name: str) -> Subject:
    return one_subject(
        cap("campaign", "fixed", DAY_S, 1), cid=f"class-{name}", policy=CapPolicy.of_class(name)
    )


def _reads(name: str) -> float:
    return sample("bidsim_fcap_reads_total", {"cap_class": name})


@pytest_asyncio.fixture
async def down_store() -> AsyncIterator[FcapStore]:
    client = connect(f"redis://127.0.0.1:{held_port()}")
    yield FcapStore(client)
    await client.aclose()


async def test_a_loose_cap_acts_on_its_last_read_until_it_is_stale(store: FcapStore) -> None:
    loose, user = _subject("loose"), new_user()
    capper = FrequencyCapper(store)
    await capper.check([loose], user, None, T0, far_deadline())
    await store.count("imp", loose, "win", user, None, T0 + 1, T0 + 1)
    before = _reads("loose")
    stale = await capper.check([loose], user, None, T0 + STALE_MS - 1, far_deadline())
    assert stale.allows(loose) and _reads("loose") == before
    fresh = await capper.check([loose], user, None, T0 + STALE_MS, far_deadline())
    assert loose in fresh.capped and _reads("loose") == before + 1


@pytest.mark.parametrize("name", ["standard", "tight", "strict"])
async def test_other_classes_read_on_every_request(store: FcapStore, name: str) -> None:
    subject, user = _subject(name), new_user()
    capper = FrequencyCapper(store)
    before = _reads(name)
    for k in range(3):
        verdict = await capper.check([subject], user, None, T0 + k, far_deadline())
        for reservation in verdict.reservations.values():
            await capper.release(reservation)
    assert _reads(name) == before + 3


async def test_a_loose_cap_found_capped_is_not_remembered_as_under(store: FcapStore) -> None:
    loose, user = _subject("loose"), new_user()
    await store.count("imp", loose, "win", user, None, T0, T0)
    capper = FrequencyCapper(store)
    await capper.check([loose], user, None, T0 + 1, far_deadline())
    assert len(capper.fresh) == 0


async def test_strict_reserves_a_slot_at_bid_time(store: FcapStore) -> None:
    strict, user = _subject("strict"), new_user()
    verdict = await FrequencyCapper(store).check([strict], user, None, T0, far_deadline())
    assert strict in verdict.reservations
    again = await FrequencyCapper(store).check([strict], user, None, T0 + 1, far_deadline())
    assert strict in again.capped


@pytest.mark.parametrize(
    ("name", "bids"), [("loose", True), ("standard", True), ("tight", False), ("strict", False)]
)
async def test_store_down_each_class_fails_its_own_way(
    down_store: FcapStore, name: str, bids: bool
) -> None:
    subject = _subject(name)
    verdict = await FrequencyCapper(down_store).check(
        [subject], new_user(), None, T0, far_deadline()
    )
    assert verdict.allows(subject) is bids and verdict.store_error


async def test_a_fail_open_pass_with_the_store_down_is_unchecked(down_store: FcapStore) -> None:
    loose, tight = _subject("loose"), _subject("tight")
    verdict = await FrequencyCapper(down_store).check(
        [loose, tight], new_user(), None, T0, far_deadline()
    )
    assert verdict.unchecked == {loose}


async def test_a_fail_open_pass_without_a_user_key_is_unchecked(store: FcapStore) -> None:
    standard, strict = _subject("standard"), _subject("strict")
    verdict = await FrequencyCapper(store).check([standard, strict], None, None, T0, far_deadline())
    assert verdict.unchecked == {standard} and strict in verdict.unavailable


async def test_a_checked_pass_is_not_unchecked(store: FcapStore) -> None:
    standard = _subject("standard")
    verdict = await FrequencyCapper(store).check([standard], new_user(), None, T0, far_deadline())
    assert verdict.allows(standard) and not verdict.unchecked


def _loose(limit: int) -> Subject:
    return one_subject(
        cap("campaign", "fixed", DAY_S, limit),
        cid=f"class-loose-{limit}",
        policy=CapPolicy.of_class("loose"),
    )


async def test_a_loose_read_allows_only_as_many_of_the_workers_bids_as_it_found_room_for(
    store: FcapStore,
) -> None:
    loose, user = _loose(3), new_user()
    await store.count("imp", loose, "win", user, None, T0, T0)
    capper = FrequencyCapper(store)
    before = _reads("loose")
    for k in range(2):  # read: 1 of 3 counted, room for 2 bids of this worker
        verdict = await capper.check([loose], user, None, T0 + 1 + k, far_deadline())
        assert verdict.allows(loose)
        capper.bid_on(verdict.on_count_cache[loose])
    assert _reads("loose") == before + 1
    # Its room spent, the worker counts the person capped until the read is stale,
    # though the bids were not won (not counted).
    again = await capper.check([loose], user, None, T0 + 3, far_deadline())
    assert loose in again.capped and _reads("loose") == before + 1
    stale = await capper.check([loose], user, None, T0 + 1 + STALE_MS, far_deadline())
    assert stale.allows(loose) and _reads("loose") == before + 2


async def test_a_loose_read_not_bid_on_stands_until_it_is_stale(store: FcapStore) -> None:
    loose, user = _loose(2), new_user()
    capper = FrequencyCapper(store)
    before = _reads("loose")
    for k in range(5):
        assert (await capper.check([loose], user, None, T0 + k, far_deadline())).allows(loose)
    assert _reads("loose") == before + 1


async def test_a_loose_read_takes_the_least_room_of_the_user_and_household_sides(
    store: FcapStore,
) -> None:
    loose = one_subject(
        cap("campaign", "fixed", DAY_S, 5),
        cap("household", "fixed", DAY_S, 2),
        cid="class-loose-both",
        policy=CapPolicy.of_class("loose"),
    )
    user, house = new_user(), "h:" + new_user()
    await store.count("imp", loose, "win", user, house, T0, T0)
    capper = FrequencyCapper(store)
    verdict = await capper.check([loose], user, house, T0 + 1, far_deadline())
    capper.bid_on(verdict.on_count_cache[loose])  # room: min(5 - 1, 2 - 1) = 1
    again = await capper.check([loose], user, house, T0 + 2, far_deadline())
    assert loose in again.capped


async def test_each_of_n_workers_bids_its_share_of_the_room_rounded_up(store: FcapStore) -> None:
    loose, user = _loose(5), new_user()
    capper = FrequencyCapper(store, workers=2)
    allowed = 0
    for k in range(5):
        verdict = await capper.check([loose], user, None, T0 + k, far_deadline())
        if verdict.allows(loose):
            allowed += 1
            capper.bid_on(verdict.on_count_cache[loose])
    assert allowed == 3  # 5 / 2, rounded up: two workers pass the cap by at most one
