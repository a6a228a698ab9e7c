"""The counted bitmap: a loose cap passes a person never counted today without a read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.campaigns import CapPolicy
from fcap.capper import COUNTED_FLUSH_S, FrequencyCapper
from fcap.counted import BITS, DAY_MS, CountedCopy, bit_of, day_of
from fcap.rules import Subject
from fcap.store import FcapStore
from tests.fcap.support import DAY_S, HOUR_S, T0, cap, far_deadline, new_user, one_subject
from tests.published import sample

LOOSE = CapPolicy.of_class("loose")
STALE_MS = LOOSE.max_stale_s * 1000


def _set(keys: list[str]) -> bytes:
    bits = bytearray(BITS // 8)
    for key in keys:
        bit = bit_of(key)
        bits[bit >> 3] |= 0x80 >> (bit & 7)
    return bytes(bits)


@given(st.lists(st.text(min_size=1), max_size=20), st.text(min_size=1))
def test_a_counted_key_is_never_taken_for_one_never_counted(keys: list[str], other: str) -> None:
    copy = CountedCopy(day_of(T0), _set(keys), T0)
    assert not any(copy.never_counted(key, T0) for key in keys)
    if bit_of(other) not in {bit_of(key) for key in keys}:
        assert copy.never_counted(other, T0)


def test_a_copy_says_nothing_about_another_day() -> None:
    copy = CountedCopy(day_of(T0), b"", T0)
    assert copy.never_counted("b:x", T0 + DAY_MS - 1) and not copy.never_counted("b:x", T0 + DAY_MS)


def test_only_loose_subjects_with_hour_and_day_caps_can_use_the_bitmap() -> None:
    def zero_room(*caps: object, policy: CapPolicy = LOOSE) -> int:
        return one_subject(*caps, policy=policy).zero_room  # type: ignore[arg-type]

    assert zero_room(cap("campaign", "fixed", DAY_S, 4), cap("creative", "fixed", HOUR_S, 2)) == 2
    assert zero_room(cap("campaign", "fixed", DAY_S, 4), policy=CapPolicy.of_class("tight")) == 0
    assert zero_room(cap("campaign", "rolling", DAY_S, 4)) == 0
    assert zero_room(cap("campaign", "fixed", 7 * DAY_S, 4)) == 0
    assert zero_room(cap("campaign", "recency", 60)) == 0


def _loose(limit: int = 3) -> Subject:
    return one_subject(cap("campaign", "fixed", DAY_S, limit), cid="counted-loose", policy=LOOSE)


def _reads() -> float:
    return sample("bidsim_fcap_reads_total", {"cap_class": "loose"})


@pytest.mark.asyncio
async def test_a_person_never_counted_passes_without_a_read_and_one_counted_is_read(
    store: FcapStore,
) -> None:
    loose, fresh_person, counted_person = _loose(), new_user(), new_user()
    capper = FrequencyCapper(store)
    await capper.count("imp", loose, "win", counted_person, None, T0, T0)
    await capper.flush_counted(T0)
    await capper.refresh_counted(T0 + 1, far_deadline())
    before = _reads()
    verdict = await capper.check([loose], fresh_person, None, T0 + 2, far_deadline())
    assert verdict.allows(loose) and _reads() == before
    await capper.check([loose], counted_person, None, T0 + 3, far_deadline())
    assert _reads() == before + 1


@pytest.mark.asyncio
async def test_a_pass_on_the_bitmap_allows_the_smallest_limit_of_the_workers_bids(
    store: FcapStore,
) -> None:
    loose, person = _loose(limit=2), new_user()
    capper = FrequencyCapper(store)
    await capper.refresh_counted(T0, far_deadline())
    for k in range(2):
        verdict = await capper.check([loose], person, None, T0 + 1 + k, far_deadline())
        capper.bid_on(verdict.on_count_cache[loose])
    before = _reads()
    again = await capper.check([loose], person, None, T0 + 3, far_deadline())
    assert loose in again.capped and _reads() == before


@pytest.mark.asyncio
async def test_a_copy_as_old_as_the_class_allows_is_not_used(store: FcapStore) -> None:
    loose, person = _loose(), new_user()
    capper = FrequencyCapper(store)
    await capper.refresh_counted(T0, far_deadline())
    before = _reads()
    late = T0 + STALE_MS - round(COUNTED_FLUSH_S * 1000)
    await capper.check([loose], person, None, late, far_deadline())
    assert _reads() == before + 1
