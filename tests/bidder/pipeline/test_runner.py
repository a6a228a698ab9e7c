"""bidder.pipeline.runner: pure stages answer at once, a stage's future continues the
rest from its callback with no task, and any other awaitable runs the rest in a task
bounded by the deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import orjson
import pytest

from bidder.core.deadlines import TaskDeadlines
from bidder.core.futures import Later
from bidder.core.nobid import NoBid
from bidder.openrtb.request import parse_bid_request
from bidder.pipeline.runner import Context, Stage, StageResult, run_stages
from bidder.pipeline.stage_times import StageTimes

pytestmark = [pytest.mark.pure, pytest.mark.asyncio]


def _ctx() -> Context:
    doc = {"id": "r", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}]}
    request = parse_bid_request(orjson.dumps(doc))
    return Context(request=request, ssp="ssp-a", received=0.0, times=StageTimes())


class Pure:
    """A stage that answers at once, noting whether it ran in a task."""

    def __init__(self, answer: StageResult = None) -> None:
        self.answer = answer
        self.in_task: list[bool] = []

    def __call__(self, ctx: Context, deadline: float) -> StageResult:
        self.in_task.append(asyncio.current_task() is not None)
        return self.answer


class Waits:
    """A stage whose answer comes later: once ``future`` is settled by the test, or from
    a coroutine that sleeps ``sleep_s``."""

    def __init__(self, future: asyncio.Future[StageResult] | None = None, sleep_s: float = 0):
        self.future = future
        self.sleep_s = sleep_s

    def __call__(self, ctx: Context, deadline: float) -> Awaitable[StageResult]:
        return Later.of(self.future) if self.future is not None else self._sleep()

    async def _sleep(self) -> StageResult:
        await asyncio.sleep(self.sleep_s)
        return None


def _names(ctx: Context) -> list[str]:
    assert ctx.times is not None
    return [name for name, _ in ctx.times.spans]


async def test_pure_stages_answer_at_once_and_the_first_no_bid_ends_the_run() -> None:
    first, second, third = Pure(), Pure(NoBid.CAPPED), Pure()
    ctx = _ctx()
    result = run_stages([first, second, third], ctx, _far(), TaskDeadlines())
    assert result is NoBid.CAPPED
    assert (first.in_task, second.in_task, third.in_task) == ([True], [True], [])
    assert _names(ctx) == ["Pure", "Pure"]


async def test_a_stages_future_runs_the_rest_from_its_callback_with_no_task() -> None:
    reply: asyncio.Future[StageResult] = asyncio.get_running_loop().create_future()
    after = Pure()
    ctx = _ctx()
    result = run_stages([Pure(), Waits(reply), after], ctx, _far(), TaskDeadlines())
    assert isinstance(result, Later)
    assert after.in_task == []  # nothing runs before the reply
    reply.set_result(None)
    assert await result is None
    assert after.in_task == [False]
    assert _names(ctx) == ["Pure", "Waits", "Pure"]


async def test_a_future_that_says_no_ends_the_run_and_one_that_fails_fails_it() -> None:
    loop = asyncio.get_running_loop()
    capped: asyncio.Future[StageResult] = loop.create_future()
    after = Pure()
    said_no = run_stages([Waits(capped), after], _ctx(), _far(), TaskDeadlines())
    capped.set_result(NoBid.CAPPED)
    assert await said_no is NoBid.CAPPED  # type: ignore[misc]
    assert after.in_task == []

    broken: asyncio.Future[StageResult] = loop.create_future()
    failed = run_stages([Waits(broken), Pure()], _ctx(), _far(), TaskDeadlines())
    broken.set_exception(RuntimeError("a bug in a stage"))
    with pytest.raises(RuntimeError, match="a bug in a stage"):
        await failed  # type: ignore[misc]


async def test_after_a_future_a_stage_that_awaits_runs_the_rest_in_a_task_in_time() -> None:
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[StageResult] = loop.create_future()
    after = Pure()
    bounds = TaskDeadlines()
    stages: list[Stage] = [Waits(reply), Waits(sleep_s=0), after]
    result = run_stages(stages, _ctx(), _far(), bounds)
    reply.set_result(None)
    assert await result is None  # type: ignore[misc]
    assert after.in_task == [True]

    late: asyncio.Future[StageResult] = loop.create_future()
    slow = run_stages([Waits(late), Waits(sleep_s=5)], _ctx(), loop.time() + 0.05, bounds)
    late.set_result(None)
    with pytest.raises(TimeoutError):
        await slow  # type: ignore[misc]


async def test_past_the_deadline_the_stages_after_a_future_do_not_run() -> None:
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[StageResult] = loop.create_future()
    after = Pure()
    result = run_stages([Waits(reply), after], _ctx(), loop.time() - 0.001, TaskDeadlines())
    reply.set_result(None)
    assert await result is NoBid.DEADLINE  # type: ignore[misc]
    assert after.in_task == []


def _far() -> float:
    return asyncio.get_running_loop().time() + 60
