"""Regional counters on real Valkey servers: own slots, merged reads, replication."""

from __future__ import annotations

import random

import pytest
from redis.asyncio import Redis

from bidder.core.campaigns import CapPolicy
from bidder.core.clock import ManualClock
from fcap import keys, regions
from fcap.regional import RegionalFcapStore
from fcap.replicate import Link, Replicator, mesh
from fcap.rules import Subject
from fcap.store import CountOutcome
from tests.fcap.support import DAY_S, HOUR_S, T0, cap, far_deadline, new_user, one_subject

pytestmark = pytest.mark.asyncio
DAY_CAP_3 = one_subject(cap("campaign", "fixed", DAY_S, 3))


async def _stores(
    clients: dict[str, Redis], home_reads: bool = False
) -> dict[str, RegionalFcapStore]:
    stores = {
        name: RegionalFcapStore(
            clients, name, home_reads=home_reads, check_timeout_s=2.0, write_timeout_s=2.0
        )
        for name in clients
    }
    for store in stores.values():
        await store.start()
    return stores


def _mesh(clients: dict[str, Redis], link: Link | None = None) -> list[Replicator]:
    return mesh(clients, link or Link(), clock=ManualClock(), seed=1)


async def _capped(store: RegionalFcapStore, subject: Subject, user: str) -> bool:
    result = await store.check([subject], user, None, T0 + 10, far_deadline())
    return subject in result.capped


async def _merged_count(client: Redis, user: str) -> int:
    raw = await client.hgetall(keys.counters(keys.USER, user))
    slots = {k.decode(): int(v) for k, v in raw.items()}
    fields = {regions.split_slot(name)[0] for name in slots}  # type: ignore[index]
    return sum(regions.read(slots, field, slots_regions(slots)) for field in fields)


def slots_regions(slots: dict[str, int]) -> set[str]:
    return {regions.split_slot(name)[1] for name in slots}  # type: ignore[index]


async def test_a_count_writes_only_the_counting_regions_slot(
    region_clients: dict[str, Redis],
) -> None:
    stores, user = await _stores(region_clients), new_user()
    await stores["eu"].count("i1", DAY_CAP_3, "win", user, None, T0, T0)
    raw = await region_clients["eu"].hgetall(keys.counters(keys.USER, user))
    assert [regions.split_slot(k.decode())[1] for k in raw] == ["eu"]  # type: ignore[index]
    assert not await region_clients["us"].exists(keys.counters(keys.USER, user))


async def test_a_check_reads_the_sum_of_the_regions_it_has_heard_from(
    region_clients: dict[str, Redis],
) -> None:
    stores, user = await _stores(region_clients), new_user()
    for n, region in enumerate(("eu", "us", "ap")):
        await stores[region].count(f"i{n}", DAY_CAP_3, "win", user, None, T0, T0)
    assert not await _capped(stores["eu"], DAY_CAP_3, user)  # eu sees only its own 1
    for replicator in _mesh(region_clients):
        await replicator.catch_up()
    assert [await _capped(stores[r], DAY_CAP_3, user) for r in ("eu", "us", "ap")] == [True] * 3


async def test_replication_loses_nothing_and_counts_nothing_twice(
    region_clients: dict[str, Redis],
) -> None:
    stores, users = await _stores(region_clients), [new_user() for _ in range(5)]
    rnd, billed = random.Random(7), dict.fromkeys(users, 0)
    many = one_subject(
        cap("campaign", "fixed", DAY_S, 1000), cap("campaign", "fixed", HOUR_S, 1000)
    )
    for n in range(200):
        user, region = rnd.choice(users), rnd.choice(("eu", "us", "ap"))
        outcome = await stores[region].count(f"i{n}", many, "win", user, None, T0 + n, T0 + n)
        billed[user] += outcome == CountOutcome.COUNTED
    lossy = _mesh(region_clients, Link(loss=0.3, retry_s=0.001))
    for replicator in lossy:
        await replicator.catch_up()
    for replicator in lossy:  # every change applied again: nothing moves
        replicator.cursor = "0-0"
        await replicator.catch_up()
    for region in ("eu", "us", "ap"):
        counts = {u: await _merged_count(region_clients[region], u) for u in users}
        assert counts == {u: 2 * n for u, n in billed.items()}  # two windows per impression
    assert sum(r.lost for r in lossy) > 0


