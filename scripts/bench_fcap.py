"""fcap benchmark: memory per counter against the naive schema, and check speed
against single GET round trips, same client, same server, same run.

Workload (``../shared/BENCHMARKS.md``): ``--users`` users (default 100,000) x 10
campaigns with a day cap each, so 10 live day counters per user.

1. memory: two fresh Valkey servers. Ours is loaded through check.lua itself (the
   campaigns reserve at bid, so each check writes the user's 10 counters in the real
   encoding: one hash per user, no dedup marks); the naive schema
   ``freq:{user}:{campaign}:{day}`` with INCR + EXPIRE, pipelined. Bytes per counter
   = the ``INFO memory`` used_memory delta / counters.
2. speed: one request in flight (a round trip each). Each round: ``--ops``
   10-campaign checks (``FcapStore.check``) of random loaded users through the
   auto-pipelined connection a worker on one server uses (``bidder.adapters.valkey_pipelined``),
   then ``--ops`` single GETs (``client.get``: redis-py's ordinary path), then the
   same checks again through a store without that connection (``execute_command``
   and ``bidder.adapters.valkey_wait``, a Cluster's path: the ``plain_check_*`` reference).
   Medians over ``--rounds``; ``check_ratio`` = median check rate / median GET rate.

The last line printed is one JSON object.

    .venv/bin/python scripts/bench_fcap.py [--users 100000 --rounds 5 --ops 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bidder.adapters.valkey import connect_pipelined, connect_sync
from bidder.core.campaigns import Campaign, CapPolicy, Creative, FrequencyCap
from bidder.stack.child import free_port
from bidder.stack.cluster import ValkeyNode
from fcap.rules import Subject, subject_for
from fcap.store import FcapStore, connect

CAMPAIGNS = 10
DAY_MS = 86_400_000
NOW_MS = 1_767_225_600_000 + 12 * 3_600_000
CONCURRENCY = 64
READ_TIMEOUT_S = 5.0
"""Per blocking call of the memory read and the naive loader: a server that stopped
answering ends the run with an error instead of hanging it."""


def _subjects(count_on: str) -> list[Subject]:
    creative = Creative(id="cr", format="banner", markup="<b/>", adomain=("a.com",), w=1, h=1)
    return [
        subject_for(
            Campaign(
                id=f"campaign-{n:04d}", advertiser=f"adv-{n}", daily_budget_micros=1,
                base_bid_cpm_micros=1, max_bid_cpm_micros=1, creatives=(creative,),
                frequency_caps=(FrequencyCap("campaign", "fixed", 86_400, 1_000),),
                cap_policy=CapPolicy(count_on=count_on),
            ),
            "cr",
        )
        for n in range(CAMPAIGNS)
    ]  # fmt: skip


def _used_memory(url: str) -> int:
    with connect_sync(url, timeout_s=READ_TIMEOUT_S) as client:
        used: int = client.info("memory")["used_memory"]
        return used


async def load_ours(url: str, users: list[str]) -> None:
    store = FcapStore(connect(url), check_timeout_s=5.0)
    await store.start()
    reserving = _subjects("bid")
    queue = iter(users)

    async def worker() -> None:
        for user in queue:
            deadline = asyncio.get_running_loop().time() + 5.0
            await store.check(reserving, user, None, NOW_MS, deadline)

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    await store.client.aclose()


def load_naive(url: str, users: list[str]) -> None:
    day = NOW_MS // DAY_MS
    with connect_sync(url, timeout_s=READ_TIMEOUT_S) as client:
        for start in range(0, len(users), 1_000):
            pipe = client.pipeline(transaction=False)
            for user in users[start : start + 1_000]:
                for n in range(CAMPAIGNS):
                    key = f"freq:{{{user}}}:campaign-{n:04d}:{day}"
                    pipe.incr(key)
                    pipe.expire(key, 86_400 + 120)
            pipe.execute()


async def speed(url: str, users: list[str], rounds: int, ops: int) -> dict[str, Any]:
    client = connect(url, socket_timeout_s=5.0)
    pipelined = connect_pipelined(url, connect_timeout_s=5.0)
    await pipelined.connect()
    store = FcapStore(client, pipelined=pipelined, check_timeout_s=5.0)
    # The reference: the same check with its read sent through redis-py.
    plain = FcapStore(client, check_timeout_s=5.0)
    await store.start()
    await client.set("bench:get", "1")
    checking = _subjects("win")
    loop = asyncio.get_running_loop()
    rates: dict[str, list[float]] = {"check": [], "get": [], "plain": []}
    for _ in range(rounds):
        picks = random.choices(users, k=ops)
        started = time.perf_counter()
        for user in picks:
            await store.check(checking, user, None, NOW_MS, loop.time() + 5.0)
        rates["check"].append(ops / (time.perf_counter() - started))
        started = time.perf_counter()
        for _ in range(ops):
            await client.get("bench:get")
        rates["get"].append(ops / (time.perf_counter() - started))
        started = time.perf_counter()
        for user in picks:
            await plain.check(checking, user, None, NOW_MS, loop.time() + 5.0)
        rates["plain"].append(ops / (time.perf_counter() - started))
    for each in (store, plain):
        result = await each.check(checking, users[0], None, NOW_MS, loop.time() + 5.0)
        if result.capped:
            raise SystemExit("bench: a loaded user is capped; the workload is wrong")
    await pipelined.aclose()
    await client.aclose()
    return {
        "check_rate": round(statistics.median(rates["check"])),
        "get_rate": round(statistics.median(rates["get"])),
        "plain_check_rate": round(statistics.median(rates["plain"])),
        "check_rates": [round(r) for r in rates["check"]],
        "get_rates": [round(r) for r in rates["get"]],
        "plain_check_rates": [round(r) for r in rates["plain"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=5_000)
    args = parser.parse_args(argv)
    if args.users < 1 or args.rounds < 1 or args.ops < 1:
        parser.error("--users, --rounds and --ops must be at least 1")
    users = [f"b:{uuid.uuid4().hex}" for _ in range(args.users)]
    counters = args.users * CAMPAIGNS
    with tempfile.TemporaryDirectory(prefix="bench-fcap-") as workdir:
        ours, naive = ValkeyNode(Path(workdir), free_port()), ValkeyNode(Path(workdir), free_port())
        try:
            ours.start()
            naive.start()
            base = _used_memory(ours.url), _used_memory(naive.url)
            uvloop.run(load_ours(ours.url, users))
            load_naive(naive.url, users)
            ours_b = (_used_memory(ours.url) - base[0]) / counters
            naive_b = (_used_memory(naive.url) - base[1]) / counters
            print(f"memory: ours {ours_b:.1f} B/counter, naive {naive_b:.1f} B/counter")
            rates = uvloop.run(speed(ours.url, users, args.rounds, args.ops))
            print(
                f"speed: checks/s {rates['check_rates']}, GETs/s {rates['get_rates']}, "
                f"plain checks/s {rates['plain_check_rates']}"
            )
        finally:
            ours.stop()
            naive.stop()
    line = {
        "bench": "fcap",
        "users": args.users,
        "counters": counters,
        "bytes_per_counter": round(ours_b, 1),
        "naive_bytes_per_counter": round(naive_b, 1),
        "memory_ratio": round(naive_b / ours_b, 2),
        "check_ratio": round(rates["check_rate"] / rates["get_rate"], 3),
        "plain_check_ratio": round(rates["plain_check_rate"] / rates["get_rate"], 3),
        **rates,
        "campaigns_per_check": CAMPAIGNS,
        "rounds": args.rounds,
        "ops_per_round": args.ops,
    }
    print(orjson.dumps(line).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
