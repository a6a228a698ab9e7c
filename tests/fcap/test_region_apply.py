"""region_apply.lua on a real Valkey agrees with the reference merge (fcap.regions)."""

from __future__ import annotations

import random

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.stack.regions import LocalRegions
from fcap import keys, regions, scripts
from tests.fcap.support import T0, new_user

# Slot names whose bucket (base-36 expiry minute "zzzzz") lies far in the future.
LIVE_SLOTS = [regions.slot(f"tok{n:03d}zzzzz", r) for n in range(3) for r in ("eu", "us")]


@settings(max_examples=30)
@given(
    st.lists(st.tuples(st.sampled_from(LIVE_SLOTS), st.integers(1, 50)), max_size=12),
    st.randoms(use_true_random=False),
)
def test_region_apply_lua_is_the_reference_merge_in_any_order(
    local_regions: LocalRegions, changes: list[tuple[str, int]], rnd: random.Random
) -> None:
    key = keys.counters(keys.USER, new_user())
    with redis.Redis.from_url(local_regions.urls["ap"]) as client:
        shuffled = changes + changes[: len(changes) // 2]
        rnd.shuffle(shuffled)
        for slot_name, value in shuffled:
            scripts.REGION_APPLY.run_sync(client, (key,), (T0, slot_name, value))
        raw = client.hgetall(key)
        client.delete(key)
    expected: dict[str, int] = {}
    for slot_name, value in changes:
        expected = regions.merge(expected, {slot_name: value})
    assert {k.decode(): int(v) for k, v in raw.items()} == expected
