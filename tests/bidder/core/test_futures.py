"""bidder.core.futures: a step runs from its source's done-callback, with no task."""

from __future__ import annotations

import asyncio

import pytest

from bidder.core.futures import future_of, then, when_all

pytestmark = [pytest.mark.pure, pytest.mark.asyncio]


async def test_a_step_runs_from_the_callback_with_the_sources_result_and_no_task() -> None:
    source: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    seen: list[object] = []

    def step(done: asyncio.Future[int]) -> int:
        seen.append(asyncio.current_task())
        return done.result() + 1

    out = then(source, step)
    source.set_result(41)
    assert await out == 42
    assert seen == [None]


async def test_a_failed_source_reaches_the_step_and_a_step_that_raises_fails_the_result() -> None:
    source: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    out = then(source, lambda done: done.result())
    source.set_exception(ValueError("no reply"))
    with pytest.raises(ValueError, match="no reply"):
        await out


async def test_a_cancelled_source_cancels_the_result() -> None:
    source: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    out = then(source, lambda done: done.result())
    source.cancel()
    with pytest.raises(asyncio.CancelledError):
        await out
    assert out.cancelled()


async def test_a_step_may_go_on_waiting_on_a_future_or_in_a_task() -> None:
    loop = asyncio.get_running_loop()
    source: asyncio.Future[int] = loop.create_future()
    later: asyncio.Future[int] = loop.create_future()
    followed = then(source, lambda _: later)

    async def in_a_task(n: int) -> tuple[int, bool]:
        await asyncio.sleep(0)
        return n, asyncio.current_task() is not None

    tasked = then(source, lambda done: in_a_task(done.result()))
    source.set_result(7)
    assert await tasked == (7, True)
    assert not followed.done()  # it follows ``later``, still pending
    later.set_result(8)
    assert await followed == 8


async def test_when_all_is_done_once_every_future_is_whichever_way_it_ends() -> None:
    loop = asyncio.get_running_loop()
    one: asyncio.Future[int] = loop.create_future()
    assert when_all([one]) is one
    a, b = loop.create_future(), loop.create_future()
    both = when_all([a, b])
    a.set_exception(OSError("reset"))
    await asyncio.sleep(0)
    assert not both.done()
    b.set_result(1)
    await both
    a.exception()  # read: this test's own future failed on purpose


async def test_future_of_runs_a_coroutine_as_a_task_and_passes_a_future_through() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    assert future_of(future) is future

    async def three() -> int:
        return 3

    assert await future_of(three()) == 3
