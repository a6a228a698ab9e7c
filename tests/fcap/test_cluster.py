"""The same scripts on a real local Valkey Cluster (3 masters)."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio import RedisCluster

from bidder.core.campaigns import CapPolicy
from bidder.stack.cluster import LocalValkeyCluster
from fcap import keys
from fcap.rules import Subject
from fcap.store import CountOutcome, FcapStore, FcapUnavailable
from tests.fcap.support import DAY_S, HOUR_S, T0, cap, far_deadline, new_user, one_subject

pytestmark = pytest.mark.long(11)

SUBJECTS = [
    one_subject(cap("campaign", "fixed", DAY_S, 2), cap("campaign", "rolling", 6 * HOUR_S, 3),
                cid=f"c{n}")
    for n in range(10)
]  # fmt: skip
HOUSEHOLD = one_subject(cap("household", "fixed", DAY_S, 1), cap("creative", "recency", 60))


def _redirects(cluster: LocalValkeyCluster) -> int:
    total = 0
    for node in cluster.nodes:
        with redis.Redis.from_url(node.url) as client:
            stats = client.info("errorstats")
        total += sum(stats.get(f"errorstat_{e}", {}).get("count", 0) for e in ("MOVED", "ASK"))
    return total


def test_the_server_puts_all_keys_of_a_user_in_one_slot(cluster: LocalValkeyCluster) -> None:
    with redis.Redis.from_url(cluster.url) as client:
        for user in ("b:alice", "i:6d92078a-8246-4ba4-ae5b-76104861e7dc", "x:s}sp:{u%"):
            for kind in (keys.USER, keys.HOUSEHOLD):
                named = [keys.counters(kind, user), keys.dedup(kind, user, "imp-1")]
                slots = {client.execute_command("CLUSTER", "KEYSLOT", k) for k in named}
                assert len(slots) == 1


@pytest.mark.asyncio
async def test_both_scripts_run_on_the_cluster(cluster_store: FcapStore) -> None:
    user, home = new_user(), "h:4:" + new_user()
    counted = await cluster_store.count("imp", HOUSEHOLD, "win", user, home, T0, T0)
    result = await cluster_store.check([HOUSEHOLD], user, home, T0 + 1, far_deadline())
    assert counted == CountOutcome.COUNTED and result.capped[HOUSEHOLD] == T0 + DAY_S * 1000


@pytest.mark.asyncio
async def test_reserve_and_release_run_on_the_cluster(cluster_store: FcapStore) -> None:
    strict = one_subject(
        cap("campaign", "fixed", DAY_S, 1), cap("household", "fixed", DAY_S, 1),
        policy=CapPolicy(count_on="bid"),
    )  # fmt: skip
    user, home = new_user(), "h:4:" + new_user()
    first = await cluster_store.check([strict], user, home, T0, far_deadline())
    await cluster_store.release(first.reservations[strict])
    again = await cluster_store.check([strict], user, home, T0 + 1, far_deadline())
    assert strict in again.reservations


async def _one_user(store: FcapStore, n: int, subjects: list[Subject]) -> bool:
    user = f"b:cluster-run-{n}"
    await store.count(f"imp-{n}", subjects[n % 10], "win", user, None, T0, T0)
    result = await store.check(subjects, user, None, T0 + 1, far_deadline())
    return list(result.capped) == [] and len(subjects) == 10


@pytest.mark.asyncio
async def test_10k_users_run_without_a_redirect(
    cluster: LocalValkeyCluster, cluster_store: FcapStore
) -> None:
    before = _redirects(cluster)
    ok = 0
    for start in range(0, 10_000, 200):
        batch = [_one_user(cluster_store, n, SUBJECTS) for n in range(start, start + 200)]
        ok += sum(await asyncio.gather(*batch))
    sizes = []
    for node in cluster.nodes:
        with redis.Redis.from_url(node.url) as client:
            sizes.append(client.dbsize())
    assert (ok, _redirects(cluster) - before) == (10_000, 0)
    assert all(size > 1_000 for size in sizes)  # the users really are spread over 3 nodes


@pytest.mark.asyncio
async def test_a_slot_missing_from_the_map_is_unavailable_not_an_error(
    cluster_store: FcapStore,
) -> None:
    # A client whose slot map names no node for the user's slot raises
    # SlotNotCoveredError, which is no RedisError. The bid path must see counters
    # unavailable (its fail mode), not an error it does not expect.
    client = cluster_store.client
    assert isinstance(client, RedisCluster)
    slots = client.nodes_manager.slots_cache
    for slot in slots:
        slots[slot] = []
    with pytest.raises(FcapUnavailable):
        await cluster_store.check([HOUSEHOLD], new_user(), None, T0, far_deadline())
