"""Store-level chaos on a private Valkey: paused, resumed, killed, restarted.

Each test starts its own server (``LocalStack``; the session's is never touched) and
uses one client and one auto-pipelined connection throughout, as a worker on one
server does: recovery must not need new ones.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis

from bidder.adapters.valkey import connect_pipelined
from bidder.core.campaigns import CapPolicy
from bidder.stack.cluster import ValkeyNode
from bidder.stack.local import LocalStack
from fcap.capper import FrequencyCapper
from fcap.check_read import CheckResult
from fcap.rules import Subject
from fcap.store import CountOutcome, FcapStore, FcapUnavailable, connect
from tests.fcap.support import DAY_S, T0, cap, far_deadline, new_user, one_subject
from tests.processes import gone, wait_until
from tests.valkey_replies import caught_up

pytestmark = pytest.mark.asyncio
OPEN = one_subject(cap("campaign", "fixed", DAY_S, 3), cid="open")
CLOSED = one_subject(
    cap("campaign", "fixed", DAY_S, 3), cid="closed", policy=CapPolicy(on_store_error="closed")
)
STRICT = one_subject(
    cap("campaign", "fixed", DAY_S, 3), cid="strict", policy=CapPolicy(count_on="bid")
)
CHECK_TIMEOUT_S = 0.2


@pytest.fixture
def private(aws_endpoint: str) -> Iterator[LocalStack]:
    with LocalStack(aws_endpoint=aws_endpoint) as stack:
        yield stack


@pytest_asyncio.fixture
async def store(private: LocalStack) -> AsyncIterator[FcapStore]:
    # Socket timeouts far away: only the check's own timeout can end a paused call.
    client = connect(private.valkey_url, socket_timeout_s=60.0)
    pipelined = connect_pipelined(private.valkey_url, connect_timeout_s=2.0)
    await pipelined.connect()
    fcap_store = FcapStore(client, pipelined=pipelined, check_timeout_s=CHECK_TIMEOUT_S)
    await fcap_store.start()
    yield fcap_store
    await pipelined.aclose()
    await client.aclose()


def _signal(stack: LocalStack, sig: signal.Signals) -> None:
    os.kill(stack.pids["valkey"], sig)


async def _check(store: FcapStore, user: str | None = None) -> CheckResult:
    return await store.check([OPEN], user or new_user(), None, T0, far_deadline())


async def _at_the_cap(store: FcapStore) -> str:
    """A user who has seen OPEN's 3 impressions: a check that reaches the server says
    capped, and one that answers without it cannot know."""
    user = new_user()
    for n in range(3):
        await store.count(f"imp-{n}", OPEN, "win", user, None, T0, T0)
    return user


def _capped(result: CheckResult) -> tuple[set[Subject], frozenset[Subject]]:
    return set(result.capped), result.unknown


async def _check_while_paused(store: FcapStore, private: LocalStack) -> FcapUnavailable:
    """A check while the server is stopped (SIGSTOP); it is resumed, and has answered the
    paused call, before returning."""
    _signal(private, signal.SIGSTOP)
    try:
        with pytest.raises(FcapUnavailable) as caught:
            await _check(store)
    finally:
        _signal(private, signal.SIGCONT)
    assert store.pipelined is not None
    await caught_up(store.pipelined)
    return caught.value


async def test_a_paused_server_times_out_within_the_check_timeout(
    store: FcapStore, private: LocalStack
) -> None:
    failure = await _check_while_paused(store, private)
    assert isinstance(failure.__cause__, TimeoutError)  # asyncio's, not the socket's


async def test_a_resumed_server_answers_the_same_client(
    store: FcapStore, private: LocalStack
) -> None:
    user = await _at_the_cap(store)
    await _check_while_paused(store, private)
    assert _capped(await _check(store, user)) == ({OPEN}, frozenset())


async def test_a_timed_out_check_keeps_its_connection(
    store: FcapStore, private: LocalStack
) -> None:
    assert store.pipelined is not None
    user = await _at_the_cap(store)  # before counting connections: it uses the client's
    with redis.Redis.from_url(private.valkey_url) as admin:
        before = admin.info("stats")["total_connections_received"]
        dropped = store.pipelined.dropped
        await _check_while_paused(store, private)
        # Answered after the late reply, on the same socket, with this check's own answer.
        assert _capped(await _check(store, user)) == ({OPEN}, frozenset())
        assert store.pipelined.dropped == dropped + 1
        assert admin.info("stats")["total_connections_received"] == before


async def test_paused_store_fail_open_bids_and_fail_closed_does_not(
    store: FcapStore, private: LocalStack
) -> None:
    capper = FrequencyCapper(store)
    _signal(private, signal.SIGSTOP)
    try:
        verdict = await capper.check([OPEN, CLOSED], new_user(), None, T0, far_deadline())
    finally:
        _signal(private, signal.SIGCONT)
    assert (verdict.allows(OPEN), verdict.allows(CLOSED)) == (True, False)


async def test_a_killed_server_is_an_error(store: FcapStore, private: LocalStack) -> None:
    _signal(private, signal.SIGKILL)
    await asyncio.to_thread(_wait_gone, private.pids["valkey"])
    with pytest.raises(FcapUnavailable):
        await _check(store)


async def test_a_server_restarted_on_the_same_port_is_used_again(
    store: FcapStore, private: LocalStack, tmp_path: Path
) -> None:
    port = int(private.valkey_url.rsplit(":", 1)[1])
    _signal(private, signal.SIGKILL)
    await asyncio.to_thread(_wait_gone, private.pids["valkey"])
    with pytest.raises(FcapUnavailable):
        await _check(store)
    again = ValkeyNode(tmp_path, port)
    await asyncio.to_thread(again.start)
    try:
        user = new_user()
        # A fresh server knows no script: NOSCRIPT, SCRIPT LOAD, EVALSHA again, on the
        # auto-pipelined connection (check.lua) and on the redis-py client (count.lua).
        result = await _check_when_reconnected(store, [OPEN, STRICT], user)
        counted = await _count_past_a_stale_connection(store, user)
    finally:
        again.stop()
    assert OPEN not in result.capped and STRICT in result.reservations
    assert counted == CountOutcome.COUNTED


async def _check_when_reconnected(
    store: FcapStore, subjects: list[Subject], user: str
) -> CheckResult:
    """The check once the auto-pipelined connection is back: a call made while it is
    down fails at once and starts the reconnect in the background."""
    assert store.pipelined is not None
    await store.pipelined.connect()
    return await store.check(subjects, user, None, T0, far_deadline())


async def _count_past_a_stale_connection(store: FcapStore, user: str) -> CountOutcome:
    """A count through the redis-py client, whose pooled connection to the killed
    server may still be there: the first call on it fails and drops it."""
    try:
        return await store.count("imp", OPEN, "win", user, None, T0, T0)
    except FcapUnavailable:
        return await store.count("imp", OPEN, "win", user, None, T0, T0)


def _wait_gone(pid: int) -> None:
    """Until the killed child is gone (or a zombie): waiting for a process, not for time."""
    assert wait_until(lambda: gone(pid), timeout_s=10.0), f"pid {pid} still runs"
