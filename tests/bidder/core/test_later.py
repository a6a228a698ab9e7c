"""``bidder.core.later``: results handed on at once, coroutines driven without a task."""

from __future__ import annotations

import asyncio

import pytest

from bidder.core.later import Drive, Later


def test_callbacks_run_in_the_call_that_settles() -> None:
    later: Later[int] = Later()
    seen: list[int] = []
    later.add_done_callback(lambda done: seen.append(done.result()))
    assert seen == [] and not later.done()
    later.settle(7)
    assert seen == [7]
    later.add_done_callback(lambda done: seen.append(done.result() + 1))  # settled: at once
    assert seen == [7, 8]


def test_then_maps_values_and_failures() -> None:
    later: Later[int] = Later()
    doubled = later.then(lambda done: done.result() * 2)
    failed = later.then(lambda done: 1 // (done.result() - 3))
    later.settle(3)
    assert doubled.result() == 6
    with pytest.raises(ZeroDivisionError):
        failed.result()


def test_a_failure_is_raised_by_result_and_a_later_settles_once() -> None:
    later: Later[int] = Later()
    with pytest.raises(RuntimeError, match="before it was settled"):
        later.result()
    later.fail(KeyError("k"))
    with pytest.raises(KeyError):
        later.result()
    with pytest.raises(RuntimeError, match="settled once"):
        later.settle(1)


@pytest.mark.asyncio
async def test_a_drive_runs_its_first_step_at_once_and_the_rest_on_its_futures() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    steps: list[str] = []

    async def job() -> int:
        steps.append("first")
        value = await future
        steps.append("second")
        return value + 1

    drive = Drive(job(), loop)
    assert steps == ["first"] and not drive.done()
    assert asyncio.current_task() is not None  # the test's own task, not the drive's
    future.set_result(41)
    assert await drive == 42
    assert steps == ["first", "second"]


@pytest.mark.asyncio
async def test_a_coroutine_that_never_awaits_settles_in_the_constructor() -> None:
    async def at_once() -> str:
        return "now"

    assert Drive(at_once(), asyncio.get_running_loop()).result() == "now"


@pytest.mark.asyncio
async def test_at_the_deadline_the_awaited_future_is_cancelled_and_the_drive_times_out() -> None:
    loop = asyncio.get_running_loop()
    never: asyncio.Future[None] = loop.create_future()
    seen: list[str] = []

    async def stalled() -> None:
        try:
            await never
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    drive = Drive(stalled(), loop, deadline=loop.time() + 0.01)
    with pytest.raises(TimeoutError):
        await drive
    assert seen == ["cancelled"] and never.cancelled()


@pytest.mark.asyncio
async def test_a_drive_done_before_its_deadline_leaves_no_timer_behind() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()

    async def job() -> int:
        return await future

    drive = Drive(job(), loop, deadline=loop.time() + 0.01)
    future.set_result(5)
    assert await drive == 5
    await asyncio.sleep(0.02)  # past the deadline: nothing is cancelled, nothing fails
    assert drive.result() == 5


@pytest.mark.asyncio
async def test_an_exception_and_a_cancel_from_elsewhere_are_its_failures() -> None:
    loop = asyncio.get_running_loop()

    async def bug() -> None:
        await asyncio.sleep(0)
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        await Drive(bug(), loop, deadline=loop.time() + 10)
    future: asyncio.Future[None] = loop.create_future()

    async def waits() -> None:
        await future

    drive = Drive(waits(), loop, deadline=loop.time() + 10)
    future.cancel()  # not the deadline: the drive is cancelled, not timed out
    with pytest.raises(asyncio.CancelledError):
        await drive


@pytest.mark.asyncio
async def test_awaiting_something_that_is_not_a_future_fails_the_drive() -> None:
    class Odd:
        def __await__(self):  # type: ignore[no-untyped-def]
            yield "not a future"

    async def odd() -> None:
        await Odd()

    with pytest.raises(RuntimeError, match="not a future"):
        Drive(odd(), asyncio.get_running_loop()).result()
