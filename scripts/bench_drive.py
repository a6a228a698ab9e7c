"""What an awaiting bid's event-loop machinery costs: a ``Drive`` against a task.

A bid whose cap check awaits Valkey used to run as an ``asyncio.Task`` with
``asyncio.timeout_at(deadline)`` around its stages; it now runs as a
``bidder.core.later.Drive`` (no task, one timer at the deadline) whose answer is handed
on by ``Later.then``. Both shapes are timed here with the bid path's depth of
coroutines (the stage runner, the cap stage, the capper, the store, the settle of one
reply) awaiting one future that the loop completes in a later callback, as a Valkey
reply does; 32 requests start per loop pass, as under 32 busy connections. Both run on
uvloop in the same process, interleaved over ``--rounds`` rounds of ``--requests``;
CPU time (``time.process_time``) per request, the best round of each. The last line
printed is one JSON object with ``drive_us``, ``task_us`` and ``ratio``.

    .venv/bin/python scripts/bench_drive.py [--requests 50000 --rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable

import orjson
import uvloop

from bidder.core.later import Drive, Later
from bidder.core.tasks import TaskSet

DEADLINE_S = 1.0
"""Far away: nothing times out, only the machinery is timed."""
PER_PASS = 32


async def _settle(reply: asyncio.Future[int]) -> int:
    return await reply


async def _store(reply: asyncio.Future[int]) -> int:
    return await _settle(reply)


async def _capper(reply: asyncio.Future[int]) -> int:
    return await _store(reply)


async def _stage(reply: asyncio.Future[int]) -> int:
    return await _capper(reply)


async def _stages(reply: asyncio.Future[int]) -> int:
    return await _stage(reply)


def _conclude(value: int) -> int:
    return value + 1


async def _as_task_body(reply: asyncio.Future[int], done: Callable[[int], None]) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    async with asyncio.timeout_at(deadline):
        staged = await _stages(reply)
    done(_conclude(staged))


def _as_task(loop: asyncio.AbstractEventLoop, tasks: TaskSet, done: Callable[[int], None]) -> None:
    reply: asyncio.Future[int] = loop.create_future()
    tasks.spawn(_as_task_body(reply, done))
    loop.call_soon(reply.set_result, 1)


def _as_drive(loop: asyncio.AbstractEventLoop, _: TaskSet, done: Callable[[int], None]) -> None:
    reply: asyncio.Future[int] = loop.create_future()
    drive = Drive(_stages(reply), loop, loop.time() + DEADLINE_S)
    answer: Later[int] = drive.then(lambda staged: _conclude(staged.result()))
    answer.add_done_callback(lambda settled: done(settled.result()))
    loop.call_soon(reply.set_result, 1)


Start = Callable[[asyncio.AbstractEventLoop, TaskSet, Callable[[int], None]], None]


async def _time(start: Start, requests: int) -> float:
    loop, tasks, answered, all_answered = (
        asyncio.get_running_loop(),
        TaskSet(),
        [0],
        asyncio.Event(),
    )

    def done(_: int) -> None:
        answered[0] += 1
        if answered[0] == requests:
            all_answered.set()

    began = time.process_time()
    for n in range(requests):
        start(loop, tasks, done)
        if n % PER_PASS == PER_PASS - 1:
            await asyncio.sleep(0)
    await all_answered.wait()
    return (time.process_time() - began) / requests


async def _measure(requests: int, rounds: int) -> dict[str, float]:
    drive: list[float] = []
    task: list[float] = []
    for _ in range(rounds):
        task.append(await _time(_as_task, requests))
        drive.append(await _time(_as_drive, requests))
    best_drive, best_task = min(drive), min(task)
    return {
        "drive_us": round(best_drive * 1e6, 2),
        "task_us": round(best_task * 1e6, 2),
        "ratio": round(best_drive / best_task, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.requests < PER_PASS or args.rounds < 1:
        parser.error(f"--requests must be at least {PER_PASS} and --rounds at least 1")
    figures = uvloop.run(_measure(args.requests, args.rounds))
    print(f"drive {figures['drive_us']} µs, task {figures['task_us']} µs per request")
    print(orjson.dumps({"benchmark": "drive", **figures}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
