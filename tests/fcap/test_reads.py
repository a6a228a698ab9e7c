"""The check's reads on the real Valkey: the auto-pipelined way and the redis-py way
answer alike, and the plan cache."""

from __future__ import annotations

import pytest

from bidder.core.campaigns import CapPolicy
from fcap import keys
from fcap.store import FcapStore
from tests.fcap.support import DAY_S, T0, cap, far_deadline, new_user, one_subject

pytestmark = pytest.mark.asyncio
ONE = one_subject(cap("campaign", "fixed", DAY_S, 1), cid="r1")
TWO = one_subject(cap("campaign", "fixed", DAY_S, 2), cid="r2")
STRICT = one_subject(cap("campaign", "fixed", DAY_S, 1), cid="r3", policy=CapPolicy(count_on="bid"))


async def test_pipelined_and_redis_py_checks_answer_alike(store: FcapStore) -> None:
    plain = FcapStore(store.client, check_timeout_s=2.0)
    user = f"{new_user()}-é{{x}}%"  # non-ASCII, and braces inside the hash tag
    await store.count("imp", ONE, "win", user, None, T0, T0)
    answers = [
        set((await each.check([ONE, TWO], user, None, T0 + 1, far_deadline())).capped)
        for each in (store, plain)
    ]
    assert answers == [{ONE}, {ONE}]


async def test_both_sides_of_a_check_leave_in_one_write(store: FcapStore) -> None:
    pipelined = store.pipelined
    assert pipelined is not None
    both = one_subject(cap("campaign", "fixed", DAY_S, 1), cap("household", "fixed", DAY_S, 1))
    writes, commands = pipelined.writes, pipelined.commands
    result = await store.check([both], new_user(), new_user(), T0, far_deadline())
    assert (pipelined.writes - writes, pipelined.commands - commands) == (1, 2)
    assert not result.capped


async def test_a_reserving_check_goes_through_check_lua_on_the_pipelined_connection(
    store: FcapStore,
) -> None:
    user = new_user()
    first = await store.check([STRICT], user, None, T0, far_deadline())
    second = await store.check([STRICT], user, None, T0 + 1, far_deadline())
    assert STRICT in first.reservations and STRICT in second.capped
    assert await store.client.hvals(keys.counters(keys.USER, user)) == [b"1"]


async def test_a_store_with_a_tiny_plan_cache_still_answers_right(store: FcapStore) -> None:
    small = FcapStore(store.client, pipelined=store.pipelined, check_timeout_s=2.0, max_plans=1)
    one = one_subject(cap("campaign", "fixed", DAY_S, 1), cid="p1")
    two = one_subject(cap("campaign", "fixed", DAY_S, 1), cid="p2")
    user = new_user()
    await store.count("imp", one, "win", user, None, T0, T0)
    answers = [
        set((await small.check(candidates, user, None, T0 + 1, far_deadline())).capped)
        for candidates in ([one], [two], [one, two], [one])
    ]
    assert answers == [{one}, set(), {one}, {one}]
