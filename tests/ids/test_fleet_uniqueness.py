"""Acceptance: 4 processes x 1,000,000 ids, each on a leased worker id, no duplicates."""

from __future__ import annotations

import asyncio
import multiprocessing
from array import array
from multiprocessing.synchronize import Barrier

import numpy as np
import redis.asyncio as aioredis

from bidder.core.clock import SystemClock
from ids.snowflake import Snowflake, decode
from ids.worker_lease import WorkerLease

PROCESSES = 4
IDS_PER_PROCESS = 1_000_000


def _generate(
    valkey_url: str,
    namespace: str,
    barrier: Barrier,
    out: multiprocessing.Queue,
) -> None:
    clock = SystemClock()
    generator = Snowflake(clock)

    async def lease() -> WorkerLease:
        client = aioredis.Redis.from_url(valkey_url)
        held = WorkerLease(client, generator, clock, namespace=namespace, ttl_ms=60_000)
        await held.acquire()
        await client.aclose()
        return held

    worker = asyncio.run(lease()).worker
    barrier.wait(30)  # all four generate at the same time, in the same milliseconds
    next_id = generator.next_id
    ids = array("q", (next_id() for _ in range(IDS_PER_PROCESS)))
    out.put((worker, ids.tobytes()))


def _run_fleet(valkey_url: str, namespace: str) -> list[tuple[int, np.ndarray]]:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [
        ctx.Process(target=_generate, args=(valkey_url, namespace, barrier, out))
        for _ in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=90) for _ in procs]
    for proc in procs:
        proc.join(10)
    return [(worker, np.frombuffer(data, dtype=np.int64)) for worker, data in results]


def test_four_processes_issue_four_million_distinct_increasing_ids(
    valkey_url: str, namespace: str
) -> None:
    fleet = _run_fleet(valkey_url, namespace)
    everything = np.concatenate([ids for _, ids in fleet])
    assert len({worker for worker, _ in fleet}) == PROCESSES
    assert len(everything) == PROCESSES * IDS_PER_PROCESS
    assert len(np.unique(everything)) == len(everything)
    for worker, ids in fleet:
        assert bool(np.all(np.diff(ids) > 0)), f"worker {worker} not strictly increasing"
        assert {decode(int(ids[0])).worker, decode(int(ids[-1])).worker} == {worker}
