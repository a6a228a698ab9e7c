"""bidder.core.futures: composed steps run in the source's one done-callback, with no
task and no loop pass between them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bidder.core.futures import Later, Outcome, when_all

pytestmark = [pytest.mark.pure, pytest.mark.asyncio]


def _outcome_of(later: Later[Any]) -> asyncio.Future[Any]:
    """A future of ``later``'s outcome, for the test to await."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def settle(outcome: Outcome[Any]) -> None:
        try:
            future.set_result(outcome.result())
        except BaseException as exc:
            future.set_exception(exc)

    later.on_done(settle)
    return future


async def test_composed_steps_run_in_one_callback_with_no_task_and_no_pass_between() -> None:
    loop = asyncio.get_running_loop()
    source: asyncio.Future[int] = loop.create_future()
    seen: list[tuple[object, int]] = []
    passes = 0

    def tick() -> None:
        nonlocal passes
        passes += 1
        loop.call_soon(tick)

    def step(outcome: Outcome[int]) -> int:
        seen.append((asyncio.current_task(), passes))
        return outcome.result() + 1

    answer = _outcome_of(Later(source, step).then(step).then(step))
    source.set_result(1)
    loop.call_soon(tick)
    assert await answer == 4
    assert [task for task, _ in seen] == [None, None, None]
    assert len({at for _, at in seen}) == 1  # all three in the same loop pass


async def test_a_failure_reaches_the_next_steps_and_the_end() -> None:
    source: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def boom(outcome: Outcome[int]) -> int:
        raise ValueError(f"bad {outcome.result()}")

    def kept(outcome: Outcome[int]) -> int:
        return outcome.result()

    answer = _outcome_of(Later(source, boom).then(kept))
    source.set_result(3)
    with pytest.raises(ValueError, match="bad 3"):
        await answer


async def test_a_step_may_wait_again_on_another_later_or_in_a_task() -> None:
    loop = asyncio.get_running_loop()
    source: asyncio.Future[int] = loop.create_future()
    second: asyncio.Future[int] = loop.create_future()

    async def in_a_task(n: int) -> tuple[int, bool]:
        await asyncio.sleep(0)
        return n, asyncio.current_task() is not None

    def plus(outcome: Outcome[int]) -> int:
        return outcome.result() + 100

    waits = _outcome_of(Later(source, lambda o: Later.of(second)).then(plus))
    tasked = _outcome_of(Later(source, lambda o: in_a_task(o.result())))
    source.set_result(7)
    assert await tasked == (7, True)
    await asyncio.sleep(0)
    assert not waits.done()  # it goes on from ``second``, still pending
    second.set_result(8)
    assert await waits == 108


async def test_a_later_can_be_awaited_from_a_task() -> None:
    source: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(source.set_result, 5)
    assert await Later.of(source).then(lambda o: o.result() * 2) == 10


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
