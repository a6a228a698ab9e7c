"""The check's lean read (``fcap.wire``) and the plan cache, on the real Valkey."""

from __future__ import annotations

import pytest

from fcap import keys
from fcap.store import FcapStore, connect
from fcap.wire import Reader
from tests.fcap.support import DAY_S, T0, cap, far_deadline, new_user, one_subject

pytestmark = pytest.mark.asyncio
FIELDS = ("a", "b", "absent")


async def test_the_lean_read_answers_like_execute_command(fcap_valkey_url: str) -> None:
    client = connect(fcap_valkey_url)
    try:
        key = keys.counters(keys.USER, f"{new_user()}-é{{x}}%")  # non-ASCII, escaped tag
        await client.hset(key, mapping={"a": 1, "b": 22})
        await client.pexpire(key, 60_000)
        packed = b"".join(b"$%d\r\n%s\r\n" % (len(f), f.encode()) for f in FIELDS)
        lean = await Reader(client).hmget(key, FIELDS, packed)
        plain = await Reader(client, lean=False).hmget(key, FIELDS, packed)
    finally:
        await client.aclose()
    assert lean == plain == [b"1", b"22", None]


async def test_a_store_with_a_tiny_plan_cache_still_answers_right(store: FcapStore) -> None:
    small = FcapStore(store.client, check_timeout_s=2.0, max_plans=1)
    one = one_subject(cap("campaign", "fixed", DAY_S, 1), cid="p1")
    two = one_subject(cap("campaign", "fixed", DAY_S, 1), cid="p2")
    user = new_user()
    await store.count("imp", one, "win", user, None, T0, T0)
    answers = [
        set((await small.check(candidates, user, None, T0 + 1, far_deadline())).capped)
        for candidates in ([one], [two], [one, two], [one])
    ]
    assert answers == [{one}, set(), {one}, {one}]
