"""``bidder.core.tasks.TaskSet``: tasks kept while they run, dropped when they end."""

from __future__ import annotations

import asyncio

import pytest

from bidder.core.tasks import TaskSet

pytestmark = pytest.mark.asyncio


async def test_a_spawned_task_is_kept_until_it_ends() -> None:
    tasks, gate = TaskSet(), asyncio.Event()
    task = tasks.spawn(gate.wait())
    await asyncio.sleep(0)
    assert list(tasks) == [task]
    gate.set()
    await task
    assert len(tasks) == 0


async def test_a_failed_or_cancelled_task_leaves_the_set() -> None:
    tasks = TaskSet()

    async def fail() -> None:
        raise RuntimeError("boom")

    failed = tasks.spawn(fail())
    cancelled = tasks.spawn(asyncio.Event().wait())
    cancelled.cancel()
    await asyncio.gather(failed, cancelled, return_exceptions=True)
    assert len(tasks) == 0


async def test_drain_waits_for_tasks_spawned_while_draining() -> None:
    tasks, finished = TaskSet(), []

    async def second() -> None:
        finished.append("second")

    async def first() -> None:
        await asyncio.sleep(0)
        tasks.spawn(second())
        finished.append("first")

    tasks.spawn(first())
    await tasks.drain()
    assert (finished, len(tasks)) == (["first", "second"], 0)


async def test_keep_holds_a_task_started_elsewhere() -> None:
    tasks, gate = TaskSet(), asyncio.Event()
    task = asyncio.get_running_loop().create_task(gate.wait())
    assert tasks.keep(task) is task and len(tasks) == 1
    gate.set()
    await tasks.drain()
    assert len(tasks) == 0
