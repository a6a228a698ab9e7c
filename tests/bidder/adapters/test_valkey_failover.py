"""bidder.adapters.valkey's asyncio cluster client through a master's death and its
replica's promotion.

One private 3-master, 1-replica cluster; one client made before the kill. After
``kill -9`` of the master of key ``DEAD``, the same client keeps asking, every 20 ms,
for ``DEAD``, for a key of another master and for ``DEAD`` through a
pipeline (what the pacing lease refresh sends), each call with its own 100 ms timeout
as a caller on the bid path would, until all three answered for a while after the
promotion (bounded).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from bidder.adapters.valkey import AsyncValkey, connect_async, warm_up
from bidder.stack.cluster import LocalValkeyCluster

pytestmark = pytest.mark.chaos

DEAD = "failover-test:{dead}"
CALL_TIMEOUT_S = 0.1
BOUND_S = 20.0
HEALTHY_ROUNDS = 10
"""Rounds in a row in which every call answered: the client has recovered."""


@dataclass
class Calls:
    """Outcomes per kind of call ('dead', 'alive', 'pipeline')."""

    ok: Counter[str] = field(default_factory=Counter)
    failed: dict[str, Counter[str]] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    recovered: bool = False


async def _call(calls: Calls, kind: str, run: Callable[[], Awaitable[Any]]) -> bool:
    try:
        async with asyncio.timeout(CALL_TIMEOUT_S):
            calls.values[kind] = await run()
    except Exception as exc:  # the kinds of failure are what the tests look at
        calls.failed.setdefault(kind, Counter())[type(exc).__name__] += 1
        return False
    calls.ok[kind] += 1
    return True


def _on_another_master(cluster: LocalValkeyCluster) -> str:
    victim = cluster.master_of(DEAD)
    keys = (f"failover-test:{{alive-{n}}}" for n in range(100))
    return next(key for key in keys if cluster.master_of(key) is not victim)


async def _through_a_failover(cluster: LocalValkeyCluster) -> Calls:
    client: AsyncValkey = connect_async(cluster.url, cluster=True, timeout_s=0.25)
    await warm_up(client, 5.0)
    alive = _on_another_master(cluster)
    await client.set(DEAD, "before", px=600_000)
    await client.set(alive, "alive", px=600_000)
    victim = cluster.master_of(DEAD)
    with redis.Redis(port=victim.port, socket_timeout=2.0) as master:
        master.execute_command("WAIT", 1, 2000)  # on the replica before the kill

    async def pipelined() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.get(DEAD)
        return (await pipe.execute())[0]

    kinds = {"dead": lambda: client.get(DEAD), "alive": lambda: client.get(alive)}
    calls, healthy = Calls(), 0
    await asyncio.to_thread(cluster.kill, victim)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + BOUND_S
    try:
        while healthy < HEALTHY_ROUNDS and loop.time() < give_up:
            answers = [await _call(calls, kind, run) for kind, run in kinds.items()]
            answers.append(await _call(calls, "pipeline", pipelined))
            healthy = healthy + 1 if all(answers) else 0
            await asyncio.sleep(0.02)
        calls.recovered = healthy >= HEALTHY_ROUNDS
    finally:
        await client.aclose()
    return calls


@pytest.fixture(scope="module")
def calls() -> Iterator[Calls]:
    with LocalValkeyCluster(replicas=1) as cluster:
        yield asyncio.run(_through_a_failover(cluster))


def test_the_same_client_recovers_after_the_promotion(calls: Calls) -> None:
    assert calls.recovered, calls


def test_the_killed_masters_keys_are_read_from_the_promoted_replica(calls: Calls) -> None:
    assert calls.values["dead"] == b"before" and calls.values["pipeline"] == b"before"


def test_the_other_masters_keys_stay_readable_during_the_failover(calls: Calls) -> None:
    failed = sum(calls.failed.get("alive", Counter()).values())
    assert failed <= 0.1 * (failed + calls.ok["alive"]), calls


def test_every_failure_is_a_redis_error_or_a_timeout(calls: Calls) -> None:
    seen = {name for counter in calls.failed.values() for name in counter}
    assert seen <= {"ConnectionError", "TimeoutError"}, calls