async def test_a_partition_heals_into_the_same_counts_everywhere(
    region_clients: dict[str, Redis],
) -> None:
    stores, user = await _stores(region_clients), new_user()
    links = _mesh(region_clients)
    for replicator in links:
        replicator.partition()
    for n in range(6):
        region = ("eu", "us")[n % 2]
        await stores[region].count(f"i{n}", DAY_CAP_3, "win", user, None, T0 + n, T0 + n)
    for replicator in links:
        await replicator.step()
        assert replicator.applied == 0
    assert [await _merged_count(region_clients[r], user) for r in ("eu", "us", "ap")] == [3, 3, 0]
    for replicator in links:
        replicator.heal()
        await replicator.catch_up()
    assert [await _merged_count(region_clients[r], user) for r in ("eu", "us", "ap")] == [6, 6, 6]


async def test_the_lag_is_the_age_of_the_oldest_change_not_applied(
    region_clients: dict[str, Redis],
) -> None:
    stores, user, clock = await _stores(region_clients), new_user(), ManualClock()
    link = Link(lag_alert_s=2.0)
    eu_to_us = Replicator(region_clients["eu"], region_clients["us"], "eu", "us", link, clock=clock)
    eu_to_us.partition()
    await stores["eu"].count("i1", DAY_CAP_3, "win", user, None, T0, T0)
    clock.advance(3.5)
    await eu_to_us.step()
    assert eu_to_us.lag_s == 3.5
    eu_to_us.heal()
    await eu_to_us.catch_up()
    assert eu_to_us.lag_s == 0.0


async def test_a_log_trimmed_past_the_cursor_is_made_good_by_a_full_copy(
    region_clients: dict[str, Redis],
) -> None:
    stores, user = await _stores(region_clients), new_user()
    eu_to_us = Replicator(
        region_clients["eu"], region_clients["us"], "eu", "us", clock=ManualClock()
    )
    for n in range(3):
        await stores["eu"].count(f"i{n}", DAY_CAP_3, "win", user, None, T0, T0)
    await region_clients["eu"].xtrim(keys.CHANGE_LOG, maxlen=0)
    await eu_to_us.catch_up()
    assert (eu_to_us.resyncs, await _merged_count(region_clients["us"], user)) == (1, 3)


async def test_home_reads_see_every_regions_count_without_replication(
    region_clients: dict[str, Redis],
) -> None:
    stores, user = await _stores(region_clients, home_reads=True), new_user()
    for n, region in enumerate(("eu", "us", "ap")):
        await stores[region].count(f"i{n}", DAY_CAP_3, "win", user, None, T0, T0)
    assert [await _capped(stores[r], DAY_CAP_3, user) for r in ("eu", "us", "ap")] == [True] * 3
    home = regions.home_region(user, ("ap", "eu", "us"))
    others = [r for r in ("ap", "eu", "us") if r != home]
    assert [await region_clients[r].exists(keys.counters(keys.USER, user)) for r in others] == [
        0,
        0,
    ]


async def test_reserve_at_bid_reserves_against_the_merged_count(
    region_clients: dict[str, Redis],
) -> None:
    strict = one_subject(cap("campaign", "fixed", DAY_S, 2), policy=CapPolicy(count_on="bid"))
    stores, user = await _stores(region_clients), new_user()
    first = await stores["eu"].check([strict], user, None, T0, far_deadline())
    for replicator in _mesh(region_clients):
        await replicator.catch_up()
    second = await stores["us"].check([strict], user, None, T0, far_deadline())
    for replicator in _mesh(region_clients):
        await replicator.catch_up()
    third = await stores["ap"].check([strict], user, None, T0, far_deadline())
    assert [strict in r.reservations for r in (first, second, third)] == [True, True, False]
    assert strict in third.capped
