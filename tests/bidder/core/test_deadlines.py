"""Many instants on one timer: items expire in the order of their instants, finished
ones never do, and a bounded block of a task ends as ``asyncio.timeout_at``'s would."""

from __future__ import annotations

import asyncio

import pytest

from bidder.core.deadlines import Deadlines, TaskDeadlines


def _in(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


class Item:
    def __init__(self, name: str) -> None:
        self.name = name
        self.finished = False


@pytest.mark.asyncio
async def test_items_expire_in_the_order_of_their_instants_and_finished_ones_never() -> None:
    expired: list[str] = []
    fired = 0

    def after() -> None:
        nonlocal fired
        fired += 1

    deadlines: Deadlines[Item] = Deadlines(
        lambda item: expired.append(item.name), lambda item: item.finished, after_fire=after
    )
    late, early, done, never = Item("late"), Item("early"), Item("done"), Item("never")
    deadlines.add(_in(0.03), late)
    deadlines.add(_in(0.01), early)  # earlier than the armed instant: the timer moves
    deadlines.add(_in(0.02), done)
    deadlines.add(_in(60.0), never)
    done.finished = True
    await asyncio.sleep(0.05)
    assert expired == ["early", "late"]
    assert fired >= 1
    assert len(deadlines) == 1  # only the item not yet due is held
    deadlines.clear()
    assert len(deadlines) == 0


@pytest.mark.asyncio
async def test_finished_items_are_dropped_when_they_reach_the_top() -> None:
    expired: list[str] = []
    deadlines: Deadlines[Item] = Deadlines(
        lambda item: expired.append(item.name), lambda item: item.finished
    )
    items = [Item(str(n)) for n in range(50)]
    for n, item in enumerate(items):
        deadlines.add(_in(0.01 + n / 10_000), item)
        item.finished = n != 49
    await asyncio.sleep(0.05)
    assert expired == ["49"]
    assert len(deadlines) == 0


@pytest.mark.asyncio
async def test_a_block_still_waiting_at_its_instant_raises_timeout_error() -> None:
    bounds = TaskDeadlines()
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError), bounds.until(_in(0.01)):
        await never
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the cut was taken back


@pytest.mark.asyncio
async def test_an_instant_already_passed_cuts_at_the_first_wait() -> None:
    bounds = TaskDeadlines()
    reached = False
    with pytest.raises(TimeoutError), bounds.until(_in(-1.0)):
        reached = True
        await asyncio.sleep(1.0)
    assert reached


@pytest.mark.asyncio
async def test_a_block_done_in_time_leaves_the_task_alone_after_its_instant() -> None:
    bounds = TaskDeadlines()
    with bounds.until(_in(0.01)):
        await asyncio.sleep(0)
    await asyncio.sleep(0.03)  # past the instant: no cancel arrives here
    assert len(bounds) == 0


@pytest.mark.asyncio
async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    bounds = TaskDeadlines()
    entered = asyncio.Event()

    async def bounded() -> None:
        with bounds.until(_in(60.0)):
            entered.set()
            await asyncio.sleep(60.0)

    task = asyncio.create_task(bounded())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


@pytest.mark.asyncio
async def test_many_tasks_each_end_by_their_own_instant() -> None:
    bounds = TaskDeadlines()
    release = asyncio.Event()

    async def bounded(seconds: float) -> str:
        try:
            with bounds.until(_in(seconds)):
                await release.wait()
                return "answered"
        except TimeoutError:
            return "cut"

    tasks = [asyncio.create_task(bounded(s)) for s in (0.01, 0.02, 60.0, 60.0)]
    await asyncio.sleep(0.05)
    release.set()
    assert await asyncio.gather(*tasks) == ["cut", "cut", "answered", "answered"]


def test_a_bound_needs_a_task() -> None:
    with pytest.raises(RuntimeError, match="running"):
        TaskDeadlines().until(0.0)
