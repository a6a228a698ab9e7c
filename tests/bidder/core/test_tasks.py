"""``bidder.core.tasks.TaskSet``: tasks kept while they run, dropped when they end."""

from __future__ import annotations

import asyncio

import pytest

from bidder.core.tasks import TaskSet, cancel_and_wait

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


async def test_cancel_and_wait_ends_a_loop_that_absorbed_its_first_cancel() -> None:
    absorbed = []

    async def loop() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if absorbed:
                    raise
                absorbed.append(True)  # as a dropped cancellation leaves a job: looping

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert absorbed == [True] and task.cancelled()


async def test_cancel_and_wait_raises_the_tasks_own_failure() -> None:
    async def fail_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("closing failed") from None

    task = asyncio.create_task(fail_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="closing failed"):
        await cancel_and_wait(task)


async def test_cancel_and_wait_on_a_finished_task_returns_at_once() -> None:
    task = asyncio.create_task(asyncio.sleep(0, "done"))
    await task
    await cancel_and_wait(task)
    assert task.result() == "done"
