"""ids.worker_lease against the real Valkey server, in virtual time (ManualClock)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from bidder.core.clock import ManualClock, SimTime
from ids.snowflake import LeaseLost, Snowflake, decode
from ids.worker_lease import NoWorkerId, WorkerLease, lease_keys

TTL_MS, MARGIN_MS = 10_000, 2_000


def _lease(
    valkey: aioredis.Redis, namespace: str, clock: ManualClock, **kwargs: object
) -> WorkerLease:
    generator = Snowflake(clock, pause=lambda: clock.advance(0.001))
    return WorkerLease(
        valkey, generator, clock, namespace=namespace, ttl_ms=TTL_MS, margin_ms=MARGIN_MS,
        **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def _generator(lease: WorkerLease) -> Snowflake:
    return lease._generator


@pytest.mark.asyncio
async def test_live_leases_get_different_worker_ids(valkey: aioredis.Redis, namespace: str) -> None:
    clock = ManualClock()
    workers = [await _lease(valkey, namespace, clock).acquire() for _ in range(5)]
    assert workers == [0, 1, 2, 3, 4]


@pytest.mark.asyncio
async def test_an_acquired_lease_lets_the_generator_issue_ids(
    valkey: aioredis.Redis, namespace: str
) -> None:
    lease = _lease(valkey, namespace, ManualClock())
    worker = await lease.acquire()
    assert decode(_generator(lease).next_id()).worker == worker


@pytest.mark.asyncio
async def test_without_renewal_ids_stop_before_the_lease_expires(
    valkey: aioredis.Redis, namespace: str
) -> None:
    clock = ManualClock()
    lease = _lease(valkey, namespace, clock)
    await lease.acquire()
    clock.advance((TTL_MS - MARGIN_MS) / 1000)
    with pytest.raises(LeaseLost):
        _generator(lease).next_id()


@pytest.mark.asyncio
async def test_renewal_keeps_ids_flowing(valkey: aioredis.Redis, namespace: str) -> None:
    clock = ManualClock()
    lease = _lease(valkey, namespace, clock)
    await lease.acquire()
    for _ in range(5):
        clock.advance(lease.renew_interval_s)
        assert await lease.renew()
    assert _generator(lease).next_id() > 0


@pytest.mark.asyncio
async def test_a_renewed_lease_is_not_taken_by_another(
    valkey: aioredis.Redis, namespace: str
) -> None:
    clock = ManualClock()
    first = _lease(valkey, namespace, clock)
    await first.acquire()
    clock.advance(TTL_MS / 1000 - 1)
    await first.renew()
    clock.advance(2)
    assert await _lease(valkey, namespace, clock).acquire() == 1


@pytest.mark.asyncio
async def test_an_expired_lease_is_taken_over(valkey: aioredis.Redis, namespace: str) -> None:
    clock = ManualClock()
    await _lease(valkey, namespace, clock).acquire()
    clock.advance(TTL_MS / 1000)
    assert await _lease(valkey, namespace, clock).acquire() == 0


@pytest.mark.asyncio
async def test_the_old_holder_learns_of_the_takeover_and_stops(
    valkey: aioredis.Redis, namespace: str
) -> None:
    lost: list[bool] = []
    clock = ManualClock()
    old = _lease(valkey, namespace, clock, on_lost=lambda: lost.append(True))
    await old.acquire()
    clock.advance(TTL_MS / 1000)
    await _lease(valkey, namespace, clock).acquire()
    assert (await old.renew(), lost, old.worker) == (False, [True], None)
    with pytest.raises(LeaseLost):
        _generator(old).next_id()


@pytest.mark.asyncio
async def test_a_new_holder_issues_after_every_id_the_old_one_could_issue(
    valkey: aioredis.Redis, namespace: str
) -> None:
    # The old holder's clock runs 5 s ahead: without the high-water mark the new
    # holder would reuse its milliseconds.
    old_clock, new_clock = ManualClock(), ManualClock()
    old_clock.set_wall_ms(new_clock.wall_ms() + 5_000)
    old = _lease(valkey, namespace, old_clock)
    await old.acquire()
    old_clock.advance((TTL_MS - MARGIN_MS) / 1000 - 0.001)
    last_old_id = _generator(old).next_id()
    new_clock.advance(TTL_MS / 1000 + 5)  # past expiry on the new holder's own clock
    new = _lease(valkey, namespace, new_clock)
    assert await new.acquire() == old.worker
    new_clock.set_wall_ms(decode(last_old_id).time_ms + 1)
    assert _generator(new).next_id() > last_old_id


@pytest.mark.asyncio
async def test_release_gives_the_worker_id_back(valkey: aioredis.Redis, namespace: str) -> None:
    clock = ManualClock()
    first = _lease(valkey, namespace, clock)
    await first.acquire()
    last_id = _generator(first).next_id()
    await first.release()
    second = _lease(valkey, namespace, clock)
    assert await second.acquire() == 0
    clock.advance(0.001)
    assert _generator(second).next_id() > last_id


@pytest.mark.asyncio
async def test_release_stops_the_generator(valkey: aioredis.Redis, namespace: str) -> None:
    lease = _lease(valkey, namespace, ManualClock())
    await lease.acquire()
    await lease.release()
    with pytest.raises(LeaseLost):
        _generator(lease).next_id()


@pytest.mark.asyncio
async def test_no_free_worker_id_is_an_error(valkey: aioredis.Redis, namespace: str) -> None:
    clock = ManualClock()
    for _ in range(3):
        await _lease(valkey, namespace, clock, worker_ids=3).acquire()
    with pytest.raises(NoWorkerId):
        await _lease(valkey, namespace, clock, worker_ids=3).acquire()


def test_lease_keys_share_one_cluster_slot() -> None:
    keys = lease_keys("bidsim")
    assert key_slot(keys[0].encode()) == key_slot(keys[1].encode())


@pytest.mark.asyncio
async def test_on_a_simulated_clock_a_held_id_is_not_taken_between_real_renewals(
    valkey: aioredis.Redis, namespace: str
) -> None:
    """Renewals come every real third of the ttl; at 72x that is 72x as much wall time."""
    real = ManualClock()
    sim = SimTime(start_ms=1_767_225_600_000, speed=72.0, at_ms=real.wall_ms()).clock(real)
    first = WorkerLease(valkey, Snowflake(sim), sim, namespace=namespace, ttl_ms=TTL_MS,
                        margin_ms=MARGIN_MS)  # fmt: skip
    worker = await first.acquire()
    real.advance(first.renew_interval_s)  # 192 simulated seconds: many real-ttl's worth
    second = WorkerLease(valkey, Snowflake(sim), sim, namespace=namespace, ttl_ms=TTL_MS,
                         margin_ms=MARGIN_MS)  # fmt: skip
    assert await second.acquire() != worker
    assert decode(first._generator.next_id()).worker == worker
