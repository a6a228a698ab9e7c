"""What waiting without cancelling costs: ``Waiter.gather`` against ``asyncio.timeout_at``.

The bid path bounds each Valkey call; ``bidder.adapters.valkey_wait.Waiter`` does it by running
the call as a task and waiting until the limit, so a late call is left to finish
instead of cancelled. The baseline is what it replaced: the call awaited directly
inside ``asyncio.timeout_at``. The call is a trivial coroutine that yields to the loop
once (a round trip's shape without the server), so the figures are the mechanism's
own overhead. Both run on uvloop in the same process, interleaved over ``--rounds``
rounds of ``--calls`` calls; the best round of each counts. The last line printed is
one JSON object with ``waiter_us``, ``timeout_at_us`` and ``overhead_ratio``.

    .venv/bin/python scripts/bench_valkey_wait.py [--calls 20000 --rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import orjson
import uvloop

from bidder.adapters.valkey_wait import Waiter

LIMIT_S = 1.0
"""Far away: no call times out, only the waiting is timed."""


async def _call() -> int:
    await asyncio.sleep(0)
    return 1


async def _with_timeout_at(calls: int) -> float:
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    for _ in range(calls):
        async with asyncio.timeout_at(loop.time() + LIMIT_S):
            await _call()
    return (time.perf_counter() - start) / calls


async def _with_waiter(calls: int) -> float:
    loop, waiter = asyncio.get_running_loop(), Waiter()
    start = time.perf_counter()
    for _ in range(calls):
        await waiter.gather([_call()], loop.time() + LIMIT_S)
    return (time.perf_counter() - start) / calls


async def _measure(calls: int, rounds: int) -> dict[str, float]:
    baseline, waiter = [], []
    for _ in range(rounds):
        baseline.append(await _with_timeout_at(calls))
        waiter.append(await _with_waiter(calls))
    return {
        "waiter_us": round(min(waiter) * 1e6, 2),
        "timeout_at_us": round(min(baseline) * 1e6, 2),
        "overhead_ratio": round(min(waiter) / min(baseline), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    figures = uvloop.run(_measure(args.calls, args.rounds))
    print(orjson.dumps({"benchmark": "valkey_wait", **figures}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
